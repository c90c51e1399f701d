// FakeDraKubelet: a stand-in for the kubelet's side of a DRA driver, over real unix sockets,
// for integration tests. It is written from the kubelet's documented behaviour, not from its
// code:
//  - the plugin manager watches <kubelet-dir>/plugins_registry (inotify here too, plus a
//    rescan every 50 ms) and, for each new socket whose name ends in ".sock" (hidden files and
//    anything that is not a socket are ignored), dials it and calls Registration.GetInfo;
//  - it checks the answer: type "DRAPlugin" (any other type: "no handler registered"), a
//    driver name, an endpoint, and a version in supported_versions that this kubelet speaks
//    (v1.DRAPlugin preferred over v1beta1.DRAPlugin, as kubelets since 1.34 do); then it dials
//    the endpoint;
//  - it reports the verdict with NotifyRegistrationStatus(true), or (false, the reason);
//  - a socket created again registers again; a socket that disappears deregisters the
//    instance registered from it.
// Several instances of one driver (the old and the new pod of a rolling update, each with its
// own socket names) are kept side by side, as kubelets since 1.33 do (kubernetes
// pkg/kubelet/pluginmanager/pluginwatcher/README.md, "Seamless Upgrade"): calls go to the
// most recently registered instance; when its socket disappears only that instance is
// deregistered and calls fall back to the one registered before it.
// Prepare and Unprepare then call NodePrepareResources / NodeUnprepareResources on the
// driver's instance in use, on its endpoint, in the version chosen at its registration.
// Restart() is a kubelet restart: it forgets every driver and registers again whatever
// sockets are still there. WatchHealth is the kubelet's DRAResourceHealth.NodeWatchResources
// stream (1.34+, feature ResourceHealthStatus) on the same endpoint.
//
// The real kubelet and scheduler are checked by `make e2e` (docs/e2e.md), scenario dra.
//
// Thread-safety: all methods are thread-safe; registration runs on the stand-in's own thread.
#ifndef GPULET_TESTING_FAKE_DRA_KUBELET_H_
#define GPULET_TESTING_FAKE_DRA_KUBELET_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/dir_watcher.h"
#include "proto/dra/v1/api.pb.h"
#include "proto/drahealth/v1alpha1/api.pb.h"
#include "proto/pluginregistration/v1/api.pb.h"

namespace gpulet::testing {

namespace drapb = ::k8s::io::kubelet::pkg::apis::dra::v1;

class FakeDraKubelet {
 public:
  // `kubelet_dir` holds plugins_registry/ (created by Start when missing).
  explicit FakeDraKubelet(std::string kubelet_dir);
  ~FakeDraKubelet();
  FakeDraKubelet(const FakeDraKubelet&) = delete;
  FakeDraKubelet& operator=(const FakeDraKubelet&) = delete;

  // The DRA versions this kubelet speaks, preferred first. Default: {"v1", "v1beta1"}; a
  // kubelet 1.32/1.33 would be {"v1beta1"}. Applies to registrations after the call.
  void set_versions(std::vector<std::string> versions);

  absl::Status Start();
  // Stops watching and forgets every driver; the plugins' sockets stay.
  void Stop();
  absl::Status Restart();

  struct Plugin {
    std::string socket;  // the registration socket
    pluginregistration::PluginInfo info;
    std::string version;  // the DRA version chosen ("v1", "v1beta1"); "" when refused
    bool registered = false;
    std::string error;  // why not, as sent in NotifyRegistrationStatus
  };
  // The instance of `driver` in use: the most recently registered one; when none is
  // registered, the last one refused; nullopt when the driver has no socket.
  std::optional<Plugin> plugin(const std::string& driver) const;
  // Every instance of `driver` known (registered or refused), oldest registration first.
  std::vector<Plugin> instances(const std::string& driver) const;
  // Waits until the instance of `driver` in use is the one registered from `socket`.
  bool WaitForInUse(const std::string& driver, const std::string& socket,
                    absl::Duration timeout) const;
  // Registration attempts (GetInfo answered) and successes, over all restarts.
  int attempts() const;
  int registrations() const;
  bool WaitForRegistrations(int n, absl::Duration timeout) const;
  bool WaitForAttempts(int n, absl::Duration timeout) const;
  // Waits until no instance of `driver` is known (their sockets went away).
  bool WaitForDeregistered(const std::string& driver, absl::Duration timeout) const;

  // The kubelet's calls to a registered driver. Errors: the driver is not registered, or the
  // call itself failed (per-claim errors are in the response).
  absl::StatusOr<drapb::NodePrepareResourcesResponse> Prepare(
      const std::string& driver, const std::vector<drapb::Claim>& claims,
      absl::Duration timeout = absl::Seconds(5));
  // The same call to `instance` (from plugin() earlier), registered or not any more: a
  // kubelet that picked an instance just before its registration went.
  absl::StatusOr<drapb::NodePrepareResourcesResponse> PrepareOn(
      const Plugin& instance, const std::vector<drapb::Claim>& claims,
      absl::Duration timeout = absl::Seconds(5));
  absl::StatusOr<drapb::NodeUnprepareResourcesResponse> Unprepare(
      const std::string& driver, const std::vector<drapb::Claim>& claims,
      absl::Duration timeout = absl::Seconds(5));

  // NodeWatchResources on a registered driver's endpoint: each message goes to `on_message`
  // until it returns false (then OK, and the call is cancelled). Else: FailedPrecondition (not
  // registered), Unimplemented (the driver serves no health), OutOfRange (the driver ended
  // the stream), DeadlineExceeded (`timeout` passed), Unavailable (the call failed).
  absl::Status WatchHealth(
      const std::string& driver,
      const std::function<bool(const ::v1alpha1::NodeWatchResourcesResponse&)>& on_message,
      absl::Duration timeout = absl::Seconds(10));

  static drapb::Claim MakeClaim(const std::string& ns, const std::string& uid,
                                const std::string& name);

  // Which instance of a socket: a file system may give a socket created again the inode of
  // the one just deleted, never the same modification time too (chmod changes only ctime).
  struct Stamp {
    ino_t inode = 0;
    int64_t mtime_ns = 0;
    friend bool operator==(const Stamp&, const Stamp&) = default;
  };

 private:
  struct Known {
    Stamp stamp;
    std::string driver;
  };
  void Run();
  void Scan();
  // Registers the plugin on `socket` (the instance `stamp`); returns the driver name, ""
  // when GetInfo failed or the socket was replaced meanwhile (tried again on the next scan).
  std::string Register(const std::string& socket, const Stamp& stamp);

  const std::string registry_dir_;
  std::unique_ptr<DirWatcher> watcher_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::map<std::string, Known> known_;  // by socket path; the watch thread only

  mutable absl::Mutex mu_;
  std::vector<std::string> versions_ ABSL_GUARDED_BY(mu_) = {"v1", "v1beta1"};
  // By driver name: its instances, oldest registration first.
  std::map<std::string, std::vector<Plugin>> plugins_ ABSL_GUARDED_BY(mu_);
  // The instance in use: the last registered, else the last; null when none.
  const Plugin* InUse(const std::string& driver) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_FAKE_DRA_KUBELET_H_
