// pmhash._pmhash: the public C++ API (include/pmhash/) for Python, through nanobind. The
// Pythonic surface (context manager, mapping protocol, size strings, exception classes)
// is python/pmhash/__init__.py; this module is the thin part that must be native: every
// call releases the GIL while the index works, so Python threads run in parallel.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "pmhash/index.h"

namespace nb = nanobind;

namespace {

// The Python exception classes by Status code, set by __init__.py (set_exceptions) so
// that they are ordinary Python classes with docstrings. A strong reference kept for the
// life of the process: an nb::object here would be released by a static destructor after
// the interpreter has gone.
PyObject* g_errors = nullptr;

[[noreturn]] void Raise(const pmhash::Status& s) {
  const char* name = "Error";
  switch (s.code()) {
    case pmhash::Status::Code::kNotFound: name = "NotFound"; break;
    case pmhash::Status::Code::kAlreadyExists: name = "AlreadyExists"; break;
    case pmhash::Status::Code::kInvalidArgument: name = "InvalidArgument"; break;
    case pmhash::Status::Code::kCorruption: name = "Corruption"; break;
    case pmhash::Status::Code::kIOError: name = "IOError"; break;
    case pmhash::Status::Code::kResourceExhausted: name = "ResourceExhausted"; break;
    case pmhash::Status::Code::kBusy: name = "Busy"; break;
    default: break;
  }
  nb::object cls = nb::borrow(PyExc_RuntimeError);
  if (g_errors != nullptr) {
    nb::dict errors = nb::borrow<nb::dict>(g_errors);
    cls = errors.contains(name) ? errors[name] : errors["Error"];
  }
  PyErr_SetString(cls.ptr(), std::string(s.message()).c_str());
  throw nb::python_error();
}

void Check(const pmhash::Status& s) {
  if (!s.ok()) Raise(s);
}

// Bytes or str (UTF-8) as the key or value bytes.
std::string Bytes(nb::handle h, const char* what) {
  if (nb::isinstance<nb::bytes>(h)) {
    nb::bytes b = nb::borrow<nb::bytes>(h);
    return std::string(b.c_str(), b.size());
  }
  if (nb::isinstance<nb::str>(h)) return nb::cast<std::string>(h);
  if (PyByteArray_Check(h.ptr()) || PyMemoryView_Check(h.ptr())) {
    nb::object b = nb::steal(PyBytes_FromObject(h.ptr()));
    if (!b.is_valid()) throw nb::python_error();
    return std::string(PyBytes_AS_STRING(b.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(b.ptr())));
  }
  throw nb::type_error((std::string(what) + " must be bytes or str").c_str());
}

nb::bytes ToBytes(const std::string& s) { return nb::bytes(s.data(), s.size()); }

class Db {
 public:
  Db(const std::string& path, const std::string& engine, uint64_t size, bool create,
     const std::string& persist, const std::map<std::string, std::string>& options,
     bool counters) {
    pmhash::Options o;
    o.path = path;
    o.engine = engine;
    o.pool_size = size;
    o.create_if_missing = create;
    o.count_stats = counters;
    if (persist == "adr") {
      o.persist = pmhash::PersistMode::kAdr;
    } else if (persist == "eadr") {
      o.persist = pmhash::PersistMode::kEadr;
    } else if (persist == "none") {
      o.persist = pmhash::PersistMode::kNone;
    } else {
      throw nb::value_error(("persist must be 'adr', 'eadr' or 'none', not '" + persist + "'").c_str());
    }
    o.engine_options = options;
    pmhash::Status s;
    {
      nb::gil_scoped_release unlocked;
      s = pmhash::Open(o, &index_);
    }
    Check(s);
  }

  pmhash::Index& index() {
    if (index_ == nullptr) throw nb::value_error("the index is closed");
    return *index_;
  }

  std::optional<nb::bytes> Get(nb::handle key) {
    const std::string k = Bytes(key, "key");
    std::string v;
    pmhash::Status s;
    {
      nb::gil_scoped_release unlocked;
      s = index().Get(k, &v);
    }
    if (s.IsNotFound()) return std::nullopt;
    Check(s);
    return ToBytes(v);
  }

  template <pmhash::Status (pmhash::Index::*Op)(std::string_view, std::string_view)>
  void Write(nb::handle key, nb::handle value) {
    const std::string k = Bytes(key, "key"), v = Bytes(value, "value");
    pmhash::Index& idx = index();
    pmhash::Status s;
    {
      nb::gil_scoped_release unlocked;
      s = (idx.*Op)(k, v);
    }
    Check(s);
  }

  void Delete(nb::handle key) {
    const std::string k = Bytes(key, "key");
    pmhash::Index& idx = index();
    pmhash::Status s;
    {
      nb::gil_scoped_release unlocked;
      s = idx.Delete(k);
    }
    Check(s);
  }

