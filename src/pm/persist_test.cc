#include "pm/persist.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace pmhash::pm {
namespace {

// A buffer of whole cache lines, aligned to a 256-byte media line so tests know which
// lines and media lines a range covers.
struct alignas(256) Lines {
  char bytes[64 * kCacheLine] = {};
};

std::unique_ptr<Persister> MakeOrDie(const PersistConfig& config) {
  std::unique_ptr<Persister> p;
  Status s = Persister::Make(config, &p);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return p;
}

PersistConfig Config(PersistMode mode, FlushInstruction flush = FlushInstruction::kAuto) {
  PersistConfig c;
  c.mode = mode;
  c.flush = flush;
  return c;
}

bool Supported(FlushInstruction f, const CpuFeatures& cpu) {
  switch (f) {
    case FlushInstruction::kClwb: return cpu.clwb;
    case FlushInstruction::kClflushopt: return cpu.clflushopt;
    case FlushInstruction::kClflush: return cpu.clflush;
    case FlushInstruction::kAuto: return true;
  }
  return false;
}

constexpr FlushInstruction kForced[] = {FlushInstruction::kClwb, FlushInstruction::kClflushopt,
                                        FlushInstruction::kClflush};

TEST(Persister, EverySupportedFlushInstructionRuns) {
  const CpuFeatures& cpu = CpuFeatures::Get();
  ASSERT_TRUE(cpu.clflush) << "every x86-64 CPU has clflush";
  int ran = 0;
  for (FlushInstruction f : kForced) {
    if (!Supported(f, cpu)) continue;
    SCOPED_TRACE(FlushInstructionName(f));
    auto p = MakeOrDie(Config(PersistMode::kAdr, f));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->flush_instruction(), f);
    Lines buf;
    p->Copy(buf.bytes + 60, "0123456789", 10);
    p->Persist(buf.bytes + 60, 130);  // [60, 190): three lines, each written back
    // What can be checked without a power failure is that each path runs (no SIGILL)
    // and is counted; that the bytes survive is the crash suite's job.
    EXPECT_EQ(p->Totals().bytes_stored, 10u);
    EXPECT_EQ(p->Totals().flushes, 3u);
    EXPECT_EQ(p->Totals().fences, 1u);
    ++ran;
  }
  EXPECT_GE(ran, 1);
}

TEST(Persister, AutoPicksTheBestInstructionTheCpuHas) {
  const CpuFeatures& cpu = CpuFeatures::Get();
  auto p = MakeOrDie(Config(PersistMode::kAdr));
  const FlushInstruction expected = cpu.clwb         ? FlushInstruction::kClwb
                                    : cpu.clflushopt ? FlushInstruction::kClflushopt
                                                     : FlushInstruction::kClflush;
  EXPECT_EQ(p->flush_instruction(), expected);
}

TEST(Persister, ForcingAnUnsupportedInstructionIsInvalidArgument) {
  // The real CPU: whatever it lacks is refused. On a CPU with all three instructions
  // (most today) this loop checks nothing; the faked CPUs below cover every case.
  for (FlushInstruction f : kForced) {
    if (Supported(f, CpuFeatures::Get())) continue;
    std::unique_ptr<Persister> p;
    EXPECT_TRUE(Persister::Make(Config(PersistMode::kAdr, f), &p).IsInvalidArgument());
  }
}

// Faked CPUs, each a subset of the real one, cover every fallback whatever this machine
// has: auto resolves to clwb, to clflushopt (no clwb) and to clflush (neither); forcing
// clwb or clflushopt on a CPU without it is refused with a message naming it; and every
// instruction a faked CPU accepts is then really executed and counted.
TEST(Persister, FakedCpusCoverEveryFallback) {
  const CpuFeatures& real = CpuFeatures::Get();
  struct FakedCpu {
    const char* name;
    bool clflushopt, clwb;
    FlushInstruction auto_picks;
  };
  const FakedCpu kCpus[] = {
      {"clflush only", false, false, FlushInstruction::kClflush},
      {"clflush + clflushopt", true, false, FlushInstruction::kClflushopt},
      {"clflush + clwb", false, true, FlushInstruction::kClwb},
      {"all three", true, true, FlushInstruction::kClwb},
  };
  int covered = 0;
  for (const FakedCpu& fake : kCpus) {
    SCOPED_TRACE(fake.name);
    CpuFeatures cpu;
    cpu.clflush = true;
    cpu.clflushopt = fake.clflushopt;
    cpu.clwb = fake.clwb;
    if ((cpu.clflushopt && !real.clflushopt) || (cpu.clwb && !real.clwb)) {
      continue;  // would claim more than the real CPU has (see Persister::Make)
    }
    ++covered;
    std::unique_ptr<Persister> p;
    ASSERT_TRUE(Persister::Make(Config(PersistMode::kAdr), cpu, &p).ok());
    EXPECT_EQ(p->flush_instruction(), fake.auto_picks) << "auto";
    for (FlushInstruction f : kForced) {
      SCOPED_TRACE(FlushInstructionName(f));
      p.reset();
      Status s = Persister::Make(Config(PersistMode::kAdr, f), cpu, &p);
      if (!Supported(f, cpu)) {
        EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
        EXPECT_NE(s.message().find(std::string("does not support ") + FlushInstructionName(f)),
                  std::string::npos)
            << s.ToString();
        EXPECT_EQ(p, nullptr);
        continue;
      }
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(p->flush_instruction(), f);
      Lines buf;
      p->Persist(buf.bytes + 60, 130);
      EXPECT_EQ(p->Totals().flushes, 3u);
      EXPECT_EQ(p->Totals().fences, 1u);
    }
  }
  // clflush only and clflush + clflushopt fit any CPU the project supports (every
  // x86-64 CPU with clflushopt; the real CPU's own clwb case is the fourth row).
  EXPECT_GE(covered, real.clflushopt ? 2 : 1);
}

