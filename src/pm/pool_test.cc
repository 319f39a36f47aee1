#include "pm/pool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <vector>

#include "util/hash.h"
#include "pm/persist.h"
#include "support/engine_tests.h"
#include "support/harness.h"

namespace pmhash::pm {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kSmallPool = kMinPoolSize;  // 4 MiB: the smallest pool, fast to map

using testing::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good());
}

uint64_t HashOf(const std::string& bytes) { return Hash64(bytes.data(), bytes.size(), 0); }

// The header checksum as the format defines it (xxh3-64 of the bytes before the field).
// MakePool checks that it reproduces what Create wrote, so a format change fails loudly.
uint64_t Checksum(const PoolHeader& h) {
  return Hash64(&h, offsetof(PoolHeader, checksum), 0x706d68617368ull);
}

// Creates a closed (unmapped) pool file and returns its bytes.
std::string MakePool(const std::string& path, std::string_view engine = "test",
                     uint64_t size = kSmallPool) {
  {
    std::unique_ptr<Pool> pool;
    Status s = Pool::Create(path, engine, size, &pool);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  std::string bytes = ReadFile(path);
  PoolHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  EXPECT_EQ(Checksum(h), h.checksum) << "the test's checksum no longer matches pool.cc";
  return bytes;
}

PoolHeader HeaderOf(const std::string& bytes) {
  PoolHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  return h;
}

void PutHeader(std::string* bytes, const PoolHeader& h) {
  std::memcpy(bytes->data(), &h, sizeof(h));
}

// Pool::Open (and Pool::Inspect, unless inspect is false) must fail with `code` and a
// message containing `fragment`, return no pool, and leave the file's bytes unchanged.
void ExpectRejected(const std::string& path, std::string_view engine, Status::Code code,
                    std::string_view fragment, bool inspect = true) {
  const bool exists = fs::exists(path);
  const uint64_t before = exists && fs::is_regular_file(path) ? HashOf(ReadFile(path)) : 0;
  std::unique_ptr<Pool> pool;
  Status s = Pool::Open(path, engine, &pool);
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(fragment), std::string::npos)
      << "message '" << s.message() << "' lacks '" << fragment << "'";
  EXPECT_EQ(pool, nullptr);
  if (inspect) {
    PoolInfo info;
    Status si = Pool::Inspect(path, &info);
    EXPECT_EQ(si.code(), code) << si.ToString();
    EXPECT_NE(si.message().find(fragment), std::string::npos) << si.ToString();
  }
  if (exists && fs::is_regular_file(path)) {
    EXPECT_EQ(HashOf(ReadFile(path)), before) << "a failed open changed " << path;
  } else {
    EXPECT_EQ(fs::exists(path), exists) << "a failed open created " << path;
  }
}

// ---- Bad input to Open --------------------------------------------------------------

TEST(PoolOpen, MissingFileIsNotFound) {
  TempDir dir;
  ExpectRejected(dir.File("absent.pool"), "", Status::Code::kNotFound,
                 "No such file or directory");
}

TEST(PoolOpen, EmptyFileIsNotAPool) {
  TempDir dir;
  WriteFile(dir.File("empty"), "");
  ExpectRejected(dir.File("empty"), "", Status::Code::kCorruption, "is empty, not a pmhash pool");
}

TEST(PoolOpen, RandomBytesAreNotAPool) {
  TempDir dir;
  std::string bytes(64 << 10, '\0');
  std::mt19937_64 rng(7);
  for (char& c : bytes) c = static_cast<char>(rng());
  WriteFile(dir.File("random"), bytes);
  ExpectRejected(dir.File("random"), "", Status::Code::kCorruption,
                 "not a pmhash pool (bad magic)");
  // Short random files too (shorter than a header).
  WriteFile(dir.File("short-random"), bytes.substr(0, 100));
  ExpectRejected(dir.File("short-random"), "", Status::Code::kCorruption, "not a pmhash pool");
}

TEST(PoolOpen, TruncatedHeader) {
  TempDir dir;
  const std::string pool = MakePool(dir.File("real"));
  WriteFile(dir.File("cut"), pool.substr(0, 100));
  ExpectRejected(dir.File("cut"), "", Status::Code::kCorruption,
                 "truncated: 100 bytes, shorter than the 4096-byte pool header");
}

