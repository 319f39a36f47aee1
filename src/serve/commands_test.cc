#include "serve/commands.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "pmhash/options.h"
#include "serve/resp.h"

namespace pmhash::serve {
namespace {

using namespace std::string_literals;

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(CommandOptions{}); }

  void Start(CommandOptions options) {
    handler_.reset();
    index_.reset();
    Options o;
    o.engine = "linear";  // a DRAM pool: the handler sees only the Index API
    o.pool_size = 64ull << 20;
    ASSERT_TRUE(Open(o, &index_).ok());
    handler_ = std::make_unique<CommandHandler>(index_.get(), std::move(options));
  }

  // The reply to one request, and what Execute said to do next.
  std::string Run(std::vector<std::string> words, After* after = nullptr) {
    std::vector<std::string_view> args(words.begin(), words.end());
    std::string out;
    const After a = handler_->Execute(args, &session_, &out);
    if (after != nullptr) *after = a;
    return out;
  }

  std::unique_ptr<Index> index_;
  std::unique_ptr<CommandHandler> handler_;
  Session session_;
};

TEST_F(CommandsTest, SetGetDelExistsDbsize) {
  EXPECT_EQ(Run({"SET", "a", "1"}), "+OK\r\n");
  EXPECT_EQ(Run({"set", "b", "two"}), "+OK\r\n");
  EXPECT_EQ(Run({"GET", "a"}), "$1\r\n1\r\n");
  EXPECT_EQ(Run({"GET", "missing"}), "$-1\r\n");
  EXPECT_EQ(Run({"EXISTS", "a", "b", "missing", "a"}), ":3\r\n");
  EXPECT_EQ(Run({"DBSIZE"}), ":2\r\n");
  EXPECT_EQ(Run({"DEL", "a", "missing"}), ":1\r\n");
  EXPECT_EQ(Run({"GET", "a"}), "$-1\r\n");
  EXPECT_EQ(Run({"DBSIZE"}), ":1\r\n");
  // Binary keys and values.
  EXPECT_EQ(Run({"SET", "k\0\r\n"s, "v\0\xff"s}), "+OK\r\n");
  EXPECT_EQ(Run({"GET", "k\0\r\n"s}), "$3\r\nv\0\xff\r\n"s);
}

TEST_F(CommandsTest, SetNxXxAndRefusedOptionsChangeNothingWhenTheyFail) {
  EXPECT_EQ(Run({"SET", "k", "1", "NX"}), "+OK\r\n");
  EXPECT_EQ(Run({"SET", "k", "2", "nx"}), "$-1\r\n");
  EXPECT_EQ(Run({"SET", "other", "2", "XX"}), "$-1\r\n");
  EXPECT_EQ(Run({"SET", "k", "3", "XX"}), "+OK\r\n");
  EXPECT_EQ(Run({"SET", "k", "4", "NX", "XX"}), "-ERR syntax error\r\n");
  EXPECT_EQ(Run({"SET", "k", "5", "EX", "10"}).substr(0, 8), "-ERR SET");
  EXPECT_EQ(Run({"SET", "k", "6", "GET"}).substr(0, 8), "-ERR SET");
  EXPECT_EQ(Run({"SET", "k", "7", "bogus"}), "-ERR syntax error\r\n");
  EXPECT_EQ(Run({"SET", "k", "8", "KEEPTTL"}), "+OK\r\n");
  EXPECT_EQ(Run({"GET", "k"}), "$1\r\n8\r\n");
  EXPECT_EQ(Run({"GET", "other"}), "$-1\r\n");
}

TEST_F(CommandsTest, MsetAndMget) {
  EXPECT_EQ(Run({"MSET", "a", "1", "b", "2", "a", "3"}), "+OK\r\n");
  EXPECT_EQ(Run({"MGET", "a", "nope", "b"}), "*3\r\n$1\r\n3\r\n$-1\r\n$1\r\n2\r\n");
  EXPECT_EQ(Run({"MSET", "a", "1", "b"}), "-ERR wrong number of arguments for 'mset' command\r\n");
  EXPECT_EQ(Run({"GET", "a"}), "$1\r\n3\r\n");
}

