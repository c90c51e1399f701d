// The XID catalogue: what each NVIDIA XID code means, how serious it is for the GPU, and what
// an operator should do about it, compiled into gpulet so that `gpulet explain`, the health
// monitor and the device plugin all give the same answer without network access.
//
// An XID is the number the NVIDIA kernel driver prints in "NVRM: Xid (PCI:...): <code>, ..."
// when it detects a GPU, driver or application error. The numbers alone say little; many are
// caused by the application (an out-of-bounds access gives 13 or 31) and leave the GPU healthy,
// while others (79: the GPU fell off the bus) mean the node must be rebooted. Severity and
// actions follow NVIDIA's published Xid catalogue resolution buckets (immediate and
// investigatory, both kept verbatim in each row as XidBucket), adjusted where field reports
// show that the bucket alone misleads (the device plugin's list of application-level XIDs,
// gpud's reboot-on-repeat experience). The table lists every code 1-172 of the catalogue
// (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html).
//
// Thread-safety: the table is immutable; all functions are safe to call concurrently.
#ifndef GPULET_HEALTH_XID_CATALOG_H_
#define GPULET_HEALTH_XID_CATALOG_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "absl/strings/string_view.h"

namespace gpulet::health {

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

// NVIDIA's resolution buckets, as the Xid catalogue spells them (XidBucketName). Each row
// has an immediate bucket (what to do now) and an investigatory one (what to look into when
// the XID keeps coming or the immediate action did not help).
enum class XidBucket {
  kNotPublished,           // the catalogue gives no bucket for this row (only guidance text)
  kNotApplicable,          // "N/A": unused codes, and XID 154 (informational)
  kIgnore,                 // IGNORE
  kRestartApp,             // RESTART_APP
  kRestartVm,              // RESTART_VM (confidential computing: restart the VM)
  kRestartFm,              // RESTART_FM (restart Fabric Manager; XID 45 when seen alone)
  kResetGpu,               // RESET_GPU
  kRestartBm,              // RESTART_BM: reboot the bare-metal node
  kCheckMechanicals,       // CHECK_MECHANICALS: power cabling, seating, cooling
  kCheckAppCuda,           // CHECK_APP/CUDA
  kCheckUvm,               // CHECK_UVM
  kUpdateSwFw,             // UPDATE_SWFW: update driver / firmware
  kInvestigateSw,          // INVESTIGATE_SW
  kInvestigateSwUser,      // INVESTIGATE_SW_USER
  kInvestigateLinkSi,      // INVESTIGATE_LINK_SI (NVLink signal integrity)
  kContactSupport,         // CONTACT_SUPPORT
  kSympatheticReportSolo,  // SYMPATHETIC_REPORT_SOLO: act only when no other XID explains it
  kWorkflowXid13,          // WORKFLOW_XID_13
  kWorkflowXid31,          // WORKFLOW_XID_31
  kWorkflowXid45,          // WORKFLOW_XID_45
  kWorkflowXid48,          // WORKFLOW_XID_48
  kWorkflowNvlinkErr,      // WORKFLOW_NVLINK_ERR (XID 74)
  kWorkflowNvlink5Err,     // WORKFLOW_NVLINK5_ERR (XIDs 144-150: decode the sub-code)
  kXid137Flow,             // XID_137_FLOW
  kXid154,                 // XID_154: the line itself names the recovery action
  kXid154Eval,             // XID_154_EVAL: act on the XID 154 that follows
};

// The GPU generations the catalogue's "Applies to" columns name (a bit set).
enum XidGeneration : unsigned {
  kXidGenNone = 0,
  kXidGenA100 = 1u << 0,
  kXidGenH100 = 1u << 1,
  kXidGenB100 = 1u << 2,
  kXidGenGB200 = 1u << 3,
};

struct XidInfo {
  int code = 0;
  absl::string_view mnemonic;  // NVIDIA's name without the ROBUST_CHANNEL_ prefix
  absl::string_view meaning;   // one line, plain English
  XidSeverity severity = XidSeverity::kWarning;
  GpuAction action = GpuAction::kNone;       // what to do now
  GpuAction if_repeated = GpuAction::kNone;  // what to do when it keeps coming back
  bool documented = true;                    // false: NVIDIA marks the code unused on current GPUs
  XidBucket immediate = XidBucket::kNotPublished;      // NVIDIA's immediate resolution bucket
  XidBucket investigatory = XidBucket::kNotPublished;  // NVIDIA's investigatory bucket
  unsigned generations = kXidGenNone;  // XidGeneration bits: where the catalogue applies it
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

// NVIDIA's spelling ("RESTART_BM", "CHECK_APP/CUDA", "N/A"; "" for kNotPublished).
absl::string_view XidBucketName(XidBucket bucket);
// One plain-English sentence telling an operator what the bucket asks for.
absl::string_view XidBucketDescription(XidBucket bucket);
// Inverse of XidBucketName (case-insensitive, surrounding spaces ignored); nullopt when
// unknown. Also accepts "UPDATE_SW" for kUpdateSwFw.
std::optional<XidBucket> ParseXidBucket(absl::string_view name);
// The GpuAction an immediate bucket asks for. XID-specific buckets (workflows, XID_154)
// map to what their workflow does first; the table's own `action` is what callers use.
GpuAction GpuActionForBucket(XidBucket bucket);
// "A100, H100, B100, GB200" for the set bits; "none listed" when no bit is set.
std::string XidGenerationsText(unsigned generations);

// NVLink5 XIDs (144-150) carry an interrupt-info word ("(0x004505c6 ...)" in the line) that
// names the unit and, for link-down events, the reason. NVIDIA's "XID 144-150 Decode" table
// keys it two ways: drivers before R575 put the unit in bits 9:0 (V1), R575 and later in bits
// 6:0 (V2); for NETIR_LINK_DOWN bits 25:20 give the reason. Buckets here are per unit (the
// catalogue refines them by an error-status register the kernel line does not always carry;
// where a unit has fatal statuses the worst, RESET_GPU, is given), and per reason for link
// downs.
struct Nvlink5Decode {
  absl::string_view unit;     // "NETIR_LINK_DOWN"
  absl::string_view format;   // "V1 (before R575)" or "V2 (R575 and later)"
  std::optional<int> reason;  // NETIR_LINK_DOWN only: bits 25:20
  XidBucket immediate = XidBucket::kNotPublished;
  XidBucket investigatory = XidBucket::kNotPublished;
};
// nullopt when `xid` is not 144-150 or `intrinfo` names no unit of that XID.
std::optional<Nvlink5Decode> DecodeNvlink5(int xid, uint32_t intrinfo);

}  // namespace gpulet::health

#endif  // GPULET_HEALTH_XID_CATALOG_H_
