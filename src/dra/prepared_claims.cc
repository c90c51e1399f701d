#include "dra/prepared_claims.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace gpulet::dra {
namespace {

std::string Describe(const ClaimRef& c) {
  return absl::StrCat("ResourceClaim ", c.ns, "/", c.name, " (uid ", c.uid, ")");
}

// Empty when the reference is complete; otherwise what is missing.
std::string Incomplete(const ClaimRef& c) {
  std::vector<std::string> missing;
  if (c.ns.empty()) missing.push_back("namespace");
  if (c.uid.empty()) missing.push_back("uid");
  if (c.name.empty()) missing.push_back("name");
  if (missing.empty()) return "";
  std::string what;
  for (size_t i = 0; i < missing.size(); ++i) {
    absl::StrAppend(&what, i == 0 ? "" : (i + 1 == missing.size() ? " and " : ", "), missing[i]);
  }
  return absl::StrCat("the kubelet sent a claim reference without its ", what, " (", Describe(c),
                      "); every field is required");
}

// Creates the missing directories of `dir` (mode 0755, as CheckpointFile::Save does).
void MakeParents(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    mkdir(dir.substr(0, pos).c_str(), 0755);  // an error shows when the lock file is opened
  }
}

}  // namespace

// Holds an exclusive flock on the lock file for its scope. flock(2) locks belong to the open
// file description, so two PreparedClaims (two processes, or two objects in one) exclude each
// other, while one object's calls are already serialized by its mutex.
class PreparedClaims::FileLock {
 public:
  explicit FileLock(int fd) : fd_(fd) {
    int r;
    do {
      r = flock(fd_, LOCK_EX);
    } while (r != 0 && errno == EINTR);
    error_ = r == 0 ? 0 : errno;
  }
  ~FileLock() {
    if (error_ == 0) flock(fd_, LOCK_UN);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  int error() const { return error_; }

 private:
  const int fd_;
  int error_ = 0;
};

absl::StatusOr<std::unique_ptr<PreparedClaims>> PreparedClaims::Open(std::string checkpoint_path,
                                                                     ClaimPreparer* preparer) {
  CheckpointFile file(std::move(checkpoint_path));
  const std::string lock_path = file.path() + ".lock";
  if (size_t slash = file.path().rfind('/'); slash != std::string::npos && slash > 0) {
    MakeParents(file.path().substr(0, slash));
  }
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open the DRA checkpoint's lock file ", lock_path, ": ", strerror(errno),
        "; check that the checkpoint's directory is writable (the mount and its permissions)"));
  }
  fchmod(fd, 0600);  // the umask may have taken bits, or an older file may have others
  absl::StatusOr<ClaimCheckpoint> loaded;
  {
    FileLock lock(fd);  // not half of another process's Save (rename is atomic anyway)
    loaded = file.Load();
  }
  if (!loaded.ok()) {
    close(fd);
    return loaded.status();
  }
  if (!loaded->empty()) {
    GPULET_LOG_INFO("DRA checkpoint {}: {} prepared claim(s) from before the restart", file.path(),
                    loaded->size());
  }
  return std::unique_ptr<PreparedClaims>(
      new PreparedClaims(std::move(file), std::move(*loaded), preparer, fd));
}

PreparedClaims::PreparedClaims(CheckpointFile file, ClaimCheckpoint loaded, ClaimPreparer* preparer,
                               int lock_fd)
    : file_(std::move(file)), preparer_(preparer), lock_fd_(lock_fd), claims_(std::move(loaded)) {}

PreparedClaims::~PreparedClaims() { close(lock_fd_); }

absl::Status PreparedClaims::ReloadLocked(int lock_error) {
  if (lock_error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot lock ", lock_path(), ": ", strerror(lock_error)));
  }
  return Reload();
}

absl::Status PreparedClaims::Reload() {
  absl::StatusOr<ClaimCheckpoint> now = file_.Load();
  if (!now.ok()) return now.status();
  claims_ = std::move(*now);
  return absl::OkStatus();
}

