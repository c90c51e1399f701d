// MachineApiRebooter: reboots this node through Talos' machine API (machine.MachineService/
// Reboot), reached as Talos lets a pod reach it: with the talosconfig of a talos.dev
// ServiceAccount whose role is os:operator, the least role Talos' rules allow Reboot
// (siderolabs/talos v1.13.9, internal/app/machined/pkg/system/services/machined.go).
//
// How a call goes:
//  - the talosconfig is read anew on every call (Talos renews its certificate every few
//    hours), and a certificate without os:operator or os:admin is refused before any call;
//  - TLS to the endpoint (the talosconfig's, or `dial` when set; the certificate must name
//    the endpoint's host either way, `talos.default` in a pod) with the Talos CA alone and
//    the client certificate, ALPN h2; gpulet's gRPC has no TLS, so the call runs over a
//    kube::TlsTunnel;
//  - metadata `node` names this node: `talos.default` leads to a control-plane node, and
//    apid acts on the node the metadata names, else on itself;
//  - an OK answer whose reply carries an error (apid's one-to-many form) is a failure.
//
// Errors carry node::NodeRebooter's codes: FailedPrecondition (no talosconfig, a bad one, no
// node address, a TLS or ALPN refusal), PermissionDenied (the role), Unavailable (apid could
// not be reached or could not reach the node: retry). Each names the file, endpoint or node,
// and what to do.
//
// Thread-safety: Reboot may be called from any thread; calls do not share state.
#ifndef GPULET_TALOS_MACHINE_CLIENT_H_
#define GPULET_TALOS_MACHINE_CLIENT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "node/rebooter.h"

namespace gpulet::talos {

// Where a pod finds the talosconfig Talos writes for its ServiceAccount.
inline constexpr char kDefaultTalosconfig[] = "/var/run/secrets/talos.dev/config";

enum class RebootMode { kDefault = 0, kPowercycle = 1 };

struct MachineApiOptions {
  std::string talosconfig = kDefaultTalosconfig;
  // The address apid knows this node by (its InternalIP, the pod's status.hostIP); required.
  std::string node;
  // host:port to connect to instead of the talosconfig's endpoint; "" for the endpoint.
  std::string dial;
  RebootMode mode = RebootMode::kDefault;
  absl::Duration timeout = absl::Seconds(30);  // connect, handshake and call
};

class MachineApiRebooter final : public node::NodeRebooter {
 public:
  explicit MachineApiRebooter(MachineApiOptions options) : options_(std::move(options)) {}
  absl::Status Reboot(absl::string_view why, absl::string_view reason) override;
  std::string Describe() const override;

 private:
  const MachineApiOptions options_;
};

}  // namespace gpulet::talos

#endif  // GPULET_TALOS_MACHINE_CLIENT_H_
