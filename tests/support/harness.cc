#include "support/harness.h"

#include <sys/stat.h>

#include <cstdlib>

#include "engines/engine.h"

namespace pmhash::testing {

Status NewDramPool(const EngineSpec& spec, uint64_t size, std::unique_ptr<pm::Pool>* pool) {
  return pm::Pool::CreateDram(spec.name, size, pool);
}

Status OpenOnPool(const EngineSpec& spec, std::unique_ptr<pm::Pool> pool, bool fresh,
                  const Options& options, pm::PersistObserver* observer,
                  std::unique_ptr<Index>* index) {
  return engines::OpenEngine(spec.make(), std::move(pool), fresh, options, observer, index);
}

Status OpenDram(const EngineSpec& spec, const Options& options, std::unique_ptr<Index>* index) {
  std::unique_ptr<pm::Pool> pool;
  PMHASH_RETURN_IF_ERROR(NewDramPool(spec, options.pool_size, &pool));
  return OpenOnPool(spec, std::move(pool), true, options, nullptr, index);
}

Status OpenFile(const EngineSpec& spec, const std::string& path, const Options& options,
                std::unique_ptr<Index>* index) {
  if (!spec.test_only) {
    Options o = options;
    o.engine = spec.name;
    o.path = path;
    return Open(o, index);
  }
  struct stat st;
  std::unique_ptr<pm::Pool> pool;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists) {
    PMHASH_RETURN_IF_ERROR(pm::Pool::Open(path, spec.name, &pool));
  } else {
    PMHASH_RETURN_IF_ERROR(pm::Pool::Create(path, spec.name, options.pool_size, &pool));
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
  Model seen;
  std::string err = Snapshot(*index, &seen);
  if (!err.empty()) return err;
  if (index->Count() != seen.size()) {
    return "Count() is " + std::to_string(index->Count()) + " but ForEach returned " +
           std::to_string(seen.size()) + " keys";
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
  auto allowed = [&](const std::string& key, const std::optional<std::string>& got) {
    auto o = open.find(key);
    if (o != open.end()) return got == o->second.before || got == o->second.after;
    auto it = model.find(key);
    return it == model.end() ? !got.has_value() : got == it->second;
  };
  auto what = [&](const std::string& key) {
    auto o = open.find(key);
    return o == open.end() ? std::string() : " (interrupted op " + Describe(*o->second.op) + ")";
  };
  for (const auto& [k, v] : seen) {
    if (!allowed(k, v)) {
      auto it = model.find(k);
      return "key " + Printable(k) + " has value " + Printable(v) + ", expected " +
             (it == model.end() ? std::string("absent") : Printable(it->second)) + what(k);
    }
  }
  for (const auto& [k, v] : model) {
    if (seen.count(k) == 0 && !allowed(k, std::nullopt)) {
      return "acknowledged key " + Printable(k) + " is missing" + what(k);
    }
  }
  for (const auto& [k, a] : open) {
    if (seen.count(k) == 0 && !allowed(k, std::nullopt)) {
      return "key " + Printable(k) + " is missing" + what(k);
    }
  }
  // Get agrees with ForEach.
  std::string value;
  for (const auto& [k, v] : seen) {
    Status s = index->Get(k, &value);
    if (!s.ok()) return "ForEach returned " + Printable(k) + " but Get says " + s.ToString();
    if (value != v) return "Get(" + Printable(k) + ") disagrees with ForEach";
  }
  for (const auto& [k, v] : model) {
    if (seen.count(k) == 0 && index->Get(k, &value).ok()) {
      return "Get finds " + Printable(k) + " which ForEach does not return";
    }
  }
  return "";
}

std::string CheckKeepsWorking(Index* index) {
  const uint64_t before = index->Count();
  for (int i = 0; i < 8; ++i) {
    const std::string k = "__after_crash_" + std::to_string(i);
    Status s = index->Insert(k, i % 2 ? std::string(8, 'v') : std::string(100, 'w'));
    if (!s.ok()) return "Insert after recovery failed: " + s.ToString();
  }
  std::string v;
  for (int i = 0; i < 8; ++i) {
    const std::string k = "__after_crash_" + std::to_string(i);
    if (!index->Get(k, &v).ok()) return "Get after recovery lost " + k;
    if (i % 2 == 0) {
      Status s = index->Delete(k);
      if (!s.ok()) return "Delete after recovery failed: " + s.ToString();
    }
  }
  if (index->Count() != before + 4) return "Count() wrong after inserts and deletes post recovery";
  return "";
}

double SoakFactor() {
  const char* s = std::getenv("PMHASH_CRASH_SOAK");
  if (s == nullptr) return 1;
  const double f = std::atof(s);
  return f >= 1 ? f : 1;
}

}  // namespace pmhash::testing
