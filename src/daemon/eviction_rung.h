// EvictionRung: which pods the eviction rung of the remediation ladder evicts, and when
// (health.evict; docs/remediation.md). The cluster half, cluster/pod_eviction.h, carries the
// orders out through the Eviction API.
//
// A GPU that has been Unhealthy for `grace` (a fault that clears sooner costs no pod) has
// each pod that holds it (pod attribution: the kubelet's PodResources) ordered out once per
// episode; the episode ends, and its orders still waiting are withdrawn, when the GPU is no
// longer Unhealthy. Pods on other GPUs, and pods that hold no GPU, are never named. The
// node's orders are budgeted: at most `max_per_hour` in any hour, and an order the budget
// refuses waits for the budget (one Warning Event on the Node per episode says so). The
// rung never acts on a GPU it cannot identify by UUID and PCI address, nor while pod
// attribution's latest list failed (stale holders), nor while NVML is unavailable (every GPU
// is then marked Unhealthy, whether or not it is). Mode dry-run names each pod it would
// evict in an Event about the pod (GpuWouldEvict) and orders nothing; off does nothing.
//
// Times are the injected clock's wall time and the policy the configuration's, both passed
// in by the caller (as for SliceGuard): each sampler holds the policy it was built for.
//
// Thread-safety: Next() may be called from any thread; an internal mutex serialises calls
// (the old and the new sampler of a reload may overlap).
#ifndef GPULET_DAEMON_EVICTION_RUNG_H_
#define GPULET_DAEMON_EVICTION_RUNG_H_

#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cluster/node_health.h"
#include "cluster/pod_eviction.h"
#include "config/config.h"
#include "metrics/pod_attribution.h"
#include "state/device_store.h"

namespace gpulet::daemon {

class EvictionRung {
 public:
  struct Round {
    std::vector<cluster::EvictionOrder> orders;  // for the queue
    std::vector<std::string> withdrawn;          // GPUs back in service: their orders end
    std::vector<cluster::NodeEvent> events;
    std::vector<cluster::EvictionOrder> would_evict;  // what a dry run named
  };

  Round Next(const state::Snapshot& snap, const metrics::PodMap* pods,
             const config::Config::Health::Evict& policy, absl::Time now);

 private:
  struct Episode {
    absl::Time out_since;
    std::set<std::string> handled = {};  // namespace/name of the pods ordered (or named)
    bool budget_told = false;
  };

  absl::Mutex mu_;
  std::map<std::string, Episode> episodes_ ABSL_GUARDED_BY(mu_);  // by GPU UUID
  std::deque<absl::Time> ordered_ ABSL_GUARDED_BY(mu_);           // within the last hour
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_EVICTION_RUNG_H_
