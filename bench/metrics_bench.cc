// Metrics benchmarks: `gpulet serve --simulate {homelab,dgx8}` and Debian's
// prometheus-node-exporter (the exporter every Prometheus user already runs), measured the
// same way in the same run:
//   - scrape latency p50/p99 and throughput under concurrent load (wrk, 2 threads,
//     8 connections, 5 s), including the HTTP stack both ways;
//   - resident memory (VmRSS, the peak VmHWM, and RssAnon: RSS without the shared
//     libraries' mapped code) after the load;
//   - CPU while scraped once a second for 10 s (gpulet also samples NVML every second then),
//     as a share of one core, from /proc/<pid>/stat.
//   - the HTTP server alone, against a floor: scrape p50/p99 and throughput at 1, 8, 64 and
//     256 concurrent connections (wrk, 3 s a round, two rounds interleaved, each side's best
//     figures kept) for `gpulet serve --simulate homelab` (a 16.7 KiB exposition) and for a
//     minimal libmicrohttpd server in this binary that serves the same body bytes (one
//     prebuilt response, one epoll thread): what the library costs by itself;
//   - /healthz and /metrics p99 (a new connection per request, as a kubelet probe makes)
//     while 1,000 idle keep-alive and 200 slowloris connections are open on gpulet.
// Every process is real and talks over loopback TCP, as Prometheus would.
#include <microhttpd.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "testing/daemon_process.h"
#include "testing/fake_pod_resources.h"
#include "testing/free_port.h"
#include "testing/http_clients.h"
#include "testing/subprocess.h"

namespace gpulet::bench {
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
            absl::StrFormat("peak %.1f MiB", f.hwm_mib) +
                (peer ? "; after wrk (targets: memory soak rows)" : "") +
                ratio(f.rss_mib, peer ? peer->rss_mib : 0));
  table.Add("metrics", who + " private memory (RssAnon)", f.anon_mib, "MiB",
            "RSS less mapped library code" + ratio(f.anon_mib, peer ? peer->anon_mib : 0));
  table.Add("metrics", who + " CPU, 1 scrape/s", f.cpu_percent, "%core",
            (peer ? "1 s sampling; target < 1%" : "collects on each scrape") +
                ratio(f.cpu_percent, peer ? peer->cpu_percent : 0));
}

// The floor: the smallest correct libmicrohttpd server for one body (keep-alive, the
// response built once) on one thread: the library's epoll mode, its epoll descriptor waited
// on, then MHD_run. (The library's own loops do worse at 256 connections here: its internal
// epoll thread about 1,600 requests/s, MHD_run_wait about 14,000, this loop about 60,000.)
class FloorServer {
 public:
  explicit FloorServer(std::string body) : body_(std::move(body)) {}
  ~FloorServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
    if (response_ != nullptr) MHD_destroy_response(response_);
  }
  bool Start(int port) {
    response_ = MHD_create_response_from_buffer(body_.size(), body_.data(), MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(response_, "Content-Type", "text/plain; version=0.0.4");
    daemon_ = MHD_start_daemon(MHD_USE_EPOLL, static_cast<uint16_t>(port), nullptr, nullptr,
                               &FloorServer::Handle, this, MHD_OPTION_CONNECTION_LIMIT, 4096u,
                               MHD_OPTION_END);
    if (daemon_ == nullptr) return false;
    const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_EPOLL_FD);
    if (info == nullptr) return false;
    int mhd_fd = info->epoll_fd;
    thread_ = std::thread([this, mhd_fd] {
      int ep = epoll_create1(EPOLL_CLOEXEC);
      epoll_event ev{};
      ev.events = EPOLLIN;
      epoll_ctl(ep, EPOLL_CTL_ADD, mhd_fd, &ev);
      while (!stop_) {
        MHD_UNSIGNED_LONG_LONG timeout = 0;
        int wait_ms = 100;
        if (MHD_get_timeout(daemon_, &timeout) == MHD_YES && timeout < 100) {
          wait_ms = static_cast<int>(timeout);
        }
        epoll_wait(ep, &ev, 1, wait_ms);
        MHD_run(daemon_);
      }
      close(ep);
    });
    return true;
  }

 private:
  static MHD_Result Handle(void* cls, MHD_Connection* c, const char*, const char*, const char*,
                           const char*, size_t* upload_data_size, void** req_cls) {
    static int seen;
    if (*req_cls == nullptr) {  // answering in the first call would close the connection
      *req_cls = &seen;
      return MHD_YES;
    }
    *upload_data_size = 0;
    return MHD_queue_response(c, MHD_HTTP_OK, static_cast<FloorServer*>(cls)->response_);
  }

  std::string body_;
  MHD_Response* response_ = nullptr;
  MHD_Daemon* daemon_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct WrkFigures {
  bool ok = false;
  double p50_ms = 0, p99_ms = 0, rps = 0;
  std::string error;
};

