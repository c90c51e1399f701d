// DrainingRebooter: the reboot rung's hand where no kured takes turns and drains for it
// (Talos): it takes the node's turn, cordons and drains the node, and only then asks the
// inner rebooter (talos::MachineApiRebooter) to reboot it (issue 30; docs/remediation.md).
//
// A request (Reboot) returns at once; the worker ("gpulet-reboot", every `poll`) carries it:
//  1. The turn: a coordination.k8s.io/v1 Lease in gpulet's namespace per reason
//     ("gpulet-reboot-<hash of the reason>", label gpulet.dev/reboot), so that two nodes
//     never reboot at once for the same fault. A Lease another node holds is waited out
//     (it lasts `drain_timeout` plus `reboot_allowance`); an expired one is taken over.
//  2. The cordon: spec.unschedulable, and the annotation gpulet.dev/reboot-cordon (this
//     boot's id) so that only a cordon of gpulet's is undone. A node a person cordoned
//     stays cordoned.
//  3. The drain, as `kubectl drain` does it: every pod on the node but DaemonSet pods,
//     mirror (static) pods and finished pods is evicted through the Eviction API, so
//     PodDisruptionBudgets hold; it ends when none is left, and fails after
//     `drain_timeout`.
//  4. The reboot, through the inner rebooter; an Unavailable answer is tried again, up to
//     3 times.
// A failure undoes the cordon and gives the Lease back, and is the rung's to read
// (TakeLateFailure). After the reboot, the first step in the new boot (Recover) uncordons
// the node and gives back the Leases it holds; so does a gpulet restarted mid-drain in the
// same boot, whose request then failed.
//
// Thread-safety: every method may be called from any thread; one mutex guards the state,
// and API calls are made without it, from the worker (or a test's Step) alone.
#ifndef GPULET_CLUSTER_DRAINING_REBOOTER_H_
#define GPULET_CLUSTER_DRAINING_REBOOTER_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/periodic_worker.h"
#include "kube/kube_client.h"
#include "nlohmann/json.hpp"
#include "node/rebooter.h"

namespace gpulet::cluster {

inline constexpr char kRebootCordonAnnotation[] = "gpulet.dev/reboot-cordon";
inline constexpr char kRebootLeaseLabel[] = "gpulet.dev/reboot";

class DrainingRebooter final : public node::NodeRebooter {
 public:
  struct Options {
    std::string node_name;
    std::string lease_namespace;  // gpulet's own
    std::string boot_id;          // this boot's
    absl::Duration drain_timeout = absl::Minutes(15);
    absl::Duration reboot_allowance = absl::Minutes(15);  // the Lease outlasts the drain by it
    absl::Duration poll = absl::Seconds(5);
  };

  // `client` and `inner` are owned; `client` should not retry on its own (a 429 is a
  // budget's answer, tried again at the next poll).
  DrainingRebooter(std::unique_ptr<kube::KubeClient> client,
                   std::unique_ptr<node::NodeRebooter> inner, Options options,
                   const Clock* clock = RealClock());
  ~DrainingRebooter() override;

  // The worker: Recover at once, then the requests.
  void Start();
  void Stop();
  // One step of the worker (for tests, which drive it with a fake clock).
  void Step();

  absl::Status Reboot(absl::string_view why, absl::string_view reason) override;
  absl::Status TakeLateFailure() override;
  std::string Progress() const override;
  std::string Describe() const override;

  // Whether a request is under way (from Reboot until the inner rebooter took it or it
  // failed).
  bool Busy() const;

  // The Lease's name for `reason`.
  static std::string LeaseName(absl::string_view reason);

 private:
  enum class Phase { kIdle, kTurn, kDrain, kReboot };

  absl::Status Recover();
  // One try at the turn: true when this node holds the Lease.
  absl::StatusOr<bool> TakeTurn(const std::string& lease, const std::string& reason);
  absl::Status Cordon();
  // One pass of the drain: the pods left (0 when done).
  absl::StatusOr<int> DrainPass();
  // Undoes the cordon and the Lease; `why` becomes the late failure.
  void Fail(const absl::Status& why);
  // Uncordons the node when `node` (as read) carries gpulet's cordon annotation; logs what
  // failed.
  void UncordonIfOurs(const nlohmann::json& node);
  // Deletes the Lease `name` when this node holds it (`held`: the Lease as read; unset: read
  // it first); logs what failed.
  void GiveBackLease(const std::string& name, const nlohmann::json* held);
  void Say(std::string progress);

  const std::unique_ptr<kube::KubeClient> client_;
  const std::unique_ptr<node::NodeRebooter> inner_;
  const Options options_;
  const Clock* const clock_;
  PeriodicWorker worker_;

  mutable absl::Mutex mu_;
  bool recovered_ ABSL_GUARDED_BY(mu_) = false;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kIdle;
  std::string why_ ABSL_GUARDED_BY(mu_);
  std::string reason_ ABSL_GUARDED_BY(mu_);
  std::string lease_ ABSL_GUARDED_BY(mu_);
  absl::Time drain_deadline_ ABSL_GUARDED_BY(mu_);
  int reboot_tries_ ABSL_GUARDED_BY(mu_) = 0;
  std::string progress_ ABSL_GUARDED_BY(mu_);
  absl::Status late_failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::cluster

#endif  // GPULET_CLUSTER_DRAINING_REBOOTER_H_
