#include "testing/fake_kubelet.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"

namespace gpulet::testing {

// One registered plugin: a channel to its socket and the ListAndWatch reader.
struct FakeKubelet::Endpoint {
  std::string resource;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
  grpc::ClientContext stream_ctx;
  std::thread reader;

  ~Endpoint() {
    stream_ctx.TryCancel();
    if (reader.joinable()) reader.join();
  }
};

class FakeKubelet::RegistrationService final : public v1beta1::Registration::Service {
 public:
  explicit RegistrationService(FakeKubelet* owner) : owner_(owner) {}
  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* req,
                        v1beta1::Empty*) override {
    absl::Status s = owner_->OnRegister(*req);
    if (!s.ok()) return grpc::Status(grpc::StatusCode::UNKNOWN, std::string(s.message()));
    return grpc::Status::OK;
  }

 private:
  FakeKubelet* owner_;
};

FakeKubelet::FakeKubelet(std::string dir) : dir_(std::move(dir)) {}

FakeKubelet::~FakeKubelet() { Stop(); }

absl::Status FakeKubelet::Start() {
  mkdir(dir_.c_str(), 0750);
  std::string sock = dir_ + "/kubelet.sock";
  unlink(sock.c_str());
  service_ = std::make_unique<RegistrationService>(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + sock, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_) return absl::UnavailableError("fake kubelet cannot serve " + sock);
  return absl::OkStatus();
}

void FakeKubelet::Stop() {
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints;
  {
    absl::MutexLock lock(&mu_);
    endpoints.swap(endpoints_);
  }
  endpoints.clear();  // cancels and joins the readers
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
  }
  service_.reset();
}

absl::Status FakeKubelet::Restart() {
  Stop();
  // What a starting kubelet does: remove every socket in the directory.
  if (DIR* d = opendir(dir_.c_str())) {
    while (struct dirent* e = readdir(d)) {
      std::string path = dir_ + "/" + e->d_name;
      struct stat st;
      if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path.c_str());
    }
    closedir(d);
  }
  return Start();
}

absl::Status FakeKubelet::OnRegister(const v1beta1::RegisterRequest& req) {
  if (req.version() != "v1beta1") {
    return absl::InvalidArgumentError("unsupported version " + req.version());
  }
  {
    absl::MutexLock lock(&mu_);
    if (refused_.count(req.endpoint())) {
      return absl::FailedPreconditionError("device plugin already connected: " + dir_ + "/" +
                                           req.endpoint());
    }
  }
  auto ep = std::make_shared<Endpoint>();
  ep->resource = req.resource_name();
  ep->channel = grpc::CreateChannel("unix://" + dir_ + "/" + req.endpoint(),
                                    grpc::InsecureChannelCredentials());
  // Like the kubelet: the plugin must already be serving when it registers.
  if (!ep->channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(2))) {
    return absl::UnavailableError("cannot dial plugin endpoint " + req.endpoint());
  }
  ep->stub = v1beta1::DevicePlugin::NewStub(ep->channel);
  Endpoint* raw = ep.get();
  std::string resource = req.resource_name();
  ep->reader = std::thread([this, raw, resource] {
    v1beta1::Empty empty;
    auto reader = raw->stub->ListAndWatch(&raw->stream_ctx, empty);
    v1beta1::ListAndWatchResponse resp;
    while (reader->Read(&resp)) {
      absl::MutexLock lock(&mu_);
      devices_[resource] = resp;
      updated_[resource] = absl::Now();
    }
    reader->Finish().IgnoreError();
  });
  std::shared_ptr<Endpoint> old;
  {
    absl::MutexLock lock(&mu_);
    ++registrations_;
    requests_.push_back(req);
    old = endpoints_[resource];
    endpoints_[resource] = ep;
  }
  return absl::OkStatus();  // `old` is released here, ending its stream
}

void FakeKubelet::RefuseEndpoint(const std::string& endpoint) {
  absl::MutexLock lock(&mu_);
  refused_.insert(endpoint);
}

std::shared_ptr<FakeKubelet::Endpoint> FakeKubelet::FindEndpoint(const std::string& resource) {
  absl::MutexLock lock(&mu_);
  auto it = endpoints_.find(resource);
  return it == endpoints_.end() ? nullptr : it->second;
}

int FakeKubelet::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

std::vector<v1beta1::RegisterRequest> FakeKubelet::requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}

bool FakeKubelet::WaitForDevices(
    const std::string& resource,
    const std::function<bool(const v1beta1::ListAndWatchResponse&)>& pred, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = devices_.find(resource);
    return it != devices_.end() && pred(it->second);
  };
  return mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
}

bool FakeKubelet::WaitForRegistrations(int n, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return registrations_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
}

absl::Time FakeKubelet::last_update(const std::string& resource) const {
  absl::MutexLock lock(&mu_);
  auto it = updated_.find(resource);
  return it == updated_.end() ? absl::InfinitePast() : it->second;
}

absl::StatusOr<v1beta1::AllocateResponse> FakeKubelet::Allocate(
    const std::string& resource, const std::vector<std::string>& ids) {
  std::shared_ptr<Endpoint> ep = FindEndpoint(resource);
  if (!ep) return absl::NotFoundError("no plugin registered for " + resource);
  v1beta1::AllocateRequest req;
  auto* c = req.add_container_requests();
  for (const auto& id : ids) c->add_devices_ids(id);
  v1beta1::AllocateResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status s = ep->stub->Allocate(&ctx, req, &resp);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  }
  return resp;
}

absl::StatusOr<v1beta1::PreferredAllocationResponse> FakeKubelet::GetPreferredAllocation(
    const std::string& resource, const std::vector<std::string>& available,
    const std::vector<std::string>& must_include, int size) {
  std::shared_ptr<Endpoint> ep = FindEndpoint(resource);
  if (!ep) return absl::NotFoundError("no plugin registered for " + resource);
  v1beta1::PreferredAllocationRequest req;
  auto* c = req.add_container_requests();
  for (const auto& id : available) c->add_available_deviceids(id);
  for (const auto& id : must_include) c->add_must_include_deviceids(id);
  c->set_allocation_size(size);
  v1beta1::PreferredAllocationResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status s = ep->stub->GetPreferredAllocation(&ctx, req, &resp);
  if (!s.ok()) return absl::UnknownError(s.error_message());
  return resp;
}

absl::StatusOr<v1beta1::DevicePluginOptions> FakeKubelet::GetOptions(const std::string& resource) {
  std::shared_ptr<Endpoint> ep = FindEndpoint(resource);
  if (!ep) return absl::NotFoundError("no plugin registered for " + resource);
  v1beta1::Empty empty;
  v1beta1::DevicePluginOptions out;
  grpc::ClientContext ctx;
  grpc::Status s = ep->stub->GetDevicePluginOptions(&ctx, empty, &out);
  if (!s.ok()) return absl::UnknownError(s.error_message());
  return out;
}

}  // namespace gpulet::testing
