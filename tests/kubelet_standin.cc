// kubelet-standin: the kubelet's side of one device-plugin allocation, as a command for
// shell tests (the real kubelet runs in `make e2e` only). It serves Registration on
// <dir>/kubelet.sock through testing::FakeKubelet (written from the kubelet's documented
// device-plugin API v1beta1), waits for the plugin of RESOURCE to register and list DEVICE
// as Healthy, calls Allocate for DEVICE as the kubelet does for one container, and prints
// the container's answer, one item a line:
//   cdi <name>            a CDI device (cdi-cri strategy)
//   env <KEY>=<value>     an environment variable
//   annotation <k>=<v>    an annotation (cdi-annotations strategy)
//   mount <host>:<ctr>    a mount
//   device <host>:<ctr>   a device spec
// Usage: kubelet-standin DEVICE_PLUGINS_DIR RESOURCE DEVICE_ID [TIMEOUT_SECONDS]
// Exit: 0 answered, 1 no registration / device / answer in time, 2 usage.
//
// The real kubelet and containerd are checked by `make e2e` (docs/e2e.md), scenario
// pod_sees_cdi_devices.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/time/time.h"
#include "testing/fake_kubelet.h"

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::fprintf(
        stderr, "usage: kubelet-standin DEVICE_PLUGINS_DIR RESOURCE DEVICE_ID [TIMEOUT_SECONDS]\n");
    return 2;
  }
  const std::string dir = argv[1], resource = argv[2], device = argv[3];
  const absl::Duration timeout = absl::Seconds(argc == 5 ? std::atoi(argv[4]) : 20);
  gpulet::testing::FakeKubelet kubelet(dir);
  if (absl::Status st = kubelet.Start(); !st.ok()) {
    std::fprintf(stderr, "kubelet-standin: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  bool listed = kubelet.WaitForDevices(
      resource,
      [&](const v1beta1::ListAndWatchResponse& list) {
        for (const auto& d : list.devices()) {
          if (d.id() == device && d.health() == "Healthy") return true;
        }
        return false;
      },
      timeout);
  if (!listed) {
    std::fprintf(stderr, "kubelet-standin: %s was not listed Healthy for %s within %s\n",
                 device.c_str(), resource.c_str(), absl::FormatDuration(timeout).c_str());
    return 1;
  }
  absl::StatusOr<v1beta1::AllocateResponse> answer = kubelet.Allocate(resource, {device});
  if (!answer.ok() || answer->container_responses_size() != 1) {
    std::fprintf(stderr, "kubelet-standin: Allocate failed: %s\n",
                 answer.ok() ? "not one container response"
                             : std::string(answer.status().message()).c_str());
    return 1;
  }
  const auto& r = answer->container_responses(0);
  for (const auto& c : r.cdi_devices()) std::printf("cdi %s\n", c.name().c_str());
  for (const auto& [k, v] : r.envs()) std::printf("env %s=%s\n", k.c_str(), v.c_str());
  for (const auto& [k, v] : r.annotations())
    std::printf("annotation %s=%s\n", k.c_str(), v.c_str());
  for (const auto& m : r.mounts()) {
    std::printf("mount %s:%s\n", m.host_path().c_str(), m.container_path().c_str());
  }
  for (const auto& d : r.devices()) {
    std::printf("device %s:%s\n", d.host_path().c_str(), d.container_path().c_str());
  }
  kubelet.Stop();
  return 0;
}
