#include "engines/engine.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <mutex>

namespace pmhash {

// ---- Status and options -------------------------------------------------------------

std::string_view Status::CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kNotFound: return "NotFound";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kCorruption: return "Corruption";
    case Code::kIOError: return "IOError";
    case Code::kResourceExhausted: return "ResourceExhausted";
    case Code::kBusy: return "Busy";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code_));
  if (!message_.empty()) s += ": " + message_;
  return s;
}

bool ParsePersistMode(const std::string& text, PersistMode* mode) {
  if (text == "adr") *mode = PersistMode::kAdr;
  else if (text == "eadr") *mode = PersistMode::kEadr;
  else if (text == "none") *mode = PersistMode::kNone;
  else return false;
  return true;
}

bool ParseFlushInstruction(const std::string& text, FlushInstruction* flush) {
  if (text == "auto") *flush = FlushInstruction::kAuto;
  else if (text == "clwb") *flush = FlushInstruction::kClwb;
  else if (text == "clflushopt") *flush = FlushInstruction::kClflushopt;
  else if (text == "clflush") *flush = FlushInstruction::kClflush;
  else return false;
  return true;
}

const char* PersistModeName(PersistMode mode) {
  switch (mode) {
    case PersistMode::kAdr: return "adr";
    case PersistMode::kEadr: return "eadr";
    case PersistMode::kNone: return "none";
  }
  return "?";
}

const char* FlushInstructionName(FlushInstruction flush) {
  switch (flush) {
    case FlushInstruction::kAuto: return "auto";
    case FlushInstruction::kClwb: return "clwb";
    case FlushInstruction::kClflushopt: return "clflushopt";
    case FlushInstruction::kClflush: return "clflush";
  }
  return "?";
}

// ---- Index defaults -----------------------------------------------------------------

Status Index::Put(std::string_view key, std::string_view value) {
  for (;;) {
    Status s = Update(key, value);
    if (!s.IsNotFound()) return s;
    s = Insert(key, value);
    if (!s.IsAlreadyExists()) return s;  // lost a race with another inserter: update
  }
}

void Index::MultiGet(std::span<const std::string_view> keys, std::span<std::string> values,
                     std::span<Status> statuses) {
  for (size_t i = 0; i < keys.size(); ++i) statuses[i] = Get(keys[i], &values[i]);
}

// ---- Open ---------------------------------------------------------------------------

static Status ValidateOptions(const Options& o) {
  if (o.path.empty() && o.engine.empty()) {
    return Status::InvalidArgument("options.engine is required for a DRAM pool");
  }
  if (o.write_latency_ns > 100000) {
    return Status::InvalidArgument("options.write_latency_ns must be at most 100000");
  }
  if (o.pool_size < pm::kMinPoolSize || o.pool_size > pm::kMaxPoolSize) {
    return Status::InvalidArgument("options.pool_size must be between 4 MiB and 1 TiB");
  }
  return Status::OK();
}

Status Open(const Options& options, std::unique_ptr<Index>* index) {
  index->reset();
  PMHASH_RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<pm::Pool> pool;
  bool fresh = false;
  std::string engine_name = options.engine;
  if (!engine_name.empty() && engines::FindEngine(engine_name) == nullptr) {
    return engines::UnknownEngine(engine_name);
  }
  if (options.path.empty()) {
    PMHASH_RETURN_IF_ERROR(pm::Pool::CreateDram(engine_name, options.pool_size, &pool));
    fresh = true;
  } else {
    struct stat st;
    const bool exists = ::stat(options.path.c_str(), &st) == 0;
    if (exists) {
      if (options.error_if_exists) {
        return Status::AlreadyExists("pool " + options.path + " already exists");
      }
      PMHASH_RETURN_IF_ERROR(pm::Pool::Open(options.path, engine_name, &pool));
      engine_name = pool->engine();
    } else {
      if (!options.create_if_missing) {
        return Status::NotFound("pool " + options.path + " does not exist");
      }
      if (engine_name.empty()) {
        return Status::InvalidArgument("options.engine is required to create a pool");
      }
      PMHASH_RETURN_IF_ERROR(pm::Pool::Create(options.path, engine_name, options.pool_size, &pool));
      fresh = true;
    }
  }
  const engines::EngineRegistration* reg = engines::FindEngine(engine_name);
  if (reg == nullptr) return engines::UnknownEngine(engine_name);
  Status s = engines::OpenEngine(reg->make(), std::move(pool), fresh, options, nullptr, index);
  if (!s.ok() && fresh && !options.path.empty()) {
    ::unlink(options.path.c_str());  // a pool we just created but could not set up
  }
  return s;
}

