#include "pm/persist.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
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

  p->NoteRead(3);
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
  p->NoteRead(4);
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

TEST(PersisterLatency, EachFlushedLineWaitsAtLeastTheLatency) {
  PersistConfig c;
  c.write_latency_ns = 20000;  // 20 us
  auto p = MakeOrDie(c);
  EXPECT_EQ(p->write_latency_ns(), 20000u);
  std::vector<Lines> buf(2);  // 128 lines
  const auto t0 = std::chrono::steady_clock::now();
  p->Flush(buf[0].bytes, 100 * kCacheLine);  // 100 lines
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(p->Totals().flushes, 100u);
  // 100 x 20 us = 2 ms; a lower bound only (with slack for the TSC calibration), never
  // an upper one, so a loaded machine cannot fail it.
  EXPECT_GE(elapsed, std::chrono::microseconds(1800))
      << std::chrono::duration<double, std::micro>(elapsed).count() << " us";
}

}  // namespace
}  // namespace pmhash::pm
