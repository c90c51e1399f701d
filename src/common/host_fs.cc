#include "common/host_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/read_file.h"

namespace gpulet {
namespace {

constexpr int kMaxSymlinks = 40;

std::deque<std::string> SplitComponents(absl::string_view path) {
  std::deque<std::string> out;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    out.emplace_back(part);
  }
  return out;
}

std::string HostPathOf(const std::vector<std::string>& parts) {
  if (parts.empty()) return "/";
  std::string out;
  for (const auto& p : parts) absl::StrAppend(&out, "/", p);
  return out;
}

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

}  // namespace

std::string JoinPath(absl::string_view a, absl::string_view b) {
  if (a.empty()) return std::string(b);
  if (b.empty()) return std::string(a);
  bool a_slash = a.back() == '/';
  bool b_slash = b.front() == '/';
  if (a_slash && b_slash) return absl::StrCat(a, b.substr(1));
  if (a_slash || b_slash) return absl::StrCat(a, b);
  return absl::StrCat(a, "/", b);
}

HostFs::HostFs(std::string root) {
  // assign(1, '/'), not = "/": GCC 12 warns falsely (-Wrestrict) on the latter at -O3.
  if (root.empty()) root.assign(1, '/');
  if (root.front() != '/') {
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)) != nullptr) root = JoinPath(cwd, root);
  }
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  root_ = root;
}

absl::StatusOr<std::string> HostFs::ResolveImpl(absl::string_view host_path,
                                                bool follow_last) const {
  if (host_path.empty() || host_path.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat("host path '", host_path, "' must be absolute"));
  }
  std::deque<std::string> todo = SplitComponents(host_path);
  std::vector<std::string> done;
  int links = 0;
  bool missing = false;  // once a component is missing, the rest is taken lexically
  while (!todo.empty()) {
    std::string part = std::move(todo.front());
    todo.pop_front();
    if (part == ".") continue;
    if (part == "..") {
      if (!done.empty()) done.pop_back();  // never above the root
      continue;
    }
    done.push_back(part);
    if (missing) continue;
    bool is_last = todo.empty();
    if (is_last && !follow_last) break;
    std::string local = is_real_root() ? HostPathOf(done) : root_ + HostPathOf(done);
    struct stat st;
    if (lstat(local.c_str(), &st) != 0) {
      missing = true;
      continue;
    }
    if (!S_ISLNK(st.st_mode)) continue;
    if (++links > kMaxSymlinks) {
      return absl::FailedPreconditionError(
          absl::StrCat("too many symbolic links resolving ", Describe(host_path)));
    }
    char buf[4096];
    ssize_t n = readlink(local.c_str(), buf, sizeof(buf) - 1);
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("readlink ", local));
    absl::string_view target(buf, static_cast<size_t>(n));
    done.pop_back();
    if (!target.empty() && target.front() == '/') done.clear();
    std::deque<std::string> target_parts = SplitComponents(target);
    todo.insert(todo.begin(), target_parts.begin(), target_parts.end());
  }
  std::string host = HostPathOf(done);
  return is_real_root() ? host : (host == "/" ? root_ : root_ + host);
}

absl::StatusOr<std::string> HostFs::Resolve(absl::string_view host_path) const {
  return ResolveImpl(host_path, /*follow_last=*/true);
}

absl::StatusOr<std::string> HostFs::ResolveParent(absl::string_view host_path) const {
  return ResolveImpl(host_path, /*follow_last=*/false);
}

std::string HostFs::Describe(absl::string_view host_path) const {
  if (is_real_root()) return std::string(host_path);
  return absl::StrCat(host_path, " (read as ", JoinPath(root_, host_path), ")");
}

