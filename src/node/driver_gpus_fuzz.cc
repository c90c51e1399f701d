// libFuzzer target for the reader of the nvidia driver's per-GPU procfs file
// (node/driver_gpus.h): the inventory watch acts on what it returns, so any bytes must give
// a DriverGpu, never a crash. Properties checked:
//  - a bus ID, when set, is canonical (NormalizeBusId gives it back unchanged);
//  - a UUID, when set, starts with "GPU-" and holds no line break;
//  - parsing is deterministic.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "node/bus_id.h"
#include "node/driver_gpus.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const gpulet::node::DriverGpu gpu = gpulet::node::ParseGpuInformation(text);
  if (!gpu.bus_id.empty() && gpulet::node::NormalizeBusId(gpu.bus_id) != gpu.bus_id) abort();
  if (!gpu.uuid.empty() &&
      (!absl::StartsWith(gpu.uuid, "GPU-") || gpu.uuid.find('\n') != std::string::npos)) {
    abort();
  }
  const gpulet::node::DriverGpu again = gpulet::node::ParseGpuInformation(text);
  if (again.bus_id != gpu.bus_id || again.minor != gpu.minor || again.uuid != gpu.uuid ||
      again.excluded != gpu.excluded) {
    abort();
  }
  return 0;
}
