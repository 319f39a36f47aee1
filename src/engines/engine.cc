#include "engines/engine.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "util/hash.h"
#include "util/hash_inline.h"

namespace pmhash {

// ---- Index defaults -----------------------------------------------------------------

Status Index::Put(std::string_view key, std::string_view value) {
  for (;;) {
    Status s = Update(key, value);
    if (!s.IsNotFound()) return s;
    s = Insert(key, value);
    if (!s.IsAlreadyExists()) return s;  // lost a race with another inserter: update
  }
}

Status Index::GetU64(uint64_t key, uint64_t* value) {
  std::string found;
  Status s = Get(std::string_view(reinterpret_cast<const char*>(&key), sizeof(key)), &found);
  if (!s.ok()) return s;
  if (found.size() != sizeof(*value)) {
    return Status::InvalidArgument("GetU64: the key's value is " + std::to_string(found.size()) +
                                   " bytes long, not 8 (use Get)");
  }
  std::memcpy(value, found.data(), sizeof(*value));
  return Status::OK();
}

void Index::MultiGet(std::span<const std::string_view> keys, std::span<std::string> values,
                     std::span<Status> statuses) {
  for (size_t i = 0; i < keys.size(); ++i) statuses[i] = Get(keys[i], &values[i]);
}

void Index::Write(std::span<const WriteOp> ops, std::span<Status> statuses) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const WriteOp& op = ops[i];
    switch (op.kind) {
      case WriteOp::Kind::kInsert: statuses[i] = Insert(op.key, op.value); break;
      case WriteOp::Kind::kUpdate: statuses[i] = Update(op.key, op.value); break;
      case WriteOp::Kind::kPut: statuses[i] = Put(op.key, op.value); break;
      case WriteOp::Kind::kDelete: statuses[i] = Delete(op.key); break;
      default: statuses[i] = Status::InvalidArgument("write batch: unknown operation kind");
    }
  }
}

// ---- Open ---------------------------------------------------------------------------

static Status ValidateOptions(const Options& o) {
  if (o.path.empty() && o.engine.empty()) {
    return Status::InvalidArgument("options.engine is required for a DRAM pool");
  }
  if (Status s = engines::PersistConfigOf(o).Validate(); !s.ok()) {
    return Status::InvalidArgument("options." + std::string(s.message()));
  }
  if (o.pool_size < pm::kMinPoolSize || o.pool_size > pm::kMaxPoolSize) {
    return Status::InvalidArgument("options.pool_size must be between 4 MiB and 1 TiB");
  }
  return Status::OK();
}

Status Open(const Options& options, std::unique_ptr<Index>* index) {
  index->reset();
  std::unique_ptr<engines::Engine> engine;
  PMHASH_RETURN_IF_ERROR(engines::Open(options, &engine));
  *index = std::move(engine);
  return Status::OK();
}

namespace engines {

namespace {
// Keys Scan's cursor check, with the pool's uuid and seed (engines/scan.h).
constexpr uint64_t kScanKeySalt = 0x7372756363616e73ull;  // "scancurs"
}  // namespace

pm::PersistConfig PersistConfigOf(const Options& options) {
  pm::PersistConfig config;
  config.mode = options.persist;
  config.flush = options.flush;
  config.write_latency_ns = options.write_latency_ns;
  config.read_latency_ns = options.read_latency_ns;
  config.count = options.count_stats;
  config.media_model = options.media_model;
  config.media = pm::MediaConfig(options.media);
  config.eadr_write_back_instruction = options.eadr_write_back_instruction;
  return config;
}

Status Open(const Options& options, std::unique_ptr<Engine>* engine) {
  engine->reset();
  PMHASH_RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<pm::Pool> pool;
  bool fresh = false;
  std::string engine_name = options.engine;
  if (!engine_name.empty() && FindEngine(engine_name) == nullptr) {
    return UnknownEngine(engine_name);
  }
  if (options.path.empty()) {
    PMHASH_RETURN_IF_ERROR(
        pm::Pool::CreateDram(engine_name, options.pool_size, &pool, options.hash_seed));
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
      PMHASH_RETURN_IF_ERROR(pm::Pool::Create(options.path, engine_name, options.pool_size, &pool,
                                             options.hash_seed));
      fresh = true;
    }
  }
  const EngineRegistration* reg = FindEngine(engine_name);
  if (reg == nullptr) return UnknownEngine(engine_name);
  Status s = OpenEngine(reg->make(), std::move(pool), fresh, options, nullptr, engine);
  if (!s.ok() && fresh && !options.path.empty()) {
    ::unlink(options.path.c_str());  // a pool we just created but could not set up
  }
  return s;
}