TEST(Persister, WriteLatencyAboveTheLimitIsInvalidArgument) {
  PersistConfig c;
  c.write_latency_ns = 100001;
  std::unique_ptr<Persister> p;
  Status s = Persister::Make(c, &p);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("write_latency_ns"), std::string::npos) << s.ToString();
  c.write_latency_ns = 100000;
  EXPECT_TRUE(Persister::Make(c, &p).ok());
}

TEST(PersisterCounters, FlushesCountEveryLineOfAnUnalignedRange) {
  auto p = MakeOrDie(Config(PersistMode::kAdr));
  Lines buf;
  p->Flush(buf.bytes + 60, 130);  // [60, 190): lines 0, 1, 2
  EXPECT_EQ(p->Totals().flushes, 3u);
  p->Flush(buf.bytes + 64, 64);  // exactly one line
  EXPECT_EQ(p->Totals().flushes, 4u);
  p->Flush(buf.bytes + 63, 2);  // two bytes straddling a boundary: two lines
  EXPECT_EQ(p->Totals().flushes, 6u);
  p->Flush(buf.bytes, 0);  // nothing
  EXPECT_EQ(p->Totals().flushes, 6u);
  EXPECT_EQ(p->Totals().fences, 0u) << "Flush alone does not fence";
  // All of it fell in the first 256-byte media line: one media write.
  EXPECT_EQ(p->Totals().media_writes, 1u);
  p->Flush(buf.bytes + 256, 1);
  EXPECT_EQ(p->Totals().media_writes, 2u);
}

TEST(PersisterCounters, FencesAndBytesStored) {
  auto p = MakeOrDie(Config(PersistMode::kAdr));
  Lines buf;
  p->Fence();
  p->Fence();
  EXPECT_EQ(p->Totals().fences, 2u);
  p->Persist(buf.bytes, 8);
  EXPECT_EQ(p->Totals().fences, 3u);
  EXPECT_EQ(p->Totals().flushes, 1u);

  p->Store(reinterpret_cast<uint64_t*>(buf.bytes), uint64_t{0x1122334455667788});
  p->Store(reinterpret_cast<uint32_t*>(buf.bytes + 8), uint32_t{7});
  p->Store(reinterpret_cast<uint16_t*>(buf.bytes + 12), uint16_t{9});
  p->Store(reinterpret_cast<uint8_t*>(buf.bytes + 14), uint8_t{1});
  p->Copy(buf.bytes + 64, "abcdefghij", 10);
  p->Zero(buf.bytes + 128, 100);
  EXPECT_EQ(p->Totals().bytes_stored, 8u + 4 + 2 + 1 + 10 + 100);
  EXPECT_EQ(Persister::Load(reinterpret_cast<const uint64_t*>(buf.bytes)), 0x1122334455667788u);
  EXPECT_EQ(Persister::Load(reinterpret_cast<const uint32_t*>(buf.bytes + 8)), 7u);
  EXPECT_EQ(std::memcmp(buf.bytes + 64, "abcdefghij", 10), 0);

  p->NoteRead(buf.bytes, 3 * kCacheLine);
  p->NoteRedundantFlush();
  p->NoteRedundantFence();
  const PersistCounters c = p->Totals();
  EXPECT_EQ(c.lines_read, 3u);
  EXPECT_EQ(c.redundant_flushes, 1u);
  EXPECT_EQ(c.redundant_fences, 1u);
}

TEST(PersisterCounters, NoneModeCountsNoFlushOrFence) {
  auto p = MakeOrDie(Config(PersistMode::kNone));
  Lines buf;
  p->Persist(buf.bytes + 60, 130);
  p->Fence();
  p->Flush(buf.bytes, 64);
  EXPECT_EQ(p->Totals().flushes, 0u);
  EXPECT_EQ(p->Totals().fences, 0u);
  EXPECT_EQ(p->Totals().media_writes, 0u);
  // A store is still a store into PM (pm_bytes_written_per_op stays meaningful).
  p->Store(reinterpret_cast<uint64_t*>(buf.bytes), uint64_t{1});
  EXPECT_EQ(p->Totals().bytes_stored, 8u);
}

TEST(PersisterCounters, EadrModeCountsFencesNotFlushes) {
  auto p = MakeOrDie(Config(PersistMode::kEadr));
  Lines buf;
  p->Persist(buf.bytes + 60, 130);
  p->Flush(buf.bytes, 64);
  p->Fence();
  EXPECT_EQ(p->Totals().flushes, 0u);
  EXPECT_EQ(p->Totals().media_writes, 0u);
  EXPECT_EQ(p->Totals().fences, 2u);
}

