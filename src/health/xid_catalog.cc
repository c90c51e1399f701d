#include "health/xid_catalog.h"

#include <algorithm>
#include <array>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace gpulet {
namespace {

using S = XidSeverity;
using A = GpuAction;

constexpr XidInfo Row(int code, absl::string_view mnemonic, absl::string_view meaning,
                      XidSeverity severity, GpuAction action, GpuAction if_repeated,
                      bool documented = true) {
  return XidInfo{code, mnemonic, meaning, severity, action, if_repeated, documented};
}

// Codes NVIDIA's catalogue marks unused on current GPUs still show up on older GPUs and
// drivers; gpud treats them as reboot-worthy, and an unexpected code from the driver is a
// reason to look closer, so they default to fatal with a reboot.
constexpr XidInfo Undocumented(int code, absl::string_view mnemonic, absl::string_view meaning) {
  return XidInfo{code, mnemonic, meaning, S::kFatal, A::kRebootNode, A::kContactSupport, false};
}

// Sorted by code (DescribeXid binary-searches; a test checks the order).
constexpr std::array kTable = {
    Row(8, "FIFO_ERROR_IDLE_TIMEOUT",
        "the GPU stopped processing: a channel sat idle with work still queued", S::kWarning,
        A::kRestartApp, A::kContactSupport),
    Undocumented(9, "GR_ERROR_INSTANCE",
                 "graphics engine instance error; NVIDIA documents no meaning for current GPUs"),
    Undocumented(12, "GR_ERROR_SW_METHOD",
                 "the driver failed handling a graphics engine exception; NVIDIA documents no "
                 "meaning for current GPUs"),
    Row(13, "GR_EXCEPTION",
        "graphics/compute engine exception, usually the application's fault (out-of-bounds "
        "access, illegal instruction)",
        S::kApplication, A::kRestartApp, A::kContactSupport),
    Undocumented(16, "VBLANK_CALLBACK_TIMEOUT",
                 "display engine timed out (vertical-blank callback); NVIDIA documents no meaning "
                 "for current GPUs"),
    Undocumented(18, "BUS_MASTER_TIMEOUT_ERROR",
                 "the GPU's PCIe bus-master (DMA) access timed out or was disabled; NVIDIA "
                 "documents no meaning for current GPUs"),
    Undocumented(19, "DISP_MISSED_NOTIFIER",
                 "display engine missed a notifier; NVIDIA documents no meaning for current GPUs"),
    Undocumented(26, "FIFO_ERROR_FBISTATE_TIMEOUT",
                 "frame-buffer interface timed out; NVIDIA documents no meaning for current GPUs"),
    Undocumented(27, "VP_ERROR",
                 "video processor exception; NVIDIA documents no meaning for current GPUs"),
    Undocumented(28, "VP2_ERROR",
                 "video processor exception; NVIDIA documents no meaning for current GPUs"),
    Undocumented(29, "BSP_ERROR",
                 "video bitstream processor exception; NVIDIA documents no meaning for current "
                 "GPUs"),
    Undocumented(30, "BAD_ADDR_ACCESS",
                 "a GPU engine accessed a bad address; NVIDIA documents no meaning for current "
                 "GPUs"),
    Row(31, "FIFO_ERROR_MMU_ERR_FLT",
        "GPU memory page fault, usually an application bug (rarely the driver or hardware)",
        S::kApplication, A::kRestartApp, A::kContactSupport),
    Row(32, "PBDMA_ERROR", "the GPU received an invalid or corrupted command (push buffer) stream",
        S::kWarning, A::kRestartApp, A::kContactSupport),
    Undocumented(33, "SEC_ERROR",
                 "security engine micro-controller error; NVIDIA documents no meaning for current "
                 "GPUs"),
    Undocumented(34, "MSVLD_ERROR",
                 "video decoder engine exception; NVIDIA documents no meaning for current GPUs"),
    Undocumented(35, "MSPDEC_ERROR",
                 "video decoder engine exception; NVIDIA documents no meaning for current GPUs"),
    Undocumented(36, "MSPPP_ERROR",
                 "video post-processor exception; NVIDIA documents no meaning for current GPUs"),
    Row(38, "FECS_ERR_WATCHDOG_TIMEOUT",
        "the driver's firmware on the GPU (context-switch controller) hit its watchdog",
        S::kWarning, A::kNone, A::kContactSupport),
    Undocumented(42, "VIC_ERROR",
                 "video image compositor exception; NVIDIA documents no meaning for current GPUs"),
    Row(43, "RESETCHANNEL_VERIF_ERROR",
        "one application's GPU channel stopped and was reset by the driver; other work is "
        "unaffected",
        S::kApplication, A::kRestartApp, A::kContactSupport),
    Row(44, "GR_FAULT_DURING_CTXSW", "the graphics engine faulted while switching between contexts",
        S::kWarning, A::kNone, A::kContactSupport),
    Row(45, "PREEMPTIVE_REMOVAL",
        "the driver cleaned up an application's work after an earlier error (look for the XID "
        "that came just before, often 48 or 79)",
        S::kApplication, A::kNone, A::kNone),
    Row(46, "GPU_TIMEOUT_ERROR", "the GPU stopped processing and did not recover", S::kFatal,
        A::kResetGpu, A::kContactSupport),
    Undocumented(47, "NVENC0_ERROR",
                 "video encoder (NVENC0) exception; NVIDIA documents no meaning for current GPUs"),
    Row(48, "GPU_ECC_DBE",
        "double-bit (uncorrectable) ECC error in GPU memory; the affected applications were "
        "stopped",
        S::kFatal, A::kResetGpu, A::kInspectHardware),
    Row(54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
        "the GPU's auxiliary power is not connected, so it runs at reduced clocks", S::kWarning,
        A::kInspectHardware, A::kInspectHardware),
    Undocumented(59, "PMU_ERROR",
                 "power-management micro-controller error; NVIDIA documents no meaning for "
                 "current GPUs"),
    Row(60, "SEC2_ERROR", "exception in the SEC2 micro-controller (video/security processor)",
        S::kWarning, A::kRestartApp, A::kContactSupport),
    Row(61, "PMU_BREAKPOINT",
        "an internal micro-controller hit a breakpoint or warning (not used on Ampere and newer)",
        S::kWarning, A::kContactSupport, A::kContactSupport),
    Row(62, "PMU_HALT_ERROR", "an internal micro-controller on the GPU halted", S::kFatal,
        A::kResetGpu, A::kContactSupport),
    Row(63, "INFOROM_DRAM_RETIREMENT_EVENT",
        "a GPU memory page was retired or a row remapped (recorded; a remap takes effect at the "
        "next GPU reset)",
        S::kWarning, A::kNone, A::kNone),
    Row(64, "INFOROM_DRAM_RETIREMENT_FAILURE",
        "retiring a failing GPU memory page or remapping a row failed", S::kFatal, A::kResetGpu,
        A::kInspectHardware),
    Undocumented(65, "NVENC1_ERROR",
                 "video encoder (NVENC1) exception; NVIDIA documents no meaning for current GPUs"),
    Row(68, "NVDEC0_ERROR", "the video decoder (NVDEC0) raised an exception", S::kApplication,
        A::kRestartApp, A::kContactSupport),
    Row(69, "GR_CLASS_ERROR", "the graphics engine rejected a command as invalid for its class",
        S::kWarning, A::kRestartApp, A::kContactSupport),
    Row(74, "NVLINK_ERROR", "an NVLink connection reported an error", S::kFatal, A::kResetGpu,
        A::kContactSupport),
    Undocumented(78, "VGPU_START_ERROR",
                 "a vGPU failed to start; usually a host driver or firmware that needs updating"),
    Row(79, "GPU_HAS_FALLEN_OFF_THE_BUS",
        "the GPU no longer answers over PCIe (fallen off the bus): hardware, power, thermal or "
        "PCIe link failure",
        S::kFatal, A::kRebootNode, A::kInspectHardware),
    Row(81, "VGA_SUBSYSTEM_ERROR", "error in the GPU's VGA subsystem", S::kFatal,
        A::kInspectHardware, A::kInspectHardware, false),
    Row(92, "EXCESSIVE_SBE_INTERRUPTS",
        "GPU memory reports single-bit (corrected) ECC errors at a high rate", S::kWarning,
        A::kNone, A::kContactSupport),
    Row(94, "CONTAINED_ERROR",
        "contained uncorrectable memory error: only the application using that memory was "
        "stopped",
        S::kApplication, A::kRestartApp, A::kNone),
    Row(95, "UNCONTAINED_ERROR",
        "uncontained uncorrectable memory error: every application on the GPU is affected",
        S::kFatal, A::kResetGpu, A::kInspectHardware),
    Row(109, "CTXSW_TIMEOUT_ERROR", "the GPU timed out switching between contexts", S::kWarning,
        A::kResetGpu, A::kContactSupport),
    Row(110, "SEC_FAULT_ERROR", "the GPU raised a security fault", S::kFatal, A::kResetGpu,
        A::kContactSupport),
    Row(119, "GSP_RPC_TIMEOUT",
        "the GPU System Processor (GSP) firmware did not answer a driver request in time",
        S::kFatal, A::kResetGpu, A::kContactSupport),
    Row(120, "GSP_ERROR", "the GPU System Processor (GSP) firmware reported an error", S::kFatal,
        A::kResetGpu, A::kContactSupport),
    Row(121, "C2C_ERROR", "error on the chip-to-chip link (Grace Hopper/Blackwell C2C)",
        S::kWarning, A::kNone, A::kContactSupport),
    Undocumented(123, "SPI_PMU_RPC_WRITE_FAIL",
                 "writing the GPU's SPI flash through its micro-controller failed; NVIDIA "
                 "documents no meaning for current GPUs"),
    Row(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "an uncorrectable ECC error escaped containment",
        S::kFatal, A::kResetGpu, A::kContactSupport),
    Row(143, "GPU_INIT_ERROR", "the GPU failed to initialise", S::kFatal, A::kResetGpu,
        A::kInspectHardware),
    Row(144, "NVLINK_SAW_ERROR", "NVLink5 error in the SAW unit (the line says Fatal or Nonfatal)",
        S::kWarning, A::kResetGpu, A::kContactSupport),
    Row(145, "NVLINK_RLW_ERROR", "NVLink5 error in the RLW unit (the line says Fatal or Nonfatal)",
        S::kWarning, A::kResetGpu, A::kContactSupport),
    Row(146, "NVLINK_TLW_ERROR", "NVLink5 error in the TLW unit (the line says Fatal or Nonfatal)",
        S::kWarning, A::kResetGpu, A::kContactSupport),
    Row(147, "NVLINK_TREX_ERROR",
        "NVLink5 error in the TREX unit (the line says Fatal or Nonfatal)", S::kWarning,
        A::kResetGpu, A::kContactSupport),
    Row(148, "NVLINK_NVLPW_CTRL_ERROR",
        "NVLink5 error in the NVLPW control unit (the line says Fatal or Nonfatal)", S::kWarning,
        A::kResetGpu, A::kContactSupport),
    Row(149, "NVLINK_NETIR_ERROR",
        "NVLink5 error in the NETIR unit (the line says Fatal or Nonfatal)", S::kWarning,
        A::kResetGpu, A::kContactSupport),
    Row(150, "NVLINK_MSE_ERROR", "NVLink5 error in the MSE unit (the line says Fatal or Nonfatal)",
        S::kWarning, A::kResetGpu, A::kContactSupport),
    Row(154, "GPU_RECOVERY_ACTION_CHANGED",
        "the driver announces the recovery action an earlier XID requires (read the action "
        "named in the line)",
        S::kWarning, A::kNone, A::kNone),
    Row(155, "NVLINK_SW_DEFINED_ERROR", "software-defined NVLink error", S::kWarning, A::kResetGpu,
        A::kContactSupport),
    Row(156, "RESOURCE_RETIREMENT_EVENT",
        "the GPU retired an internal resource; a reset puts the change into effect", S::kWarning,
        A::kResetGpu, A::kNone),
    Row(158, "GPU_FATAL_TIMEOUT", "the GPU hit a fatal timeout", S::kFatal, A::kResetGpu,
        A::kContactSupport),
    Row(167, "PCIE_FATAL_TIMEOUT", "a PCIe transaction to the GPU hit a fatal timeout", S::kFatal,
        A::kRebootNode, A::kInspectHardware),
    Row(171, "UNCORRECTABLE_DRAM_ERROR",
        "detail for an XID 48: the uncorrectable error was in GPU DRAM (act on the 48)",
        S::kWarning, A::kNone, A::kNone),
    Row(172, "UNCORRECTABLE_SRAM_ERROR",
        "detail for an XID 48: the uncorrectable error was in on-chip SRAM (act on the 48)",
        S::kWarning, A::kNone, A::kNone),
};

constexpr std::array kApplicationXids = {13, 31, 43, 45, 68, 94};

struct ActionText {
  GpuAction action;
  absl::string_view name;
  absl::string_view description;
};

constexpr std::array kActions = {
    ActionText{A::kNone, "none", "Nothing to do now; the event is recorded."},
    ActionText{A::kRestartApp, "restart-app",
               "Restart the workload that hit the error; the GPU can keep running other work."},
    ActionText{A::kResetGpu, "reset-gpu",
               "Stop the GPU's workloads and reset it (`nvidia-smi -r -i <gpu>`), or reboot the "
               "node where a reset is not possible."},
    ActionText{A::kRebootNode, "reboot-node",
               "Drain the node and reboot it; the GPU cannot recover without a reboot."},
    ActionText{A::kInspectHardware, "inspect-hardware",
               "Take the GPU out of service and have the card, its power cabling and its PCIe "
               "slot inspected (RMA the card if it is faulty)."},
    ActionText{A::kContactSupport, "contact-support",
               "Collect `nvidia-bug-report.sh` output and the kernel log and escalate to NVIDIA "
               "or the hardware vendor."},
};

}  // namespace