Status OpenEngine(std::unique_ptr<Engine> engine, std::unique_ptr<pm::Pool> pool, bool fresh,
                  const Options& options, pm::PersistObserver* observer,
                  std::unique_ptr<Engine>* out) {
  out->reset();
  Status s = engine->Start(std::move(pool), fresh, options, observer);
  if (!s.ok()) {
    // A half-started engine (e.g. a bad engine option) has a pool but maybe no allocator:
    // drop it without Close(), which would dereference what Start never made.
    engine->Abandon();
    return s;
  }
  *out = std::move(engine);
  return Status::OK();
}

Status OpenEngine(std::unique_ptr<Engine> engine, std::unique_ptr<pm::Pool> pool, bool fresh,
                  const Options& options, pm::PersistObserver* observer,
                  std::unique_ptr<Index>* index) {
  index->reset();
  std::unique_ptr<Engine> opened;
  PMHASH_RETURN_IF_ERROR(
      OpenEngine(std::move(engine), std::move(pool), fresh, options, observer, &opened));
  *index = std::move(opened);
  return Status::OK();
}

// ---- Engine: lifecycle --------------------------------------------------------------

Status Engine::Start(std::unique_ptr<pm::Pool> pool, bool fresh, const Options& options,
                     pm::PersistObserver* observer) {
  const auto t0 = std::chrono::steady_clock::now();
  engine_name_ = pool->engine();
  pool_ = std::move(pool);
  if (info_ == nullptr) {
    return Status::InvalidArgument("engine " + engine_name_ +
                                   " was made without its registry data (use MakeEngine)");
  }
  const std::vector<PersistMode>& modes = info_->capabilities.persist_modes;
  if (std::find(modes.begin(), modes.end(), options.persist) == modes.end()) {
    return Status::InvalidArgument("engine " + engine_name_ + " does not support persist mode " +
                                   PersistModeName(options.persist));
  }
  // The seed is the pool's, fixed when it was created.
  hash_seed_ = pool_->hash_seed();
  scan_key_ = Hash64(pool_->header().uuid, sizeof(pool_->header().uuid),
                     hash_seed_ ^ kScanKeySalt);
  if (options.hash_seed.has_value() && *options.hash_seed != hash_seed_) {
    return Status::InvalidArgument(
        "options.hash_seed " + std::to_string(*options.hash_seed) + " does not match the seed " +
        std::to_string(hash_seed_) + " of the pool (it is fixed when the pool is created)");
  }
  pm::PersistConfig config = PersistConfigOf(options);
  config.observer = observer;
  PMHASH_RETURN_IF_ERROR(pm::Persister::Make(config, &persister_));
  checked_ops_ = persister_->tracks_ops() || test_key_hash_ != nullptr;
  reads_unnoted_ = !persister_->notes_reads();
  const bool clean = pool_->was_clean_at_open();

  const std::vector<OptionSpec> declared = DeclaredOptions(*info_, /*with_common=*/true);
  EngineOptions engine_options(options.engine_options, declared);
  multiget_depth_ = engine_options.Uint("multiget_depth");
  write_depth_ = engine_options.Uint("write_depth");
  resize_enabled_ = !info_->capabilities.resize_switch || engine_options.Bool("resize");
  initial_capacity_ = options.initial_capacity;
  pm::AllocatorOptions alloc_options;
  alloc_options.arenas = static_cast<uint32_t>(engine_options.Uint("alloc_arenas"));
  const Status configured = Configure(engine_options, options);
  PMHASH_RETURN_IF_ERROR(engine_options.Finish());
  PMHASH_RETURN_IF_ERROR(configured);

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
    PMHASH_RETURN_IF_ERROR(pm::Allocator::Format(*pool_, *persister_, &allocator_, alloc_options));
    codec_ = std::make_unique<SlotCodec>(*pool_, *persister_, *allocator_);
    PMHASH_RETURN_IF_ERROR(Create());
    return pool_->MarkCreated(*persister_);
  }
  PMHASH_RETURN_IF_ERROR(pm::UndoLog::Recover(*pool_, *persister_, &undo_log_));
  if (clean) {
    PMHASH_RETURN_IF_ERROR(pm::Allocator::Load(*pool_, *persister_, &allocator_, alloc_options));
  } else {
    PMHASH_RETURN_IF_ERROR(pm::Allocator::Rebuild(
        *pool_, *persister_,
        [this](const pm::Allocator::LiveBlockVisitor& visit) { return EnumerateBlocks(visit); },
        &allocator_, alloc_options));
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
  // The count is kept in DRAM while open; a clean close makes it durable, so a clean
  // reopen needs no recount.
  if (s.ok() && attached_root_ != nullptr &&
      attached_root_->count != SealWord(Count(), SaltOf(&attached_root_->count))) {
    PersistRootCount(Count());
  }
  if (s.ok()) s = allocator_->PersistState();
  if (s.ok()) s = pool_->MarkClean(*persister_);
  attached_root_ = nullptr;
  codec_.reset();
  allocator_.reset();
  undo_log_.reset();
  pool_.reset();
  return s;
}

