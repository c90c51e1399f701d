// The NVML return-code catalogue: every nvmlReturn_t value gpulet can meet, with its NVML
// name, a one-line plain-English cause and the fix a node operator should try.
//
// NVML's own nvmlErrorString() says *what* failed ("Driver Not Loaded"); operators in the
// field report needed *why* and *what next* ("list nvidia under machine.kernel.modules"), so
// every message gpulet prints about an NVML failure is built from this table.
//
// Thread-safety: the table is immutable; all functions are safe to call concurrently.
#ifndef GPULET_GPU_NVML_ERRORS_H_
#define GPULET_GPU_NVML_ERRORS_H_

#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpulet::gpu {

struct NvmlReturnInfo {
  int code;
  absl::string_view name;   // "NVML_ERROR_DRIVER_NOT_LOADED"
  absl::string_view cause;  // what it means on a node
  absl::string_view fix;    // what to do about it
};

// The entry for `code`; codes not in the table get a generic "unrecognised" entry that
// still carries the number.
const NvmlReturnInfo& DescribeNvmlReturn(int code);

// Every known entry, in code order (for docs and `gpulet explain`).
std::span<const NvmlReturnInfo> AllNvmlReturns();

// Looks up an entry by name, with or without the "NVML_ERROR_" prefix, case-insensitive
// ("GPU_IS_LOST", "nvml_error_gpu_is_lost"). nullptr when unknown.
const NvmlReturnInfo* FindNvmlReturnByName(absl::string_view name);

// Turns a failed NVML call into a Status whose message names the call, the context (a GPU,
// a library path), the NVML code and name, the cause and the fix. The absl code follows the
// meaning: NOT_SUPPORTED → Unimplemented, NOT_FOUND → NotFound, NO_PERMISSION →
// PermissionDenied, TIMEOUT → DeadlineExceeded, GPU_IS_LOST/RESET_REQUIRED → Unavailable,
// DRIVER_NOT_LOADED/LIB_RM_VERSION_MISMATCH → FailedPrecondition, others → Internal.
// REQUIRES: code != NVML_SUCCESS.
absl::Status NvmlError(int code, absl::string_view call, absl::string_view context = {});

// `status` carrying NVML code `code` the way NvmlError's statuses do (so NvmlCodeOf finds
// it); used where a status crosses a process boundary (the NVML worker). Unchanged when
// `status` is OK or `code` < 0.
absl::Status WithNvmlCode(absl::Status status, int code);

// The NVML code carried by a Status made by NvmlError, or -1.
int NvmlCodeOf(const absl::Status& status);

}  // namespace gpulet::gpu

#endif  // GPULET_GPU_NVML_ERRORS_H_
