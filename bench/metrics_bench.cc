// Metrics benchmarks: `gpulet serve --simulate {homelab,dgx8}` and Debian's
// prometheus-node-exporter (the exporter every Prometheus user already runs), measured the
// same way in the same run:
//   - scrape latency p50/p99 and throughput under concurrent load (wrk, 2 threads,
//     8 connections, 5 s), including the HTTP stack both ways;
//   - resident memory (VmRSS, the peak VmHWM, and RssAnon: RSS without the shared
//     libraries' mapped code) after the load;
//   - CPU while scraped once a second for 10 s (gpulet also samples NVML every second then),
//     as a share of one core, from /proc/<pid>/stat.
// Every process is real and talks over loopback TCP, as Prometheus would.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/bench_util.h"
#include "httplib.h"
#include "testing/daemon_process.h"
#include "testing/free_port.h"
#include "testing/subprocess.h"

namespace gpulet {
namespace {

namespace fs = std::filesystem;
using testing::DaemonProcess;

constexpr char kWrk[] = "/usr/bin/wrk";
constexpr char kNodeExporter[] = "/usr/bin/prometheus-node-exporter";

struct ExporterFigures {
  bool ok = false;
  double p50_ms = 0, p99_ms = 0, rps = 0;
  double rss_mib = 0, hwm_mib = 0, anon_mib = 0;
  double cpu_percent = 0;
  size_t bytes = 0;
  std::string error;
};

// "123.45us" / "1.20ms" / "2.00s" → milliseconds.
std::optional<double> WrkDuration(absl::string_view v) {
  double scale = 0;
  if (absl::ConsumeSuffix(&v, "us")) {
    scale = 1e-3;
  } else if (absl::ConsumeSuffix(&v, "ms")) {
    scale = 1;
  } else if (absl::ConsumeSuffix(&v, "s")) {
    scale = 1e3;
  } else {
    return std::nullopt;
  }
  double x = 0;
  if (!absl::SimpleAtod(v, &x)) return std::nullopt;
  return x * scale;
}

void ParseWrk(const std::string& out, ExporterFigures* f) {
  bool in_dist = false;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(line, "Latency Distribution")) {
      in_dist = true;
      continue;
    }
    std::vector<absl::string_view> w = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (in_dist && w.size() == 2 && (w[0] == "50%" || w[0] == "99%")) {
      std::optional<double> ms = WrkDuration(w[1]);
      if (ms) (w[0] == "50%" ? f->p50_ms : f->p99_ms) = *ms;
    }
    if (w.size() == 2 && w[0] == "Requests/sec:") (void)absl::SimpleAtod(w[1], &f->rps);
  }
}

double StatusKib(pid_t pid, absl::string_view key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view l = line;
    if (absl::ConsumePrefix(&l, key) && absl::ConsumePrefix(&l, ":")) {
      double kib = 0;
      std::vector<absl::string_view> w = absl::StrSplit(l, ' ', absl::SkipWhitespace());
      if (!w.empty() && absl::SimpleAtod(w[0], &kib)) return kib;
    }
  }
  return 0;
}

