// What /etc/os-release says about the host, and Talos version numbers: the one parser of
// both, used by `gpulet doctor` (which checks to run), `gpulet manifests` (which Talos
// patch to print) and node inspection.
//
// Thread-safety: pure functions over values, except ReadOsRelease, which only reads
// through the const HostFs; all are safe to call concurrently.
#ifndef GPULET_NODE_OS_RELEASE_H_
#define GPULET_NODE_OS_RELEASE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/host_fs.h"

namespace gpulet::node {

// A Talos release number.
struct TalosVersion {
  int major = 1;
  int minor = 0;
  int patch = -1;  // -1 when not given

  std::string ToString() const;  // "v1.12.6", or "v1.12"
};

// Parses "v1.12.6", "1.13", "v1.14.0-beta.1". InvalidArgument otherwise, saying how to
// write one.
absl::StatusOr<TalosVersion> ParseTalosVersion(absl::string_view text);

// Compares major.minor only.
bool TalosAtLeast(const TalosVersion& v, int major, int minor);

// The host's os-release, with Talos' version split out.
struct OsInfo {
  bool readable = false;
  std::string id;           // "talos", "debian", "ubuntu"
  std::string version_id;   // "v1.12.6", "12"
  std::string pretty_name;  // "Talos (v1.12.6)"
  bool talos = false;
  std::optional<TalosVersion> talos_version;  // on Talos, when VERSION_ID parses
  int talos_major = 0;                        // 1 for v1.12.6; 0 when not Talos or unparseable
  int talos_minor = 0;                        // 12 for v1.12.6
};

// Parses the contents of an os-release file (KEY=value, values optionally quoted, comments
// and blank lines skipped). Never fails: unknown keys are ignored, missing ones left empty.
OsInfo ParseOsRelease(absl::string_view text);

// Reads /etc/os-release, else /usr/lib/os-release (the os-release(5) fallback), under the
// host root. `readable` is false when neither can be read.
OsInfo ReadOsRelease(const HostFs& host);

}  // namespace gpulet::node

#endif  // GPULET_NODE_OS_RELEASE_H_
