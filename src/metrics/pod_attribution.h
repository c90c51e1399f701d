// Pod attribution: which pod and container holds each GPU, and which pod a GPU process
// belongs to, for the exporter's labels.
//
// The kubelet's PodResources API v1 (`List` over <kubelet-dir>/pod-resources/kubelet.sock)
// says which device IDs of our resources each container was given; advertised IDs
// ("<uuid>", "<uuid>::<n>" replicas, "<uuid>::mem<k>" slices, or index forms) map back to a
// GPU. It also lists the DRA devices each container holds through ResourceClaims
// (`dynamic_resources`); those of gpulet's DRA driver in this node's pool map back by their
// device names ("gpu-<index>", "gpu-<index>-mig-<gi>-<ci>", as dra/resource_slices.h names
// them). The list is refreshed on its own thread ("gpulet-podres") on a timer and when the
// kubelet re-creates its socket (inotify on the directory), never inside a scrape, and at
// most once a second, well under the kubelet's server-side limit (100 qps, burst 10).
// Pod UIDs come from /var/log/pods under the host root, so a process's cgroup (see
// pod_identity.h) can be joined to a pod name.
//
// The timer and the once-a-second limit run on Options::clock's monotonic time and the
// map's `refreshed` stamp is its wall time; the wait between refreshes is the directory
// watcher's poll() (real time), which Stop() cuts short with DirWatcher::Wake.
//
// Thread-safety: Start/Stop from one thread; Current() from any thread.
#ifndef GPULET_METRICS_POD_ATTRIBUTION_H_
#define GPULET_METRICS_POD_ATTRIBUTION_H_

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/dir_watcher.h"
#include "common/host_fs.h"
#include "metrics/pod_identity.h"
#include "proto/podresources/v1/api.pb.h"
#include "state/device_store.h"

namespace gpulet::metrics {

struct PodContainer {
  std::string namespace_name;
  std::string pod;
  std::string container;  // "" when it cannot be told apart
  auto operator<=>(const PodContainer&) const = default;
};

// One advertised device of ours held by one container.
struct GpuAssignment {
  PodContainer holder;
  // The device plugin's resource name ("nvidia.com/gpu"), or the DRA driver's name
  // ("gpu.gpulet.dev") for a device held through a ResourceClaim.
  std::string resource;
  // As advertised: "GPU-…::2"; for DRA the device name, "gpu-0" or "gpu-0-mig-3-0", and
  // "gpu-0/<share id>" for one share of a GPU that allows multiple allocations.
  std::string device_id;
  std::string mig_uuid;  // the MIG device the ID names ("MIG-…"); "" for a whole GPU
};

// The default of config dra.driverName.
inline constexpr char kDefaultDraDriverName[] = "gpu.gpulet.dev";

// Which DRA allocations are gpulet's: a claim's device of driver `driver` in pool `pool`.
struct DraPool {
  std::string driver = kDefaultDraDriverName;  // config dra.driverName
  // This node's name, which is gpulet's pool name. "" accepts any pool, which is safe: a
  // kubelet lists only its own node's pods, and gpulet's devices are local to their node.
  std::string pool;
};

struct PodMap {
  bool ok = false;    // the latest List succeeded
  std::string error;  // why not
  absl::Time refreshed = absl::InfinitePast();
  std::map<std::string, std::vector<GpuAssignment>> by_gpu;  // GPU UUID → assignments
  struct PodInfo {
    std::string namespace_name;
    std::string pod;
    std::vector<std::string> containers;  // container directories under /var/log/pods
  };
  std::map<std::string, PodInfo> pods_by_uid;
};

// Which pod and container a process on `gpu_uuid` belongs to, or nullopt when its pod is
// unknown. The container is the one of that pod holding this GPU when exactly one does,
// else the pod's only container, else "".
std::optional<PodContainer> AttributeProcess(const PodMap& map, const std::string& gpu_uuid,
                                             const CgroupPod& cgroup);

// GPU UUID → assignments, from a List response. Device-plugin devices count when their
// resource is in `resources` (an entry ending in '*' matches by prefix: "nvidia.com/mig-*");
// a MIG device's ID counts for its GPU, with `mig_uuid` set.
//
// DRA devices (`dynamic_resources`) count when their driver and pool are `dra`'s; the device
// name gives the GPU by NVML index and a MIG device by its GPU and compute instance ids.
// A kubelet that leaves `driver_name` empty (some older ones fill only `cdi_devices`) is
// read through gpulet's per-claim CDI names, "gpulet.dev/claim=<claim uid>-<device name>",
// in any pool. A GPU held by several claims (memory shares) has one assignment per claim,
// like a GPU whose time-slicing replicas went to several pods. Other drivers' devices and
// CDI names are skipped; a malformed device name of ours is skipped with a debug log.
//
// Device IDs and names that name no GPU (or MIG device) of `snap` are skipped.
std::map<std::string, std::vector<GpuAssignment>> MapAssignments(
    const v1::ListPodResourcesResponse& list, const state::Snapshot& snap,
    const std::set<std::string>& resources, const DraPool& dra);

// The kubelet's PodResources List, behind an interface so tests can fake the kubelet.
class PodResourcesClient {
 public:
  virtual ~PodResourcesClient() = default;
  virtual absl::StatusOr<v1::ListPodResourcesResponse> List(absl::Duration timeout) = 0;
};

// Dials `socket_path` (a unix socket) afresh for every call: the kubelet re-creates the
// socket when it restarts, and a call every few seconds does not need a kept channel.
std::unique_ptr<PodResourcesClient> MakeKubeletPodResourcesClient(std::string socket_path);

class PodAttributor {
 public:
  struct Options {
    std::string socket_dir;  // <kubelet-dir>/pod-resources, watched for kubelet.sock
    absl::Duration interval = absl::Seconds(10);
    absl::Duration timeout = absl::Seconds(2);
    std::set<std::string> resources;  // our advertised resource names
    // Our DRA driver and pool: config dra.driverName and the node name. Default: driver
    // gpu.gpulet.dev, any pool.
    DraPool dra;
    const Clock* clock = RealClock();
  };

  PodAttributor(std::unique_ptr<PodResourcesClient> client, const state::DeviceStore* store,
                const HostFs* host, Options options);
  ~PodAttributor();

  void Start();
  void Stop();
  void RefreshOnce();  // one List + /var/log/pods scan (tests, and the thread)

  std::shared_ptr<const PodMap> Current() const;

 private:
  void Run();

  std::unique_ptr<PodResourcesClient> client_;
  const state::DeviceStore* store_;
  const HostFs* host_;
  Options options_;
  std::thread thread_;
  std::unique_ptr<DirWatcher> watcher_;  // created by Start
  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  std::shared_ptr<const PodMap> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::metrics

#endif  // GPULET_METRICS_POD_ATTRIBUTION_H_
