#include "metrics/slice_metrics.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "metrics/exposition.h"
#include "metrics/family.h"
#include "vram/slice_format.h"

namespace gpulet::metrics {

std::vector<SliceSample> ReadSlices(const std::string& local_dir) {
  std::vector<SliceSample> out;
  if (local_dir.empty()) return out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(local_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "lib" || !entry.is_directory(ec)) continue;
    absl::StatusOr<vram::SliceUsage> usage =
        vram::ReadSliceUsage((entry.path() / vram::kSliceFileName).string());
    if (!usage.ok()) continue;
    out.push_back({name, std::move(*usage), std::nullopt});
  }
  std::sort(out.begin(), out.end(),
            [](const SliceSample& a, const SliceSample& b) { return a.name < b.name; });
  return out;
}

std::optional<PodContainer> SliceHolder(const SliceSample& slice, const PodMap* pods) {
  if (pods == nullptr || !pods->ok) return std::nullopt;
  auto it = pods->by_gpu.find(slice.usage.gpu_uuid);
  if (it == pods->by_gpu.end()) return std::nullopt;
  // The device plugin names the directory after the lowest of a container's slice IDs.
  std::map<PodContainer, std::vector<std::string>> ids;
  for (const GpuAssignment& a : it->second) ids[a.holder].push_back(a.device_id);
  for (const auto& [holder, held] : ids) {
    if (vram::AllocationDirName(held) == slice.name) return holder;
  }
  return std::nullopt;
}

void AppendSliceMetrics(const std::vector<SliceSample>& slices, const state::Snapshot& snap,
                        const PodMap* pods, const std::string& hostname, bool openmetrics,
                        std::string* out) {
  Family quota("gpulet_vram_quota_bytes", "gauge",
               "A VRAM slice holder's limit (its memory slices or DRA memory share), held by "
               "gpulet's enforcement library in its containers.");
  Family used("gpulet_vram_used_bytes", "gauge",
              "Device memory the slice holder's processes hold, as the enforcement library "
              "counts it (the driver's own per-process memory is not in it).");
  Family peak("gpulet_vram_peak_bytes", "gauge", "The most the slice holder has held at once.");
  Family processes("gpulet_vram_processes", "gauge",
                   "Live processes of the slice holder that loaded the enforcement library.");
  Family refused("gpulet_vram_refused_total", "counter",
                 "Allocations refused with CUDA_ERROR_OUT_OF_MEMORY at the slice's quota.");
  Family device("gpulet_vram_device_used_bytes", "gauge",
                "Device memory the slice holder's processes hold as the driver counts it "
                "(NVML's per-process figures, CUDA contexts included; the library's count "
                "where it is higher).");
  Family share("gpulet_vram_compute_share_ratio", "gauge",
               "The slice holder's cap on the GPU's SM time (sharing.memorySlices.computeShare); "
               "only slices that have one.");
  Family rate("gpulet_vram_launch_rate", "gauge",
              "Launch cost units (kernel blocks) per second the holder may launch, fitted by "
              "gpulet each round to its SM time; 0 while it is within its share.");
  Family waited("gpulet_vram_launch_wait_seconds_total", "counter",
                "Time the holder's kernel launches waited for their turn under its compute "
                "share.");
  for (const SliceSample& s : slices) {
    std::string index;
    for (const state::DeviceRecord& d : snap.devices) {
      if (d.gpu.uuid == s.usage.gpu_uuid && d.gpu.index) index = absl::StrCat(*d.gpu.index);
    }
    std::string labels =
        absl::StrCat("gpu=\"", index, "\",uuid=\"", EscapeLabel(s.usage.gpu_uuid), "\",slice=\"",
                     EscapeLabel(s.name), "\",owner=\"", EscapeLabel(s.usage.owner),
                     "\",hostname=\"", EscapeLabel(hostname), "\"");
    if (std::optional<PodContainer> who = SliceHolder(s, pods)) {
      absl::StrAppend(&labels, PodLabels(*who));
    }
    quota.Add(labels, static_cast<double>(s.usage.quota_bytes));
    used.Add(labels, static_cast<double>(s.usage.in_use_bytes));
    peak.Add(labels, static_cast<double>(s.usage.peak_bytes));
    processes.Add(labels, static_cast<double>(s.usage.processes.size()));
    refused.Add(labels, static_cast<double>(s.usage.refused));
    if (s.device) device.Add(labels, static_cast<double>(s.device->used_bytes));
    if (const vram::SliceUsage::Compute& c = s.usage.compute; c.share_permille > 0) {
      share.Add(labels, c.share_permille / 1000.0);
      rate.Add(labels, static_cast<double>(c.launch_rate));
      waited.Add(labels, static_cast<double>(c.launch_wait_ns) / 1e9);
    }
  }
  for (const Family* f :
       {&quota, &used, &peak, &processes, &refused, &device, &share, &rate, &waited}) {
    f->AppendTo(out, openmetrics);
  }
}

void AppendVramEnforcement(const std::map<std::string, std::string>& holders,
                           const state::Snapshot& snap, const std::string& hostname,
                           bool openmetrics, std::string* out) {
  Family f("gpulet_vram_enforcement", "gauge",
           "1 for a GPU whose containers get VRAM quotas; holder says what holds them "
           "(library: gpulet's enforcement library; none: enforce is off, accounting only; "
           "refused: the library is missing and sliced containers are refused).");
  for (const state::DeviceRecord& d : snap.devices) {
    auto it = holders.find(d.gpu.uuid);
    if (it == holders.end()) continue;
    f.Add(absl::StrCat("gpu=\"", d.gpu.index ? absl::StrCat(*d.gpu.index) : "", "\",uuid=\"",
                       EscapeLabel(d.gpu.uuid), "\",hostname=\"", EscapeLabel(hostname),
                       "\",holder=\"", EscapeLabel(it->second), "\""),
          1);
  }
  f.AppendTo(out, openmetrics);
}

}  // namespace gpulet::metrics
