#include "daemon/eviction_rung.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/k8s_names.h"
#include "common/log.h"
#include "daemon/quarantine_events.h"

namespace gpulet::daemon {
EvictionRung::Round EvictionRung::Next(const state::Snapshot& snap, const metrics::PodMap* pods,
                                       const config::Config::Health::Evict& policy,
                                       absl::Time now) {
  absl::MutexLock lock(&mu_);
  Round round;
  // Episodes end when their GPU is no longer Unhealthy (or no longer there).
  std::set<std::string> out_now;
  for (const state::DeviceRecord& d : snap.devices) {
    if (d.health.state == state::HealthState::kUnhealthy && !d.gpu.uuid.empty()) {
      out_now.insert(d.gpu.uuid);
    }
  }
  for (auto it = episodes_.begin(); it != episodes_.end();) {
    if (out_now.contains(it->first)) {
      ++it;
      continue;
    }
    round.withdrawn.push_back(it->first);
    it = episodes_.erase(it);
  }
  while (!ordered_.empty() && ordered_.front() <= now - absl::Hours(1)) ordered_.pop_front();
  if (policy.mode == config::RemediationMode::kOff) return round;
  // Without NVML every GPU is marked Unhealthy, broken or not: the workloads may run fine on
  // them, and evicting every GPU pod of the node for a library problem would be the rung
  // doing harm. A person decides (doctor says what is wrong).
  if (!snap.nvml_ok) return round;

  for (const state::DeviceRecord& d : snap.devices) {
    if (!out_now.contains(d.gpu.uuid)) continue;
    // The grace runs from when the GPU went out, as the store says (a reload's new grace
    // applies to a GPU already out).
    const absl::Time since = d.health.since <= now ? d.health.since : now;
    Episode& episode =
        episodes_.try_emplace(d.gpu.uuid, Episode{since == absl::InfinitePast() ? now : since})
            .first->second;
    // Never act on a GPU that cannot be told apart from another by both names.
    if (d.gpu.bus_id.empty()) continue;
    if (now - episode.out_since < policy.grace) continue;
    // Without a fresh list of holders, wait: a stale one may name pods that moved.
    if (pods == nullptr || !pods->ok) continue;
    const std::string gpu = GpuText(d);
    for (cluster::PodRef& pod : PodsHolding(*pods, d.gpu.uuid)) {
      const std::string key = absl::StrCat(pod.namespace_name, "/", pod.name);
      if (episode.handled.contains(key)) continue;
      if (!IsDnsSubdomain(pod.namespace_name) || !IsDnsSubdomain(pod.name)) {
        GPULET_LOG_WARN("not evicting pod {}: not a valid namespace and name", key);
        episode.handled.insert(key);
        continue;
      }
      if (policy.mode == config::RemediationMode::kDryRun) {
        episode.handled.insert(key);
        GPULET_LOG_INFO("would evict pod {}: GPU {} has been out for {} ({})", key, gpu,
                        absl::FormatDuration(now - episode.out_since), d.health.reason);
        cluster::NodeEvent e;
        e.type = "Warning";
        e.reason = "GpuWouldEvict";
        e.note = absl::StrCat("the GPU this pod holds, ", gpu, ", has been out of service for ",
                              absl::FormatDuration(now - episode.out_since), " (", d.health.reason,
                              "); health.evict.mode is dry-run, so gpulet does not evict it (on "
                              "would, through the Eviction API)");
        e.pod = pod;
        round.events.push_back(std::move(e));
        round.would_evict.push_back({std::move(pod), d.gpu.uuid, gpu, d.health.reason});
        continue;
      }
      if (static_cast<int>(ordered_.size()) >= policy.max_per_hour) {
        if (!episode.budget_told) {
          episode.budget_told = true;
          GPULET_LOG_WARN(
              "not evicting pod {} yet: {} pods were evicted in the last hour "
              "(health.evict.maxPerHour)",
              key, ordered_.size());
          cluster::NodeEvent e;
          e.type = "Warning";
          e.reason = "GpuEvictionNotDone";
          e.note = absl::StrCat("the pods on GPU ", gpu, ", out of service (", d.health.reason,
                                "), are not evicted yet: ", ordered_.size(),
                                " pods were evicted in the last hour, health.evict.maxPerHour");
          round.events.push_back(std::move(e));
        }
        continue;
      }
      episode.handled.insert(key);
      ordered_.push_back(now);
      round.orders.push_back({std::move(pod), d.gpu.uuid, gpu, d.health.reason});
    }
  }
  return round;
}

}  // namespace gpulet::daemon
