#include "testing/fake_pod_resources.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/podresources/v1/api.grpc.pb.h"

namespace gpulet::testing {

class FakePodResources::Service final : public v1::PodResourcesLister::Service {
 public:
  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* resp) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    *resp = response_;
    return grpc::Status::OK;
  }

  void Set(const v1::ListPodResourcesResponse& r) {
    absl::MutexLock lock(&mu_);
    response_ = r;
  }
  int calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  mutable absl::Mutex mu_;
  v1::ListPodResourcesResponse response_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

struct FakePodResources::ServerHolder {
  std::unique_ptr<grpc::Server> server;
};

FakePodResources::FakePodResources(std::string socket_path)
    : socket_path_(std::move(socket_path)), service_(std::make_unique<Service>()) {}

FakePodResources::~FakePodResources() { Stop(); }

absl::Status FakePodResources::Start() {
  Stop();
  unlink(socket_path_.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix://", socket_path_),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  auto holder = std::make_unique<ServerHolder>();
  holder->server = builder.BuildAndStart();
  if (!holder->server) {
    return absl::UnavailableError(absl::StrCat("cannot serve PodResources on ", socket_path_));
  }
  server_ = std::move(holder);
  return absl::OkStatus();
}

void FakePodResources::Stop() {
  if (!server_) return;
  server_->server->Shutdown();
  server_.reset();
  unlink(socket_path_.c_str());
}

void FakePodResources::SetResponse(const v1::ListPodResourcesResponse& response) {
  service_->Set(response);
}

int FakePodResources::list_calls() const { return service_->calls(); }

void FakePodResources::AddContainer(v1::ListPodResourcesResponse* response, const std::string& ns,
                                    const std::string& pod, const std::string& container,
                                    const std::string& resource,
                                    const std::vector<std::string>& device_ids) {
  v1::PodResources* p = nullptr;
  for (v1::PodResources& existing : *response->mutable_pod_resources()) {
    if (existing.namespace_() == ns && existing.name() == pod) p = &existing;
  }
  if (p == nullptr) {
    p = response->add_pod_resources();
    p->set_namespace_(ns);
    p->set_name(pod);
  }
  v1::ContainerResources* c = p->add_containers();
  c->set_name(container);
  v1::ContainerDevices* d = c->add_devices();
  d->set_resource_name(resource);
  for (const std::string& id : device_ids) d->add_device_ids(id);
}

}  // namespace gpulet::testing
