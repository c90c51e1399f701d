#include "common/dir_watcher.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace gpulet {

DirWatcher::DirWatcher(std::string dir) : dir_(std::move(dir)) {
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  AddWatch();
}

DirWatcher::~DirWatcher() {
  if (inotify_fd_ >= 0) close(inotify_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void DirWatcher::AddWatch() {
  if (inotify_fd_ < 0 || watch_ >= 0) return;
  watch_ = inotify_add_watch(inotify_fd_, dir_.c_str(),
                             IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE_SELF);
}

void DirWatcher::Wake() {
  if (wake_fd_ < 0) return;
  uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof(one));
  (void)n;
}

DirWatcher::Changes DirWatcher::Wait(absl::Duration timeout) {
  AddWatch();
  Changes changes;
  struct pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  int ms = static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 1, 1 << 30));
  // Without a watch, a new directory is noticed by the next Wait: cap the sleep.
  if (watch_ < 0) ms = std::min(ms, 1000);
  if (poll(fds, 2, ms) <= 0) return changes;
  if (fds[1].revents & POLLIN) {
    uint64_t v;
    ssize_t n = read(wake_fd_, &v, sizeof(v));
    (void)n;
    changes.woken = true;
  }
  if (fds[0].revents & POLLIN) {
    alignas(struct inotify_event) char buf[4096];
    ssize_t n;
    while ((n = read(inotify_fd_, buf, sizeof(buf))) > 0) {
      for (char* p = buf; p < buf + n;) {
        auto* ev = reinterpret_cast<struct inotify_event*>(p);
        if (ev->len > 0 && (ev->mask & (IN_CREATE | IN_MOVED_TO))) {
          changes.created.emplace_back(ev->name);
        }
        if (ev->mask & (IN_DELETE_SELF | IN_IGNORED)) watch_ = -1;
        p += sizeof(struct inotify_event) + ev->len;
      }
    }
  }
  return changes;
}

}  // namespace gpulet
