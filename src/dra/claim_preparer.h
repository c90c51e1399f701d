// KubeClaimPreparer: the real ClaimPreparer (prepared_claims.h) of gpulet's DRA driver. It
// turns a ResourceClaim the scheduler allocated on this node into a CDI spec the container
// runtime resolves, and removes that spec again.
//
// Prepare, per claim reference (namespace, UID, name) from the kubelet:
//  - GET /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name>;
//  - refuse, with an error naming the claim and what to do, when the claim is not there, when
//    its UID is not the one the kubelet sent (deleted and created again under the same name),
//    when it has no status.allocation, when no allocation result is for this driver and pool
//    (the pool is the node's name), or when a result names a device this node does not have
//    now (a GPU that is gone, a whole GPU whose MIG mode is on, a MIG device that is not in
//    the layout any more, a device the CDI generator had to leave out);
//  - ignore results of other drivers or pools: a claim may hold devices of several drivers;
//  - apply the opaque configuration meant for this driver (below);
//  - write one CDI spec file for the claim: kind gpulet.dev/claim, file
//    <cdi_dir>/gpulet.dev-claim_<uid>.json (mode 0644, replaced atomically), one device per
//    result named "<claim uid>-<DRA device name>" with that GPU's or MIG device's container
//    edits (the /dev/nvidiaN node; for MIG also the capability nodes; two results naming one
//    device, two shares of a GPU for two requests, share that one CDI device), plus the spec-wide
//    edits of gpulet's node spec (control nodes, driver libraries and utilities, hooks,
//    NVIDIA_VISIBLE_DEVICES=void) and GPULET_DRA_CLAIM=<ns>/<name>. For a memory share (a
//    result with consumedCapacity.memory) the spec also sets GPULET_MEMORY_LIMIT_MIB to the
//    memory the claim's shares consume, in MiB, the hint the device plugin's VRAM slices give
//    (plugin/resources.cc): nothing enforces it, applications that can cap themselves read it;
//  - answer PreparedDevice{request_names = {result.request}, pool, device,
//    cdi_device_ids = {"gpulet.dev/claim=<uid>-<device>"}, share_id = result.shareID}.
// The device entries are copied from GenerateSpec (cdi/generator.h) run on the current
// inventory with the daemon's generator options, so a claim's container gets exactly what the
// node spec gives a container of the device plugin. Preparing again writes the same bytes.
//
// Unprepare removes the claim's spec file (a missing file is success) and never calls the API
// server: the claim may be gone by then.
//
// Why one spec per claim: CDI device names must be unique per kind across every spec file a
// runtime reads, and two claims may hold the same GPU (memory shares), so the names carry the
// claim UID; one file per claim also makes unprepare one unlink, with nothing else rewritten.
// The kubelet passes only the CDI IDs of the devices of a container's requests; the spec-wide
// edits come with any of them.
//
// Opaque configuration: status.allocation.devices.config[] entries whose opaque.driver is this
// driver apply to the results of the requests they list (all, when they list none); entries
// from the class come before those from the claim and a later entry wins. Parameters are read
// strictly (an unknown field is an error naming it), modelled on NVIDIA's DRA driver GpuConfig:
//   {"apiVersion": "gpu.gpulet.dev/v1alpha1", "kind": "GpuConfig",
//    "sharing": {"strategy": "TimeSlicing" | "Exclusive",
//                "timeSlicingConfig": {"interval": "Default" | "Short" | "Medium" | "Long"}}}
// TimeSlicing with interval Default is accepted (it is what a GPU shared by several processes
// does anyway). Other intervals are refused: NVML has no public call that sets the compute
// time slice of a GPU. Its only time-slice setters are for the vGPU scheduler
// (nvmlDeviceSetVgpuSchedulerState / nvmlGpuInstanceSetVgpuSchedulerState, whose
// nvmlVgpuSchedulerSetParams_t.timeslice is per vGPU run list, settable only while no VM
// runs; NVML API reference, docs.nvidia.com/deploy/nvml-api, "vGPU Structs"), and NVIDIA's DRA
// driver sets the interval by running `nvidia-smi compute-policy -i <uuid> --set-timeslice N`
// (k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/nvlib.go, setTimeSlice). Exclusive is accepted
// for a whole device (the scheduler never gives it to a second claim unless it allows
// multiple allocations) and refused for a memory share, which is shared by definition.
// gpulet sets no compute mode (GpuLibrary has no call for it).
//
// Thread-safety: not thread-safe. PreparedClaims calls it serialized under its mutex; the
// client, inventory callback and host root are only used from within Prepare.
#ifndef GPULET_DRA_CLAIM_PREPARER_H_
#define GPULET_DRA_CLAIM_PREPARER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cdi/generator.h"
#include "common/host_fs.h"
#include "dra/prepared_claims.h"
#include "gpu/gpu_model.h"
#include "kube/kube_client.h"
#include "nlohmann/json.hpp"

