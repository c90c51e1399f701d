// FreeLoopbackPort: a TCP port on 127.0.0.1 that nothing listens on right now, for tests
// and benchmarks that start servers (the port is released before it is returned, so a
// rare race with another process remains; callers retry on bind errors if they care).
//
// Thread-safety: each call is independent.
#ifndef GPULET_TESTING_FREE_PORT_H_
#define GPULET_TESTING_FREE_PORT_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace gpulet::testing {

inline int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_FREE_PORT_H_
