// The pmhash command-line tool (placeholder until the tool lands).
#include <cstdio>

#include "pmhash/index.h"

int main() {
  for (const auto& e : pmhash::RegisteredEngines()) std::printf("%s\n", e.name.c_str());
  return 0;
}
