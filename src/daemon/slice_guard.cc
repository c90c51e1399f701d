#include "daemon/slice_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/read_file.h"
#include "daemon/slice_events.h"
#include "metrics/sampler.h"

namespace gpulet::daemon {
namespace {

constexpr double kGiB = 1 << 30;

class RealProcessKiller : public ProcessKiller {
 public:
  explicit RealProcessKiller(std::string host_root) : host_root_(std::move(host_root)) {}

  absl::Status Kill(unsigned pid, std::optional<uint64_t> start_ticks) override {
    const std::string dir = absl::StrCat(host_root_ == "/" ? "" : host_root_, "/proc/", pid);
    if (!start_ticks) {
      return absl::FailedPreconditionError(
          absl::StrCat("the start time of PID ", pid, " is unknown (", dir,
                       "/stat was unreadable when it was sampled), so it is not killed"));
    }
    // The directory's descriptor stands for this process alone, even once the PID is reused.
    UniqueFd proc(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (proc.get() < 0) {
      if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("PID ", pid, " is gone"));
      return absl::InternalError(absl::StrCat("cannot open ", dir, ": ", strerror(errno)));
    }
    UniqueFd stat(openat(proc.get(), "stat", O_RDONLY | O_CLOEXEC));
    char buf[1024];
    ssize_t n = stat.get() < 0 ? -1 : read(stat.get(), buf, sizeof(buf) - 1);
    if (n <= 0) return absl::NotFoundError(absl::StrCat("PID ", pid, " is gone"));
    std::optional<uint64_t> now =
        metrics::ProcStartTicks(absl::string_view(buf, static_cast<size_t>(n)));
    if (now != start_ticks) {
      return absl::FailedPreconditionError(
          absl::StrCat("PID ", pid, " now names another process (", dir, "/stat starts at ",
                       now ? absl::StrCat(*now) : "?", ", not ", *start_ticks, ")"));
    }
    if (syscall(SYS_pidfd_send_signal, proc.get(), SIGKILL, nullptr, 0) != 0) {
      if (errno == ESRCH) return absl::NotFoundError(absl::StrCat("PID ", pid, " is gone"));
      if (errno == EINVAL || errno == EPERM) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot signal PID ", pid, " (", strerror(errno),
                         "): gpulet must run in the host's PID namespace (hostPID: true, as "
                         "deploy/base/daemonset.yaml sets) with the right to kill any process"));
      }
      return absl::InternalError(
          absl::StrCat("pidfd_send_signal(", dir, ", SIGKILL): ", strerror(errno)));
    }
    return absl::OkStatus();
  }

 private:
  const std::string host_root_;
};

// The process a kill would take: the holder's largest by the driver's count.
const metrics::SliceDeviceUse::Process* Largest(const metrics::SliceDeviceUse& use) {
  const metrics::SliceDeviceUse::Process* out = nullptr;
  for (const metrics::SliceDeviceUse::Process& p : use.processes) {
    if (p.driver_bytes > 0 && (out == nullptr || p.driver_bytes > out->driver_bytes)) out = &p;
  }
  return out;
}

std::string ProcessName(const metrics::SliceDeviceUse::Process& p) {
  return absl::StrCat("PID ", p.pid, p.name.empty() ? "" : absl::StrCat(" (", p.name, ")"));
}

cluster::NodeEvent Warning(std::string reason, std::string note) {
  cluster::NodeEvent e;
  e.type = "Warning";
  e.reason = std::move(reason);
  e.note = std::move(note);
  if (e.note.size() > 1024) e.note.resize(1024);
  return e;
}

}  // namespace

std::unique_ptr<ProcessKiller> MakeProcessKiller(std::string host_root) {
  return std::make_unique<RealProcessKiller>(std::move(host_root));
}

