#include "serve/resp.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pmhash::serve {
namespace {

using Result = RespParser::Result;

std::vector<std::string> Copy(const std::vector<std::string_view>& args) {
  return std::vector<std::string>(args.begin(), args.end());
}

TEST(RespParser, MultibulkCommandFedByteByByte) {
  const std::string req = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\nv!\r\n";
  RespParser p(1 << 20, 1024);
  std::vector<std::string_view> args;
  for (size_t i = 0; i + 1 < req.size(); ++i) {
    p.Feed(req.substr(i, 1));
    ASSERT_EQ(p.Next(&args), Result::kIncomplete) << "after byte " << i;
  }
  p.Feed(req.substr(req.size() - 1));
  ASSERT_EQ(p.Next(&args), Result::kCommand);
  EXPECT_EQ(Copy(args), (std::vector<std::string>{"SET", "k", "v\r\nv!"}));
  EXPECT_EQ(p.Next(&args), Result::kIncomplete);
  EXPECT_EQ(p.pending_bytes(), 0u);
}

TEST(RespParser, PipelinedCommandsComeOutInOrderAndBinarySafe) {
  RespParser p(1 << 20, 1024);
  std::string req;
  for (int i = 0; i < 1000; ++i) {
    const std::string key = "k" + std::to_string(i) + std::string(1, '\0');
    req += "*2\r\n$3\r\nGET\r\n$" + std::to_string(key.size()) + "\r\n" + key + "\r\n";
  }
  p.Feed(req);
  std::vector<std::string_view> args;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(p.Next(&args), Result::kCommand) << i;
    ASSERT_EQ(args.size(), 2u);
    EXPECT_EQ(std::string(args[1]), "k" + std::to_string(i) + std::string(1, '\0'));
  }
  EXPECT_EQ(p.Next(&args), Result::kIncomplete);
}

TEST(RespParser, InlineCommandsAndEmptyLines) {
  RespParser p(1 << 20, 1024);
  p.Feed("\r\n  PING \r\nset  a\tb\nGET a");
  std::vector<std::string_view> args;
  ASSERT_EQ(p.Next(&args), Result::kCommand);
  EXPECT_EQ(Copy(args), (std::vector<std::string>{"PING"}));
  ASSERT_EQ(p.Next(&args), Result::kCommand);
  EXPECT_EQ(Copy(args), (std::vector<std::string>{"set", "a", "b"}));
  EXPECT_EQ(p.Next(&args), Result::kIncomplete);  // "GET a" has no line end yet
  p.Feed("\r\n");
  ASSERT_EQ(p.Next(&args), Result::kCommand);
  EXPECT_EQ(Copy(args), (std::vector<std::string>{"GET", "a"}));
}

struct BadCase {
  const char* name;
  std::string bytes;
};

TEST(RespParser, MalformedRequestsAreProtocolErrors) {
  const std::vector<BadCase> cases = {
      {"non-numeric count", "*x\r\n"},
      {"negative count", "*-2\r\n"},
      {"count over max_args", "*1025\r\n"},
      {"bulk without $", "*1\r\n:3\r\nGET\r\n"},
      {"negative bulk length", "*1\r\n$-1\r\n"},
      {"bulk over the limit", "*1\r\n$1048577\r\n"},
      {"huge bulk length", "*1\r\n$99999999999999999999999\r\n"},
      {"bulk not ended by CRLF", "*1\r\n$3\r\nGETxx"},
      {"length line without LF", "*1\rx"},
      {"endless length line", "*1111111111111111111111111111111111111111"},
      {"inline line too long", std::string(kMaxInlineBytes + 1, 'a')},
  };
  for (const BadCase& c : cases) {
    RespParser p(1 << 20, 1024);
    p.Feed(c.bytes);
    std::vector<std::string_view> args;
    EXPECT_EQ(p.Next(&args), Result::kError) << c.name;
    EXPECT_NE(p.error().find("Protocol error"), std::string::npos) << c.name;
    EXPECT_TRUE(args.empty()) << c.name;
    // An error sticks: nothing after it can be framed.
    p.Feed("*1\r\n$4\r\nPING\r\n");
    EXPECT_EQ(p.Next(&args), Result::kError) << c.name;
  }
}

TEST(RespParser, LongPipelineIsCompactedAsItIsConsumed) {
  RespParser p(1 << 20, 1024);
  std::vector<std::string_view> args;
  const std::string one = "*1\r\n$4\r\nPING\r\n";
  size_t seen = 0;
  for (int round = 0; round < 200; ++round) {
    std::string chunk;
    for (int i = 0; i < 100; ++i) chunk += one;
    p.Feed(chunk);
    while (p.Next(&args) == Result::kCommand) ++seen;
    EXPECT_EQ(p.pending_bytes(), 0u);
  }
  EXPECT_EQ(seen, 20000u);
}

TEST(RespEncoders, EveryReplyKind) {
  std::string out;
  AppendSimple(&out, "OK");
  AppendError(&out, "ERR two\r\nlines");
  AppendInteger(&out, -7);
  AppendBulk(&out, std::string("a\0b", 3));
  AppendNull(&out);
  AppendArrayHeader(&out, 2);
  using namespace std::string_literals;
  EXPECT_EQ(out, "+OK\r\n-ERR two  lines\r\n:-7\r\n$3\r\na\0b\r\n$-1\r\n*2\r\n"s);
}

}  // namespace
}  // namespace pmhash::serve