WrkFigures RunWrk(int port, int connections) {
  WrkFigures w;
  int threads = std::min(connections, 2);
  testing::RunResult r = testing::RunProgram(
      {kWrk, absl::StrCat("-t", threads), absl::StrCat("-c", connections), "-d3s", "--latency",
       absl::StrCat("http://127.0.0.1:", port, "/metrics")},
      {}, 30000);
  if (r.exit_code != 0) {
    w.error = absl::StrCat("wrk failed (", r.exit_code, "): ", r.err);
    return w;
  }
  ExporterFigures f;
  ParseWrk(r.out, &f);
  w.p50_ms = f.p50_ms;
  w.p99_ms = f.p99_ms;
  w.rps = f.rps;
  w.ok = f.p99_ms > 0 && f.rps > 0;
  if (!w.ok) w.error = "could not read wrk's output:\n" + r.out;
  if (w.ok && (absl::StrContains(r.out, "Non-2xx") || absl::StrContains(r.out, "Socket errors"))) {
    w.ok = false;
    w.error = "wrk saw errors:\n" + r.out;
  }
  return w;
}

// Folds a second round into `best`: the lower latencies and the higher rate of the two.
void KeepBest(const WrkFigures& again, WrkFigures* best) {
  if (!again.ok) return;
  best->p50_ms = std::min(best->p50_ms, again.p50_ms);
  best->p99_ms = std::min(best->p99_ms, again.p99_ms);
  best->rps = std::max(best->rps, again.rps);
}

// p99 of `n` requests for `path`, each on a new connection; failures count as `bound`.
double ProbeP99(int port, const std::string& path, int n, absl::Duration bound, int* failed) {
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    absl::Time t0 = absl::Now();
    std::optional<testing::HttpResponse> r = testing::Get(port, path, bound);
    bool ok = r && r->status == 200;
    if (!ok) ++*failed;
    ms.push_back(ok ? absl::ToDoubleMilliseconds(absl::Now() - t0)
                    : absl::ToDoubleMilliseconds(bound));
  }
  return Percentile(ms, 99);
}

