// The GPUs the nvidia kernel module serves now, read from its procfs
// (/proc/driver/nvidia/gpus/<bus>/information): each GPU's PCI address, minor number
// (/dev/nvidia<minor>) and UUID, as the driver assigned them at its last probe.
//
// This is gpulet's NVML-independent view of what the driver serves. NVML enumerates GPUs
// once, at nvmlInit: a card that fell off the bus and came back after a PCI rescan, or one
// the driver enumerated anew, is invisible to a running NVML session (its old handle
// answers GPU_IS_LOST), while the driver's procfs shows it at once, on whatever minor number
// the probe gave it. The Daemon compares the two (daemon/inventory_watch.h) to take its
// inventory again.
//
// The file's lines are "Key: \t value" (open-gpu-kernel-modules,
// kernel-open/nvidia/nv-procfs.c, nv_procfs_read_gpu_info: "Bus Location: \t %04x:%02x:%02x.%x",
// "Device Minor: \t %u", "GPU UUID: \t %s", "GPU Excluded:\t %s"; older drivers print
// "Blacklisted:" instead of "GPU Excluded:").
//
// Thread-safety: pure functions, and ReadDriverGpus only reads through the const HostFs;
// all are safe to call concurrently.
#ifndef GPULET_NODE_DRIVER_GPUS_H_
#define GPULET_NODE_DRIVER_GPUS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/host_fs.h"

namespace gpulet::node {

struct DriverGpu {
  std::string bus_id;             // canonical "0000:02:00.0"; "" when the file gives none
  std::optional<unsigned> minor;  // unset when absent or not a number
  // "GPU-..." once the driver initialised the GPU; "" otherwise (the driver prints
  // placeholders such as "??..." before that).
  std::string uuid;
  bool excluded = false;  // "GPU Excluded: Yes": the driver keeps it from every client
};

// Parses one information file. Never fails: what is missing or malformed stays unset.
DriverGpu ParseGpuInformation(absl::string_view text);

// Every GPU directory under /proc/driver/nvidia/gpus, sorted by bus ID; a directory whose
// file cannot be read is listed with its name as the bus ID and nothing else. NotFound when
// the directory is absent (no nvidia module, or a /proc that is not the host's); other
// errors name the path.
absl::StatusOr<std::vector<DriverGpu>> ReadDriverGpus(const HostFs& host);

}  // namespace gpulet::node

#endif  // GPULET_NODE_DRIVER_GPUS_H_
