// gpulet_bench: every benchmark behind `make bench`, printed as one table.
// Usage: gpulet_bench [plugin|health|metrics|memory|image|dra|vram|recorder|explain]...   (no
// argument: all of them) The memory soak takes GPULET_BENCH_SOAK_S seconds (default 600; 0 skips
// it).
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "bench/bench_util.h"

int main(int argc, char** argv) {
  const std::set<std::string> groups = {"plugin", "health", "metrics",  "memory", "image",
                                        "dra",    "vram",   "recorder", "explain"};
  std::set<std::string> only;
  for (int i = 1; i < argc; ++i) {
    if (groups.count(argv[i]) == 0) {
      std::fprintf(stderr,
                   "gpulet_bench: unknown group '%s' (allowed: plugin health metrics memory "
                   "image dra vram recorder explain)\n",
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
  if (wanted("memory")) gpulet::RunMemoryBenchmarks(table);
  if (wanted("image")) gpulet::RunImageBenchmarks(table);
  if (wanted("dra")) gpulet::RunDraBenchmarks(table);
  if (wanted("vram")) gpulet::RunVramBenchmarks(table);
  if (wanted("recorder")) gpulet::RunRecorderBenchmarks(table);
  if (wanted("explain")) gpulet::RunExplainBenchmarks(table);
  table.Print();
  return 0;
}