TEST(PoolOpen, FileShorterThanPoolSize) {
  TempDir dir;
  const std::string pool = MakePool(dir.File("real"));
  WriteFile(dir.File("cut"), pool.substr(0, 1 << 20));
  ExpectRejected(dir.File("cut"), "", Status::Code::kCorruption,
                 "truncated: the header says 4194304 bytes, the file has 1048576");
}

TEST(PoolOpen, WrongMagic) {
  TempDir dir;
  std::string pool = MakePool(dir.File("p"));
  PoolHeader h = HeaderOf(pool);
  std::memcpy(h.magic, "NOTAPOOL", 8);
  h.checksum = Checksum(h);  // only the magic is wrong
  PutHeader(&pool, h);
  WriteFile(dir.File("p"), pool);
  ExpectRejected(dir.File("p"), "", Status::Code::kCorruption, "not a pmhash pool (bad magic)");
}

TEST(PoolOpen, WrongLayoutVersion) {
  TempDir dir;
  std::string pool = MakePool(dir.File("p"));
  PoolHeader h = HeaderOf(pool);
  h.layout_version = kPoolLayoutVersion + 1;
  h.checksum = Checksum(h);  // only the version is wrong
  PutHeader(&pool, h);
  WriteFile(dir.File("p"), pool);
  ExpectRejected(dir.File("p"), "", Status::Code::kInvalidArgument,
                 "has pool layout version " + std::to_string(kPoolLayoutVersion + 1) +
                     "; this pmhash reads versions 3 and 4 (the pool was made by a newer "
                     "pmhash)");
  // A pool of layout 2 (flags at 2048 and 2056, outside a checksum at 128) is refused as
  // old, before its checksum is looked at.
  h = HeaderOf(pool);
  h.layout_version = 2;
  PutHeader(&pool, h);
  WriteFile(dir.File("p"), pool);
  ExpectRejected(dir.File("p"), "", Status::Code::kInvalidArgument,
                 "has pool layout version 2; this pmhash reads versions 3 and 4 (the pool was "
                 "made by an older pmhash: re-create it and load its data again)");
}

// ---- The key-hash seed (layout 4) ----------------------------------------------------

TEST(PoolHashSeed, NewPoolsDrawARandomSeedOrKeepTheOneGiven) {
  TempDir dir;
  std::set<uint64_t> seeds;
  for (int i = 0; i < 4; ++i) {
    std::unique_ptr<Pool> pool;
    ASSERT_TRUE(Pool::Create(dir.File("p" + std::to_string(i)), "test", kSmallPool, &pool).ok());
    EXPECT_EQ(pool->header().layout_version, 4u);
    EXPECT_EQ(pool->hash_seed_origin(), HashSeedOrigin::kRandom);
    seeds.insert(pool->hash_seed());
    std::unique_ptr<Pool> dram;
    ASSERT_TRUE(Pool::CreateDram("test", kSmallPool, &dram).ok());
    EXPECT_EQ(dram->hash_seed_origin(), HashSeedOrigin::kRandom);
    seeds.insert(dram->hash_seed());
  }
  EXPECT_EQ(seeds.size(), 8u) << "random seeds repeat";
  for (uint64_t chosen : {uint64_t{0}, uint64_t{42}, ~uint64_t{0}}) {
    const std::string path = dir.File("chosen" + std::to_string(chosen % 100));
    {
      std::unique_ptr<Pool> pool;
      ASSERT_TRUE(Pool::Create(path, "test", kSmallPool, &pool, chosen).ok());
      EXPECT_EQ(pool->hash_seed(), chosen);
      EXPECT_EQ(pool->hash_seed_origin(), HashSeedOrigin::kChosen);
    }
    PoolInfo info;
    ASSERT_TRUE(Pool::Inspect(path, &info).ok());
    EXPECT_EQ(info.hash_seed, chosen);
    EXPECT_EQ(info.hash_seed_origin, HashSeedOrigin::kChosen);
    std::unique_ptr<Pool> again;
    ASSERT_TRUE(Pool::Open(path, "test", &again).ok());
    EXPECT_EQ(again->hash_seed(), chosen);
  }
}

// A header of the previous layout: version 3, zero where layout 4 keeps the seed.
PoolHeader AsLayout3(PoolHeader h) {
  h.layout_version = 3;
  h.hash_seed = 0;
  h.hash_seed_origin = 0;
  h.checksum = Checksum(h);
  return h;
}

