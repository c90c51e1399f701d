// Memory soak and image benchmarks, each printed next to issue 13's target:
//   - resident (VmRSS) and private (RssAnon) memory of `gpulet serve --simulate homelab` and
//     `--simulate dgx8` after GPULET_BENCH_SOAK_S seconds (default 600, the target's ten
//     minutes) of one scrape a second each, one daemon after the other; and the growth of
//     resident memory over the soak, from the end of its first tenth (start-up, the first
//     NVML samples and the first exposition build are done by then) to its end;
//   - the size of the container image `make image` builds, when podman has it.
// GPULET_BENCH_SOAK_S=0 skips the soak (its rows say so).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "testing/daemon_process.h"
#include "testing/free_port.h"
#include "testing/http_clients.h"
#include "testing/subprocess.h"

namespace gpulet::bench {
namespace {

namespace fs = std::filesystem;
using testing::DaemonProcess;

constexpr int kDefaultSoakSeconds = 600;

// A /proc/<pid>/status field in KiB; 0 when absent.
double ProcStatusKib(pid_t pid, absl::string_view key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view l = line;
    if (absl::ConsumePrefix(&l, key) && absl::ConsumePrefix(&l, ":")) {
      std::vector<absl::string_view> w = absl::StrSplit(l, ' ', absl::SkipWhitespace());
      double kib = 0;
      if (!w.empty() && absl::SimpleAtod(w[0], &kib)) return kib;
    }
  }
  return 0;
}

int SoakSeconds() {
  const char* env = std::getenv("GPULET_BENCH_SOAK_S");
  int seconds = kDefaultSoakSeconds;
  if (env != nullptr && !absl::SimpleAtoi(env, &seconds)) {
    std::fprintf(stderr, "GPULET_BENCH_SOAK_S='%s' is not a number of seconds; using %d\n", env,
                 kDefaultSoakSeconds);
    seconds = kDefaultSoakSeconds;
  }
  return std::max(seconds, 0);
}

struct SoakFigures {
  bool ok = false;
  int failed_scrapes = 0;
  double warm_rss_kib = 0;  // at the end of the soak's first tenth
  double rss_kib = 0, anon_kib = 0, hwm_kib = 0;
};

// One daemon at a time: two gpulet processes of one binary share its pages, which then
// count in both and which neither can give back after start-up (common/startup_pages.h),
// where a node runs one gpulet.
SoakFigures Soak(const char* fixture, int seconds, const fs::path& dir) {
  SoakFigures f;
  DaemonProcess process;
  const int port = testing::FreeLoopbackPort();
  process.Start({std::string(GPULET_BINARY_DIR) + "/gpulet", "--simulate", fixture, "--sim-state",
                 (dir / absl::StrCat(fixture, ".state.json")).string(), "serve", "--kubelet-dir",
                 (dir / absl::StrCat(fixture, "-kubelet")).string(), "--metrics-address",
                 absl::StrCat("127.0.0.1:", port)},
                {}, (dir / absl::StrCat(fixture, ".log")).string());
  // Ready when it answers its first scrape; the soak's clock starts then.
  bool ready = false;
  for (int i = 0; i < 200 && !ready; ++i) {
    std::optional<testing::HttpResponse> r = testing::Get(port, "/metrics", absl::Seconds(1));
    ready = r && r->status == 200;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!ready) {
    std::fprintf(stderr, "memory soak: gpulet %s did not serve /metrics:\n%s\n", fixture,
                 process.Log().c_str());
    return f;
  }
  const absl::Time start = absl::Now();
  const absl::Duration warm_up = absl::Seconds(seconds) / 10;
  for (int tick = 1; tick <= seconds; ++tick) {
    std::optional<testing::HttpResponse> r = testing::Get(port, "/metrics", absl::Seconds(5));
    if (!r || r->status != 200) ++f.failed_scrapes;
    if (f.warm_rss_kib == 0 && absl::Now() - start >= warm_up) {
      f.warm_rss_kib = ProcStatusKib(process.pid(), "VmRSS");
    }
    absl::SleepFor(start + absl::Seconds(tick) - absl::Now());
  }
  f.rss_kib = ProcStatusKib(process.pid(), "VmRSS");
  f.anon_kib = ProcStatusKib(process.pid(), "RssAnon");
  f.hwm_kib = ProcStatusKib(process.pid(), "VmHWM");
  f.ok = process.Stop(SIGTERM, absl::Seconds(5)) == 0;
  if (!f.ok) std::fprintf(stderr, "memory soak: gpulet %s:\n%s\n", fixture, process.Log().c_str());
  return f;
}

void RunSoak(BenchTable& table) {
  const int seconds = SoakSeconds();
  const std::string knob = absl::StrCat("GPULET_BENCH_SOAK_S=", seconds);
  if (seconds == 0) {
    table.Add("memory", "resident memory soak", 0, "MiB", "skipped: " + knob);
    return;
  }
  fs::path dir = fs::temp_directory_path() / ("gpulet-bench-memory-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  struct Fixture {
    const char* name;
    double target_mib;
  };
  for (const Fixture& fixture : {Fixture{"homelab", 12}, Fixture{"dgx8", 14}}) {
    SoakFigures f = Soak(fixture.name, seconds, dir);
    if (!f.ok) continue;
    const std::string who = absl::StrCat("gpulet ", fixture.name);
    const std::string failed =
        f.failed_scrapes ? absl::StrCat("; ", f.failed_scrapes, " scrapes FAILED") : "";
    table.Add("memory", who + " resident after soak", f.rss_kib / 1024, "MiB",
              absl::StrFormat("target <= %.0f MiB; peak %.1f MiB; 1 scrape/s for %d s (%s)%s",
                              fixture.target_mib, f.hwm_kib / 1024, seconds, knob, failed));
    table.Add("memory", who + " private (RssAnon) after soak", f.anon_kib / 1024, "MiB",
              "RSS less file-backed pages (code, read-only data)");
    const double growth =
        f.warm_rss_kib > 0 ? 100 * (f.rss_kib - f.warm_rss_kib) / f.warm_rss_kib : 0;
    table.Add("memory", who + " resident growth over soak", growth, "%",
              absl::StrFormat("target <= 1%%; %.1f MiB at %.0f s, %.1f MiB at %d s",
                              f.warm_rss_kib / 1024, seconds / 10.0, f.rss_kib / 1024, seconds));
  }
  fs::remove_all(dir);
}

// The image `make image` tags (its IMAGE; the Makefile passes it as GPULET_BENCH_IMAGE).
void RunImageSize(BenchTable& table) {
  const char* env = std::getenv("GPULET_BENCH_IMAGE");
  const std::string image = env != nullptr ? env : absl::StrCat("gpulet:", GPULET_VERSION);
  testing::RunResult r = testing::RunProgram(
      {"podman", "image", "inspect", "--format", "{{.Size}}", image}, {}, 30000);
  double bytes = 0;
  if (r.exit_code != 0 || !absl::SimpleAtod(absl::StripAsciiWhitespace(r.out), &bytes) ||
      bytes <= 0) {
    table.Add("image", "image size (" + image + ")", 0, "MB",
              "not built: run make image; target <= 20 MB");
    return;
  }
  table.Add("image", "image size (" + image + ")", bytes / 1e6, "MB",
            "podman image inspect; target <= 20 MB");
}

}  // namespace

void RunMemoryBenchmarks(BenchTable& table) { RunSoak(table); }

void RunImageBenchmarks(BenchTable& table) { RunImageSize(table); }

}  // namespace gpulet::bench
