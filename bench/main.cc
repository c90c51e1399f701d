// gpulet_bench: every benchmark behind `make bench`, printed as one table.
#include "bench/bench_util.h"

int main() {
  gpulet::BenchTable table;
  gpulet::RunPluginBenchmarks(table);
  gpulet::RunHealthBenchmarks(table);
  gpulet::RunMetricsBenchmarks(table);
  table.Print();
  return 0;
}