void Engine::Abandon() {
  // From ~Engine this is the base no-op: derived destructors stop their own threads.
  if (pool_ != nullptr) StopBackgroundWork();
  attached_root_ = nullptr;
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
  st.counted = persister_->counting();
  st.persist = persister_->Totals();
  FillStats(&st);
  st.load_factor = st.key_slots == 0 ? 0 : static_cast<double>(st.count) / st.key_slots;
  return st;
}

// ---- Engine: the operations ---------------------------------------------------------

namespace {
// The limits, as a compare on the OK path; the message is built only for a refusal.
inline Status CheckKeyValue(std::string_view key, std::string_view value) {
  if (key.size() <= kMaxKeySize && value.size() <= kMaxValueSize) [[likely]] {
    return Status::OK();
  }
  return SlotCodec::CheckSizes(key, value);
}

// One operation for the persistence counters, from its start to its return (whatever
// it returns): the user bytes it asked to write.
class OpScope {
 public:
  OpScope(pm::Persister& persister, uint64_t user_bytes)
      : persister_(persister), user_bytes_(user_bytes) {
    persister_.BeginOp();
  }
  ~OpScope() { persister_.EndOp(user_bytes_); }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  pm::Persister& persister_;
  const uint64_t user_bytes_;
};
}  // namespace

// Each operation: its checks, the hash, then the engine's virtual. The common case (a key
// of at most kShortHashBytes, a value within the limit, no counting, no test hash) is one
// compare of each, the pool-seeded hash inline with no call in it, and the call into the
// engine (issue 29). A longer or refused key or value, the bracketing of each operation
// for the persistence counters (Persister::tracks_ops, fixed at open) and a test hash take
// the out-of-line path. So a lookup's instructions between its miss and the next lookup's
// stay few. ShortHash64 and KeyHash are the same xxh3 (hash_test checks it).
static_assert(kShortHashBytes <= kMaxKeySize,
              "a key short enough for the fast path is within the limit: it needs no check");