TEST_F(CommandsTest, OversizedKeyIsAnErrorAndChangesNothing) {
  const std::string big(kMaxKeySize + 1, 'k');
  EXPECT_EQ(Run({"SET", big, "v"}).substr(0, 5), "-ERR ");
  EXPECT_EQ(Run({"MSET", "ok", "1", big, "v"}).substr(0, 5), "-ERR ");
  EXPECT_EQ(Run({"MGET", big}).substr(0, 5), "-ERR ");
  EXPECT_EQ(Run({"SET", "v", std::string(kMaxValueSize + 1, 'v')}).substr(0, 5), "-ERR ");
  // MSET writes pair after pair: the pair before the bad one is in (docs/serve.md).
  EXPECT_EQ(Run({"DBSIZE"}), ":1\r\n");
  EXPECT_EQ(Run({"GET", "ok"}), "$1\r\n1\r\n");
}

TEST_F(CommandsTest, UnknownCommandsAndWrongArity) {
  EXPECT_EQ(Run({"FOO", "bar"}),
            "-ERR unknown command 'FOO', with args beginning with: 'bar'\r\n");
  EXPECT_EQ(Run({"GET"}), "-ERR wrong number of arguments for 'get' command\r\n");
  EXPECT_EQ(Run({"GET", "a", "b"}), "-ERR wrong number of arguments for 'get' command\r\n");
  EXPECT_EQ(Run({"PING"}), "+PONG\r\n");
  EXPECT_EQ(Run({"PING", "hi"}), "$2\r\nhi\r\n");
  EXPECT_EQ(Run({"ECHO", "x"}), "$1\r\nx\r\n");
  EXPECT_EQ(Run({"SELECT", "0"}), "+OK\r\n");
  EXPECT_EQ(Run({"SELECT", "1"}).substr(0, 5), "-ERR ");
  EXPECT_EQ(Run({"HELLO", "3"}).substr(0, 8), "-NOPROTO");
  EXPECT_EQ(Run({"HELLO", "2"}).substr(0, 27), "*14\r\n$6\r\nserver\r\n$6\r\npmhash");
  EXPECT_EQ(Run({"HELLO", "2", "BOGUS"}).substr(0, 17), "-ERR syntax error");
}

TEST_F(CommandsTest, ScanVisitsEveryKeyOnceWithoutChanges) {
  std::set<std::string> want;
  for (int i = 0; i < 500; ++i) {
    want.insert("key" + std::to_string(i));
    ASSERT_EQ(Run({"SET", "key" + std::to_string(i), "v"}), "+OK\r\n");
  }
  std::multiset<std::string> seen;
  std::string cursor = "0";
  int pages = 0;
  do {
    ++pages;
    std::vector<std::string_view> args = {"SCAN", cursor, "COUNT", "37"};
    std::string out;
    handler_->Execute(args, &session_, &out);
    // *2 $n cursor *m ($len key)...
    ASSERT_EQ(out.substr(0, 4), "*2\r\n");
    size_t pos = 4;
    auto read_line = [&] {
      const size_t e = out.find("\r\n", pos);
      std::string l = out.substr(pos, e - pos);
      pos = e + 2;
      return l;
    };
    read_line();  // $len
    cursor = read_line();
    const std::string header = read_line();
    ASSERT_EQ(header[0], '*');
    const int n = std::stoi(header.substr(1));
    for (int i = 0; i < n; ++i) {
      read_line();
      seen.insert(read_line());
    }
    ASSERT_LT(pages, 1000);
  } while (cursor != "0");
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()), want);
  EXPECT_EQ(seen.size(), want.size());  // no change during the scan: each key once
  EXPECT_GT(pages, 5);
  EXPECT_EQ(Run({"SCAN", "banana"}), "-ERR invalid cursor\r\n");
  EXPECT_EQ(Run({"SCAN", "0", "MATCH", "k*"}).substr(0, 13), "-ERR SCAN MAT");
  EXPECT_EQ(Run({"SCAN", "0", "COUNT"}), "-ERR syntax error\r\n");
}

