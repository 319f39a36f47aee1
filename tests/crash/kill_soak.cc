#include "crash/kill_soak.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

// GCC 12 warns falsely on "literal" + std::string (GCC bug 105651).
#pragma GCC diagnostic ignored "-Wrestrict"

namespace pmhash::testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// ---- Records --------------------------------------------------------------------------

Record Record::Of(Type type, int thread, const Op& op, Status::Code code) {
  Record r;
  r.type = type;
  r.kind = static_cast<uint8_t>(op.kind);
  r.code = static_cast<uint8_t>(code);
  r.thread = static_cast<uint8_t>(thread);
  r.key_len = static_cast<uint16_t>(std::min(op.key.size(), kMaxBytes));
  r.value_len = static_cast<uint16_t>(std::min(op.value.size(), kMaxBytes - r.key_len));
  std::memcpy(r.bytes, op.key.data(), r.key_len);
  std::memcpy(r.bytes + r.key_len, op.value.data(), r.value_len);
  return r;
}

Record Record::Message(Type type, const std::string& text, int thread) {
  return Of(type, thread, Op{Op::kInsert, text, ""});
}

Op Record::ToOp() const {
  return {static_cast<Op::Kind>(kind), std::string(bytes, key_len),
          std::string(bytes + key_len, value_len)};
}

bool WriteRecord(int fd, const Record& r) {
  const ssize_t n = write(fd, &r, r.size());
  return n == static_cast<ssize_t>(r.size());
}

bool RecordReader::Read(int timeout_ms, std::vector<Record>* out) {
  bool open = true;
  for (int wait = timeout_ms;; wait = 0) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, wait) <= 0) break;
    char buf[1 << 16];
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n <= 0) {
      open = false;
      break;
    }
    buffer_.append(buf, n);
  }
  size_t at = 0;
  constexpr size_t kHeader = offsetof(Record, bytes);
  while (buffer_.size() - at >= kHeader) {
    Record r;
    std::memcpy(static_cast<void*>(&r), buffer_.data() + at, kHeader);
    if (buffer_.size() - at < r.size()) break;
    std::memcpy(static_cast<void*>(&r), buffer_.data() + at, r.size());
    out->push_back(r);
    at += r.size();
  }
  buffer_.erase(0, at);
  return open;
}

void RecordReader::Drain(std::vector<Record>* out) {
  while (Read(100, out)) {
  }
}

// ---- Operations -----------------------------------------------------------------------

OpStream::OpStream(uint64_t seed, int thread, uint64_t keys)
    : rng_(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(thread)),
      thread_(thread),
      keys_(keys) {}

Op OpStream::Next() {
  const uint64_t j = rng_() % keys_;
  Op op;
  if (j % 3 == 2) {  // out of line: 12-40 bytes
    op.key = "t" + std::to_string(thread_) + "-" + std::to_string(j) + "-";
    op.key.resize(12 + j % 29, '.');
  } else {  // inline: the thread, a tag and 6 bytes of j
    op.key.assign(8, '\0');
    op.key[0] = static_cast<char>(0x80 | thread_);
    op.key[1] = 'k';
    for (int b = 0; b < 6; ++b) op.key[2 + b] = static_cast<char>(j >> (8 * b));
  }
  const uint64_t r = rng_() % 100;
  op.kind = r < 35 ? Op::kInsert : r < 60 ? Op::kPut : r < 80 ? Op::kUpdate : Op::kDelete;
  if (op.kind == Op::kDelete) return op;
  const uint64_t v = rng_() % 10;
  const size_t len = v < 6 ? 8 : v < 9 ? 9 + rng_() % 52 : 100 + rng_() % 201;
  // Distinct per write: the first 8 bytes name the thread and the op's number.
  const uint64_t id = (static_cast<uint64_t>(thread_) << 56) | ++n_;
  op.value.assign(len, '\0');
  uint64_t x = id;
  for (size_t i = 0; i < len; ++i) {
    if (i % 8 == 0 && i > 0) x = x * 6364136223846793005ull + 1442695040888963407ull;
    op.value[i] = static_cast<char>(x >> (8 * (i % 8)));
  }
  return op;
}

