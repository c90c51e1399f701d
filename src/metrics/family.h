// Family: one Prometheus metric family being rendered, its HELP and TYPE once, then every
// sample, in the Prometheus text format or OpenMetrics (which names a counter's samples
// `<family>_total`). Shared by every exposition gpulet renders.
//
// Thread-safety: a value; one renderer at a time.
#ifndef GPULET_METRICS_FAMILY_H_
#define GPULET_METRICS_FAMILY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpulet::metrics {

// How a family prints its values. dcgm-exporter prints a DCGM field by its DCGM type
// (internal/pkg/collector/gpu_collector.go, toString): DCGM_FT_INT64 with "%d" and
// DCGM_FT_DOUBLE with Go's "%f" (six decimals), so gpulet's DCGM families do the same.
enum class ValueFormat {
  kGpulet,      // gpulet's own series: integers without a point, others round-trip exact
  kDcgmInt64,   // a DCGM_FT_INT64 field: "%d"
  kDcgmDouble,  // a DCGM_FT_DOUBLE field: "%f"
};

// One metric family: its header once, then every sample line.
class Family {
 public:
  Family(std::string name, std::string type, std::string help,
         ValueFormat format = ValueFormat::kGpulet)
      : name_(std::move(name)), type_(std::move(type)), help_(std::move(help)), format_(format) {}

  void Add(const std::string& labels, double value) {
    samples_.emplace_back(labels, FormatValue(value));
  }
  bool empty() const { return samples_.empty(); }

  // Prometheus text: family and samples carry the name as given. OpenMetrics requires a
  // counter's samples to be `<family>_total`: a counter named `x_total` becomes family `x`
  // with samples `x_total`, and DCGM's counters, whose names lack the suffix, keep their name
  // as the family and get `_total` on the samples (as Prometheus' client_golang writes a
  // counter named without the suffix in OpenMetrics), so Prometheus reads them as counters.
  void AppendTo(std::string* out, bool openmetrics) const {
    if (samples_.empty()) return;
    std::string family = name_;
    std::string sample = name_;
    if (openmetrics && type_ == "counter") {
      if (absl::EndsWith(name_, "_total")) {
        family = name_.substr(0, name_.size() - 6);
      } else {
        sample = absl::StrCat(name_, "_total");
      }
    }
    absl::StrAppend(out, "# HELP ", family, " ", help_, "\n# TYPE ", family, " ", type_, "\n");
    for (const auto& [labels, value] : samples_) {
      absl::StrAppend(out, sample, "{", labels, "} ", value, "\n");
    }
  }

 private:
  std::string FormatValue(double v) const {
    switch (format_) {
      case ValueFormat::kDcgmInt64:
        return absl::StrCat(static_cast<int64_t>(v));
      case ValueFormat::kDcgmDouble:
        return absl::StrFormat("%f", v);
      case ValueFormat::kGpulet:
        break;
    }
    if (v == static_cast<double>(static_cast<int64_t>(v)) && v < 9e15 && v > -9e15) {
      return absl::StrCat(static_cast<int64_t>(v));
    }
    return absl::StrFormat("%.17g", v);
  }
  std::string name_, type_, help_;
  ValueFormat format_;
  std::vector<std::pair<std::string, std::string>> samples_;  // labels, formatted value
};

}  // namespace gpulet::metrics

#endif  // GPULET_METRICS_FAMILY_H_
