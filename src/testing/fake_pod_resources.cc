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

namespace {

v1::PodResources* FindOrAddPod(v1::ListPodResourcesResponse* response, const std::string& ns,
                               const std::string& pod) {
  for (v1::PodResources& existing : *response->mutable_pod_resources()) {
    if (existing.namespace_() == ns && existing.name() == pod) return &existing;
  }
  v1::PodResources* p = response->add_pod_resources();
  p->set_namespace_(ns);
  p->set_name(pod);
  return p;
}

}  // namespace

void FakePodResources::AddContainer(v1::ListPodResourcesResponse* response, const std::string& ns,
                                    const std::string& pod, const std::string& container,
                                    const std::string& resource,
                                    const std::vector<std::string>& device_ids) {
  v1::PodResources* p = FindOrAddPod(response, ns, pod);
  v1::ContainerResources* c = p->add_containers();
  c->set_name(container);
  v1::ContainerDevices* d = c->add_devices();
  d->set_resource_name(resource);
  for (const std::string& id : device_ids) d->add_device_ids(id);
}

void FakePodResources::AddClaim(v1::ListPodResourcesResponse* response, const std::string& ns,
                                const std::string& pod, const std::string& container,
                                const std::string& claim, const std::vector<ClaimDevice>& devices) {
  v1::PodResources* p = FindOrAddPod(response, ns, pod);
  v1::ContainerResources* c = nullptr;
  for (v1::ContainerResources& existing : *p->mutable_containers()) {
    if (existing.name() == container) c = &existing;
  }
  if (c == nullptr) {
    c = p->add_containers();
    c->set_name(container);
  }
  v1::DynamicResource* r = c->add_dynamic_resources();
  r->set_claim_name(claim);
  r->set_claim_namespace(ns);
  for (const ClaimDevice& d : devices) {
    v1::ClaimResource* cr = r->add_claim_resources();
    cr->set_driver_name(d.driver);
    cr->set_pool_name(d.pool);
    cr->set_device_name(d.device);
    if (!d.share_id.empty()) cr->set_share_id(d.share_id);
    for (const std::string& name : d.cdi_devices) cr->add_cdi_devices()->set_name(name);
  }
}

}  // namespace gpulet::testing