// ---- The acknowledged state -----------------------------------------------------------

std::string Acked::Apply(const std::vector<Record>& records) {
  for (const Record& r : records) {
    if (r.type == Record::kIntent) {
      inflight_[r.thread] = r.ToOp();
    } else if (r.type == Record::kNote) {
      notes_[r.thread] = r.ToOp().key;
    } else if (r.type == Record::kAck) {
      inflight_.erase(r.thread);
      const Op op = r.ToOp();
      const Status want = ApplyToModel(op, &model_);
      ++acked_;
      if (static_cast<int>(want.code()) != r.code) {
        return "thread " + std::to_string(r.thread) + " acknowledged " + Describe(op) +
               " with " + std::string(Status::CodeName(static_cast<Status::Code>(r.code))) + " (" +
               notes_[r.thread] + "), the model says " + want.ToString();
      }
      notes_.erase(r.thread);
    }
  }
  return "";
}

std::vector<Op> Acked::Inflight() const {
  std::vector<Op> out;
  for (const auto& [thread, op] : inflight_) out.push_back(op);
  return out;
}

void Acked::Settle(const std::vector<bool>& done) {
  const std::vector<Op> ops = Inflight();
  for (size_t i = 0; i < ops.size() && i < done.size(); ++i) {
    if (done[i]) (void)ApplyToModel(ops[i], &model_);
  }
  inflight_.clear();
}

void Acked::Clear() {
  model_.clear();
  inflight_.clear();
  notes_.clear();
}

// ---- Verification ---------------------------------------------------------------------

std::string VerifyInChild(const EngineSpec& spec, const std::string& path, const Options& options,
                          const Acked& acked, bool close, int deadline_s, std::vector<bool>* done,
                          double* open_ms) {
  const std::vector<Op> inflight = acked.Inflight();
  std::string how;
  const std::string out = InChildProcess(
      [&]() -> std::string {
        const auto t0 = Clock::now();
        std::unique_ptr<Index> index;
        const Status s = OpenFile(spec, path, options, &index);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (!s.ok()) return "Ereopening failed: " + s.ToString();
        std::string err = CheckIndex(index.get(), acked.model(), inflight);
        if (err.empty()) err = CheckInvariantsOf(index.get());
        if (!err.empty()) return "E" + err;
        std::string bits;
        for (const Op& op : inflight) {
          Model one;
          if (auto it = acked.model().find(op.key); it != acked.model().end()) one.insert(*it);
          (void)ApplyToModel(op, &one);
          std::string v;
          const bool present = index->Get(op.key, &v).ok();
          const auto it = one.find(op.key);
          bits += (it == one.end() ? !present : present && v == it->second) ? '1' : '0';
        }
        if (close) {
          const Status c = index->Close();
          if (!c.ok()) return "Eclosing after the check failed: " + c.ToString();
        } else {
          Abandon(&index);
        }
        return "O" + std::to_string(ms) + " " + bits;
      },
      deadline_s, &how);
  if (!how.empty()) return "the verifying reopen " + how + (out.empty() ? "" : ": " + out);
  if (out.empty() || out[0] != 'O') return out.empty() ? "no answer" : out.substr(1);
  std::istringstream in(out.substr(1));
  std::string bits;
  in >> *open_ms >> bits;
  done->clear();
  for (char c : bits) done->push_back(c == '1');
  return "";
}

// ---- The soak -------------------------------------------------------------------------