// utime + stime of a process, in seconds.
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  size_t close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> f = absl::StrSplit(s.substr(close + 2), ' ');
  // After "(comm) ": field 3 (state) is f[0]; utime and stime are fields 14 and 15.
  if (f.size() < 13) return 0;
  double ticks = 0, sticks = 0;
  (void)absl::SimpleAtod(f[11], &ticks);
  (void)absl::SimpleAtod(f[12], &sticks);
  return (ticks + sticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

ExporterFigures Measure(DaemonProcess& proc, int port, const std::string& must_contain) {
  ExporterFigures f;
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  std::string body;
  for (int i = 0; i < 200; ++i) {
    auto r = c.Get("/metrics");
    if (r && r->status == 200 && r->body.find(must_contain) != std::string::npos) {
      body = r->body;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (body.empty()) {
    f.error = absl::StrCat("no ", must_contain, " on port ", port, ":\n", proc.Log());
    return f;
  }
  f.bytes = body.size();
  testing::RunResult wrk =
      testing::RunProgram({kWrk, "-t2", "-c8", "-d5s", "--latency",
                           absl::StrCat("http://127.0.0.1:", port, "/metrics")},
                          {}, 30000);
  if (wrk.exit_code != 0) {
    f.error = absl::StrCat("wrk failed (", wrk.exit_code, "): ", wrk.err);
    return f;
  }
  ParseWrk(wrk.out, &f);
  f.rss_mib = StatusKib(proc.pid(), "VmRSS") / 1024;
  f.hwm_mib = StatusKib(proc.pid(), "VmHWM") / 1024;
  f.anon_mib = StatusKib(proc.pid(), "RssAnon") / 1024;
  // CPU at Prometheus's pace: one scrape a second for 10 s.
  double cpu0 = CpuSeconds(proc.pid());
  absl::Time t0 = absl::Now();
  for (int i = 0; i < 10; ++i) {
    c.Get("/metrics");
    std::this_thread::sleep_until(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
  f.cpu_percent = 100 * (CpuSeconds(proc.pid()) - cpu0) / absl::ToDoubleSeconds(absl::Now() - t0);
  f.ok = f.p99_ms > 0;
  if (!f.ok) f.error = "could not read wrk's latency distribution:\n" + wrk.out;
  return f;
}

void AddRows(BenchTable& table, const std::string& who, const ExporterFigures& f,
             const ExporterFigures* peer) {
  auto ratio = [&](double mine, double theirs) {
    return peer != nullptr && theirs > 0 ? absl::StrFormat("; %.3gx node_exporter", mine / theirs)
                                         : std::string();
  };
  table.Add("metrics", who + " scrape p50", f.p50_ms, "ms",
            absl::StrCat("wrk -t2 -c8 -d5s; ", f.bytes, " bytes/scrape",
                         peer ? ratio(f.p50_ms, peer->p50_ms) : ""));
  table.Add("metrics", who + " scrape p99", f.p99_ms, "ms",
            (peer ? "target < 1 ms" : "") + ratio(f.p99_ms, peer ? peer->p99_ms : 0));
  table.Add("metrics", who + " scrapes/s", f.rps, "1/s", ratio(f.rps, peer ? peer->rps : 0));
  table.Add("metrics", who + " resident memory", f.rss_mib, "MiB",
            absl::StrFormat("peak %.1f MiB", f.hwm_mib) + (peer ? "; target < 20 MiB" : "") +
                ratio(f.rss_mib, peer ? peer->rss_mib : 0));
  table.Add("metrics", who + " private memory (RssAnon)", f.anon_mib, "MiB",
            "RSS less mapped library code" + ratio(f.anon_mib, peer ? peer->anon_mib : 0));
  table.Add("metrics", who + " CPU, 1 scrape/s", f.cpu_percent, "%core",
            (peer ? "1 s sampling; target < 1%" : "collects on each scrape") +
                ratio(f.cpu_percent, peer ? peer->cpu_percent : 0));
}

}  // namespace

void RunMetricsBenchmarks(BenchTable& table) {
  if (!fs::exists(kWrk) || !fs::exists(kNodeExporter)) {
    std::fprintf(stderr,
                 "metrics benchmarks skipped: %s or %s is missing (scripts/deps.sh bench)\n", kWrk,
                 kNodeExporter);
    return;
  }
  fs::path dir = fs::temp_directory_path() / ("gpulet-bench-metrics-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);

  ExporterFigures peer;
  {
    DaemonProcess node_exporter;
    int port = testing::FreeLoopbackPort();
    if (node_exporter.Start({kNodeExporter, absl::StrCat("--web.listen-address=127.0.0.1:", port)},
                            {}, (dir / "node_exporter.log").string())) {
      peer = Measure(node_exporter, port, "node_cpu_seconds_total");
      node_exporter.Stop(SIGTERM, absl::Seconds(5));
    }
    if (!peer.ok) std::fprintf(stderr, "node_exporter: %s\n", peer.error.c_str());
  }
  for (const char* fixture : {"homelab", "dgx8"}) {
    DaemonProcess gpulet;
    int port = testing::FreeLoopbackPort();
    gpulet.Start(
        {std::string(GPULET_BINARY_DIR) + "/gpulet", "--simulate", fixture, "--sim-state",
         (dir / absl::StrCat(fixture, ".state.json")).string(), "serve", "--kubelet-dir",
         (dir / "kubelet").string(), "--metrics-address", absl::StrCat("127.0.0.1:", port)},
        {}, (dir / absl::StrCat(fixture, ".log")).string());
    ExporterFigures f = Measure(gpulet, port, "DCGM_FI_DEV_GPU_TEMP{gpu=\"1\"");
    gpulet.Stop(SIGTERM, absl::Seconds(5));
    if (!f.ok) {
      std::fprintf(stderr, "gpulet %s: %s\n", fixture, f.error.c_str());
      continue;
    }
    AddRows(table, absl::StrCat("gpulet ", fixture), f, peer.ok ? &peer : nullptr);
  }
  if (peer.ok) AddRows(table, "node_exporter", peer, nullptr);
  fs::remove_all(dir);
}

}  // namespace gpulet