  std::vector<std::optional<nb::bytes>> GetMany(nb::iterable keys) {
    std::vector<std::string> owned;
    for (nb::handle k : keys) owned.push_back(Bytes(k, "key"));
    std::vector<std::string_view> views(owned.begin(), owned.end());
    std::vector<std::string> values(owned.size());
    std::vector<pmhash::Status> statuses(owned.size());
    pmhash::Index& idx = index();
    {
      nb::gil_scoped_release unlocked;
      idx.MultiGet(views, values, statuses);
    }
    std::vector<std::optional<nb::bytes>> out;
    out.reserve(owned.size());
    for (size_t i = 0; i < owned.size(); ++i) {
      if (statuses[i].IsNotFound()) {
        out.emplace_back(std::nullopt);
      } else {
        Check(statuses[i]);
        out.emplace_back(ToBytes(values[i]));
      }
    }
    return out;
  }

  // One page of Scan: (next cursor, [(key, value), ...]); next 0 ends the scan.
  nb::tuple ScanPage(uint64_t cursor, size_t max_keys) {
    std::vector<std::pair<std::string, std::string>> page;
    uint64_t next = 0;
    pmhash::Index& idx = index();
    pmhash::Status s;
    {
      nb::gil_scoped_release unlocked;
      s = idx.Scan(
          cursor, max_keys,
          [&](std::string_view k, std::string_view v) {
            page.emplace_back(k, v);
            return true;
          },
          &next);
    }
    Check(s);
    nb::list items;
    for (const auto& [k, v] : page) items.append(nb::make_tuple(ToBytes(k), ToBytes(v)));
    return nb::make_tuple(next, items);
  }

  uint64_t Count() { return index().Count(); }

  nb::dict Stats() {
    const pmhash::IndexStats st = index().Stats();
    nb::dict d;
    d["engine"] = st.engine;
    d["count"] = st.count;
    d["key_slots"] = st.key_slots;
    d["load_factor"] = st.load_factor;
    d["pm_bytes"] = st.pm_bytes;
    d["pool_bytes"] = st.pool_bytes;
    d["dram_bytes"] = st.dram_bytes;
    d["mapping"] = st.mapping;
    d["recovered"] = st.recovered;
    d["recovery_ms"] = st.recovery_ms;
    d["counted"] = st.counted;
    d["flushes"] = st.persist.flushes;
    d["fences"] = st.persist.fences;
    d["pm_bytes_stored"] = st.persist.bytes_stored;
    nb::dict counters;
    for (const auto& [name, value] : st.engine_counters) counters[name.c_str()] = value;
    d["engine_counters"] = counters;
    return d;
  }

  void Sync() {
    pmhash::Index& idx = index();
    pmhash::Status s;
    {
      nb::gil_scoped_release unlocked;
      s = idx.Sync();
    }
    Check(s);
  }

  void Close() {
    if (index_ == nullptr) return;
    pmhash::Status s;
    {
      nb::gil_scoped_release unlocked;
      s = index_->Close();
    }
    index_.reset();
    Check(s);
  }

  bool closed() const { return index_ == nullptr; }

 private:
  std::unique_ptr<pmhash::Index> index_;
};

}  // namespace

NB_MODULE(_pmhash, m) {
  m.doc() = "The native part of pmhash (use the pmhash package, not this module).";
  m.def("set_exceptions",
        [](nb::dict errors) {
          Py_XDECREF(g_errors);
          g_errors = errors.inc_ref().ptr();
        },
        "Registers the exception classes by Status name (pmhash/__init__.py).");
  m.def("engines", [] {
    nb::list out;
    for (const pmhash::EngineDescription& e : pmhash::RegisteredEngines()) {
      nb::dict d;
      d["name"] = e.name;
      d["summary"] = e.summary;
      d["paper"] = e.paper;
      d["crash_consistent"] = e.crash_consistent;
      out.append(d);
    }
    return out;
  });
  m.attr("MAX_KEY_SIZE") = pmhash::kMaxKeySize;
  m.attr("MAX_VALUE_SIZE") = pmhash::kMaxValueSize;
  nb::class_<Db>(m, "Db")
      .def(nb::init<const std::string&, const std::string&, uint64_t, bool, const std::string&,
                    const std::map<std::string, std::string>&, bool>(),
           nb::arg("path"), nb::arg("engine"), nb::arg("size"), nb::arg("create"),
           nb::arg("persist"), nb::arg("options"), nb::arg("counters"))
      .def("get", &Db::Get)
      .def("insert", &Db::Write<&pmhash::Index::Insert>)
      .def("update", &Db::Write<&pmhash::Index::Update>)
      .def("put", &Db::Write<&pmhash::Index::Put>)
      .def("delete", &Db::Delete)
      .def("get_many", &Db::GetMany)
      .def("scan_page", &Db::ScanPage)
      .def("count", &Db::Count)
      .def("stats", &Db::Stats)
      .def("sync", &Db::Sync)
      .def("close", &Db::Close)
      .def_prop_ro("closed", &Db::closed);
}
