// DevicePluginServer: the kubelet device-plugin API v1beta1 for one resource, served over
// gRPC on a unix socket in the kubelet's device-plugins directory.
//
// It reads device state only from the DeviceStore: ListAndWatch sends the full list at once
// and again whenever the store's snapshot changes what this resource advertises (health,
// inventory); Allocate and GetPreferredAllocation are pure functions of the config and the
// current snapshot (plugin/resources.h). Register() tells the kubelet about the socket.
//
// Thread-safety: Start/Stop/Register are called by the plugin manager's thread (and
// RegisterCancel::Cancel from any); RPCs run on
// gRPC's threads and only read immutable config and store snapshots.
#ifndef GPULET_PLUGIN_PLUGIN_SERVER_H_
#define GPULET_PLUGIN_PLUGIN_SERVER_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "config/config.h"
#include "plugin/resources.h"
#include "state/device_store.h"

namespace grpc {
class ClientContext;
class Server;
}  // namespace grpc

namespace gpulet::plugin {

// RegisterCancel: lets the thread that stops gpulet end the Register call another thread
// is waiting in (a kubelet that accepted the connection but never answers holds it for the
// whole timeout), and refuse every later one.
//
// Thread-safety: all methods are thread-safe.
class RegisterCancel {
 public:
  // Cancels the call in flight, if any; every later Register fails at once.
  void Cancel();
  bool cancelled() const;

 private:
  friend class DevicePluginServer;
  // Records `ctx` as the call in flight; false (nothing recorded) when already cancelled.
  bool Begin(grpc::ClientContext* ctx);
  void End();

  mutable absl::Mutex mu_;
  grpc::ClientContext* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

class DevicePluginServer {
 public:
  DevicePluginServer(ResourceSpec resource, std::shared_ptr<const config::Config> config,
                     state::DeviceStore* store, ControlNodes control, std::string plugin_dir,
                     SliceFiles slice_files = {});
  ~DevicePluginServer();
  DevicePluginServer(const DevicePluginServer&) = delete;
  DevicePluginServer& operator=(const DevicePluginServer&) = delete;

  // Removes a stale socket, starts serving (socket mode 0600). Fails naming the path.
  absl::Status Start();
  // Ends open streams, stops serving and removes the socket. Idempotent.
  void Stop();
  bool running() const { return server_ != nullptr; }
  // Stops serving because another process (the new gpulet pod of a rolling update) serves
  // the socket path now; yielded() stays true until the next Start.
  void Yield() {
    Stop();
    yielded_ = true;
  }
  bool yielded() const { return yielded_; }

  // Calls the kubelet's Registration service on `kubelet_socket`. With `cancel`, the call
  // ends (Cancelled) as soon as cancel->Cancel() is called, or does not start after it.
  // FailedPrecondition: the kubelet answered and refused; Unavailable: no answer.
  absl::Status Register(const std::string& kubelet_socket, absl::Duration timeout,
                        RegisterCancel* cancel = nullptr);

  // Whether our socket file still exists as the one we created (a kubelet restart deletes
  // it).
  bool SocketIntact() const;

  const ResourceSpec& resource() const { return resource_; }
  std::string socket_path() const;

 private:
  // For a memory-slice allocation with enforcement on: installs the enforcement library in
  // the host directory and writes the allocation's slice file. FailedPrecondition naming
  // what failed and the setting that turns enforcement off.
  absl::Status PrepareSlice(const std::vector<std::string>& ids) const;

  class Service;
  ResourceSpec resource_;
  std::shared_ptr<const config::Config> config_;
  state::DeviceStore* store_;
  ControlNodes control_;
  std::string plugin_dir_;
  SliceFiles slice_files_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  ino_t socket_inode_ = 0;
  bool yielded_ = false;
};

}  // namespace gpulet::plugin

#endif  // GPULET_PLUGIN_PLUGIN_SERVER_H_
