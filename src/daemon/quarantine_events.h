// QuarantineEvents: the first rung of the remediation ladder made visible where the workload's
// owner looks. When a GPU goes out of service (Unhealthy), every pod that holds it (pod
// attribution: the kubelet's PodResources) gets a Warning Event, GpuUnhealthy, regarding the
// pod, saying which GPU, why, and that the pod keeps running on it until it is evicted or
// deleted, so that rescheduling moves it to a healthy GPU. The Node's own events
// (cluster/node_health.h) say the same to the node's operator.
//
// The first call only learns the GPUs' states: a GPU already out when gpulet (or a rebuilt
// sampler) started was reported by the one that saw it go.
//
// Thread-safety: not thread-safe; used on the sampler's thread only.
#ifndef GPULET_DAEMON_QUARANTINE_EVENTS_H_
#define GPULET_DAEMON_QUARANTINE_EVENTS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cluster/node_health.h"
#include "metrics/pod_attribution.h"
#include "state/device_store.h"

namespace gpulet::daemon {

// A GPU as the rungs' Events name it: "GPU-8a41... (GPU 1)".
std::string GpuText(const state::DeviceRecord& d);

// A time as the rungs' Events and statuses give it: "2026-12-07T01:00:00Z".
std::string RungTime(absl::Time t);

// A Node Event of a rung, its note cut to the API's 1 KiB.
cluster::NodeEvent RungEvent(const char* type, const char* reason, std::string note);

// The pods holding GPU `uuid`, each once (a pod whose containers hold several of its devices
// is one pod), in pod attribution's order, with their UIDs where it knows them.
std::vector<cluster::PodRef> PodsHolding(const metrics::PodMap& pods, const std::string& uuid);

class QuarantineEvents {
 public:
  // The events for the GPUs that went Unhealthy since the last call; `pods` may be null (pod
  // attribution off: nothing to tell).
  std::vector<cluster::NodeEvent> Next(const state::Snapshot& snap, const metrics::PodMap* pods);

 private:
  std::optional<std::map<std::string, state::HealthState>> last_;
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_QUARANTINE_EVENTS_H_
