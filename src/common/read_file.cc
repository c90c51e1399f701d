#include "common/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpulet {

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

absl::StatusOr<UniqueFd> OpenRegularFile(const std::string& path, const std::string& what,
                                         const std::string& shown_as, off_t* size,
                                         bool follow_last) {
  const std::string& shown = shown_as.empty() ? path : shown_as;
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": the path is empty"));
  UniqueFd fd(open(path.c_str(),
                   O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | (follow_last ? 0 : O_NOFOLLOW)));
  if (fd.get() < 0) {
    int err = errno;
    switch (err) {
      case ENOENT:
      case ENOTDIR:
        return absl::NotFoundError(
            absl::StrCat("cannot read ", what, " ", shown, ": it does not exist; check the path"));
      case EACCES:
      case EPERM:
        return absl::PermissionDeniedError(
            absl::StrCat("cannot read ", what, " ", shown,
                         ": permission denied; make it readable by gpulet's user"));
      case ELOOP:
        if (!follow_last) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, " ", shown,
                           " is a symbolic link, which gpulet does not follow here; a regular "
                           "file was expected"));
        }
        return absl::InvalidArgumentError(
            absl::StrCat("cannot read ", what, " ", shown,
                         ": too many levels of symbolic links (a symlink loop); point the "
                         "path at a regular file"));
      case ENXIO: {
        // Opening a socket fails with ENXIO; say what it is.
        struct stat st;
        if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
          return absl::InvalidArgumentError(absl::StrCat(what, " ", shown, " is ",
                                                         FileKindName(st.st_mode),
                                                         ", not a regular file; give the path "
                                                         "of a regular file"));
        }
        return absl::InternalError(
            absl::StrCat("cannot open ", what, " ", shown, ": ", std::strerror(err)));
      }
      default:
        return absl::InternalError(
            absl::StrCat("cannot open ", what, " ", shown, ": ", std::strerror(err)));
    }
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot stat ", what, " ", shown, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", shown, " is ",
                                                   FileKindName(st.st_mode),
                                                   ", not a regular file; give the path of a "
                                                   "regular file"));
  }
  if (size != nullptr) *size = st.st_size;
  return fd;
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, size_t max_bytes,
                                            const std::string& what) {
  off_t size = 0;
  absl::StatusOr<UniqueFd> fd = OpenRegularFile(path, what, path, &size);
  if (!fd.ok()) return fd.status();
  if (static_cast<unsigned long long>(size) > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is ", size,
                                                   " bytes, more than the limit of ", max_bytes,
                                                   " bytes; is it the right file?"));
  }
  std::string out;
  out.reserve(static_cast<size_t>(size));
  char buf[16384];
  while (true) {
    ssize_t n = read(fd->get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(
          absl::StrCat("cannot read ", what, " ", path, ": ", std::strerror(errno)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " grew past the limit of ",
                                                     max_bytes, " bytes while being read"));
    }
  }
  return out;
}

}  // namespace gpulet
