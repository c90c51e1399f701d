// ProbeNvmlLibrary: tries a candidate libnvidia-ml in a child process before gpulet trusts
// it in its own.
//
// The field report's cluster saw host NVML libraries segfault when mounted into a container
// with another glibc, and a wedged driver makes nvmlInit block forever. Both kill or freeze
// whatever process calls it. So gpulet forks a child that does dlopen → symbol lookup →
// nvmlInit_v2 → nvmlDeviceGetCount_v2 and reports each stage over a pipe; the parent waits
// with a deadline. A crash becomes "SIGSEGV during nvmlInit_v2", a hang becomes "no answer
// from nvmlInit_v2 within 15s", each with the likely cause and fix.
//
// Thread-safety: safe to call from any thread. The child only runs the library under test
// and _exit()s; it never returns into gpulet's code.
#ifndef GPULET_NVML_NVML_PROBE_H_
#define GPULET_NVML_NVML_PROBE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace gpulet::nvml {

struct NvmlProbeResult {
  enum class Outcome {
    kOk,              // init and count succeeded
    kLoadFailed,      // dlopen failed (detail holds dlerror)
    kMissingSymbols,  // required symbols absent (detail lists them)
    kInitFailed,      // nvmlInit_v2 returned an error (nvml_code)
    kCountFailed,     // nvmlDeviceGetCount_v2 returned an error (nvml_code)
    kCrashed,         // the child died of a signal (signal, stage)
    kTimedOut,        // the child did not finish in time (stage)
    kProbeError,      // fork/pipe failed or the child exited oddly (detail)
  };
  Outcome outcome = Outcome::kProbeError;
  std::string stage;        // last stage the child reached: "dlopen", "nvmlInit_v2", ...
  std::string loaded_path;  // the file the loader picked (a soname resolves to a path)
  int signal = 0;
  int nvml_code = 0;
  unsigned device_count = 0;
  std::string detail;
};

// Probes `path` (file path or soname) in a child process, waiting at most `timeout`.
NvmlProbeResult ProbeNvmlLibrary(const std::string& path, absl::Duration timeout);

// A one-paragraph diagnosis (what happened, where, likely cause, fix); OK for kOk.
absl::Status ProbeStatus(const NvmlProbeResult& result, const std::string& path,
                         absl::Duration timeout);

}  // namespace gpulet::nvml

#endif  // GPULET_NVML_NVML_PROBE_H_
