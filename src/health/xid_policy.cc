#include "health/xid_policy.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "health/xid_catalog.h"
#include "node/bus_id.h"

namespace gpulet::health {
namespace {
constexpr char kXidSource[] = "xid";
constexpr absl::Duration kDedupWindow = absl::Seconds(2);
constexpr int kRecoveryActionXid = 154;

bool NeedsRecovery(GpuAction action) {
  return action == GpuAction::kResetGpu || action == GpuAction::kRebootNode;
}
}  // namespace

XidPolicy::XidPolicy(state::DeviceStore* store, std::set<int> application_xids,
                     absl::Duration quiet_period, XidPolicyOptions options)
    : store_(store),
      application_xids_(std::move(application_xids)),
      quiet_period_(quiet_period),
      history_store_(options.history),
      boot_id_(std::move(options.boot_id)),
      on_xid_(std::move(options.on_xid)) {
  if (history_store_ == nullptr) return;
  absl::StatusOr<XidHistory> loaded = history_store_->Load();
  absl::MutexLock lock(&mu_);
  if (loaded.ok()) {
    history_ = *std::move(loaded);
  } else {
    history_status_ = loaded.status();
    GPULET_LOG_ERROR("{}", loaded.status().ToString());
  }
}

absl::Status XidPolicy::HistoryStatus() const {
  absl::MutexLock lock(&mu_);
  return history_status_;
}

XidHistory XidPolicy::History() const {
  absl::MutexLock lock(&mu_);
  return history_;
}

void XidPolicy::SaveHistoryLocked() {
  if (history_store_ == nullptr) return;
  absl::Status s = history_store_->Save(history_);
  if (!s.ok() && history_status_.ok()) GPULET_LOG_ERROR("{}", s.ToString());
  history_status_ = s;
}

void XidPolicy::AdoptFrom(const XidPolicy& old) {
  if (&old == this) return;
  XidHistory history;
  std::map<std::string, int> last_xid;
  std::map<std::pair<std::string, int>, std::pair<absl::Time, std::string>> seen;
  std::map<std::string, absl::Time> last_bad;
  std::map<std::pair<std::string, unsigned>, absl::Time> last_bad_mig;
  {
    absl::MutexLock lock(&old.mu_);
    history = old.history_;
    last_xid = old.last_xid_;
    seen = old.seen_;
    last_bad = old.last_bad_;
    last_bad_mig = old.last_bad_mig_;
  }
  absl::MutexLock lock(&mu_);
  if (history_store_ == nullptr) history_ = std::move(history);
  last_xid_ = std::move(last_xid);
  seen_ = std::move(seen);
  last_bad_ = std::move(last_bad);
  last_bad_mig_ = std::move(last_bad_mig);
}

bool XidPolicy::OnXid(const std::string& gpu, int xid, const std::string& message,
                      const std::string& source, absl::Time now,
                      std::optional<unsigned> gpu_instance) {
  std::string key;
  bool applied = Apply(gpu, xid, message, source, now, gpu_instance, &key);
  if (applied && on_xid_ && !key.empty()) on_xid_(key, xid, message, now);
  return applied;
}

bool XidPolicy::Apply(const std::string& gpu, int xid, const std::string& message,
                      const std::string& source, absl::Time now,
                      std::optional<unsigned> gpu_instance, std::string* known_key) {
  std::shared_ptr<const state::Snapshot> snap = store_->Get();
  std::string key = gpu;
  // Normalise to the UUID when we know it, so both sources share one de-duplication key.
  // NVML events name GPUs as "index:N", the kernel log by bus id.
  std::string bus = node::NormalizeBusId(gpu);
  for (const state::DeviceRecord& d : snap->devices) {
    bool by_index = d.gpu.index && gpu == absl::StrCat("index:", *d.gpu.index);
    if (d.gpu.uuid == gpu || by_index || (!bus.empty() && d.gpu.bus_id == bus)) {
      key = d.gpu.uuid.empty() ? d.gpu.bus_id : d.gpu.uuid;
    }
  }
  // The MIG device the XID names, when it names one that exists now.
  std::optional<unsigned> instance;
  if (gpu_instance) {
    for (const state::DeviceRecord& d : snap->devices) {
      if ((d.gpu.uuid.empty() ? d.gpu.bus_id : d.gpu.uuid) == key && d.gpu.mig_enabled &&
          d.gpu.FindMigInstance(*gpu_instance, std::nullopt) != nullptr) {
        instance = gpu_instance;
      }
    }
  }
  {
    absl::MutexLock lock(&mu_);
    auto& seen = seen_[{instance ? absl::StrCat(key, "/gi", *instance) : key, xid}];
    if (seen.second != "" && seen.second != source && now - seen.first < kDedupWindow) {
      return false;  // the other source already reported this one
    }
    seen = {now, source};
  }
  XidEvent event;
  event.xid = xid;
  event.message = message;
  XidAssessment a = AssessXid(event);
  bool application = application_xids_.count(xid) > 0;
  // What XID 154 announces, when it names an action.
  std::optional<GpuAction> announced;
  if (xid == kRecoveryActionXid) announced = RecoveryActionFromXid154(message);
  std::string repeat_note;
  int earlier_xid = 0;
  bool known = false;
  for (const state::DeviceRecord& d : snap->devices) {
    if ((d.gpu.uuid.empty() ? d.gpu.bus_id : d.gpu.uuid) == key) known = true;
  }
  if (known) *known_key = key;
  if (!application && known) {
    absl::MutexLock lock(&mu_);
    if (instance) {
      last_bad_mig_[{key, *instance}] = now;
    } else {
      last_bad_[key] = now;
    }
    if (announced) {
      auto last = last_xid_.find(key);
      if (last != last_xid_.end()) earlier_xid = last->second;
      std::map<int, XidHistoryEntry>& gpu_history = history_[key];
      if (*announced == GpuAction::kNone) {
        // The driver's all-clear: whatever recovery was pending has happened.
        for (auto& [code, entry] : gpu_history) {
          if (entry.awaiting_recovery) entry.recovered = true;
        }
      } else if (NeedsRecovery(*announced) && earlier_xid != 0) {
        XidHistoryEntry& entry = gpu_history[earlier_xid];
        entry.awaiting_recovery = true;
        entry.recovery = std::string(GpuActionName(*announced));
        entry.recovered = false;
        if (entry.boot_id.empty()) entry.boot_id = boot_id_;
      }
      SaveHistoryLocked();
    } else if (xid != kRecoveryActionXid) {
      last_xid_[key] = xid;
      XidHistoryEntry& entry = history_[key][xid];
      // A reboot also resets every GPU.
      bool rebooted = !boot_id_.empty() && !entry.boot_id.empty() && entry.boot_id != boot_id_;
      if (entry.count > 0 && entry.awaiting_recovery && (entry.recovered || rebooted)) {
        a.severity = XidSeverity::kFatal;
        a.action = GpuAction::kInspectHardware;
        repeat_note =
            absl::StrCat("; it came back after the recommended ",
                         rebooted ? "node reboot" : "GPU reset", " (seen ", entry.count + 1,
                         " times): NVIDIA's guidance for a repeat is hardware "
                         "inspection");
      }
      ++entry.count;
      entry.last_seen_unix = absl::ToUnixSeconds(now);
      entry.boot_id = boot_id_;
      // Once escalated, the entry keeps waiting: the next repeat after a recovery escalates
      // again.
      if (NeedsRecovery(a.info.action)) {
        entry.recovery = std::string(GpuActionName(a.info.action));
      } else if (repeat_note.empty()) {
        entry.recovery.clear();
      }
      entry.awaiting_recovery = !entry.recovery.empty();
      entry.recovered = false;
      SaveHistoryLocked();
    }
  }
  // Counted on the GPU (dcgm-exporter's XID series are per GPU), whatever it names.
  auto count = [&](state::GpuHealth& h) {
    h.last_xid = xid;
    // dcgm-exporter says "Unknown Error" for a code its table lacks; so does gpulet.
    const XidInfo* listed = FindXid(xid);
    h.last_xid_message = listed != nullptr ? std::string(listed->meaning) : "Unknown Error";
    ++h.xid_counts[xid];
  };
  if (application) return store_->UpdateHealth(key, count);  // the GPU stays schedulable
  auto assess = [&](state::GpuHealth& h) {
    std::string reason = absl::StrCat("XID ", xid, " (", a.info.mnemonic, "): ", a.info.meaning);
    if (announced && earlier_xid != 0) {
      absl::StrAppend(&reason, "; the driver asks for ", GpuActionName(*announced), " after XID ",
                      earlier_xid);
    }
    absl::StrAppend(&reason, repeat_note);
    if (!message.empty()) absl::StrAppend(&reason, " [", message, "]");
    std::string action(GpuActionDescription(a.action));
    if (announced && *announced == GpuAction::kNone) {
      h.Clear(kXidSource, now);  // the driver says no recovery is needed any more
      return;
    }
    const bool reboot = a.action == GpuAction::kRebootNode;
    const bool reset = a.action == GpuAction::kResetGpu;
    if (a.severity == XidSeverity::kFatal) {
      h.Raise(kXidSource,
              {state::HealthState::kUnhealthy, reason, action, absl::InfinitePast(), reboot, reset},
              now);
    } else if (a.severity == XidSeverity::kWarning) {
      // A warning never lowers an existing Unhealthy verdict from an earlier fatal XID,
      // unless the driver itself announced the lighter action.
      if (announced || !h.Has(kXidSource) ||
          h.conditions[kXidSource].severity != state::HealthState::kUnhealthy) {
        h.Raise(
            kXidSource,
            {state::HealthState::kDegraded, reason, action, absl::InfinitePast(), reboot, reset},
            now);
      }
    }
  };
  if (instance) {
    const bool raised = store_->UpdateMigHealth(
        key, *instance,
        [&](state::GpuHealth& h) {
          assess(h);
          if (h.state != state::HealthState::kHealthy) {
            h.reason = absl::StrCat("MIG GPU instance ", *instance, ": ", h.reason);
          }
        },
        count);
    if (raised) return true;  // else the layout changed meanwhile: the GPU's, below
  }
  return store_->UpdateHealth(key, [&](state::GpuHealth& h) {
    count(h);
    assess(h);
  });
}

void XidPolicy::NoteReset(const std::string& gpu) {
  std::shared_ptr<const state::Snapshot> snap = store_->Get();
  std::string key;
  for (const state::DeviceRecord& d : snap->devices) {
    if (d.gpu.uuid == gpu || (!gpu.empty() && d.gpu.bus_id == gpu)) {
      key = d.gpu.uuid.empty() ? d.gpu.bus_id : d.gpu.uuid;
    }
  }
  if (key.empty()) return;
  absl::MutexLock lock(&mu_);
  MarkResetDoneLocked(key);
}

void XidPolicy::MarkResetDoneLocked(const std::string& key) {
  bool changed = false;
  for (auto& [code, entry] : history_[key]) {
    if (entry.awaiting_recovery && !entry.recovered && entry.recovery == "reset-gpu") {
      entry.recovered = true;
      changed = true;
    }
  }
  if (changed) SaveHistoryLocked();
}

void XidPolicy::Tick(absl::Time now) {
  std::map<std::string, absl::Time> last;
  std::map<std::pair<std::string, unsigned>, absl::Time> last_mig;
  {
    absl::MutexLock lock(&mu_);
    last = last_bad_;
    last_mig = last_bad_mig_;
  }
  std::shared_ptr<const state::Snapshot> snap = store_->Get();
  for (const state::DeviceRecord& d : snap->devices) {
    const std::string key = d.gpu.uuid.empty() ? d.gpu.bus_id : d.gpu.uuid;
    for (const auto& [gi, h] : d.mig_health) {
      if (!h.Has(kXidSource)) continue;
      auto it = last_mig.find({key, gi});
      if (it == last_mig.end() || now - it->second >= quiet_period_) {
        store_->UpdateMigHealth(key, gi, [&](state::GpuHealth& mh) { mh.Clear(kXidSource, now); });
      }
    }
  }
  for (const state::DeviceRecord& d : snap->devices) {
    if (!d.health.Has(kXidSource)) continue;
    std::string key = d.gpu.uuid.empty() ? d.gpu.bus_id : d.gpu.uuid;
    auto it = last.find(key);
    if (it == last.end() || now - it->second >= quiet_period_) {
      store_->UpdateHealth(key, [&](state::GpuHealth& h) { h.Clear(kXidSource, now); });
      // Back in service: a reset the XIDs asked for counts as done (a reboot does not: only
      // a new boot id shows that).
      absl::MutexLock lock(&mu_);
      MarkResetDoneLocked(key);
    }
  }
}

}  // namespace gpulet::health