std::vector<cluster::NodeEvent> SliceGuard::Next(
    const std::vector<metrics::SliceSample>& slices, const state::Snapshot& snap,
    const metrics::PodMap* pods, const config::Config::MemorySlices::OverQuota& policy,
    absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::vector<cluster::NodeEvent> out;
  while (!kill_times_.empty() && now - kill_times_.front() >= absl::Hours(1)) {
    kill_times_.pop_front();
  }
  const uint64_t margin = uint64_t{static_cast<uint32_t>(policy.margin_mib)} << 20;
  std::set<std::string> over;
  for (const metrics::SliceSample& s : slices) {
    // A GPU that did not answer this round says nothing: the episode, if any, stands.
    if (!s.device) {
      if (episodes_.count(s.name)) over.insert(s.name);
      continue;
    }
    if (s.device->used_bytes <= s.usage.quota_bytes + margin) continue;
    over.insert(s.name);
    const metrics::SliceDeviceUse::Process* victim = Largest(*s.device);
    const std::string who = SliceHolderName(s, pods);
    const std::string gpu = SliceGpuName(s, snap);
    auto [episode, started] = episodes_.try_emplace(s.name, Episode{now});
    if (started) {
      std::string then =
          victim == nullptr ? "NVML lists none of its processes with memory, so none is named"
          : policy.action == config::OverQuotaAction::kKill
              ? absl::StrCat("gpulet kills ", ProcessName(*victim),
                             ", its largest, if it stays over for ",
                             absl::FormatDuration(policy.grace))
              : absl::StrCat("with sharing.memorySlices.overQuota.action kill, gpulet would kill ",
                             ProcessName(*victim), ", its largest; now it only reports");
      out.push_back(Warning(
          "GpuVramOverQuota",
          absl::StrFormat("%s holds %.2f GiB of GPU %s by the driver's count (CUDA contexts "
                          "included), over its %.2f GiB VRAM quota by more than the %d MiB "
                          "margin: %s (slice %s)",
                          who, static_cast<double>(s.device->used_bytes) / kGiB, gpu,
                          static_cast<double>(s.usage.quota_bytes) / kGiB, policy.margin_mib, then,
                          s.name)));
      GPULET_LOG_WARN("{}", out.back().note);
    }
    if (policy.action != config::OverQuotaAction::kKill || victim == nullptr ||
        now - episode->second.grace_from < policy.grace) {
      continue;
    }
    if (static_cast<int>(kill_times_.size()) >= policy.max_kills_per_hour) {
      if (!episode->second.refusal_told) {
        episode->second.refusal_told = true;
        out.push_back(Warning(
            "GpuVramOverQuotaNotKilled",
            absl::StrCat(ProcessName(*victim), " of ", who, " is not killed though its slice ",
                         s.name, " stays over quota on GPU ", gpu, ": gpulet killed ",
                         kill_times_.size(),
                         " processes in the last hour, which is "
                         "sharing.memorySlices.overQuota.maxKillsPerHour")));
        GPULET_LOG_WARN("{}", out.back().note);
      }
      continue;
    }
    absl::Status killed = killer_->Kill(victim->pid, victim->start_ticks);
    if (killed.ok()) {
      kill_times_.push_back(now);
      kills_.fetch_add(1, std::memory_order_relaxed);
      episode->second.grace_from = now;
      out.push_back(Warning(
          "GpuVramOverQuotaKilled",
          absl::StrFormat("gpulet killed %s of %s: it held %.2f GiB of GPU %s by the driver's "
                          "count, and its slice %s stayed over its %.2f GiB quota by more than "
                          "%d MiB for %s (sharing.memorySlices.overQuota)",
                          ProcessName(*victim), who,
                          static_cast<double>(victim->driver_bytes) / kGiB, gpu, s.name,
                          static_cast<double>(s.usage.quota_bytes) / kGiB, policy.margin_mib,
                          absl::FormatDuration(policy.grace))));
      GPULET_LOG_WARN("{}", out.back().note);
    } else if (absl::IsNotFound(killed)) {
      // Gone since the round sampled it: the next round sees what is left.
    } else if (!episode->second.refusal_told) {
      episode->second.refusal_told = true;
      out.push_back(Warning("GpuVramOverQuotaNotKilled",
                            absl::StrCat(ProcessName(*victim), " of ", who, " (slice ", s.name,
                                         ", GPU ", gpu, ") was not killed: ", killed.message())));
      GPULET_LOG_WARN("{}", out.back().note);
    }
  }
  for (auto it = episodes_.begin(); it != episodes_.end();) {
    it = over.count(it->first) ? std::next(it) : episodes_.erase(it);
  }
  return out;
}

}  // namespace gpulet::daemon
