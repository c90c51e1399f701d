#include "health/xid_policy.h"

#include "absl/strings/str_cat.h"
#include "health/xid_catalog.h"
#include "node/bus_id.h"

namespace gpulet {
namespace {
constexpr char kSource[] = "xid";
constexpr absl::Duration kDedupWindow = absl::Seconds(2);
}  // namespace

XidPolicy::XidPolicy(DeviceStore* store, std::set<int> application_xids,
                     absl::Duration quiet_period)
    : store_(store), application_xids_(std::move(application_xids)), quiet_period_(quiet_period) {}

bool XidPolicy::OnXid(const std::string& gpu, int xid, const std::string& message,
                      const std::string& source, absl::Time now) {
  std::shared_ptr<const Snapshot> snap = store_->Get();
  std::string key = gpu;
  // Normalise to the UUID when we know it, so both sources share one de-duplication key.
  // NVML events name GPUs as "index:N", the kernel log by bus id.
  std::string bus = NormalizeBusId(gpu);
  for (const DeviceRecord& d : snap->devices) {
    bool by_index = d.gpu.index && gpu == absl::StrCat("index:", *d.gpu.index);
    if (d.gpu.uuid == gpu || by_index || (!bus.empty() && d.gpu.bus_id == bus)) {
      key = d.gpu.uuid.empty() ? d.gpu.bus_id : d.gpu.uuid;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    auto& seen = seen_[{key, xid}];
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
  if (!application) {
    absl::MutexLock lock(&mu_);
    last_bad_[key] = now;
  }
  return store_->UpdateHealth(key, [&](GpuHealth& h) {
    h.last_xid = xid;
    ++h.xid_counts[xid];
    if (application) return;  // counted; the GPU stays schedulable
    std::string reason = absl::StrCat("XID ", xid, " (", a.info.mnemonic, "): ", a.info.meaning);
    if (!message.empty()) absl::StrAppend(&reason, " [", message, "]");
    std::string action(GpuActionDescription(a.action));
    if (a.severity == XidSeverity::kFatal) {
      h.Raise(kSource, {HealthState::kUnhealthy, reason, action, absl::InfinitePast()}, now);
    } else if (a.severity == XidSeverity::kWarning) {
      // A warning never lowers an existing Unhealthy verdict from an earlier fatal XID.
      if (!h.Has(kSource) || h.conditions[kSource].severity != HealthState::kUnhealthy) {
        h.Raise(kSource, {HealthState::kDegraded, reason, action, absl::InfinitePast()}, now);
      }
    }
  });
}

void XidPolicy::Tick(absl::Time now) {
  std::map<std::string, absl::Time> last;
  {
    absl::MutexLock lock(&mu_);
    last = last_bad_;
  }
  std::shared_ptr<const Snapshot> snap = store_->Get();
  for (const DeviceRecord& d : snap->devices) {
    if (!d.health.Has(kSource)) continue;
    std::string key = d.gpu.uuid.empty() ? d.gpu.bus_id : d.gpu.uuid;
    auto it = last.find(key);
    if (it == last.end() || now - it->second >= quiet_period_) {
      store_->UpdateHealth(key, [&](GpuHealth& h) { h.Clear(kSource, now); });
    }
  }
}

}  // namespace gpulet
