// `pmhash put|get|del|count|dump`: one operation through pmhash::Open, then a clean Close.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <memory>

#include "pmhash/index.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "tools/text.h"

namespace pmhash::tools {

namespace {

// Writes bytes exactly (values may hold NULs), then a newline.
void PrintRecord(std::string_view bytes, bool hex, bool escape) {
  const std::string text = hex ? ToHex(bytes) : escape ? Escape(bytes) : std::string(bytes);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

// Closes the index; a failure to close turns a success into an operational error.
int Finish(Index* index, const std::string& path, int code) {
  Status s = index->Close();
  if (!s.ok() && code == kExitOk) return Fail(kExitFailure, "closing " + path + ": " + s.message());
  return code;
}

}  // namespace

int CmdData(const DataArgs& args) {
  Options options;
  std::string error;
  if (!BuildOptions(args.path, args.common, &options, &error)) return Fail(kExitUsage, error);
  std::string key = args.key, value = args.value;
  if (args.common.hex) {
    if ((args.op == DataOp::kPut || args.op == DataOp::kGet || args.op == DataOp::kDel) &&
        !FromHex(args.key, &key)) {
      return Fail(kExitUsage, "--hex: key '" + args.key + "' is not an even number of hex digits");
    }
    if (args.op == DataOp::kPut && !FromHex(args.value, &value)) {
      return Fail(kExitUsage,
                  "--hex: value '" + args.value + "' is not an even number of hex digits");
    }
  }
  struct stat st;
  if (!options.create_if_missing && ::stat(args.path.c_str(), &st) != 0 && errno == ENOENT) {
    return Fail(kExitFailure, "pool " + args.path +
                                  " does not exist (use --create --engine NAME to create it)");
  }

  std::unique_ptr<Index> index;
  Status s = Open(options, &index);
  if (!s.ok()) return Fail(kExitFailure, s.message());

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
      uint64_t n = 0;
      std::string line;
      s = index->ForEach([&](std::string_view k, std::string_view v) {
        if (args.limit != 0 && n >= args.limit) return false;
        line = args.common.hex ? ToHex(k) + '\t' + ToHex(v) : Escape(k) + '\t' + Escape(v);
        line += '\n';
        std::fwrite(line.data(), 1, line.size(), stdout);
        ++n;
        return true;
      });
      break;
    }
  }
  if (!s.ok()) {
    Finish(index.get(), args.path, kExitFailure);
    const std::string shown = args.common.hex ? ToHex(key) : Escape(key);
    if (s.IsNotFound()) return Fail(kExitFailure, "key '" + shown + "' not found");
    return Fail(kExitFailure, s.message());
  }
  if (std::fflush(stdout) != 0) {
    Finish(index.get(), args.path, kExitFailure);
    return Fail(kExitFailure, "cannot write the output");
  }
  return Finish(index.get(), args.path, kExitOk);
}

}  // namespace pmhash::tools
