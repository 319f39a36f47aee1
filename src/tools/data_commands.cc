// `pmhash put|get|del|count|dump`: one operation through pmhash::Open, then a clean Close.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "pmhash/index.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "tools/text.h"

namespace pmhash::tools {

namespace {

// Keys `dump` asks Scan for per page.
constexpr size_t kDumpPageKeys = 1024;

// Writes bytes exactly (values may hold NULs), then a newline.
void PrintRecord(std::string_view bytes, bool hex, bool escape) {
  const std::string text = hex ? ToHex(bytes) : escape ? Escape(bytes) : std::string(bytes);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

// Closes the index; a failure to close turns a success into an operational error.
int Finish(Index* index, const std::string& path, int code) {
  Status s = index->Close();
  if (!s.ok() && code == kExitOk) return Fail(kExitFailure, "closing " + path + ": " + std::string(s.message()));
  return code;
}

// Reads all of stdin, byte for byte, into *out: at most max_bytes (false if there is
// more, or on a read error; *error says which, calling the input `what`).
bool ReadStdin(size_t max_bytes, const char* what, std::string* out, std::string* error) {
  out->clear();
  char buf[64 * 1024];
  for (;;) {
    const size_t n = std::fread(buf, 1, sizeof(buf), stdin);
    if (n > max_bytes - out->size()) {
      *error = std::string(what) + " on stdin is longer than the limit of " +
               std::to_string(max_bytes) + " bytes";
      return false;
    }
    out->append(buf, n);
    if (n < sizeof(buf)) break;
  }
  if (std::ferror(stdin)) {
    *error = std::string("cannot read the value from stdin: ") + std::strerror(errno);
    return false;
  }
  return true;
}

// Hex text read from stdin may be wrapped into lines (xxd -p) or end with a newline
// (echo): whitespace is dropped.
std::string WithoutSpace(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') out += c;
  }
  return out;
}

}  // namespace

int OpenPool(const Options& options, std::unique_ptr<Index>* index) {
  struct stat st;
  if (!options.create_if_missing && ::stat(options.path.c_str(), &st) != 0 && errno == ENOENT) {
    return Fail(kExitFailure, "pool " + options.path +
                                  " does not exist (use --create --engine NAME to create it)");
  }
  const Status s = Open(options, index);
  return s.ok() ? kExitOk : Fail(kExitFailure, s.message());
}

int CmdData(const DataArgs& args) {
  Options options;
  std::string error;
  if (!BuildOptions(args.path, args.common, &options, &error)) return Fail(kExitUsage, error);
  uint64_t limit = 0, cursor = 0;
  if (!args.limit.empty() && !ParseCount(args.limit, &limit, &error)) {
    return Fail(kExitUsage, "--limit: " + error);
  }
  if (!args.cursor.empty() && !ParseCount(args.cursor, &cursor, &error)) {
    return Fail(kExitUsage, "--cursor: " + error);
  }
  std::string key = args.key, value = args.value;
  const bool value_from_stdin = args.op == DataOp::kPut && args.value == "-";
  if (value_from_stdin) {
    // Raw: the value limit itself. Hex: two digits a byte, plus room for line breaks.
    const size_t max = args.common.hex ? 3 * kMaxValueSize : kMaxValueSize;
    std::string text;
    if (!ReadStdin(max, args.common.hex ? "the hex text" : "the value", &text, &error)) {
      return Fail(kExitFailure, error);
    }
    if (!args.common.hex) {
      value = std::move(text);
    } else if (!FromHex(WithoutSpace(text), &value)) {
      return Fail(kExitUsage, "--hex: the value on stdin (" + std::to_string(text.size()) +
                                  " bytes) is not an even number of hex digits");
    }
  }
  if (args.common.hex) {
    if ((args.op == DataOp::kPut || args.op == DataOp::kGet || args.op == DataOp::kDel) &&
        !FromHex(args.key, &key)) {
      return Fail(kExitUsage, "--hex: key " + Shown(args.key) +
                                  " is not an even number of hex digits");
    }
    if (args.op == DataOp::kPut && !value_from_stdin && !FromHex(args.value, &value)) {
      return Fail(kExitUsage, "--hex: value " + Shown(args.value) +
                                  " is not an even number of hex digits");
    }
  }
  std::unique_ptr<Index> index;
  if (const int code = OpenPool(options, &index); code != kExitOk) return code;
  Status s;

  switch (args.op) {
    case DataOp::kPut:
      s = index->Put(key, value);
      break;
    case DataOp::kGet: {
      std::string v;
      s = index->Get(key, &v);
      if (s.ok()) PrintRecord(v, args.common.hex, /*escape=*/false);
      break;
    }
    case DataOp::kDel:
      s = index->Delete(key);
      break;
    case DataOp::kCount:
      std::printf("%llu\n", static_cast<unsigned long long>(index->Count()));
      break;
    case DataOp::kDump: {
      // Page by page through Scan: a page at a time in memory, printed with no lock held.
      uint64_t n = 0;
      std::string line;
      for (uint64_t next = cursor; s.ok();) {
        s = index->Scan(next, kDumpPageKeys, [&](std::string_view k, std::string_view v) {
          line = args.common.hex ? ToHex(k) + '\t' + ToHex(v) : Escape(k) + '\t' + Escape(v);
          line += '\n';
          std::fwrite(line.data(), 1, line.size(), stdout);
          return limit == 0 || ++n < limit;
        }, &next);
        if (!s.ok() || next == 0) break;
        if (limit != 0 && n >= limit) {
          // Scan resumes at the bucket of the next record: the ones of that bucket already
          // printed are printed again.
          std::fprintf(stderr, "pmhash: stopped after %llu records (--limit); --cursor %llu "
                       "resumes the dump (the last few may print again)\n",
                       static_cast<unsigned long long>(n), static_cast<unsigned long long>(next));
          break;
        }
      }
      break;
    }
  }
  if (!s.ok()) {
    Finish(index.get(), args.path, kExitFailure);
    if (s.IsNotFound()) {
      return Fail(kExitFailure, "key " + Shown(key, args.common.hex) + " not found");
    }
    return Fail(kExitFailure, s.message());
  }
  if (std::fflush(stdout) != 0) {
    Finish(index.get(), args.path, kExitFailure);
    return Fail(kExitFailure, "cannot write the output");
  }
  return Finish(index.get(), args.path, kExitOk);
}

}  // namespace pmhash::tools
