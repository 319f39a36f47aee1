#include "bench/trace.h"

#include <gtest/gtest.h>

namespace pmhash::bench {
namespace {

TEST(Trace, BothFormsAndComments) {
  std::vector<TraceOp> ops;
  ASSERT_TRUE(ParseTrace("# a comment\n"
                         "INSERT k1 hello world\r\n"
                         "\n"
                         "READ k1\n"
                         "UPDATE usertable user7 [ field0=abc field1=d e ]\n"
                         "READ usertable user7 [ <all fields>]\n"
                         "DELETE usertable user7\n"
                         "DELETE k1\n"
                         "SCAN usertable user1 45 [ <all fields>]",
                         &ops)
                  .ok());
  ASSERT_EQ(ops.size(), 7u);
  EXPECT_EQ(ops[0].kind, TraceOp::Kind::kInsert);
  EXPECT_EQ(ops[0].key, "k1");
  EXPECT_EQ(ops[0].value, "hello world");
  EXPECT_EQ(ops[0].line, 2u);
  EXPECT_EQ(ops[1].kind, TraceOp::Kind::kRead);
  EXPECT_EQ(ops[1].key, "k1");
  EXPECT_EQ(ops[2].key, "user7");
  EXPECT_EQ(ops[2].value, "field0=abc field1=d e");
  EXPECT_EQ(ops[3].key, "user7");
  EXPECT_EQ(ops[4].kind, TraceOp::Kind::kDelete);
  EXPECT_EQ(ops[4].key, "user7");
  EXPECT_EQ(ops[5].key, "k1");
  EXPECT_EQ(ops[6].kind, TraceOp::Kind::kScan);
  EXPECT_EQ(ops[6].key, "user1");
}

TEST(Trace, BadLinesNameTheirLine) {
  std::vector<TraceOp> ops;
  Status s = ParseTrace("INSERT a b\nFROB x\n", &ops);
  ASSERT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(std::string(s.message()).find("line 2"), std::string::npos);
  EXPECT_NE(std::string(s.message()).find("FROB"), std::string::npos);
  ops.clear();
  s = ParseTrace("READ\n", &ops);
  ASSERT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(std::string(s.message()).find("without a key"), std::string::npos);
}

}  // namespace
}  // namespace pmhash::bench
