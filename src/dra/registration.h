// RegistrationServer: gpulet's side of the kubelet's plugin registration for its DRA driver.
//
// The kubelet's plugin manager watches <kubelet-dir>/plugins_registry with inotify; for each
// new socket it calls Registration.GetInfo, checks the answer (type "DRAPlugin", a DRA
// service version it speaks), connects to the endpoint named there and then reports its
// verdict through NotifyRegistrationStatus. Removing the socket deregisters the driver. This
// class serves that Registration service (pluginregistration/v1) on
// <kubelet-dir>/plugins_registry/<driver>-reg.sock and records the kubelet's verdict; the DRA
// service itself (dra_service.h) runs on the endpoint it advertises,
// <kubelet-dir>/plugins/<driver>/dra.sock by default (DraPaths).
//
// The registry directory is created (mode 0750) when missing; the socket is mode 0600 (only
// root, the kubelet, may call it) and removed by Stop, unless it was replaced meanwhile.
//
// Thread-safety: Start/Stop are called from one owning thread; the accessors and the RPCs (on
// gRPC's threads) may run concurrently with each other and with Start/Stop.
#ifndef GPULET_DRA_REGISTRATION_H_
#define GPULET_DRA_REGISTRATION_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dra/socket_server.h"

namespace gpulet::dra {

// Where the kubelet and a DRA driver meet, for `driver` under `kubelet_dir`. `instance`
// ("" or the pod UID) makes the socket names unique per gpulet pod, so that an old and a new
// pod serve side by side during a rolling update (the kubelet's "seamless upgrade", 1.33+;
// the names are those of the k8s.io/dynamic-resource-allocation kubeletplugin helper's
// RollingUpdate(uid) option).
struct DraPaths {
  std::string registry_dir;         // <kubelet-dir>/plugins_registry
  std::string registration_socket;  // <registry_dir>/<driver>[-<instance>]-reg.sock
  std::string plugin_dir;           // <kubelet-dir>/plugins/<driver>
  std::string dra_socket;           // <plugin_dir>/dra[-<instance>].sock

  static DraPaths For(const std::string& kubelet_dir, const std::string& driver,
                      const std::string& instance = "");
};

// Whether `s` has the form of a pod UID (metadata.uid): 8-4-4-4-12 lower-case hex digits.
bool IsPodUid(const std::string& s);

// Checks an instance name (the pod UID, metadata.uid: a lower-case UUID) before it becomes
// part of socket names; "" is allowed (no instance).
absl::Status CheckInstanceName(const std::string& instance);

// The kubelet's PluginInfo.type for DRA drivers, and the service versions gpulet's DRA
// service speaks, newest first ("<version>.DRAPlugin", as the kubelet matches them).
inline constexpr char kDraPluginType[] = "DRAPlugin";
std::vector<std::string> DraSupportedVersions();

// The longest path a unix socket address holds (sun_path without its NUL).
inline constexpr size_t kMaxUnixSocketPath = 107;

// Checks that `path` fits a unix socket address; the error names the path, what it is for
// (`what`) and what to do.
absl::Status CheckSocketPath(const std::string& path, const std::string& what);

// Checks a DRA driver name as the API server does for ResourceSlice spec.driver (a DNS
// subdomain of at most 63 bytes, lower case), before it becomes part of socket paths: a name
// with "/" or ".." would put them outside the kubelet's directories.
absl::Status CheckDriverName(const std::string& driver);

// Creates `dir` and its missing parents with mode 0750 (existing ones are left as they are).
absl::Status MakeDirs(const std::string& dir);

class RegistrationServer {
 public:
  // `endpoint` is the DRA service's socket (absolute), as GetInfo reports it.
  RegistrationServer(std::string driver, std::string socket_path, std::string endpoint,
                     std::vector<std::string> versions = DraSupportedVersions());
  ~RegistrationServer();
  RegistrationServer(const RegistrationServer&) = delete;
  RegistrationServer& operator=(const RegistrationServer&) = delete;

  // Creates the directory if needed, removes a stale socket, starts serving (socket mode
  // 0600). A new start forgets the kubelet's last verdict. Errors name the path and what to
  // do. Idempotent while running.
  absl::Status Start();
  // Stops serving and removes the socket if it is still the one Start made. Idempotent.
  void Stop();
  bool running() const { return server_.running(); }
  // Serving, and the socket file is still the one Start created (deleting it deregisters
  // the driver, so an owner re-serves when this turns false).
  bool SocketIntact() const { return server_.SocketIntact(); }

  // The kubelet's last verdict since Start.
  struct Verdict {
    int notifications = 0;    // NotifyRegistrationStatus calls received
    bool registered = false;  // the last one said registered
    std::string error;        // the last one's error ("" when registered)
  };
  Verdict verdict() const;
  // Waits until at least `n` notifications arrived since Start; false on timeout.
  bool WaitForNotifications(int n, absl::Duration timeout) const;

  const std::string& socket_path() const { return server_.socket_path(); }
  const std::string& driver() const { return driver_; }

 private:
  class Service;
  void OnNotify(bool registered, const std::string& error);

  // Constant after construction.
  const std::string driver_;
  const std::string endpoint_;
  const std::vector<std::string> versions_;

  // Never held while the server shuts down (its RPCs take it).
  mutable absl::Mutex mu_;
  Verdict verdict_ ABSL_GUARDED_BY(mu_);

  // The service outlives the server that calls it; only Start/Stop replace it.
  std::unique_ptr<Service> service_;
  SocketServer server_;
};

}  // namespace gpulet::dra

#endif  // GPULET_DRA_REGISTRATION_H_
