// FakeKubelet: plays the kubelet's side of the device-plugin protocol over real unix
// sockets, for integration tests and benchmarks.
//
// The real kubelet is checked by `make e2e` (docs/e2e.md), scenarios registers,
// pod_sees_cdi_devices, kubelet_restart and gpulet_restart.
//
// Like the real kubelet it serves Registration on <dir>/kubelet.sock; inside Register it
// dials the plugin's endpoint back and opens ListAndWatch, keeping the latest device list of
// each resource. Restart() behaves like a kubelet restart: it stops serving, deletes every
// socket in the directory (the plugin's too) and serves a fresh kubelet.sock.
//
// Thread-safety: all methods are thread-safe; streams run on their own threads.
#ifndef GPULET_TESTING_FAKE_KUBELET_H_
#define GPULET_TESTING_FAKE_KUBELET_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/deviceplugin/v1beta1/api.grpc.pb.h"

namespace grpc {
class Server;
}

namespace gpulet::testing {

class FakeKubelet {
 public:
  // `dir` is the device-plugins directory.
  explicit FakeKubelet(std::string dir);
  ~FakeKubelet();

  absl::Status Start();
  void Stop();  // stops serving and ends the streams; sockets of plugins stay
  // Stop, delete every socket in the directory, Start again.
  absl::Status Restart();

  // Registrations received so far (all generations).
  int registrations() const;
  std::vector<v1beta1::RegisterRequest> requests() const;

  // Waits until `pred` holds for the latest device list of `resource`.
  bool WaitForDevices(const std::string& resource,
                      const std::function<bool(const v1beta1::ListAndWatchResponse&)>& pred,
                      absl::Duration timeout);
  // Waits until at least `n` registrations arrived.
  bool WaitForRegistrations(int n, absl::Duration timeout);
  // Time of the latest device-list update for a resource.
  absl::Time last_update(const std::string& resource) const;

  absl::StatusOr<v1beta1::AllocateResponse> Allocate(const std::string& resource,
                                                     const std::vector<std::string>& ids);
  absl::StatusOr<v1beta1::PreferredAllocationResponse> GetPreferredAllocation(
      const std::string& resource, const std::vector<std::string>& available,
      const std::vector<std::string>& must_include, int size);
  absl::StatusOr<v1beta1::DevicePluginOptions> GetOptions(const std::string& resource);

  // From now on refuses every registration naming `endpoint` with "device plugin already
  // connected: <path>", as kubelet 1.37 does for a path it has lost track of
  // (plugin/plugin_manager.h says when; `make e2e`'s sharing_and_labels scenario meets it).
  void RefuseEndpoint(const std::string& endpoint);

 private:
  class RegistrationService;
  struct Endpoint;
  absl::Status OnRegister(const v1beta1::RegisterRequest& req);
  std::shared_ptr<Endpoint> FindEndpoint(const std::string& resource);

  std::string dir_;
  std::unique_ptr<RegistrationService> service_;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1beta1::RegisterRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1beta1::ListAndWatchResponse> devices_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> updated_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> refused_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_FAKE_KUBELET_H_
