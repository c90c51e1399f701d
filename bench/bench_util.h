// Small helpers shared by gpulet's benchmarks: timing, percentiles and the printed result
// table.
//
// Thread-safety: single-threaded use.
#ifndef GPULET_BENCH_BENCH_UTIL_H_
#define GPULET_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpulet::bench {

// How long `f()` takes, in seconds of the monotonic clock.
template <typename F>
double SecondsOf(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The p-th percentile (0..100) by nearest rank; 0 for an empty set.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(rank, v.size() - 1)];
}

class BenchTable {
 public:
  void Add(std::string group, std::string what, double value, std::string unit, std::string note) {
    rows_.push_back({std::move(group), std::move(what), value, std::move(unit), std::move(note)});
  }
  void Print() const {
    std::printf("%-10s %-48s %12s  %-5s %s\n", "area", "measure", "value", "unit", "note");
    for (const Row& r : rows_) {
      std::printf("%-10s %-48s %12.3f  %-5s %s\n", r.group.c_str(), r.what.c_str(), r.value,
                  r.unit.c_str(), r.note.c_str());
    }
  }

 private:
  struct Row {
    std::string group, what;
    double value;
    std::string unit, note;
  };
  std::vector<Row> rows_;
};

void RunPluginBenchmarks(BenchTable& table);
void RunHealthBenchmarks(BenchTable& table);
void RunMetricsBenchmarks(BenchTable& table);
void RunMemoryBenchmarks(BenchTable& table);
void RunImageBenchmarks(BenchTable& table);
void RunDraBenchmarks(BenchTable& table);
void RunVramBenchmarks(BenchTable& table);
void RunRecorderBenchmarks(BenchTable& table);
void RunExplainBenchmarks(BenchTable& table);

}  // namespace gpulet::bench

#endif  // GPULET_BENCH_BENCH_UTIL_H_
