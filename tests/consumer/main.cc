// A user's program against the installed library: it sees only include/pmhash/, links
// the static library without --whole-archive, and finds every engine registered.
#include <cstdio>
#include <string>

#include "pmhash/index.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer POOL_PATH\n");
    return 2;
  }
  size_t engines = 0;
  for (const pmhash::EngineDescription& e : pmhash::RegisteredEngines()) {
    std::printf("engine %s\n", e.name.c_str());
    ++engines;
  }
  if (engines == 0) {
    std::fprintf(stderr, "no engine is registered\n");
    return 1;
  }
  pmhash::Options options;
  options.engine = "group";
  options.path = argv[1];
  options.pool_size = 8 << 20;
  options.create_if_missing = true;
  std::unique_ptr<pmhash::Index> index;
  pmhash::Status s = pmhash::Open(options, &index);
  if (s.ok()) s = index->Put("key", "value");
  if (s.ok()) s = index->Close();
  if (s.ok()) {
    options.create_if_missing = false;
    s = pmhash::Open(options, &index);
  }
  std::string value;
  if (s.ok()) s = index->Get("key", &value);
  if (s.ok() && value != "value") s = pmhash::Status::Corruption("read back '" + value + "'");
  if (s.ok()) s = index->Close();
  if (!s.ok()) {
    std::fprintf(stderr, "consumer: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("ok: %zu engines, put/close/reopen/get through the installed library\n", engines);
  return 0;
}
