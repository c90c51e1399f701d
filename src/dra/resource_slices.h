// What gpulet publishes as its DRA driver's ResourceSlices for this node, as a pure function
// of a DeviceStore snapshot (no API calls, no clock), so every rule is unit-tested.
//
// One pool per node (named after it), split into slices of at most 64 devices: the API allows
// 128 per slice, but only 64 once any device carries taints (resource.k8s.io/v1 types.go,
// ResourceSliceMaxDevicesWithTaintsOrConsumesCounters), and a GPU's taint must never force a
// re-split. Devices:
//   - whole GPUs, "gpu-<index>", for GPUs without MIG enabled;
//   - MIG devices, "gpu-<index>-mig-<gi>-<ci>", for GPUs with MIG enabled.
// Attributes, named as NVIDIA's DRA driver (dra-driver-nvidia-gpu) names them where the
// meaning is the same: type ("gpu" or "mig"), uuid, productName, brand, architecture,
// cudaComputeCapability, driverVersion and cudaDriverVersion (versions), index, minor, and the
// standard resource.kubernetes.io/pciBusID; for MIG devices also profile, parentUUID and the
// instance ids (gpuInstanceID, computeInstanceID). Only the GPUs `gpus` offers are published.
// Capacity: memory. With memory shares on, a whole GPU allows multiple allocations and its memory
// is consumable in `share_mib` steps (KEP-5075).
//
// Health: a GPU (or MIG device) that is not schedulable gets the taint
// "gpu.gpulet.dev/unhealthy" with a short value naming the cause, effect NoSchedule, or
// NoExecute when the condition needs a node reboot and `no_execute_on_fatal` is set; the
// taint goes away with the condition.
//
// Thread-safety: pure functions over values.
#ifndef GPULET_DRA_RESOURCE_SLICES_H_
#define GPULET_DRA_RESOURCE_SLICES_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "state/device_store.h"

namespace gpulet::dra {

inline constexpr char kUnhealthyTaintKey[] = "gpu.gpulet.dev/unhealthy";
inline constexpr size_t kDevicesPerSlice = 64;

struct SliceOptions {
  std::string driver;     // "gpu.gpulet.dev"
  std::string node_name;  // also the pool name
  int64_t generation = 1;
  // Whole GPUs allow multiple allocations with memory consumable in steps of `share_mib`.
  bool memory_shares = false;
  int share_mib = 1024;
  bool no_execute_on_fatal = false;
  // The GPUs offered (config dra.gpus): "all", or indexes and UUIDs; the device plugin
  // serves the others.
  std::vector<std::string> gpus = {"all"};
  // The node's driver and CUDA driver versions ("580.65.06", "13.0"), published as NVIDIA's
  // driverVersion and cudaDriverVersion version attributes; "" leaves them out.
  std::string driver_version;
  std::string cuda_driver_version;

  friend bool operator==(const SliceOptions&, const SliceOptions&) = default;
};

// Whether `options` offers GPU `gpu` to DRA.
bool Offers(const SliceOptions& options, const gpu::Gpu& gpu);

// A version attribute's value (semantic versioning 2.0.0, as the API checks): missing minor
// and patch parts added, leading zeros dropped ("580.65.06" -> "580.65.6", "13.0" ->
// "13.0.0"); "" when `v` is not dotted numbers.
std::string SemVer(const std::string& v);

// The DRA device name of a whole GPU and of a MIG device.
std::string GpuDeviceName(const gpu::Gpu& gpu);
std::string MigDeviceName(const gpu::Gpu& gpu, const gpu::MigDeviceInfo& mig);

// The taint value for a health reason: a label-value-safe code ("xid-79", "lost", "hung",
// "nvml", "remap-failure", "unhealthy").
std::string TaintValue(const state::GpuHealth& health);

// The spec of each slice of the pool (metadata left to the publisher), in a stable order.
// GPUs NVML does not know (no index or UUID) are not published: nothing could be allocated
// on them.
std::vector<nlohmann::json> BuildSliceSpecs(const state::Snapshot& snap,
                                            const SliceOptions& options);

}  // namespace gpulet::dra

#endif  // GPULET_DRA_RESOURCE_SLICES_H_