TEST(PoolHashSeed, Layout3OpensWithSeedZeroAndSaysSo) {
  TempDir dir;
  std::string pool = MakePool(dir.File("p"));
  PutHeader(&pool, AsLayout3(HeaderOf(pool)));
  WriteFile(dir.File("p"), pool);
  PoolInfo info;
  ASSERT_TRUE(Pool::Inspect(dir.File("p"), &info).ok());
  EXPECT_EQ(info.layout_version, 3u);
  EXPECT_EQ(info.hash_seed, 0u);
  EXPECT_EQ(info.hash_seed_origin, HashSeedOrigin::kNone);
  EXPECT_STREQ(HashSeedOriginName(info.hash_seed_origin), "none (layout 3: seed 0)");
  std::unique_ptr<Pool> p;
  ASSERT_TRUE(Pool::Open(dir.File("p"), "test", &p).ok());
  EXPECT_EQ(p->hash_seed(), 0u);
  EXPECT_EQ(p->hash_seed_origin(), HashSeedOrigin::kNone);
  // Opening never rewrites the header: it stays layout 3.
  p.reset();
  EXPECT_EQ(HeaderOf(ReadFile(dir.File("p"))).layout_version, 3u);
}

// The seed fields must fit the layout, checksum or not: a layout-3 header with a seed, or
// a layout-4 one with no origin, was not written by pmhash (nor is a nonzero pad).
TEST(PoolHashSeed, SeedFieldsThatDoNotFitTheLayoutAreCorruption) {
  TempDir dir;
  const std::string good = MakePool(dir.File("p"));
  std::vector<PoolHeader> bad;
  PoolHeader h = AsLayout3(HeaderOf(good));
  h.hash_seed = 5;
  bad.push_back(h);
  h = AsLayout3(HeaderOf(good));
  h.hash_seed_origin = static_cast<uint32_t>(HashSeedOrigin::kRandom);
  bad.push_back(h);
  for (uint32_t origin : {0u, 3u, 0x01000001u}) {
    h = HeaderOf(good);
    h.hash_seed_origin = origin;
    bad.push_back(h);
  }
  h = HeaderOf(good);
  h.pad = 1;
  bad.push_back(h);
  for (PoolHeader b : bad) {
    b.checksum = Checksum(b);
    std::string pool = good;
    PutHeader(&pool, b);
    WriteFile(dir.File("p"), pool);
    ExpectRejected(dir.File("p"), "", Status::Code::kCorruption,
                   "pool header hash seed fields (offset 128) do not fit layout version");
  }
}

TEST(PoolOpen, WrongEngine) {
  TempDir dir;
  MakePool(dir.File("p"), "test");
  ExpectRejected(dir.File("p"), "other", Status::Code::kInvalidArgument,
                 "holds engine 'test', not 'other'", /*inspect=*/false);
  // The right engine, or none, opens.
  std::unique_ptr<Pool> pool;
  EXPECT_TRUE(Pool::Open(dir.File("p"), "test", &pool).ok());
  pool.reset();
  EXPECT_TRUE(Pool::Open(dir.File("p"), "", &pool).ok());
}

TEST(PoolOpen, BadChecksum) {
  TempDir dir;
  std::string pool = MakePool(dir.File("p"), "test");
  pool[offsetof(PoolHeader, engine)] ^= 0x20;  // "test" -> "Test", checksum left stale
  WriteFile(dir.File("p"), pool);
  ExpectRejected(dir.File("p"), "", Status::Code::kCorruption, "checksum mismatch");
}

TEST(PoolOpen, InconsistentFieldsWithValidChecksum) {
  TempDir dir;
  std::string pool = MakePool(dir.File("p"));
  PoolHeader h = HeaderOf(pool);
  h.heap_size += 4096;  // heap would run past the pool
  h.checksum = Checksum(h);
  PutHeader(&pool, h);
  WriteFile(dir.File("p"), pool);
  ExpectRejected(dir.File("p"), "", Status::Code::kCorruption, "fields are inconsistent");
}

TEST(PoolOpen, PoolInUseIsBusy) {
  TempDir dir;
  MakePool(dir.File("p"));
  std::unique_ptr<Pool> first;
  ASSERT_TRUE(Pool::Open(dir.File("p"), "", &first).ok());
  // flock belongs to the open file description, so a second open in-process conflicts.
  ExpectRejected(dir.File("p"), "", Status::Code::kBusy, "is in use", /*inspect=*/false);
  PoolInfo info;  // Inspect does not lock: it still reads the header
  EXPECT_TRUE(Pool::Inspect(dir.File("p"), &info).ok());
  first.reset();
  std::unique_ptr<Pool> second;
  EXPECT_TRUE(Pool::Open(dir.File("p"), "", &second).ok()) << "the lock outlived the pool";
}

