// The seed's homelab as the remediation rungs' tests see it: its two GPUs (RungSnapshot) and the
// pods on them (RungPods: the LLM server with two containers and the plate reader on the 5090,
// a media server on the 3080). Test-only.
//
// Thread-safety: a pure function.
#ifndef GPULET_TESTING_RUNG_PODS_H_
#define GPULET_TESTING_RUNG_PODS_H_

#include <tuple>

#include "metrics/pod_attribution.h"
#include "state/device_store.h"

namespace gpulet::testing {

// The homelab's two GPUs as the GPU rungs' tests (reset_rung_test, reboot_rung_test) start
// them: the 3080 at 0000:01:00.0 and the 5090 at 0000:02:00.0, healthy, with NVML up.
inline state::Snapshot RungSnapshot() {
  state::Snapshot s;
  s.nvml_ok = true;
  for (auto [uuid, index, bus] :
       {std::tuple{"GPU-3080", 0u, "0000:01:00.0"}, std::tuple{"GPU-5090", 1u, "0000:02:00.0"}}) {
    state::DeviceRecord d;
    d.gpu.uuid = uuid;
    d.gpu.index = index;
    d.gpu.bus_id = bus;
    s.devices.push_back(d);
  }
  return s;
}

inline metrics::PodMap RungPods() {
  metrics::PodMap m;
  m.ok = true;
  m.by_gpu["GPU-5090"] = {
      {{"ai", "ollama-0", "ollama"}, "nvidia.com/gpu", "GPU-5090::0", ""},
      {{"ai", "ollama-0", "sidecar"}, "nvidia.com/gpu", "GPU-5090::1", ""},
      {{"anpr", "reader-7", "infer"}, "nvidia.com/gpu", "GPU-5090::2", ""},
  };
  m.by_gpu["GPU-3080"] = {{{"media", "jellyfin-0", "jellyfin"}, "nvidia.com/gpu", "GPU-3080", ""}};
  m.pods_by_uid["uid-ollama"] = {"ai", "ollama-0", {"ollama", "sidecar"}};
  return m;
}

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_RUNG_PODS_H_