std::map<std::string, PrepareResult> PreparedClaims::Prepare(const std::vector<ClaimRef>& claims) {
  std::map<std::string, PrepareResult> out;
  absl::MutexLock lock(&mu_);
  FileLock file_lock(lock_fd_);
  absl::Status ready = ReloadLocked(file_lock.error());
  if (!ready.ok()) {
    GPULET_LOG_ERROR("NodePrepareResources: {}", ready.message());
    for (const ClaimRef& c : claims) {
      out[c.uid].error = absl::StrCat("preparing ", Describe(c), ": ", ready.message());
    }
    return out;
  }
  std::vector<ClaimRef> todo;
  std::set<std::string> seen;
  for (const ClaimRef& c : claims) {
    if (!seen.insert(c.uid).second) continue;  // asked twice in one call: answered once
    if (std::string bad = Incomplete(c); !bad.empty()) {
      out[c.uid].error = std::move(bad);
      continue;
    }
    auto done = claims_.find(c.uid);
    if (done != claims_.end()) {
      out[c.uid].devices = done->second.devices;  // prepared before: the same answer
      continue;
    }
    todo.push_back(c);
  }
  if (todo.empty()) return out;

  std::map<std::string, PrepareResult> results = preparer_->Prepare(todo);
  ClaimCheckpoint next = claims_;
  std::vector<PreparedClaim> added;
  for (const ClaimRef& c : todo) {
    auto r = results.find(c.uid);
    if (r == results.end()) {
      out[c.uid].error = absl::StrCat("preparing ", Describe(c), " gave no result; retry");
      continue;
    }
    if (!r->second.error.empty()) {
      out[c.uid].error = r->second.error;
      continue;
    }
    PreparedClaim p{.ref = c, .devices = r->second.devices};
    next[c.uid] = p;
    added.push_back(std::move(p));
  }
  if (added.empty()) return out;

  absl::Status saved = file_.Save(next);
  if (saved.ok()) {
    claims_ = std::move(next);
    for (const PreparedClaim& p : added) out[p.ref.uid].devices = p.devices;
    return out;
  }
  // Unrecorded work would never be undone after a restart: undo it now, and let the kubelet
  // retry the claims.
  GPULET_LOG_ERROR("{}; undoing the {} claim(s) just prepared", saved.message(), added.size());
  std::map<std::string, std::string> undo = preparer_->Unprepare(added);
  for (const PreparedClaim& p : added) {
    std::string& error = out[p.ref.uid].error;
    error =
        absl::StrCat("prepared ", Describe(p.ref), " but could not record it: ", saved.message());
    auto u = undo.find(p.ref.uid);
    if (u != undo.end() && !u->second.empty()) {
      absl::StrAppend(&error, "; undoing it failed too (", u->second, ")");
    }
  }
  return out;
}

std::map<std::string, std::string> PreparedClaims::Unprepare(const std::vector<ClaimRef>& claims) {
  std::map<std::string, std::string> out;
  absl::MutexLock lock(&mu_);
  FileLock file_lock(lock_fd_);
  absl::Status ready = ReloadLocked(file_lock.error());
  if (!ready.ok()) {
    GPULET_LOG_ERROR("NodeUnprepareResources: {}", ready.message());
    for (const ClaimRef& c : claims) {
      out[c.uid] = absl::StrCat("unpreparing ", Describe(c), ": ", ready.message());
    }
    return out;
  }
  std::vector<PreparedClaim> todo;
  std::set<std::string> seen;
  for (const ClaimRef& c : claims) {
    if (!seen.insert(c.uid).second) continue;
    if (c.uid.empty()) {
      out[c.uid] = Incomplete(c);
      continue;
    }
    auto done = claims_.find(c.uid);
    if (done == claims_.end()) {
      out[c.uid] = "";  // never prepared here, or already unprepared: nothing to undo
      continue;
    }
    todo.push_back(done->second);
  }
  if (todo.empty()) return out;

  std::map<std::string, std::string> errors = preparer_->Unprepare(todo);
  ClaimCheckpoint next = claims_;
  std::vector<std::string> removed;
  for (const PreparedClaim& p : todo) {
    auto e = errors.find(p.ref.uid);
    if (e != errors.end() && !e->second.empty()) {
      out[p.ref.uid] = e->second;  // still recorded: the kubelet's retry tries again
      continue;
    }
    next.erase(p.ref.uid);
    removed.push_back(p.ref.uid);
  }
  if (removed.empty()) return out;

  absl::Status saved = file_.Save(next);
  if (saved.ok()) {
    claims_ = std::move(next);
    for (const std::string& uid : removed) out[uid] = "";
    return out;
  }
  // Still recorded, so the retry undoes them again; ClaimPreparer::Unprepare allows that.
  for (const std::string& uid : removed) {
    out[uid] = absl::StrCat("unprepared ", Describe(claims_.at(uid).ref),
                            " but could not record it: ", saved.message());
  }
  return out;
}

ClaimCheckpoint PreparedClaims::prepared() const {
  absl::MutexLock lock(&mu_);
  return claims_;
}

}  // namespace gpulet::dra
