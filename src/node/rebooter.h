// NodeRebooter: reboots the node gpulet runs on, the reboot rung's hand
// (daemon/reboot_rung.h): through what users already trust, Talos' machine API
// (talos::TalosRebooter) or kured's sentinel file (node::KuredSentinel).
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
  virtual absl::Status Reboot(absl::string_view why) = 0;
  // How it reboots, for messages: "Talos machine API (talos.default:50000)", "kured
  // sentinel /var/run/reboot-required".
  virtual std::string Describe() const = 0;
};

}  // namespace gpulet::node

#endif  // GPULET_NODE_REBOOTER_H_
