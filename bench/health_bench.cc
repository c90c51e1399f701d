// Health detection benchmarks: how long from a fault to the Unhealthy device list a
// ListAndWatch client (the kubelet emulator) receives.
//   - XID from NVML: `gpulet sim xid 1 79` against `gpulet serve --simulate homelab`, timed
//     from just before the `gpulet sim` process starts (so it includes that process).
//   - XID from the kernel log: an in-process EventMonitor reading a fake kernel-log source,
//     through XidPolicy, the store and a DevicePluginServer over a real unix socket.
//   - Lost and hung GPU: `gpulet sim lose 1` / `gpulet sim hang 1 30` at the default probe
//     interval (1 s).
// Targets: XID to update < 100 ms; lost or hung GPU to update < 2 s.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "bench/bench_util.h"
#include "health/event_monitor.h"
#include "health/kmsg_source.h"
#include "health/xid_policy.h"
#include "plugin/plugin_server.h"
#include "state/device_store.h"
#include "testing/daemon_process.h"
#include "testing/fake_kubelet.h"
#include "testing/plugin_rig.h"
#include "testing/subprocess.h"

namespace gpulet::bench {
namespace {

namespace fs = std::filesystem;
using testing::DaemonProcess;
using testing::FakeKubelet;

constexpr char kRtx5090[] = "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090";

bool SecondGpuIs(FakeKubelet& kubelet, const std::string& id, const char* health,
                 absl::Duration timeout) {
  return kubelet.WaitForDevices(
      "nvidia.com/gpu",
      [&](const v1beta1::ListAndWatchResponse& r) {
        for (const auto& d : r.devices()) {
          if (d.id() == id) return d.health() == health;
        }
        return false;
      },
      timeout);
}

void RunDaemonDetection(BenchTable& table) {
  fs::path dir = fs::temp_directory_path() / ("gpulet-bench-health-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "kubelet/device-plugins");
  FakeKubelet kubelet((dir / "kubelet/device-plugins").string());
  if (!kubelet.Start().ok()) return;
  std::string gpulet = std::string(GPULET_BINARY_DIR) + "/gpulet";
  std::string state = (dir / "state.json").string();
  auto sim = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {gpulet, "--simulate", "homelab", "--sim-state", state, "sim"};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::RunProgram(argv).exit_code == 0;
  };
  DaemonProcess daemon;
  daemon.Start({gpulet, "--simulate", "homelab", "--sim-state", state, "serve", "--kubelet-dir",
                (dir / "kubelet").string(), "--metrics-address", "", "--quiet-period", "300ms"},
               {}, (dir / "daemon.log").string());
  if (!SecondGpuIs(kubelet, kRtx5090, "Healthy", absl::Seconds(10))) {
    std::fprintf(stderr, "health bench: daemon did not come up:\n%s\n", daemon.Log().c_str());
    return;
  }
  std::vector<double> xid_ms;
  for (int i = 0; i < 10; ++i) {
    absl::Time t0 = absl::Now();
    if (!sim({"xid", "1", "79"}) ||
        !SecondGpuIs(kubelet, kRtx5090, "Unhealthy", absl::Seconds(5))) {
      break;
    }
    xid_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    if (!SecondGpuIs(kubelet, kRtx5090, "Healthy", absl::Seconds(10))) break;
  }
  table.Add("health", "NVML XID 79 to ListAndWatch Unhealthy p50", Percentile(xid_ms, 50), "ms",
            absl::StrCat(xid_ms.size(), " runs, incl. the `gpulet sim` process"));
  table.Add("health", "NVML XID 79 to ListAndWatch Unhealthy max", Percentile(xid_ms, 100), "ms",
            "target < 100 ms");

  // A lost GPU, then a hung one, at the default 1 s probe interval.
  for (const auto& [what, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"lost GPU", {"lose", "1"}}, {"hung GPU", {"hang", "1", "30"}}}) {
    absl::Time t0 = absl::Now();
    bool ok = sim(args) && SecondGpuIs(kubelet, kRtx5090, "Unhealthy", absl::Seconds(10));
    double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
    table.Add("health", what + " to ListAndWatch Unhealthy", ok ? ms : -1, "ms",
              "1 s probe interval; target < 2000 ms");
    sim({"recover", "1"});
    SecondGpuIs(kubelet, kRtx5090, "Healthy", absl::Seconds(15));
  }
  daemon.Stop(SIGTERM, absl::Seconds(5));
  kubelet.Stop();
  fs::remove_all(dir);
}

void RunKmsgDetection(BenchTable& table) {
  testing::PluginRig rig("kmsg");
  if (absl::Status started = rig.Start(); !started.ok()) {
    std::fprintf(stderr, "bench: %s\n", std::string(started.message()).c_str());
    return;
  }
  state::DeviceStore& store = rig.store();
  FakeKubelet& kubelet = rig.kubelet();
  health::XidPolicy policy(&store, {13, 31, 43, 45, 68, 94}, absl::Milliseconds(200));
  auto source = std::make_unique<health::FakeKernelLogSource>();
  health::FakeKernelLogSource* kmsg = source.get();
  health::EventMonitor monitor(nullptr, 2, std::move(source), &policy);
  monitor.Start();
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    if (!SecondGpuIs(kubelet, testing::PluginRig::Uuid(1), "Healthy", absl::Seconds(5))) break;
    absl::Time t0 = absl::Now();
    kmsg->Push(absl::StrCat("3,", 1000 + i, ",", 5000000 + i,
                            ",-;NVRM: Xid (PCI:0000:02:00): 79, pid='<unknown>', name=<unknown>, "
                            "GPU has fallen off the bus."));
    if (!SecondGpuIs(kubelet, testing::PluginRig::Uuid(1), "Unhealthy", absl::Seconds(5))) break;
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  table.Add("health", "kernel-log XID 79 to ListAndWatch Unhealthy p50", Percentile(ms, 50), "ms",
            absl::StrCat(ms.size(), " runs, fake kmsg source in process"));
  table.Add("health", "kernel-log XID 79 to ListAndWatch Unhealthy max", Percentile(ms, 100), "ms",
            "target < 100 ms");
  monitor.Stop();
}

}  // namespace

void RunHealthBenchmarks(BenchTable& table) {
  RunDaemonDetection(table);
  RunKmsgDetection(table);
}

}  // namespace gpulet::bench
