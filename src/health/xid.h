// Kernel-log parsing for GPU health: finds NVIDIA XID reports, "fallen off the bus" messages
// and the PCI-address → UUID lines in kernel log text.
//
// The NVIDIA driver reports GPU errors only in the kernel log (NVML's event API misses some
// and carries no process or MIG details). The lines come in several generations:
//   NVRM: Xid (PCI:0000:3b:00): 119, pid='<unknown>', name=<unknown>, Timeout waiting ...
//   NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, Graphics Exception ...
//   NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 31, pid=..., name=..., ...   (MIG)
//   NVRM: Xid (PCI:0000:3b:00 GPU-I:01): 43, pid=..., ...                        (MIG)
//   NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.                  (older)
//   NVRM: Xid (0000:03:00): 14, Channel 00000001                                (very old)
//   NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 ...)
// and a GPU that stops answering on PCIe may be reported without any XID, as
//   NVRM: The NVIDIA GPU 0000:5d:00.0
//   NVRM: (PCI ID: 10de:2330) installed in this system has
//   NVRM: fallen off the bus and is not responding to commands.
// (one message with embedded newlines, which readers may also see as three records) or
//   NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.
// Both fallen-off forms become XID 79 events. Before a GPU's first XID the driver prints
// "NVRM: GPU at PCI:0000:3b:00: GPU-<uuid>", which maps the address to the NVML UUID.
//
// Lines may carry any prefix (dmesg "[  12.3] ", syslog "kernel: "); matching starts at
// "NVRM:". Bus IDs are normalised to gpulet's "0000:3b:00.0" (node/bus_id.h), so they join
// with NVML and sysfs. The parsers are hand-written, linear in the input, and never crash
// on malformed text (a fuzz target checks); text that is not a match gives nullopt.
//
// Thread-safety: the free functions are pure and safe to call concurrently. A
// KernelLogScanner keeps state between calls and must be used by one thread at a time.
#ifndef GPULET_HEALTH_XID_H_
#define GPULET_HEALTH_XID_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "health/xid_catalog.h"

namespace gpulet::health {

enum class XidSource {
  kXidLine,              // an "NVRM: Xid (...)" line
  kFallenOffBusMessage,  // a fallen-off-the-bus message without an XID, reported as 79
};

// The NVLink5 details XIDs 144-150 carry after the code.
struct NvlinkXidDetail {
  std::string unit;                  // "NETIR_LINK_EVT"
  std::optional<bool> fatal;         // "Fatal" / "Nonfatal" in the line
  std::optional<int> link;           // "Link 08"
  std::optional<uint32_t> intrinfo;  // first word in the parentheses
  std::optional<int> sub_code;       // bits 20-25 of intrinfo (NVIDIA's decode table key)

  friend bool operator==(const NvlinkXidDetail&, const NvlinkXidDetail&) = default;
};

struct XidEvent {
  std::string bus_id;  // normalised, e.g. "0000:3b:00.0" (the log omits the function: .0)
  int xid = 0;
  std::optional<int64_t> pid;           // absent for "'<unknown>'" or in older formats
  std::string process_name;             // "" when "<unknown>" or absent
  std::string message;                  // the free text after the code (and pid/name)
  std::optional<int> gpu_instance;      // MIG "GPU-I:NN"
  std::optional<int> compute_instance;  // MIG "GPU-CI:NN"
  XidSource source = XidSource::kXidLine;
  std::optional<NvlinkXidDetail> nvlink;  // XIDs 144-150 in the extended form

  friend bool operator==(const XidEvent&, const XidEvent&) = default;
};

// "NVRM: GPU at PCI:0000:3b:00: GPU-<uuid>".
struct GpuUuidMapping {
  std::string bus_id;  // normalised
  std::string uuid;    // "GPU-..."

  friend bool operator==(const GpuUuidMapping&, const GpuUuidMapping&) = default;
};

// One line (or record text without embedded newlines). nullopt when it is not an XID line.
std::optional<XidEvent> ParseXidLine(absl::string_view line);

// "NVRM: GPU at PCI:...: GPU-<uuid>"; nullopt otherwise.
std::optional<GpuUuidMapping> ParseGpuUuidLine(absl::string_view line);

// "NVRM: GPU 0000:18:00.0: GPU has fallen off the bus." as XID 79; nullopt otherwise.
// (The multi-line form needs KernelLogScanner.)
std::optional<XidEvent> ParseFallenOffBusLine(absl::string_view line);

using KernelLogFinding = std::variant<XidEvent, GpuUuidMapping>;

// Finds XIDs, fallen-off-bus messages and UUID mappings in a stream of kernel log text, fed
// record by record (or in any split at line boundaries). It keeps the start of a multi-line
// fallen-off-bus message so the message is recognised whether it arrives as one record with
// embedded newlines or as one record per line. A started message is dropped when its end
// does not follow within a few lines.
//
// A GPU that falls off the bus is typically reported more than once (an XID 79 line and a
// fallen-off message); the scanner reports each, with XidEvent::source telling them apart,
// and leaves de-duplication to the consumer, which knows the timestamps.
class KernelLogScanner {
 public:
  // Scans `text` (one or more lines separated by '\n') and returns what it completes, in
  // order.
  std::vector<KernelLogFinding> Scan(absl::string_view text);

  // Forgets a partly seen multi-line message (after a gap in the log, for example).
  void Reset();

 private:
  void ScanLine(absl::string_view line, std::vector<KernelLogFinding>* out);

  // The multi-line fallen-off-bus message being assembled.
  std::string pending_bus_id_;   // "" when none
  std::string pending_message_;  // its lines so far, without the "NVRM: " prefixes
  int pending_lines_ = 0;        // lines seen since it started
};

// Convenience: a fresh scanner over all of `text`.
std::vector<KernelLogFinding> ScanKernelLog(absl::string_view text);

// The catalogue entry for an event, adjusted by what the line itself says: XID 154 names the
// action the driver wants, and NVLink5 XIDs say whether they were fatal.
struct XidAssessment {
  XidInfo info;  // the catalogue entry (generic for unknown codes)
  XidSeverity severity = XidSeverity::kWarning;
  GpuAction action = GpuAction::kNone;
  GpuAction if_repeated = GpuAction::kNone;
  std::string adjustment;  // why severity/action differ from the catalogue; "" when they don't
};
XidAssessment AssessXid(const XidEvent& event);

}  // namespace gpulet::health

#endif  // GPULET_HEALTH_XID_H_
