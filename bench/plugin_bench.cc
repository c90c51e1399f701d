// Device-plugin benchmarks: start-to-Register, re-register after a kubelet restart,
// Allocate latency, health-change-to-ListAndWatch latency, and the CDI work of the daemon's
// 10 s file check (the spec generated again, against comparing the file only). Prints a
// table.
//
// The daemon runs as a real process (`gpulet serve --simulate homelab`) against the kubelet
// emulator over unix sockets, as in production; the health-change latency is measured in
// process, from the DeviceStore write to the emulator receiving the update, so it isolates
// the plugin path from the probe interval (which the health benchmarks cover).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "bench/bench_util.h"
#include "cdi/spec_keeper.h"
#include "common/host_fs.h"
#include "node/pci_inventory.h"
#include "plugin/plugin_server.h"
#include "state/device_store.h"
#include "testing/daemon_process.h"
#include "testing/fake_kubelet.h"
#include "testing/files.h"
#include "testing/homelab.h"
#include "testing/plugin_rig.h"

namespace gpulet::bench {
namespace {

namespace fs = std::filesystem;
using testing::DaemonProcess;
using testing::FakeKubelet;

constexpr char kRtx5090[] = "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090";

void RunDaemonBenchmarks(BenchTable& table) {
  fs::path dir = fs::temp_directory_path() / ("gpulet-bench-plugin-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "kubelet/device-plugins");
  FakeKubelet kubelet((dir / "kubelet/device-plugins").string());
  if (!kubelet.Start().ok()) return;

  // Start to Register, over several daemon starts. The first start is not counted: it pays
  // for reading the just-built binary into the page cache, which a node pays once per image.
  std::vector<double> start_ms;
  for (int run = -1; run < 5; ++run) {
    DaemonProcess daemon;
    int before = kubelet.registrations();
    absl::Time t0 = absl::Now();
    daemon.Start({std::string(GPULET_BINARY_DIR) + "/gpulet", "--simulate", "homelab",
                  "--sim-state", (dir / "state.json").string(), "serve", "--kubelet-dir",
                  (dir / "kubelet").string(), "--metrics-address", ""},
                 {}, (dir / "daemon.log").string());
    if (!kubelet.WaitForRegistrations(before + 1, absl::Seconds(10))) {
      std::fprintf(stderr, "daemon did not register:\n%s\n", daemon.Log().c_str());
      return;
    }
    if (run >= 0) start_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    if (run < 4) daemon.Stop(SIGTERM, absl::Seconds(5));
    if (run == 4) {
      // Re-register after kubelet restarts.
      std::vector<double> rereg_ms;
      for (int i = 0; i < 20; ++i) {
        int n = kubelet.registrations();
        absl::Time r0 = absl::Now();
        if (!kubelet.Restart().ok()) break;
        if (!kubelet.WaitForRegistrations(n + 1, absl::Seconds(5))) break;
        rereg_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - r0));
      }
      kubelet.WaitForDevices(
          "nvidia.com/gpu", [](const auto& r) { return r.devices_size() == 2; }, absl::Seconds(5));
      // Allocate latency over the real socket.
      std::vector<double> alloc_us;
      for (int i = 0; i < 2000; ++i) {
        absl::Time a0 = absl::Now();
        auto r = kubelet.Allocate("nvidia.com/gpu", {kRtx5090});
        if (!r.ok()) break;
        alloc_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - a0));
      }
      table.Add("plugin", "start to Register (gpulet serve)", Percentile(start_ms, 50), "ms",
                "p50 of 5 starts after one warm-up, process start to the kubelet's Register; "
                "target <= 30 ms");
      table.Add(
          "plugin", "re-register after kubelet restart", Percentile(rereg_ms, 50), "ms",
          absl::StrCat("p50 of ", rereg_ms.size(), ", max ",
                       absl::StrFormat("%.1f", Percentile(rereg_ms, 100)), " ms; target < 500 ms"));
      table.Add("plugin", "Allocate p50", Percentile(alloc_us, 50) / 1000.0, "ms",
                absl::StrCat(alloc_us.size(), " calls over the unix socket"));
      table.Add("plugin", "Allocate p99", Percentile(alloc_us, 99) / 1000.0, "ms", "target < 1 ms");
      daemon.Stop(SIGTERM, absl::Seconds(5));
    }
  }
  kubelet.Stop();
  fs::remove_all(dir);
}