namespace engines {

// ---- Engine options -----------------------------------------------------------------

uint64_t EngineOptions::Uint(const std::string& name, uint64_t fallback, uint64_t min,
                             uint64_t max) {
  known_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  uint64_t v = 0;
  const std::string& text = it->second;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    errors_.push_back("option " + name + "=" + text + " is not a whole number");
    return fallback;
  }
  if (v < min || v > max) {
    errors_.push_back("option " + name + "=" + text + " is out of range [" +
                      std::to_string(min) + ", " + std::to_string(max) + "]");
    return fallback;
  }
  return v;
}

double EngineOptions::Double(const std::string& name, double fallback, double min, double max) {
  known_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& text = it->second;
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    errors_.push_back("option " + name + "=" + text + " is not a number");
    return fallback;
  }
  if (!(v >= min && v <= max)) {
    errors_.push_back("option " + name + "=" + text + " is out of range [" +
                      std::to_string(min) + ", " + std::to_string(max) + "]");
    return fallback;
  }
  return v;
}

bool EngineOptions::Bool(const std::string& name, bool fallback) {
  known_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& t = it->second;
  if (t == "on" || t == "true" || t == "1" || t == "yes") return true;
  if (t == "off" || t == "false" || t == "0" || t == "no") return false;
  errors_.push_back("option " + name + "=" + t + " is not on/off");
  return fallback;
}

Status EngineOptions::Finish() const {
  std::vector<std::string> errors = errors_;
  for (const auto& [name, value] : values_) {
    if (known_.count(name) == 0) {
      std::string known;
      for (const std::string& k : known_) known += (known.empty() ? "" : ", ") + k;
      errors.push_back("unknown engine option '" + name + "' (this engine accepts: " +
                       (known.empty() ? "none" : known) + ")");
    }
  }
  if (errors.empty()) return Status::OK();
  std::string msg = errors[0];
  for (size_t i = 1; i < errors.size(); ++i) msg += "; " + errors[i];
  return Status::InvalidArgument(msg);
}

// ---- Engine -------------------------------------------------------------------------

Status OpenEngine(std::unique_ptr<Engine> engine, std::unique_ptr<pm::Pool> pool, bool fresh,
                  const Options& options, pm::PersistObserver* observer,
                  std::unique_ptr<Index>* index) {
  index->reset();
  Status s = engine->Start(std::move(pool), fresh, options, observer);
  if (!s.ok()) {
    // A half-started engine (e.g. a bad engine option) has a pool but maybe no allocator:
    // drop it without Close(), which would dereference what Start never made.
    engine->Abandon();
    return s;
  }
  *index = std::move(engine);
  return Status::OK();
}

Status Engine::Start(std::unique_ptr<pm::Pool> pool, bool fresh, const Options& options,
                     pm::PersistObserver* observer) {
  const auto t0 = std::chrono::steady_clock::now();
  pm::PersistConfig config;
  config.mode = options.persist;
  config.flush = options.flush;
  config.write_latency_ns = options.write_latency_ns;
  config.count = options.count_stats;
  config.observer = observer;
  PMHASH_RETURN_IF_ERROR(pm::Persister::Make(config, &persister_));
  engine_name_ = pool->engine();
  pool_ = std::move(pool);
  const bool clean = pool_->was_clean_at_open();

  EngineOptions engine_options(options.engine_options);
  Configure(engine_options, options);
  PMHASH_RETURN_IF_ERROR(engine_options.Finish());

  // Only the pool's own state word decides creation (src/pm/pool.h): kCreating, a new
  // pool or one whose creation a crash interrupted (it never acknowledged anything), is
  // created from nothing; a pool in any other state is opened, never formatted.
  PMHASH_RETURN_IF_ERROR(pool_->MarkInUse(*persister_));
  if (pool_->needs_creation()) {
    if (!fresh) {
      persister_->Zero(pool_->root(), pm::kRootSize);
      persister_->Persist(pool_->root(), pm::kRootSize);
      recovered_ = true;
    }
    PMHASH_RETURN_IF_ERROR(pm::UndoLog::Format(*pool_, *persister_, &undo_log_));
    PMHASH_RETURN_IF_ERROR(pm::Allocator::Format(*pool_, *persister_, &allocator_));
    codec_ = std::make_unique<SlotCodec>(*pool_, *persister_, *allocator_);
    PMHASH_RETURN_IF_ERROR(Create());
    return pool_->MarkCreated(*persister_);
  }
  PMHASH_RETURN_IF_ERROR(pm::UndoLog::Recover(*pool_, *persister_, &undo_log_));
  if (clean) {
    PMHASH_RETURN_IF_ERROR(pm::Allocator::Load(*pool_, *persister_, &allocator_));
  } else {
    PMHASH_RETURN_IF_ERROR(pm::Allocator::Rebuild(
        *pool_, *persister_,
        [this](const pm::Allocator::LiveBlockVisitor& visit) { return EnumerateBlocks(visit); },
        &allocator_));
  }
  codec_ = std::make_unique<SlotCodec>(*pool_, *persister_, *allocator_);
  PMHASH_RETURN_IF_ERROR(Recover(clean));
  recovered_ = !clean;
  if (!clean) {
    recovery_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                       .count();
  }
  return Status::OK();
}