namespace {

// The regular file at `local` (`shown` in messages), at most `max_bytes` of it. Non-blocking
// and regular files only: a FIFO or device planted in a host tree must not hang or flood the
// reader.
absl::StatusOr<std::string> ReadLocalFile(const std::string& local, const std::string& shown,
                                          size_t max_bytes, bool follow_last) {
  absl::StatusOr<UniqueFd> fd = OpenRegularFile(local, "host file", shown, nullptr, follow_last);
  if (!fd.ok()) return fd.status();
  std::string out;
  char buf[8192];
  while (out.size() < max_bytes) {
    ssize_t n = read(fd->get(), buf, std::min(sizeof(buf), max_bytes - out.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("cannot read ", shown));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// A sysfs attribute's value: at most 64 KiB, trailing whitespace and NULs dropped.
constexpr size_t kMaxAttributeBytes = 64 * 1024;
absl::StatusOr<std::string> AttributeValue(absl::StatusOr<std::string> text) {
  if (!text.ok()) return text.status();
  while (!text->empty() && (text->back() == '\n' || text->back() == ' ' || text->back() == '\t' ||
                            text->back() == '\r' || text->back() == '\0')) {
    text->pop_back();
  }
  return text;
}

}  // namespace

absl::StatusOr<std::string> HostFs::ReadFile(absl::string_view host_path, size_t max_bytes) const {
  absl::StatusOr<std::string> local = Resolve(host_path);
  if (!local.ok()) return local.status();
  return ReadLocalFile(*local, Describe(host_path), max_bytes, /*follow_last=*/true);
}

absl::StatusOr<std::string> HostFs::ReadAttribute(absl::string_view host_path) const {
  return AttributeValue(ReadFile(host_path, kMaxAttributeBytes));
}

absl::StatusOr<HostFs::Dir> HostFs::OpenDir(absl::string_view host_path) const {
  absl::StatusOr<std::string> local = Resolve(host_path);
  if (!local.ok()) return local.status();
  struct stat st;
  if (stat(local->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat(Describe(host_path), " is not a directory"));
  }
  return Dir(this, std::string(host_path), *std::move(local));
}

absl::StatusOr<std::string> HostFs::Dir::ReadFile(absl::string_view name, size_t max_bytes) const {
  if (name.empty() || name == "." || name == ".." || name.find('/') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is not a file name in ", host_->Describe(host_path_)));
  }
  return ReadLocalFile(absl::StrCat(local_, "/", name), host_->Describe(JoinPath(host_path_, name)),
                       max_bytes,
                       /*follow_last=*/false);
}

absl::StatusOr<std::string> HostFs::Dir::ReadAttribute(absl::string_view name) const {
  return AttributeValue(ReadFile(name, kMaxAttributeBytes));
}

absl::StatusOr<std::vector<std::string>> HostFs::ListDir(absl::string_view host_path) const {
  absl::StatusOr<std::string> local = Resolve(host_path);
  if (!local.ok()) return local.status();
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(local->c_str()), closedir);
  if (!dir) return ErrnoStatus(errno, absl::StrCat("cannot list ", Describe(host_path)));
  std::vector<std::string> names;
  while (struct dirent* e = readdir(dir.get())) {
    absl::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> HostFs::ReadLink(absl::string_view host_path) const {
  absl::StatusOr<std::string> local = ResolveParent(host_path);
  if (!local.ok()) return local.status();
  char buf[4096];
  ssize_t n = readlink(local->c_str(), buf, sizeof(buf) - 1);
  if (n < 0) return ErrnoStatus(errno, absl::StrCat("cannot read link ", Describe(host_path)));
  std::string target(buf, static_cast<size_t>(n));
  if (!target.empty() && target.front() == '/') return target;
  // A relative target is relative to the directory that really holds the link, which is not
  // the lexical parent of `host_path` when that parent is reached through a symlink: the
  // `driver` link in /sys/bus/pci/devices/0000:01:00.0 (itself a link to
  // /sys/devices/pci0000:00/0000:01:00.0) says "../../../bus/pci/drivers/nvidia", which
  // means /sys/bus/pci/drivers/nvidia only from the latter.
  absl::string_view link_host_path = *local;
  if (!is_real_root()) link_host_path.remove_prefix(root_.size());
  absl::string_view dir = link_host_path.substr(0, link_host_path.rfind('/'));
  // Normalise "a/b/../c" lexically; the result is a host path, not resolved further.
  std::vector<std::string> parts;
  for (const std::string& p : SplitComponents(JoinPath(dir.empty() ? "/" : dir, target))) {
    if (p == ".") continue;
    if (p == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(p);
  }
  return HostPathOf(parts);
}

bool HostFs::Exists(absl::string_view host_path) const {
  absl::StatusOr<std::string> local = Resolve(host_path);
  struct stat st;
  return local.ok() && stat(local->c_str(), &st) == 0;
}

bool HostFs::IsDirectory(absl::string_view host_path) const {
  absl::StatusOr<std::string> local = Resolve(host_path);
  struct stat st;
  return local.ok() && stat(local->c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace gpulet
