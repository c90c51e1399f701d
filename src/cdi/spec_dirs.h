// SpecCatalog: the CDI specs a container runtime on this host would see, and what a
// fully-qualified device name ("nvidia.com/gpu=0") resolves to.
//
// Runtimes scan a list of directories (by default /etc/cdi, then /var/run/cdi), read every
// *.yaml and *.json file in each (not recursively), drop files that do not load, and index
// the devices by qualified name. When two files define the same device, the one from the
// later directory wins (so /var/run/cdi overrides /etc/cdi); two files of the same directory
// defining it are a conflict and the name resolves to neither. The catalog reproduces that
// through HostFs, so `gpulet doctor` and `gpulet cdi list` can say what a pod asking for
// nvidia.com/gpu=0 would get, and why not.
//
// Thread-safety: a loaded catalog is immutable; const methods are safe concurrently.
#ifndef GPULET_CDI_SPEC_DIRS_H_
#define GPULET_CDI_SPEC_DIRS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cdi/spec.h"
#include "common/host_fs.h"

namespace gpulet::cdi {

// containerd's, CRI-O's and podman's defaults, lowest priority first. /var/run/cdi is where
// dynamic specs go, and the only one writable on Talos (its /etc is read-only).
inline constexpr char kStaticSpecDir[] = "/etc/cdi";
inline constexpr char kDynamicSpecDir[] = "/var/run/cdi";
std::vector<std::string> DefaultSpecDirs();

// One spec file found in a directory.
struct SpecFile {
  std::string path;     // host path, e.g. "/var/run/cdi/nvidia.yaml"
  int priority = 0;     // index of its directory in the list; higher wins
  absl::Status status;  // OK when the file parsed and passed ValidateSpec
  Spec spec;            // meaningful only when status is OK
};

// Where a qualified name leads.
struct ResolvedDevice {
  const SpecFile* file = nullptr;
  const Device* device = nullptr;
};

class SpecCatalog {
 public:
  // Scans `dirs` (host paths, in priority order) through `fs`. A missing directory is
  // normal (nothing there); an unreadable one is recorded in dir_errors().
  static SpecCatalog Load(const HostFs& fs, const std::vector<std::string>& dirs);

  SpecCatalog(const SpecCatalog&) = delete;
  SpecCatalog& operator=(const SpecCatalog&) = delete;
  SpecCatalog(SpecCatalog&&) = default;
  SpecCatalog& operator=(SpecCatalog&&) = default;

  const std::vector<std::string>& dirs() const { return dirs_; }
  // Every spec file found, in scan order (directory, then name), loaded or not.
  const std::vector<SpecFile>& files() const { return files_; }
  // "/etc/cdi: permission denied ...", one per directory that exists but cannot be listed.
  const std::vector<std::string>& dir_errors() const { return dir_errors_; }
  // Qualified names two files of equal priority both define, with the two files.
  const std::map<std::string, std::vector<std::string>>& conflicts() const { return conflicts_; }

  // Resolves "vendor/class=name". NotFound says which kinds and files were seen;
  // FailedPrecondition reports a conflict; InvalidArgument a malformed name.
  absl::StatusOr<ResolvedDevice> Resolve(absl::string_view qualified_name) const;

  // All resolvable qualified names, sorted.
  std::vector<std::string> DeviceNames() const;

 private:
  SpecCatalog() = default;

  std::vector<std::string> dirs_;
  std::vector<SpecFile> files_;
  std::vector<std::string> dir_errors_;
  std::map<std::string, std::pair<size_t, size_t>> devices_;  // name -> (file, device) index
  std::map<std::string, std::vector<std::string>> conflicts_;
};

}  // namespace gpulet::cdi

#endif  // GPULET_CDI_SPEC_DIRS_H_