TEST(PoolOpen, DirectoryIsRejected) {
  TempDir dir;
  fs::create_directory(dir.File("d"));
  ExpectRejected(dir.File("d"), "", Status::Code::kInvalidArgument,
                 "is a directory, not a regular file");
}

// Guards issue 13's "pool check / pool info on a FIFO hang forever": opening a FIFO for
// reading blocks until a writer comes. Each open runs in a child process with a time
// limit, so the old behaviour fails the test (as "hung") instead of hanging it.
TEST(PoolOpen, FifoSocketAndDeviceAreRejectedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.File("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  const std::string sock = dir.File("sock");
  const int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sfd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
  ASSERT_EQ(bind(sfd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fifo, "is a FIFO, not a regular file"},
      {sock, "is a socket, not a regular file"},
      // The whole message, as docs/reliability.md ("Device DAX") quotes it.
      {"/dev/null",
       "is a character device, not a regular file (devices, device DAX included, "
       "are not supported: use a file on a DAX-mounted file system)"}};
  for (const auto& [path, fragment] : cases) {
    SCOPED_TRACE(path);
    std::string how;
    const std::string out = testing::InChildProcess(
        [&path] {
          std::unique_ptr<Pool> pool;
          PoolInfo info;
          std::string fd_status = "opened";
          int fd;
          uint64_t size;
          if (Status f = Pool::OpenFile(path, O_RDONLY, &fd, &size); f.ok()) {
            ::close(fd);
          } else {
            fd_status = f.ToString();
          }
          return Pool::Open(path, "", &pool).ToString() + "\n" +
                 Pool::Inspect(path, &info).ToString() + "\n" + fd_status;
        },
        20, &how);
    ASSERT_EQ(how, "") << "opening " << path << " hung or crashed";
    // One line each from Open, Inspect and OpenFile.
    std::istringstream lines(out);
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
      ++n;
      EXPECT_EQ(line.rfind("InvalidArgument: " + path + " " + fragment, 0), 0u) << line;
    }
    EXPECT_EQ(n, 3) << out;
  }
  ::close(sfd);
}

