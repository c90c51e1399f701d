#include "testing/fake_dra_kubelet.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/periodic_worker.h"
#include "grpcpp/grpcpp.h"
#include "proto/dra/v1/api.grpc.pb.h"
#include "proto/dra/v1beta1/api.grpc.pb.h"
#include "proto/drahealth/v1alpha1/api.grpc.pb.h"
#include "proto/pluginregistration/v1/api.grpc.pb.h"

namespace gpulet::testing {
namespace {

namespace drabeta = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

std::chrono::system_clock::time_point Deadline(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

// A channel of its own each time, as the kubelet dials each plugin afresh: gRPC otherwise
// shares connections per address across channels, and one failed attempt on a socket that
// was not serving yet would hold every later channel in its reconnect backoff (1 s and more).
std::shared_ptr<grpc::Channel> Dial(const std::string& socket) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(absl::StrCat("unix://", socket),
                                   grpc::InsecureChannelCredentials(), args);
}

FakeDraKubelet::Stamp StampOf(const struct stat& st) {
  return {.inode = st.st_ino, .mtime_ns = st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec};
}

// v1beta1's messages are v1's without Device.share_id: the same bytes on the wire.
template <typename To, typename From>
To Convert(const From& from) {
  To to;
  to.ParseFromString(from.SerializeAsString());
  return to;
}

}  // namespace

FakeDraKubelet::FakeDraKubelet(std::string kubelet_dir)
    : registry_dir_(std::move(kubelet_dir) + "/plugins_registry") {}

FakeDraKubelet::~FakeDraKubelet() { Stop(); }

void FakeDraKubelet::set_versions(std::vector<std::string> versions) {
  absl::MutexLock lock(&mu_);
  versions_ = std::move(versions);
}

absl::Status FakeDraKubelet::Start() {
  if (thread_.joinable()) return absl::OkStatus();
  if (mkdir(registry_dir_.c_str(), 0750) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("fake DRA kubelet: cannot create ", registry_dir_));
  }
  stop_.store(false);
  watcher_ = std::make_unique<DirWatcher>(registry_dir_);
  thread_ = StartNamedThread("fake-dra-kubelet", [this] { Run(); });
  return absl::OkStatus();
}

void FakeDraKubelet::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  watcher_->Wake();
  thread_.join();
  watcher_.reset();
  known_.clear();
  absl::MutexLock lock(&mu_);
  plugins_.clear();
}

absl::Status FakeDraKubelet::Restart() {
  Stop();
  return Start();
}

void FakeDraKubelet::Run() {
  while (!stop_.load()) {
    Scan();
    watcher_->Wait(absl::Milliseconds(50));
  }
}

void FakeDraKubelet::Scan() {
  std::map<std::string, Stamp> present;
  if (DIR* d = opendir(registry_dir_.c_str())) {
    while (struct dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.empty() || name[0] == '.' || !absl::EndsWith(name, ".sock")) continue;
      std::string path = absl::StrCat(registry_dir_, "/", name);
      struct stat st;
      if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
        present[path] = StampOf(st);
      }
    }
    closedir(d);
  }
  // Gone, or replaced by another socket: deregister.
  for (auto it = known_.begin(); it != known_.end();) {
    auto now = present.find(it->first);
    if (now != present.end() && now->second == it->second.stamp) {
      ++it;
      continue;
    }
    {
      // Only the instance registered from this socket; the driver's others stay.
      absl::MutexLock lock(&mu_);
      auto p = plugins_.find(it->second.driver);
      if (p != plugins_.end()) {
        std::erase_if(p->second, [&](const Plugin& i) { return i.socket == it->first; });
        if (p->second.empty()) plugins_.erase(p);
      }
    }
    it = known_.erase(it);
  }
  for (const auto& [path, stamp] : present) {
    if (known_.contains(path) || stop_.load()) continue;
    std::string driver = Register(path, stamp);
    // A socket that did not answer yet (bound, not yet serving) is tried again next scan.
    if (!driver.empty()) known_[path] = Known{.stamp = stamp, .driver = driver};
  }
}

