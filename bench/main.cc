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
  gpulet::bench::BenchTable table;
  if (wanted("plugin")) gpulet::bench::RunPluginBenchmarks(table);
  if (wanted("health")) gpulet::bench::RunHealthBenchmarks(table);
  if (wanted("metrics")) gpulet::bench::RunMetricsBenchmarks(table);
  if (wanted("memory")) gpulet::bench::RunMemoryBenchmarks(table);
  if (wanted("image")) gpulet::bench::RunImageBenchmarks(table);
  if (wanted("dra")) gpulet::bench::RunDraBenchmarks(table);
  if (wanted("vram")) gpulet::bench::RunVramBenchmarks(table);
  if (wanted("recorder")) gpulet::bench::RunRecorderBenchmarks(table);
  if (wanted("explain")) gpulet::bench::RunExplainBenchmarks(table);
  table.Print();
  return 0;
}
