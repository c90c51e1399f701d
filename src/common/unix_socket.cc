#include "common/unix_socket.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "absl/time/clock.h"

namespace gpulet {
namespace {

SocketProbe ProbeOnce(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0)
    return errno == ENOENT ? SocketProbe::kAbsent : SocketProbe::kUnknown;
  if (!S_ISSOCK(st.st_mode)) return SocketProbe::kNotSocket;
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return SocketProbe::kUnknown;
  memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return SocketProbe::kUnknown;
  SocketProbe out = SocketProbe::kServed;
  if (connect(fd, reinterpret_cast<const struct sockaddr*>(&addr), sizeof(addr)) != 0) {
    out = errno == ECONNREFUSED ? SocketProbe::kRefused
          : errno == ENOENT     ? SocketProbe::kAbsent
                                : SocketProbe::kUnknown;
  }
  close(fd);
  return out;
}

}  // namespace

SocketProbe ProbeUnixSocket(const std::string& path, absl::Duration patience) {
  const absl::Time give_up = absl::Now() + patience;
  for (;;) {
    SocketProbe p = ProbeOnce(path);
    if (p != SocketProbe::kRefused || absl::Now() >= give_up) return p;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace gpulet
