#include "dra/kubelet_plugin.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/periodic_worker.h"
#include "common/unix_socket.h"

namespace gpulet::dra {

KubeletPlugin::KubeletPlugin(std::string driver, std::string kubelet_dir, PreparedClaims* claims,
                             absl::Duration recheck, std::string instance)
    : instance_(std::move(instance)),
      paths_(DraPaths::For(kubelet_dir, driver, instance_)),
      recheck_(recheck),
      service_(paths_.dra_socket, claims),
      registration_(driver, paths_.registration_socket, paths_.dra_socket) {}

KubeletPlugin::~KubeletPlugin() { Stop(); }

absl::Status KubeletPlugin::Start() {
  if (thread_.joinable()) return absl::OkStatus();
  absl::Status s = CheckDriverName(registration_.driver());
  if (!s.ok()) return s;
  s = CheckInstanceName(instance_);
  if (!s.ok()) return s;
  RemoveStaleInstances();
  s = service_.Start();
  if (!s.ok()) return s;
  s = registration_.Start();
  if (!s.ok()) {
    service_.Stop();
    return s;
  }
  GPULET_LOG_INFO("DRA driver {}: serving {}, registration on {}", registration_.driver(),
                  paths_.dra_socket, paths_.registration_socket);
  stop_.store(false);
  watcher_ = std::make_unique<DirWatcher>(paths_.registry_dir);
  thread_ = StartNamedThread("gpulet-dra", [this] { Run(); });
  return absl::OkStatus();
}

void KubeletPlugin::Stop() {
  if (thread_.joinable()) {
    stop_.store(true);
    watcher_->Wake();
    thread_.join();
    watcher_.reset();
  }
  // The kubelet deregisters before the service goes; a call it sent on the way still finds
  // the service (DraPluginServer::Drain).
  const bool was_registered = registration_.running();
  registration_.Stop();
  if (was_registered) {
    const int late = service_.Drain(drain_quiet_, drain_at_most_);
    if (late > 0) {
      GPULET_LOG_INFO(
          "DRA driver {}: served {} call(s) that arrived after the registration was withdrawn",
          registration_.driver(), late);
    }
  }
  service_.Stop();
}

namespace {

// The instance part of `name` when it is `prefix` + ("" | "-" + pod UID) + `suffix`: "" for
// the name without instance; nullopt when `name` is not such a name.
std::optional<std::string> InstanceOf(const std::string& name, const std::string& prefix,
                                      const std::string& suffix) {
  if (!absl::StartsWith(name, prefix) || !absl::EndsWith(name, suffix) ||
      name.size() < prefix.size() + suffix.size()) {
    return std::nullopt;
  }
  std::string middle = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (middle.empty()) return middle;
  if (middle[0] != '-' || !IsPodUid(middle.substr(1))) return std::nullopt;
  return middle.substr(1);
}

// The sockets in `dir` named prefix[-<uid>]suffix, other than `own`.
std::vector<std::string> OtherInstances(const std::string& dir, const std::string& prefix,
                                        const std::string& suffix, const std::string& own) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (!InstanceOf(name, prefix, suffix).has_value()) continue;
    std::string path = absl::StrCat(dir, "/", name);
    if (path != own) out.push_back(std::move(path));
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void KubeletPlugin::RemoveStaleInstances() {
  removed_stale_.clear();
  const std::string& driver = registration_.driver();
  std::vector<std::string> candidates =
      OtherInstances(paths_.registry_dir, driver, "-reg.sock", paths_.registration_socket);
  for (std::string& p : OtherInstances(paths_.plugin_dir, "dra", ".sock", paths_.dra_socket)) {
    candidates.push_back(std::move(p));
  }
  // Only a socket nobody listens on: a live instance (the old pod of a rolling update, still
  // serving) keeps its sockets, and removes them itself when it stops.
  for (const std::string& path : candidates) {
    if (ProbeUnixSocket(path) != SocketProbe::kRefused) continue;
    if (unlink(path.c_str()) == 0) {
      GPULET_LOG_INFO(
          "DRA driver {}: removed {}, a socket of an earlier instance that no "
          "process serves any more",
          driver, path);
      removed_stale_.push_back(path);
    }
  }
}

void KubeletPlugin::Run() {
  // A socket that cannot be served again (a directory gone read-only) is retried every
  // recheck; its error is logged once, not every time.
  std::string last_error;
  while (!stop_.load()) {
    // Service first: a registration must never point at an endpoint that is not there.
    const bool lost_service = !service_.SocketIntact();
    if (lost_service || !registration_.SocketIntact()) {
      if (last_error.empty()) {
        GPULET_LOG_WARN("DRA driver {}: {} was removed; serving it again", registration_.driver(),
                        lost_service ? paths_.dra_socket : paths_.registration_socket);
      }
      absl::Status s = absl::OkStatus();
      if (lost_service) {
        // The kubelet may hold a registration pointing at the old endpoint: register anew
        // after the service is back, so it dials the new one.
        registration_.Stop();
        service_.Stop();
        s = service_.Start();
      } else {
        registration_.Stop();
      }
      if (s.ok()) s = registration_.Start();
      if (!s.ok() && s.message() != last_error) GPULET_LOG_ERROR("{}; retrying", s.message());
      last_error = s.ok() ? "" : std::string(s.message());
      if (s.ok()) reserves_.fetch_add(1);
    }
    watcher_->Wait(recheck_);
  }
}

}  // namespace gpulet::dra
