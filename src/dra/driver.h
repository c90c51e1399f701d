// DraDriver: gpulet's DRA driver as one component of the daemon: the prepared-claims
// checkpoint with the real ClaimPreparer (claim_preparer.h), the kubelet plugin
// (kubelet_plugin.h: registration, the DRA service and the device-health stream) and the
// ResourceSlice publisher (slice_publisher.h).
//
// Start opens the checkpoint first: a checkpoint that cannot be trusted is an error, and
// gpulet does not serve rather than forget a claim that is in use. It then starts the
// publisher (slices can be written before the kubelet knows the driver; the scheduler only
// allocates what a registered driver's node publishes) and serves the kubelet plugin last, so
// that the first NodePrepareResources finds everything ready. Stop withdraws the
// registration first (the kubelet stops sending claims), then the publisher; the slices and
// the checkpoint stay for the next start.
//
// Thread-safety: Start and Stop from one owning thread; the components run their own threads
// ("gpulet-dra", "gpulet-dra-pub") and gRPC's. Everything passed in must outlive the object.
#ifndef GPULET_DRA_DRIVER_H_
#define GPULET_DRA_DRIVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/clock.h"
#include "common/host_fs.h"
#include "dra/claim_preparer.h"
#include "dra/kubelet_plugin.h"
#include "dra/prepared_claims.h"
#include "dra/slice_publisher.h"
#include "gpu/gpu_model.h"
#include "kube/kube_client.h"
#include "state/device_store.h"

namespace gpulet::dra {

struct DraDriverOptions {
  std::string kubelet_dir;        // the kubelet's root directory, as the plugin sees it
  std::string checkpoint_path;    // a local path (the caller resolves --host-root)
  SliceOptions slices;            // driver and node_name name the driver and its pool
  ClaimPreparerOptions preparer;  // driver and node_name are taken from `slices`
  // "" or the pod UID (dra.rollingUpdate): the kubelet plugin's sockets are then unique to
  // this gpulet pod, for rolling updates (kubelet_plugin.h).
  std::string instance;
};

class DraDriver {
 public:
  DraDriver(DraDriverOptions options, kube::KubeClient* client, const state::DeviceStore* store,
            std::function<gpu::Inventory()> inventory, const HostFs* host,
            const Clock* clock = RealClock());
  ~DraDriver();  // Stop()
  DraDriver(const DraDriver&) = delete;
  DraDriver& operator=(const DraDriver&) = delete;

  // Errors name the checkpoint path, the driver name or the socket path and what to do;
  // nothing is left running on error.
  absl::Status Start();
  void Stop();

  const KubeletPlugin* plugin() const { return plugin_.get(); }
  const SlicePublisher* publisher() const { return publisher_.get(); }
  const PreparedClaims* claims() const { return claims_.get(); }

 private:
  const DraDriverOptions options_;
  kube::KubeClient* const client_;
  const state::DeviceStore* const store_;
  const Clock* const clock_;
  KubeClaimPreparer preparer_;
  std::unique_ptr<PreparedClaims> claims_;  // after the preparer it calls
  std::unique_ptr<SlicePublisher> publisher_;
  std::unique_ptr<KubeletPlugin> plugin_;  // after the claims it serves
};

}  // namespace gpulet::dra

#endif  // GPULET_DRA_DRIVER_H_
