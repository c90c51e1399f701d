// podresources-standin: the kubelet's PodResources API v1 (List) on a unix socket, as a
// command for shell tests (the real kubelet runs in `make e2e` only). It serves, through
// testing::FakePodResources (written from the kubelet's documented PodResources API), one
// pod per line of SPEC_FILE: "<namespace> <pod> <container> <resource> <device id>", and
// runs until SIGTERM or SIGINT.
// Usage: podresources-standin SOCKET SPEC_FILE
// Exit: 0 after a signal, 1 when it cannot serve, 2 usage or a bad spec line.
//
// The real kubelet's is checked by `make e2e` (docs/e2e.md), scenario metrics_name_the_pod.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "testing/fake_pod_resources.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: podresources-standin SOCKET SPEC_FILE\n");
    return 2;
  }
  v1::ListPodResourcesResponse response;
  std::ifstream in(argv[2]);
  if (!in) {
    std::fprintf(stderr, "podresources-standin: cannot read %s\n", argv[2]);
    return 2;
  }
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string ns, pod, container, resource, id, extra;
    if (!(fields >> ns >> pod >> container >> resource >> id) || (fields >> extra)) {
      std::fprintf(stderr,
                   "podresources-standin: %s:%d is not \"<namespace> <pod> <container> "
                   "<resource> <device id>\"\n",
                   argv[2], n);
      return 2;
    }
    gpulet::testing::FakePodResources::AddContainer(&response, ns, pod, container, resource, {id});
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before gRPC starts its threads
  gpulet::testing::FakePodResources server(argv[1]);
  server.SetResponse(response);
  if (absl::Status st = server.Start(); !st.ok()) {
    std::fprintf(stderr, "podresources-standin: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::printf("serving %d container(s) on %s\n", response.pod_resources_size(), argv[1]);
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  server.Stop();
  return 0;
}
