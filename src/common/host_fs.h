// HostFs: read-only access to the host's file system as seen under a host root.
//
// gpulet often runs in a container with the host mounted somewhere (`--host-root`, default
// "/"), and tests point the same code at fixture trees (sim/fixtures/<name>/root). Every
// path gpulet reads about the host goes through this class, which resolves it the way the
// host's kernel would, but confined to the root: absolute symlinks are re-anchored at the
// root and ".." never climbs above it. A hostile or broken host tree therefore cannot make
// gpulet read outside the root (a symlink `/sys/x -> /../../etc/shadow` resolves to
// `<root>/etc/shadow`).
//
// Thread-safety: immutable after construction; all methods are safe to call concurrently.
#ifndef GPULET_COMMON_HOST_FS_H_
#define GPULET_COMMON_HOST_FS_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpulet {

class HostFs {
 public:
  // `root` is a directory on this machine ("/" for the real host). It is made absolute.
  explicit HostFs(std::string root);

  const std::string& root() const { return root_; }
  bool is_real_root() const { return root_ == "/"; }

  // Maps a host path (absolute, e.g. "/sys/bus/pci/devices") to a path on this machine,
  // following symlinks inside the root. The final component need not exist. Fails only on
  // a symlink loop (more than 40 links) or a relative `host_path`.
  absl::StatusOr<std::string> Resolve(absl::string_view host_path) const;

  // Like Resolve but without following the final component when it is a symlink.
  absl::StatusOr<std::string> ResolveParent(absl::string_view host_path) const;

  // Reads a whole file (at most `max_bytes`). NotFound when it does not exist; the message
  // names the host path and, when the root is not "/", the local path too.
  absl::StatusOr<std::string> ReadFile(absl::string_view host_path,
                                       size_t max_bytes = 1 << 20) const;

  // Reads a small file and strips trailing whitespace (sysfs attributes).
  absl::StatusOr<std::string> ReadAttribute(absl::string_view host_path) const;

  // One directory whose files are read together, as a GPU's sysfs attributes are each round:
  // its path is resolved once (as Resolve does), and each file is then opened in it by name
  // without following a symlink. sysfs attributes are regular files; a link there is refused,
  // so nothing read through a Dir leaves the root. Valid while its HostFs is.
  class Dir {
   public:
    // As HostFs::ReadFile and ReadAttribute, for the file `name` (one path component).
    absl::StatusOr<std::string> ReadFile(absl::string_view name, size_t max_bytes = 1 << 20) const;
    absl::StatusOr<std::string> ReadAttribute(absl::string_view name) const;

   private:
    friend class HostFs;
    Dir(const HostFs* host, std::string host_path, std::string local)
        : host_(host), host_path_(std::move(host_path)), local_(std::move(local)) {}

    const HostFs* host_;
    std::string host_path_;  // as the caller named it, for messages
    std::string local_;      // resolved, on this machine
  };
  // NotFound when `host_path` does not resolve to a directory.
  absl::StatusOr<Dir> OpenDir(absl::string_view host_path) const;

  // Entry names in a directory, sorted, without "." and "..".
  absl::StatusOr<std::vector<std::string>> ListDir(absl::string_view host_path) const;

  // The target of a symlink, as a host path (made absolute against the link's directory),
  // e.g. "/sys/bus/pci/drivers/nvidia" for a device's `driver` link.
  absl::StatusOr<std::string> ReadLink(absl::string_view host_path) const;

  bool Exists(absl::string_view host_path) const;
  bool IsDirectory(absl::string_view host_path) const;

  // Describes a host path for messages: "/x" or "/x (read as /root/x)".
  std::string Describe(absl::string_view host_path) const;

 private:
  absl::StatusOr<std::string> ResolveImpl(absl::string_view host_path, bool follow_last) const;

  std::string root_;  // absolute, no trailing slash unless it is "/"
};

// Joins host path components with exactly one '/' between them.
std::string JoinPath(absl::string_view a, absl::string_view b);

}  // namespace gpulet

#endif  // GPULET_COMMON_HOST_FS_H_
