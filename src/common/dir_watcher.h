// DirWatcher: waits for files to appear in one directory (inotify), or for a wake-up.
//
// The kubelet re-creates its sockets when it restarts; the device plugin and the
// PodResources client both react to that. The directory need not exist yet: the watch is
// (re)added on every Wait, so a directory created (or deleted and re-created) later is
// picked up. Without inotify (fd limits) Wait degrades to a plain timeout.
//
// Thread-safety: Wait from one thread; Wake from any thread.
#ifndef GPULET_COMMON_DIR_WATCHER_H_
#define GPULET_COMMON_DIR_WATCHER_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace gpulet {

class DirWatcher {
 public:
  explicit DirWatcher(std::string dir);
  ~DirWatcher();
  DirWatcher(const DirWatcher&) = delete;
  DirWatcher& operator=(const DirWatcher&) = delete;

  struct Changes {
    std::vector<std::string> created;  // names created in or moved into the directory
    bool woken = false;                // Wake() was called
  };

  // Waits up to `timeout` for a change in the directory or a Wake().
  Changes Wait(absl::Duration timeout);
  void Wake();

  const std::string& dir() const { return dir_; }

 private:
  void AddWatch();

  std::string dir_;
  int inotify_fd_ = -1;
  int watch_ = -1;
  int wake_fd_ = -1;
};

}  // namespace gpulet

#endif  // GPULET_COMMON_DIR_WATCHER_H_
