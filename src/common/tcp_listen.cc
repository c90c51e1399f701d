#include "common/tcp_listen.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpulet {

absl::StatusOr<TcpListener> ListenTcp(const std::string& address, absl::string_view flag) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", address, "' needs a port, e.g. :9400"));
  }
  std::string host = address.substr(0, colon);
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", address, "' has an invalid port"));
  }
  if (host.empty()) host = "0.0.0.0";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": host '", host,
                                               "': ", gai_strerror(rc), "; change ", flag));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> free_found(found, freeaddrinfo);
  TcpListener out;
  out.ipv6 = found->ai_family == AF_INET6;
  out.fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (out.fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": socket: ", strerror(errno)));
  }
  int one = 1;
  setsockopt(out.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(out.fd, found->ai_addr, found->ai_addrlen) != 0 || listen(out.fd, SOMAXCONN) != 0) {
    int err = errno;
    close(out.fd);
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", strerror(err),
                                               "; the port is in use or the address is not "
                                               "local; change ",
                                               flag));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(out.fd, reinterpret_cast<sockaddr*>(&bound), &len);
  out.port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return out;
}

}  // namespace gpulet