namespace {
// The caller's value, asked for before the engine's first miss: an engine copies it after
// its index's loads, and a value out of the caches would add a miss to that chain (a
// caller's value is often cached; the benchmark draws its values from 1 MiB of bytes).
// Its first and last byte: a short value may straddle two lines.
inline void PrefetchValue(std::string_view value) {
  __builtin_prefetch(value.data());
  __builtin_prefetch(value.data() + value.size() - (value.empty() ? 0 : 1));
}
}  // namespace

Status Engine::Insert(std::string_view key, std::string_view value) {
  return WriteOne(key, value, WriteMode::kInsert);
}

Status Engine::Update(std::string_view key, std::string_view value) {
  return WriteOne(key, value, WriteMode::kUpdate);
}

Status Engine::Put(std::string_view key, std::string_view value) {
  return WriteOne(key, value, WriteMode::kPut);
}

Status Engine::WriteOne(std::string_view key, std::string_view value, WriteMode mode) {
  PrefetchValue(value);
  if (key.size() > kShortHashBytes || value.size() > kMaxValueSize || checked_ops_) [[unlikely]] {
    return WriteChecked(key, value, mode);
  }
  return DoWrite(key, value, ShortHash64(key.data(), key.size(), hash_seed_), mode);
}

Status Engine::WriteChecked(std::string_view key, std::string_view value, WriteMode mode) {
  PMHASH_RETURN_IF_ERROR(CheckKeyValue(key, value));
  OpScope op(*persister_, key.size() + value.size());
  return DoWrite(key, value, KeyHash(key), mode);
}

// An 8-byte key's word and its hash at a length the compiler knows (the quick paths').
[[gnu::always_inline]] inline std::pair<uint64_t, uint64_t> Engine::WordAndHash(
    std::string_view key) const {
  uint64_t key_word;
  std::memcpy(&key_word, key.data(), sizeof(key_word));
  return {key_word, ShortHash64(key.data(), sizeof(key_word), hash_seed_)};
}

// An 8-byte key with the engine's QuickGet on first: its hash at a length the compiler
// knows, then the quick lookup; flatten keeps the hash inline whatever the compiler
// estimates Get's size at. Every other key: the checks, the hash, DoGet.
__attribute__((flatten)) Status Engine::Get(std::string_view key, std::string* value) {
  if (key.size() == sizeof(uint64_t) && quick_get_) [[likely]] {
    const auto [key_word, hash] = WordAndHash(key);
    const QuickAnswer a = QuickGet(hash, key_word);
    if (a.answer == Optimistic::kFound) {
      AssignWord(value, a.value_word);
      return Status::OK();
    }
    if (a.answer == Optimistic::kAbsent) return Status::NotFound();
    return DoGet(key, hash, value);
  }
  if (key.size() > kShortHashBytes || checked_ops_) [[unlikely]] return GetChecked(key, value);
  return DoGet(key, ShortHash64(key.data(), key.size(), hash_seed_), value);
}

// Get's quick lookup with the key and value in words; anything it does not answer goes
// through Get into a string (Index::GetU64), which checks the value's size.
__attribute__((flatten)) Status Engine::GetU64(uint64_t key, uint64_t* value) {
  if (quick_get_) [[likely]] {
    const uint64_t hash = ShortHash64(&key, sizeof(key), hash_seed_);
    const QuickAnswer a = QuickGet(hash, key);
    if (a.answer == Optimistic::kFound) {
      *value = a.value_word;
      return Status::OK();
    }
    if (a.answer == Optimistic::kAbsent) return Status::NotFound();
  }
  return GetU64Slowly(key, value);
}

Status Engine::GetU64Slowly(uint64_t key, uint64_t* value) { return Index::GetU64(key, value); }

Status Engine::GetChecked(std::string_view key, std::string* value) {
  PMHASH_RETURN_IF_ERROR(SlotCodec::CheckKey(key));
  OpScope op(*persister_, 0);
  return DoGet(key, KeyHash(key), value);
}

