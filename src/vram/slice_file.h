// The daemon's side of VRAM enforcement: the host directories a sliced container gets
// (one per allocation, holding its slice file; one holding the enforcement library), and
// reading a slice's figures back for metrics and status.
//
// Paths: `host_dir` is a host path (sharing.memorySlices.hostDir, default
// /var/lib/gpulet/vram); `local_dir` is where this process reaches it (under --host-root).
// The allocation directory is named after the allocation's lowest device ID: a device ID
// belongs to one container at a time, so the name is unique among live allocations, and
// the directories stay bounded by the number of slice IDs.
//
// Thread-safety: functions over values and files; concurrent calls for one allocation
// directory leave one whole slice file (the last rename wins).
#ifndef GPULET_VRAM_SLICE_FILE_H_
#define GPULET_VRAM_SLICE_FILE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpulet::vram {

// The library's file name, and where a container sees it.
inline constexpr char kLibraryFileName[] = "libgpulet-vram.so";
inline constexpr char kLibraryContainerPath[] = "/run/gpulet/lib/libgpulet-vram.so";

// "<lowest ID>" made safe as one path component ("GPU-1a2b...--mem3"): characters other
// than [A-Za-z0-9._-] become '-'. `ids` must not be empty.
std::string AllocationDirName(const std::vector<std::string>& ids);

// What a container holding slices gets, whatever delivers it (the device plugin's Allocate
// answer, a DRA claim's CDI edits): the library, read-only; the allocation's directory,
// writable (processes record their use there); and the variables that load the library
// (LD_AUDIT, which leaves the image's own LD_PRELOAD and /etc/ld.so.preload alone) and name
// the slice file.
struct ContainerEdits {
  struct Mount {
    std::string host_path;
    std::string container_path;
    bool read_only = false;
  };
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<Mount> mounts;
};
ContainerEdits EnforcementEdits(const std::string& host_dir, const std::string& allocation);

// Writes a fresh slice file (mode 0666: the container's processes may run as any user) in
// `local_dir`/`name`/, creating the directory (mode 0755). A compute share (thousandths of
// the GPU's SM time; 0: none) makes the library pace the holder's kernel launches
// (launch_pacing.h). Errors name the path.
absl::Status WriteSliceFile(const std::string& local_dir, const std::string& name,
                            uint64_t quota_bytes, const std::string& gpu_uuid,
                            const std::string& owner, uint32_t compute_share_permille = 0);

// Sets the launch rate of the slice file at `path` (launch_pacing.h; 0: not paced). Errors as
// ReadSliceUsage's.
absl::Status SetSliceLaunchRate(const std::string& path, uint64_t units_per_second);

// Copies the enforcement library from `source` to `local_dir`/lib/ (mode 0644), replacing
// it atomically when its content differs (a container that mapped the old one keeps it).
absl::Status InstallLibrary(const std::string& source, const std::string& local_dir);

// Where the enforcement library ships beside a gpulet executable at `exe` (the build tree:
// the same directory; an installed tree: ../lib/gpulet/): the first that exists, or NotFound
// naming both.
absl::StatusOr<std::string> FindLibraryBeside(const std::string& exe);

// A slice's figures, as the library keeps them.
struct SliceUsage {
  uint64_t quota_bytes = 0;
  uint64_t in_use_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t refused = 0;
  std::string gpu_uuid;
  std::string owner;
  // Processes holding memory on the slice: their PIDs as this process sees them (0 when the
  // holder is in a PID namespace this one cannot see) and their use.
  struct Process {
    int32_t pid = 0;
    uint64_t used_bytes = 0;
    uint64_t peak_bytes = 0;
    uint64_t refused = 0;
  };
  std::vector<Process> processes;
  // The compute share and its pacing (launch_pacing.h); all 0 when the slice has no share.
  struct Compute {
    uint32_t share_permille = 0;
    uint64_t launch_rate = 0;  // units per second; 0: not paced
    uint64_t launch_units = 0, launch_waits = 0, launch_wait_ns = 0;
  } compute;
};

// Reads `path` (read-only; it never takes the slice's lock). Errors as the library's, with
// a code: NotFound (missing), FailedPrecondition (newer format), DataLoss (corrupt).
absl::StatusOr<SliceUsage> ReadSliceUsage(const std::string& path);

}  // namespace gpulet::vram

#endif  // GPULET_VRAM_SLICE_FILE_H_
