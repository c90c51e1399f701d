// PluginRig: the device-plugin path in one process, for tests and benchmarks: two GPUs
// ("GPU-rig-0", "GPU-rig-1" on 0000:01:00.0 and 0000:02:00.0, NUMA node 0) in a DeviceStore,
// served as nvidia.com/gpu by a DevicePluginServer and registered with a FakeKubelet over
// real unix sockets in a fresh temporary directory. Whatever changes the store shows up in
// the emulator's ListAndWatch list, as it would at the kubelet, without a gpulet process,
// NVML or timers in between.
//
// Thread-safety: one owner; the store and the emulator are thread-safe themselves.
#ifndef GPULET_TESTING_PLUGIN_RIG_H_
#define GPULET_TESTING_PLUGIN_RIG_H_

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "plugin/plugin_server.h"
#include "state/device_store.h"
#include "testing/fake_kubelet.h"

namespace gpulet::testing {

class PluginRig {
 public:
  static constexpr char kResource[] = "nvidia.com/gpu";
  static constexpr int kGpus = 2;
  // The UUID of rig GPU `i`.
  static std::string Uuid(int i);

  // `tag` names the temporary directory (keep it short: unix socket paths are limited to
  // 107 bytes). Nothing runs until Start().
  explicit PluginRig(const std::string& tag);
  ~PluginRig();
  PluginRig(const PluginRig&) = delete;
  PluginRig& operator=(const PluginRig&) = delete;

  // Serves, registers and waits (up to `timeout`) for the first full list; the error says
  // which step failed and where.
  absl::Status Start(absl::Duration timeout = absl::Seconds(5));

  state::DeviceStore& store() { return store_; }
  FakeKubelet& kubelet() { return kubelet_; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  state::DeviceStore store_;
  FakeKubelet kubelet_;
  std::unique_ptr<plugin::DevicePluginServer> server_;
};

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_PLUGIN_RIG_H_
