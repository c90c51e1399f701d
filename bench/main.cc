// gpulet_bench: every benchmark behind `make bench`, printed as one table.
// Usage: gpulet_bench [plugin|health|metrics]...   (no argument: all of them)
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "bench/bench_util.h"

int main(int argc, char** argv) {
  std::set<std::string> only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "plugin") != 0 && std::strcmp(argv[i], "health") != 0 &&
        std::strcmp(argv[i], "metrics") != 0) {
      std::fprintf(stderr, "gpulet_bench: unknown group '%s' (allowed: plugin health metrics)\n",
                   argv[i]);
      return 2;
    }
    only.insert(argv[i]);
  }
  auto wanted = [&](const char* group) { return only.empty() || only.count(group) > 0; };
  gpulet::BenchTable table;
  if (wanted("plugin")) gpulet::RunPluginBenchmarks(table);
  if (wanted("health")) gpulet::RunHealthBenchmarks(table);
  if (wanted("metrics")) gpulet::RunMetricsBenchmarks(table);
  table.Print();
  return 0;
}
