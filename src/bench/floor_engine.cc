#include "bench/floor_engine.h"

#include "bench/keygen.h"

namespace pmhash::bench {

uint64_t FloorWord(uint64_t line) { return Mix64(line); }

namespace {

constexpr uint32_t kFloorVersion = 1;
constexpr engines::RootLayout kRootLayout{kFloorRootMagic, kFloorVersion,
                                          sizeof(engines::EngineRoot), 0};
constexpr uint64_t kHeaderBytes = sizeof(FloorLine);  // magic, lines, padding

uint64_t TableBytes(uint64_t lines) { return kHeaderBytes + lines * sizeof(FloorLine); }

class FloorEngine : public engines::Engine {
 public:
  PMHASH_ENGINE_KIT_OVERRIDES;
  // The engines' quick lookup (Engine::QuickGet), as theirs: 8-byte keys, reads unnoted.
  engines::QuickAnswer QuickGet(uint64_t hash, uint64_t key_word) override;

 public:
  uint64_t lines() const { return num_lines_; }

 private:
  Status Attach(uint64_t table);

  // Out of line: with no call on its path, DoGet keeps no frame.
  __attribute__((noinline)) void NoteLine(const FloorLine* line) const;

  const FloorLine* lines_ = nullptr;
  uint64_t num_lines_ = 0;
  bool notes_reads_ = false;  // persister().notes_reads()
};

uint64_t FloorEngine::Count() const { return 0; }
Status FloorEngine::ForEach(const Visitor&) const { return Status::OK(); }
Status FloorEngine::DoScan(engines::ScanPage*) const { return Status::OK(); }  // no keys
Status FloorEngine::CheckInvariants() const { return Status::OK(); }

// The lookup the floor's "lookup through the API" row times: one line, its first word.
Status FloorEngine::DoGet(std::string_view, uint64_t hash, std::string* value) {
  const FloorLine* line = &lines_[Reduce(hash, num_lines_)];
  if (notes_reads_) [[unlikely]] NoteLine(line);
  engines::AssignWord(value, line->word[0]);  // the engines' value copy
  return Status::OK();
}

engines::QuickAnswer FloorEngine::QuickGet(uint64_t hash, uint64_t /*key_word*/) {
  return {lines_[Reduce(hash, num_lines_)].word[0], engines::Optimistic::kFound};
}

void FloorEngine::NoteLine(const FloorLine* line) const {
  persister().NoteRead(line, sizeof(FloorLine));
}

Status FloorEngine::DoWrite(std::string_view, std::string_view, uint64_t, engines::WriteMode) {
  return Status::InvalidArgument(std::string(kFloorEngineName) + " is read-only");
}

Status FloorEngine::DoDelete(std::string_view, uint64_t) {
  return Status::InvalidArgument(std::string(kFloorEngineName) + " is read-only");
}

Status FloorEngine::Configure(engines::EngineOptions&, const Options&) {
  SetQuickGet(true);
  return Status::OK();
}

Status FloorEngine::Create() {
  // As large as the heap allows: the largest run the allocator hands out.
  const uint64_t capacity = allocator().Capacity();
  uint64_t offset = 0;
  Status s = Status::PoolFull("no room");
  for (uint64_t bytes = capacity; bytes > capacity / 2 && !s.ok(); bytes -= capacity / 64) {
    const uint64_t lines = (bytes - kHeaderBytes) / sizeof(FloorLine);
    s = NewTableBlock(TableBytes(lines), "a table of " + std::to_string(lines) + " lines",
                      kFloorLinesMagic, lines, &offset);
  }
  PMHASH_RETURN_IF_ERROR(s);
  PMHASH_RETURN_IF_ERROR(Attach(offset));
  auto* lines = pool().At<FloorLine>(offset + kHeaderBytes);
  for (uint64_t k = 0; k < num_lines_; ++k) persister().Store(&lines[k].word[0], FloorWord(k));
  CreateRoot(kRootLayout, offset, kHeaderBytes);
  return Status::OK();
}

Status FloorEngine::Attach(uint64_t table) {
  const uint64_t max_lines = pool().size() / sizeof(FloorLine);
  PMHASH_RETURN_IF_ERROR(
      ValidateTableBlock(table, kFloorLinesMagic, max_lines, TableBytes, &num_lines_));
  lines_ = pool().At<const FloorLine>(table + kHeaderBytes);
  notes_reads_ = persister().notes_reads();
  return Status::OK();
}

Status FloorEngine::Recover(bool) {
  uint64_t table = 0, count = 0;
  PMHASH_RETURN_IF_ERROR(OpenRoot(kRootLayout, kHeaderBytes, &table, &count));
  return Attach(table);
}

Status FloorEngine::EnumerateBlocks(const pm::Allocator::LiveBlockVisitor& visit) const {
  uint64_t table = 0, count = 0;
  PMHASH_RETURN_IF_ERROR(ValidateRoot(kRootLayout, kHeaderBytes, &table, &count));
  visit(table);
  return Status::OK();
}

void FloorEngine::FillStats(IndexStats* stats) const {
  stats->count = 0;
  stats->key_slots = num_lines_;
}

void FloorEngine::DescribeEngineLayout(const pm::RegionVisitor& mark) const {
  const uint64_t table = pool().ToOffset(lines_) - kHeaderBytes;
  mark(table, kHeaderBytes, pm::Region::kEngineMetadata, false);
  mark(table + kHeaderBytes, num_lines_ * sizeof(FloorLine), pm::Region::kSlots, false);
}

const engines::EngineInfo& FloorInfo() {
  static const engines::EngineInfo* info = [] {
    auto* i = new engines::EngineInfo;
    i->description = {kFloorEngineName,
                      "test-only: reads one random 64-byte line per Get (the floor's "
                      "lookup through the API)",
                      "none", /*crash_consistent=*/false};
    i->capabilities.resizes = false;
    return i;
  }();
  return *info;
}

}  // namespace

std::unique_ptr<engines::Engine> MakeFloorEngine() {
  return engines::MakeEngine<FloorEngine>(FloorInfo());
}

uint64_t FloorEngineLines(const engines::Engine& engine) {
  return static_cast<const FloorEngine&>(engine).lines();
}

}  // namespace pmhash::bench
