#include "daemon/slice_events.h"

#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpulet::daemon {

std::string SliceHolderName(const metrics::SliceSample& slice, const metrics::PodMap* pods) {
  std::optional<metrics::PodContainer> holder = metrics::SliceHolder(slice, pods);
  if (!holder) return slice.usage.owner;
  return absl::StrCat(holder->namespace_name, "/", holder->pod,
                      holder->container.empty() ? "" : "/", holder->container);
}

std::string SliceGpuName(const metrics::SliceSample& slice, const state::Snapshot& snap) {
  for (const state::DeviceRecord& d : snap.devices) {
    if (d.gpu.uuid == slice.usage.gpu_uuid && d.gpu.index) {
      return absl::StrCat(*d.gpu.index, " (", d.gpu.uuid, ")");
    }
  }
  return slice.usage.gpu_uuid;
}

std::vector<cluster::NodeEvent> SliceQuotaEvents::Next(
    const std::vector<metrics::SliceSample>& slices, const state::Snapshot& snap,
    const metrics::PodMap* pods) {
  std::vector<cluster::NodeEvent> out;
  std::set<std::string> present;
  for (const metrics::SliceSample& s : slices) {
    present.insert(s.name);
    auto [it, added] = refused_.emplace(s.name, primed_ ? 0 : s.usage.refused);
    if (s.usage.refused > it->second) {
      const std::string who = SliceHolderName(s, pods);
      const std::string gpu = SliceGpuName(s, snap);
      cluster::NodeEvent e;
      e.type = "Warning";
      e.reason = "GpuVramQuotaReached";
      // No count in the note, so that repeats fold into one series.
      e.note = absl::StrFormat(
          "%s reached its %.1f GiB VRAM quota on GPU %s: allocations past it are refused with "
          "CUDA_ERROR_OUT_OF_MEMORY (slice %s; gpulet status shows its use)",
          who, static_cast<double>(s.usage.quota_bytes) / (1 << 30), gpu, s.name);
      if (e.note.size() > 1024) e.note.resize(1024);
      e.count = s.usage.refused - it->second;
      out.push_back(std::move(e));
    }
    it->second = s.usage.refused;
  }
  // A slice gone (its allocation rewritten later under the same name starts again at 0).
  for (auto it = refused_.begin(); it != refused_.end();) {
    it = present.count(it->first) ? std::next(it) : refused_.erase(it);
  }
  primed_ = true;
  return out;
}

}  // namespace gpulet::daemon
