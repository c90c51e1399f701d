// The kernel's dmem cgroup controller (Linux 6.14 and later, cgroup v2 only) as NVIDIA's
// driver uses it to hold VRAM limits per cgroup itself (drivers r615 and later: MPS memory
// partitioning, nvmlDeviceSetMemoryLimits_v1; docs/sharing.md).
//
// The root cgroup's dmem.capacity lists one region per device the controller accounts, a
// line "<region> <bytes>"; NVIDIA's are "nvidia/<PCI address>/vidmem" (NVIDIA's MPS v3
// memory partitioning guide, docs.nvidia.com/deploy/mps, and the kernel's cgroup-v2
// documentation of dmem.capacity). A process's cgroup in the unified hierarchy is the
// "0::<path>" line of /proc/<pid>/cgroup (the kernel's cgroup-v2 documentation, "Processes").
//
// Thread-safety: pure functions; safe to call concurrently.
#ifndef GPULET_NODE_DMEM_H_
#define GPULET_NODE_DMEM_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace gpulet::node {

// The host path of the capacity file, under the cgroup2 mount.
inline constexpr char kDmemCapacityPath[] = "/sys/fs/cgroup/dmem.capacity";

// The dmem region of the GPU at `bus_id` (any spelling NormalizeBusId takes):
// "nvidia/0000:02:00.0/vidmem"; "" when `bus_id` is not one.
std::string DmemRegion(absl::string_view bus_id);

// Whether the text of dmem.capacity lists the GPU at `bus_id`.
bool DmemCapacityLists(absl::string_view capacity, absl::string_view bus_id);

// Whether a driver of `driver_version` ("615.20.01") has nvmlDeviceSetMemoryLimits_v1:
// r615 and later. False when the version cannot be read.
bool DriverHasMemoryLimits(absl::string_view driver_version);

// The process's cgroup in the unified hierarchy, from the text of /proc/<pid>/cgroup: the
// path of its "0::" line ("/kubepods/burstable/pod…/…"). nullopt on a cgroup v1 host (no such
// line) or when the line is not an absolute path. The path is as the reader's cgroup
// namespace shows it: one outside that namespace starts with "/..".
std::optional<std::string> UnifiedCgroupPath(absl::string_view proc_cgroup);

// The deepest cgroup that holds all of `paths` (absolute, "/" separated): "/a/b" for
// "/a/b/c" and "/a/b/d"; "/" when they share nothing; "" for no paths.
std::string CommonCgroup(const std::vector<std::string>& paths);

// Whether cgroup `inner` is `outer` or below it.
bool CgroupWithin(absl::string_view inner, absl::string_view outer);

}  // namespace gpulet::node

#endif  // GPULET_NODE_DMEM_H_