TEST(PoolOpen, NoPermission) {
  TempDir dir;
  const std::string path = dir.File("p");
  MakePool(path);
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  if (geteuid() != 0) {
    ExpectRejected(path, "", Status::Code::kInvalidArgument, "Permission denied");
    return;
  }
  // Root ignores permission bits; drop to an unprivileged user in a child process, try
  // the open there and report the status through a pipe.
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  const uint64_t before = HashOf(ReadFile(path));
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string result;
    if (setgid(65534) != 0 || setuid(65534) != 0) {
      result = "SKIP";
    } else {
      std::unique_ptr<Pool> pool;
      Status s = Pool::Open(path, "", &pool);
      result = std::to_string(static_cast<int>(s.code())) + " " + std::string(s.message());
    }
    ssize_t n = write(fds[1], result.data(), result.size());
    _exit(n == static_cast<ssize_t>(result.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string result;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) result.append(buf, n);
  ::close(fds[0]);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  if (result == "SKIP") GTEST_SKIP() << "running as root and cannot switch to uid 65534";
  EXPECT_EQ(result.substr(0, result.find(' ')),
            std::to_string(static_cast<int>(Status::Code::kInvalidArgument)))
      << result;
  EXPECT_NE(result.find("Permission denied"), std::string::npos) << result;
  EXPECT_EQ(HashOf(ReadFile(path)), before);
}

// ---- Create -------------------------------------------------------------------------

TEST(PoolCreate, RoundTripOfHeaderFields) {
  TempDir dir;
  const std::string path = dir.File("p");
  const uint64_t asked = 5 * (1 << 20) + 123;  // rounded up to whole pages
  const uint64_t size = (asked + 4095) / 4096 * 4096;
  std::string uuid;
  {
    std::unique_ptr<Pool> pool;
    Status s = Pool::Create(path, "round-trip", asked, &pool);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(pool->size(), size);
    EXPECT_EQ(pool->engine(), "round-trip");
    EXPECT_EQ(pool->path(), path);
    EXPECT_NE(pool->mapping(), Mapping::kDram);
    EXPECT_EQ(pool->state_at_open(), PoolState::kCreating);
    EXPECT_TRUE(pool->needs_creation());
    EXPECT_FALSE(pool->was_clean_at_open());
    const PoolHeader& h = pool->header();
    EXPECT_EQ(std::memcmp(h.magic, kPoolMagic, 8), 0);
    EXPECT_EQ(h.layout_version, kPoolLayoutVersion);
    EXPECT_EQ(h.header_size, kPoolHeaderSize);
    EXPECT_EQ(h.pool_size, size);
    EXPECT_EQ(h.root_offset, kRootOffset);
    EXPECT_EQ(h.root_size, kRootSize);
    EXPECT_EQ(h.log_offset, kRootOffset + kRootSize);
    EXPECT_EQ(h.log_size, 256u << 10);  // 1/64 of the pool, at least 256 KiB
    EXPECT_EQ(h.heap_offset % 4096, 0u);
    EXPECT_GE(h.heap_offset, h.log_offset + h.log_size);
    EXPECT_EQ(h.heap_offset + h.heap_size, size);
    EXPECT_GT(h.created_unix_ns, 0u);
    uuid.assign(reinterpret_cast<const char*>(h.uuid), 16);
    EXPECT_NE(uuid, std::string(16, '\0'));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(h.reserved), sizeof(h.reserved)),
              std::string(sizeof(h.reserved), '\0'));
    EXPECT_EQ(h.state, uint64_t(PoolState::kCreating));
  }
  EXPECT_EQ(fs::file_size(path), size);
  // Nothing is left beside it (Create writes aside, then renames).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);

  std::unique_ptr<Pool> pool;
  ASSERT_TRUE(Pool::Open(path, "round-trip", &pool).ok());
  EXPECT_EQ(pool->size(), size);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(pool->header().uuid), 16), uuid);
  PoolInfo info;
  ASSERT_TRUE(Pool::Inspect(path, &info).ok());
  EXPECT_EQ(info.engine, "round-trip");
  EXPECT_EQ(info.uuid.size(), 32u);
  EXPECT_EQ(info.pool_size, size);
  EXPECT_EQ(info.file_size, size);
  EXPECT_EQ(info.layout_version, kPoolLayoutVersion);
  EXPECT_EQ(info.root_offset, kRootOffset);
  EXPECT_EQ(info.log_offset, pool->header().log_offset);
  EXPECT_EQ(info.log_size, pool->header().log_size);
  EXPECT_EQ(info.heap_offset, pool->heap_offset());
  EXPECT_EQ(info.heap_size, pool->heap_size());
  EXPECT_EQ(info.created_unix_ns, pool->header().created_unix_ns);
  EXPECT_EQ(info.header_size, kPoolHeaderSize);
  EXPECT_EQ(info.root_size, kRootSize);
  EXPECT_EQ(info.checksum, pool->header().checksum);
  EXPECT_EQ(info.state, PoolState::kCreating);
  // The root area starts zeroed for the engine.
  EXPECT_EQ(std::string(static_cast<const char*>(pool->root()), kRootSize),
            std::string(kRootSize, '\0'));
}

TEST(PoolCreate, LargerPoolGetsLargerLog) {
  TempDir dir;
  std::unique_ptr<Pool> pool;
  ASSERT_TRUE(Pool::Create(dir.File("p"), "test", 64 << 20, &pool).ok());
  EXPECT_EQ(pool->log_size(), 1u << 20);  // 64 MiB / 64
}

TEST(PoolCreate, ExistingPathIsAlreadyExistsAndUntouched) {
  TempDir dir;
  const std::string path = dir.File("p");
  const uint64_t before = HashOf(MakePool(path, "test"));
  std::unique_ptr<Pool> pool;
  Status s = Pool::Create(path, "other", 8 << 20, &pool);
  EXPECT_TRUE(s.IsAlreadyExists()) << s.ToString();
  EXPECT_NE(s.message().find("already exists"), std::string::npos) << s.ToString();
  EXPECT_EQ(pool, nullptr);
  EXPECT_EQ(HashOf(ReadFile(path)), before);
  // Any existing file, not only pools.
  WriteFile(dir.File("notes.txt"), "hello");
  EXPECT_TRUE(Pool::Create(dir.File("notes.txt"), "test", kSmallPool, &pool).IsAlreadyExists());
  EXPECT_EQ(ReadFile(dir.File("notes.txt")), "hello");
}

