// What the device plugin advertises and hands out, as pure functions of the config and a
// DeviceStore snapshot (no gRPC, no I/O), so every rule is unit-testable.
//
// A *resource* is one extended resource with its own plugin socket: whole GPUs (optionally
// time-sliced into replicas with IDs "<uuid>::<n>"), memory slices (one unit per
// configured MiB of a GPU, IDs "<uuid>::mem<k>") or MIG devices (IDs "MIG-<uuid>", or
// "MIG-<uuid>::<n>" time-sliced). Each advertised ID maps back to one physical GPU (and
// MIG device), whose health every ID of it shares.
//
// MIG follows NVIDIA's device plugin's --mig-strategy (config.h MigStrategy): with `none`
// MIG is ignored; with `single` resourceName carries every MIG device, and a node whose GPUs
// do not all have MIG enabled with one profile is refused (MigLayoutError); with `mixed`
// each profile present is its own resource, "<domain>/mig-<profile>", and resourceName
// carries the GPUs without MIG. The resource set therefore depends on the layout: the
// plugin manager asks again whenever the store changes.
//
// Thread-safety: pure functions over values.
#ifndef GPULET_PLUGIN_RESOURCES_H_
#define GPULET_PLUGIN_RESOURCES_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "node/mig_minors.h"
#include "proto/deviceplugin/v1beta1/api.pb.h"
#include "state/device_id.h"
#include "state/device_store.h"

namespace gpulet::plugin {

enum class ResourceKind { kGpu, kMemorySlice, kMig };

struct ResourceSpec {
  std::string name;         // "nvidia.com/gpu"
  std::string socket_name;  // "gpulet-gpu.sock", relative to the device-plugins dir
  ResourceKind kind = ResourceKind::kGpu;
  // kMig: the profile it carries ("1g.18gb"); "" for every profile (single strategy).
  std::string mig_profile;

  bool operator==(const ResourceSpec&) const = default;
  // The same resource whatever socket serves it (a refused endpoint moves it to a new
  // socket name: PluginManager).
  bool SameResource(const ResourceSpec& o) const {
    return name == o.name && kind == o.kind && mig_profile == o.mig_profile;
  }
};

// The resources `config` asks for on a node whose GPUs are `snap` (nullptr: as if no GPU
// had MIG enabled), in a stable order.
std::vector<ResourceSpec> ResourcesFor(const config::Config& config,
                                       const state::Snapshot* snap = nullptr);

// Why the MIG layout cannot be served with the configured strategy (single: a mix of GPUs
// with and without MIG, a MIG GPU without MIG devices, more than one profile), naming the
// GPUs and profiles and what to do; OK otherwise. The resources are still advertised, with
// no devices, so that the kubelet schedules nothing onto a layout gpulet refuses.
absl::Status MigLayoutError(const config::Config& config, const state::Snapshot& snap);

struct AdvertisedDevice {
  std::string id;
  size_t gpu = 0;  // index into Snapshot::devices
  bool healthy = true;
  int numa_node = -1;
  int mig = -1;  // index into the GPU's mig_devices; -1 for a whole GPU
};

// Whether Allocate answers name CDI devices (plugin.deviceListStrategy cdi-annotations or
// cdi-cri), which must then resolve in a spec the runtime reads.
bool AnswersNameCdiDevices(const config::Config& config);

// The devices a resource advertises for a snapshot.
std::vector<AdvertisedDevice> AdvertisedDevices(const ResourceSpec& resource,
                                                const config::Config& config,
                                                const state::Snapshot& snap);

// The ListAndWatch message for a device list.
v1beta1::ListAndWatchResponse ToListAndWatch(const std::vector<AdvertisedDevice>& devices);

// Control device nodes (/dev/nvidiactl, ...) that exist on the host, for DeviceSpecs.
struct ControlNodes {
  std::vector<std::string> paths;  // container paths, e.g. "/dev/nvidiactl"
  node::MigMinors mig_minors;      // for MIG devices' /dev/nvidia-caps nodes
};

// Where the device plugin writes what a sliced container mounts (sharing.memorySlices with
// enforce on): host paths are reached under `host_root`; `library` is the enforcement
// library gpulet ships, installed into the host directory before the first container
// needs it ("" when gpulet could not find it: `library_error` says why, and sliced
// containers are refused rather than served unenforced).
struct SliceFiles {
  std::string host_root = "/";
  std::string library;
  std::string library_error;

  // `host_dir` (a host path: sharing.memorySlices.hostDir) as this process reaches it: under
  // host_root, the host's symlinks followed without leaving it (HostFs::Resolve), so a
  // symlinked directory cannot make gpulet write outside the host root. Fails on a symlink
  // loop, naming the path.
  absl::StatusOr<std::string> LocalDir(const std::string& host_dir) const;
};

// Builds the response for one container, field for field as NVIDIA's k8s-device-plugin
// (v0.20.0, internal/plugin/server.go, getAllocateResponse) answers for the same strategies,
// whatever order the config lists them in; docs/allocate.md lists each field and the
// deliberate differences. Fails with InvalidArgument naming unknown IDs (or for an empty
// request), FailedPrecondition naming unhealthy ones or a sharing rule that forbids the
// request.
absl::StatusOr<v1beta1::ContainerAllocateResponse> AllocateContainer(
    const ResourceSpec& resource, const config::Config& config, const state::Snapshot& snap,
    const ControlNodes& control, const std::vector<std::string>& ids);

// Chooses `size` IDs from `available` (keeping `must_include`): whole GPUs on one NUMA node
// where possible; replicas spread over distinct GPUs, least used first; memory slices packed
// onto the GPU that fits them most tightly.
std::vector<std::string> PreferredAllocation(const ResourceSpec& resource,
                                             const config::Config& config,
                                             const state::Snapshot& snap,
                                             const std::vector<std::string>& available,
                                             const std::vector<std::string>& must_include,
                                             int size);

// The annotation key of a cdi-annotations answer: "<prefix>gpulet_<resource>_<hash of the
// IDs>" (e.g. "cdi.k8s.io/gpulet_nvidia.com_gpu_3f2a…"). The kubelet merges the
// annotations of every answer a container gets and drops one whose key already exists, so
// a container holding both nvidia.com/gpu and nvidia.com/gpu-memory needs two keys. The
// name part stays within the 63 characters and [A-Za-z0-9._-] a key name allows.
std::string CdiAnnotationKey(const std::string& prefix, const std::string& resource,
                             const std::vector<std::string>& ids);

}  // namespace gpulet::plugin

#endif  // GPULET_PLUGIN_RESOURCES_H_
