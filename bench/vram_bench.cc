// The VRAM enforcement library's cost (issue 32): the test application's allocation loop,
// cuGetProcAddress and kernel launch (tests/vram/vram_app.c `bench`: medians of batches of 100
// calls) against the CUDA driver stand-in, without the library and with it, alternating, in
// one invocation; the figures are the differences. Without a compute share launches are not
// wrapped, so their difference is the floor's noise; with one (and no rate set yet, so that
// nothing waits) the last row is what the pacing's bookkeeping adds to each launch.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "testing/files.h"
#include "testing/subprocess.h"
#include "vram/slice_file.h"
#include "vram/slice_format.h"

namespace gpulet::bench {
namespace {

std::map<std::string, double> Run(bool with_library, const std::string& dir,
                                  const std::string& slice) {
  std::map<std::string, std::string> env = {
      {"LD_LIBRARY_PATH", GPULET_VRAM_TEST_DIR},
      {"GPULET_CUDA_STANDIN_STATE", dir + "/card"},
      {vram::kSliceEnv, slice},
  };
  if (with_library) env["LD_AUDIT"] = GPULET_VRAM_LIB;
  testing::RunResult r =
      testing::RunProgram({std::string(GPULET_VRAM_TEST_DIR) + "/vram_app", "bench"}, env);
  std::map<std::string, double> out;
  for (absl::string_view token : absl::StrSplit(r.out, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(token, absl::MaxSplits('=', 1));
    double v = 0;
    if (kv.size() == 2 && absl::SimpleAtod(kv[1], &v)) out[kv[0]] = v;
  }
  if (out.empty()) std::fprintf(stderr, "vram bench: %s\n", r.err.c_str());
  return out;
}

}  // namespace

void RunVramBenchmarks(BenchTable& table) {
  testing::ScratchDir dir;
  if (!vram::WriteSliceFile(dir.path(), "s", uint64_t{8} << 30, "GPU-bench", "bench").ok()) return;
  if (!vram::WriteSliceFile(dir.path(), "c", uint64_t{8} << 30, "GPU-bench", "bench", 500).ok()) {
    return;
  }
  const std::string slice = dir.path() + "/s/slice", shared = dir.path() + "/c/slice";
  std::map<std::string, std::vector<double>> without, with, paced;
  for (int round = 0; round < 5; ++round) {
    for (const auto& [k, v] : Run(false, dir.path(), slice)) without[k].push_back(v);
    for (const auto& [k, v] : Run(true, dir.path(), slice)) with[k].push_back(v);
    for (const auto& [k, v] : Run(true, dir.path(), shared)) paced[k].push_back(v);
  }
  struct Row {
    const char* key;
    const char* what;
    double per_call;  // the figure covers this many calls
    const std::map<std::string, std::vector<double>>* held;
  };
  for (const Row& row :
       {Row{"alloc_free_ns", "cuMemAlloc or cuMemFree added by the library", 2, &with},
        Row{"get_proc_ns", "cuGetProcAddress added by the library", 1, &with},
        Row{"launch_ns", "cuLaunchKernel added by the library", 1, &with},
        Row{"launch_ns", "cuLaunchKernel added under a compute share (pacing)", 1, &paced}}) {
    auto held_samples = row.held->find(row.key);
    if (held_samples == row.held->end() || without[row.key].empty()) continue;  // a run failed
    const double base = Percentile(without[row.key], 50);
    const double held = Percentile(held_samples->second, 50);
    table.Add("vram", row.what, (held - base) / row.per_call, "ns",
              absl::StrCat("stand-in driver alone ", absl::StrFormat("%.1f", base / row.per_call),
                           " ns; ratio ", absl::StrFormat("%.2f", base > 0 ? held / base : 0)));
  }
}

}  // namespace gpulet::bench
