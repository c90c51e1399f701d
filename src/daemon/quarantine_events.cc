#include "daemon/quarantine_events.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpulet::daemon {

std::string GpuText(const state::DeviceRecord& d) {
  return absl::StrCat(d.gpu.uuid, d.gpu.index ? absl::StrCat(" (GPU ", *d.gpu.index, ")") : "");
}

std::string RungTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

cluster::NodeEvent RungEvent(const char* type, const char* reason, std::string note) {
  cluster::NodeEvent e;
  e.type = type;
  e.reason = reason;
  e.note = std::move(note);
  if (e.note.size() > 1024) e.note.resize(1024);
  return e;
}

std::vector<cluster::PodRef> PodsHolding(const metrics::PodMap& pods, const std::string& uuid) {
  std::vector<cluster::PodRef> out;
  auto held = pods.by_gpu.find(uuid);
  if (held == pods.by_gpu.end()) return out;
  std::set<std::pair<std::string, std::string>> seen;
  for (const metrics::GpuAssignment& a : held->second) {
    if (!seen.insert({a.holder.namespace_name, a.holder.pod}).second) continue;
    cluster::PodRef pod{a.holder.namespace_name, a.holder.pod, ""};
    for (const auto& [uid, info] : pods.pods_by_uid) {
      if (info.namespace_name == pod.namespace_name && info.pod == pod.name) pod.uid = uid;
    }
    out.push_back(std::move(pod));
  }
  return out;
}

std::vector<cluster::NodeEvent> QuarantineEvents::Next(const state::Snapshot& snap,
                                                       const metrics::PodMap* pods) {
  std::map<std::string, state::HealthState> now;
  for (const state::DeviceRecord& d : snap.devices) {
    if (!d.gpu.uuid.empty()) now[d.gpu.uuid] = d.health.state;
  }
  std::vector<cluster::NodeEvent> out;
  const bool first = !last_.has_value();
  std::map<std::string, state::HealthState> before = std::exchange(last_, now).value_or(now);
  if (first || pods == nullptr) return out;
  for (const state::DeviceRecord& d : snap.devices) {
    if (d.health.state != state::HealthState::kUnhealthy) continue;
    auto was = before.find(d.gpu.uuid);
    if (was != before.end() && was->second == state::HealthState::kUnhealthy) continue;
    const std::string gpu = GpuText(d);
    for (cluster::PodRef& pod : PodsHolding(*pods, d.gpu.uuid)) {
      cluster::NodeEvent e;
      e.type = "Warning";
      e.reason = "GpuUnhealthy";
      e.note =
          absl::StrCat("the GPU this pod holds, ", gpu, ", is out of service: ", d.health.reason,
                       ". The pod keeps running on it; evict or delete the pod to reschedule "
                       "it onto a healthy GPU");
      e.pod = std::move(pod);
      out.push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace gpulet::daemon
