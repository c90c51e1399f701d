// The XID catalogue: what each NVIDIA XID code means, how serious it is for the GPU, and what
// an operator should do about it, compiled into gpulet so that `gpulet explain`, the health
// monitor and the device plugin all give the same answer without network access.
//
// An XID is the number the NVIDIA kernel driver prints in "NVRM: Xid (PCI:...): <code>, ..."
// when it detects a GPU, driver or application error. The numbers alone say little; many are
// caused by the application (an out-of-bounds access gives 13 or 31) and leave the GPU healthy,
// while others (79: the GPU fell off the bus) mean the node must be rebooted. Severity and
// actions follow NVIDIA's published Xid catalogue resolution buckets (immediate and
// investigatory), adjusted where field reports show that the bucket alone misleads (the
// device plugin's list of application-level XIDs, gpud's reboot-on-repeat experience).
//
// Thread-safety: the table is immutable; all functions are safe to call concurrently.
#ifndef GPULET_HEALTH_XID_CATALOG_H_
#define GPULET_HEALTH_XID_CATALOG_H_

#include <optional>
#include <span>

#include "absl/strings/string_view.h"

namespace gpulet {

// How an XID affects the GPU as a schedulable resource.
enum class XidSeverity {
  kApplication,  // the application's own fault; the GPU stays healthy and schedulable
  kWarning,      // the GPU may be degraded; keep it, but watch for repeats
  kFatal,        // the GPU is unusable until the suggested action has been taken
};

// What to do, from least to most disruptive (the order is relied on: a larger value is the
// stronger action when several XIDs are combined).
enum class GpuAction {
  kNone,             // informational; nothing to do
  kRestartApp,       // restart the workload that hit the error
  kResetGpu,         // stop the GPU's workloads and reset the GPU
  kRebootNode,       // drain and reboot the node
  kInspectHardware,  // the card, its power or its slot are suspect: inspect or RMA
  kContactSupport,   // escalate with a bug report (nvidia-bug-report.sh)
};

struct XidInfo {
  int code = 0;
  absl::string_view mnemonic;  // NVIDIA's name without the ROBUST_CHANNEL_ prefix
  absl::string_view meaning;   // one line, plain English
  XidSeverity severity = XidSeverity::kWarning;
  GpuAction action = GpuAction::kNone;       // what to do now
  GpuAction if_repeated = GpuAction::kNone;  // what to do when it keeps coming back
  bool documented = true;                    // false: NVIDIA documents no meaning for current GPUs
};

// The entry for `code`. Codes not in the table get a generic entry (mnemonic "UNKNOWN_XID",
// kWarning, kContactSupport) that carries `code`, so callers can always print something.
XidInfo DescribeXid(int code);

// The table entry for `code`, or nullptr when the catalogue does not list it.
const XidInfo* FindXid(int code);

// Every entry, in code order (for docs, tests and `gpulet explain`).
std::span<const XidInfo> AllXids();

// XIDs that are the application's fault and must not take a GPU out of scheduling:
// {13, 31, 43, 45, 68, 94}. (The NVIDIA device plugin also ignores 109; gpulet does not,
// because NVIDIA's catalogue asks for a GPU reset after it.)
std::span<const int> DefaultApplicationXids();
bool IsDefaultApplicationXid(int code);

// "application", "warning", "fatal".
absl::string_view XidSeverityName(XidSeverity severity);
// "none", "restart-app", "reset-gpu", "reboot-node", "inspect-hardware", "contact-support".
absl::string_view GpuActionName(GpuAction action);
// One plain-English sentence telling an operator what to do.
absl::string_view GpuActionDescription(GpuAction action);
// Inverse of GpuActionName (case-insensitive, '_' accepted for '-'); nullopt when unknown.
std::optional<GpuAction> ParseGpuAction(absl::string_view name);

// XID 154 ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)")
// announces the action the driver wants for an earlier XID. Returns that action, or nullopt
// when `message` does not name one.
std::optional<GpuAction> RecoveryActionFromXid154(absl::string_view message);

}  // namespace gpulet

#endif  // GPULET_HEALTH_XID_CATALOG_H_
