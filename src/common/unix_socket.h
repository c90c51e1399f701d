// ProbeUnixSocket: what is at a unix socket path, seen from outside: nothing, something that
// is not a socket, a socket some process listens on, or a socket nobody listens on (connect()
// refused: the leftover of a process that died without removing it).
//
// A socket is bound before its server listens on it, and in between connect() is refused
// too; a process that watches the directory (inotify) sees the file in that very moment. So
// a refusal counts only when it lasts: the probe tries again for `patience` before it
// answers kRefused.
//
// Thread-safety: a pure function of the file system.
#ifndef GPULET_COMMON_UNIX_SOCKET_H_
#define GPULET_COMMON_UNIX_SOCKET_H_

#include <string>

#include "absl/time/time.h"

namespace gpulet {

enum class SocketProbe {
  kAbsent,     // no such file
  kNotSocket,  // a file that is not a socket
  kServed,     // connect() succeeded: some process listens
  kRefused,    // connect() refused for the whole `patience`: nobody listens
  kUnknown,    // any other answer (permissions, a path too long): leave it alone
};

SocketProbe ProbeUnixSocket(const std::string& path,
                            absl::Duration patience = absl::Milliseconds(200));

}  // namespace gpulet

#endif  // GPULET_COMMON_UNIX_SOCKET_H_
