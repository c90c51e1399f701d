// RebootRung: the remediation ladder's last rung (health.reboot; docs/remediation.md): asks
// for a reboot of the node when a GPU's fault that only a reboot clears has lasted, through
// what the cluster's owner already trusts to reboot nodes (node::NodeRebooter: kured's
// sentinel, whose lock, drain and uncordon come with it, or Talos' machine API after gpulet's
// own turn, cordon and drain: cluster::DrainingRebooter), and keeps a record of each request
// on the host (recorder::RebootRecord) so that the budget and the outcome survive the reboot
// itself.
//
// A reboot is asked for when all of these hold:
//  - a GPU is Unhealthy with a condition only a reboot clears (HealthCondition::
//    reboot_required: XID 79 and the catalogue's other reboot XIDs, the driver's recovery
//    action "node reboot required", a GPU NVML reports fallen off the bus), for `grace`;
//  - that GPU is not retired (a retired card stays out across reboots: rebooting for it
//    changes nothing) and has a UUID and a PCI address; NVML is available;
//  - no request made in this boot is outstanding (the record says which boot asked);
//  - the budget allows: fewer than `max_per_window` requests within `window`, counted from
//    the record, so across reboots;
//  - the record could be read (one that cannot be asks for nothing: the budget is unknown).
// The request is written to the record (fsync'd) before the rebooter is asked, so a reboot
// that follows at once is still counted. The first round of the next boot finds the request
// made in another boot and reports the reboot done (GpuNodeRebooted). A fault that comes
// back after the reboot is a repeat the XID policy escalates to hardware inspection, which
// no reboot clears; the budget bounds the rest (a card that falls off the bus after every
// boot). Mode dry-run says once per time out that it would (GpuWouldReboot).
//
// Times are the injected clock's wall time and the policy the configuration's, both passed
// in by the caller.
//
// Thread-safety: all methods may be called from any thread; one mutex serialises them.
#ifndef GPULET_DAEMON_REBOOT_RUNG_H_
#define GPULET_DAEMON_REBOOT_RUNG_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cluster/node_health.h"
#include "config/config.h"
#include "node/rebooter.h"
#include "recorder/reboot_record.h"
#include "state/device_store.h"
#include "state/status_report.h"

namespace gpulet::daemon {

class RebootRung {
 public:
  // `boot_id`: this boot's (/proc/sys/kernel/random/boot_id); "" when unknown, and then no
  // reboot is asked for (the record could not tell this boot's request from an earlier one).
  explicit RebootRung(std::string boot_id);

  // One round: decides, and with mode on asks `rebooter` (which must be set then) and
  // records the request in `record` (null: no record, and nothing is asked for). Returns the
  // Events to post.
  std::vector<cluster::NodeEvent> Next(const state::Snapshot& snap,
                                       const config::Config::Health::Reboot& policy,
                                       const recorder::RebootRecord* record,
                                       node::NodeRebooter* rebooter, absl::Time now);

  // Why there is no rebooter (Next's `rebooter` null with mode on), for the status.
  void SetNoRebooterReason(std::string why);

  // What the rung is doing about each GPU it has something to say of, by UUID.
  std::map<std::string, state::RungStatus> ByGpu() const;
  // Its requests by result: "asked", "failed" and "dry_run" (gpulet_node_reboots_total).
  std::map<std::string, uint64_t> counts() const;

 private:
  // Reads the record when its file changed (or on the first round); false when it cannot
  // be read (the status says why).
  bool LoadLocked(const recorder::RebootRecord* record, std::vector<cluster::NodeEvent>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string boot_id_;
  mutable absl::Mutex mu_;
  std::string loaded_from_ ABSL_GUARDED_BY(mu_);  // the file `requests_` came from
  std::optional<std::vector<recorder::RebootRequest>> requests_ ABSL_GUARDED_BY(mu_);
  std::string record_error_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, state::RungStatus> status_ ABSL_GUARDED_BY(mu_);
  bool told_ ABSL_GUARDED_BY(mu_) = false;
  // The last request the record could not take, and why (tried again an hour later).
  absl::Time save_failed_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string save_failure_
      ABSL_GUARDED_BY(mu_);  // the dry run's or budget's Event, once per time out
  std::map<std::string, uint64_t> counts_ ABSL_GUARDED_BY(mu_);
  std::string no_rebooter_why_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_REBOOT_RUNG_H_
