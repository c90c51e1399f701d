// One place the NVML loader tried, and how it went: what an Inventory carries so that
// `gpulet list`, `doctor` and error messages can say where gpulet looked without depending
// on the loader itself.
//
// Thread-safety: plain values and pure functions.
#ifndef GPULET_GPU_NVML_ATTEMPT_H_
#define GPULET_GPU_NVML_ATTEMPT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace gpulet::gpu {

struct NvmlLoadAttempt {
  std::string candidate;  // what was tried: a host path, or "libnvidia-ml.so.1 (loader)"
  std::string note;
  enum class Result { kAbsent, kRejected, kProbeFailed, kLoadFailed, kLoaded } result;
  absl::Status status;  // why it was not used (OK when loaded)
  // Why, as a kind a diagnosis can branch on (the message is for people and may change).
  enum class Reason {
    kNone,             // loaded
    kNotFound,         // no file there
    kNeedsNewerGlibc,  // the file's GLIBC_x.y needs exceed gpulet's glibc (and the worker's)
    kIncompatible,     // wrong ELF class or machine
    kNotALibrary,      // not a regular file (FIFO, socket, device, directory), a symlink
                       // loop, or not an ELF file (a linker script, a text file)
    kDamaged,          // starts like an ELF file but is truncated or corrupt
    kCrashed,          // the probe child died of a signal while loading or initialising
    kHung,             // the probe or worker did not answer in time
    kDriverError,      // NVML loaded and returned an error (see NvmlLoadResult::nvml_code)
    kUnusable,         // dlopen failed or required symbols are missing
    kWorkerFailed,     // gpulet-nvml-worker could not be started or died
  } reason = Reason::kNone;
};

// "needs a newer glibc", ...: the reason in a few words, for logs and tests.
const char* NvmlLoadReasonName(NvmlLoadAttempt::Reason reason);

// Renders attempts as an indented list for error messages and `gpulet doctor`.
std::string FormatAttempts(const std::vector<NvmlLoadAttempt>& attempts);

}  // namespace gpulet::gpu

#endif  // GPULET_GPU_NVML_ATTEMPT_H_