// An 8-byte key with the engine's QuickDelete on: as Get's quick lookup, the hash inline,
// then the quick delete. Every other key: the checks, the hash, DoDelete.
__attribute__((flatten)) Status Engine::Delete(std::string_view key) {
  if (key.size() == sizeof(uint64_t) && quick_delete_) [[likely]] {
    const auto [key_word, hash] = WordAndHash(key);
    const Optimistic a = QuickDelete(hash, key_word);
    if (a == Optimistic::kFound) return Status::OK();
    if (a == Optimistic::kAbsent) return Status::NotFound();
    return DoDelete(key, hash);
  }
  if (key.size() > kShortHashBytes || checked_ops_) [[unlikely]] return DeleteChecked(key);
  return DoDelete(key, ShortHash64(key.data(), key.size(), hash_seed_));
}

Status Engine::DeleteChecked(std::string_view key) {
  PMHASH_RETURN_IF_ERROR(SlotCodec::CheckKey(key));
  OpScope op(*persister_, key.size());
  return DoDelete(key, KeyHash(key));
}

void AssignWordResizing(std::string* value, uint64_t word) {
  value->resize(sizeof(word));
  std::memcpy(value->data(), &word, sizeof(word));
}

void Engine::MultiGet(std::span<const std::string_view> keys, std::span<std::string> values,
                      std::span<Status> statuses) {
  if (info_->capabilities.pipelined_multiget && keys.size() > 1) {
    MultiGetPipelined(keys, values, statuses);
    return;
  }
  for (size_t i = 0; i < keys.size(); ++i) statuses[i] = Get(keys[i], &values[i]);
}

Status Engine::Scan(uint64_t cursor, size_t max_keys, const Visitor& fn,
                    uint64_t* next_cursor) const {
  if (pool_ == nullptr) return Status::InvalidArgument("index is closed");
  if (max_keys == 0) return Status::InvalidArgument("Scan: max_keys must be at least 1");
  // Cursor 0 is the start; any other carries a position and its check (engines/scan.h).
  const uint64_t from = cursor & ~kScanCheckMask;
  if (cursor != 0 && (cursor & kScanCheckMask) != ScanCursorCheck(from, scan_key_)) {
    return Status::InvalidArgument("Scan: cursor " + std::to_string(cursor) +
                                   " was not handed out by a Scan of this pool");
  }
  ScanPage page(from, max_keys);
  PMHASH_RETURN_IF_ERROR(DoScan(&page));
  const auto cursor_at = [&](uint64_t position) {
    return position | ScanCursorCheck(position, scan_key_);
  };
  const std::vector<ScanEntry>& entries = page.entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (fn(entries[i].key, entries[i].value)) continue;
    if (i + 1 < entries.size()) {
      *next_cursor = cursor_at(page.ResumeAt(entries[i + 1].hash));
      return Status::OK();
    }
    break;  // stopped at the page's last key: the page's own end
  }
  *next_cursor = page.done() ? 0 : cursor_at(page.next());
  return Status::OK();
}

void Engine::MultiGetPipelined(std::span<const std::string_view> keys,
                               std::span<std::string> values, std::span<Status> statuses) {
  // A ring of the hashes of keys [i, ahead): each was prefetched when it entered, so
  // `depth` keys' memory loads overlap while key i is finished.
  const size_t n = keys.size();
  const size_t depth = multiget_depth();
  uint64_t hashes[kMaxMultiGetDepth];
  bool valid[kMaxMultiGetDepth];
  size_t ahead = 0;
  auto start = [&](size_t j) {
    Status s = SlotCodec::CheckKey(keys[j]);
    valid[j % depth] = s.ok();
    if (!s.ok()) {
      statuses[j] = std::move(s);
      return;
    }
    hashes[j % depth] = KeyHash(keys[j]);
    Prefetch(hashes[j % depth]);
  };
  for (; ahead < n && ahead < depth; ++ahead) start(ahead);
  for (size_t i = 0; i < n; ++i) {
    if (valid[i % depth]) {
      OpScope op(*persister_, 0);
      statuses[i] = DoGet(keys[i], hashes[i % depth], &values[i]);
    }
    if (ahead < n) {
      start(ahead++);  // into the slot key i just left
    } else {
      PrefetchAdvance();  // the batch's last keys: their later stages still run
    }
  }
}