TEST(PersisterCounters, CountFalseCountsNothing) {
  PersistConfig c;
  c.count = false;
  auto p = MakeOrDie(c);
  Lines buf;
  p->Store(reinterpret_cast<uint64_t*>(buf.bytes), uint64_t{5});
  p->Copy(buf.bytes + 8, "xyz", 3);
  p->Zero(buf.bytes + 64, 64);
  p->Persist(buf.bytes + 60, 130);
  p->Fence();
  p->NoteRead(buf.bytes, 4 * kCacheLine);
  p->NoteRedundantFlush();
  p->NoteRedundantFence();
  const PersistCounters t = p->Totals();
  EXPECT_EQ(t.flushes, 0u);
  EXPECT_EQ(t.fences, 0u);
  EXPECT_EQ(t.bytes_stored, 0u);
  EXPECT_EQ(t.media_writes, 0u);
  EXPECT_EQ(t.lines_read, 0u);
  EXPECT_EQ(t.redundant_flushes, 0u);
  EXPECT_EQ(t.redundant_fences, 0u);
  EXPECT_EQ(Persister::Load(reinterpret_cast<const uint64_t*>(buf.bytes)), 5u) << "still stored";
}

TEST(PersisterCounters, TotalsSumEveryThread) {
  auto p = MakeOrDie(Config(PersistMode::kAdr));
  std::vector<Lines> bufs(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        p->Store(reinterpret_cast<uint64_t*>(bufs[t].bytes), uint64_t(i));
        p->Persist(bufs[t].bytes, 8);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(p->Totals().flushes, 400u);
  EXPECT_EQ(p->Totals().fences, 400u);
  EXPECT_EQ(p->Totals().bytes_stored, 3200u);
}

TEST(PersisterCounters, EachPersisterCountsOnItsOwn) {
  auto a = MakeOrDie(Config(PersistMode::kAdr));
  auto b = MakeOrDie(Config(PersistMode::kAdr));
  Lines buf;
  a->Persist(buf.bytes, 1);
  EXPECT_EQ(a->Totals().flushes, 1u);
  EXPECT_EQ(b->Totals().flushes, 0u);
}

// Records everything a Persister reports.
class Recorder : public PersistObserver {
 public:
  struct Event {
    char kind;  // 's'tore, 'f'lush, 'F'ence
    const void* addr;
    size_t len;
    bool operator==(const Event&) const = default;
  };
  void OnStore(const void* addr, size_t len) override { events.push_back({'s', addr, len}); }
  void OnFlush(const void* addr, size_t len) override { events.push_back({'f', addr, len}); }
  void OnFence() override { events.push_back({'F', nullptr, 0}); }
  std::vector<Event> events;
};

TEST(PersisterObserver, SeesEveryStoreFlushAndFenceInOrder) {
  Recorder rec;
  PersistConfig c;
  c.observer = &rec;
  auto p = MakeOrDie(c);
  EXPECT_EQ(p->observer(), &rec);
  Lines buf;
  auto* word = reinterpret_cast<uint64_t*>(buf.bytes);
  p->Store(word, uint64_t{42});
  p->Copy(buf.bytes + 8, "abc", 3);
  p->Zero(buf.bytes + 100, 50);
  p->Flush(buf.bytes + 60, 130);
  p->Fence();
  p->Persist(word, 8);
  const std::vector<Recorder::Event> expected = {
      {'s', word, 8},          {'s', buf.bytes + 8, 3}, {'s', buf.bytes + 100, 50},
      {'f', buf.bytes + 60, 130}, {'F', nullptr, 0},   {'f', word, 8},
      {'F', nullptr, 0}};
  EXPECT_EQ(rec.events, expected);
  // The observer sees the stored bytes already written.
  EXPECT_EQ(*word, 42u);
}

// Publish is the commit of a persist sequence: the fence comes before the commit store
// (ordering what was flushed before it), then the store is flushed and fenced.
TEST(PersisterObserver, PublishFencesThenStoresThenPersists) {
  Recorder rec;
  PersistConfig c;
  c.observer = &rec;
  auto p = MakeOrDie(c);
  Lines buf;
  auto* word = reinterpret_cast<uint64_t*>(buf.bytes + 64);
  p->Copy(buf.bytes, "payload", 7);
  p->Flush(buf.bytes, 7);
  p->Publish(word, uint64_t{7});
  const std::vector<Recorder::Event> expected = {
      {'s', buf.bytes, 7}, {'f', buf.bytes, 7}, {'F', nullptr, 0},
      {'s', word, 8},      {'f', word, 8},      {'F', nullptr, 0}};
  EXPECT_EQ(rec.events, expected);
  EXPECT_EQ(*word, 7u);
}

TEST(PersisterObserver, SeesStoresEvenWithoutCounting) {
  Recorder rec;
  PersistConfig c;
  c.observer = &rec;
  c.count = false;
  auto p = MakeOrDie(c);
  Lines buf;
  p->Store(reinterpret_cast<uint32_t*>(buf.bytes), uint32_t{1});
  p->Persist(buf.bytes, 4);
  EXPECT_EQ(rec.events.size(), 3u);
}

TEST(PersisterLatency, EachMediaWriteWaitsAtLeastTheLatency) {
  PersistConfig c;
  c.write_latency_ns = 20000;  // 20 us
  auto p = MakeOrDie(c);
  EXPECT_EQ(p->write_latency_ns(), 20000u);
  std::vector<Lines> buf(7);  // 448 lines, 112 media lines
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < 100; ++i) p->Flush(buf[0].bytes + i * kMediaLine, 1);  // 100 media lines
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(p->Totals().flushes, 100u);
  EXPECT_EQ(p->Totals().media_writes, 100u);
  EXPECT_EQ(p->Totals().emulated_write_waits, 100u);
  // 100 x 20 us = 2 ms; a lower bound only (with slack for the TSC calibration), never
  // an upper one, so a loaded machine cannot fail it.
  EXPECT_GE(elapsed, std::chrono::microseconds(1800))
      << std::chrono::duration<double, std::micro>(elapsed).count() << " us";
}

}  // namespace
}  // namespace pmhash::pm

