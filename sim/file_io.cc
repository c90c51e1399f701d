#include "sim/file_io.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/file_kind.h"

namespace gpulet::sim {
namespace {

std::string NotRegular(const char* what, const std::string& path, mode_t mode) {
  return std::string(what) + " " + path + " is " + FileKindName(mode) +
         ", not a regular file; give the path of a regular file";
}

}  // namespace

ReadResult ReadCappedRegularFile(const std::string& path, size_t max_bytes, const char* what,
                                 std::string* text, std::string* error) {
  const std::string cannot = std::string("cannot read ") + what + " " + path + ": ";
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    struct stat st;
    if (err == ENXIO && stat(path.c_str(), &st) == 0) {  // a socket
      *error = NotRegular(what, path, st.st_mode);
      return ReadResult::kError;
    }
    if (err == ENOENT || err == ENOTDIR) {
      *error = cannot + "it does not exist; check the path";
      return ReadResult::kMissing;
    }
    *error = cannot + std::strerror(err);
    return ReadResult::kError;
  }
  struct stat st;
  std::string out;
  bool ok = false;
  if (fstat(fd, &st) != 0) {
    *error = cannot + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    *error = NotRegular(what, path, st.st_mode);
  } else if (static_cast<unsigned long long>(st.st_size) > max_bytes) {
    *error = std::string(what) + " " + path + " is " + std::to_string(st.st_size) +
             " bytes, more than the limit of " + std::to_string(max_bytes) +
             " bytes; is it the right file?";
  } else {
    out.reserve(static_cast<size_t>(st.st_size));
    char buf[16384];
    ok = true;
    while (ok) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        *error = cannot + std::strerror(errno);
        ok = false;
      } else if (n == 0) {
        break;
      } else if (out.size() + static_cast<size_t>(n) > max_bytes) {
        *error = std::string(what) + " " + path + " grew past the limit of " +
                 std::to_string(max_bytes) + " bytes while being read";
        ok = false;
      } else {
        out.append(buf, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  if (!ok) return ReadResult::kError;
  *text = std::move(out);
  return ReadResult::kOk;
}

bool ReplaceFile(const std::string& path, std::string_view content, std::string* error) {
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string cannot = "cannot write " + path + ": ";
  if (base.empty() || base == "." || base == "..") {
    *error = cannot + "it names a directory, not a file";
    return false;
  }
  std::string tmp = (dir == "/" ? "" : dir) + "/." + base + ".tmp-XXXXXX";
  const int fd = mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) {
    *error = cannot + "creating a temporary file in " + dir + ": " + std::strerror(errno);
    return false;
  }
  const char* step = nullptr;
  int err = 0;
  for (size_t done = 0; done < content.size() && step == nullptr;) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      step = "writing";
      err = n < 0 ? errno : EIO;
    } else {
      done += static_cast<size_t>(n);
    }
  }
  if (step == nullptr && fchmod(fd, 0644) != 0) {
    step = "chmod of";
    err = errno;
  }
  if (close(fd) != 0 && step == nullptr) {
    step = "closing";
    err = errno;
  }
  if (step == nullptr && rename(tmp.c_str(), path.c_str()) != 0) {
    step = "renaming over it";
    err = errno;
  }
  if (step == nullptr) return true;
  unlink(tmp.c_str());
  *error = cannot + step + " " + tmp + ": " + std::strerror(err);
  return false;
}

}  // namespace gpulet::sim