void Engine::Write(std::span<const WriteOp> ops, std::span<Status> statuses) {
  if (!info_->capabilities.pipelined_write || ops.size() < 2) {
    Index::Write(ops, statuses);  // Insert / Update / Put / Delete, one after another
    return;
  }
  // As MultiGetPipelined: op j + depth is checked, hashed and prefetched before op j
  // runs whole (its preparation and commit), so the loads of `depth` ops overlap while
  // the commits stay in order (Spash's Fig. 5a pipeline).
  const size_t n = ops.size();
  const size_t depth = write_depth();
  uint64_t hashes[kMaxMultiGetDepth];
  bool valid[kMaxMultiGetDepth];
  size_t ahead = 0;
  auto start = [&](size_t j) {
    const WriteOp& op = ops[j];
    Status s = op.kind == WriteOp::Kind::kDelete ? SlotCodec::CheckKey(op.key)
                                                  : CheckKeyValue(op.key, op.value);
    if (s.ok() && op.kind > WriteOp::Kind::kDelete) {
      s = Status::InvalidArgument("write batch: unknown operation kind");
    }
    valid[j % depth] = s.ok();
    if (!s.ok()) {
      statuses[j] = std::move(s);
      return;
    }
    hashes[j % depth] = KeyHash(op.key);
    if (op.kind != WriteOp::Kind::kDelete) PrefetchValue(op.value);
    PrefetchWrite(hashes[j % depth]);
  };
  for (; ahead < n && ahead < depth; ++ahead) start(ahead);
  BeginWriteBatch();
  for (size_t i = 0; i < n; ++i) {
    if (valid[i % depth]) {
      const WriteOp& op = ops[i];
      const uint64_t h = hashes[i % depth];
      if (op.kind == WriteOp::Kind::kDelete) {
        OpScope scope(*persister_, op.key.size());
        statuses[i] = DoDelete(op.key, h);
      } else {
        OpScope scope(*persister_, op.key.size() + op.value.size());
        const WriteMode mode = op.kind == WriteOp::Kind::kInsert   ? WriteMode::kInsert
                               : op.kind == WriteOp::Kind::kUpdate ? WriteMode::kUpdate
                                                                   : WriteMode::kPut;
        statuses[i] = DoWrite(op.key, op.value, h, mode);
      }
    }
    if (ahead < n) {
      start(ahead++);  // into the slot op i just left
    } else {
      PrefetchAdvance();
    }
  }
  EndWriteBatch();
}

// ---- Engine: the root header --------------------------------------------------------

namespace {

// EngineRoot::check: magic, version and the engine's fixed root fields.
uint32_t RootCheck(uint64_t magic, uint32_t version, const void* fixed, size_t fixed_bytes) {
  const uint64_t seed = Hash64(&version, sizeof(version), magic);
  return static_cast<uint32_t>(Hash64(fixed, fixed_bytes, seed));
}

constexpr uint64_t kMetadataSeed = 0x6d65746164617461ull;  // "metadata"

}  // namespace

void Engine::CreateRoot(const RootLayout& layout, uint64_t table, uint64_t table_bytes) {
  pm::Persister& p = *persister_;
  if (table_bytes != 0) p.Persist(pool_->At<char>(table), table_bytes);
  EngineRoot* r = root_header();
  const char* fixed = reinterpret_cast<const char*>(r + 1);
  p.Store(&r->version, layout.version);
  p.Store(&r->check, RootCheck(layout.magic, layout.version, fixed, layout.fixed_bytes));
  p.Store(&r->table, SealWord(table, SaltOf(&r->table)));
  p.Store(&r->count, SealWord(0, SaltOf(&r->count)));
  p.Flush(r, layout.bytes);
  // Creation commits with the pool's state word (pool.h); the magic, stored last, keeps
  // a root that is read before then from looking valid.
  p.Publish(&r->magic, layout.magic);
  attached_root_ = r;
  root_bytes_ = layout.bytes;
}

