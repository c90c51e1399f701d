// ReadRegularFile: the one way gpulet reads a small file named by its user (the daemon's
// config file, the metrics web-config file), safe against whatever the path turns out to be.
//
// The file is opened with O_RDONLY|O_NONBLOCK|O_CLOEXEC|O_NOCTTY, so that opening a FIFO
// with no writer or a terminal never blocks or becomes the controlling terminal; fstat() on
// the open descriptor (not the path, so nothing can be swapped in between) then refuses
// anything but a regular file: a directory, FIFO, socket, character or block device is an
// error naming its kind. A file larger than `max_bytes` is refused before it is read, and a
// file that grows while being read stops at `max_bytes + 1` bytes and is refused too.
//
// Errors (each names the path and says what to do): NotFound (no such file), PermissionDenied,
// InvalidArgument (not a regular file, symlink loop, too large), Internal (read failures).
//
// Thread-safety: a pure function of the file system; safe from any thread.
#ifndef GPULET_COMMON_READ_FILE_H_
#define GPULET_COMMON_READ_FILE_H_

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/file_kind.h"  // FileKindName, for callers' messages

namespace gpulet {

// An open file descriptor, closed when this goes away.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// Opens `path` as ReadRegularFile does and checks, on the open descriptor, that it is a
// regular file; `size` (when not null) gets its size. Messages name the file as `what`
// `shown` (`shown` defaults to `path`). Errors are ReadRegularFile's, without the size limit.
// With `follow_last` false, a symlink as the last component is refused (InvalidArgument)
// instead of followed.
absl::StatusOr<UniqueFd> OpenRegularFile(const std::string& path, const std::string& what,
                                         const std::string& shown = "", off_t* size = nullptr,
                                         bool follow_last = true);

// The size cap for configuration files (the config and the web config): 1 MiB.
inline constexpr size_t kMaxConfigFileBytes = size_t{1} << 20;

// The contents of the regular file at `path`, at most `max_bytes` long. `what` names the
// file in messages ("config file", "web config file").
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, size_t max_bytes,
                                            const std::string& what = "file");

}  // namespace gpulet

#endif  // GPULET_COMMON_READ_FILE_H_