std::string FakeDraKubelet::Register(const std::string& socket, const Stamp& stamp) {
  auto stub = pluginregistration::Registration::NewStub(Dial(socket));
  pluginregistration::PluginInfo info;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(absl::Seconds(1)));
    if (!stub->GetInfo(&ctx, pluginregistration::InfoRequest(), &info).ok()) return "";
  }
  // The socket replaced while we asked (a plugin restarting): the answer may be the new
  // instance's, which the next scan registers under its own stamp.
  struct stat st;
  if (lstat(socket.c_str(), &st) != 0 || !(StampOf(st) == stamp)) return "";
  std::vector<std::string> speaks;
  {
    absl::MutexLock lock(&mu_);
    speaks = versions_;
  }
  Plugin plugin;
  plugin.socket = socket;
  plugin.info = info;
  std::string error;
  if (info.type() != "DRAPlugin") {
    error = absl::StrCat("no handler registered for plugin type: ", info.type());
  } else if (info.name().empty()) {
    error = "the DRA plugin's name is empty";
  } else if (info.endpoint().empty()) {
    error = absl::StrCat("DRA plugin ", info.name(), " names no endpoint");
  } else {
    for (const std::string& v : speaks) {
      for (const std::string& offered : info.supported_versions()) {
        if (plugin.version.empty() && offered == v + ".DRAPlugin") plugin.version = v;
      }
    }
    if (plugin.version.empty()) {
      error =
          absl::StrCat("DRA plugin ", info.name(), " supports none of this kubelet's versions (",
                       absl::StrJoin(info.supported_versions(), ", "), " offered; ",
                       absl::StrJoin(speaks, ".DRAPlugin, "), ".DRAPlugin known)");
    } else if (!Dial(info.endpoint())->WaitForConnected(Deadline(absl::Seconds(1)))) {
      error = absl::StrCat("cannot connect to DRA plugin ", info.name(), " at ", info.endpoint());
    }
  }
  if (!error.empty()) plugin.version.clear();
  plugin.registered = error.empty();
  plugin.error = error;
  pluginregistration::RegistrationStatus status;
  status.set_plugin_registered(plugin.registered);
  status.set_error(error);
  pluginregistration::RegistrationStatusResponse ignored;
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(absl::Seconds(1)));
  stub->NotifyRegistrationStatus(&ctx, status, &ignored);
  std::string driver = info.name().empty() ? socket : info.name();
  absl::MutexLock lock(&mu_);
  ++attempts_;
  if (plugin.registered) ++registrations_;
  // The newest registration of an instance goes last: it is the one in use.
  std::vector<Plugin>& instances = plugins_[driver];
  std::erase_if(instances, [&](const Plugin& i) { return i.socket == socket; });
  instances.push_back(std::move(plugin));
  return driver;
}

const FakeDraKubelet::Plugin* FakeDraKubelet::InUse(const std::string& driver) const {
  auto p = plugins_.find(driver);
  if (p == plugins_.end() || p->second.empty()) return nullptr;
  for (auto i = p->second.rbegin(); i != p->second.rend(); ++i) {
    if (i->registered) return &*i;
  }
  return &p->second.back();
}

std::optional<FakeDraKubelet::Plugin> FakeDraKubelet::plugin(const std::string& driver) const {
  absl::MutexLock lock(&mu_);
  const Plugin* p = InUse(driver);
  if (p == nullptr) return std::nullopt;
  return *p;
}

std::vector<FakeDraKubelet::Plugin> FakeDraKubelet::instances(const std::string& driver) const {
  absl::MutexLock lock(&mu_);
  auto p = plugins_.find(driver);
  return p == plugins_.end() ? std::vector<Plugin>{} : p->second;
}

bool FakeDraKubelet::WaitForInUse(const std::string& driver, const std::string& socket,
                                  absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, &driver, &socket]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    const Plugin* p = InUse(driver);
    return p != nullptr && p->registered && p->socket == socket;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

int FakeDraKubelet::attempts() const {
  absl::MutexLock lock(&mu_);
  return attempts_;
}

int FakeDraKubelet::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