namespace gpulet::dra {

// The CDI kind of the per-claim specs, and the API version and kind of the opaque config.
inline constexpr char kClaimCdiKind[] = "gpulet.dev/claim";
inline constexpr char kGpuConfigApiVersion[] = "gpu.gpulet.dev/v1alpha1";
inline constexpr char kGpuConfigKind[] = "GpuConfig";

struct ClaimPreparerOptions {
  std::string driver;     // e.g. "gpu.gpulet.dev"
  std::string node_name;  // == the pool name
  // Local directory the claim specs are written to (e.g. <host-root>/var/run/cdi); created
  // when missing.
  std::string cdi_dir;
  // Roots, hook path and cdi version as the daemon uses for its node spec; kind, names and
  // all_device are overridden.
  cdi::GeneratorOptions generator;
  // VRAM enforcement of memory shares (sharing.memorySlices.enforce and hostDir, as for the
  // device plugin's slices): a claim holding shares gets the enforcement library and a
  // slice file of its own ("claim-<uid>" under `host_dir`, which this process writes at
  // `local_dir`), removed when the claim is unprepared. `library` is the library gpulet
  // ships; empty when it was not found (`library_error` says why), which refuses the claim.
  struct Vram {
    bool enforce = false;
    // A memory share's holder gets a cap on its GPU's SM time too (its bytes over the GPU's
    // memory; sharing.memorySlices.computeShare).
    bool compute_share = false;
    std::string host_dir;
    std::string local_dir;
    std::string library;
    std::string library_error;
  } vram;
};

// --- pure helpers -----------------------------------------------------------------------------

enum class SharingStrategy { kTimeSlicing, kExclusive };
enum class TimeSliceInterval { kDefault, kShort, kMedium, kLong };

// A parsed GpuConfig. No `sharing` section: strategy is nullopt.
struct GpuConfig {
  std::optional<SharingStrategy> strategy;
  TimeSliceInterval interval = TimeSliceInterval::kDefault;

  friend bool operator==(const GpuConfig&, const GpuConfig&) = default;
};

// Reads opaque parameters strictly. Errors start with `where` ("ResourceClaim ml/a:
// status.allocation.devices.config[0].opaque.parameters") and name the field.
absl::StatusOr<GpuConfig> ParseGpuConfig(const nlohmann::json& parameters, absl::string_view where);

// One allocation result of this driver and pool.
struct AllocatedDevice {
  std::string request;                   // results[].request ("gpu", or "gpu/subrequest")
  std::string device;                    // results[].device ("gpu-0", "gpu-0-mig-1-0")
  std::string share_id;                  // results[].shareID, "" when not a share
  std::optional<uint64_t> memory_bytes;  // results[].consumedCapacity.memory
  std::optional<GpuConfig> config;       // the opaque config of ours that applies, if any

  friend bool operator==(const AllocatedDevice&, const AllocatedDevice&) = default;
};

// The results of `claim` (a ResourceClaim object) for `driver` in `pool`, in order, each with
// the opaque config that applies to it. Errors (InvalidArgument, or FailedPrecondition when
// the claim is not allocated or holds nothing of ours) start with "ResourceClaim <ns>/<name>"
// and name the field.
absl::StatusOr<std::vector<AllocatedDevice>> ParseAllocation(const nlohmann::json& claim,
                                                             absl::string_view driver,
                                                             absl::string_view pool);

// A Kubernetes quantity ("4Gi", "4096Mi", "4G", "1.5Gi", "4294967296", "4e9") in bytes,
// rounded up. InvalidArgument for anything else, negative values and overflow.
absl::StatusOr<uint64_t> ParseQuantityBytes(absl::string_view quantity);

// "gpulet.dev-claim_<uid>.json" and "<uid>-<device>".
std::string ClaimSpecFileName(absl::string_view claim_uid);
std::string ClaimCdiDeviceName(absl::string_view claim_uid, absl::string_view device);

// --- the preparer -------------------------------------------------------------------------------

class KubeClaimPreparer final : public ClaimPreparer {
 public:
  // `inventory` returns the node's current inventory (with MIG layouts); `host` is the host
  // root. All must outlive this.
  KubeClaimPreparer(kube::KubeClient* client, std::function<gpu::Inventory()> inventory,
                    const HostFs* host, ClaimPreparerOptions options);
  KubeClaimPreparer(const KubeClaimPreparer&) = delete;
  KubeClaimPreparer& operator=(const KubeClaimPreparer&) = delete;
  ~KubeClaimPreparer() override = default;

  std::map<std::string, PrepareResult> Prepare(const std::vector<ClaimRef>& claims) override;
  std::map<std::string, std::string> Unprepare(const std::vector<PreparedClaim>& claims) override;

  // Where the spec of a claim is written.
  std::string SpecPath(absl::string_view claim_uid) const;

 private:
  // The slice file's directory name for a claim.
  static std::string SliceName(const std::string& uid);
  // The GPU a claim's memory shares are on, for its slice file.
  struct ShareGpu {
    std::string uuid;           // "" when the shares span GPUs (or none is known)
    uint64_t memory_bytes = 0;  // that GPU's memory; 0 when unknown
  };
  // Installs the enforcement library and writes the claim's slice file of `bytes` on `gpu`,
  // adding the library's mounts and variables to `edits`.
  absl::Status PrepareSlice(const ClaimRef& ref, uint64_t bytes, const ShareGpu& gpu,
                            cdi::ContainerEdits* edits) const;

  // The node spec's entries a claim spec is made from.
  struct NodeDevices {
    absl::Status status;                           // why there are none
    std::map<std::string, cdi::Device> by_device;  // DRA device name → node spec device
    std::map<std::string, ShareGpu> gpu_of;        // DRA device name → its (parent) GPU
    cdi::ContainerEdits common;                    // the spec-wide edits
    std::vector<std::string> warnings;             // what the generator left out
  };
  NodeDevices LoadNodeDevices() const;
  // Prepares one claim; `node` is loaded on first need.
  PrepareResult PrepareOne(const ClaimRef& ref, std::optional<NodeDevices>* node);

  kube::KubeClient* const client_;
  const std::function<gpu::Inventory()> inventory_;
  const HostFs* const host_;
  const ClaimPreparerOptions options_;
};

}  // namespace gpulet::dra

#endif  // GPULET_DRA_CLAIM_PREPARER_H_
