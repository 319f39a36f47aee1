#include "support/harness.h"

#include <errno.h>  // program_invocation_name
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "engines/engine.h"

namespace pmhash::testing {

Status NewDramPool(const EngineSpec& spec, uint64_t size, std::unique_ptr<pm::Pool>* pool,
                   uint64_t hash_seed) {
  return pm::Pool::CreateDram(spec.name, size, pool, hash_seed);
}

Status OpenOnPool(const EngineSpec& spec, std::unique_ptr<pm::Pool> pool, bool fresh,
                  const Options& options, pm::PersistObserver* observer,
                  std::unique_ptr<Index>* index) {
  return engines::OpenEngine(spec.make(), std::move(pool), fresh, options, observer, index);
}

Status OpenDram(const EngineSpec& spec, const Options& options, std::unique_ptr<Index>* index) {
  std::unique_ptr<pm::Pool> pool;
  PMHASH_RETURN_IF_ERROR(
      NewDramPool(spec, options.pool_size, &pool, options.hash_seed.value_or(kTestHashSeed)));
  return OpenOnPool(spec, std::move(pool), true, options, nullptr, index);
}

Status OpenFile(const EngineSpec& spec, const std::string& path, const Options& options,
                std::unique_ptr<Index>* index) {
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  const uint64_t seed = options.hash_seed.value_or(kTestHashSeed);
  if (!spec.test_only && spec.test_hash == nullptr) {
    Options o = options;
    o.engine = spec.name;
    o.path = path;
    o.create_if_missing = true;
    if (!exists) o.hash_seed = seed;
    return Open(o, index);
  }
  std::unique_ptr<pm::Pool> pool;
  if (exists) {
    PMHASH_RETURN_IF_ERROR(pm::Pool::Open(path, spec.name, &pool));
  } else {
    PMHASH_RETURN_IF_ERROR(pm::Pool::Create(path, spec.name, options.pool_size, &pool, seed));
  }
  return OpenOnPool(spec, std::move(pool), !exists, options, nullptr, index);
}

void Abandon(std::unique_ptr<Index>* index) {
  if (auto* e = dynamic_cast<engines::Engine*>(index->get())) e->Abandon();
  index->reset();
}

void WaitForBackgroundWork(Index* index) {
  if (auto* e = dynamic_cast<engines::Engine*>(index)) e->WaitForBackgroundWork();
}

void SetAllocationFaults(Index* index, pm::AllocationFaults* faults) {
  if (auto* e = dynamic_cast<engines::Engine*>(index)) e->SetAllocationFaults(faults);
}

std::string CheckInvariantsOf(Index* index) {
  auto* e = dynamic_cast<engines::Engine*>(index);
  if (e == nullptr) return "the index is not an engines::Engine";
  const Status s = e->CheckInvariants();
  return s.ok() ? "" : "invariants: " + s.ToString();
}

std::string Printable(std::string_view s) {
  std::string out = "\"";
  static const char* kHex = "0123456789abcdef";
  for (size_t i = 0; i < s.size() && i < 40; ++i) {
    const unsigned char c = s[i];
    if (c >= 32 && c < 127 && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  out += "\"";
  if (s.size() > 40) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string Describe(const Op& op) {
  static const char* kNames[] = {"Insert", "Update", "Put", "Delete"};
  std::string s = std::string(kNames[op.kind]) + "(" + Printable(op.key);
  if (op.kind != Op::kDelete) s += ", " + Printable(op.value);
  return s + ")";
}

Status ApplyToModel(const Op& op, Model* model) {
  auto it = model->find(op.key);
  switch (op.kind) {
    case Op::kInsert:
      if (it != model->end()) return Status::AlreadyExists("");
      (*model)[op.key] = op.value;
      return Status::OK();
    case Op::kUpdate:
      if (it == model->end()) return Status::NotFound("");
      it->second = op.value;
      return Status::OK();
    case Op::kPut:
      (*model)[op.key] = op.value;
      return Status::OK();
    case Op::kDelete:
      if (it == model->end()) return Status::NotFound("");
      model->erase(it);
      return Status::OK();
  }
  return Status::OK();
}

Status ApplyToIndex(const Op& op, Index* index) {
  switch (op.kind) {
    case Op::kInsert: return index->Insert(op.key, op.value);
    case Op::kUpdate: return index->Update(op.key, op.value);
    case Op::kPut: return index->Put(op.key, op.value);
    case Op::kDelete: return index->Delete(op.key);
  }
  return Status::OK();
}

std::string Snapshot(const Index& index, Model* out) {
  out->clear();
  std::string error;
  Status s = index.ForEach([&](std::string_view k, std::string_view v) {
    auto [it, fresh] = out->emplace(std::string(k), std::string(v));
    if (!fresh && error.empty()) error = "ForEach returned key " + Printable(k) + " twice";
    return true;
  });
  if (!s.ok()) return "ForEach failed: " + s.ToString();
  return error;
}

std::string CheckIndex(Index* index, const Model& model, const Op* inflight) {
  std::vector<Op> ops;
  if (inflight != nullptr) ops.push_back(*inflight);
  return CheckIndex(index, model, ops);
}

std::string CheckIndex(Index* index, const Model& model, const std::vector<Op>& inflight) {
  // ForEach into a sorted vector (cheaper than a map: this runs for every crash image),
  // then one merge walk against the model.
  using Entry = std::pair<std::string, std::string>;
  std::vector<Entry> seen;
  seen.reserve(model.size() + 16);
  Status fs = index->ForEach([&](std::string_view k, std::string_view v) {
    seen.emplace_back(std::string(k), std::string(v));
    return true;
  });
  if (!fs.ok()) return "ForEach failed: " + fs.ToString();
  std::sort(seen.begin(), seen.end(),
            [](const Entry& a, const Entry& b) { return a.first < b.first; });
  for (size_t i = 1; i < seen.size(); ++i) {
    if (seen[i].first == seen[i - 1].first) {
      return "ForEach returned key " + Printable(seen[i].first) + " twice";
    }
  }
  if (index->Count() != seen.size()) {
    return "Count() is " + std::to_string(index->Count()) + " but ForEach returned " +
           std::to_string(seen.size()) + " keys";
  }
  if (auto* engine = dynamic_cast<engines::Engine*>(index)) {
    if (Result<uint64_t> blocks = engine->VerifyBlocks(); !blocks.ok()) {
      return "the allocator disagrees with the reachable blocks: " + blocks.status().ToString();
    }
  }
  // The states each interrupted operation may leave its key in (distinct keys).
  struct Allowed {
    std::optional<std::string> before, after;
    const Op* op;
  };
  std::map<std::string, Allowed> open;
  for (const Op& op : inflight) {
    Allowed a{std::nullopt, std::nullopt, &op};
    auto it = model.find(op.key);
    if (it != model.end()) a.before = it->second;
    Model one;
    if (a.before) one[op.key] = *a.before;
    if (ApplyToModel(op, &one).ok()) {
      auto jt = one.find(op.key);
      if (jt != one.end()) a.after = jt->second;
    } else {
      a.after = a.before;
    }
    open[op.key] = a;
  }
  auto what = [&](const std::string& key) {
    auto o = open.find(key);
    return o == open.end() ? std::string() : " (interrupted op " + Describe(*o->second.op) + ")";
  };
  // Merge walk: a key in the index, in the model, or both.
  auto si = seen.begin();
  auto mi = model.begin();
  while (si != seen.end() || mi != model.end()) {
    const bool in_index = si != seen.end() && (mi == model.end() || si->first <= mi->first);
    const bool in_model = mi != model.end() && (si == seen.end() || mi->first <= si->first);
    const std::string& key = in_index ? si->first : mi->first;
    std::optional<std::string> got;
    if (in_index) got = si->second;
    auto o = open.empty() ? open.end() : open.find(key);
    bool ok;
    if (o != open.end()) {
      ok = got == o->second.before || got == o->second.after;
    } else {
      ok = in_model ? got == mi->second : !got.has_value();
    }
    if (!ok) {
      if (!in_index) return "acknowledged key " + Printable(key) + " is missing" + what(key);
      return "key " + Printable(key) + " has value " + Printable(*got) + ", expected " +
             (in_model ? Printable(mi->second) : std::string("absent")) + what(key);
    }
    if (in_index) ++si;
    if (in_model) ++mi;
  }
  // Get agrees with ForEach.
  std::string value;
  for (const auto& [k, v] : seen) {
    Status s = index->Get(k, &value);
    if (!s.ok()) return "ForEach returned " + Printable(k) + " but Get says " + s.ToString();
    if (value != v) return "Get(" + Printable(k) + ") disagrees with ForEach";
  }
  si = seen.begin();
  for (const auto& [k, v] : model) {
    while (si != seen.end() && si->first < k) ++si;
    if ((si == seen.end() || si->first != k) && index->Get(k, &value).ok()) {
      return "Get finds " + Printable(k) + " which ForEach does not return";
    }
  }
  return "";
}

Model Settle(Index* index, const Model& model, const Op* inflight) {
  Model out = model;
  if (inflight == nullptr) return out;
  std::string v;
  if (index->Get(inflight->key, &v).ok()) {
    out[inflight->key] = v;
  } else {
    out.erase(inflight->key);
  }
  return out;
}

std::string CheckKeepsWorking(Index* index, Model* model, uint64_t seed, bool grow) {
  std::mt19937_64 rng(seed);
  const std::string tag = "__after_" + std::to_string(seed % 1000000) + "_";
  auto value = [&](size_t len, size_t i) {
    std::string v(len, '\0');
    for (size_t j = 0; j < len; ++j) v[j] = static_cast<char>('a' + (i * 7 + j + seed) % 26);
    return v;
  };
  auto apply = [&](const Op& op) -> std::string {
    Status want = ApplyToModel(op, model);
    Status got = ApplyToIndex(op, index);
    if (got.code() == want.code()) return "";
    return "after recovery, " + Describe(op) + " returned " + got.ToString() + ", expected " +
           std::string(Status::CodeName(want.code()));
  };
  // Existing keys to update and delete, chosen before the inserts.
  std::vector<std::string> existing;
  if (!model->empty()) {
    const size_t step = std::max<size_t>(1, model->size() / 7);
    size_t i = rng() % step;
    for (auto it = model->begin(); it != model->end(); ++it, ++i) {
      if (i % step == 0) existing.push_back(it->first);
    }
  }
  // Fresh keys: 8-byte, medium and long keys; values empty, inline, small and large
  // records (every size class a record of the scripts uses).
  static constexpr size_t kValueLens[] = {8, 0, 24, 8, 100, 600, 40, 8};
  std::vector<std::string> fresh;
  for (size_t i = 0; i < 16; ++i) {
    std::string k = tag + std::to_string(i);
    if (i % 3 == 0) {  // an 8-byte (inline) key
      const uint64_t x = seed * 0x9e3779b97f4a7c15ull + i;
      k.assign(8, '~');
      std::memcpy(k.data() + 1, &x, 7);
    } else if (i % 3 == 2) {
      k.resize(70, '.');
    }
    fresh.push_back(k);
    std::string err = apply({Op::kInsert, k, value(kValueLens[i % 8], i)});
    if (!err.empty()) return err;
  }
  for (size_t i = 0; i < existing.size(); ++i) {
    const Op op = i % 3 == 2 ? Op{Op::kDelete, existing[i], ""}
                             : Op{Op::kUpdate, existing[i], value(i % 2 ? 300 : 8, i + 50)};
    std::string err = apply(op);
    if (!err.empty()) return err;
  }
  for (size_t i = 0; i < fresh.size(); i += 3) {
    std::string err = apply({Op::kDelete, fresh[i], ""});
    if (!err.empty()) return err;
  }
  if (grow) {
    const uint64_t n = std::max<uint64_t>(64, 2 * index->Count());
    for (uint64_t i = 0; i < n; ++i) {
      std::string err = apply({Op::kInsert, tag + "g" + std::to_string(i), value(i % 5 ? 8 : 30, i)});
      if (!err.empty()) return err;
    }
  }
  std::string err = CheckIndex(index, *model, nullptr);
  if (err.empty()) err = CheckInvariantsOf(index);
  return err.empty() ? "" : "after more writes post recovery: " + err;
}

std::string InChildProcess(const std::function<std::string()>& fn, int seconds, std::string* how) {
  how->clear();
  int fds[2];
  if (pipe(fds) != 0) {
    *how = "pipe failed";
    return "";
  }
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    *how = "fork failed";
    return "";
  }
  if (pid == 0) {
    close(fds[0]);
    const std::string out = fn();
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) _exit(4);
      done += n;
    }
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  bool hung = false;
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline - std::chrono::steady_clock::now())
                                          .count());
    if (left <= 0) {
      hung = true;
      break;
    }
    if (poll(&p, 1, left) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;  // EOF: the child is gone
    out.append(buf, n);
  }
  close(fds[0]);
  if (hung) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (hung) {
    *how = "hung (killed after " + std::to_string(seconds) + " s)";
  } else if (WIFSIGNALED(status)) {
    *how = "crashed with signal " + std::to_string(WTERMSIG(status));
  } else if (WEXITSTATUS(status) != 0) {
    *how = "exited with " + std::to_string(WEXITSTATUS(status));
  }
  return out;
}