TEST_F(CommandsTest, AuthGuardsEveryCommandButAuthQuitHello) {
  CommandOptions o;
  o.requirepass = "secret";
  Start(o);
  EXPECT_EQ(Run({"GET", "a"}), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(Run({"SET", "a", "1"}), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(Run({"AUTH", "wrong"}).substr(0, 10), "-WRONGPASS");
  EXPECT_EQ(Run({"GET", "a"}), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(Run({"HELLO", "2"}).substr(0, 7), "-NOAUTH");
  EXPECT_EQ(Run({"HELLO", "2", "AUTH", "default", "nope"}).substr(0, 10), "-WRONGPASS");
  EXPECT_EQ(Run({"AUTH", "secret"}), "+OK\r\n");
  EXPECT_EQ(Run({"SET", "a", "1"}), "+OK\r\n");
  EXPECT_EQ(index_->Count(), 1u);
  Session fresh;
  session_ = fresh;
  EXPECT_EQ(Run({"HELLO", "2", "AUTH", "default", "secret"}).substr(0, 4), "*14\r");
  EXPECT_EQ(Run({"GET", "a"}), "$1\r\n1\r\n");
}

TEST_F(CommandsTest, FlushallOnlyWhenAllowed) {
  ASSERT_EQ(Run({"MSET", "a", "1", "b", "2"}), "+OK\r\n");
  EXPECT_EQ(Run({"FLUSHALL"}).substr(0, 5), "-ERR ");
  EXPECT_EQ(index_->Count(), 2u);
  CommandOptions o;
  o.allow_flushall = true;
  Start(o);
  for (int i = 0; i < 3000; ++i) ASSERT_EQ(Run({"SET", std::to_string(i), "v"}), "+OK\r\n");
  EXPECT_EQ(Run({"FLUSHALL"}), "+OK\r\n");
  EXPECT_EQ(index_->Count(), 0u);
}

TEST_F(CommandsTest, QuitAndShutdownSayWhatTheConnectionDoes) {
  After after = After::kContinue;
  EXPECT_EQ(Run({"QUIT"}, &after), "+OK\r\n");
  EXPECT_EQ(after, After::kClose);
  EXPECT_EQ(Run({"SHUTDOWN", "NOSAVE"}, &after), "");
  EXPECT_EQ(after, After::kShutdown);
  EXPECT_EQ(Run({"SHUTDOWN", "later"}, &after), "-ERR syntax error\r\n");
  EXPECT_EQ(after, After::kContinue);
}

TEST_F(CommandsTest, InfoAndCommandAnswerClients) {
  ASSERT_EQ(Run({"SET", "a", "1"}), "+OK\r\n");
  const std::string info = Run({"INFO"});
  EXPECT_NE(info.find("pmhash_engine:linear\r\n"), std::string::npos);
  EXPECT_NE(info.find("db0:keys=1,"), std::string::npos);
  EXPECT_NE(info.find("load_factor:"), std::string::npos);
  EXPECT_NE(info.find("recovery_ms:"), std::string::npos);
  const std::string keyspace = Run({"INFO", "keyspace"});
  EXPECT_EQ(keyspace.find("# Server"), std::string::npos);
  EXPECT_NE(keyspace.find("# Keyspace"), std::string::npos);
  EXPECT_EQ(Run({"COMMAND", "COUNT"}).substr(0, 1), ":");
  EXPECT_EQ(Run({"COMMAND", "INFO", "get"}),
            "*1\r\n*6\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n");
  EXPECT_EQ(Run({"CONFIG", "GET", "appendonly"}), "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
}

}  // namespace
}  // namespace pmhash::serve
