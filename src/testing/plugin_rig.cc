#include "testing/plugin_rig.h"

#include <unistd.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "config/config.h"

namespace gpulet::testing {
namespace {

std::filesystem::path FreshDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  return std::filesystem::temp_directory_path() /
         absl::StrCat("gpulet-rig-", tag, "-", getpid(), "-", counter++);
}

}  // namespace

std::string PluginRig::Uuid(int i) { return absl::StrCat("GPU-rig-", i); }

PluginRig::PluginRig(const std::string& tag) : dir_(FreshDir(tag)), kubelet_(dir_.string()) {
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  gpu::Inventory inv;
  for (int i = 0; i < kGpus; ++i) {
    gpu::Gpu g;
    g.index = static_cast<unsigned>(i);
    g.uuid = Uuid(i);
    g.bus_id = absl::StrCat("0000:0", i + 1, ":00.0");
    g.numa_node = 0;
    g.in_nvml = g.on_pci = true;
    inv.gpus.push_back(g);
  }
  store_.SetInventory(inv, absl::Now());
  server_ = std::make_unique<plugin::DevicePluginServer>(
      plugin::ResourceSpec{kResource, "rig.sock", plugin::ResourceKind::kGpu, ""},
      std::make_shared<const config::Config>(), &store_, plugin::ControlNodes{}, dir_.string());
}

PluginRig::~PluginRig() {
  store_.Shutdown();  // ends the ListAndWatch streams' waits
  kubelet_.Stop();
  server_->Stop();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

absl::Status PluginRig::Start(absl::Duration timeout) {
  if (absl::Status s = server_->Start(); !s.ok()) return s;
  if (absl::Status s = kubelet_.Start(); !s.ok()) return s;
  if (absl::Status s = server_->Register((dir_ / "kubelet.sock").string(), timeout); !s.ok()) {
    return s;
  }
  if (!kubelet_.WaitForDevices(
          kResource, [](const auto& r) { return r.devices_size() == kGpus; }, timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("the in-process device plugin in ",
                                                    dir_.string(), " sent no full list within ",
                                                    absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

}  // namespace gpulet::testing
