#include "bench/micro.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <bit>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>

#include "bench/summary.h"
#include "pm/persist.h"
#include "pm/pool.h"

namespace pmhash::bench {

namespace {

// The measured loop. noinline so that both configurations run the same machine code.
__attribute__((noinline)) void StoreAndPersist(pm::Persister& p, char* base,
                                               const std::vector<uint64_t>& offsets,
                                               uint64_t iterations) {
  const uint64_t mask = offsets.size() - 1;
  for (uint64_t i = 0; i < iterations; ++i) {
    auto* word = reinterpret_cast<uint64_t*>(base + offsets[i & mask]);
    p.Store(word, i);
    p.Persist(word, sizeof(*word));
  }
}

// CPU time of this thread: on a shared machine, time spent descheduled would otherwise
// land on whichever configuration happened to be running.
double ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4f", v);
  return buf;
}

Status WriteJson(const std::string& path, const PersistMicroConfig& config,
                 const PersistMicroResult& r) {
  std::string j = "{\n  \"benchmark\": \"persist-micro\",\n  \"config\": {";
  j += "\"iterations\": " + std::to_string(config.iterations);
  j += ", \"repetitions\": " + std::to_string(config.repetitions);
  j += ", \"region_bytes\": " + std::to_string(config.region_bytes);
  j += ", \"flush\": " + JsonString(r.flush_instruction);
  j += ", \"seed\": " + std::to_string(config.seed);
  j += ", \"clock\": \"thread_cputime\"},\n";
  j += "  \"machine\": {\"cpu\": " + JsonString(CpuModel());
#ifdef NDEBUG
  j += ", \"build\": \"release\"},\n";
#else
  j += ", \"build\": \"debug\"},\n";
#endif
  j += "  \"results\": [\n";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const PersistMicroRow& row = r.rows[i];
    j += "    {\"write_latency_ns\": " + std::to_string(row.write_latency_ns);
    j += ", \"counters\": " + std::string(row.counters ? "true" : "false");
    j += ", \"ns_per_op\": " + Num(row.median_ns_per_op);
    j += ", \"ns_per_op_runs\": [";
    for (size_t k = 0; k < row.ns_per_op.size(); ++k) {
      j += (k ? ", " : "") + Num(row.ns_per_op[k]);
    }
    j += "]";
    // Counters off cannot report what they did not count: null, not a made-up number.
    j += ", \"flushes_per_op\": " + (row.counters ? Num(row.flushes_per_op) : "null");
    j += ", \"fences_per_op\": " + (row.counters ? Num(row.fences_per_op) : "null");
    j += ", \"bytes_stored_per_op\": " + (row.counters ? Num(row.bytes_stored_per_op) : "null");
    j += "}";
    j += i + 1 < r.rows.size() ? ",\n" : "\n";
  }
  j += "  ],\n  \"overhead\": [";
  for (size_t i = 0; i < r.overhead_ratio.size(); ++i) {
    j += (i ? ", " : "") + std::string("{\"write_latency_ns\": ") +
         std::to_string(r.rows[2 * i].write_latency_ns) +
         ", \"ratio\": " + Num(r.overhead_ratio[i]) + "}";
  }
  j += "]\n}\n";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return Status::IOError("cannot write " + path);
  const bool ok = std::fwrite(j.data(), 1, j.size(), f) == j.size();
  if (std::fclose(f) != 0 || !ok) return Status::IOError("cannot write " + path);
  return Status::OK();
}

int Fail(int code, const std::string& message) {
  std::string one = message;
  std::replace(one.begin(), one.end(), '\n', ' ');
  std::fprintf(stderr, "pmhash: %s\n", one.c_str());
  return code;
}

}  // namespace

