#include "daemon/reset_rung.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "daemon/quarantine_events.h"
#include "recorder/flight_recorder.h"

namespace gpulet::daemon {
namespace {

constexpr absl::Duration kBudgetWindow = absl::Hours(24);

// Whether `d` is out for faults a reset clears and nothing else.
bool OutForAReset(const state::DeviceRecord& d) {
  if (d.health.state != state::HealthState::kUnhealthy) return false;
  bool any = false;
  for (const auto& [source, c] : d.health.conditions) {
    if (c.severity != state::HealthState::kUnhealthy) continue;
    if (!c.reset_clears || c.reboot_required) return false;
    any = true;
  }
  return any;
}

}  // namespace

std::string ResetRung::Held(const state::DeviceRecord& d,
                            const std::map<std::string, metrics::GpuSampleState>& samples,
                            const metrics::PodMap* pods, const HolderLookup& holders) {
  if (d.gpu.mig_enabled) {
    return "it is in MIG mode, and a reset would take its GPU instances with it: reset it by "
           "hand (nvidia-smi -r) and recreate them, or reboot the node";
  }
  auto s = samples.find(d.gpu.uuid);
  if (s == samples.end() || !s->second.answering || !s->second.last) {
    // NVML cannot say (a GPU that requires a reset answers nothing else): the host can, by
    // who holds the GPU's device node open.
    const std::string nvml = absl::StrCat("NVML did not list its processes",
                                          s == samples.end() || s->second.error.empty()
                                              ? ""
                                              : absl::StrCat(" (", s->second.error, ")"));
    if (!holders || !d.gpu.minor) {
      return absl::StrCat(nvml, "; it is reset only when nothing is seen to run on it");
    }
    absl::StatusOr<std::vector<node::DeviceHolder>> held = holders(d.gpu);
    if (!held.ok()) {
      return absl::StrCat(nvml, ", and which processes hold ", d.gpu.DeviceNode(),
                          " is not known: ", held.status().message());
    }
    if (!held->empty()) {
      std::vector<std::string> pids;
      for (const node::DeviceHolder& h : *held) {
        pids.push_back(h.name.empty() ? absl::StrCat(h.pid) : absl::StrCat(h.pid, " ", h.name));
      }
      return absl::StrCat(held->size(), held->size() == 1 ? " process holds " : " processes hold ",
                          d.gpu.DeviceNode(), " open (pid ", absl::StrJoin(pids, ", "), ")");
    }
  } else if (const std::vector<gpu::GpuProcess>& p = s->second.last->processes; !p.empty()) {
    std::vector<std::string> pids;
    for (const gpu::GpuProcess& one : p) pids.push_back(absl::StrCat(one.pid));
    return absl::StrCat(p.size(), p.size() == 1 ? " process runs" : " processes run",
                        " on it (pid ", absl::StrJoin(pids, ", "), ")");
  }
  if (pods != nullptr) {
    if (!pods->ok) {
      return absl::StrCat("pod attribution's latest list failed (", pods->error,
                          "), so which pods hold it is not known");
    }
    std::vector<std::string> names;
    for (const cluster::PodRef& p : PodsHolding(*pods, d.gpu.uuid)) {
      names.push_back(absl::StrCat(p.namespace_name, "/", p.name));
    }
    if (!names.empty()) {
      return absl::StrCat("pod", names.size() == 1 ? " " : "s ", absl::StrJoin(names, ", "),
                          names.size() == 1 ? " holds" : " hold",
                          " it (health.evict moves pods off a GPU that stays out)");
    }
  }
  return "";
}

absl::Duration ResetRung::SettleFor(absl::Duration sample_interval) {
  return recorder::kXidSettle + 3 * sample_interval;
}

ResetRung::Round ResetRung::Next(const state::Snapshot& snap,
                                 const std::map<std::string, metrics::GpuSampleState>& samples,
                                 const metrics::PodMap* pods, const HolderLookup& holders,
                                 const config::Config::Health::Reset& policy,
                                 absl::Duration quiet_period, absl::Duration settle,
                                 absl::Time now) {
  absl::MutexLock lock(&mu_);
  Round round;
  for (const state::DeviceRecord& d : snap.devices) {
    // Never act on a GPU that cannot be told apart from another by both names.
    if (d.gpu.uuid.empty() || d.gpu.bus_id.empty()) continue;
    auto found = gpus_.find(d.gpu.uuid);
    if (found == gpus_.end() && !OutForAReset(d)) continue;
    Gpu& g = found != gpus_.end() ? found->second : gpus_[d.gpu.uuid];
    while (!g.tries.empty() && g.tries.front() <= now - kBudgetWindow) g.tries.pop_front();
    const int tries = static_cast<int>(g.tries.size());
    if (g.in_flight) continue;
    // After a reset, the GPU is on probation for the quiet period.
    if (g.reset_at && d.health.Has(kSource)) {
      if (now - *g.reset_at >= quiet_period) {
        round.probation_over.push_back(d.gpu.uuid);
        g.status.reset();
      } else {
        g.status = state::RungStatus{
            "reset",
            absl::StrCat("reset at ", RungTime(*g.reset_at), "; back in service at ",
                         RungTime(*g.reset_at + quiet_period), " if the fault does not come back"),
            tries};
      }
      continue;
    }
    if (d.health.state != state::HealthState::kUnhealthy) {
      g.told = false;  // the time out is over
      g.status.reset();
      continue;
    }
    if (!OutForAReset(d) || policy.mode == config::RemediationMode::kOff) {
      if (g.status && g.status->state != "failed") g.status.reset();
      continue;
    }
    const auto wait = [&](std::string why) {
      g.status = state::RungStatus{"waiting", std::move(why), tries};
    };
    // Without NVML every GPU is marked Unhealthy, and nothing can say what runs on it.
    if (!snap.nvml_ok) {
      wait("NVML is unavailable");
      continue;
    }
    const absl::Time since = d.health.since == absl::InfinitePast() ? now : d.health.since;
    if (now - since < settle) {
      wait("the fault is being recorded");
      continue;
    }
    if (std::string held = Held(d, samples, pods, holders); !held.empty()) {
      wait(std::move(held));
      continue;
    }
    const std::string gpu = GpuText(d);
    if (tries >= policy.max_per_day) {
      g.status = state::RungStatus{
          "budget-spent",
          absl::StrCat(tries,
                       " resets within 24 hours (health.reset.maxPerDay); a person or a "
                       "node reboot must take it from here"),
          tries};
      if (!g.told) {
        g.told = true;
        GPULET_LOG_WARN("not resetting GPU {}: {} resets within 24 hours (health.reset.maxPerDay)",
                        gpu, tries);
        round.events.push_back(RungEvent(
            "Warning", "GpuResetNotDone",
            absl::StrCat("GPU ", gpu, " is out of service (", d.health.reason,
                         ") and is not reset again: it was reset ", tries,
                         " times within 24 hours, health.reset.maxPerDay; reboot the node, or "
                         "reseat or replace the card if the fault keeps coming back")));
      }
      continue;
    }
    if (!g.tries.empty() && now - g.tries.back() < quiet_period) {
      wait(absl::StrCat("the last try was at ", RungTime(g.tries.back()),
                        "; the next comes after the quiet period"));
      continue;
    }
    if (policy.mode == config::RemediationMode::kDryRun) {
      g.status = state::RungStatus{"would-reset", "health.reset.mode is dry-run", tries};
      if (!g.told) {
        g.told = true;
        ++counts_["dry_run"];
        GPULET_LOG_INFO("would reset GPU {}: nothing holds it and a reset clears its fault ({})",
                        gpu, d.health.reason);
        round.events.push_back(RungEvent(
            "Normal", "GpuWouldReset",
            absl::StrCat("GPU ", gpu, " is out of service for a fault a GPU reset clears (",
                         d.health.reason,
                         ") and nothing holds it; health.reset.mode is dry-run, so gpulet does "
                         "not reset it (on would, through the kernel's PCI function reset)")));
      }
      continue;
    }
    g.in_flight = true;
    g.tries.push_back(now);
    g.status = state::RungStatus{"resetting", absl::StrCat("since ", RungTime(now)), tries + 1};
    round.orders.push_back({d.gpu.uuid, d.gpu.bus_id, gpu, d.health.reason, quiet_period});
  }
  return round;
}

std::vector<cluster::NodeEvent> ResetRung::Finish(const Order& order, const absl::Status& result,
                                                  absl::Time now) {
  const absl::Duration quiet_period = order.quiet_period;
  absl::MutexLock lock(&mu_);
  Gpu& g = gpus_[order.uuid];
  g.in_flight = false;
  const int tries = static_cast<int>(g.tries.size());
  std::vector<cluster::NodeEvent> events;
  if (result.ok()) {
    ++counts_["reset"];
    g.reset_at = now;
    g.status = state::RungStatus{
        "reset",
        absl::StrCat("reset at ", RungTime(now), "; back in service at ",
                     RungTime(now + quiet_period), " if the fault does not come back"),
        tries};
    GPULET_LOG_INFO("reset GPU {} (it was out for: {}); back in service after {} without a fault",
                    order.gpu, order.fault, absl::FormatDuration(quiet_period));
    events.push_back(RungEvent(
        "Normal", "GpuReset",
        absl::StrCat("gpulet reset GPU ", order.gpu, ", out of service for: ", order.fault,
                     "; it returns to service after ", absl::FormatDuration(quiet_period),
                     " if the fault does not come back")));
  } else {
    ++counts_["failed"];
    g.status = state::RungStatus{"failed", std::string(result.message()), tries};
    GPULET_LOG_ERROR("resetting GPU {} failed: {}", order.gpu, result.message());
    events.push_back(
        RungEvent("Warning", "GpuResetFailed",
                  absl::StrCat("gpulet could not reset GPU ", order.gpu,
                               " (out of service for: ", order.fault, "): ", result.message())));
  }
  return events;
}

state::HealthCondition ResetRung::ProbationFor(const Order& order, absl::Time now) {
  const absl::Duration quiet_period = order.quiet_period;
  state::HealthCondition c;
  c.severity = state::HealthState::kUnhealthy;
  c.reason = absl::StrCat("reset by gpulet at ", RungTime(now), " after: ", order.fault);
  c.action = absl::StrCat("none: it returns to service after ", absl::FormatDuration(quiet_period),
                          " if the fault does not come back");
  return c;
}

std::map<std::string, state::RungStatus> ResetRung::ByGpu() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, state::RungStatus> out;
  for (const auto& [uuid, g] : gpus_) {
    if (g.status) out.emplace(uuid, *g.status);
  }
  return out;
}

std::map<std::string, uint64_t> ResetRung::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace gpulet::daemon
