#include "gpu/nvml_errors.h"

#include <algorithm>
#include <array>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gpu/nvml_api.h"

namespace gpulet::gpu {
namespace {

// The payload key under which NvmlError stores the numeric NVML code.
constexpr absl::string_view kNvmlCodePayload = "gpulet.dev/nvml-return";

constexpr std::array kNvmlReturns = {
    NvmlReturnInfo{NVML_SUCCESS, "NVML_SUCCESS", "the call succeeded", "nothing to do"},
    NvmlReturnInfo{NVML_ERROR_UNINITIALIZED, "NVML_ERROR_UNINITIALIZED",
                   "NVML was used before nvmlInit or after nvmlShutdown (a gpulet bug)",
                   "report it with the log; restarting gpulet re-initialises NVML"},
    NvmlReturnInfo{NVML_ERROR_INVALID_ARGUMENT, "NVML_ERROR_INVALID_ARGUMENT",
                   "NVML rejected an argument; often a device handle that is no longer valid",
                   "restart gpulet; if it persists, report it with `gpulet list --json`"},
    NvmlReturnInfo{NVML_ERROR_NOT_SUPPORTED, "NVML_ERROR_NOT_SUPPORTED",
                   "this GPU or driver does not provide that value (normal on GeForce cards and "
                   "for some fields on older GPUs)",
                   "nothing to do; gpulet omits values a GPU does not support"},
    NvmlReturnInfo{NVML_ERROR_NO_PERMISSION, "NVML_ERROR_NO_PERMISSION",
                   "the process may not open the GPU device nodes (/dev/nvidia*), or a device "
                   "cgroup blocks them",
                   "run gpulet with the /dev/nvidia* devices mounted and allowed (the DaemonSet "
                   "in deploy/ does), or as root"},
    NvmlReturnInfo{NVML_ERROR_ALREADY_INITIALIZED, "NVML_ERROR_ALREADY_INITIALIZED",
                   "deprecated code: NVML was already initialised", "nothing to do"},
    NvmlReturnInfo{NVML_ERROR_NOT_FOUND, "NVML_ERROR_NOT_FOUND",
                   "the GPU, process or object asked for does not exist (anymore)",
                   "check `gpulet list`; the GPU may have been removed or renumbered"},
    NvmlReturnInfo{NVML_ERROR_INSUFFICIENT_SIZE, "NVML_ERROR_INSUFFICIENT_SIZE",
                   "a buffer was too small for the answer (gpulet retries with a larger one)",
                   "nothing to do unless it repeats; then report it"},
    NvmlReturnInfo{NVML_ERROR_INSUFFICIENT_POWER, "NVML_ERROR_INSUFFICIENT_POWER",
                   "the GPU's external power cables are not connected or not supplying enough "
                   "power",
                   "check the PCIe power connectors and the power supply of the node"},
    NvmlReturnInfo{NVML_ERROR_DRIVER_NOT_LOADED, "NVML_ERROR_DRIVER_NOT_LOADED",
                   "the nvidia kernel module is not loaded",
                   "load it (`modprobe nvidia`); on Talos list nvidia, nvidia_uvm, nvidia_drm and "
                   "nvidia_modeset under machine.kernel.modules and install the matching "
                   "-production kernel-module extension"},
    NvmlReturnInfo{NVML_ERROR_TIMEOUT, "NVML_ERROR_TIMEOUT",
                   "the driver did not answer in time; the GPU may be hung",
                   "check `gpulet doctor` and the kernel log for XIDs; a GPU reset or reboot may "
                   "be needed"},
    NvmlReturnInfo{NVML_ERROR_IRQ_ISSUE, "NVML_ERROR_IRQ_ISSUE",
                   "the kernel detected an interrupt problem with the GPU",
                   "check the kernel log (dmesg) for NVRM messages; reseat the card or reboot"},
    NvmlReturnInfo{NVML_ERROR_LIBRARY_NOT_FOUND, "NVML_ERROR_LIBRARY_NOT_FOUND",
                   "libnvidia-ml.so.1 could not be found or loaded",
                   "install the NVIDIA driver user-space libraries (on Talos the "
                   "nvidia-container-toolkit-production extension) or pass --nvml-lib PATH"},
    NvmlReturnInfo{NVML_ERROR_FUNCTION_NOT_FOUND, "NVML_ERROR_FUNCTION_NOT_FOUND",
                   "the loaded libnvidia-ml is too old to have this function",
                   "nothing to do for optional values; upgrade the driver to get them"},
    NvmlReturnInfo{NVML_ERROR_CORRUPTED_INFOROM, "NVML_ERROR_CORRUPTED_INFOROM",
                   "the GPU's infoROM (on-board configuration memory) is corrupted",
                   "the GPU may work but is suspect: schedule an RMA or an infoROM update"},
    NvmlReturnInfo{NVML_ERROR_GPU_IS_LOST, "NVML_ERROR_GPU_IS_LOST",
                   "the GPU has fallen off the bus or is otherwise inaccessible (like XID 79)",
                   "drain the node and reboot it; if it repeats, inspect the card, its power and "
                   "its PCIe slot"},
    NvmlReturnInfo{NVML_ERROR_RESET_REQUIRED, "NVML_ERROR_RESET_REQUIRED",
                   "the GPU needs a reset before it can be used again",
                   "stop its workloads and reset it (`nvidia-smi -r -i <gpu>`) or reboot the node"},
    NvmlReturnInfo{NVML_ERROR_OPERATING_SYSTEM, "NVML_ERROR_OPERATING_SYSTEM",
                   "the operating system blocked the call (often device cgroups after a systemd "
                   "daemon-reload)",
                   "use CDI for device injection, or create the /dev/char symlinks for NVIDIA "
                   "devices; restart the affected pod"},
    NvmlReturnInfo{NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
                   "the user-space driver libraries and the loaded kernel module are different "
                   "versions: the driver was upgraded without a reboot",
                   "reboot the node (or unload and reload the nvidia modules); on Talos keep the "
                   "kernel-module and container-toolkit extensions on the same driver version"},
    NvmlReturnInfo{NVML_ERROR_IN_USE, "NVML_ERROR_IN_USE",
                   "the operation cannot run while the GPU is in use",
                   "stop the GPU's workloads and retry"},
    NvmlReturnInfo{NVML_ERROR_MEMORY, "NVML_ERROR_MEMORY",
                   "the driver ran out of host memory for the request",
                   "free memory on the node; check gpulet's and the driver's memory use"},
    NvmlReturnInfo{NVML_ERROR_NO_DATA, "NVML_ERROR_NO_DATA",
                   "no data is available yet for this query", "nothing to do; it is retried"},
    NvmlReturnInfo{NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
                   "ECC is enabled, which this vGPU configuration does not support",
                   "disable ECC or change the vGPU profile"},
    NvmlReturnInfo{NVML_ERROR_INSUFFICIENT_RESOURCES, "NVML_ERROR_INSUFFICIENT_RESOURCES",
                   "the GPU or driver lacks resources for the request",
                   "retry later; free GPU resources held by other processes"},
    NvmlReturnInfo{NVML_ERROR_FREQ_NOT_SUPPORTED, "NVML_ERROR_FREQ_NOT_SUPPORTED",
                   "the requested clock frequency is not supported", "nothing to do"},
    NvmlReturnInfo{NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
                   "the driver does not understand the version of a struct gpulet passed (the "
                   "driver is older than the call)",
                   "nothing to do; gpulet falls back to the older call"},
    NvmlReturnInfo{NVML_ERROR_DEPRECATED, "NVML_ERROR_DEPRECATED",
                   "the driver no longer supports this call", "nothing to do"},
    NvmlReturnInfo{NVML_ERROR_NOT_READY, "NVML_ERROR_NOT_READY",
                   "the GPU is not ready yet (still initialising)",
                   "wait; gpulet retries on its next round"},
    NvmlReturnInfo{NVML_ERROR_GPU_NOT_FOUND, "NVML_ERROR_GPU_NOT_FOUND",
                   "the GPU was not found (removed, or its handle became stale)",
                   "check `gpulet list`, the kernel log and `lspci`"},
    NvmlReturnInfo{NVML_ERROR_INVALID_STATE, "NVML_ERROR_INVALID_STATE",
                   "the GPU is in a state that does not allow the request",
                   "check `gpulet doctor`; a reset may be needed"},
    NvmlReturnInfo{NVML_ERROR_RESET_TYPE_NOT_SUPPORTED, "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED",
                   "the requested reset type is not supported on this GPU",
                   "reboot the node instead"},
    NvmlReturnInfo{NVML_ERROR_UNKNOWN, "NVML_ERROR_UNKNOWN",
                   "the driver reported an unknown error (inside containers often lost device "
                   "access after a systemd daemon-reload)",
                   "restart the pod; if it repeats, use CDI device injection and check the "
                   "kernel log for XIDs"},
};

constexpr NvmlReturnInfo kUnrecognised{-1, "NVML_ERROR_UNRECOGNISED",
                                       "a return code this gpulet version does not know",
                                       "check the driver release notes; report it"};

absl::StatusCode CodeFor(int nvml_code) {
  switch (nvml_code) {
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return absl::StatusCode::kUnimplemented;
    case NVML_ERROR_NOT_FOUND:
    case NVML_ERROR_GPU_NOT_FOUND:
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return absl::StatusCode::kNotFound;
    case NVML_ERROR_NO_PERMISSION:
      return absl::StatusCode::kPermissionDenied;
    case NVML_ERROR_TIMEOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_RESET_REQUIRED:
    case NVML_ERROR_NOT_READY:
      return absl::StatusCode::kUnavailable;
    case NVML_ERROR_DRIVER_NOT_LOADED:
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
    case NVML_ERROR_UNINITIALIZED:
    case NVML_ERROR_INSUFFICIENT_POWER:
    case NVML_ERROR_INVALID_STATE:
      return absl::StatusCode::kFailedPrecondition;
    case NVML_ERROR_INVALID_ARGUMENT:
      return absl::StatusCode::kInvalidArgument;
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
    case NVML_ERROR_MEMORY:
      return absl::StatusCode::kResourceExhausted;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

const NvmlReturnInfo& DescribeNvmlReturn(int code) {
  auto it = std::lower_bound(kNvmlReturns.begin(), kNvmlReturns.end(), code,
                             [](const NvmlReturnInfo& e, int c) { return e.code < c; });
  if (it != kNvmlReturns.end() && it->code == code) return *it;
  return kUnrecognised;
}

std::span<const NvmlReturnInfo> AllNvmlReturns() { return kNvmlReturns; }

const NvmlReturnInfo* FindNvmlReturnByName(absl::string_view name) {
  std::string upper = absl::AsciiStrToUpper(name);
  for (const NvmlReturnInfo& e : kNvmlReturns) {
    absl::string_view full = e.name;
    absl::string_view shorter = full;
    if (absl::StartsWith(shorter, "NVML_ERROR_")) shorter.remove_prefix(11);
    if (upper == full || upper == shorter) return &e;
  }
  return nullptr;
}

absl::Status NvmlError(int code, absl::string_view call, absl::string_view context) {
  const NvmlReturnInfo& info = DescribeNvmlReturn(code);
  std::string msg =
      absl::StrCat(call, context.empty() ? "" : " (", context, context.empty() ? "" : ")",
                   " failed: ", info.name, " (", code, "): ", info.cause, ". Fix: ", info.fix);
  absl::Status status(CodeFor(code), msg);
  status.SetPayload(kNvmlCodePayload, absl::Cord(absl::StrCat(code)));
  return status;
}

absl::Status WithNvmlCode(absl::Status status, int code) {
  if (!status.ok() && code >= 0) {
    status.SetPayload(kNvmlCodePayload, absl::Cord(absl::StrCat(code)));
  }
  return status;
}

int NvmlCodeOf(const absl::Status& status) {
  auto payload = status.GetPayload(kNvmlCodePayload);
  if (!payload) return -1;
  int code = -1;
  if (!absl::SimpleAtoi(std::string(*payload), &code)) return -1;
  return code;
}

}  // namespace gpulet::gpu
