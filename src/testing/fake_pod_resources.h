// FakePodResources: plays the kubelet's PodResources API v1 (List) on a real unix socket,
// for tests of pod attribution. The response is whatever the test sets; static helpers build
// one from device-plugin devices and DRA claims.
//
// The real kubelet's is checked by `make e2e` (docs/e2e.md), scenario metrics_name_the_pod.
//
// Thread-safety: all methods are thread-safe.
#ifndef GPULET_TESTING_FAKE_POD_RESOURCES_H_
#define GPULET_TESTING_FAKE_POD_RESOURCES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/podresources/v1/api.pb.h"

namespace gpulet::testing {

class FakePodResources {
 public:
  explicit FakePodResources(std::string socket_path);
  ~FakePodResources();

  absl::Status Start();  // serves (creating the socket; an old one is replaced)
  void Stop();           // stops serving and removes the socket, like a kubelet going away

  void SetResponse(const v1::ListPodResourcesResponse& response);
  int list_calls() const;

  // Adds one container holding `device_ids` of `resource`.
  static void AddContainer(v1::ListPodResourcesResponse* response, const std::string& ns,
                           const std::string& pod, const std::string& container,
                           const std::string& resource, const std::vector<std::string>& device_ids);

  // One allocated device of a DRA claim, as a ClaimResource reports it. A kubelet before 1.34
  // fills only `cdi_devices`: leave driver, pool and device empty then.
  struct ClaimDevice {
    std::string driver;    // "gpu.gpulet.dev"
    std::string pool;      // the node name
    std::string device;    // "gpu-0"
    std::string share_id;  // "" for none (a device not shared by capacity)
    std::vector<std::string> cdi_devices;
  };

  // Adds DRA claim `claim` (in the pod's namespace) holding `devices` to `container` of the
  // pod, creating the pod and the container when the response has neither.
  static void AddClaim(v1::ListPodResourcesResponse* response, const std::string& ns,
                       const std::string& pod, const std::string& container,
                       const std::string& claim, const std::vector<ClaimDevice>& devices);

 private:
  class Service;
  std::string socket_path_;
  std::unique_ptr<Service> service_;
  struct ServerHolder;
  std::unique_ptr<ServerHolder> server_;
};

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_FAKE_POD_RESOURCES_H_
