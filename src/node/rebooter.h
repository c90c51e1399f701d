// NodeRebooter: reboots the node gpulet runs on, the reboot rung's hand
// (daemon/reboot_rung.h): through what users already trust, Talos' machine API
// (talos::MachineApiRebooter, after cluster::DrainingRebooter's cordon and drain) or kured's
// sentinel file (node::KuredSentinel).
//
// Thread-safety: Reboot may be called from any thread; implementations say what they keep.
#ifndef GPULET_NODE_REBOOTER_H_
#define GPULET_NODE_REBOOTER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpulet::node {

class NodeRebooter {
 public:
  virtual ~NodeRebooter() = default;
  // Asks for a reboot of this node; `why` is for the log and the request's record. OK means
  // the request was taken (the reboot itself comes later, or never for kured while its lock
  // is held elsewhere). Errors carry a code that says what to do: PermissionDenied (a role or
  // right is missing: the message names it), FailedPrecondition (not configured: a missing
  // talosconfig, sentinel directory), Unavailable (the API could not be reached; retry).
  // `reason` is the fault alone, the same on every node it happens on ("XID 79: ..."), so
  // that nodes can take turns per reason.
  virtual absl::Status Reboot(absl::string_view why, absl::string_view reason) = 0;
  // For a rebooter that works on after Reboot returned OK (one that drains the node first):
  // the failure that ended the request, once (OK otherwise: still at work, or done).
  virtual absl::Status TakeLateFailure() { return absl::OkStatus(); }
  // Where a request under way stands, for the status ("draining: 2 pods left"); "" when
  // there is nothing to say.
  virtual std::string Progress() const { return ""; }
  // How it reboots, for messages: "Talos' machine API (...)", "kured's sentinel
  // /var/run/reboot-required".
  virtual std::string Describe() const = 0;
};

}  // namespace gpulet::node

#endif  // GPULET_NODE_REBOOTER_H_
