#include "dra/registration.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/k8s_names.h"
#include "common/log.h"
#include "grpcpp/grpcpp.h"
#include "proto/pluginregistration/v1/api.grpc.pb.h"

namespace gpulet::dra {

DraPaths DraPaths::For(const std::string& kubelet_dir, const std::string& driver,
                       const std::string& instance) {
  const std::string suffix = instance.empty() ? "" : absl::StrCat("-", instance);
  DraPaths p;
  p.registry_dir = absl::StrCat(kubelet_dir, "/plugins_registry");
  p.registration_socket = absl::StrCat(p.registry_dir, "/", driver, suffix, "-reg.sock");
  p.plugin_dir = absl::StrCat(kubelet_dir, "/plugins/", driver);
  p.dra_socket = absl::StrCat(p.plugin_dir, "/dra", suffix, ".sock");
  return p;
}

absl::Status CheckInstanceName(const std::string& instance) {
  if (instance.empty() || IsPodUid(instance)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the instance name \"", instance,
      "\" is not a pod UID (a lower-case UUID such as 0b6c2f7e-6d3c-4a8e-9a55-2f1e4b7c9d10): "
      "pass the pod's metadata.uid through the downward API"));
}

bool IsPodUid(const std::string& s) {
  // 8-4-4-4-12 lower-case hex digits, as the API server generates metadata.uid.
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

std::vector<std::string> DraSupportedVersions() { return {"v1.DRAPlugin", "v1beta1.DRAPlugin"}; }

absl::Status CheckSocketPath(const std::string& path, const std::string& what) {
  if (path.size() > kMaxUnixSocketPath) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " socket path ", path, " is ", path.size(),
                     " bytes; unix sockets allow at most ", kMaxUnixSocketPath,
                     ". Use a shorter --kubelet-dir or driver name"));
  }
  return absl::OkStatus();
}

absl::Status CheckDriverName(const std::string& driver) {
  const bool ok = IsDnsSubdomain(driver, 63);
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DRA driver name \"", driver,
        "\" is not a DNS subdomain of at most 63 lower-case letters, digits, '-' and '.' "
        "(e.g. gpu.example.com), as the ResourceSlice API requires"));
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " exists but is not a directory; remove it or fix the kubelet directory"));
  }
  size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    absl::Status parent = MakeDirs(dir.substr(0, slash));
    if (!parent.ok()) return parent;
  }
  if (mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", dir, ": ", strerror(errno),
                     "; mount the kubelet's directory into the gpulet pod read-write"));
  }
  chmod(dir.c_str(), 0750);  // the umask may have taken bits mkdir's mode asked for
  return absl::OkStatus();
}

class RegistrationServer::Service final : public pluginregistration::Registration::Service {
 public:
  explicit Service(RegistrationServer* owner) : owner_(owner) {}

  grpc::Status GetInfo(grpc::ServerContext*, const pluginregistration::InfoRequest*,
                       pluginregistration::PluginInfo* out) override {
    out->set_type(kDraPluginType);
    out->set_name(owner_->driver_);
    out->set_endpoint(owner_->endpoint_);
    for (const std::string& v : owner_->versions_) out->add_supported_versions(v);
    return grpc::Status::OK;
  }

  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*,
                                        const pluginregistration::RegistrationStatus* req,
                                        pluginregistration::RegistrationStatusResponse*) override {
    owner_->OnNotify(req->plugin_registered(), req->error());
    return grpc::Status::OK;
  }

 private:
  RegistrationServer* owner_;
};

RegistrationServer::RegistrationServer(std::string driver, std::string socket_path,
                                       std::string endpoint, std::vector<std::string> versions)
    : driver_(std::move(driver)),
      endpoint_(std::move(endpoint)),
      versions_(std::move(versions)),
      server_(std::move(socket_path), "DRA registration", "plugins_registry") {}

RegistrationServer::~RegistrationServer() { Stop(); }

absl::Status RegistrationServer::Start() {
  if (server_.running()) return absl::OkStatus();
  {
    // Before serving: the kubelet may answer as soon as the socket exists.
    absl::MutexLock lock(&mu_);
    verdict_ = Verdict{};
  }
  service_ = std::make_unique<Service>(this);
  absl::Status s = server_.Start({service_.get()});
  if (!s.ok()) service_.reset();
  return s;
}

void RegistrationServer::Stop() {
  server_.Stop();  // in-flight calls (which take mu_) finish before the service goes
  service_.reset();
}

void RegistrationServer::OnNotify(bool registered, const std::string& error) {
  {
    absl::MutexLock lock(&mu_);
    ++verdict_.notifications;
    verdict_.registered = registered;
    verdict_.error = registered ? "" : error;
  }
  if (registered) {
    GPULET_LOG_INFO("the kubelet registered DRA driver {} (endpoint {})", driver_, endpoint_);
  } else {
    GPULET_LOG_ERROR("the kubelet refused DRA driver {} (registration socket {}): {}", driver_,
                     server_.socket_path(), error.empty() ? "no reason given" : error);
  }
}

RegistrationServer::Verdict RegistrationServer::verdict() const {
  absl::MutexLock lock(&mu_);
  return verdict_;
}

bool RegistrationServer::WaitForNotifications(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto arrived = [this, n]()
                     ABSL_SHARED_LOCKS_REQUIRED(mu_) { return verdict_.notifications >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout);
}

}  // namespace gpulet::dra