Status MeasurePersistMicro(const PersistMicroConfig& config, PersistMicroResult* result) {
  if (config.iterations == 0) return Status::InvalidArgument("iterations must be at least 1");
  if (config.repetitions < 1 || config.repetitions > 1000) {
    return Status::InvalidArgument("repetitions must be between 1 and 1000");
  }
  if (config.write_latency_ns > 100000) {
    return Status::InvalidArgument("write latency must be at most 100000 ns");
  }
  std::unique_ptr<pm::Pool> pool;
  PMHASH_RETURN_IF_ERROR(pm::Pool::CreateDram("micro", config.region_bytes, &pool));

  // Precomputed pseudo-random lines of the heap (a power of two of them, reused
  // cyclically), so the loop does no random-number work.
  const uint64_t first_line = pool->heap_offset() / pm::kCacheLine;
  const uint64_t lines = pool->heap_size() / pm::kCacheLine;
  const uint64_t n = std::min<uint64_t>(std::bit_floor(config.iterations), 1u << 20);
  std::vector<uint64_t> offsets(n);
  std::mt19937_64 rng(config.seed);
  for (uint64_t& o : offsets) o = (first_line + rng() % lines) * pm::kCacheLine;

  PersistMicroResult r;
  std::vector<uint32_t> latencies = {0};
  if (config.write_latency_ns > 0) latencies.push_back(config.write_latency_ns);
  for (uint32_t latency : latencies) {
    PersistMicroRow on, off;
    on.write_latency_ns = off.write_latency_ns = latency;
    on.counters = true;
    off.counters = false;
    // One untimed warm-up run (page faults, caches, TSC calibration).
    for (int rep = -1; rep < config.repetitions; ++rep) {
      for (int k = 0; k < 2; ++k) {
        // Alternate which configuration goes first, to cancel drift.
        const bool count = (rep & 1) ? k == 1 : k == 0;
        pm::PersistConfig pc;
        pc.mode = PersistMode::kAdr;
        pc.flush = config.flush;
        pc.write_latency_ns = latency;
        pc.count = count;
        std::unique_ptr<pm::Persister> p;
        PMHASH_RETURN_IF_ERROR(pm::Persister::Make(pc, &p));
        r.flush_instruction = FlushInstructionName(p->flush_instruction());
        const uint64_t iters =
            rep < 0 ? std::min<uint64_t>(config.iterations, n) : config.iterations;
        const double t0 = ThreadCpuNs();
        StoreAndPersist(*p, pool->base(), offsets, iters);
        const double t1 = ThreadCpuNs();
        if (rep < 0) continue;
        PersistMicroRow& row = count ? on : off;
        row.ns_per_op.push_back((t1 - t0) / static_cast<double>(iters));
        if (count) {
          const PersistCounters c = p->Totals();
          row.flushes_per_op = static_cast<double>(c.flushes) / iters;
          row.fences_per_op = static_cast<double>(c.fences) / iters;
          row.bytes_stored_per_op = static_cast<double>(c.bytes_stored) / iters;
        }
      }
    }
    on.median_ns_per_op = Median(on.ns_per_op);
    off.median_ns_per_op = Median(off.ns_per_op);
    r.overhead_ratio.push_back(off.median_ns_per_op > 0 ? on.median_ns_per_op / off.median_ns_per_op
                                                        : 0);
    r.rows.push_back(std::move(on));
    r.rows.push_back(std::move(off));
  }
  *result = std::move(r);
  return Status::OK();
}

int RunPersistMicroBench(int argc, char** argv) {
  CLI::App app{"Persistence micro-benchmark: the cost of the per-thread persistence counters "
               "on a flush-heavy loop (store 8 bytes + persist its line at random 64-byte lines "
               "of a DRAM pool), counters on vs off, interleaved repetitions, median ns/op."};
  app.name("pmhash bench --micro persist");
  PersistMicroConfig config;
  std::string micro, flush = "auto", json;
  app.add_option("--micro", micro, "Which micro-benchmark (only: persist)")->required();
  app.add_option("--iterations", config.iterations, "Store+persist pairs per run (default 2000000)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  app.add_option("--repetitions", config.repetitions,
                 "Runs per configuration, interleaved on/off (default 5)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--write-latency-ns", config.write_latency_ns,
                 "Also measure with this emulated PM write latency per flushed line (0..100000)")
      ->check(CLI::Range(0u, 100000u));
  app.add_option("--flush", flush, "Flush instruction: auto, clwb, clflushopt, clflush");
  app.add_option("--seed", config.seed, "Seed of the pseudo-random line offsets");
  app.add_option("--json", json, "Also write the figures to this JSON file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return Fail(2, e.what());
  }
  if (micro != "persist") {
    return Fail(2, "--micro: unknown micro-benchmark '" + micro + "' (known: persist)");
  }
  if (!ParseFlushInstruction(flush, &config.flush)) {
    return Fail(2, "--flush: invalid instruction '" + flush +
                       "' (expected auto, clwb, clflushopt or clflush)");
  }
#ifndef NDEBUG
  std::fprintf(stderr, "pmhash: warning: this is not a release build; timings are not "
                       "representative\n");
#endif
  PersistMicroResult r;
  Status s = MeasurePersistMicro(config, &r);
  if (!s.ok()) return Fail(1, std::string(s.message()));

  std::printf("persist micro-benchmark: %llu x (Store 8 B + Persist) at random lines of a "
              "%llu MiB DRAM pool, flush %s, %d runs each (median of thread CPU time)\n",
              static_cast<unsigned long long>(config.iterations),
              static_cast<unsigned long long>(config.region_bytes >> 20),
              r.flush_instruction.c_str(), config.repetitions);
  std::printf("%-10s  %-8s  %10s  %10s  %10s  %12s  %9s\n", "latency", "counters", "ns/op",
              "flushes/op", "fences/op", "bytes/op", "overhead");
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const PersistMicroRow& row = r.rows[i];
    char lat[32], over[32];
    std::snprintf(lat, sizeof(lat), "%u ns", row.write_latency_ns);
    if (row.counters) {
      std::snprintf(over, sizeof(over), "%+.2f%%", (r.overhead_ratio[i / 2] - 1) * 100);
      std::printf("%-10s  %-8s  %10.2f  %10.3f  %10.3f  %12.3f  %9s\n", lat, "on",
                  row.median_ns_per_op, row.flushes_per_op, row.fences_per_op,
                  row.bytes_stored_per_op, over);
    } else {
      std::printf("%-10s  %-8s  %10.2f  %10s  %10s  %12s  %9s\n", lat, "off",
                  row.median_ns_per_op, "-", "-", "-", "(base)");
    }
  }
  if (!json.empty()) {
    s = WriteJson(json, config, r);
    if (!s.ok()) return Fail(1, std::string(s.message()));
  }
  return 0;
}

}  // namespace pmhash::bench