TEST(PoolCreate, BadArgumentsCreateNothing) {
  TempDir dir;
  std::unique_ptr<Pool> pool;
  Status s = Pool::Create(dir.File("p"), "", kSmallPool, &pool);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("engine name"), std::string::npos) << s.ToString();
  s = Pool::Create(dir.File("p"), std::string(kEngineNameSize, 'x'), kSmallPool, &pool);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  s = Pool::Create(dir.File("p"), "test", kMinPoolSize - 1, &pool);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("pool size"), std::string::npos) << s.ToString();
  s = Pool::Create(dir.File("p"), "test", kMaxPoolSize + 1, &pool);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  s = Pool::Create(dir.File("no/such/dir/p"), "test", kSmallPool, &pool);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_EQ(pool, nullptr);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// ---- The state word and Sync -------------------------------------------------------

uint64_t StateInFile(const std::string& path) {
  const std::string bytes = ReadFile(path);
  uint64_t state = 0;
  std::memcpy(&state, bytes.data() + kPoolStateOffset, sizeof(state));
  return state;
}

TEST(PoolState, TransitionsReachTheFile) {
  TempDir dir;
  const std::string path = dir.File("p");
  std::unique_ptr<Persister> persister;
  ASSERT_TRUE(Persister::Make(PersistConfig{}, &persister).ok());
  {
    std::unique_ptr<Pool> pool;
    ASSERT_TRUE(Pool::Create(path, "test", kSmallPool, &pool).ok());
    EXPECT_EQ(StateInFile(path), uint64_t(PoolState::kCreating));
    ASSERT_TRUE(pool->MarkInUse(*persister).ok());  // creating stays creating
    EXPECT_EQ(StateInFile(path), uint64_t(PoolState::kCreating));
    Status s = pool->MarkClean(*persister);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_EQ(StateInFile(path), uint64_t(PoolState::kCreating));
    ASSERT_TRUE(pool->MarkCreated(*persister).ok());
    EXPECT_EQ(StateInFile(path), uint64_t(PoolState::kOpen));
    EXPECT_TRUE(pool->MarkCreated(*persister).IsInvalidArgument());  // only once
    EXPECT_TRUE(pool->needs_creation()) << "the state as it was at open";
    ASSERT_TRUE(pool->MarkClean(*persister).ok());
    EXPECT_EQ(StateInFile(path), uint64_t(PoolState::kClean));
    PoolInfo info;
    ASSERT_TRUE(Pool::Inspect(path, &info).ok());
    EXPECT_EQ(info.state, PoolState::kClean);
  }
  {
    std::unique_ptr<Pool> pool;
    ASSERT_TRUE(Pool::Open(path, "", &pool).ok());
    EXPECT_TRUE(pool->was_clean_at_open());
    EXPECT_FALSE(pool->needs_creation());
    ASSERT_TRUE(pool->MarkInUse(*persister).ok());
    EXPECT_EQ(StateInFile(path), uint64_t(PoolState::kOpen));
    EXPECT_TRUE(pool->was_clean_at_open()) << "the state as it was at open";
    // Dropped without MarkClean: as after a crash.
  }
  std::unique_ptr<Pool> pool;
  ASSERT_TRUE(Pool::Open(path, "", &pool).ok());
  EXPECT_EQ(pool->state_at_open(), PoolState::kOpen);
  EXPECT_FALSE(pool->was_clean_at_open());
  EXPECT_FALSE(pool->needs_creation());
  PoolInfo info;
  ASSERT_TRUE(Pool::Inspect(path, &info).ok());
  EXPECT_EQ(info.state, PoolState::kOpen);
  // The state lies outside the checksummed bytes: changing it keeps the header valid.
  EXPECT_EQ(Checksum(pool->header()), pool->header().checksum);
  // Every change went through the persister (created, clean, in use: 3 stores of 8
  // bytes, each persisted); the refused calls and MarkInUse of a new pool stored nothing.
  const PersistCounters c = persister->Totals();
  EXPECT_EQ(c.bytes_stored, 24u);
  EXPECT_EQ(c.flushes, 3u);
  EXPECT_EQ(c.fences, 3u);
}

