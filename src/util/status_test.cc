#include "pmhash/status.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <new>
#include <string>

// Counts this thread's heap allocations, so the test can show which Status paths
// allocate. Replacing the global operator new is allowed by the standard; it forwards to
// malloc, which the sanitizers still see (GCC cannot tell that delete's free matches).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
thread_local size_t t_allocations = 0;
}  // namespace

// Every form that pairs with the replaced deletes is replaced too: a nothrow new left to
// the sanitizer's runtime would be freed here with free() (std::stable_sort uses one).
void* operator new(size_t size) {
  ++t_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  ++t_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](size_t size, const std::nothrow_t& tag) noexcept {
  return operator new(size, tag);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace pmhash {
namespace {

size_t AllocationsOf(const std::function<void()>& fn) {
  const size_t before = t_allocations;
  fn();
  return t_allocations - before;
}

// Keeps the compiler from folding a Status away.
__attribute__((noinline)) Status Returned(Status s) { return s; }

TEST(StatusTest, CommonAnswersOfOperationsAllocateNothing) {
  EXPECT_EQ(AllocationsOf([] {
              Status s = Returned(Status::NotFound());
              EXPECT_TRUE(s.IsNotFound());
              Status copy = s;
              EXPECT_EQ(copy.message(), "key not found");
            }),
            0u);
  EXPECT_EQ(AllocationsOf([] {
              Status s = Returned(Status::AlreadyExists());
              EXPECT_TRUE(s.IsAlreadyExists());
              EXPECT_EQ(s.message(), "key already exists");
            }),
            0u);
  EXPECT_EQ(AllocationsOf([] { EXPECT_TRUE(Returned(Status::OK()).ok()); }), 0u);
  // A detailed message is copied: the cold path, and the control that the counter works.
  EXPECT_GT(AllocationsOf([] {
              Status s = Returned(Status::Corruption("table header at offset 4096 is damaged"));
              EXPECT_TRUE(s.IsCorruption());
            }),
            0u);
}

TEST(StatusTest, MessagesAndCodes) {
  EXPECT_EQ(Status::OK().ToString(), "OK");
  EXPECT_EQ(Status::OK().message(), "");
  EXPECT_EQ(Status::NotFound().ToString(), "NotFound: key not found");
  const Status s = Status::InvalidArgument(std::string("option x=") + "7 is out of range");
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
