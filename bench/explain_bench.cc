// `gpulet explain` throughput: how fast LogExplainer reads a long pasted log (a node's whole
// kernel log and a day of kubelet and container logs), against the floor any line reader
// pays on the same bytes, finding each '\n' with memchr, run in the same invocation.
// The input is 100 MiB of lines from five sources, with one near miss ("NVRM: API mismatch"
// without its rest) on every fifth line and the one real cause at the end.
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "doctor/explain.h"

namespace gpulet::bench {
namespace {

constexpr size_t kBytes = size_t{100} << 20;

constexpr char kBlock[] =
    "Jun 11 10:00:00 talos-07 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n"
    "I0611 10:00:01.000000 1 main.go:132] Starting FS watcher for /var/lib/kubelet\n"
    "  Warning  FailedScheduling  0/3 nodes are available: 3 node(s) didn't match\n"
    "NVRM: API mismatch: the client has the version\n"
    "time=2025-06-11T10:00:02Z level=INFO source=gpu.go:217 msg=\"looking for GPUs\"\n";

}  // namespace

void RunExplainBenchmarks(BenchTable& table) {
  const std::string block = kBlock;
  size_t lines_seen = 0;
  double floor_s = SecondsOf([&] {
    for (size_t fed = 0; fed < kBytes; fed += block.size()) {
      const char* p = block.data();
      const char* end = p + block.size();
      while (const void* nl = std::memchr(p, '\n', static_cast<size_t>(end - p))) {
        ++lines_seen;
        p = static_cast<const char*>(nl) + 1;
      }
    }
  });
  doctor::ExplainResult r;
  double explain_s = SecondsOf([&] {
    doctor::LogExplainer e;
    for (size_t fed = 0; fed < kBytes; fed += block.size()) e.Feed(block);
    e.Feed("Incompatible strategy detected auto\n");
    r = e.Finish();
  });
  if (r.found.size() != 1 || r.lines < lines_seen) {
    std::fprintf(stderr, "explain bench: found %zu causes in %zu lines (want 1 in %zu)\n",
                 r.found.size(), r.lines, lines_seen + 1);
    return;
  }
  double mib = static_cast<double>(kBytes) / (1 << 20);
  table.Add("explain", "LogExplainer, 100 MiB of mixed logs", mib / explain_s, "MiB/s",
            absl::StrFormat("%.1f s; %.0fx the memchr line-split floor (%.3f s)", explain_s,
                            explain_s / floor_s, floor_s));
}

}  // namespace gpulet::bench
