#include "daemon/gpu_retirement.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "node/bus_id.h"

namespace gpulet::daemon {
namespace {

std::string RetiredAction(const std::string& uuid) {
  return absl::StrCat(
      "reseat or replace the card (check its power cables and cooling); then "
      "`gpulet retired --clear ",
      uuid, "` returns it to service");
}

}  // namespace

GpuRetirement::GpuRetirement(state::DeviceStore* store, cluster::EventInbox* inbox,
                             const Clock* clock)
    : store_(store), inbox_(inbox), clock_(clock) {}

void GpuRetirement::Configure(const config::Config::Health::Retire& settings,
                              std::unique_ptr<recorder::RetiredFile> file) {
  absl::MutexLock lock(&mu_);
  settings_ = settings;
  file_ = std::move(file);
  last_error_.clear();
  SyncLocked();
}

void GpuRetirement::Sync() {
  absl::MutexLock lock(&mu_);
  SyncLocked();
}

void GpuRetirement::SyncLocked() {
  recorder::RetiredGpus retired;
  if (file_ != nullptr) {
    absl::StatusOr<recorder::RetiredGpus> loaded = file_->Load();
    if (!loaded.ok()) {
      // Keep what is raised: a file that cannot be read now must not return a retired card
      // to service.
      if (std::string error(loaded.status().message()); error != last_error_) {
        GPULET_LOG_ERROR("retired GPUs: {}", error);
        last_error_ = error;
      }
      return;
    }
    last_error_.clear();
    retired = *std::move(loaded);
  }
  std::shared_ptr<const state::Snapshot> snap = store_->Get();
  const absl::Time now = clock_->Now();
  for (const state::DeviceRecord& d : snap->devices) {
    if (d.gpu.uuid.empty()) continue;
    auto r = retired.find(d.gpu.uuid);
    if (r == retired.end()) {
      if (raised_.erase(d.gpu.uuid) > 0) {
        store_->UpdateHealth(d.gpu.uuid,
                             [&](state::GpuHealth& h) { h.Clear(kRetiredSource, now); });
        GPULET_LOG_INFO("GPU {} is no longer retired: back in service", d.gpu.uuid);
        inbox_->Post({{"Normal", "GpuUnretired",
                       absl::StrCat("GPU ", d.gpu.uuid, " (", d.gpu.bus_id,
                                    ") is no longer retired and returns to service")}});
      }
      continue;
    }
    if (raised_.count(d.gpu.uuid) > 0) continue;
    if (node::NormalizeBusId(r->second.pci_bus_id) != node::NormalizeBusId(d.gpu.bus_id)) {
      GPULET_LOG_WARN(
          "retired GPU {} was at {} and is now at {}: kept out all the same (the card "
          "is what faulted)",
          d.gpu.uuid, r->second.pci_bus_id, d.gpu.bus_id);
    }
    state::HealthCondition c;
    c.severity = state::HealthState::kUnhealthy;
    c.reason = absl::StrCat("retired: ", r->second.reason);
    c.action = RetiredAction(d.gpu.uuid);
    store_->UpdateHealth(d.gpu.uuid, [&](state::GpuHealth& h) { h.Raise(kRetiredSource, c, now); });
    raised_.insert(d.gpu.uuid);
    GPULET_LOG_WARN("GPU {} ({}) is retired: {}; {}", d.gpu.uuid, d.gpu.bus_id, r->second.reason,
                    c.action);
  }
}

void GpuRetirement::Consider(const std::string& uuid,
                             const std::vector<recorder::RecorderDump>& faults) {
  absl::MutexLock lock(&mu_);
  if (settings_.mode == config::RemediationMode::kOff || raised_.count(uuid) > 0 || faults.empty())
    return;
  const absl::Time now = clock_->Now();
  std::optional<std::string> reason =
      recorder::RetireReason(faults, settings_.faults, settings_.window, now);
  if (!reason) return;
  const std::string bus = faults.back().pci_bus_id;
  if (settings_.mode == config::RemediationMode::kDryRun) {
    if (!dry_runs_.insert({uuid, faults.back().fault_ms}).second) return;
    std::string note = absl::StrCat("GPU ", uuid, " (", bus, ") would be retired: ", *reason,
                                    " (health.retire.mode is dry-run; on keeps such a card out "
                                    "of service until it is reseated or replaced)");
    GPULET_LOG_WARN("{}", note);
    inbox_->Post({{"Warning", "GpuWouldRetire", note}});
    return;
  }
  if (file_ == nullptr) {
    GPULET_LOG_ERROR("GPU {} should be retired ({}), but health.retire.file cannot be used", uuid,
                     *reason);
    return;
  }
  absl::StatusOr<recorder::RetiredGpus> retired = file_->Load();
  if (!retired.ok()) {
    GPULET_LOG_ERROR("GPU {} should be retired ({}), but: {}", uuid, *reason,
                     retired.status().message());
    return;
  }
  (*retired)[uuid] = {bus, absl::ToUnixSeconds(now), *reason};
  if (absl::Status s = file_->Save(*retired); !s.ok()) {
    GPULET_LOG_ERROR("GPU {}: {}; it is kept out until gpulet restarts", uuid, s.message());
  }
  state::HealthCondition c;
  c.severity = state::HealthState::kUnhealthy;
  c.reason = absl::StrCat("retired: ", *reason);
  c.action = RetiredAction(uuid);
  store_->UpdateHealth(uuid, [&](state::GpuHealth& h) { h.Raise(kRetiredSource, c, now); });
  raised_.insert(uuid);
  std::string note =
      absl::StrCat("GPU ", uuid, " (", bus, ") is retired: ", *reason, "; ", c.action);
  GPULET_LOG_WARN("{}", note);
  inbox_->Post({{"Warning", "GpuRetired", note}});
}

}  // namespace gpulet::daemon
