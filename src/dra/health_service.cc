#include "dra/health_service.h"

#include <atomic>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "dra/resource_slices.h"
#include "grpcpp/grpcpp.h"
#include "proto/drahealth/v1alpha1/api.grpc.pb.h"

namespace gpulet::dra {
namespace {

namespace pb = ::v1alpha1;

// How long a stream waits for a store change before it checks for a cancelled call, a
// shutdown and the refresh (the store's wait cannot be woken by them); bounds how long
// Shutdown waits for the streams to end.
constexpr absl::Duration kHealthWatchWait = absl::Milliseconds(100);

pb::HealthStatus ToProto(DeviceHealthStatus s) {
  switch (s) {
    case DeviceHealthStatus::kHealthy:
      return pb::HEALTHY;
    case DeviceHealthStatus::kUnhealthy:
      return pb::UNHEALTHY;
    case DeviceHealthStatus::kUnknown:
      break;
  }
  return pb::UNKNOWN;
}

DeviceHealthStatus Of(bool healthy) {
  return healthy ? DeviceHealthStatus::kHealthy : DeviceHealthStatus::kUnhealthy;
}

}  // namespace

std::vector<DeviceHealthEntry> DeviceHealthList(const state::Snapshot& snap) {
  std::vector<DeviceHealthEntry> list;
  for (const state::DeviceRecord& d : snap.devices) {
    const gpu::Gpu& g = d.gpu;
    if (!g.index || g.uuid.empty()) continue;  // not published (resource_slices.h)
    if (!g.mig_enabled) {
      list.push_back({GpuDeviceName(g), snap.nvml_ok
                                            ? Of(d.health.state != state::HealthState::kUnhealthy)
                                            : DeviceHealthStatus::kUnknown});
      continue;
    }
    for (const gpu::MigDeviceInfo& m : g.mig_devices) {
      list.push_back({MigDeviceName(g, m), snap.nvml_ok ? Of(d.MigHealthy(m.gpu_instance_id))
                                                        : DeviceHealthStatus::kUnknown});
    }
  }
  return list;
}

class HealthService::Impl final : public pb::DRAResourceHealth::Service {
 public:
  Impl(const state::DeviceStore* store, Options options)
      : store_(store), options_(std::move(options)) {}

  grpc::Status NodeWatchResources(
      grpc::ServerContext* context, const pb::NodeWatchResourcesRequest*,
      grpc::ServerWriter<pb::NodeWatchResourcesResponse>* writer) override {
    {
      absl::MutexLock lock(&mu_);
      ++streams_;
    }
    uint64_t seen = 0;
    bool first = true;
    std::vector<DeviceHealthEntry> sent;
    absl::Time sent_at = absl::InfinitePast();
    while (!shutdown_.load() && !context->IsCancelled()) {
      std::shared_ptr<const state::Snapshot> snap =
          first ? store_->Get() : store_->WaitForChange(seen, kHealthWatchWait);
      if (shutdown_.load() || context->IsCancelled() || (!first && store_->shut_down())) break;
      seen = snap->version;
      std::vector<DeviceHealthEntry> list = DeviceHealthList(*snap);
      const absl::Time now = absl::Now();
      if (!first && list == sent && now - sent_at < options_.refresh) continue;
      // "When the driver last determined this health": now, since every report is a fresh
      // verdict from the current snapshot, and the kubelet ages reports by this time.
      pb::NodeWatchResourcesResponse response;
      for (const DeviceHealthEntry& e : list) {
        pb::DeviceHealth* h = response.add_devices();
        h->mutable_device()->set_pool_name(options_.pool);
        h->mutable_device()->set_device_name(e.device);
        h->set_health(ToProto(e.status));
        h->set_last_updated_time(absl::ToUnixSeconds(now));
      }
      if (!writer->Write(response)) break;  // the kubelet went away
      sent = std::move(list);
      sent_at = now;
      first = false;
    }
    absl::MutexLock lock(&mu_);
    --streams_;
    return grpc::Status::OK;
  }

  void Shutdown() { shutdown_.store(true); }
  int streams() const {
    absl::MutexLock lock(&mu_);
    return streams_;
  }

 private:
  const state::DeviceStore* const store_;
  const Options options_;
  std::atomic<bool> shutdown_{false};
  mutable absl::Mutex mu_;
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
};

HealthService::HealthService(const state::DeviceStore* store, Options options)
    : impl_(std::make_unique<Impl>(store, std::move(options))) {}

HealthService::~HealthService() = default;

grpc::Service* HealthService::service() { return impl_.get(); }

void HealthService::Shutdown() { impl_->Shutdown(); }

int HealthService::streams() const { return impl_->streams(); }

}  // namespace gpulet::dra