XidInfo DescribeXid(int code) {
  if (const XidInfo* info = FindXid(code)) return *info;
  return XidInfo{code,
                 "UNKNOWN_XID",
                 "an XID this gpulet version does not know; look it up in NVIDIA's Xid catalogue",
                 S::kWarning,
                 A::kContactSupport,
                 A::kContactSupport,
                 false};
}

const XidInfo* FindXid(int code) {
  auto it = std::lower_bound(kTable.begin(), kTable.end(), code,
                             [](const XidInfo& e, int c) { return e.code < c; });
  if (it != kTable.end() && it->code == code) return &*it;
  return nullptr;
}

std::span<const XidInfo> AllXids() { return kTable; }

std::span<const int> DefaultApplicationXids() { return kApplicationXids; }

bool IsDefaultApplicationXid(int code) {
  return std::find(kApplicationXids.begin(), kApplicationXids.end(), code) !=
         kApplicationXids.end();
}

absl::string_view XidSeverityName(XidSeverity severity) {
  switch (severity) {
    case S::kApplication:
      return "application";
    case S::kWarning:
      return "warning";
    case S::kFatal:
      return "fatal";
  }
  return "unknown";
}

absl::string_view GpuActionName(GpuAction action) {
  for (const ActionText& a : kActions) {
    if (a.action == action) return a.name;
  }
  return "unknown";
}

absl::string_view GpuActionDescription(GpuAction action) {
  for (const ActionText& a : kActions) {
    if (a.action == action) return a.description;
  }
  return "Unknown action.";
}

std::optional<GpuAction> ParseGpuAction(absl::string_view name) {
  std::string normal = absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  std::replace(normal.begin(), normal.end(), '_', '-');
  for (const ActionText& a : kActions) {
    if (normal == a.name) return a.action;
  }
  return std::nullopt;
}

std::optional<GpuAction> RecoveryActionFromXid154(absl::string_view message) {
  // "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)": only the
  // part after " to " is the new action; the "from" part names the old one.
  size_t to = message.rfind(" to ");
  if (to == absl::string_view::npos) return std::nullopt;
  std::string target = absl::AsciiStrToLower(message.substr(to + 4));
  // Order matters: "Drain and Reset" must win over plain "Drain".
  if (absl::StrContains(target, "reboot")) return A::kRebootNode;
  if (absl::StrContains(target, "reset")) return A::kResetGpu;
  if (absl::StrContains(target, "drain")) return A::kRestartApp;
  if (absl::StrContains(target, "none")) return A::kNone;
  return std::nullopt;
}

}  // namespace gpulet