void RunHealthToStreamBenchmark(BenchTable& table) {
  testing::PluginRig rig("store");
  if (absl::Status started = rig.Start(); !started.ok()) {
    std::fprintf(stderr, "bench: %s\n", std::string(started.message()).c_str());
    return;
  }
  state::DeviceStore& store = rig.store();
  FakeKubelet& kubelet = rig.kubelet();
  std::vector<double> us;
  for (int i = 0; i < 200; ++i) {
    bool unhealthy = i % 2 == 0;
    absl::Time t0 = absl::Now();
    store.UpdateHealth(testing::PluginRig::Uuid(1), [&](state::GpuHealth& h) {
      if (unhealthy) {
        h.Raise("bench", {state::HealthState::kUnhealthy, "bench", "", absl::InfinitePast()}, t0);
      } else {
        h.Clear("bench", t0);
      }
    });
    const char* want = unhealthy ? "Unhealthy" : "Healthy";
    if (!kubelet.WaitForDevices(
            "nvidia.com/gpu",
            [want](const auto& r) {
              return r.devices_size() == 2 && r.devices(1).health() == want;
            },
            absl::Seconds(2))) {
      break;
    }
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  table.Add("plugin", "health change to ListAndWatch update p50", Percentile(us, 50) / 1000.0, "ms",
            absl::StrCat(us.size(), " flips"));
  table.Add("plugin", "health change to ListAndWatch update p99", Percentile(us, 99) / 1000.0, "ms",
            "target < 50 ms");
}

// The file check's CDI work (daemon/node_files.h): every 10 s the spec is generated again and
// compared with the file, so that it follows device nodes that come and go; before, the check
// only compared the file with the last spec written (SpecKeeper::Verify), the floor here. On
// a copy of the dgx8 fixture's root: eight GPUs, the driver's libraries and binaries.
void RunCdiCheckBenchmark(BenchTable& table) {
  testing::ScratchDir root;
  fs::copy(testing::SimRoot("dgx8"), root.path(),
           fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  HostFs host(root.path());
  absl::StatusOr<std::vector<node::PciGpu>> pci = node::ScanPciGpus(host);
  std::vector<gpu::DeviceIdentity> ids;
  for (size_t i = 0; pci.ok() && i < pci->size(); ++i) {
    ids.push_back(testing::GpuIdentity(static_cast<unsigned>(i),
                                       absl::StrFormat("GPU-bench-%08zu", i), (*pci)[i].bus_id,
                                       static_cast<unsigned>(i)));
  }
  const gpu::Inventory inventory = testing::InventoryFor(root.path(), ids, "570.133.20");
  cdi::SpecKeeper keeper(&host);
  cdi::SpecKeeperOptions options;
  absl::StatusOr<cdi::KeepResult> first = keeper.Reconcile(inventory, options);
  if (ids.size() != 8 || !first.ok()) {
    std::fprintf(stderr, "CDI check benchmark: %zu GPUs on dgx8's root, spec: %s\n", ids.size(),
                 first.ok() ? "ok" : std::string(first.status().message()).c_str());
    return;
  }
  constexpr int kRounds = 200;
  std::vector<double> generate_us, verify_us;
  for (int i = 0; i < kRounds; ++i) {
    generate_us.push_back(1e6 * SecondsOf([&] { (void)keeper.Reconcile(inventory, options); }));
    verify_us.push_back(1e6 * SecondsOf([&] { (void)keeper.Verify(); }));
  }
  const double generate = Percentile(generate_us, 50), verify = Percentile(verify_us, 50);
  table.Add(
      "files", "CDI spec generated again (10 s check) p50", generate / 1000.0, "ms",
      absl::StrFormat("dgx8 root; %.1fx the file compare only (%.3f ms); %.4f %%core at "
                      "one per 10 s",
                      verify > 0 ? generate / verify : 0, verify / 1000.0, 100 * generate / 1e7));
}

}  // namespace

void RunPluginBenchmarks(BenchTable& table) {
  RunDaemonBenchmarks(table);
  RunHealthToStreamBenchmark(table);
  RunCdiCheckBenchmark(table);
}

}  // namespace gpulet::bench
