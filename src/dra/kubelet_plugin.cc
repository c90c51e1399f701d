#include "dra/kubelet_plugin.h"

#include <utility>

#include "common/log.h"
#include "common/periodic_worker.h"

namespace gpulet::dra {

KubeletPlugin::KubeletPlugin(std::string driver, std::string kubelet_dir, PreparedClaims* claims,
                             absl::Duration recheck)
    : paths_(DraPaths::For(kubelet_dir, driver)),
      recheck_(recheck),
      service_(paths_.dra_socket, claims),
      registration_(driver, paths_.registration_socket, paths_.dra_socket) {}

KubeletPlugin::~KubeletPlugin() { Stop(); }

absl::Status KubeletPlugin::Start() {
  if (thread_.joinable()) return absl::OkStatus();
  absl::Status s = CheckDriverName(registration_.driver());
  if (!s.ok()) return s;
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
  registration_.Stop();  // the kubelet deregisters before the service goes
  service_.Stop();
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
