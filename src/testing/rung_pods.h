// The pods the remediation rungs' tests (daemon/quarantine_events_test, eviction_rung_test) find on
// the seed's homelab: the LLM server (two containers) and the plate reader on the 5090, a
// media server on the 3080. Test-only.
//
// Thread-safety: a pure function.
#ifndef GPULET_TESTING_RUNG_PODS_H_
#define GPULET_TESTING_RUNG_PODS_H_

#include "metrics/pod_attribution.h"

namespace gpulet::testing {

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
