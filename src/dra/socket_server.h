// SocketServer: one gRPC server on one unix socket that the kubelet dials, with the lifecycle
// both DRA sockets (registration, the DRA service) need: the path checked against the unix
// address limit and its directory made (mode 0750), a stale socket from an earlier run
// replaced, the new socket made mode 0600 (only root, the kubelet, calls it), and on Stop the
// socket removed only if it is still the one Start made (a new gpulet taking over in a
// rolling update may have put its own there). The services are the owner's; they must
// outlive the server.
//
// Thread-safety: all methods are thread-safe. The mutex is never held while the server shuts
// down, so in-flight RPCs finish.
#ifndef GPULET_DRA_SOCKET_SERVER_H_
#define GPULET_DRA_SOCKET_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace gpulet::dra {

class SocketServer {
 public:
  // `what` names the socket in errors ("DRA service"); `mount_hint` says which kubelet
  // directory the gpulet pod must mount ("plugins").
  SocketServer(std::string socket_path, std::string what, std::string mount_hint);
  ~SocketServer();
  SocketServer(const SocketServer&) = delete;
  SocketServer& operator=(const SocketServer&) = delete;

  // Serves `services` on the socket. Errors name the path and what to do.
  absl::Status Start(const std::vector<grpc::Service*>& services);
  // Finishes in-flight calls (2 s at most), stops serving, removes the socket if still ours.
  // Idempotent.
  void Stop();
  bool running() const;
  // Serving, and the socket file is still the one Start created (an owner re-serves when
  // this turns false: the kubelet deletes sockets when it restarts).
  bool SocketIntact() const;

  const std::string& socket_path() const { return socket_path_; }

 private:
  const std::string socket_path_;
  const std::string what_;
  const std::string mount_hint_;
  mutable absl::Mutex mu_;
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(mu_);
  ino_t socket_inode_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpulet::dra

#endif  // GPULET_DRA_SOCKET_SERVER_H_
