#include "pmhash/status.h"

#include <gtest/gtest.h>

#include <string>

#include "support/heap_counter.h"

namespace pmhash {
namespace {

using ::pmhash::testing::HeapAllocationsOf;

// Keeps the compiler from folding a Status away.
__attribute__((noinline)) Status Returned(Status s) { return s; }

TEST(StatusTest, CommonAnswersOfOperationsAllocateNothing) {
  EXPECT_EQ(HeapAllocationsOf([] {
              Status s = Returned(Status::NotFound());
              EXPECT_TRUE(s.IsNotFound());
              Status copy = s;
              EXPECT_EQ(copy.message(), "key not found");
            }),
            0u);
  EXPECT_EQ(HeapAllocationsOf([] {
              Status s = Returned(Status::AlreadyExists());
              EXPECT_TRUE(s.IsAlreadyExists());
              EXPECT_EQ(s.message(), "key already exists");
            }),
            0u);
  EXPECT_EQ(HeapAllocationsOf([] { EXPECT_TRUE(Returned(Status::OK()).ok()); }), 0u);
  // A detailed message is copied: the cold path, and the control that the counter works.
  EXPECT_GT(HeapAllocationsOf([] {
              Status s = Returned(Status::Corruption("table header at offset 4096 is damaged"));
              EXPECT_TRUE(s.IsCorruption());
            }),
            0u);
}

TEST(StatusTest, MessagesAndCodes) {
  EXPECT_EQ(Status::OK().ToString(), "OK");
  EXPECT_EQ(Status::OK().message(), "");
  EXPECT_EQ(Status::NotFound().ToString(), "NotFound: key not found");
  std::string message = "option x=";
  message += "7 is out of range";  // a composed message (GCC 12 at -O1 misreads string + "...")
  const Status s = Status::InvalidArgument(message);
  EXPECT_EQ(s.ToString(), "InvalidArgument: option x=7 is out of range");
  EXPECT_EQ(Status::Busy("").ToString(), "Busy");
  EXPECT_EQ(Status::CodeName(Status::Code::kResourceExhausted), "ResourceExhausted");
}

TEST(StatusTest, ResourceExhaustedSaysWhatIsFull) {
  const Status pool = Status::PoolFull("pool full: no block of 4096 bytes");
  EXPECT_TRUE(pool.IsResourceExhausted());
  EXPECT_TRUE(pool.IsPoolFull());
  EXPECT_FALSE(pool.IsTableFull());
  const Status table = Status::TableFull("group 3 is full and resizing is off");
  EXPECT_TRUE(table.IsResourceExhausted());
  EXPECT_TRUE(table.IsTableFull());
  EXPECT_FALSE(Status::ResourceExhausted("other").IsPoolFull());
  EXPECT_EQ(Status::NotFound().subcode(), Status::SubCode::kNone);
}

TEST(StatusTest, CopiesOwnTheirMessage) {
  Status a = Status::IOError("disk on fire");
  Status b = a;
  a = Status::NotFound();
  EXPECT_EQ(b.message(), "disk on fire");
  EXPECT_EQ(a.message(), "key not found");
  Status c = Status::OK();
  c = b;
  b = Status::OK();
  EXPECT_EQ(c.ToString(), "IOError: disk on fire");
  Status d = std::move(c);
  EXPECT_EQ(d.message(), "disk on fire");
  d = d;  // self-assignment keeps the message
  EXPECT_EQ(d.message(), "disk on fire");
}

TEST(ResultTest, HoldsAValueOrAStatus) {
  Result<int> r = 7;
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(*r, 7);
  Result<int> e = Status::NotFound();
  EXPECT_FALSE(e.ok());
  EXPECT_TRUE(e.status().IsNotFound());
}

}  // namespace
}  // namespace pmhash
