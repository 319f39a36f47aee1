// Process kills through the public API (docs/testing.md): a forked worker runs random
// operations on a file pool from one or more threads and reports each one through a pipe
// (its intent, then its acknowledgement); the parent kills it with SIGKILL at a random
// moment, and sometimes kills the next open too (recovery), then reopens the pool in a
// child with a deadline and checks it against the acknowledged operations: every one is
// there, each thread's interrupted one is all-or-nothing (its key holds the old or the new
// value, never a torn one), nothing else changed, the engine's invariants hold and no
// block leaked. The records and the verifier are shared by every process test.
#pragma once

#include <limits.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "pmhash/options.h"
#include "support/harness.h"

namespace pmhash::testing {

// One message from a worker, written with one write(2) (atomic: at most PIPE_BUF bytes),
// so the threads of a worker share one pipe.
struct Record {
  enum Type : uint8_t {
    kIntent,    // the op it is about to run
    kAck,       // the op it ran; code = its Status::Code
    kOpening,   // it starts opening the pool
    kOpened,    // the pool is open
    kError,     // it gives up: the message in bytes
    kNote,      // the message of the thread's next kAck, if that is an error
  };
  static constexpr size_t kMaxBytes = 512;

  uint8_t type = kIntent;
  uint8_t kind = 0;    // Op::Kind
  uint8_t code = 0;    // Status::Code (kAck)
  uint8_t thread = 0;  // the worker thread
  uint16_t key_len = 0;
  uint16_t value_len = 0;
  char bytes[kMaxBytes];  // key, then value

  static Record Of(Type type, int thread, const Op& op, Status::Code code = Status::Code::kOk);
  static Record Message(Type type, const std::string& text, int thread = 0);
  size_t size() const { return offsetof(Record, bytes) + key_len + value_len; }
  Op ToOp() const;
};
static_assert(sizeof(Record) <= PIPE_BUF, "a record is written atomically");

// Writes a record to `fd` with one write(2); false if the pipe broke.
bool WriteRecord(int fd, const Record& r);

// The read end of a worker's pipe, cut into records.
class RecordReader {
 public:
  explicit RecordReader(int fd) : fd_(fd) {}
  // Reads what arrives within `timeout_ms` (then, without waiting, what is left); appends
  // whole records to *out. False at end of file (every writer gone).
  bool Read(int timeout_ms, std::vector<Record>* out);
  // Everything until end of file.
  void Drain(std::vector<Record>* out);

 private:
  int fd_;
  std::string buffer_;
};

// The random ops of one worker thread: keys of its own (8-byte inline ones and 12-40-byte
// ones, `keys` in all), values inline (8 bytes), short out of line (9-60) and long
// (100-300), every value distinct; Insert, Put, Update and Delete.
class OpStream {
 public:
  OpStream(uint64_t seed, int thread, uint64_t keys);
  Op Next();

 private:
  std::mt19937_64 rng_;
  int thread_;
  uint64_t keys_;
  uint64_t n_ = 0;
};

// The acknowledged state: the model of every acknowledged op (in the order each thread
// acknowledged them; threads use disjoint keys), and each thread's op in flight.
class Acked {
 public:
  // "" or what is wrong (an op acknowledged with a status the model does not give).
  std::string Apply(const std::vector<Record>& records);
  // The ops in flight, one per thread that had one.
  std::vector<Op> Inflight() const;
  // Settles the ops in flight: `done[i]` says whether Inflight()[i] took effect.
  void Settle(const std::vector<bool>& done);
  // A new, empty pool.
  void Clear();
  const Model& model() const { return model_; }
  uint64_t acked() const { return acked_; }

 private:
  Model model_;
  std::map<int, Op> inflight_;
  std::map<int, std::string> notes_;  // kNote of each thread, for its next kAck
  uint64_t acked_ = 0;
};

// Opens the pool in a child process with a deadline and checks it against `acked`
// (CheckIndex with the ops in flight, the engine's invariants); then closes it cleanly
// or abandons it (`close`). "" and *done (which in-flight ops took effect) and *open_ms,
// or what went wrong: the check, a crash, or "hung" past `deadline_s`.
std::string VerifyInChild(const EngineSpec& spec, const std::string& path, const Options& options,
                          const Acked& acked, bool close, int deadline_s, std::vector<bool>* done,
                          double* open_ms);

struct SoakConfig {
  int threads = 4;
  int rounds = 8;                  // rounds at least ...
  double seconds = 0;              // ... and, if > 0, until this much time has passed
  double recovery_kill_rate = 0.4;  // rounds whose reopen is killed too, before the check
  int rounds_per_pool = 3;         // a fresh pool after this many rounds (grows again)
  uint64_t keys_per_thread = 1500;
  int max_run_ms = 60;             // the worker is killed within this after it opened
  int deadline_s = 30;             // an open (and check) slower than this is a hang
  uint64_t seed = 1;               // the op streams and every random choice
  uint64_t pool_size = 16ull << 20;
};

struct SoakResult {
  uint64_t rounds = 0;
  uint64_t acked = 0;                 // acknowledged ops checked
  uint64_t inflight = 0;              // ops in flight at a kill (all-or-nothing checked)
  uint64_t killed_opening = 0;        // workers killed before their open returned
  uint64_t recovery_kills = 0;        // reopens killed on purpose
  uint64_t recovery_kills_in_open = 0;  // ... while their open was running
  uint64_t fresh_pools = 0;
  double seconds = 0;
  std::string failure;  // "" if every check passed; else what and where
};

// Rounds of: a worker (opening the pool, recovering it, then running ops from
// config.threads threads) killed at a random moment; maybe a reopen killed at a random
// moment of its open; a verifying reopen in a child (VerifyInChild), closing cleanly or
// not at random.
SoakResult RunKillSoak(const EngineSpec& spec, const std::string& dir, const SoakConfig& config);

// PMHASH_SOAK_SECONDS (0 if unset).
double SoakSeconds();

}  // namespace pmhash::testing
