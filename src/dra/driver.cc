#include "dra/driver.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/keyed_status.h"
#include "common/log.h"
#include "dra/registration.h"

namespace gpulet::dra {
namespace {

ClaimPreparerOptions PreparerOptions(const DraDriverOptions& o) {
  ClaimPreparerOptions p = o.preparer;
  p.driver = o.slices.driver;
  p.node_name = o.slices.node_name;
  return p;
}

}  // namespace

DraDriver::DraDriver(DraDriverOptions options, kube::KubeClient* client,
                     const state::DeviceStore* store, std::function<gpu::Inventory()> inventory,
                     const HostFs* host, const Clock* clock)
    : options_(std::move(options)),
      client_(client),
      store_(store),
      clock_(clock),
      preparer_(client, std::move(inventory), host, PreparerOptions(options_)) {}

DraDriver::~DraDriver() { Stop(); }

absl::Status DraDriver::Start() {
  // /var/lib/gpulet exists where the DaemonSet mounts it; elsewhere (a first start outside a
  // pod) the directory is made, as the sockets' are.
  if (size_t slash = options_.checkpoint_path.rfind('/');
      slash != 0 && slash != std::string::npos) {
    if (absl::Status s = MakeDirs(options_.checkpoint_path.substr(0, slash)); !s.ok()) {
      return AtKey("dra.checkpointFile", s);
    }
  }
  absl::StatusOr<std::unique_ptr<PreparedClaims>> claims =
      PreparedClaims::Open(options_.checkpoint_path, &preparer_);
  if (!claims.ok()) {
    return AtKey("dra.checkpointFile", claims.status());
  }
  claims_ = std::move(*claims);
  SlicePublisherOptions po;
  po.slices = options_.slices;
  publisher_ = std::make_unique<SlicePublisher>(client_, store_, po, clock_);
  absl::Status s = publisher_->Start();
  if (s.ok()) {
    plugin_ = std::make_unique<KubeletPlugin>(options_.slices.driver, options_.kubelet_dir,
                                              claims_.get(), absl::Seconds(1), options_.instance);
    HealthService::Options health;
    health.pool = options_.slices.node_name;
    plugin_->SetHealthSource(store_, std::move(health));
    s = plugin_->Start();
  }
  if (!s.ok()) {
    Stop();
    return s;
  }
  GPULET_LOG_INFO("DRA driver {} serving on {} ({} claims prepared before)", options_.slices.driver,
                  plugin_->paths().dra_socket, claims_->prepared().size());
  return absl::OkStatus();
}

void DraDriver::Stop() {
  if (plugin_ != nullptr) plugin_->Stop();
  plugin_.reset();
  if (publisher_ != nullptr) publisher_->Stop();
  publisher_.reset();
  claims_.reset();
}

}  // namespace gpulet::dra