// The HTTP server alone against the floor, then under idle and slowloris connections.
void RunServerBenchmarks(BenchTable& table, const fs::path& dir) {
  DaemonProcess gpulet;
  int port = testing::FreeLoopbackPort();
  gpulet.Start(
      {std::string(GPULET_BINARY_DIR) + "/gpulet", "--simulate", "homelab", "--sim-state",
       (dir / "server.state.json").string(), "serve", "--kubelet-dir",
       (dir / "kubelet-server").string(), "--metrics-address", absl::StrCat("127.0.0.1:", port)},
      {}, (dir / "server.log").string());
  std::string body;
  for (int i = 0; i < 200 && body.empty(); ++i) {
    std::optional<testing::HttpResponse> r = testing::Get(port, "/metrics", absl::Seconds(1));
    if (r && r->status == 200 && absl::StrContains(r->body, "DCGM_FI_DEV_GPU_TEMP{gpu=\"1\"")) {
      body = r->body;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (body.empty()) {
    std::fprintf(stderr, "server benchmarks: gpulet did not serve /metrics:\n%s\n",
                 gpulet.Log().c_str());
    return;
  }
  FloorServer floor(body);
  int floor_port = testing::FreeLoopbackPort();
  if (!floor.Start(floor_port)) {
    std::fprintf(stderr, "server benchmarks: the floor server did not start on port %d\n",
                 floor_port);
    return;
  }
  const std::string size = absl::StrFormat("%.1f KiB body", body.size() / 1024.0);
  for (int c : {1, 8, 64, 256}) {
    // Two rounds, interleaved (gpulet, floor, gpulet, floor), each side's best figure of
    // its two kept: on two cores, a few seconds of noise from the rest of the machine would
    // otherwise land on one side only.
    WrkFigures g = RunWrk(port, c);
    WrkFigures f = RunWrk(floor_port, c);
    if (g.ok && f.ok) {
      KeepBest(RunWrk(port, c), &g);
      KeepBest(RunWrk(floor_port, c), &f);
    }
    if (!g.ok || !f.ok) {
      std::fprintf(stderr, "server benchmarks at %d connections: %s%s\n", c, g.error.c_str(),
                   f.error.c_str());
      continue;
    }
    std::string conns = absl::StrCat(c, " conn");
    table.Add("http", absl::StrCat("gpulet scrape p50, ", conns), g.p50_ms, "ms",
              absl::StrFormat("floor %.3f ms; %s; wrk -d3s, best of 2 each", f.p50_ms, size));
    table.Add("http", absl::StrCat("gpulet scrape p99, ", conns), g.p99_ms, "ms",
              absl::StrFormat("floor %.3f ms (%.2fx)%s", f.p99_ms, g.p99_ms / f.p99_ms,
                              c == 64 ? "; target <= 1.5x floor" : ""));
    table.Add("http", absl::StrCat("gpulet scrapes/s, ", conns), g.rps, "1/s",
              absl::StrFormat("floor %.0f/s (%.2fx); target >= 0.9x floor", f.rps, g.rps / f.rps));
  }

  // 1,000 idle keep-alive connections (each answered once) and 200 slowloris connections
  // dribbling a header byte a second; then probes, each on a new connection. All within
  // gpulet's 10 s header deadline, so every one of them is still open while probed.
  testing::IdleKeepAlive idle;
  bool idle_ok = idle.Open(port, 1000, absl::Seconds(10));
  testing::SlowClients slow;
  int slow_open = slow.Open(port, 200, /*drip=*/true);
  int failed_h = 0, failed_m = 0;
  double healthz = ProbeP99(port, "/healthz", 200, absl::Seconds(1), &failed_h);
  double metrics = ProbeP99(port, "/metrics", 200, absl::Seconds(1), &failed_m);
  int slow_closed = slow.ClosedByServer();
  std::string held = absl::StrFormat(
      "%d idle (%s) + %d slowloris open (%d closed by then); target <= 10 ms", idle.size(),
      idle_ok ? "all answered" : "NOT all answered", slow_open, slow_closed);
  table.Add("http", "gpulet /healthz p99, 1000 idle + 200 slow", healthz, "ms",
            absl::StrCat(held, failed_h ? absl::StrCat("; ", failed_h, " FAILED") : ""));
  table.Add("http", "gpulet /metrics p99, 1000 idle + 200 slow", metrics, "ms",
            absl::StrCat(held, failed_m ? absl::StrCat("; ", failed_m, " FAILED") : ""));
  gpulet.Stop(SIGTERM, absl::Seconds(5));
}

}  // namespace

// dgx8-mig (30 MIG devices on seven H100s, mixed strategy) scraped the same way while a
// PodResources stand-in says 30 pods hold one MIG device each: the per-instance series and
// their pod labels, against the same scrape of dgx8 without MIG (target: p99 <= 2x).
void MigScrapeRow(BenchTable& table, const fs::path& dir, const ExporterFigures* dgx8) {
  const std::string gpulet_bin = std::string(GPULET_BINARY_DIR) + "/gpulet";
  testing::RunResult list =
      testing::RunProgram({gpulet_bin, "--simulate", "dgx8-mig", "--sim-state",
                           (dir / "mig-list.json").string(), "list", "--json"});
  v1::ListPodResourcesResponse pods;
  int n = 0;
  try {
    const nlohmann::json listed = nlohmann::json::parse(list.out);
    for (const auto& g : listed.at("gpus")) {
      if (!g.contains("mig_devices")) continue;
      for (const auto& m : g.at("mig_devices")) {
        testing::FakePodResources::AddContainer(
            &pods, "ml", absl::StrCat("infer-", n++), "server",
            absl::StrCat("nvidia.com/mig-", m.at("profile").get<std::string>()),
            {m.at("uuid").get<std::string>()});
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpulet dgx8-mig: cannot read `gpulet list --json`: %s\n", e.what());
    return;
  }
  if (n == 0) {
    std::fprintf(stderr,
                 "gpulet dgx8-mig: `gpulet list --json` listed no MIG device (exit %d): %s\n",
                 list.exit_code, list.err.c_str());
    return;
  }
  fs::create_directories(dir / "kubelet-mig/pod-resources");
  testing::FakePodResources kubelet((dir / "kubelet-mig/pod-resources/kubelet.sock").string());
  kubelet.SetResponse(pods);
  if (!kubelet.Start().ok()) return;
  DaemonProcess gpulet;
  int port = testing::FreeLoopbackPort();
  gpulet.Start(
      {gpulet_bin, "--simulate", "dgx8-mig", "--sim-state", (dir / "dgx8-mig.state.json").string(),
       "serve", "--kubelet-dir", (dir / "kubelet-mig").string(), "--metrics-address",
       absl::StrCat("127.0.0.1:", port), "--mig-strategy", "mixed", "--pod-resources-interval",
       "1s"},
      {}, (dir / "dgx8-mig.log").string());
  // Measure once the pods are on the series.
  ExporterFigures f = Measure(gpulet, port, absl::StrCat("pod=\"infer-", n - 1, "\""));
  gpulet.Stop(SIGTERM, absl::Seconds(5));
  if (!f.ok) {
    std::fprintf(stderr, "gpulet dgx8-mig: %s\n", f.error.c_str());
    return;
  }
  const std::string who = absl::StrCat("gpulet dgx8-mig (", n, " MIG pods)");
  auto vs = [&](double mine, double theirs, const char* target) {
    return dgx8 != nullptr && theirs > 0
               ? absl::StrFormat("%.3gx dgx8 without MIG%s", mine / theirs, target)
               : std::string();
  };
  table.Add("metrics", who + " scrape p50", f.p50_ms, "ms",
            absl::StrCat("wrk -t2 -c8 -d5s; ", f.bytes, " bytes/scrape; ",
                         vs(f.p50_ms, dgx8 ? dgx8->p50_ms : 0, "")));
  table.Add("metrics", who + " scrape p99", f.p99_ms, "ms",
            vs(f.p99_ms, dgx8 ? dgx8->p99_ms : 0, " (target <= 2x)"));
  table.Add("metrics", who + " scrapes/s", f.rps, "1/s", vs(f.rps, dgx8 ? dgx8->rps : 0, ""));
}

// CPU time of every thread of a process so far, in seconds, from each thread's schedstat
// (nanoseconds on the CPU): finer than /proc/<pid>/stat's 10 ms ticks, which at 0.5 % of a
// core over 20 s would be 10 ticks. Threads that ended before the read are not counted, so
// callers compare two reads of a daemon whose threads live throughout.
double ThreadCpuSeconds(pid_t pid) {
  double ns = 0;
  std::error_code ec;
  for (const fs::directory_entry& t :
       fs::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    std::ifstream in(t.path() / "schedstat");
    double run = 0;
    if (in >> run) ns += run;
  }
  return ns / 1e9;
}

// The steady cost of sampling 8 GPUs every second and serving a scrape every second
// (`gpulet --simulate dgx8 serve`, the simulated libnvidia-ml in the process as the driver
// would be), against the same daemon idle in the same run: sampling once an hour
// (--sample-interval 1h) and never scraped, so what is left is its housekeeping (liveness
// probes, the event and MIG threads, timers). 20 s each, after a settling time.
void SteadyCpuRows(BenchTable& table, const fs::path& dir) {
  struct Run {
    const char* what;
    const char* interval;
    bool scrape;
    double percent = -1;
  };
  Run runs[] = {{"idle", "1h", false}, {"8 GPUs sampled + 1 scrape/s", "1s", true}};
  constexpr int kSeconds = 20;
  for (Run& run : runs) {
    DaemonProcess gpulet;
    int port = testing::FreeLoopbackPort();
    gpulet.Start(
        {std::string(GPULET_BINARY_DIR) + "/gpulet", "--simulate", "dgx8", "--sim-state",
         (dir / "cpu.state.json").string(), "serve", "--kubelet-dir", (dir / "kubelet").string(),
         "--metrics-address", absl::StrCat("127.0.0.1:", port), "--sample-interval", run.interval},
        {}, (dir / "cpu.log").string());
    httplib::Client c("127.0.0.1", port);
    bool ready = false;
    for (int i = 0; i < 100 && !ready; ++i) {
      auto r = c.Get("/metrics");
      ready = r && absl::StrContains(r->body, "DCGM_FI_DEV_GPU_TEMP{gpu=\"7\"");
      if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!ready) {
      std::fprintf(stderr, "gpulet dgx8 (%s) never served metrics:\n%s\n", run.what,
                   gpulet.Log().c_str());
      gpulet.Stop(SIGTERM, absl::Seconds(5));
      continue;
    }
    std::this_thread::sleep_for(std::chrono::seconds(3));  // past start-up work
    const double cpu0 = ThreadCpuSeconds(gpulet.pid());
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < kSeconds; ++i) {
      if (run.scrape) c.Get("/metrics");
      std::this_thread::sleep_until(std::chrono::system_clock::now() + std::chrono::seconds(1));
    }
    run.percent =
        100 * (ThreadCpuSeconds(gpulet.pid()) - cpu0) / absl::ToDoubleSeconds(absl::Now() - t0);
    gpulet.Stop(SIGTERM, absl::Seconds(5));
  }
  const Run& idle = runs[0];
  const Run& busy = runs[1];
  if (idle.percent >= 0) {
    table.Add("metrics", "gpulet dgx8 CPU, idle", idle.percent, "%core",
              absl::StrCat("sampling once an hour, no scrapes; schedstat of every thread, ",
                           kSeconds, " s"));
  }
  if (busy.percent >= 0) {
    table.Add("metrics", "gpulet dgx8 CPU, 8 GPUs sampled + 1 scrape/s", busy.percent, "%core",
              absl::StrCat("target < 0.5%; schedstat of every thread, ", kSeconds, " s",
                           idle.percent > 0 ? absl::StrFormat("; %.2f points over the idle daemon",
                                                              busy.percent - idle.percent)
                                            : std::string()));
  }
}

void RunMetricsBenchmarks(BenchTable& table) {
  {
    // Needs neither wrk nor node_exporter.
    fs::path cpu_dir = fs::temp_directory_path() / ("gpulet-bench-cpu-" + std::to_string(getpid()));
    fs::remove_all(cpu_dir);
    fs::create_directories(cpu_dir);
    SteadyCpuRows(table, cpu_dir);
    fs::remove_all(cpu_dir);
  }
  if (!fs::exists(kWrk) || !fs::exists(kNodeExporter)) {
    std::fprintf(stderr,
                 "metrics benchmarks skipped: %s or %s is missing (scripts/deps.sh bench)\n", kWrk,
                 kNodeExporter);
    return;
  }
  fs::path dir = fs::temp_directory_path() / ("gpulet-bench-metrics-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The idle and slowloris clients need well over the usual 1,024 descriptors.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  RunServerBenchmarks(table, dir);

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
  std::optional<ExporterFigures> dgx8;
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
    if (absl::string_view(fixture) == "dgx8") dgx8 = f;
  }
  MigScrapeRow(table, dir, dgx8 ? &*dgx8 : nullptr);
  if (peer.ok) AddRows(table, "node_exporter", peer, nullptr);
  fs::remove_all(dir);
}

}  // namespace gpulet::bench
