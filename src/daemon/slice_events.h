// SliceQuotaEvents: the Node events for VRAM slices that reached their quota since the last
// sampling round (a slice's refusal count went up), naming the container that holds it.
//
// A slice already there at the first round is a baseline (gpulet restarted: its refusals
// were reported before); a slice that appears later reports every refusal it has.
//
// Thread-safety: a value owned by the sampler's round callback (one thread).
#ifndef GPULET_DAEMON_SLICE_EVENTS_H_
#define GPULET_DAEMON_SLICE_EVENTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cluster/node_health.h"
#include "metrics/pod_attribution.h"
#include "metrics/slice_metrics.h"
#include "state/device_store.h"

namespace gpulet::daemon {

// Who holds `slice`, for a person: "<namespace>/<pod>/<container>" when pod attribution
// knows, else the owner the slice file names.
std::string SliceHolderName(const metrics::SliceSample& slice, const metrics::PodMap* pods);
// The slice's GPU, for a person: "<index> (<uuid>)", or the UUID when the store lacks it.
std::string SliceGpuName(const metrics::SliceSample& slice, const state::Snapshot& snap);

class SliceQuotaEvents {
 public:
  std::vector<cluster::NodeEvent> Next(const std::vector<metrics::SliceSample>& slices,
                                       const state::Snapshot& snap, const metrics::PodMap* pods);

 private:
  bool primed_ = false;
  std::map<std::string, uint64_t> refused_;  // by slice name
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_SLICE_EVENTS_H_