double SoakFactor() {
  const char* s = std::getenv("PMHASH_CRASH_SOAK");
  if (s == nullptr) return 1;
  const double f = std::atof(s);
  return f >= 1 ? f : 1;
}

namespace {

// The value of environment variable `name` as a whole number, if set. A malformed value
// fails the current test (a seed silently read as 0 would replay the wrong run).
std::optional<uint64_t> EnvNumber(const char* name) {
  const char* s = std::getenv(name);
  if (s == nullptr) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (*s == '\0' || *end != '\0' || errno != 0 || *s == '-') {
    ADD_FAILURE() << name << "=" << s << " is not a whole number";
    return std::nullopt;
  }
  return v;
}

}  // namespace

std::vector<uint64_t> TestSeeds(std::vector<uint64_t> defaults) {
  if (std::getenv("PMHASH_SEED") != nullptr) {
    const std::optional<uint64_t> one = EnvNumber("PMHASH_SEED");
    return one ? std::vector<uint64_t>{*one} : std::vector<uint64_t>{};
  }
  if (std::getenv("PMHASH_SEEDS") == nullptr) return defaults;
  const std::optional<uint64_t> k = EnvNumber("PMHASH_SEEDS");
  if (!k) return {};
  defaults.resize(std::min<uint64_t>(*k, defaults.size()));
  std::random_device device;
  while (defaults.size() < *k) defaults.push_back((uint64_t{device()} << 32) | device());
  return defaults;
}

std::string SeedNote(uint64_t seed) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string note = "seed " + std::to_string(seed) + "; replay: PMHASH_SEED=" +
                     std::to_string(seed) + " " + program_invocation_name;
  if (test != nullptr) {
    note += std::string(" --gtest_filter='") + test->test_suite_name() + "." + test->name() + "'";
  }
  return note;
}

}  // namespace pmhash::testing