bool FakeDraKubelet::WaitForRegistrations(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return registrations_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

bool FakeDraKubelet::WaitForAttempts(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return attempts_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

bool FakeDraKubelet::WaitForDeregistered(const std::string& driver, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, &driver]()
                  ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !plugins_.contains(driver); };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

drapb::Claim FakeDraKubelet::MakeClaim(const std::string& ns, const std::string& uid,
                                       const std::string& name) {
  drapb::Claim c;
  c.set_namespace_(ns);
  c.set_uid(uid);
  c.set_name(name);
  return c;
}

absl::StatusOr<drapb::NodePrepareResourcesResponse> FakeDraKubelet::Prepare(
    const std::string& driver, const std::vector<drapb::Claim>& claims, absl::Duration timeout) {
  std::optional<Plugin> p = plugin(driver);
  if (!p || !p->registered) {
    return absl::FailedPreconditionError(absl::StrCat("DRA driver ", driver, " is not registered"));
  }
  return PrepareOn(*p, claims, timeout);
}

absl::StatusOr<drapb::NodePrepareResourcesResponse> FakeDraKubelet::PrepareOn(
    const Plugin& instance, const std::vector<drapb::Claim>& claims, absl::Duration timeout) {
  drapb::NodePrepareResourcesRequest req;
  for (const drapb::Claim& c : claims) *req.add_claims() = c;
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(timeout));
  grpc::Status s;
  drapb::NodePrepareResourcesResponse out;
  if (instance.version == "v1") {
    s = drapb::DRAPlugin::NewStub(Dial(instance.info.endpoint()))
            ->NodePrepareResources(&ctx, req, &out);
  } else {
    drabeta::NodePrepareResourcesResponse beta;
    s = drabeta::DRAPlugin::NewStub(Dial(instance.info.endpoint()))
            ->NodePrepareResources(&ctx, Convert<drabeta::NodePrepareResourcesRequest>(req), &beta);
    out = Convert<drapb::NodePrepareResourcesResponse>(beta);
  }
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("NodePrepareResources (", instance.version, ") on ",
                                               instance.info.endpoint(), ": ", s.error_message()));
  }
  return out;
}

absl::StatusOr<drapb::NodeUnprepareResourcesResponse> FakeDraKubelet::Unprepare(
    const std::string& driver, const std::vector<drapb::Claim>& claims, absl::Duration timeout) {
  std::optional<Plugin> p = plugin(driver);
  if (!p || !p->registered) {
    return absl::FailedPreconditionError(absl::StrCat("DRA driver ", driver, " is not registered"));
  }
  drapb::NodeUnprepareResourcesRequest req;
  for (const drapb::Claim& c : claims) *req.add_claims() = c;
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(timeout));
  grpc::Status s;
  drapb::NodeUnprepareResourcesResponse out;
  if (p->version == "v1") {
    s = drapb::DRAPlugin::NewStub(Dial(p->info.endpoint()))
            ->NodeUnprepareResources(&ctx, req, &out);
  } else {
    drabeta::NodeUnprepareResourcesResponse beta;
    s = drabeta::DRAPlugin::NewStub(Dial(p->info.endpoint()))
            ->NodeUnprepareResources(&ctx, Convert<drabeta::NodeUnprepareResourcesRequest>(req),
                                     &beta);
    out = Convert<drapb::NodeUnprepareResourcesResponse>(beta);
  }
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("NodeUnprepareResources (", p->version, ") on ",
                                               p->info.endpoint(), ": ", s.error_message()));
  }
  return out;
}

absl::Status FakeDraKubelet::WatchHealth(
    const std::string& driver,
    const std::function<bool(const ::v1alpha1::NodeWatchResourcesResponse&)>& on_message,
    absl::Duration timeout) {
  std::optional<Plugin> p = plugin(driver);
  if (!p || !p->registered) {
    return absl::FailedPreconditionError(absl::StrCat("DRA driver ", driver, " is not registered"));
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(timeout));
  std::unique_ptr<grpc::ClientReader<::v1alpha1::NodeWatchResourcesResponse>> reader =
      ::v1alpha1::DRAResourceHealth::NewStub(Dial(p->info.endpoint()))
          ->NodeWatchResources(&ctx, ::v1alpha1::NodeWatchResourcesRequest());
  ::v1alpha1::NodeWatchResourcesResponse message;
  bool stopped = false;
  while (reader->Read(&message)) {
    if (!on_message(message)) {
      stopped = true;
      ctx.TryCancel();
      break;
    }
  }
  grpc::Status s = reader->Finish();
  if (stopped) return absl::OkStatus();
  const std::string what = absl::StrCat("NodeWatchResources on ", p->info.endpoint());
  switch (s.error_code()) {
    case grpc::StatusCode::OK:
      return absl::OutOfRangeError(absl::StrCat(what, ": the driver ended the stream"));
    case grpc::StatusCode::UNIMPLEMENTED:
      return absl::UnimplementedError(absl::StrCat(what, ": ", s.error_message()));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(absl::StrCat(what, ": ", s.error_message()));
    default:
      return absl::UnavailableError(absl::StrCat(what, ": ", s.error_message()));
  }
}

}  // namespace gpulet::testing