namespace {

// Opens the pool, reporting kOpening and kOpened through `fd`; exits 3 after a kError if
// it does not open, 4 if the pipe breaks.
std::unique_ptr<Index> OpenReporting(const EngineSpec& spec, const std::string& path,
                                     const Options& o, int fd) {
  if (!WriteRecord(fd, Record::Message(Record::kOpening, ""))) _exit(4);
  std::unique_ptr<Index> index;
  const Status s = OpenFile(spec, path, o, &index);
  if (!s.ok()) {
    (void)WriteRecord(fd, Record::Message(Record::kError, "opening failed: " + s.ToString()));
    _exit(3);
  }
  if (!WriteRecord(fd, Record::Message(Record::kOpened, ""))) _exit(4);
  return index;
}

// Opens the pool and runs `threads` threads of random ops forever, each op reported
// before (kIntent) and after (kAck).
[[noreturn]] void Worker(const EngineSpec& spec, const std::string& path, const Options& o,
                         int fd, uint64_t seed, int threads, uint64_t keys) {
  const std::unique_ptr<Index> index = OpenReporting(spec, path, o, fd);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      OpStream ops(seed, t, keys);
      for (;;) {
        const Op op = ops.Next();
        if (!WriteRecord(fd, Record::Of(Record::kIntent, t, op))) _exit(4);
        const Status r = ApplyToIndex(op, index.get());
        if (!r.ok() && !r.IsNotFound() && !r.IsAlreadyExists() &&
            !WriteRecord(fd, Record::Message(Record::kNote, r.ToString(), t))) {
          _exit(4);
        }
        if (!WriteRecord(fd, Record::Of(Record::kAck, t, op, r.code()))) _exit(4);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  _exit(0);
}

// Opens the pool, then waits to be killed.
[[noreturn]] void Opener(const EngineSpec& spec, const std::string& path, const Options& o,
                         int fd) {
  const std::unique_ptr<Index> index = OpenReporting(spec, path, o, fd);
  for (;;) pause();
}

// A child forked to run `body` with a pipe back; the parent reads its records.
class Child {
 public:
  template <typename Body>
  explicit Child(Body&& body) {
    int fds[2];
    if (pipe(fds) != 0) return;
    fflush(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      close(fds[0]);
      body(fds[1]);
      _exit(5);  // body does not return
    }
    close(fds[1]);
    fd_ = fds[0];
    reader_ = std::make_unique<RecordReader>(fd_);
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) Kill();
    if (fd_ >= 0) close(fd_);
  }
  bool started() const { return pid_ > 0 && fd_ >= 0; }

  // Reads records until `until`, or until one of `type` arrives (if given). False if the
  // child ended (end of file) first.
  bool ReadUntil(Clock::time_point until, std::optional<uint8_t> type = std::nullopt) {
    for (;;) {
      const int64_t left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left < 0) return true;
      const size_t before = records_.size();
      const bool open = reader_->Read(static_cast<int>(std::min<int64_t>(left, 5)), &records_);
      if (type && Has(*type, before)) return true;
      if (!open) return false;
    }
  }
  // SIGKILL, reap, and read what it wrote. *how: "" if SIGKILL ended it, else how it ended.
  void Kill(std::string* how = nullptr) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    reader_->Drain(&records_);
    if (how == nullptr) return;
    how->clear();
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) return;
    for (const Record& r : records_) {
      if (r.type == Record::kError) *how = r.ToOp().key;
    }
    if (how->empty()) {
      *how = WIFSIGNALED(status) ? "died of signal " + std::to_string(WTERMSIG(status))
                                 : "exited by itself with " + std::to_string(WEXITSTATUS(status));
    }
  }
  bool Has(uint8_t type, size_t from = 0) const {
    return std::any_of(records_.begin() + from, records_.end(),
                       [&](const Record& r) { return r.type == type; });
  }
  const std::vector<Record>& records() const { return records_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  bool reaped_ = false;
  std::unique_ptr<RecordReader> reader_;
  std::vector<Record> records_;
};

}  // namespace