Status Engine::ValidateRoot(const RootLayout& layout, size_t table_header_bytes,
                            uint64_t* table, uint64_t* count) const {
  const EngineRoot* r = root_header();
  const std::string at = " at pool offset ";
  if (r->magic != layout.magic) {
    return Status::Corruption(engine_name_ + ": root magic" + at +
                              std::to_string(SaltOf(&r->magic)) + " is wrong (not a " +
                              engine_name_ + " index, or damaged)");
  }
  if (r->version != layout.version) {
    return Status::Corruption(engine_name_ + ": root layout version " +
                              std::to_string(r->version) + " (this build reads " +
                              std::to_string(layout.version) + ")");
  }
  const char* fixed = reinterpret_cast<const char*>(r + 1);
  if (r->check != RootCheck(layout.magic, layout.version, fixed, layout.fixed_bytes)) {
    return Status::Corruption(engine_name_ + ": root check" + at +
                              std::to_string(SaltOf(&r->check)) +
                              " does not match its magic, version and fixed fields (damaged)");
  }
  const char* area = static_cast<const char*>(pool_->root());
  for (size_t i = layout.bytes; i < pm::kRootSize; ++i) {
    if (area[i] != 0) {
      return Status::Corruption(engine_name_ + ": root area byte" + at +
                                std::to_string(pm::kRootOffset + i) +
                                " is not zero (damaged)");
    }
  }
  uint64_t off = 0;
  PMHASH_RETURN_IF_ERROR(LoadSealed(&r->table, "root table offset", &off));
  PMHASH_RETURN_IF_ERROR(LoadSealed(&r->count, "root count", count));
  if (off == 0 || off % pm::kCacheLine != 0 || !pool_->Contains(off, table_header_bytes)) {
    return Status::Corruption(engine_name_ + ": root table offset " + std::to_string(off) +
                              " is outside the pool");
  }
  *table = off;
  return Status::OK();
}

Status Engine::OpenRoot(const RootLayout& layout, size_t table_header_bytes, uint64_t* table,
                        uint64_t* count) {
  PMHASH_RETURN_IF_ERROR(ValidateRoot(layout, table_header_bytes, table, count));
  attached_root_ = root_header();
  root_bytes_ = layout.bytes;
  return Status::OK();
}

Status Engine::NewTableBlock(uint64_t bytes, const std::string& what, uint64_t magic,
                             uint64_t size, uint64_t* offset) {
  PMHASH_RETURN_IF_ERROR(AllocateBlock(bytes, what, offset));
  pm::Persister& p = *persister_;
  auto* h = pool_->At<TableHeader>(*offset);
  p.Zero(h, bytes);
  p.Store(&h->size, size);
  p.Store(&h->magic, magic);
  return Status::OK();
}

Status Engine::ValidateTableBlock(uint64_t table, uint64_t magic, uint64_t max_size,
                                  uint64_t (*bytes)(uint64_t size), uint64_t* size) const {
  const auto* h = pool_->At<const TableHeader>(table);
  if (h->magic != magic) {
    return Status::Corruption(engine_name_ + ": the table at offset " + std::to_string(table) +
                              " has a wrong magic number");
  }
  const uint64_t n = h->size;
  if (n == 0 || n > max_size || !pool_->Contains(table, bytes(n))) {
    return Status::Corruption(engine_name_ + ": the table at offset " + std::to_string(table) +
                              " claims a size of " + std::to_string(n) +
                              ", which does not fit the pool");
  }
  *size = n;
  return Status::OK();
}