namespace pmhash::pm {
namespace {

// A page-aligned buffer for the media tests (the device's interleave is in 4 KiB chunks).
struct AlignedBuffer {
  explicit AlignedBuffer(size_t bytes) : size(bytes), bytes(static_cast<char*>(std::aligned_alloc(4096, bytes))) {
    std::memset(this->bytes, 0, bytes);
  }
  ~AlignedBuffer() { std::free(bytes); }
  size_t size;
  char* bytes;
};

PersistConfig Media(PersistMode mode) {
  PersistConfig c;
  c.mode = mode;
  return c;
}

TEST(PersisterConfig, BadValuesAreInvalidArgument) {
  struct Case {
    const char* fragment;
    PersistConfig config;
  };
  auto with = [](auto set) {
    PersistConfig c;
    set(c);
    return c;
  };
  const Case bad[] = {
      {"read_latency_ns", with([](PersistConfig& c) { c.read_latency_ns = 100001; })},
      {"write_latency_ns", with([](PersistConfig& c) { c.write_latency_ns = 4000000000u; })},
      {"needs the media model", with([](PersistConfig& c) {
         c.write_latency_ns = 100;
         c.media_model = false;
       })},
      {"persist mode none", with([](PersistConfig& c) {
         c.mode = PersistMode::kNone;
         c.write_latency_ns = 300;
       })},
      {"read_latency_ns: persist mode none", with([](PersistConfig& c) {
         c.mode = PersistMode::kNone;
         c.read_latency_ns = 300;
       })},
      {"atomic_abort_rate", with([](PersistConfig& c) { c.atomic_abort_rate = 1.5; })},
      {"atomic_abort_rate", with([](PersistConfig& c) { c.atomic_abort_rate = -0.1; })},
      {"atomic_abort_rate", with([](PersistConfig& c) { c.atomic_abort_rate = std::nan(""); })},
      {"dimms", with([](PersistConfig& c) { c.media.dimms = 0; })},
      {"interleave_bytes", with([](PersistConfig& c) { c.media.interleave_bytes = 5000; })},
      {"buffer_bytes", with([](PersistConfig& c) { c.media.buffer_bytes = 1ull << 31; })},
      {"cache_bytes", with([](PersistConfig& c) { c.media.cache_bytes = 1ull << 40; })},
  };
  for (const Case& c : bad) {
    std::unique_ptr<Persister> p;
    Status s = Persister::Make(c.config, &p);
    EXPECT_TRUE(s.IsInvalidArgument()) << c.fragment;
    EXPECT_NE(s.message().find(c.fragment), std::string::npos) << s.ToString();
    EXPECT_EQ(p, nullptr);
  }
  // The media config is not checked when the model is off (it is not used).
  PersistConfig off;
  off.media_model = false;
  off.media.dimms = 0;
  std::unique_ptr<Persister> p;
  EXPECT_TRUE(Persister::Make(off, &p).ok());
  EXPECT_FALSE(p->media_model());
}

TEST(PersisterMedia, AdrFlushesFeedTheDeviceAndPartialLinesCostReadModifyWrites) {
  PersistConfig c = Media(PersistMode::kAdr);
  c.media.dimms = 1;
  c.media.buffer_bytes = 64 * kMediaLine;
  auto p = MakeOrDie(c);
  AlignedBuffer r(1 << 20);
  // 65 media lines, one 64-byte line each: the 65th evicts the first, partly written.
  for (size_t i = 0; i <= 64; ++i) p->Flush(r.bytes + i * kMediaLine, 8);
  PersistCounters t = p->Totals();
  EXPECT_EQ(t.flushes, 65u);
  EXPECT_EQ(t.lines_written, 65u);
  EXPECT_EQ(t.media_writes, 65u);
  EXPECT_EQ(t.media_rmw_reads, 1u);
  // Whole media lines never need a read.
  for (size_t i = 0; i < 4 * 64; ++i) p->Flush(r.bytes + 512 * 1024 + i * kCacheLine, 1);
  t = p->Totals();
  EXPECT_EQ(t.media_writes, 65u + 64);
  EXPECT_EQ(t.media_rmw_reads, 1u + 64) << "the 64 partial entries left as the full ones came";
  p->DrainMedia();
  EXPECT_EQ(p->Totals().media_rmw_reads, 65u) << "the full entries left at the drain: no reads";
}

TEST(PersisterMedia, ThreadMediaWritesAreTheCallingThreadsAlone) {
  PersistConfig c = Media(PersistMode::kAdr);
  c.media.dimms = 1;
  auto p = MakeOrDie(c);
  AlignedBuffer r(1 << 20);
  EXPECT_EQ(p->ThreadMediaWrites(), 0u);
  p->Flush(r.bytes, 8);                    // a new media line: one media write
  p->Flush(r.bytes + kCacheLine, 8);       // the same media line: merged, free
  p->Flush(r.bytes + 4 * kMediaLine, 8);  // another: one more
  EXPECT_EQ(p->ThreadMediaWrites(), 2u);
  std::thread([&] {
    EXPECT_EQ(p->ThreadMediaWrites(), 0u) << "another thread starts from its own zero";
    p->Flush(r.bytes + 8 * kMediaLine, 8);
    EXPECT_EQ(p->ThreadMediaWrites(), 1u);
  }).join();
  EXPECT_EQ(p->ThreadMediaWrites(), 2u) << "the other thread's write is not this one's";
  EXPECT_EQ(p->Totals().media_writes, 3u);
  c.count = false;
  auto quiet = MakeOrDie(c);
  quiet->Flush(r.bytes + 12 * kMediaLine, 8);
  EXPECT_EQ(quiet->ThreadMediaWrites(), 0u) << "nothing is counted without counting";
}

TEST(PersisterMedia, AdrWriteBackIsAFlush) {
  auto p = MakeOrDie(Media(PersistMode::kAdr));
  Lines buf;
  p->WriteBack(buf.bytes + 60, 130);  // three lines
  const PersistCounters t = p->Totals();
  EXPECT_EQ(t.write_backs, 3u);
  EXPECT_EQ(t.flushes, 3u);
  EXPECT_EQ(t.media_writes, 1u);
  EXPECT_EQ(t.fences, 0u);
}

TEST(PersisterMedia, NoneModeModelsNoDeviceButCountsReads) {
  auto p = MakeOrDie(Media(PersistMode::kNone));
  Lines buf;
  p->Store(reinterpret_cast<uint64_t*>(buf.bytes), uint64_t{1});
  p->WriteBack(buf.bytes, 64);
  p->DrainMedia();
  p->BeginOp();
  p->NoteRead(buf.bytes, 128);
  p->EndOp(16);
  const PersistCounters t = p->Totals();
  EXPECT_FALSE(p->media_model());
  EXPECT_EQ(t.media_writes, 0u);
  EXPECT_EQ(t.lines_written, 0u);
  EXPECT_EQ(t.write_backs, 0u);
  EXPECT_EQ(t.lines_read, 2u);
  EXPECT_EQ(t.media_reads, 1u);
  EXPECT_EQ(t.user_bytes, 16u);
  EXPECT_EQ(t.ops, 1u);
}

// eadr: stores go to the cache model; a hot line rewritten many times costs one media
// write, when it finally leaves (here at the drain).
TEST(PersisterMedia, EadrHotLineCostsOneMediaWrite) {
  auto p = MakeOrDie(Media(PersistMode::kEadr));
  Lines buf;
  auto* word = reinterpret_cast<uint64_t*>(buf.bytes);
  for (uint64_t i = 0; i < 100000; ++i) p->Store(word, i);
  EXPECT_EQ(p->Totals().media_writes, 0u);
  EXPECT_EQ(p->Totals().lines_written, 0u);
  EXPECT_EQ(p->Totals().flushes, 0u);
  p->DrainMedia();
  EXPECT_EQ(p->Totals().media_writes, 1u);
  EXPECT_EQ(p->Totals().lines_written, 1u);
  EXPECT_EQ(p->Totals().media_rmw_reads, 1u) << "one line of four";
}

TEST(PersisterMedia, EadrWriteBackWritesThroughAtOnce) {
  for (bool instruction : {true, false}) {
    SCOPED_TRACE(instruction ? "clwb" : "model only");
    PersistConfig c = Media(PersistMode::kEadr);
    c.eadr_write_back_instruction = instruction;
    auto p = MakeOrDie(c);
    Lines buf;
    p->Copy(buf.bytes, "0123456789abcdef", 16);
    p->Copy(buf.bytes + 64, "0123456789abcdef", 16);
    p->WriteBack(buf.bytes, 128);
    PersistCounters t = p->Totals();
    EXPECT_EQ(t.write_backs, 2u);
    EXPECT_EQ(t.lines_written, 2u);
    EXPECT_EQ(t.media_writes, 1u) << "two lines of one media line, back to back";
    EXPECT_EQ(t.flushes, 0u) << "not a durability flush";
    p->WriteBack(buf.bytes, 128);  // clean now: nothing reaches the device
    t = p->Totals();
    EXPECT_EQ(t.write_backs, 4u);
    EXPECT_EQ(t.lines_written, 2u);
    p->DrainMedia();
    EXPECT_EQ(p->Totals().media_writes, 1u) << "nothing left dirty";
  }
}

// Without a cache model (cache_bytes = 0) every stored line goes to the device at once.
TEST(PersisterMedia, EadrWithoutCacheWritesThrough) {
  PersistConfig c = Media(PersistMode::kEadr);
  c.media.cache_bytes = 0;
  auto p = MakeOrDie(c);
  Lines buf;
  p->Zero(buf.bytes, 256);
  p->Store(reinterpret_cast<uint64_t*>(buf.bytes + 256), uint64_t{1});
  p->Store(reinterpret_cast<uint64_t*>(buf.bytes + 264), uint64_t{1});  // the same line again
  EXPECT_EQ(p->Totals().lines_written, 0u) << "the thread's stored lines wait in a batch";
  p->DrainMedia();
  const PersistCounters t = p->Totals();
  EXPECT_EQ(t.lines_written, 5u) << "consecutive stores to one line count once";
  EXPECT_EQ(t.media_writes, 2u);
}

// Spash's observation 2 (its Fig. 1a): cold 256-byte writes left to the cache leave line
// by line at scattered times and cost about a media write per line; written back at once
// they cost one per media line. A random order of distinct media lines of a 16 MiB region,
// a 1 MiB cache: a line's siblings are evicted thousands of evictions apart, far more than
// the device buffers hold (6 x 64 media lines).
TEST(PersisterMedia, EadrEvictionsScatterLinesAndWriteBacksKeepThemTogether) {
  constexpr size_t kRegion = 16 << 20, kWrites = 16384;
  std::vector<size_t> order(kRegion / kMediaLine);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  order.resize(kWrites);
  uint64_t media_writes[2];
  for (bool write_back : {false, true}) {
    PersistConfig c = Media(PersistMode::kEadr);
    c.media.cache_bytes = 1 << 20;
    auto p = MakeOrDie(c);
    AlignedBuffer r(kRegion);
    for (size_t m : order) {
      p->Zero(r.bytes + m * kMediaLine, kMediaLine);
      if (write_back) p->WriteBack(r.bytes + m * kMediaLine, kMediaLine);
    }
    p->DrainMedia();
    media_writes[write_back] = p->Totals().media_writes;
    EXPECT_EQ(p->Totals().lines_written, 4 * kWrites);
  }
  EXPECT_EQ(media_writes[1], kWrites);
  EXPECT_GT(media_writes[0], 3 * kWrites) << "evictions of a media line's four lines "
                                             "rarely fall together";
}

TEST(PersisterMedia, WriteLatencyIsChargedOnlyForMediaWrites) {
  for (PersistMode mode : {PersistMode::kAdr, PersistMode::kEadr}) {
    SCOPED_TRACE(PersistModeName(mode));
    PersistConfig c = Media(mode);
    c.write_latency_ns = 1;
    c.media.cache_bytes = 0;  // eadr: stores reach the device at once
    auto p = MakeOrDie(c);
    AlignedBuffer r(1 << 16);
    for (int pass = 0; pass < 3; ++pass) {
      for (size_t at = 0; at < 1024; at += 16) {
        p->Copy(r.bytes + at, "0123456789abcdef", 16);
        p->Persist(r.bytes + at, 16);
      }
    }
    p->DrainMedia();  // eadr: the last batch of stored lines (no latency charged there)
    const PersistCounters t = p->Totals();
    EXPECT_EQ(t.media_writes, 4u);
    EXPECT_EQ(t.emulated_write_waits, 4u) << "buffer hits are free";
    // adr: every flush; eadr: every stored line, consecutive stores to one line once.
    EXPECT_EQ(t.lines_written, mode == PersistMode::kAdr ? 3u * 64 : 3u * 16);
  }
}

TEST(PersisterReads, MediaReadsAreCountedOncePerOperation) {
  auto p = MakeOrDie(Media(PersistMode::kAdr));
  AlignedBuffer r(1 << 16);
  p->BeginOp();
  p->NoteRead(r.bytes, 64);        // line 0 of media line 0
  p->NoteRead(r.bytes + 192, 64);  // line 3 of media line 0: free
  p->NoteRead(r.bytes + 200, 100);  // lines 3, 4: media lines 0 and 1
  p->NoteRead(r.bytes + 4096, 1);
  p->NoteRead(r.bytes + 8, 8);  // line 0 again: nothing new
  p->EndOp(0);
  PersistCounters t = p->Totals();
  EXPECT_EQ(t.lines_read, 4u) << "lines 0, 3, 4 and 64, each once";
  EXPECT_EQ(t.media_reads, 3u);
  p->BeginOp();
  p->NoteRead(r.bytes, 8);  // a new operation reads media line 0 again
  p->EndOp(0);
  t = p->Totals();
  EXPECT_EQ(t.lines_read, 5u);
  EXPECT_EQ(t.media_reads, 4u);
  EXPECT_EQ(t.ops, 2u);
}

// A pipelined batch: two lookups interleave their reads; each has its own OpReads, so each
// counts its media lines once, and the same media line read by both counts twice (two
// operations). One per-thread set reset per BeginOp would count 4 (A's lines forgotten).
TEST(PersisterReads, InterleavedOperationsDeduplicateSeparately) {
  auto p = MakeOrDie(Media(PersistMode::kAdr));
  AlignedBuffer r(1 << 16);
  OpReads a, b;
  p->BeginOp();
  p->BeginOp();
  p->NoteRead(r.bytes, 64, &a);
  p->NoteRead(r.bytes + 4096, 64, &b);
  p->NoteRead(r.bytes + 64, 64, &a);
  p->NoteRead(r.bytes + 4096 + 64, 64, &b);
  p->NoteRead(r.bytes + 128, 64, &a);
  p->NoteRead(r.bytes, 64, &b);
  p->EndOp(0);
  p->EndOp(0);
  const PersistCounters t = p->Totals();
  EXPECT_EQ(t.lines_read, 6u);
  EXPECT_EQ(t.media_reads, 3u) << "a: media line 0; b: media lines 16 and 0";
}

TEST(PersisterReads, ReadLatencyIsChargedPerMediaReadAndAPrefetchCanHideIt) {
  PersistConfig c = Media(PersistMode::kAdr);
  c.read_latency_ns = 2000;
  auto p = MakeOrDie(c);
  AlignedBuffer r(1 << 16);
  p->BeginOp();
  p->NoteRead(r.bytes, 256);  // one media line: one wait
  p->NoteRead(r.bytes, 64);   // again in the same op: free
  p->EndOp(0);
  PersistCounters t = p->Totals();
  EXPECT_EQ(t.emulated_read_waits, 1u);
  EXPECT_EQ(t.emulated_reads_hidden, 0u);
  // Prefetched long enough before the read: nothing left to wait (the wait below is at
  // least the latency, so this cannot fail on a slow machine).
  p->BeginOp();
  p->Prefetch(r.bytes + 1024);
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(5);
  while (std::chrono::steady_clock::now() < until) {
  }
  p->NoteRead(r.bytes + 1024, 64);
  p->NoteRead(r.bytes + 2048, 64);  // not prefetched: waits
  p->EndOp(0);
  t = p->Totals();
  EXPECT_EQ(t.emulated_read_waits, 3u);
  EXPECT_EQ(t.emulated_reads_hidden, 1u);
  EXPECT_EQ(t.media_reads, 3u);
}

TEST(PersisterOps, EndOpReportsUserBytesAndCountsOps) {
  auto p = MakeOrDie(Media(PersistMode::kAdr));
  p->BeginOp();
  p->EndOp(16);
  p->BeginOp();
  p->EndOp(40);
  EXPECT_EQ(p->Totals().user_bytes, 56u);
  EXPECT_EQ(p->Totals().ops, 2u);
}

// The same sequential pattern (16-byte writes, each persisted, through a 1 MiB region)
// done by one thread, then split over two: thread t takes the 64-byte lines with
// index % 2 == t, and the two meet at a barrier every 16 KiB. The device model is shared,
// so both runs cost exactly one media write per 256 bytes: between the barriers the two
// threads' writes to one media line are at most 16 KiB apart, and each DIMM's 16 KiB
// buffer holds all of that (4 KiB interleave over 6 DIMMs). Tolerance: none needed; a
// model per thread would count two media writes per media line with two threads.
TEST(PersisterMedia, SequentialWritesCostTheSameOverOneOrTwoThreads) {
  constexpr size_t kRegion = 1 << 20, kChunk = 16 << 10;
  for (PersistMode mode : {PersistMode::kAdr, PersistMode::kEadr}) {
    SCOPED_TRACE(PersistModeName(mode));
    uint64_t media_writes[3] = {};
    for (int threads : {1, 2}) {
      PersistConfig c = Media(mode);
      c.media.cache_bytes = 0;  // eadr: the device model alone (the cache is tested below)
      auto p = MakeOrDie(c);
      AlignedBuffer r(kRegion);
      std::barrier sync(threads);
      auto work = [&](int t) {
        for (size_t chunk = 0; chunk < kRegion; chunk += kChunk) {
          for (size_t line = chunk; line < chunk + kChunk; line += kCacheLine) {
            if ((line / kCacheLine) % threads != static_cast<size_t>(t)) continue;
            for (size_t at = line; at < line + kCacheLine; at += 16) {
              p->Copy(r.bytes + at, "0123456789abcdef", 16);
              p->Persist(r.bytes + at, 16);
            }
          }
          sync.arrive_and_wait();
        }
      };
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
      for (auto& th : pool) th.join();
      p->DrainMedia();  // eadr: the threads' last batches of stored lines
      media_writes[threads] = p->Totals().media_writes;
    }
    EXPECT_EQ(media_writes[1], kRegion / kMediaLine);
    EXPECT_EQ(media_writes[2], media_writes[1]);
  }
}

// With the cache model in front (eadr), the lines leave in eviction order, which depends on
// how the two threads' stores interleave in each set. Same pattern as above, a 256 KiB
// cache, drained at the end. Tolerance 2%: the interleaving moves a line's eviction by a
// few places, which can split or join a pair of a media line's lines in the device buffer.
TEST(PersisterMedia, EadrCachedWritesCostAboutTheSameOverOneOrTwoThreads) {
  constexpr size_t kRegion = 1 << 20, kChunk = 16 << 10;
  uint64_t media_writes[3] = {};
  for (int threads : {1, 2}) {
    PersistConfig c = Media(PersistMode::kEadr);
    c.media.cache_bytes = 256 << 10;
    auto p = MakeOrDie(c);
    AlignedBuffer r(kRegion);
    std::barrier sync(threads);
    auto work = [&](int t) {
      for (size_t chunk = 0; chunk < kRegion; chunk += kChunk) {
        for (size_t line = chunk; line < chunk + kChunk; line += kCacheLine) {
          if ((line / kCacheLine) % threads != static_cast<size_t>(t)) continue;
          for (size_t at = line; at < line + kCacheLine; at += 16) {
            p->Copy(r.bytes + at, "0123456789abcdef", 16);
          }
        }
        sync.arrive_and_wait();
      }
    };
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
    for (auto& th : pool) th.join();
    p->DrainMedia();
    media_writes[threads] = p->Totals().media_writes;
    EXPECT_EQ(p->Totals().lines_written, kRegion / kCacheLine);
  }
  const double ratio = static_cast<double>(media_writes[2]) / media_writes[1];
  EXPECT_NEAR(ratio, 1.0, 0.02) << media_writes[1] << " vs " << media_writes[2];
}

TEST(PersisterAtomic, AbortsAtTheConfiguredRateAndLeaveNoStoresBehind) {
  PersistConfig c = Media(PersistMode::kEadr);
  c.atomic_abort_rate = 0.3;
  c.atomic_seed = 12345;
  auto p = MakeOrDie(c);
  Lines buf;
  auto* words = reinterpret_cast<uint64_t*>(buf.bytes);
  constexpr int kAttempts = 4000;
  int began = 0, committed = 0, aborted_at_end = 0;
  for (int i = 0; i < kAttempts; ++i) {
    const uint64_t before[3] = {words[0], words[8], words[16]};
    if (p->BeginAtomic() != AtomicOutcome::kStarted) continue;
    ++began;
    p->Store(&words[0], uint64_t(i + 1));
    p->Copy(&words[8], &words[0], 8);
    p->Zero(&words[16], 8);
    p->Store(&words[16], uint64_t(i + 7));
    if (p->EndAtomic() == AtomicOutcome::kCommitted) {
      ++committed;
      EXPECT_EQ(words[0], uint64_t(i + 1));
      EXPECT_EQ(words[8], uint64_t(i + 1));
      EXPECT_EQ(words[16], uint64_t(i + 7));
    } else {
      ++aborted_at_end;
      EXPECT_EQ(words[0], before[0]) << i;
      EXPECT_EQ(words[8], before[1]) << i;
      EXPECT_EQ(words[16], before[2]) << i;
    }
  }
  const double abort_rate = 1.0 - static_cast<double>(committed) / kAttempts;
  // Seeded, so the count is the same every run; the bound is 5 binomial sigmas around 0.3.
  EXPECT_NEAR(abort_rate, 0.3, 5 * std::sqrt(0.3 * 0.7 / kAttempts));
  EXPECT_GT(kAttempts - began, 0) << "aborts at the start";
  EXPECT_GT(aborted_at_end, 0) << "aborts at the commit";
}

TEST(PersisterAtomic, NestedOrExplicitAbortUndoesTheRegion) {
  auto p = MakeOrDie(Media(PersistMode::kEadr));
  Lines buf;
  auto* w = reinterpret_cast<uint64_t*>(buf.bytes);
  ASSERT_EQ(p->BeginAtomic(), AtomicOutcome::kStarted);
  p->Store(w, uint64_t{5});
  EXPECT_EQ(p->BeginAtomic(), AtomicOutcome::kAborted) << "nested";
  EXPECT_EQ(*w, 0u);
  EXPECT_EQ(p->EndAtomic(), AtomicOutcome::kAborted) << "no region open";
  ASSERT_EQ(p->BeginAtomic(), AtomicOutcome::kStarted);
  p->Store(w, uint64_t{6});
  p->AbortAtomic();
  EXPECT_EQ(*w, 0u);
  ASSERT_EQ(p->BeginAtomic(), AtomicOutcome::kStarted);
  p->Store(w, uint64_t{7});
  EXPECT_EQ(p->EndAtomic(), AtomicOutcome::kCommitted);
  EXPECT_EQ(*w, 7u);
  // eadr: the aborted regions' lines never became dirty in the cache model; the committed
  // one did.
  p->DrainMedia();
  EXPECT_EQ(p->Totals().lines_written, 1u);
}

// The inline path (adr, nothing counted, observed or modelled: every timed run) stores,
// and steps aside while an atomic region is open, whose abort must find the old bytes.
TEST(PersisterAtomic, UnobservedStoresStoreAndAreUndoneInAnAbortedRegion) {
  PersistConfig c = Config(PersistMode::kAdr);
  c.count = false;
  c.media_model = false;
  auto p = MakeOrDie(c);
  Lines buf;
  auto* w = reinterpret_cast<uint64_t*>(buf.bytes);
  p->Store(w, uint64_t{0x1122334455667788});
  p->Store(reinterpret_cast<uint32_t*>(buf.bytes + 8), uint32_t{7});
  p->Store(reinterpret_cast<uint16_t*>(buf.bytes + 12), uint16_t{9});
  p->Publish(reinterpret_cast<uint8_t*>(buf.bytes + 14), uint8_t{3});
  EXPECT_EQ(*w, 0x1122334455667788u);
  EXPECT_EQ(*reinterpret_cast<uint32_t*>(buf.bytes + 8), 7u);
  EXPECT_EQ(*reinterpret_cast<uint16_t*>(buf.bytes + 12), 9u);
  EXPECT_EQ(static_cast<uint8_t>(buf.bytes[14]), 3u);
  ASSERT_EQ(p->BeginAtomic(), AtomicOutcome::kStarted);
  p->Store(w, uint64_t{5});
  EXPECT_EQ(*w, 5u);
  p->AbortAtomic();
  EXPECT_EQ(*w, 0x1122334455667788u) << "the region's store undone";
  ASSERT_EQ(p->BeginAtomic(), AtomicOutcome::kStarted);
  p->Store(w, uint64_t{6});
  EXPECT_EQ(p->EndAtomic(), AtomicOutcome::kCommitted);
  EXPECT_EQ(*w, 6u);
}

// Regions of several threads run one at a time: counters incremented inside regions by
// plain read-modify-write are never lost.
TEST(PersisterAtomic, RegionsOfThreadsAreSerialized) {
  PersistConfig c = Media(PersistMode::kEadr);
  c.atomic_abort_rate = 0.2;
  auto p = MakeOrDie(c);
  Lines buf;
  auto* counter = reinterpret_cast<uint64_t*>(buf.bytes);
  constexpr int kThreads = 4, kIncrements = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements;) {
        if (p->BeginAtomic() != AtomicOutcome::kStarted) continue;
        p->Store(counter, Persister::Load(counter) + 1);
        if (p->EndAtomic() == AtomicOutcome::kCommitted) ++i;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(*counter, uint64_t{kThreads * kIncrements});
}

}  // namespace
}  // namespace pmhash::pm