// Guards issue 13's "a corrupted header silently empties the index": the initialized
// flag lay outside the checksum, and any value but 1 made Open format the pool. Now every
// byte of the header page is checked: a damaged state word (any byte of it, in any state,
// or zeroed) and a damaged reserved byte are Corruption naming what and where.
TEST(PoolState, EveryDamagedHeaderByteIsCorruption) {
  TempDir dir;
  const std::string path = dir.File("p");
  std::string pool = MakePool(path);  // kCreating
  std::vector<std::string> images = {pool};
  for (PoolState st : {PoolState::kOpen, PoolState::kClean}) {
    const uint64_t word = uint64_t(st);
    std::memcpy(pool.data() + kPoolStateOffset, &word, 8);
    images.push_back(pool);
  }
  for (const std::string& good : images) {
    for (size_t i = 0; i < 8; ++i) {
      for (int bit : {0, 7}) {
        std::string bad = good;
        bad[kPoolStateOffset + i] ^= static_cast<char>(1 << bit);
        WriteFile(path, bad);
        ExpectRejected(path, "", Status::Code::kCorruption,
                       "pool state word at offset 4088 reads 0x");
      }
      std::string bad = good;
      bad[kPoolStateOffset + i] = 1;  // the old "initialized" value, in any byte
      WriteFile(path, bad);
      ExpectRejected(path, "", Status::Code::kCorruption, "which is not creating, open or clean");
    }
    std::string zeroed = good;
    std::memset(zeroed.data() + kPoolStateOffset, 0, 8);
    WriteFile(path, zeroed);
    ExpectRejected(path, "", Status::Code::kCorruption, "pool state word at offset 4088");
    for (size_t off : {size_t{128}, size_t{2048}, size_t{2056}, size_t{4079}, size_t{4080}}) {
      std::string bad = good;
      bad[off] ^= 0x01;
      WriteFile(path, bad);
      ExpectRejected(path, "", Status::Code::kCorruption,
                     "pool header checksum mismatch over bytes [0, 4080)");
    }
  }
}

TEST(PoolSync, FilePoolBytesReachTheFile) {
  TempDir dir;
  const std::string path = dir.File("p");
  std::unique_ptr<Persister> persister;
  ASSERT_TRUE(Persister::Make(PersistConfig{}, &persister).ok());
  std::unique_ptr<Pool> pool;
  ASSERT_TRUE(Pool::Create(path, "test", kSmallPool, &pool).ok());
  const std::string payload = "synced bytes";
  persister->Copy(pool->heap(), payload.data(), payload.size());
  EXPECT_TRUE(pool->Sync().ok());
  EXPECT_EQ(ReadFile(path).substr(pool->heap_offset(), payload.size()), payload);
}

// ---- DRAM pools and images ----------------------------------------------------------

TEST(PoolDram, LayoutMatchesAFilePool) {
  std::unique_ptr<Pool> pool;
  const uint64_t asked = 5 * (1 << 20) + 1;
  ASSERT_TRUE(Pool::CreateDram("dram-test", asked, &pool).ok());
  const uint64_t size = (asked + 4095) / 4096 * 4096;
  EXPECT_EQ(pool->size(), size);
  EXPECT_EQ(pool->mapping(), Mapping::kDram);
  EXPECT_STREQ(MappingName(pool->mapping()), "dram");
  EXPECT_TRUE(pool->path().empty());
  EXPECT_TRUE(pool->needs_creation());
  EXPECT_EQ(pool->engine(), "dram-test");
  const PoolHeader& h = pool->header();
  EXPECT_EQ(std::memcmp(h.magic, kPoolMagic, 8), 0);
  EXPECT_EQ(h.pool_size, size);
  EXPECT_EQ(Checksum(h), h.checksum);
  EXPECT_EQ(pool->root(), pool->base() + kRootOffset);
  EXPECT_EQ(pool->log_area(), pool->base() + kRootOffset + kRootSize);
  EXPECT_EQ(pool->log_size(), 256u << 10);
  EXPECT_EQ(pool->heap(), pool->base() + pool->heap_offset());
  EXPECT_EQ(pool->heap_offset() + pool->heap_size(), size);
  EXPECT_EQ(std::string(static_cast<const char*>(pool->root()), kRootSize),
            std::string(kRootSize, '\0'));
  // Offsets and bounds.
  EXPECT_EQ(pool->ToOffset(pool->At<char>(12345)), 12345u);
  EXPECT_TRUE(pool->Contains(0, size));
  EXPECT_TRUE(pool->Contains(size, 0));
  EXPECT_FALSE(pool->Contains(size - 1, 2));
  EXPECT_FALSE(pool->Contains(size + 1, 0));
  EXPECT_FALSE(pool->Contains(~0ull, 1));
  EXPECT_FALSE(pool->Contains(1, ~0ull));
  EXPECT_TRUE(pool->Sync().ok());  // nothing to sync
  std::unique_ptr<Persister> persister;
  ASSERT_TRUE(Persister::Make(PersistConfig{}, &persister).ok());
  EXPECT_TRUE(pool->MarkCreated(*persister).ok());
  EXPECT_TRUE(pool->MarkClean(*persister).ok());
  EXPECT_EQ(pool->state(), PoolState::kClean);
}