Status Engine::UpdateSlot(uint8_t* form, KvWords* words, std::string_view key,
                          std::string_view value, uint64_t key_hash) {
  pm::Persister& ps = *persister_;
  const auto old_form = static_cast<SlotForm>(*form);
  if (old_form == SlotForm::kInline && SlotCodec::FitsInline(key, value)) {
    uint64_t v;
    std::memcpy(&v, value.data(), 8);
    ps.Store(&words->word1, v);  // one failure-atomic 8-byte store
    ps.Persist(&words->word1, sizeof(v));
    return Status::OK();
  }
  uint64_t record = 0;
  PMHASH_RETURN_IF_ERROR(codec_->EncodeRecord(key, value, &record));  // flushed, no fence
  if (old_form == SlotForm::kRecord) {
    // The new record durable, then one failure-atomic 8-byte store of the pointer.
    const uint64_t old = words->word0;
    ps.Fence();
    ps.Store(&words->word0, record);
    ps.Persist(&words->word0, sizeof(record));
    codec_->ReleaseRecord(old);
    return Status::OK();
  }
  // Inline -> record changes both words and the form: all-or-nothing through the undo
  // log (Save persists, which also makes the new record durable before the stores).
  std::unique_ptr<pm::UndoLog::Tx> tx = undo_log_->Begin();
  Status s = tx->Save(words, sizeof(KvWords));
  if (s.ok()) s = tx->Save(form, 1);
  if (!s.ok()) {
    tx.reset();  // rolls back whatever was saved (nothing was changed yet)
    codec_->ReleaseRecord(record);
    return s;
  }
  ps.Store(&words->word0, record);
  ps.Store(&words->word1, key_hash);
  ps.Store(form, static_cast<uint8_t>(SlotForm::kRecord));
  ps.Flush(words, sizeof(KvWords));  // a slot never straddles a line
  const auto line = [](const void* p) { return reinterpret_cast<uintptr_t>(p) / pm::kCacheLine; };
  if (line(form) != line(words)) ps.Flush(form, 1);
  ps.Fence();
  tx->Commit();
  undo_txs_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

Result<uint64_t> Engine::VerifyBlocks() {
  if (pool_ == nullptr) return Status::InvalidArgument("index is closed");
  WaitForBackgroundWork();
  return allocator_->Verify(
      [this](const pm::Allocator::LiveBlockVisitor& visit) { return EnumerateBlocks(visit); });
}

Engine::~Engine() { Abandon(); }

Status Engine::Close() {
  if (pool_ == nullptr) return Status::InvalidArgument("index already closed");
  StopBackgroundWork();
  Status s = Shutdown();
  if (s.ok()) s = allocator_->PersistState();
  if (s.ok()) s = pool_->MarkClean(*persister_);
  codec_.reset();
  allocator_.reset();
  undo_log_.reset();
  pool_.reset();
  return s;
}

void Engine::Abandon() {
  // From ~Engine this is the base no-op: derived destructors stop their own threads.
  if (pool_ != nullptr) StopBackgroundWork();
  codec_.reset();
  allocator_.reset();
  undo_log_.reset();
  pool_.reset();
}

Status Engine::Sync() {
  if (pool_ == nullptr) return Status::InvalidArgument("index is closed");
  return pool_->Sync();
}

IndexStats Engine::Stats() const {
  IndexStats st;
  st.engine = engine_name_;
  if (pool_ == nullptr) return st;
  st.pool_bytes = pool_->size();
  st.pm_bytes = allocator_->BytesInUse();
  st.mapping = pm::MappingName(pool_->mapping());
  st.recovered = recovered_;
  st.recovery_ms = recovery_ms_;
  st.persist = persister_->Totals();
  FillStats(&st);
  st.load_factor = st.key_slots == 0 ? 0 : static_cast<double>(st.count) / st.key_slots;
  return st;
}

// ---- Registry -----------------------------------------------------------------------

namespace {
std::map<std::string, EngineRegistration>& Registry() {
  static auto* registry = new std::map<std::string, EngineRegistration>;
  return *registry;
}
}  // namespace

void RegisterEngine(EngineRegistration registration) {
  std::string name = registration.description.name;
  Registry()[name] = std::move(registration);
}

const EngineRegistration* FindEngine(const std::string& name) {
  auto it = Registry().find(name);
  return it == Registry().end() ? nullptr : &it->second;
}

Status UnknownEngine(const std::string& name) {
  std::string known;
  for (const auto& [n, reg] : Registry()) known += (known.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("unknown engine '" + name + "'; known engines: " +
                                 (known.empty() ? "(none built)" : known));
}

}  // namespace engines

std::vector<EngineDescription> RegisteredEngines() {
  std::vector<EngineDescription> out;
  for (const auto& [name, reg] : engines::Registry()) out.push_back(reg.description);
  return out;
}

}  // namespace pmhash
