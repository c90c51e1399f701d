// Pod identity from the host's files: which pod a process runs in, and a pod's name.
//
// A GPU process is tied to its pod through its cgroup: /proc/<pid>/cgroup names the pod's
// UID and the container's ID in every layout the kubelet uses (cgroupfs and systemd
// drivers, cgroup v1 and v2, containerd, CRI-O and Docker). The PodResources API names pods
// but not their UIDs; the kubelet's log directory /var/log/pods/<namespace>_<name>_<uid>
// joins the two without asking the API server.
//
// Thread-safety: pure functions.
#ifndef GPULET_METRICS_POD_IDENTITY_H_
#define GPULET_METRICS_POD_IDENTITY_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace gpulet::metrics {

struct CgroupPod {
  std::string pod_uid;       // canonical form with dashes: "1b2c…-…"
  std::string container_id;  // runtime's container ID (64 hex), "" when not in the path
};

// Parses the content of /proc/<pid>/cgroup. Returns nullopt for a process outside any pod
// (host processes, system services). Lines of every hierarchy are considered; the first
// that names a pod wins.
std::optional<CgroupPod> ParseCgroupPod(absl::string_view cgroup_file);

struct PodLogDir {
  std::string namespace_name;
  std::string pod;
  std::string uid;
};

// Parses a directory name under /var/log/pods: "<namespace>_<pod>_<uid>". Namespaces and
// pod names are DNS labels/subdomains, which cannot contain '_', so the split is exact.
std::optional<PodLogDir> ParsePodLogDir(absl::string_view name);

}  // namespace gpulet::metrics

#endif  // GPULET_METRICS_POD_IDENTITY_H_