TEST(PoolDram, BadArguments) {
  std::unique_ptr<Pool> pool;
  EXPECT_TRUE(Pool::CreateDram("", kSmallPool, &pool).IsInvalidArgument());
  EXPECT_TRUE(Pool::CreateDram("test", kMinPoolSize - 4096, &pool).IsInvalidArgument());
  EXPECT_EQ(pool, nullptr);
}

std::string ImageOf(const Pool& pool) { return std::string(pool.base(), pool.size()); }

TEST(PoolFromImage, CopiesAValidImage) {
  std::unique_ptr<Pool> source;
  ASSERT_TRUE(Pool::CreateDram("img", kSmallPool, &source).ok());
  std::unique_ptr<Persister> persister;
  ASSERT_TRUE(Persister::Make(PersistConfig{}, &persister).ok());
  persister->Copy(source->heap(), "payload", 7);
  std::string image = ImageOf(*source);

  std::unique_ptr<Pool> copy;
  Status s = Pool::FromImage(image.data(), image.size(), "img", &copy);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(copy->mapping(), Mapping::kDram);
  EXPECT_EQ(copy->size(), source->size());
  EXPECT_NE(copy->base(), image.data()) << "FromImage must copy";
  EXPECT_EQ(ImageOf(*copy), image);
  EXPECT_TRUE(copy->needs_creation());  // the image's state: creating
  // The copy is independent of the image.
  persister->Copy(copy->heap(), "changed", 7);
  EXPECT_EQ(image.substr(source->heap_offset(), 7), "payload");

  // The state is read from the image; any engine is accepted when none is given.
  const uint64_t clean = uint64_t(PoolState::kClean);
  std::memcpy(image.data() + kPoolStateOffset, &clean, sizeof(clean));
  ASSERT_TRUE(Pool::FromImage(image.data(), image.size(), "", &copy).ok());
  EXPECT_TRUE(copy->was_clean_at_open());
  std::unique_ptr<Pool> adopted;
  ASSERT_TRUE(Pool::Adopt(image.data(), image.size(), "img", &adopted).ok());
  EXPECT_TRUE(adopted->was_clean_at_open());
  EXPECT_EQ(adopted->base(), image.data()) << "Adopt must not copy";
  // Bytes past the pool size are ignored.
  image.append(4096, 'x');
  ASSERT_TRUE(Pool::FromImage(image.data(), image.size(), "img", &copy).ok());
  EXPECT_EQ(copy->size(), source->size());
}

TEST(PoolFromImage, RejectsBadImages) {
  std::unique_ptr<Pool> source;
  ASSERT_TRUE(Pool::CreateDram("img", kSmallPool, &source).ok());
  const std::string good = ImageOf(*source);
  auto expect = [](const std::string& image, std::string_view engine, Status::Code code,
                   std::string_view fragment) {
    std::unique_ptr<Pool> pool;
    Status s = Pool::FromImage(image.data(), image.size(), engine, &pool);
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find(fragment), std::string::npos) << s.ToString();
    EXPECT_EQ(pool, nullptr);
  };
  expect(good.substr(0, 100), "", Status::Code::kCorruption, "shorter than a header");
  expect(good.substr(0, 1 << 20), "", Status::Code::kCorruption, "truncated");
  expect(good, "other", Status::Code::kInvalidArgument, "holds engine 'img', not 'other'");
  std::string bad = good;
  bad[0] = 'X';
  expect(bad, "", Status::Code::kCorruption, "bad magic");
  bad = good;
  bad[offsetof(PoolHeader, uuid)] ^= 1;
  expect(bad, "", Status::Code::kCorruption, "checksum mismatch");
  bad = good;
  bad[kPoolStateOffset] ^= 0x40;
  expect(bad, "", Status::Code::kCorruption, "pool state word at offset 4088");
  bad = good;
  PoolHeader h = HeaderOf(bad);
  h.layout_version = 99;
  h.checksum = Checksum(h);
  PutHeader(&bad, h);
  expect(bad, "", Status::Code::kInvalidArgument, "layout version 99");
}

}  // namespace
}  // namespace pmhash::pm
