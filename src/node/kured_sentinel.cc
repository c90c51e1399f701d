#include "node/kured_sentinel.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/read_file.h"

namespace gpulet::node {

std::string KuredSentinel::Describe() const {
  return absl::StrCat("kured's sentinel ", host_->Describe(sentinel_));
}

absl::Status KuredSentinel::Reboot(absl::string_view why, absl::string_view /*reason*/) {
  const std::string where = host_->Describe(sentinel_);
  // The directory's links followed inside the root; the file's own name never followed.
  absl::StatusOr<std::string> local = host_->ResolveParent(sentinel_);
  if (!local.ok()) return local.status();
  UniqueFd fd(open(local->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == EEXIST) return absl::OkStatus();  // asked already (by gpulet or by an update)
    const std::string why_not = std::strerror(err);
    if (err == ENOENT || err == ENOTDIR) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", where, ": ", why_not,
                       "; its directory is not mounted into gpulet's pod (deploy/reboot mounts "
                       "the host's /run) or does not exist"));
    }
    if (err == EACCES || err == EPERM || err == EROFS) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create ", where, ": ", why_not,
                       "; mount the host's /run writable into gpulet's pod (deploy/reboot)"));
    }
    return absl::UnavailableError(absl::StrCat("cannot create ", where, ": ", why_not));
  }
  // The file existing is the request; the line is for a person reading it, so a short write
  // changes nothing.
  const std::string line = absl::StrCat("gpulet: ", why, "\n");
  const ssize_t written = write(fd.get(), line.data(), line.size());
  static_cast<void>(written);
  return absl::OkStatus();
}

}  // namespace gpulet::node
