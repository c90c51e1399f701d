// HealthService: the kubelet's DRA resource-health API, `v1alpha1.DRAResourceHealth`
// (proto/drahealth/v1alpha1, KEP-4680; kubelet 1.34+ with the ResourceHealthStatus feature),
// served from the DeviceStore on the DRA service's socket (DraPluginServer registers it).
//
// NodeWatchResources streams the driver's complete device list with each device's health;
// every message replaces the last. It sends the list at once, again whenever a device's
// health changes (not on every snapshot: most snapshots change nothing the kubelet sees), and
// again every `refresh` even without a change, because the kubelet marks a device Unknown
// when its last report is older than the health timeout. A stream ends when the kubelet
// cancels it or the server shuts down (Shutdown).
//
// Devices and pool are named as the ResourceSlices name them (resource_slices.h): whole GPUs
// "gpu-<index>", MIG devices "gpu-<index>-mig-<gi>-<ci>", the pool after the node. A device
// is Unhealthy when the health policy put it out (HealthState::kUnhealthy: the GPU's own, or
// for a MIG device the GPU's or its instance's), else Healthy (Degraded still takes work).
// Every device is Unknown while NVML is not usable: then nothing can be said of any.
//
// Thread-safety: all methods are thread-safe; streams run on gRPC's threads. `store` must
// outlive the service.
#ifndef GPULET_DRA_HEALTH_SERVICE_H_
#define GPULET_DRA_HEALTH_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "state/device_store.h"

namespace grpc {
class Service;
}

namespace gpulet::dra {

enum class DeviceHealthStatus { kUnknown, kHealthy, kUnhealthy };

struct DeviceHealthEntry {
  std::string device;  // GpuDeviceName / MigDeviceName
  DeviceHealthStatus status = DeviceHealthStatus::kUnknown;
  friend bool operator==(const DeviceHealthEntry&, const DeviceHealthEntry&) = default;
};

// Every device of `snap` the ResourceSlices publish, in their order, with its health.
std::vector<DeviceHealthEntry> DeviceHealthList(const state::Snapshot& snap);

class HealthService {
 public:
  struct Options {
    std::string pool;  // the node name
    // The full list is sent again this often without a change; keep it well under the
    // kubelet's health timeout.
    absl::Duration refresh = absl::Seconds(10);
  };

  HealthService(const state::DeviceStore* store, Options options);
  ~HealthService();
  HealthService(const HealthService&) = delete;
  HealthService& operator=(const HealthService&) = delete;

  // The gRPC service to register; owned by this object.
  grpc::Service* service();
  // Ends every stream (now and later ones at once), so the server's shutdown need not wait.
  void Shutdown();
  // Streams open now; for tests.
  int streams() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpulet::dra

#endif  // GPULET_DRA_HEALTH_SERVICE_H_
