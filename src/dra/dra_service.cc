#include "dra/dra_service.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "dra/registration.h"
#include "grpcpp/grpcpp.h"
#include "proto/dra/v1/api.grpc.pb.h"
#include "proto/dra/v1beta1/api.grpc.pb.h"

namespace gpulet::dra {
namespace {

namespace v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace v1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

// The two versions' messages differ only in Device.share_id, so one template serves both.
template <typename Request>
std::vector<ClaimRef> Refs(const Request& req) {
  std::vector<ClaimRef> refs;
  refs.reserve(req.claims_size());
  for (const auto& c : req.claims()) {
    refs.push_back(ClaimRef{.ns = c.namespace_(), .uid = c.uid(), .name = c.name()});
  }
  return refs;
}

template <typename Response>
void FillPrepare(const std::map<std::string, PrepareResult>& results, Response* out) {
  for (const auto& [uid, r] : results) {
    auto& entry = (*out->mutable_claims())[uid];
    if (!r.error.empty()) {
      entry.set_error(r.error);
      continue;
    }
    for (const PreparedDevice& d : r.devices) {
      auto* dev = entry.add_devices();
      for (const std::string& n : d.request_names) dev->add_request_names(n);
      dev->set_pool_name(d.pool);
      dev->set_device_name(d.device);
      for (const std::string& id : d.cdi_device_ids) dev->add_cdi_device_ids(id);
      if constexpr (requires { dev->set_share_id(d.share_id); }) {
        if (!d.share_id.empty()) dev->set_share_id(d.share_id);
      }
    }
  }
}

template <typename Response>
void FillUnprepare(const std::map<std::string, std::string>& errors, Response* out) {
  for (const auto& [uid, error] : errors) {
    auto& entry = (*out->mutable_claims())[uid];  // present even when empty, as required
    if (!error.empty()) entry.set_error(error);
  }
}

}  // namespace

class DraPluginServer::V1Service final : public v1::DRAPlugin::Service {
 public:
  V1Service(PreparedClaims* claims, CallClock* clock) : claims_(claims), clock_(clock) {}

  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const v1::NodePrepareResourcesRequest* req,
                                    v1::NodePrepareResourcesResponse* out) override {
    clock_->Arrived();
    FillPrepare(claims_->Prepare(Refs(*req)), out);
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                      const v1::NodeUnprepareResourcesRequest* req,
                                      v1::NodeUnprepareResourcesResponse* out) override {
    clock_->Arrived();
    FillUnprepare(claims_->Unprepare(Refs(*req)), out);
    return grpc::Status::OK;
  }

 private:
  PreparedClaims* claims_;
  CallClock* clock_;
};

class DraPluginServer::V1beta1Service final : public v1beta1::DRAPlugin::Service {
 public:
  V1beta1Service(PreparedClaims* claims, CallClock* clock) : claims_(claims), clock_(clock) {}

  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const v1beta1::NodePrepareResourcesRequest* req,
                                    v1beta1::NodePrepareResourcesResponse* out) override {
    clock_->Arrived();
    FillPrepare(claims_->Prepare(Refs(*req)), out);
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                      const v1beta1::NodeUnprepareResourcesRequest* req,
                                      v1beta1::NodeUnprepareResourcesResponse* out) override {
    clock_->Arrived();
    FillUnprepare(claims_->Unprepare(Refs(*req)), out);
    return grpc::Status::OK;
  }

 private:
  PreparedClaims* claims_;
  CallClock* clock_;
};

DraPluginServer::DraPluginServer(std::string socket_path, PreparedClaims* claims)
    : claims_(claims), server_(std::move(socket_path), "DRA service", "plugins") {}

DraPluginServer::~DraPluginServer() { Stop(); }

void DraPluginServer::SetHealthSource(const state::DeviceStore* store,
                                      HealthService::Options options) {
  health_store_ = store;
  health_options_ = std::move(options);
}

absl::Status DraPluginServer::Start() {
  if (server_.running()) return absl::OkStatus();
  v1_ = std::make_unique<V1Service>(claims_, &clock_);
  v1beta1_ = std::make_unique<V1beta1Service>(claims_, &clock_);
  std::vector<grpc::Service*> services = {v1_.get(), v1beta1_.get()};
  if (health_store_ != nullptr) {
    health_ = std::make_unique<HealthService>(health_store_, health_options_);
    services.push_back(health_->service());
  }
  absl::Status s = server_.Start(services);
  if (!s.ok()) {
    v1_.reset();
    v1beta1_.reset();
    health_.reset();
  }
  return s;
}

void DraPluginServer::CallClock::Arrived() {
  last_ns.store(absl::ToInt64Nanoseconds(RealClock()->Monotonic().SinceOrigin()));
  calls.fetch_add(1);
}

int DraPluginServer::Drain(absl::Duration quiet, absl::Duration at_most) {
  if (!server_.running()) return 0;
  const int calls_before = clock_.calls.load();
  const MonoTime start = RealClock()->Monotonic();
  const MonoTime end = start + at_most;
  for (;;) {
    // Quiet since the drain began or since the last call arrived, whichever came later.
    const MonoTime last = MonoTime::FromOrigin(absl::Nanoseconds(clock_.last_ns.load()));
    const MonoTime until = std::min(std::max(start, last) + quiet, end);
    const MonoTime now = RealClock()->Monotonic();
    if (now >= until) break;
    absl::SleepFor(until - now);
  }
  return clock_.calls.load() - calls_before;
}

void DraPluginServer::Stop() {
  // The health streams never end by themselves: end them first, or the server's shutdown
  // would wait its whole grace period for them.
  if (health_ != nullptr) health_->Shutdown();
  server_.Stop();  // in-flight calls finish before the services go
  v1_.reset();
  v1beta1_.reset();
  health_.reset();
}

}  // namespace gpulet::dra
