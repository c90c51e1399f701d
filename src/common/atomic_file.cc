#include "common/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace gpulet {
namespace {

absl::StatusCode CodeFor(int err) {
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case ENOENT:
    case ENOTDIR:
      return absl::StatusCode::kNotFound;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status Failure(const std::string& path, absl::string_view step, int err) {
  return absl::Status(CodeFor(err),
                      absl::StrCat("cannot write ", path, ": ", step, ": ", std::strerror(err),
                                   err == EROFS ? " (read-only file system)" : ""));
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content,
                                 const AtomicWriteOptions& options) {
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write '", path, "': it names a directory, not a file"));
  }
  if (options.create_parents) {
    for (size_t pos = 1; pos <= dir.size(); ++pos) {
      if (pos != dir.size() && dir[pos] != '/') continue;
      const std::string prefix = dir.substr(0, pos);
      if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
        return Failure(path, absl::StrCat("creating directory ", prefix), errno);
      }
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(
        absl::StrCat("cannot write ", path, ": the directory ", dir, " does not exist"));
  }
  std::string tmp = absl::StrCat(dir == "/" ? "" : dir, "/.", base, ".tmp-XXXXXX");
  const int fd = mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return Failure(path, absl::StrCat("creating a temporary file in ", dir), errno);
  auto fail = [&](absl::string_view step, int err) {
    close(fd);
    unlink(tmp.c_str());
    return Failure(path, absl::StrCat(step, " ", tmp), err);
  };
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("writing", n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  if (fchmod(fd, static_cast<mode_t>(options.mode)) != 0) return fail("chmod of", errno);
  if (options.durable && fsync(fd) != 0) return fail("fsync of", errno);
  if (close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return Failure(path, absl::StrCat("closing ", tmp), err);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return Failure(path, absl::StrCat("renaming ", tmp, " over it"), err);
  }
  if (options.durable) {
    if (int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
      fsync(dfd);  // best effort: the rename is durable once the directory entry is
      close(dfd);
    }
  }
  return absl::OkStatus();
}

}  // namespace gpulet
