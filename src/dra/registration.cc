#include "dra/registration.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "grpcpp/grpcpp.h"
#include "proto/pluginregistration/v1/api.grpc.pb.h"

namespace gpulet::dra {

DraPaths DraPaths::For(const std::string& kubelet_dir, const std::string& driver) {
  DraPaths p;
  p.registry_dir = absl::StrCat(kubelet_dir, "/plugins_registry");
  p.registration_socket = absl::StrCat(p.registry_dir, "/", driver, "-reg.sock");
  p.plugin_dir = absl::StrCat(kubelet_dir, "/plugins/", driver);
  p.dra_socket = absl::StrCat(p.plugin_dir, "/dra.sock");
  return p;
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
  bool ok = !driver.empty() && driver.size() <= 63;
  bool label_start = true;  // at the start of a dot-separated label
  for (size_t i = 0; ok && i < driver.size(); ++i) {
    const char c = driver[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    const bool label_end = i + 1 == driver.size() || driver[i + 1] == '.';
    if (c == '.') {
      ok = !label_start;
      label_start = true;
      continue;
    }
    ok = alnum || (c == '-' && !label_start && !label_end);
    label_start = false;
  }
  ok = ok && !label_start;
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
      socket_path_(std::move(socket_path)),
      endpoint_(std::move(endpoint)),
      versions_(std::move(versions)) {}

RegistrationServer::~RegistrationServer() { Stop(); }

absl::Status RegistrationServer::Start() {
  if (running()) return absl::OkStatus();
  absl::Status s = CheckSocketPath(socket_path_, "DRA registration");
  if (!s.ok()) return s;
  size_t slash = socket_path_.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    s = MakeDirs(socket_path_.substr(0, slash));
    if (!s.ok()) return s;
  }
  unlink(socket_path_.c_str());  // a stale socket from an earlier run would make bind fail
  {
    // Before serving: the kubelet may answer as soon as the socket exists.
    absl::MutexLock lock(&mu_);
    verdict_ = Verdict{};
  }
  service_ = std::make_unique<Service>(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix://", socket_path_),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    service_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot serve DRA plugin registration for ", driver_, " on ", socket_path_,
                     ": check that the directory is writable (mount the kubelet's plugins_registry "
                     "directory into the gpulet pod)"));
  }
  // Only root (the kubelet) talks to this socket.
  chmod(socket_path_.c_str(), 0600);
  struct stat st;
  absl::MutexLock lock(&mu_);
  server_ = std::move(server);
  socket_inode_ = stat(socket_path_.c_str(), &st) == 0 ? st.st_ino : 0;
  return absl::OkStatus();
}

void RegistrationServer::Stop() {
  std::unique_ptr<grpc::Server> server;
  ino_t inode = 0;
  {
    absl::MutexLock lock(&mu_);
    server = std::move(server_);
    inode = std::exchange(socket_inode_, 0);
  }
  if (!server) return;
  // Outside the lock: in-flight RPCs finish first, and they take it.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  server.reset();
  service_.reset();
  // Remove the socket only if it is still ours: a new gpulet taking over (rolling update)
  // may have put its own there already.
  struct stat st;
  if (stat(socket_path_.c_str(), &st) == 0 && st.st_ino == inode) unlink(socket_path_.c_str());
}

bool RegistrationServer::running() const {
  absl::MutexLock lock(&mu_);
  return server_ != nullptr;
}

bool RegistrationServer::SocketIntact() const {
  absl::MutexLock lock(&mu_);
  struct stat st;
  return server_ != nullptr && stat(socket_path_.c_str(), &st) == 0 && st.st_ino == socket_inode_ &&
         S_ISSOCK(st.st_mode);
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
                     socket_path_, error.empty() ? "no reason given" : error);
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
