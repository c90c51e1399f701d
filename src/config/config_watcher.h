// ConfigFileWatcher: notices when the content of gpulet's config file changes, so that
// `gpulet serve` reloads it by itself, as on SIGHUP (docs: README's configuration section).
//
// A ConfigMap volume changes by one rename: the kubelet writes the new files in a fresh
// timestamped directory and swaps the volume's `..data` link to it (the config file itself
// is a link through `..data`). That rename wakes the watcher at once (inotify on the file's
// directory); an edit in place, or any other way a file is replaced, is seen by the next
// poll.
//
// What it compares is the file's content against the content it last saw, not the last
// one loaded: a bad file is reported once and not reloaded again every poll. A new content
// counts only once two reads `settle` apart agree (an editor that truncates and rewrites
// the file in place is not caught halfway), and a file missing, unreadable or empty for a
// moment (a swap or a write in progress) is no change at all.
//
// It also watches the files the configuration names whose content matters as much: the
// metrics web config and the certificate and key it names (WatchAlso), so that a Secret
// updated by cert-manager, or a web config changed in place, is reloaded too. Those are
// compared the same way, at each poll (their directories are not watched: a Secret's swap is
// seen within `poll`).
//
// Thread-safety: Start/Stop from one thread; WatchAlso from any thread. The callback runs on
// the watcher's thread ("gpulet-config"). Check() is for a watcher that is not started
// (tests).
#ifndef GPULET_CONFIG_CONFIG_WATCHER_H_
#define GPULET_CONFIG_CONFIG_WATCHER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/dir_watcher.h"

namespace gpulet::config {

class ConfigFileWatcher {
 public:
  struct Options {
    std::string path;  // the config file as `gpulet serve --config` names it
    absl::Duration poll = absl::Seconds(2);
    absl::Duration settle = absl::Milliseconds(250);
    std::function<void()> on_change;  // the content changed
  };

  // Takes the file's current content as what it last saw.
  explicit ConfigFileWatcher(Options options);
  ~ConfigFileWatcher();  // Stop()
  ConfigFileWatcher(const ConfigFileWatcher&) = delete;
  ConfigFileWatcher& operator=(const ConfigFileWatcher&) = delete;

  void Start();
  void Stop();  // idempotent

  // Also watch these files (replacing the previous list), taking their current content as
  // what was last seen. Call it after each (re)load with the files the configuration names.
  void WatchAlso(const std::vector<std::string>& paths);

  // Reads the files once. A content other than the last seen is pending until the next
  // Check reads it again; then it is the one seen, on_change is called (once, however many
  // files changed) and Check returns true.
  bool Check();

 private:
  // One watched file: what it held when last seen, and a new content read once.
  struct Watched {
    std::string path;
    std::optional<std::string> seen;
    std::optional<std::string> pending;
  };
  static std::optional<std::string> Read(const std::string& path);
  // Whether `w` has a new content confirmed by a second read.
  static bool Changed(Watched& w);

  Options options_;
  Watched main_;  // watcher thread only, once started
  absl::Mutex mu_;
  std::vector<Watched> also_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> any_pending_{false};
  DirWatcher dir_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gpulet::config

#endif  // GPULET_CONFIG_CONFIG_WATCHER_H_
