// FakePodResources: plays the kubelet's PodResources API v1 (List) on a real unix socket,
// for tests of pod attribution. The response is whatever the test sets.
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

 private:
  class Service;
  std::string socket_path_;
  std::unique_ptr<Service> service_;
  struct ServerHolder;
  std::unique_ptr<ServerHolder> server_;
};

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_FAKE_POD_RESOURCES_H_
