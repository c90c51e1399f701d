#include "node/pci_reset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/read_file.h"
#include "node/bus_id.h"

namespace gpulet::node {
namespace {

absl::Status Refused(int err, const std::string& where) {
  const std::string why = std::strerror(err);
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot write ", where, ": ", why,
          "; a GPU reset needs root with CAP_SYS_ADMIN and the host's /sys mounted writable "
          "(deploy/reset grants both)"));
    case ENOENT:
    case ENOTTY:
      return absl::NotFoundError(absl::StrCat(
          where, ": ", why, "; the kernel has no reset method for this device: reboot the node"));
    default:
      return absl::UnavailableError(
          absl::StrCat("the kernel could not reset the device (", where, ": ", why,
                       "); if it does not answer again, reboot the node"));
  }
}

}  // namespace

absl::Status SysfsGpuResetter::Reset(absl::string_view /*uuid*/, absl::string_view bus_id) {
  absl::StatusOr<PciAddress> address = ParsePciAddress(bus_id);
  if (!address.ok()) return address.status();
  const std::string device = JoinPath("/sys/bus/pci/devices", FormatPciAddress(*address));
  // The device's directory, its link followed inside the root; the file is then opened in it
  // without following a link, so the write cannot leave the root.
  absl::StatusOr<std::string> local = host_->Resolve(device);
  if (!local.ok()) return local.status();
  UniqueFd dir(open(local->c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat("no PCI device ", host_->Describe(device),
                                              ": the GPU is gone from the bus; reboot the node"));
    }
    return Refused(err, host_->Describe(device));
  }
  const std::string where = host_->Describe(JoinPath(device, "reset"));
  UniqueFd file(openat(dir.get(), "reset", O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
  if (file.get() < 0) return Refused(errno, where);
  struct stat st {};
  if (fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " is not a regular file: this is not sysfs; check --host-root"));
  }
  // The kernel answers the write only when the reset is over (or failed).
  ssize_t n;
  do {
    n = write(file.get(), "1", 1);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Refused(errno, where);
  if (n != 1) return absl::UnavailableError(absl::StrCat("short write to ", where));
  return absl::OkStatus();
}

}  // namespace gpulet::node
