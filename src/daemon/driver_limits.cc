#include "daemon/driver_limits.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "node/dmem.h"

namespace gpulet::daemon {
namespace {

// One holder of a slice whose processes run: the cgroup its limit goes on.
struct Holder {
  std::string slice;
  std::string uuid;
  unsigned index = 0;
  uint64_t quota = 0;
  std::string cgroup;
};

std::string GiB(uint64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (uint64_t{1} << 30));
}

}  // namespace

void DriverLimits::LogOnce(const std::string& what, const std::string& message) {
  if (logged_.insert(what).second) GPULET_LOG_WARN("{}", message);
}

void DriverLimits::Next(const std::vector<metrics::SliceSample>& slices,
                        const state::Snapshot& snap, absl::Time now) {
  absl::MutexLock round(&round_mu_);
  if (now - capacity_read_ >= kCapacityTtl) {
    absl::StatusOr<std::string> text = host_->ReadFile(node::kDmemCapacityPath, 1 << 16);
    capacity_ = text.ok() ? *std::move(text) : "";
    capacity_read_ = now;
  }
  // Per GPU: whether the driver can hold its limits at all.
  std::map<std::string, bool> holds;
  std::map<std::string, const state::DeviceRecord*> by_uuid;
  for (const state::DeviceRecord& d : snap.devices) {
    if (d.gpu.uuid.empty() || !d.gpu.index) continue;  // not one NVML serves
    by_uuid[d.gpu.uuid] = &d;
    holds[d.gpu.uuid] =
        !driver_refused_ && !d.gpu.mig_enabled && node::DmemCapacityLists(capacity_, d.gpu.bus_id);
  }

  // The holders with running processes, and the cgroup of each.
  std::vector<Holder> holders;
  for (const metrics::SliceSample& s : slices) {
    auto gpu = by_uuid.find(s.usage.gpu_uuid);
    if (gpu == by_uuid.end() || !holds[s.usage.gpu_uuid]) continue;
    std::vector<std::string> paths;
    std::string why_not;
    for (const vram::SliceUsage::Process& p : s.usage.processes) {
      if (p.pid <= 0) {
        why_not =
            "a process of it runs in a PID namespace gpulet cannot see (gpulet needs "
            "hostPID: true)";
        break;
      }
      const std::string file = absl::StrCat("/proc/", p.pid, "/cgroup");
      absl::StatusOr<std::string> text = host_->ReadFile(file, 1 << 16);
      if (!text.ok()) continue;  // gone since the slice file was read
      std::optional<std::string> path = node::UnifiedCgroupPath(*text);
      if (!path) {
        why_not = absl::StrCat(file, " has no cgroup v2 line (a cgroup v1 host)");
        break;
      }
      if (absl::StartsWith(*path, "/..")) {
        why_not = absl::StrCat(file, " names ", *path,
                               ", outside gpulet's cgroup namespace (run gpulet in the host's "
                               "cgroup namespace: privileged, as deploy/ runs it)");
        break;
      }
      paths.push_back(*std::move(path));
    }
    if (why_not.empty() && paths.empty()) continue;  // nothing runs: nothing to limit yet
    const std::string cgroup = why_not.empty() ? node::CommonCgroup(paths) : "";
    if (why_not.empty() && cgroup == "/") {
      why_not = "its processes share only the root cgroup";
    }
    if (!why_not.empty()) {
      holds[s.usage.gpu_uuid] = false;
      LogOnce(
          absl::StrCat("cgroup:", s.name),
          absl::StrCat("VRAM slice ", s.name, " on GPU ", *gpu->second->gpu.index,
                       " gets no driver limit, the enforcement library alone holds it: ", why_not));
      continue;
    }
    holders.push_back(
        {s.name, s.usage.gpu_uuid, *gpu->second->gpu.index, s.usage.quota_bytes, cgroup});
  }

  // Two holders of one GPU in one cgroup, or one inside the other's: a limit on the outer
  // would cap both, so neither gets one.
  std::vector<bool> shared(holders.size(), false);
  for (size_t i = 0; i < holders.size(); ++i) {
    for (size_t j = i + 1; j < holders.size(); ++j) {
      if (holders[i].uuid == holders[j].uuid &&
          (node::CgroupWithin(holders[i].cgroup, holders[j].cgroup) ||
           node::CgroupWithin(holders[j].cgroup, holders[i].cgroup))) {
        shared[i] = shared[j] = true;
      }
    }
  }

  std::map<Key, uint64_t> still;
  for (size_t i = 0; i < holders.size(); ++i) {
    const Holder& h = holders[i];
    if (shared[i]) {
      holds[h.uuid] = false;
      LogOnce(absl::StrCat("shared:", h.slice, ":", h.cgroup),
              absl::StrCat("VRAM slice ", h.slice, " on GPU ", h.index,
                           " gets no driver limit, the enforcement library alone holds it: its "
                           "cgroup ",
                           h.cgroup, " holds another slice of the same GPU"));
      continue;
    }
    const Key key{h.uuid, h.cgroup};
    if (auto it = set_.find(key); it != set_.end() && it->second == h.quota) {
      still[key] = h.quota;
      continue;
    }
    if (failed_.count({key, h.quota}) != 0 || driver_refused_) {
      holds[h.uuid] = false;
      continue;
    }
    absl::StatusOr<std::string> dir = host_->Resolve(absl::StrCat("/sys/fs/cgroup", h.cgroup));
    absl::Status status =
        dir.ok() ? gpus_->SetMemoryLimit(h.index, *dir, h.quota, kCallTimeout) : dir.status();
    if (status.ok()) {
      still[key] = h.quota;
      GPULET_LOG_INFO("the driver holds VRAM slice {} on GPU {} to its {} quota (cgroup {})",
                      h.slice, h.index, GiB(h.quota), h.cgroup);
      continue;
    }
    holds[h.uuid] = false;
    if (status.code() == absl::StatusCode::kUnimplemented) {
      // A driver without the call (or a GPU that cannot): the library holds every slice.
      driver_refused_ = true;
      for (auto& [uuid, held] : holds) held = false;
      LogOnce("refused", absl::StrCat("the driver holds no VRAM limits, the enforcement library "
                                      "alone holds the slices' quotas: ",
                                      status.message()));
      continue;
    }
    failed_.insert({key, h.quota});
    LogOnce(absl::StrCat("failed:", h.slice, ":", h.cgroup, ":", h.quota),
            absl::StrCat("VRAM slice ", h.slice, " on GPU ", h.index,
                         " gets no driver limit, the enforcement library alone holds it: ",
                         status.message()));
  }
  set_ = still;
  // What was failed or said of slices now gone is forgotten: a long-running node sees
  // thousands of containers come and go.
  std::set<std::string> current;
  for (const metrics::SliceSample& s : slices) current.insert(s.name);
  std::erase_if(failed_, [&](const std::pair<Key, uint64_t>& f) {
    for (const Holder& h : holders) {
      if (Key{h.uuid, h.cgroup} == f.first) return false;
    }
    return true;
  });
  std::erase_if(logged_, [&](const std::string& what) {
    const size_t colon = what.find(':');
    if (colon == std::string::npos) return false;  // "refused": until gpulet restarts
    const size_t end = what.find(':', colon + 1);
    return current.count(
               what.substr(colon + 1, end == std::string::npos ? end : end - colon - 1)) == 0;
  });

  absl::MutexLock lock(&holds_mu_);
  holds_ = std::move(holds);
  published_ = std::move(still);
}

bool DriverLimits::DriverHolds(const std::string& uuid) const {
  absl::MutexLock lock(&holds_mu_);
  auto it = holds_.find(uuid);
  return it != holds_.end() && it->second;
}

std::map<std::pair<std::string, std::string>, uint64_t> DriverLimits::limits() const {
  absl::MutexLock lock(&holds_mu_);
  return published_;
}

}  // namespace gpulet::daemon
