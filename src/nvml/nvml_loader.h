// NVML library discovery: finds, vets and loads libnvidia-ml for this node.
//
// Where the library lives depends on the distribution and, on Talos, on the Talos version
// (it moved three times), so gpulet probes a list of places instead of trusting one. Each
// candidate goes through three gates before gpulet loads it into its own process:
//   1. it exists under --host-root;
//   2. its ELF header and version needs fit this process (CheckLoadable: class, machine,
//      GLIBC_x.y no newer than the running glibc);
//   3. a child process can dlopen it, call nvmlInit_v2 and count GPUs (ProbeNvmlLibrary).
// The first candidate that passes is loaded. When gate 2 refuses a file only because it needs
// a newer glibc than gpulet's, and the host has that glibc's loader and libc.so.6 beside the
// driver (Talos ships the driver with a private glibc), the file is loaded instead in
// gpulet-nvml-worker, a process started through that loader (nvml_worker_library.h); the
// worker's start is that candidate's probe. Every attempt is recorded, so when none works
// the error lists each path tried, what happened there, and what to do.
//
// Thread-safety: LoadNvml is safe to call from any thread; it forks for the probe.
#ifndef GPULET_NVML_NVML_LOADER_H_
#define GPULET_NVML_NVML_LOADER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/host_fs.h"
#include "gpu/nvml_attempt.h"
#include "nvml/nvml_library.h"
#include "nvml/nvml_worker_library.h"

namespace gpulet::nvml {

struct NvmlLoadOptions {
  // --nvml-lib: when set, the only candidate (a path on this machine, not under host root).
  std::string explicit_path;
  // Time allowed to the probe child for dlopen + nvmlInit + count.
  absl::Duration probe_timeout = absl::Seconds(15);
  // Load a library that needs a newer glibc in gpulet-nvml-worker when the host provides
  // that glibc. Tests of the plain gates turn it off.
  bool allow_worker = true;
  // The worker executable; empty means gpulet-nvml-worker beside gpulet's own executable.
  std::string worker_path;
  NvmlWorkerGpuLibrary::Options worker;
};

// One place gpulet looks for libnvidia-ml.so.1.
struct NvmlSearchLocation {
  std::string host_dir;  // "" means the dynamic loader's own search (ld.so.cache, ...)
  std::string note;      // who puts it there: "Talos 1.9-1.12", "GKE", ...
};

// The search order, loader first (it sees libraries a container runtime injected).
const std::vector<NvmlSearchLocation>& NvmlSearchLocations();

struct NvmlLoadResult {
  std::unique_ptr<NvmlLibrary> library;  // loaded in this process; null otherwise
  // Loaded in gpulet-nvml-worker instead (then `library` is null).
  std::unique_ptr<NvmlWorkerGpuLibrary> worker;
  std::vector<gpu::NvmlLoadAttempt> attempts;
  // OK when loaded. Otherwise the most telling failure (a library that exists but failed
  // beats "absent"), whose message lists every attempt and the fix.
  absl::Status status;
  // The NVML code of the deciding failure (e.g. DRIVER_NOT_LOADED), or -1.
  int nvml_code = -1;
};

NvmlLoadResult LoadNvml(const HostFs& host, const NvmlLoadOptions& options);

}  // namespace gpulet::nvml

#endif  // GPULET_NVML_NVML_LOADER_H_