Status Engine::CheckTableBlock(uint64_t table, uint64_t bytes) const {
  if (!allocator_->IsAllocated(table) || allocator_->UsableSize(table) < bytes) {
    return Status::Corruption(engine_name_ + ": the table at offset " + std::to_string(table) +
                              " is not an allocated block of its size");
  }
  return Status::OK();
}

void Engine::PersistRootCount(uint64_t count) {
  EngineRoot* r = root_header();
  persister_->Store(&r->count, SealWord(count, SaltOf(&r->count)));
  persister_->Persist(&r->count, sizeof(r->count));
}

void Engine::PublishRootTable(uint64_t table) {
  EngineRoot* r = root_header();
  persister_->Publish(&r->table, SealWord(table, SaltOf(&r->table)));
}

Status Engine::LoadSealed(const uint64_t* word, const char* what, uint64_t* payload) const {
  if (!UnsealWord(*word, SaltOf(word), payload)) {
    return Status::Corruption(engine_name_ + ": " + what + " at pool offset " +
                              std::to_string(SaltOf(word)) + " fails its check (damaged)");
  }
  return Status::OK();
}

uint64_t Engine::MetadataCheck(const void* header, size_t len) const {
  return Hash64(header, len, SaltOf(header) ^ kMetadataSeed);
}

Status Engine::VerifyMetadata(const void* header, size_t len, uint64_t stored,
                              const std::string& what) const {
  if (stored != MetadataCheck(header, len)) {
    return Status::Corruption(engine_name_ + ": " + what + " at pool offset " +
                              std::to_string(SaltOf(header)) + " fails its checksum (damaged)");
  }
  return Status::OK();
}

void Engine::DescribeLayout(const pm::RegionVisitor& mark) const {
  mark(0, pm::kPoolHeaderSize, pm::Region::kPoolHeader, true);
  // Through the kit's root every byte of the root area checks itself (ValidateRoot): the
  // engine's root, then the zero rest. An engine with a root of its own: unchecked.
  if (root_bytes_ != 0) {
    mark(pm::kRootOffset, root_bytes_, pm::Region::kEngineMetadata, true);
    mark(pm::kRootOffset + root_bytes_, pm::kRootSize - root_bytes_,
         pm::Region::kEngineMetadata, true);
  } else {
    mark(pm::kRootOffset, pm::kRootSize, pm::Region::kEngineMetadata, false);
  }
  undo_log_->DescribeLayout(mark);
  allocator_->DescribeLayout(mark);
  DescribeEngineLayout(mark);
}

Status Engine::AllocateBlock(uint64_t bytes, const std::string& what, uint64_t* offset) {
  Result<uint64_t> block = allocator_->Allocate(bytes);
  if (!block.ok()) {
    return Status::PoolFull(engine_name_ + ": cannot allocate " + what + " (" +
                            std::to_string(bytes) + " bytes): " +
                            std::string(block.status().message()));
  }
  *offset = *block;
  return Status::OK();
}

// ---- Engine: the slot encoding's update ---------------------------------------------

Status Engine::UpdateSlot(uint8_t* form, KvWords* words, std::string_view key,
                          std::string_view value, uint64_t key_hash, uint8_t form_tag) {
  pm::Persister& ps = *persister_;
  const auto old_form = static_cast<SlotForm>(*form & ~form_tag);
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
    ps.Publish(&words->word0, record);
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
  ps.Store(form, static_cast<uint8_t>(static_cast<uint8_t>(SlotForm::kRecord) | form_tag));
  ps.Flush(words, sizeof(KvWords));  // a slot never straddles a line
  const auto line = [](const void* p) { return reinterpret_cast<uintptr_t>(p) / pm::kCacheLine; };
  if (line(form) != line(words)) ps.Flush(form, 1);
  ps.Fence();
  tx->Commit();
  undo_txs_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

}  // namespace engines
}  // namespace pmhash
