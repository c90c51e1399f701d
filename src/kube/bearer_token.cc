#include "kube/bearer_token.h"

#include <errno.h>
#include <sys/stat.h>

#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/read_file.h"

namespace gpulet::kube {

BearerToken BearerToken::Fixed(std::string token) {
  BearerToken t;
  t.fixed_ = std::string(absl::StripAsciiWhitespace(token));
  return t;
}

BearerToken BearerToken::FromFile(std::string path) {
  BearerToken t;
  t.path_ = std::move(path);
  return t;
}

BearerToken::BearerToken(const BearerToken& other) : path_(other.path_), fixed_(other.fixed_) {}

std::string BearerToken::Describe() const {
  return path_.empty() ? "the configured bearer token" : absl::StrCat("the token file ", path_);
}

absl::StatusOr<std::string> BearerToken::ReadLocked() {
  // Projected tokens are atomically swapped symlinks (..data): the stat() follows them, so a
  // rotation shows as a new inode.
  struct stat st;
  if (stat(path_.c_str(), &st) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot stat the bearer token file ", path_, ": ",
                                               strerror(errno),
                                               "; the service account token must stay mounted"));
  }
  const int64_t mtime = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  if (read_ && st.st_dev == dev_ && st.st_ino == ino_ && st.st_size == size_ &&
      mtime == mtime_ns_) {
    return token_;
  }
  absl::StatusOr<std::string> text = ReadRegularFile(path_, 64 * 1024, "bearer token file");
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::UnavailableError(absl::StrCat("the bearer token file ", path_, " is empty"));
  }
  token_ = std::move(token);
  read_ = true;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  size_ = st.st_size;
  mtime_ns_ = mtime;
  return token_;
}

absl::StatusOr<std::string> BearerToken::Get() {
  if (path_.empty()) return fixed_;
  absl::MutexLock lock(&mu_);
  return ReadLocked();
}

bool BearerToken::Reload(const std::string& sent) {
  if (path_.empty()) return false;
  absl::MutexLock lock(&mu_);
  read_ = false;
  absl::StatusOr<std::string> t = ReadLocked();
  return t.ok() && *t != sent;
}

}  // namespace gpulet::kube
