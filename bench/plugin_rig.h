// PluginRig: the device-plugin path in one process for benchmarks that time it: two GPUs
// ("GPU-bench-0", "GPU-bench-1" on 0000:01:00.0 and 0000:02:00.0) in a DeviceStore, served
// by a DevicePluginServer and registered with a FakeKubelet over real unix sockets in a
// fresh temporary directory. Whatever changes the store shows up in the emulator's
// ListAndWatch list, as it would at the kubelet.
//
// Thread-safety: one owner; the store and the emulator are thread-safe themselves.
#ifndef GPULET_BENCH_PLUGIN_RIG_H_
#define GPULET_BENCH_PLUGIN_RIG_H_

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "plugin/plugin_server.h"
#include "state/device_store.h"
#include "testing/fake_kubelet.h"

namespace gpulet {

class PluginRig {
 public:
  explicit PluginRig(const std::string& tag)
      : dir_(std::filesystem::temp_directory_path() /
             absl::StrCat("gpulet-bench-", tag, "-", getpid())),
        kubelet_(dir_.string()) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    Inventory inv;
    for (int i = 0; i < 2; ++i) {
      Gpu g;
      g.index = i;
      g.uuid = absl::StrCat("GPU-bench-", i);
      g.bus_id = absl::StrCat("0000:0", i + 1, ":00.0");
      g.in_nvml = g.on_pci = true;
      inv.gpus.push_back(g);
    }
    store_.SetInventory(inv, absl::Now());
    server_ = std::make_unique<DevicePluginServer>(
        ResourceSpec{"nvidia.com/gpu", "bench.sock", ResourceKind::kGpu},
        std::make_shared<const Config>(), &store_, ControlNodes{}, dir_.string());
  }
  ~PluginRig() {
    store_.Shutdown();
    kubelet_.Stop();
    server_->Stop();
    std::filesystem::remove_all(dir_);
  }

  // Serves, registers and waits for the first full list; false (and why, on stderr) if not.
  bool Start() {
    if (!server_->Start().ok() || !kubelet_.Start().ok() ||
        !server_->Register((dir_ / "kubelet.sock").string(), absl::Seconds(5)).ok() ||
        !kubelet_.WaitForDevices(
            "nvidia.com/gpu", [](const auto& r) { return r.devices_size() == 2; },
            absl::Seconds(5))) {
      std::fprintf(stderr, "bench: the in-process device plugin did not start in %s\n",
                   dir_.c_str());
      return false;
    }
    return true;
  }

  DeviceStore& store() { return store_; }
  testing::FakeKubelet& kubelet() { return kubelet_; }

 private:
  std::filesystem::path dir_;
  DeviceStore store_;
  testing::FakeKubelet kubelet_;
  std::unique_ptr<DevicePluginServer> server_;
};

}  // namespace gpulet

#endif  // GPULET_BENCH_PLUGIN_RIG_H_