SoakResult RunKillSoak(const EngineSpec& spec, const std::string& dir, const SoakConfig& config) {
  SoakResult res;
  const std::string path = dir + "/" + GtestName(spec.name) + ".pool";
  Options o;
  o.pool_size = config.pool_size;
  o.initial_capacity = 16;  // small: the pool grows through many resizes
  o.engine_options = spec.test.crash_options;
  Acked acked;
  std::mt19937_64 rng(config.seed);
  double open_ms = 5;  // what an open took lately: kills aimed at opens fall inside one
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  auto fail = [&](int round, const std::string& what) {
    res.failure = "engine " + spec.name + ", round " + std::to_string(round) + ": " + what;
  };
  auto uniform_ms = [&](double hi) {
    return std::chrono::microseconds(static_cast<int64_t>(
        std::uniform_real_distribution<double>(0, std::max(hi, 0.1))(rng) * 1000));
  };
  for (int round = 0; res.failure.empty(); ++round) {
    if (round >= config.rounds && (config.seconds <= 0 || elapsed() >= config.seconds)) break;
    if (round % config.rounds_per_pool == 0) {
      std::error_code ignored;
      fs::remove(path, ignored);
      acked.Clear();
      ++res.fresh_pools;
    }
    // The worker: killed at a random moment of its open (one round in 4) or of its ops.
    // Its open recovers what the last round left.
    const uint64_t seed = rng();
    Child worker([&](int fd) {
      Worker(spec, path, o, fd, seed, config.threads, config.keys_per_thread);
    });
    if (!worker.started()) {
      fail(round, "cannot fork the worker");
      break;
    }
    if (rng() % 4 == 0) {
      worker.ReadUntil(Clock::now() + std::chrono::seconds(config.deadline_s), Record::kOpening);
      worker.ReadUntil(Clock::now() + uniform_ms(open_ms));
    } else {
      if (!worker.ReadUntil(Clock::now() + std::chrono::seconds(config.deadline_s),
                            Record::kOpened) ||
          !worker.Has(Record::kOpened)) {
        std::string how;
        worker.Kill(&how);
        fail(round, "the worker did not open the pool within " +
                        std::to_string(config.deadline_s) + " s: " + how);
        break;
      }
      worker.ReadUntil(Clock::now() + uniform_ms(config.max_run_ms));
    }
    std::string how;
    worker.Kill(&how);
    if (!how.empty()) {
      fail(round, "the worker was not killed: " + how);
      break;
    }
    if (!worker.Has(Record::kOpened)) ++res.killed_opening;
    const uint64_t acked_before = acked.acked();
    if (std::string err = acked.Apply(worker.records()); !err.empty()) {
      fail(round, err);
      break;
    }
    res.acked += acked.acked() - acked_before;
    res.inflight += acked.Inflight().size();

    // A reopen killed at a random moment of its open (recovery, or a clean open).
    if (std::uniform_real_distribution<double>(0, 1)(rng) < config.recovery_kill_rate) {
      Child opener([&](int fd) { Opener(spec, path, o, fd); });
      if (!opener.started()) {
        fail(round, "cannot fork the reopen");
        break;
      }
      opener.ReadUntil(Clock::now() + std::chrono::seconds(config.deadline_s), Record::kOpening);
      opener.ReadUntil(Clock::now() + uniform_ms(open_ms));
      opener.Kill(&how);
      if (!how.empty()) {
        fail(round, "the reopen to be killed " + how);
        break;
      }
      ++res.recovery_kills;
      if (opener.Has(Record::kOpening) && !opener.Has(Record::kOpened)) {
        ++res.recovery_kills_in_open;
      }
    }

    // The check, in a child with a deadline; it leaves the pool closed or crashed.
    std::vector<bool> done;
    double ms = 0;
    const bool close = rng() % 2 == 0;
    if (std::string err = VerifyInChild(spec, path, o, acked, close, config.deadline_s, &done, &ms);
        !err.empty()) {
      fail(round, err);
      break;
    }
    acked.Settle(done);
    open_ms = std::max(1.0, ms);
    ++res.rounds;
  }
  res.seconds = elapsed();
  return res;
}

double SoakSeconds() {
  const char* s = std::getenv("PMHASH_SOAK_SECONDS");
  return s == nullptr ? 0 : std::max(0.0, std::atof(s));
}

}  // namespace pmhash::testing
