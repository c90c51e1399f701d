#include "daemon/reboot_rung.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "daemon/gpu_retirement.h"
#include "daemon/quarantine_events.h"

namespace gpulet::daemon {
namespace {

// The newest requests kept: far more than any window's budget holds.
constexpr size_t kKeep = 64;
constexpr absl::Duration kRetryFailedAfter = absl::Hours(1);

// The GPUs out for a fault only a reboot clears, with that fault, in inventory order; those
// out for `grace` only when `grace_passed`.
struct Out {
  std::vector<const state::DeviceRecord*> gpus;
  std::string reason;  // the first one's
};
Out OutForAReboot(const state::Snapshot& snap, absl::Duration grace, absl::Time now) {
  Out out;
  for (const state::DeviceRecord& d : snap.devices) {
    if (d.gpu.uuid.empty() || d.gpu.bus_id.empty() || d.health.Has(kRetiredSource)) continue;
    for (const auto& [source, c] : d.health.conditions) {
      if (c.severity != state::HealthState::kUnhealthy || !c.reboot_required) continue;
      const absl::Time since = c.since == absl::InfinitePast() ? now : c.since;
      if (now - since < grace) continue;
      if (out.gpus.empty()) out.reason = c.reason;
      out.gpus.push_back(&d);
      break;
    }
  }
  return out;
}

}  // namespace

RebootRung::RebootRung(std::string boot_id) : boot_id_(std::move(boot_id)) {}

bool RebootRung::LoadLocked(const recorder::RebootRecord* record,
                            std::vector<cluster::NodeEvent>* events) {
  if (record == nullptr) {
    record_error_ = "no reboot record (health.reboot.file is not under a writable host root)";
    return false;
  }
  if (requests_ && loaded_from_ == record->shown() && record_error_.empty()) return true;
  absl::StatusOr<std::vector<recorder::RebootRequest>> loaded = record->Load();
  if (!loaded.ok()) {
    const std::string error(loaded.status().message());
    if (error != record_error_) GPULET_LOG_ERROR("{}", error);
    record_error_ = error;
    return false;
  }
  record_error_.clear();
  loaded_from_ = record->shown();
  requests_ = *std::move(loaded);
  // A request made in another boot that is still "asked": that reboot happened.
  bool changed = false;
  for (recorder::RebootRequest& r : *requests_) {
    if (r.outcome != "asked" || r.boot_id == boot_id_ || boot_id_.empty()) continue;
    r.outcome = "rebooted";
    changed = true;
    GPULET_LOG_INFO("the node rebooted as asked at {} for: {}",
                    RungTime(absl::FromUnixSeconds(r.at_unix)), r.reason);
    events->push_back(
        RungEvent("Normal", "GpuNodeRebooted",
                  absl::StrCat("the node rebooted, as gpulet asked at ",
                               RungTime(absl::FromUnixSeconds(r.at_unix)), " for: ", r.reason,
                               " (GPUs ", absl::StrJoin(r.gpus, ", "),
                               "); gpulet postmortem has the recording from before")));
  }
  if (changed) {
    if (absl::Status s = record->Save(*requests_); !s.ok()) {
      GPULET_LOG_ERROR("{}", s.message());
    }
  }
  return true;
}

std::vector<cluster::NodeEvent> RebootRung::Next(const state::Snapshot& snap,
                                                 const config::Config::Health::Reboot& policy,
                                                 const recorder::RebootRecord* record,
                                                 node::NodeRebooter* rebooter, absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::vector<cluster::NodeEvent> events;
  status_.clear();
  if (policy.mode == config::RemediationMode::kOff) return events;
  const bool readable = LoadLocked(record, &events);
  const Out out = OutForAReboot(snap, policy.grace, now);
  if (out.gpus.empty()) {
    told_ = false;  // the time out is over
    return events;
  }
  const auto say = [&](const char* state, std::string detail, int tries)
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                         for (const state::DeviceRecord* d : out.gpus) {
                           status_[d->gpu.uuid] = state::RungStatus{state, detail, tries};
                         }
                       };
  // Without NVML every GPU is marked Unhealthy: a library problem is not the card's.
  if (!snap.nvml_ok) {
    say("waiting", "NVML is unavailable", 0);
    return events;
  }
  if (!readable) {
    say("waiting", record_error_, 0);
    return events;
  }
  if (boot_id_.empty()) {
    say("waiting", "this boot's id is unknown (/proc/sys/kernel/random/boot_id)", 0);
    return events;
  }
  // Requests that were taken count against the budget; one that failed (kured's directory
  // not mounted, say) does not, and is tried again an hour later.
  int tries = 0;
  const recorder::RebootRequest* outstanding = nullptr;
  const recorder::RebootRequest* failed = nullptr;
  for (const recorder::RebootRequest& r : *requests_) {
    const bool taken = r.outcome == "asked" || r.outcome == "rebooted";
    if (taken && absl::FromUnixSeconds(r.at_unix) > now - policy.window) ++tries;
    if (r.boot_id == boot_id_ && r.outcome == "asked") outstanding = &r;
    if (!taken && absl::FromUnixSeconds(r.at_unix) > now - kRetryFailedAfter) failed = &r;
  }
  // A rebooter that drains first can fail after it took the request: the request then
  // failed, and is asked again an hour later.
  const absl::Status late = outstanding != nullptr && rebooter != nullptr
                                ? rebooter->TakeLateFailure()
                                : absl::OkStatus();
  if (!late.ok() && record != nullptr) {
    std::vector<recorder::RebootRequest> next = *requests_;
    for (recorder::RebootRequest& r : next) {
      if (r.boot_id == boot_id_ && r.outcome == "asked") {
        r.outcome = absl::StrCat("failed: ", late.message());
      }
    }
    if (absl::Status s = record->Save(next); !s.ok()) GPULET_LOG_ERROR("{}", s.message());
    requests_ = std::move(next);
    ++counts_["failed"];
    say("failed", std::string(late.message()), tries);
    GPULET_LOG_ERROR("the node reboot gpulet asked for failed: {}", late.message());
    std::vector<std::string> names;
    for (const state::DeviceRecord* d : out.gpus) names.push_back(GpuText(*d));
    events.push_back(RungEvent(
        "Warning", "GpuRebootFailed",
        absl::StrCat("GPU ", absl::StrJoin(names, ", "), " needs a node reboot (", out.reason,
                     "), and the reboot gpulet asked for failed: ", late.message())));
    return events;
  }
  if (outstanding != nullptr) {
    const std::string progress = rebooter != nullptr ? rebooter->Progress() : "";
    say("asked",
        absl::StrCat("asked at ", RungTime(absl::FromUnixSeconds(outstanding->at_unix)), " of ",
                     rebooter != nullptr ? rebooter->Describe() : "the rebooter",
                     progress.empty() ? "; the reboot comes when it takes its turn"
                                      : absl::StrCat("; ", progress)),
        tries);
    return events;
  }
  std::vector<std::string> uuids;
  std::vector<std::string> names;
  for (const state::DeviceRecord* d : out.gpus) {
    uuids.push_back(d->gpu.uuid);
    names.push_back(GpuText(*d));
  }
  const std::string gpus = absl::StrJoin(names, ", ");
  if (tries >= policy.max_per_window) {
    say("budget-spent",
        absl::StrCat(tries, " reboots asked for within ", absl::FormatDuration(policy.window),
                     " (health.reboot.maxPerWindow); a person must take it from here"),
        tries);
    if (!told_) {
      told_ = true;
      GPULET_LOG_WARN("not asking for a reboot for GPU {}: {} asked for within {}", gpus, tries,
                      absl::FormatDuration(policy.window));
      events.push_back(RungEvent(
          "Warning", "GpuRebootNotDone",
          absl::StrCat("GPU ", gpus, " needs a node reboot (", out.reason,
                       ") and gpulet does not ask for one: ", tries, " were asked for within ",
                       absl::FormatDuration(policy.window),
                       ", health.reboot.maxPerWindow; reboot the node by hand, and reseat or "
                       "replace the card if the fault keeps coming back")));
    }
    return events;
  }
  if (now - save_failed_at_ < kRetryFailedAfter && policy.mode == config::RemediationMode::kOn) {
    say("failed",
        absl::StrCat(save_failure_, " (at ", RungTime(save_failed_at_),
                     "; tried again an hour later)"),
        tries);
    return events;
  }
  if (failed != nullptr && policy.mode == config::RemediationMode::kOn) {
    say("failed",
        absl::StrCat(failed->outcome.substr(std::min<size_t>(failed->outcome.size(), 8)), " (at ",
                     RungTime(absl::FromUnixSeconds(failed->at_unix)),
                     "; tried again an hour later)"),
        tries);
    return events;
  }
  if (policy.mode == config::RemediationMode::kDryRun) {
    say("would-reboot", "health.reboot.mode is dry-run", tries);
    if (!told_) {
      told_ = true;
      ++counts_["dry_run"];
      GPULET_LOG_INFO("would ask for a node reboot: GPU {} needs one ({})", gpus, out.reason);
      events.push_back(RungEvent(
          "Normal", "GpuWouldReboot",
          absl::StrCat("GPU ", gpus, " has needed a node reboot for ",
                       absl::FormatDuration(policy.grace), " (", out.reason,
                       "); health.reboot.mode is dry-run, so gpulet does not ask for one (on "
                       "would, ",
                       policy.via == "talos"   ? "through Talos' API after a drain"
                       : policy.via == "kured" ? "through kured"
                                               : "through Talos' API on Talos, kured elsewhere",
                       ")")));
    }
    return events;
  }
  if (rebooter == nullptr || record == nullptr) {
    say("waiting",
        rebooter == nullptr
            ? absl::StrCat("nothing can reboot this node: ",
                           no_rebooter_why_.empty() ? "see the log" : no_rebooter_why_)
            : record_error_,
        tries);
    return events;
  }
  // Recorded first: a reboot that follows at once is still counted, and the next boot can
  // tell that it was asked for.
  recorder::RebootRequest request{absl::ToUnixSeconds(now), boot_id_, out.reason, uuids, "asked"};
  std::vector<recorder::RebootRequest> next = *requests_;
  next.push_back(request);
  if (next.size() > kKeep) next.erase(next.begin(), next.end() - kKeep);
  if (absl::Status s = record->Save(next); !s.ok()) {
    // Not asked: a request that cannot be recorded could not be counted after the reboot.
    say("failed", std::string(s.message()), tries);
    save_failed_at_ = now;
    save_failure_ = std::string(s.message());
    ++counts_["failed"];
    GPULET_LOG_ERROR("not asking for a reboot: {}", s.message());
    events.push_back(
        RungEvent("Warning", "GpuRebootFailed",
                  absl::StrCat("GPU ", gpus, " needs a node reboot (", out.reason,
                               "), and gpulet could not record the request: ", s.message())));
    return events;
  }
  const std::string why = absl::StrCat("GPU ", gpus, ": ", out.reason);
  absl::Status asked = rebooter->Reboot(why, out.reason);
  if (!asked.ok()) {
    next.back().outcome = absl::StrCat("failed: ", asked.message());
    if (absl::Status s = record->Save(next); !s.ok()) GPULET_LOG_ERROR("{}", s.message());
  }
  requests_ = std::move(next);
  if (asked.ok()) {
    ++counts_["asked"];
    say("asked",
        absl::StrCat("asked at ", RungTime(now), " of ", rebooter->Describe(),
                     "; the reboot comes when it takes its turn"),
        tries + 1);
    GPULET_LOG_WARN("asked for a node reboot ({}): {}", rebooter->Describe(), why);
    events.push_back(RungEvent(
        "Warning", "GpuRebootAsked",
        absl::StrCat("gpulet asked for a reboot of the node through ", rebooter->Describe(),
                     ": GPU ", gpus, " needs one (", out.reason, ")")));
  } else {
    ++counts_["failed"];
    say("failed", std::string(asked.message()), tries + 1);
    GPULET_LOG_ERROR("asking for a node reboot failed: {}", asked.message());
    events.push_back(RungEvent("Warning", "GpuRebootFailed",
                               absl::StrCat("GPU ", gpus, " needs a node reboot (", out.reason,
                                            "), and asking for one failed: ", asked.message())));
  }
  return events;
}

void RebootRung::SetNoRebooterReason(std::string why) {
  absl::MutexLock lock(&mu_);
  no_rebooter_why_ = std::move(why);
}

std::map<std::string, state::RungStatus> RebootRung::ByGpu() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

std::map<std::string, uint64_t> RebootRung::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace gpulet::daemon
