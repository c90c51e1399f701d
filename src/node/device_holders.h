// Which processes on the host hold a device node open: the reset rung's evidence that nothing
// uses a GPU when NVML cannot list the GPU's processes (a GPU that answers RESET_REQUIRED to
// every call).
//
// It walks /proc/<pid>/fd under the host root (gpulet's pod runs with hostPID, so that /proc
// is the host's) and stat(2)s each descriptor: the kernel follows its magic link to the open
// file in whatever mount namespace the process runs, so a container's /dev/nvidia1 is found
// by its device number (st_rdev), whatever path the container gave it. A placeholder that is
// not a character device (the simulator's fixtures) is matched by device and inode instead.
// Only metadata is read: nothing is opened, and no path is followed to read or write beyond
// the stat. Processes that end during the walk are skipped; one whose descriptors cannot be
// listed (no CAP_SYS_PTRACE) fails the whole walk, so that "nobody" is never claimed on
// partial evidence.
//
// Thread-safety: a pure function over the const HostFs; safe to call concurrently.
#ifndef GPULET_NODE_DEVICE_HOLDERS_H_
#define GPULET_NODE_DEVICE_HOLDERS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/host_fs.h"

namespace gpulet::node {

struct DeviceHolder {
  unsigned pid = 0;
  std::string name;  // /proc/<pid>/comm; "" when unreadable
  std::string exe;   // the basename of /proc/<pid>/exe; "" when unreadable
};

struct DeviceHolderOptions {
  // Processes left out: gpulet's own (its pid and its NVML worker's parent is it).
  unsigned self_pid = 0;
  // Left out by executable name (basename of /proc/<pid>/exe): the driver's own daemons,
  // which hold every GPU's node without running work on it (nvidia-persistenced).
  std::vector<std::string> ignore_exe = {"nvidia-persistenced"};
};

// Field `n` (1-based, as proc(5) numbers them: 4 is ppid, 22 starttime) of a
// /proc/<pid>/stat line as a number. The name (field 2) may hold spaces and parentheses, so
// fields are counted from the last ')'. nullopt when the line is short or the field is not a
// number.
std::optional<uint64_t> ProcStatField(absl::string_view stat, int n);

// The processes that hold `device` (a host path, "/dev/nvidia1") open, by pid. Errors: the
// device or /proc cannot be read (the message names it), or a process's descriptors cannot
// be listed (PermissionDenied, naming the pid and the capability that would let gpulet see).
absl::StatusOr<std::vector<DeviceHolder>> ProcessesHolding(const HostFs& host,
                                                           absl::string_view device,
                                                           const DeviceHolderOptions& options);

}  // namespace gpulet::node

#endif  // GPULET_NODE_DEVICE_HOLDERS_H_
