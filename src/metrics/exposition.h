// Prometheus exposition of gpulet's metrics: DCGM-exporter-compatible series (same names,
// types, units and labels, so Grafana dashboard 12239 and existing alerts keep working) and
// gpulet's own `gpulet_*` series in base units.
//
// Series whose value NVML does not support are omitted, never written as sentinel numbers.
// The text format is 0.0.4; the OpenMetrics variant differs in its content type, `# EOF`,
// and in declaring DCGM's counters (whose names lack `_total`) as `unknown`.
//
// Thread-safety: pure function.
#ifndef GPULET_METRICS_EXPOSITION_H_
#define GPULET_METRICS_EXPOSITION_H_

#include <string>

#include "metrics/sampler.h"
#include "state/device_store.h"

namespace gpulet {

std::string RenderMetrics(const Snapshot& snap, const SampleSet& samples,
                          const RenderInfo& info, bool openmetrics, absl::Time now);

// Escapes a label value (backslash, double quote, newline).
std::string EscapeLabel(absl::string_view value);

}  // namespace gpulet

#endif  // GPULET_METRICS_EXPOSITION_H_
