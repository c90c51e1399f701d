// ListenTcp: a listening TCP socket for an address as gpulet's flags spell it (":9400",
// "127.0.0.1:9400", "[::1]:9400"; an empty host is every IPv4 address, port 0 picks one),
// shared by the metrics server and `gpulet image-serve`'s registry.
//
// Thread-safety: a pure function of its arguments (and the network stack).
#ifndef GPULET_COMMON_TCP_LISTEN_H_
#define GPULET_COMMON_TCP_LISTEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpulet {

struct TcpListener {
  int fd = -1;        // listening, non-blocking, close-on-exec; the caller owns it
  bool ipv6 = false;  // the socket's family is AF_INET6
  int port = 0;       // the bound port (the one the kernel picked for port 0)
};

// Binds and listens on `address`. Errors name the address and `flag` (the option that set
// it, e.g. "--metrics-address"): InvalidArgument for a malformed address, Unavailable when the
// host does not resolve or the port cannot be bound.
absl::StatusOr<TcpListener> ListenTcp(const std::string& address, absl::string_view flag);

}  // namespace gpulet

#endif  // GPULET_COMMON_TCP_LISTEN_H_
