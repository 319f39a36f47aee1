// pmhash::Open's creation contract (include/pmhash/options.h), over every registered
// engine: creation is explicit, and opening an existing file never formats it unless
// the pool's own header says its creation never finished (src/pm/pool.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "pm/pool.h"
#include "support/harness.h"

namespace pmhash::testing {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::vector<std::string> RegisteredNames() {
  std::vector<std::string> names;
  for (const EngineDescription& e : RegisteredEngines()) names.push_back(e.name);
  return names;
}

class Creation : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "pmhash_creation_" + std::to_string(getpid()) + "_" +
           GtestName(GetParam());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_P(Creation, IsExplicitAndOpeningNeverFormats) {
  const std::string path = dir_ + "/a.pool";
  Options o;
  o.engine = GetParam();
  o.path = path;
  o.pool_size = 8ull << 20;
  std::unique_ptr<Index> index;

  // The default creates nothing: a missing path is NotFound.
  Status s = Open(o, &index);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_NE(s.message().find("does not exist"), std::string::npos) << s.ToString();
  EXPECT_FALSE(fs::exists(path));

  o.create_if_missing = true;
  ASSERT_TRUE(Open(o, &index).ok());
  ASSERT_TRUE(index->Put("kept", "a value that lives in a record").ok());
  ASSERT_TRUE(index->Close().ok());

  // An existing pool opens with the defaults (the engine comes from the pool).
  Options reopen;
  reopen.path = path;
  ASSERT_TRUE(Open(reopen, &index).ok());
  std::string v;
  EXPECT_TRUE(index->Get("kept", &v).ok());
  EXPECT_EQ(v, "a value that lives in a record");
  ASSERT_TRUE(index->Close().ok());

  // Creating only: an existing path is AlreadyExists and untouched.
  const std::string before = ReadFile(path);
  o.error_if_exists = true;
  s = Open(o, &index);
  EXPECT_TRUE(s.IsAlreadyExists()) << s.ToString();
  EXPECT_TRUE(ReadFile(path) == before);

  // A damaged state word is Corruption, never a half-created pool to format.
  std::string bad = before;
  bad[pm::kPoolStateOffset + 3] ^= 0x20;
  WriteFile(path, bad);
  s = Open(reopen, &index);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_TRUE(ReadFile(path) == bad) << "a refused open wrote to the pool";
  WriteFile(path, before);
  ASSERT_TRUE(Open(reopen, &index).ok());
  EXPECT_TRUE(index->Get("kept", &v).ok()) << "the data survived the refused open";
  ASSERT_TRUE(index->Close().ok());
}

// A pool whose file exists but whose engine creation never ran (as after a crash right
// after Pool::Create) says so in its header, and an ordinary open creates the index.
TEST_P(Creation, AHalfCreatedPoolIsCreatedOnOpen) {
  const std::string path = dir_ + "/half.pool";
  {
    std::unique_ptr<pm::Pool> pool;
    ASSERT_TRUE(pm::Pool::Create(path, GetParam(), 8ull << 20, &pool).ok());
  }
  pm::PoolInfo info;
  ASSERT_TRUE(pm::Pool::Inspect(path, &info).ok());
  EXPECT_EQ(info.state, pm::PoolState::kCreating);
  Options o;
  o.path = path;
  std::unique_ptr<Index> index;
  Status s = Open(o, &index);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(index->Count(), 0u);
  EXPECT_TRUE(index->Stats().recovered);
  ASSERT_TRUE(index->Put("k", "v").ok());
  ASSERT_TRUE(index->Close().ok());
  ASSERT_TRUE(pm::Pool::Inspect(path, &info).ok());
  EXPECT_EQ(info.state, pm::PoolState::kClean);
  ASSERT_TRUE(Open(o, &index).ok());
  EXPECT_EQ(index->Count(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Engines, Creation, ::testing::ValuesIn(RegisteredNames()),
                         [](const auto& info) { return GtestName(info.param); });

}  // namespace
}  // namespace pmhash::testing
