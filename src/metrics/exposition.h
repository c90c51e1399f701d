// Prometheus exposition of gpulet's metrics: DCGM-exporter-compatible series (same names,
// types, units and labels, so Grafana dashboard 12239 and existing alerts keep working) and
// gpulet's own `gpulet_*` series in base units.
//
// Series whose value NVML does not support are omitted, never written as sentinel numbers.
// The text format is 0.0.4; the OpenMetrics variant differs in its content type, `# EOF`,
// and in naming every counter's samples `<family>_total` as OpenMetrics requires: DCGM's
// counters, whose names lack the suffix, keep their name as the family and get `_total` on
// their samples there; in the text format they keep dcgm-exporter's names exactly.
//
// Thread-safety: pure function.
#ifndef GPULET_METRICS_EXPOSITION_H_
#define GPULET_METRICS_EXPOSITION_H_

#include <string>

#include "metrics/sampler.h"
#include "state/device_store.h"

namespace gpulet::metrics {

std::string RenderMetrics(const state::Snapshot& snap, const SampleSet& samples,
                          const RenderInfo& info, bool openmetrics, absl::Time now);

// `,pod="…",namespace="…",container="…"`, dcgm-exporter's label names.
std::string PodLabels(const PodContainer& who);

// The pod of a GPU process, when pod attribution is on and its pod is known.
std::optional<PodContainer> ProcessPod(const SampleSet& samples, const std::string& gpu_uuid,
                                       const GpuSampleState::Process& process);

// Escapes a label value (backslash, double quote, newline).
std::string EscapeLabel(absl::string_view value);

}  // namespace gpulet::metrics

#endif  // GPULET_METRICS_EXPOSITION_H_
