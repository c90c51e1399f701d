#include "health/xid_catalog.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace gpulet::health {
namespace {

using S = XidSeverity;
using A = GpuAction;
using B = XidBucket;

constexpr XidInfo X(int code, absl::string_view mnemonic, absl::string_view meaning,
                    XidSeverity severity, GpuAction action, GpuAction if_repeated, bool documented,
                    XidBucket immediate, XidBucket investigatory, unsigned generations) {
  return XidInfo{code,        mnemonic,   meaning,   severity,      action,
                 if_repeated, documented, immediate, investigatory, generations};
}

// The table: every code NVIDIA's Xid catalogue lists, 1-172.
//
// Provenance. Codes, mnemonics, both resolution buckets and the "Applies to A100 / H100 /
// B100 / GB200" columns are NVIDIA's, from "Analyzing Xid Errors with the Xid Catalog",
// https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (the table and its
// downloadable Xid-Catalog.xlsx, also vendored as generated Go by leptonai/gpud,
// components/accelerator/nvidia/xid/catalog_generated.go, generated 2025-10-29). Meanings
// are gpulet's own words. Severity, action and if_repeated are gpulet's reading of the
// buckets (GpuActionForBucket for the immediate one; investigatory CONTACT_SUPPORT,
// CHECK_APP/CUDA and INVESTIGATE_SW* as contact-support, INVESTIGATE_LINK_SI,
// CHECK_MECHANICALS and WORKFLOW_XID_48 as inspect-hardware); rows where gpulet departs from
// that reading say so in a comment. Codes NVIDIA marks unused on current GPUs still show up
// on older GPUs and drivers; gpud treats them as reboot-worthy, and an unexpected code from
// the driver is a reason to look closer, so they default to fatal with a reboot
// (documented = false). Rows 162-172 have no bucket in the catalogue (only guidance text).
//
// Sorted by code (FindXid binary-searches; a test checks the order).
constexpr std::array kTable = {
    X(1, "FIFO_ERROR_FIFO_METHOD",
      "host interface (FIFO) method error; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(2, "FIFO_ERROR_SW_METHOD",
      "host interface (FIFO) software method error; NVIDIA lists the code as unused on current "
      "GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(3, "FIFO_ERROR_UNK_METHOD",
      "host interface (FIFO) received an unknown method; NVIDIA lists the code as unused on "
      "current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(4, "FIFO_ERROR_CHANNEL_BUSY",
      "host interface (FIFO) channel busy; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(5, "FIFO_ERROR_RUNOUT_OVERFLOW",
      "host interface (FIFO) runout overflow; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(6, "FIFO_ERROR_PARSE_ERR",
      "host interface (FIFO) could not parse the command stream; NVIDIA lists the code as unused "
      "on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(7, "FIFO_ERROR_PTE_ERR",
      "host interface (FIFO) page-table entry error; NVIDIA lists the code as unused on current "
      "GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(8, "FIFO_ERROR_IDLE_TIMEOUT",
      "the GPU stopped processing: a channel sat idle with work still queued", S::kWarning,
      A::kRestartApp, A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(9, "GR_ERROR_INSTANCE",
      "graphics engine instance error; NVIDIA lists the code as unused on current GPUs", S::kFatal,
      A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(10, "GR_ERROR_SINGLE_STEP",
      "graphics engine single-step error; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(11, "GR_ERROR_MISSING_HW",
      "the GPU was sent an invalid or corrupted command (push buffer) stream", S::kWarning,
      A::kRestartApp, A::kContactSupport, true, B::kRestartApp, B::kCheckAppCuda,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(12, "GR_ERROR_SW_METHOD",
      "the driver failed handling a graphics engine software method; NVIDIA lists the code as "
      "unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(13, "GR_EXCEPTION",
      "graphics/compute engine exception, usually the application's fault (out-of-bounds access, "
      "illegal instruction)",
      S::kApplication, A::kRestartApp, A::kContactSupport, true, B::kRestartApp, B::kWorkflowXid13,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(14, "FAKE_ERROR",
      "a fake error injected from user space (testing); NVIDIA lists the code as unused on current "
      "GPUs",
      S::kWarning, A::kNone, A::kContactSupport, false, B::kIgnore, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(15, "SCANLINE_TIMEOUT",
      "display scanline timeout; NVIDIA lists the code as unused on current GPUs", S::kFatal,
      A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(16, "VBLANK_CALLBACK_TIMEOUT",
      "display engine timed out (vertical-blank callback); NVIDIA lists the code as unused on "
      "current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kContactSupport,
      kXidGenNone),
    X(17, "PARAMETER_ERROR", "parameter error; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(18, "BUS_MASTER_TIMEOUT_ERROR",
      "the GPU's PCIe bus-master (DMA) access timed out or was disabled; NVIDIA lists the code as "
      "unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(19, "DISP_MISSED_NOTIFIER",
      "display engine missed a notifier; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(20, "MPEG_ERROR_SW_METHOD",
      "MPEG engine software method error; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(21, "ME_ERROR_SW_METHOD",
      "motion-estimation engine software method error; NVIDIA lists the code as unused on current "
      "GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(22, "VP_ERROR_SW_METHOD",
      "video processor software method error; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(23, "RC_LOGGING_ENABLED",
      "robust-channel logging enabled; NVIDIA lists the code as unused on current GPUs", S::kFatal,
      A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(24, "GR_SEMAPHORE_TIMEOUT",
      "graphics engine semaphore timeout; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(25, "GR_ILLEGAL_NOTIFY",
      "the GPU was sent an invalid or illegal command (push buffer) stream", S::kWarning,
      A::kRestartApp, A::kContactSupport, true, B::kRestartApp, B::kCheckAppCuda,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(26, "FIFO_ERROR_FBISTATE_TIMEOUT",
      "frame-buffer interface timed out; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(27, "VP_ERROR", "video processor exception; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(28, "VP2_ERROR",
      "video processor (VP2) exception; NVIDIA lists the code as unused on current GPUs", S::kFatal,
      A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(29, "BSP_ERROR",
      "video bitstream processor exception; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(30, "BAD_ADDR_ACCESS",
      "a GPU engine accessed a bad address; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(31, "FIFO_ERROR_MMU_ERR_FLT",
      "GPU memory page fault, usually an application bug (rarely the driver or hardware)",
      S::kApplication, A::kRestartApp, A::kContactSupport, true, B::kRestartApp, B::kWorkflowXid31,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(32, "PBDMA_ERROR",
      "the GPU's DMA controller received an invalid or corrupted command stream, mostly a PCIe "
      "quality problem",
      S::kWarning, A::kRestartApp, A::kContactSupport, true, B::kRestartApp, B::kCheckAppCuda,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(33, "SEC_ERROR",
      "security engine micro-controller error; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(34, "MSVLD_ERROR",
      "video decoder engine (MSVLD) exception; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(35, "MSPDEC_ERROR",
      "video decoder engine (MSPDEC) exception; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(36, "MSPPP_ERROR",
      "video post-processor (MSPPP) exception; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(37, "FECS_ERR_UNIMP_FIRMWARE_METHOD",
      "the context-switch firmware (FECS) was asked for a method it does not implement",
      S::kWarning, A::kNone, A::kContactSupport, true, B::kIgnore, B::kCheckAppCuda,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(38, "FECS_ERR_WATCHDOG_TIMEOUT",
      "the context-switch firmware (FECS) on the GPU hit its watchdog", S::kWarning, A::kNone,
      A::kContactSupport, true, B::kIgnore, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(39, "CE0_ERROR", "copy engine 0 raised an exception", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(40, "CE1_ERROR", "copy engine 1 raised an exception", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(41, "CE2_ERROR", "copy engine 2 raised an exception", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(42, "VIC_ERROR",
      "video image compositor exception; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    // Catalogue: IGNORE. gpulet says restart-app: the application's channel was stopped.
    X(43, "RESETCHANNEL_VERIF_ERROR",
      "one application's GPU channel hit a software-induced fault and was stopped; the GPU stays "
      "healthy",
      S::kApplication, A::kRestartApp, A::kContactSupport, true, B::kIgnore, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(44, "GR_FAULT_DURING_CTXSW", "the graphics engine faulted while switching between contexts",
      S::kWarning, A::kNone, A::kContactSupport, true, B::kIgnore, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    // Catalogue investigatory: "Solo: RESTART_FM; Not Solo: IGNORE (follow other Xid)".
    X(45, "PREEMPTIVE_REMOVAL",
      "the driver tore down an application's work (abort, kill, reset, or an earlier error such as "
      "48 or 79)",
      S::kApplication, A::kNone, A::kNone, true, B::kWorkflowXid45, B::kRestartFm,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(46, "GPU_TIMEOUT_ERROR", "the GPU stopped processing and did not recover", S::kFatal,
      A::kResetGpu, A::kContactSupport, true, B::kResetGpu, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(47, "NVENC0_ERROR",
      "video encoder (NVENC0) exception; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(48, "GPU_ECC_DBE",
      "double-bit (uncorrectable) ECC error; the affected applications were told and stopped",
      S::kFatal, A::kResetGpu, A::kInspectHardware, true, B::kWorkflowXid48, B::kWorkflowXid48,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(49, "SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY",
      "silent running: a constant level was set by the registry; NVIDIA lists the code as unused "
      "on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(50, "SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR",
      "silent running: level changed after a robust-channel error; NVIDIA lists the code as unused "
      "on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(51, "SILENT_RUNNING_STRESS_TEST_FAILURE",
      "silent running: stress test failed; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(52, "SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE",
      "silent running: level changed after a temperature rise; NVIDIA lists the code as unused on "
      "current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(53, "SILENT_RUNNING_TEMP_REDUCED_CLOCKING",
      "silent running: clocks reduced for temperature; NVIDIA lists the code as unused on current "
      "GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    // Catalogue investigatory CONTACT_SUPPORT; gpulet: a cabling fault is a hardware inspection.
    X(54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
      "the board's auxiliary power is not connected, so the GPU runs at reduced clocks",
      S::kWarning, A::kInspectHardware, A::kInspectHardware, true, B::kCheckMechanicals,
      B::kContactSupport, kXidGenA100 | kXidGenH100 | kXidGenB100),
    X(55, "SILENT_RUNNING_TEMPERATURE_READ_ERROR",
      "silent running: the temperature could not be read; NVIDIA lists the code as unused on "
      "current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(56, "DISPLAY_CHANNEL_EXCEPTION",
      "display channel exception; NVIDIA lists the code as unused on current GPUs", S::kFatal,
      A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(57, "FB_LINK_TRAINING_FAILURE_ERROR",
      "frame-buffer link training failed; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(58, "FB_MEMORY_ERROR",
      "frame-buffer memory error; NVIDIA lists the code as unused on current GPUs", S::kFatal,
      A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(59, "PMU_ERROR",
      "power-management micro-controller error; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(60, "SEC2_ERROR", "exception in the SEC2 micro-controller (video/security processor)",
      S::kWarning, A::kRestartApp, A::kContactSupport, true, B::kRestartApp, B::kInvestigateSw,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    // Catalogue: unused on current GPUs; kept as a warning for older GPUs that still print it.
    X(61, "PMU_BREAKPOINT",
      "an internal micro-controller hit a breakpoint; NVIDIA lists the code as unused on current "
      "GPUs",
      S::kWarning, A::kContactSupport, A::kContactSupport, false, B::kContactSupport,
      B::kNotApplicable, kXidGenNone),
    X(62, "PMU_HALT_ERROR", "an internal micro-controller on the GPU halted", S::kFatal,
      A::kResetGpu, A::kContactSupport, true, B::kResetGpu, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    // gpulet also reads the row-remap state itself (liveness), which decides.
    X(63, "INFOROM_DRAM_RETIREMENT_EVENT",
      "a GPU memory row was marked for remapping or a page retired (takes effect at the next GPU "
      "reset)",
      S::kWarning, A::kNone, A::kNone, true, B::kIgnore, B::kIgnore,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(64, "INFOROM_DRAM_RETIREMENT_FAILURE",
      "remapping a failing GPU memory row or retiring a page failed", S::kFatal, A::kResetGpu,
      A::kInspectHardware, true, B::kResetGpu, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(65, "NVENC1_ERROR",
      "video encoder (NVENC1) exception; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(66, "FECS_ERR_REG_ACCESS_VIOLATION",
      "the driver made an illegal register access (context-switch firmware caught it)", S::kWarning,
      A::kNone, A::kContactSupport, true, B::kIgnore, B::kInvestigateSw,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(67, "FECS_ERR_VERIF_VIOLATION",
      "the driver made an illegal access (context-switch firmware verification)", S::kWarning,
      A::kNone, A::kContactSupport, true, B::kIgnore, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(68, "NVDEC0_ERROR", "the video decoder (NVDEC0) raised an exception", S::kApplication,
      A::kRestartApp, A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(69, "GR_CLASS_ERROR", "the graphics engine rejected a command as invalid for its class",
      S::kWarning, A::kRestartApp, A::kContactSupport, true, B::kRestartApp, B::kCheckAppCuda,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(70, "CE3_ERROR", "copy engine 3 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(71, "CE4_ERROR", "copy engine 4 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(72, "CE5_ERROR", "copy engine 5 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(73, "NVENC2_ERROR",
      "video encoder (NVENC2) exception; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(74, "NVLINK_ERROR",
      "an NVLink connection to another GPU or NVSwitch reported an error (the fault may be at the "
      "far end)",
      S::kFatal, A::kResetGpu, A::kContactSupport, true, B::kWorkflowNvlinkErr, B::kContactSupport,
      kXidGenA100 | kXidGenH100),
    X(75, "CE6_ERROR", "copy engine 6 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(76, "CE7_ERROR", "copy engine 7 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(77, "CE8_ERROR", "copy engine 8 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    // Catalogue: UPDATE_SWFW; gpulet has no update action, so contact-support.
    X(78, "VGPU_START_ERROR", "a vGPU failed to start; the host driver or firmware needs updating",
      S::kFatal, A::kContactSupport, A::kContactSupport, true, B::kUpdateSwFw, B::kUpdateSwFw,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    // Catalogue investigatory CONTACT_SUPPORT; gpulet: again after a reboot means hardware.
    X(79, "GPU_HAS_FALLEN_OFF_THE_BUS",
      "the GPU no longer answers over PCIe (fallen off the bus): PCIe link, power, thermal or GPU "
      "failure",
      S::kFatal, A::kRebootNode, A::kInspectHardware, true, B::kRestartBm, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(80, "PBDMA_PUSHBUFFER_CRC_MISMATCH",
      "data sent to the GPU arrived corrupted (command stream checksum mismatch)", S::kWarning,
      A::kRestartApp, A::kContactSupport, true, B::kRestartApp, B::kCheckAppCuda,
      kXidGenA100 | kXidGenH100),
    // Catalogue: unused on current GPUs; gpulet keeps its stricter older entry.
    X(81, "VGA_SUBSYSTEM_ERROR",
      "error in the GPU's VGA subsystem; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kInspectHardware, A::kInspectHardware, false, B::kContactSupport,
      B::kNotApplicable, kXidGenNone),
    X(82, "NVJPG0_ERROR", "the JPEG engine NVJPG0 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(83, "NVDEC1_ERROR", "the video decoder NVDEC1 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(84, "NVDEC2_ERROR", "the video decoder NVDEC2 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(85, "CE9_ERROR", "copy engine 9 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(86, "OFA0_ERROR", "the optical-flow accelerator OFA0 raised an exception", S::kWarning,
      A::kRestartApp, A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(87, "NVTELEMETRY_DRIVER_REPORT",
      "driver telemetry report; NVIDIA lists the code as unused on current GPUs", S::kFatal,
      A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(88, "NVDEC3_ERROR", "the video decoder NVDEC3 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(89, "NVDEC4_ERROR", "the video decoder NVDEC4 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(90, "LTC_ERROR", "level-two cache error; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(91, "RESERVED_XID", "reserved code; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(92, "EXCESSIVE_SBE_INTERRUPTS",
      "GPU memory reports single-bit (corrected) ECC errors at a high rate", S::kWarning, A::kNone,
      A::kContactSupport, true, B::kIgnore, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(93, "INFOROM_ERASE_LIMIT_EXCEEDED",
      "the driver could not update the InfoROM: its provisioned wear limit (set with nvflash) is "
      "reached",
      S::kWarning, A::kNone, A::kContactSupport, true, B::kIgnore, B::kContactSupport, kXidGenA100),
    // Catalogue investigatory: "IGNORE (sympathetic)".
    X(94, "CONTAINED_ERROR",
      "contained uncorrectable memory error: only the application using that memory was stopped",
      S::kApplication, A::kRestartApp, A::kNone, true, B::kRestartApp, B::kIgnore,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    // Catalogue investigatory: "IGNORE (sympathetic)"; gpulet: again after a reset, inspect.
    X(95, "UNCONTAINED_ERROR",
      "uncontained uncorrectable memory error: every application on the GPU is affected", S::kFatal,
      A::kResetGpu, A::kInspectHardware, true, B::kResetGpu, B::kIgnore,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(96, "NVDEC5_ERROR", "the video decoder NVDEC5 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(97, "NVDEC6_ERROR", "the video decoder NVDEC6 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(98, "NVDEC7_ERROR", "the video decoder NVDEC7 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(99, "NVJPG1_ERROR", "the JPEG engine NVJPG1 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(100, "NVJPG2_ERROR", "the JPEG engine NVJPG2 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(101, "NVJPG3_ERROR", "the JPEG engine NVJPG3 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(102, "NVJPG4_ERROR", "the JPEG engine NVJPG4 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(103, "NVJPG5_ERROR", "the JPEG engine NVJPG5 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(104, "NVJPG6_ERROR", "the JPEG engine NVJPG6 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(105, "NVJPG7_ERROR", "the JPEG engine NVJPG7 raised an error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(106, "SMBPBI_TEST_MESSAGE",
      "a test message sent through the out-of-band management interface (SMBPBI)", S::kWarning,
      A::kNone, A::kNone, true, B::kIgnore, B::kIgnore,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(107, "SMBPBI_TEST_MESSAGE_SILENT",
      "a silent test message sent through the out-of-band management interface (SMBPBI)",
      S::kWarning, A::kNone, A::kNone, true, B::kIgnore, B::kIgnore,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(108, "NVLINK_REMOTE_TRANSLATION_ERROR",
      "NVLink remote address translation error (listed as unused); NVIDIA lists the code as unused "
      "on current GPUs",
      S::kWarning, A::kNone, A::kContactSupport, false, B::kIgnore, B::kXid137Flow,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    // The NVIDIA device plugin ignores 109; gpulet keeps the GPU (warning) but asks for a reset.
    X(109, "CTXSW_TIMEOUT_ERROR", "the GPU timed out switching between contexts", S::kWarning,
      A::kResetGpu, A::kContactSupport, true, B::kResetGpu, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(110, "SEC_FAULT_ERROR", "the GPU raised a security fault; rare without a hardware failure",
      S::kFatal, A::kResetGpu, A::kContactSupport, true, B::kResetGpu, B::kInvestigateSw,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(111, "BUNDLE_ERROR_EVENT",
      "bundle error event; NVIDIA lists the code as unused on current GPUs", S::kFatal,
      A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(112, "DISP_SUPERVISOR_ERROR",
      "display supervisor error; NVIDIA lists the code as unused on current GPUs", S::kFatal,
      A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(113, "DP_LT_FAILURE",
      "DisplayPort link training failed; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(114, "HEAD_RG_UNDERFLOW",
      "display head raster-generator underflow; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(115, "CORE_CHANNEL_REGS",
      "display core channel register error; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(116, "WINDOW_CHANNEL_REGS",
      "display window channel register error; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(117, "CURSOR_CHANNEL_REGS",
      "display cursor channel register error; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(118, "HEAD_REGS",
      "display head register error; NVIDIA lists the code as unused on current GPUs", S::kFatal,
      A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(119, "GSP_RPC_TIMEOUT",
      "the GPU System Processor (GSP) firmware did not answer a driver request in time", S::kFatal,
      A::kResetGpu, A::kContactSupport, true, B::kResetGpu, B::kInvestigateSw,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(120, "GSP_ERROR", "code running on the GPU System Processor (GSP) reported an error",
      S::kFatal, A::kResetGpu, A::kContactSupport, true, B::kResetGpu, B::kInvestigateSw,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(121, "C2C_ERROR",
      "corrected errors on the chip-to-chip (C2C) link to the Grace CPU; a reset retrains the link",
      S::kWarning, A::kNone, A::kContactSupport, true, B::kIgnore, B::kContactSupport,
      kXidGenGB200),
    X(122, "SPI_PMU_RPC_READ_FAIL",
      "reading the GPU's SPI flash through its micro-controller failed; NVIDIA lists the code as "
      "unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(123, "SPI_PMU_RPC_WRITE_FAIL",
      "writing the GPU's SPI flash through its micro-controller failed; NVIDIA lists the code as "
      "unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(124, "SPI_PMU_RPC_ERASE_FAIL",
      "erasing the GPU's SPI flash through its micro-controller failed; NVIDIA lists the code as "
      "unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(125, "INFOROM_FS_ERROR",
      "InfoROM file system error; NVIDIA lists the code as unused on current GPUs", S::kFatal,
      A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(126, "CE10_ERROR", "copy engine 10 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport, kXidGenB100 | kXidGenGB200),
    X(127, "CE11_ERROR", "copy engine 11 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport, kXidGenB100 | kXidGenGB200),
    X(128, "CE12_ERROR", "copy engine 12 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport, kXidGenB100 | kXidGenGB200),
    X(129, "CE13_ERROR", "copy engine 13 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport, kXidGenB100 | kXidGenGB200),
    X(130, "CE14_ERROR", "copy engine 14 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport, kXidGenB100 | kXidGenGB200),
    X(131, "CE15_ERROR", "copy engine 15 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport, kXidGenB100 | kXidGenGB200),
    X(132, "CE16_ERROR", "copy engine 16 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport, kXidGenB100 | kXidGenGB200),
    X(133, "CE17_ERROR", "copy engine 17 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport, kXidGenB100 | kXidGenGB200),
    X(134, "CE18_ERROR", "copy engine 18 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport, kXidGenB100 | kXidGenGB200),
    X(135, "CE19_ERROR", "copy engine 19 reported an unknown error", S::kWarning, A::kRestartApp,
      A::kContactSupport, true, B::kRestartApp, B::kContactSupport, kXidGenB100 | kXidGenGB200),
    // Catalogue investigatory INVESTIGATE_LINK_SI: signal integrity, a hardware inspection.
    X(136, "ALI_TRAINING_FAIL", "NVLink link training (ALI) failed", S::kFatal, A::kResetGpu,
      A::kInspectHardware, true, B::kResetGpu, B::kInvestigateLinkSi, kXidGenH100),
    X(137, "NVLINK_PRIV_ERR",
      "the remote MMU reported an illegal NVLink peer-to-peer access, usually an application bug",
      S::kWarning, A::kNone, A::kContactSupport, true, B::kIgnore, B::kXid137Flow,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(138, "DLA_ERROR",
      "deep-learning accelerator (DLA) error; NVIDIA lists the code as unused on current GPUs",
      S::kFatal, A::kRebootNode, A::kContactSupport, false, B::kContactSupport, B::kNotApplicable,
      kXidGenNone),
    X(139, "OFA1_ERROR", "the optical-flow accelerator OFA1 raised an error", S::kWarning,
      A::kRestartApp, A::kContactSupport, true, B::kRestartApp, B::kContactSupport,
      kXidGenB100 | kXidGenGB200),
    X(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE",
      "an uncorrectable memory error escaped before the driver could remap or offline the memory",
      S::kFatal, A::kResetGpu, A::kContactSupport, true, B::kResetGpu, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(141, "FAST_PATH_ERROR", "CUDA fast-path error", S::kWarning, A::kNone, A::kContactSupport,
      true, B::kIgnore, B::kContactSupport, kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(142, "NVENC3_ERROR", "the video encoder NVENC3 raised an error", S::kWarning,
      A::kContactSupport, A::kContactSupport, true, B::kContactSupport, B::kNotPublished,
      kXidGenGB200),
    X(143, "GPU_INIT_ERROR", "the GPU failed to initialise", S::kFatal, A::kResetGpu,
      A::kInspectHardware, true, B::kResetGpu, B::kContactSupport,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(144, "NVLINK_SAW_ERROR", "NVLink5 error in the SAW unit; the line says Fatal or Nonfatal",
      S::kWarning, A::kResetGpu, A::kContactSupport, true, B::kWorkflowNvlink5Err,
      B::kWorkflowNvlink5Err, kXidGenB100 | kXidGenGB200),
    X(145, "NVLINK_RLW_ERROR", "NVLink5 error in the RLW unit; the line says Fatal or Nonfatal",
      S::kWarning, A::kResetGpu, A::kContactSupport, true, B::kWorkflowNvlink5Err,
      B::kWorkflowNvlink5Err, kXidGenB100 | kXidGenGB200),
    X(146, "NVLINK_TLW_ERROR", "NVLink5 error in the TLW unit; the line says Fatal or Nonfatal",
      S::kWarning, A::kResetGpu, A::kContactSupport, true, B::kWorkflowNvlink5Err,
      B::kWorkflowNvlink5Err, kXidGenB100 | kXidGenGB200),
    X(147, "NVLINK_TREX_ERROR", "NVLink5 error in the TREX unit; the line says Fatal or Nonfatal",
      S::kWarning, A::kResetGpu, A::kContactSupport, true, B::kWorkflowNvlink5Err,
      B::kWorkflowNvlink5Err, kXidGenB100 | kXidGenGB200),
    X(148, "NVLINK_NVLPW_CTRL_ERROR",
      "NVLink5 error in the NVLPW control unit; the line says Fatal or Nonfatal", S::kWarning,
      A::kResetGpu, A::kContactSupport, true, B::kWorkflowNvlink5Err, B::kWorkflowNvlink5Err,
      kXidGenB100 | kXidGenGB200),
    X(149, "NVLINK_NETIR_ERROR",
      "NVLink5 error in the NETIR unit (link events, bit-error rate); the line says Fatal or "
      "Nonfatal",
      S::kWarning, A::kResetGpu, A::kContactSupport, true, B::kWorkflowNvlink5Err,
      B::kWorkflowNvlink5Err, kXidGenB100 | kXidGenGB200),
    X(150, "NVLINK_MSE_ERROR",
      "NVLink5 error in the MSE unit (firmware watchdog); the line says Fatal or Nonfatal",
      S::kWarning, A::kResetGpu, A::kContactSupport, true, B::kWorkflowNvlink5Err,
      B::kWorkflowNvlink5Err, kXidGenB100 | kXidGenGB200),
    // Catalogue: RESTART_VM (confidential computing); gpulet maps it to reboot-node.
    X(151, "KEY_ROTATION_ERROR", "rotating the confidential-computing encryption keys failed",
      S::kFatal, A::kRebootNode, A::kContactSupport, true, B::kRestartVm, B::kContactSupport,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(152, "DLA_SMMU_ERROR", "deep-learning accelerator (DLA) SMMU error", S::kWarning, A::kNone,
      A::kContactSupport, true, B::kIgnore, B::kContactSupport, kXidGenNone),
    X(153, "DLA_TIMEOUT", "deep-learning accelerator (DLA) timeout", S::kWarning, A::kNone,
      A::kContactSupport, true, B::kIgnore, B::kContactSupport, kXidGenNone),
    X(154, "GPU_RECOVERY_ACTION_CHANGED",
      "the driver announces the recovery action earlier XIDs require (read the action named in the "
      "line)",
      S::kWarning, A::kNone, A::kNone, true, B::kXid154, B::kNotApplicable,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(155, "NVLINK_SW_DEFINED_ERROR",
      "an NVLink went down on purpose (software-defined, including sleep transitions)", S::kWarning,
      A::kResetGpu, A::kContactSupport, true, B::kResetGpu, B::kInvestigateSwUser,
      kXidGenB100 | kXidGenGB200),
    X(156, "RESOURCE_RETIREMENT_EVENT",
      "the GPU retired an internal resource; a reset puts the change into effect", S::kWarning,
      A::kResetGpu, A::kNone, true, B::kResetGpu, B::kIgnore,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(157, "RESOURCE_RETIREMENT_FAILURE",
      "the GPU could not retire a failing resource (none left); the same XID may come back",
      S::kWarning, A::kNone, A::kContactSupport, true, B::kIgnore, B::kContactSupport,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    X(158, "GPU_FATAL_TIMEOUT", "the GPU hit a fatal timeout", S::kFatal, A::kResetGpu,
      A::kContactSupport, true, B::kResetGpu, B::kContactSupport,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    // Catalogue: CHECK_UVM; gpulet maps it to restart-app (the UVM user).
    X(159, "CHI_NON_DATA_ERROR", "non-data error on the CHI (C2C) interface to the CPU",
      S::kWarning, A::kRestartApp, A::kContactSupport, true, B::kCheckUvm,
      B::kSympatheticReportSolo, kXidGenB100 | kXidGenGB200),
    X(160, "CHANNEL_RETIREMENT_EVENT", "the driver retired a GPU channel", S::kWarning, A::kNone,
      A::kContactSupport, true, B::kIgnore, B::kInvestigateSw, kXidGenB100 | kXidGenGB200),
    X(161, "CHANNEL_RETIREMENT_FAILURE", "the driver failed to retire a GPU channel", S::kWarning,
      A::kNone, A::kContactSupport, true, B::kIgnore, B::kInvestigateSw,
      kXidGenB100 | kXidGenGB200),
    X(162, "PSHC_REENGAGED", "the power-smoothing circuitry is working again", S::kWarning,
      A::kNone, A::kNone, true, B::kNotPublished, B::kNotPublished, kXidGenB100 | kXidGenGB200),
    X(163, "PSHC_DISENGAGED",
      "the power-smoothing circuitry switched off (thermal events or a timeout); no reset needed",
      S::kWarning, A::kNone, A::kNone, true, B::kNotPublished, B::kNotPublished,
      kXidGenB100 | kXidGenGB200),
    // No bucket; catalogue text: expect to replace the GPU if power smoothing is wanted.
    X(164, "PSHC_LOW_LIFETIME",
      "the power-smoothing circuitry is near the end of its lifetime and will soon be disabled",
      S::kWarning, A::kNone, A::kInspectHardware, true, B::kNotPublished, B::kNotPublished,
      kXidGenB100 | kXidGenGB200),
    // No bucket; catalogue text: replace the GPU if power swings are not acceptable.
    X(165, "PSHC_ZERO_LIFETIME",
      "the power-smoothing circuitry is worn out and disabled: power swings will reach the data "
      "centre",
      S::kWarning, A::kNone, A::kInspectHardware, true, B::kNotPublished, B::kNotPublished,
      kXidGenB100 | kXidGenGB200),
    // No bucket; confidential-computing mode only.
    X(166, "NVLINK_SECURE_CRYPTO_ERR",
      "confidential-computing traffic arrived on an NVLink before encryption was set up",
      S::kWarning, A::kNone, A::kContactSupport, true, B::kNotPublished, B::kNotPublished,
      kXidGenB100 | kXidGenGB200),
    // No bucket in the catalogue; gpulet's judgement (gpud reboots on it).
    X(167, "PCIE_FATAL_TIMEOUT", "a PCIe transaction to the GPU hit a fatal timeout", S::kFatal,
      A::kRebootNode, A::kInspectHardware, true, B::kNotPublished, B::kNotPublished,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    // No bucket; catalogue text: enable ECC or boot again (shifted WPR).
    X(168, "REDUCED_GPU_MEMORY_CAPACITY",
      "errors in the write-protected region (WPR) of GPU memory; seen with ECC disabled",
      S::kWarning, A::kRebootNode, A::kContactSupport, true, B::kNotPublished, B::kNotPublished,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    // No bucket; treated like XID 62 (micro-controller halt).
    X(169, "SEC2_HALT_ERROR", "the SEC2 micro-controller on the GPU halted", S::kFatal,
      A::kResetGpu, A::kContactSupport, true, B::kNotPublished, B::kNotPublished,
      kXidGenH100 | kXidGenB100 | kXidGenGB200),
    // No bucket; confidential-computing mode only.
    X(170, "NVLINK_SECURE_OTHER", "an unexpected NVLink interrupt in confidential-computing mode",
      S::kWarning, A::kNone, A::kContactSupport, true, B::kNotPublished, B::kNotPublished,
      kXidGenB100 | kXidGenGB200),
    // No bucket; the XID 48 it accompanies decides.
    X(171, "UNCORRECTABLE_DRAM_ERROR",
      "detail for an XID 48: the uncorrectable error was in GPU DRAM (act on the 48)", S::kWarning,
      A::kNone, A::kNone, true, B::kNotPublished, B::kNotPublished,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
    // No bucket; the XID 48 it accompanies decides.
    X(172, "UNCORRECTABLE_SRAM_ERROR",
      "detail for an XID 48: the uncorrectable error was in on-chip SRAM (act on the 48)",
      S::kWarning, A::kNone, A::kNone, true, B::kNotPublished, B::kNotPublished,
      kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200),
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

struct BucketText {
  XidBucket bucket;
  absl::string_view name;
  absl::string_view description;
};

constexpr std::array kBuckets = {
    BucketText{B::kNotPublished, "", "NVIDIA publishes no resolution bucket for this code."},
    BucketText{B::kNotApplicable, "N/A", "Nothing to do for this code itself."},
    BucketText{B::kIgnore, "IGNORE", "No action needed; the event is informational."},
    BucketText{B::kRestartApp, "RESTART_APP", "Restart the application that hit the error."},
    BucketText{B::kRestartVm, "RESTART_VM", "Restart the virtual machine that uses the GPU."},
    BucketText{B::kRestartFm, "RESTART_FM",
               "Restart NVIDIA Fabric Manager when this XID comes alone; otherwise act on the "
               "other XID."},
    BucketText{B::kResetGpu, "RESET_GPU", "Reset the GPU (or reboot the node)."},
    BucketText{B::kRestartBm, "RESTART_BM", "Reboot the bare-metal node."},
    BucketText{B::kCheckMechanicals, "CHECK_MECHANICALS",
               "Check the GPU's power cabling, seating and cooling."},
    BucketText{B::kCheckAppCuda, "CHECK_APP/CUDA",
               "Check the application and its CUDA version for the fault."},
    BucketText{B::kCheckUvm, "CHECK_UVM", "Check the unified-memory (UVM) use and driver."},
    BucketText{B::kUpdateSwFw, "UPDATE_SWFW", "Update the driver and the GPU firmware."},
    BucketText{B::kInvestigateSw, "INVESTIGATE_SW",
               "Investigate the driver and system software (collect a bug report)."},
    BucketText{B::kInvestigateSwUser, "INVESTIGATE_SW_USER",
               "Investigate what software or user action caused the event."},
    BucketText{B::kInvestigateLinkSi, "INVESTIGATE_LINK_SI",
               "Investigate the link's signal integrity (cables, connectors, board)."},
    BucketText{B::kContactSupport, "CONTACT_SUPPORT",
               "Collect nvidia-bug-report.sh output and contact NVIDIA or the vendor."},
    BucketText{B::kSympatheticReportSolo, "SYMPATHETIC_REPORT_SOLO",
               "Act only when no other XID explains it; otherwise follow that XID."},
    BucketText{B::kWorkflowXid13, "WORKFLOW_XID_13",
               "Debug the application (cuda-gdb, Compute Sanitizer); file a bug if inconclusive."},
    BucketText{B::kWorkflowXid31, "WORKFLOW_XID_31",
               "Debug the application (cuda-gdb, Compute Sanitizer); file a bug if inconclusive."},
    BucketText{B::kWorkflowXid45, "WORKFLOW_XID_45",
               "Look for the XID that caused the cleanup and act on that one."},
    BucketText{B::kWorkflowXid48, "WORKFLOW_XID_48",
               "Reset the GPU; check the SRAM error thresholds and return the GPU if exceeded."},
    BucketText{B::kWorkflowNvlinkErr, "WORKFLOW_NVLINK_ERR",
               "Decode the NVLink error registers in the line; reset the GPU or reboot."},
    BucketText{B::kWorkflowNvlink5Err, "WORKFLOW_NVLINK5_ERR",
               "Decode the NVLink5 sub-code in the line; its unit and status decide."},
    BucketText{B::kXid137Flow, "XID_137_FLOW",
               "Debug the application's peer-to-peer accesses; file a bug if inconclusive."},
    BucketText{B::kXid154, "XID_154", "Do what the line names as the recovery action."},
    BucketText{B::kXid154Eval, "XID_154_EVAL",
               "Act on the recovery action the following XID 154 announces."},
};

// NVIDIA's "XID 144-150 Decode" sheet, reduced to what the kernel line lets gpulet tell
// apart: the unit, by the V1 (before R575, bits 9:0) or V2 (R575 and later, bits 6:0) key.
struct NvlinkUnit {
  int xid;
  absl::string_view unit;
  int v1_key;  // bits 9:0, -1 where V1 has no key of its own
  int v2_key;  // bits 6:0
  XidBucket immediate;
  XidBucket investigatory;
};

constexpr std::array kNvlinkUnits = {
    NvlinkUnit{144, "SAW_MVB", 0x021, 1, B::kResetGpu, B::kContactSupport},
    NvlinkUnit{145, "RLW_CTRL", 0x062, 3, B::kIgnore, B::kContactSupport},
    NvlinkUnit{145, "RLW_REMAP", 0x082, 4, B::kXid154Eval, B::kContactSupport},
    NvlinkUnit{145, "RLW_RSPCOL", 0x0a2, 5, B::kResetGpu, B::kContactSupport},
    NvlinkUnit{145, "RLW_RXPIPE", 0x0c2, 6, B::kIgnore, B::kContactSupport},
    NvlinkUnit{145, "RLW_SRC_TRACK", 0x0e2, 7, B::kResetGpu, B::kContactSupport},
    NvlinkUnit{145, "RLW_TAGSTATE", 0x102, 8, B::kResetGpu, B::kContactSupport},
    NvlinkUnit{146, "TLW_CTRL", 0x123, 9, B::kResetGpu, B::kContactSupport},
    NvlinkUnit{146, "TLW_RX_PIPE0", 0x143, 10, B::kResetGpu, B::kContactSupport},
    NvlinkUnit{146, "TLW_RX_PIPE1", -1, 11, B::kResetGpu, B::kContactSupport},
    NvlinkUnit{146, "TLW_TX_PIPE0", 0x163, 12, B::kResetGpu, B::kContactSupport},
    NvlinkUnit{146, "TLW_TX_PIPE1", -1, 13, B::kResetGpu, B::kContactSupport},
    NvlinkUnit{147, "TREX", 0x184, 14, B::kIgnore, B::kContactSupport},
    NvlinkUnit{148, "NVLPW_CTRL", 0x005, 15, B::kIgnore, B::kContactSupport},
    NvlinkUnit{149, "NETIR_INT", 0x006, 24, B::kResetGpu, B::kSympatheticReportSolo},
    NvlinkUnit{149, "NETIR_LINK_DOWN", 0x1c6, 17, B::kResetGpu, B::kSympatheticReportSolo},
    NvlinkUnit{149, "NETIR_BER_EVENT", 0x226, 19, B::kIgnore, B::kInvestigateLinkSi},
    NvlinkUnit{149, "NETIR_MFDE_EVENT", 0x246, 20, B::kResetGpu, B::kContactSupport},
    NvlinkUnit{150, "MSE_WATCHDOG", 0x000, 0, B::kResetGpu, B::kContactSupport},
};

// NETIR_LINK_DOWN reasons (bits 25:20) and their buckets, from the same sheet. Reasons it
// does not list keep the unit's buckets.
struct LinkDownReason {
  int reason;
  XidBucket immediate;
  XidBucket investigatory;
};

constexpr std::array kLinkDownReasons = {
    LinkDownReason{0, B::kResetGpu, B::kSympatheticReportSolo},
    LinkDownReason{1, B::kResetGpu, B::kContactSupport},  // "REPORT_ISSUE (if seen >1 per day)"
    LinkDownReason{2, B::kResetGpu, B::kInvestigateLinkSi},
    LinkDownReason{4, B::kResetGpu, B::kInvestigateLinkSi},
    LinkDownReason{10, B::kResetGpu, B::kInvestigateLinkSi},
    LinkDownReason{15, B::kResetGpu, B::kInvestigateSwUser},
    LinkDownReason{16, B::kResetGpu, B::kInvestigateSwUser},  // "..._USER_LINK_SI"
    LinkDownReason{17, B::kResetGpu, B::kInvestigateSwUser},
    LinkDownReason{18, B::kResetGpu, B::kInvestigateSwUser},  // "..._USER_LINK_SI"
    LinkDownReason{21, B::kResetGpu, B::kContactSupport},     // "INVESTIGATE_PEER_DEVICE"
    LinkDownReason{22, B::kResetGpu, B::kInvestigateSwUser},
    LinkDownReason{32, B::kResetGpu, B::kContactSupport},  // peer device: far end failed
    LinkDownReason{33, B::kResetGpu, B::kContactSupport},
    LinkDownReason{34, B::kResetGpu, B::kContactSupport},
    LinkDownReason{35, B::kResetGpu, B::kContactSupport},
    LinkDownReason{36, B::kResetGpu, B::kContactSupport},
    LinkDownReason{37, B::kResetGpu, B::kContactSupport},
    LinkDownReason{38, B::kIgnore, B::kInvestigateSwUser},
    LinkDownReason{40, B::kIgnore, B::kInvestigateSw},        // "INVESTIGATE_HOST"
    LinkDownReason{42, B::kResetGpu, B::kInvestigateLinkSi},  // "..._SI_AND_CABLES"
    LinkDownReason{43, B::kResetGpu, B::kInvestigateLinkSi},
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
                 false,
                 B::kNotPublished,
                 B::kNotPublished,
                 kXidGenNone};
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

absl::string_view XidBucketName(XidBucket bucket) {
  for (const BucketText& b : kBuckets) {
    if (b.bucket == bucket) return b.name;
  }
  return "UNKNOWN";
}

absl::string_view XidBucketDescription(XidBucket bucket) {
  for (const BucketText& b : kBuckets) {
    if (b.bucket == bucket) return b.description;
  }
  return "Unknown bucket.";
}

std::optional<XidBucket> ParseXidBucket(absl::string_view name) {
  std::string normal = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(name));
  if (normal.empty()) return std::nullopt;
  if (normal == "UPDATE_SW") return B::kUpdateSwFw;
  for (const BucketText& b : kBuckets) {
    if (normal == b.name) return b.bucket;
  }
  return std::nullopt;
}

GpuAction GpuActionForBucket(XidBucket bucket) {
  switch (bucket) {
    case B::kNotPublished:
    case B::kNotApplicable:
    case B::kIgnore:
    case B::kWorkflowXid45:
    case B::kXid154:
    case B::kXid154Eval:
    case B::kSympatheticReportSolo:
      return A::kNone;
    case B::kRestartApp:
    case B::kCheckAppCuda:
    case B::kCheckUvm:
    case B::kWorkflowXid13:
    case B::kWorkflowXid31:
    case B::kXid137Flow:
      return A::kRestartApp;
    case B::kResetGpu:
    case B::kWorkflowXid48:
    case B::kWorkflowNvlinkErr:
    case B::kWorkflowNvlink5Err:
    case B::kRestartFm:
      return A::kResetGpu;
    case B::kRestartBm:
    case B::kRestartVm:
      return A::kRebootNode;
    case B::kCheckMechanicals:
    case B::kInvestigateLinkSi:
      return A::kInspectHardware;
    case B::kUpdateSwFw:
    case B::kInvestigateSw:
    case B::kInvestigateSwUser:
    case B::kContactSupport:
      return A::kContactSupport;
  }
  return A::kContactSupport;
}

std::string XidGenerationsText(unsigned generations) {
  std::string out;
  const std::pair<unsigned, const char*> kNames[] = {
      {kXidGenA100, "A100"}, {kXidGenH100, "H100"}, {kXidGenB100, "B100"}, {kXidGenGB200, "GB200"}};
  for (const auto& [bit, name] : kNames) {
    if ((generations & bit) == 0) continue;
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out.empty() ? "none listed" : out;
}

std::optional<Nvlink5Decode> DecodeNvlink5(int xid, uint32_t intrinfo) {
  if (xid < 144 || xid > 150) return std::nullopt;
  const NvlinkUnit* found = nullptr;
  absl::string_view format;
  // V1 first: its keys are 10 bits wide, so a V2 word matching one by chance is unlikely;
  // the reverse (a V1 word whose low 7 bits match a V2 key) is common.
  for (const NvlinkUnit& u : kNvlinkUnits) {
    if (u.xid == xid && u.v1_key >= 0 && static_cast<int>(intrinfo & 0x3ff) == u.v1_key) {
      found = &u;
      format = "V1 (before R575)";
      break;
    }
  }
  if (found == nullptr) {
    for (const NvlinkUnit& u : kNvlinkUnits) {
      if (u.xid == xid && static_cast<int>(intrinfo & 0x7f) == u.v2_key) {
        found = &u;
        format = "V2 (R575 and later)";
        break;
      }
    }
  }
  if (found == nullptr) return std::nullopt;
  Nvlink5Decode d;
  d.unit = found->unit;
  d.format = format;
  d.immediate = found->immediate;
  d.investigatory = found->investigatory;
  if (found->unit == "NETIR_LINK_DOWN") {
    int reason = static_cast<int>((intrinfo >> 20) & 0x3f);
    d.reason = reason;
    for (const LinkDownReason& r : kLinkDownReasons) {
      if (r.reason == reason) {
        d.immediate = r.immediate;
        d.investigatory = r.investigatory;
      }
    }
  }
  return d;
}

}  // namespace gpulet::health
