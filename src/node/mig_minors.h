// The minor numbers of the NVIDIA capability devices (/dev/nvidia-caps/nvidia-cap<N>) that
// give a container access to a MIG GPU instance and compute instance.
//
// The nvidia driver lists every capability it can create, one per line, in
// /proc/driver/nvidia-caps/mig-minors when it loads: "config 1", "monitor 2",
// "gpu0/gi1/access 12", "gpu0/gi1/ci0/access 13", ... where gpu<N> is the GPU's minor number.
// A container given MIG device (gi 1, ci 0) of GPU 0 needs /dev/nvidia0 plus the two cap
// nodes for gpu0/gi1/access and gpu0/gi1/ci0/access (NVIDIA's MIG user guide, "Device nodes
// and capabilities"; nvidia-container-toolkit reads the same file).
//
// Thread-safety: pure functions over values.
#ifndef GPULET_NODE_MIG_MINORS_H_
#define GPULET_NODE_MIG_MINORS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpulet::node {

// Capability name ("gpu0/gi1/access") → minor number.
using MigMinors = std::map<std::string, unsigned>;

// Parses mig-minors. InvalidArgument naming the line for one that is not "<name> <number>";
// blank lines are skipped.
absl::StatusOr<MigMinors> ParseMigMinors(absl::string_view text);

// The cap device nodes ("/dev/nvidia-caps/nvidia-cap12", ...) for a MIG device: its GPU
// instance's access cap, then its compute instance's. Empty when `minors` lacks either.
std::vector<std::string> MigCapDevicePaths(const MigMinors& minors, unsigned gpu_minor,
                                           unsigned gpu_instance_id, unsigned compute_instance_id);

}  // namespace gpulet::node

#endif  // GPULET_NODE_MIG_MINORS_H_
