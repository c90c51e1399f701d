#include "config/config_watcher.h"

#include <pthread.h>

#include <filesystem>
#include <utility>

#include "common/read_file.h"

namespace gpulet::config {

namespace {

std::string DirectoryOf(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

ConfigFileWatcher::ConfigFileWatcher(Options options)
    : options_(std::move(options)), dir_(DirectoryOf(options_.path)) {
  main_.path = options_.path;
  main_.seen = Read(main_.path);
}

ConfigFileWatcher::~ConfigFileWatcher() { Stop(); }

std::optional<std::string> ConfigFileWatcher::Read(const std::string& path) {
  absl::StatusOr<std::string> content = ReadRegularFile(path, kMaxConfigFileBytes, "file");
  if (!content.ok()) return std::nullopt;
  return *std::move(content);
}

bool ConfigFileWatcher::Changed(Watched& w) {
  std::optional<std::string> now = Read(w.path);
  if (!now || now->empty() || now == w.seen) {
    w.pending.reset();
    return false;
  }
  if (now != w.pending) {
    w.pending = std::move(now);
    return false;
  }
  w.seen = std::move(w.pending);
  w.pending.reset();
  return true;
}

void ConfigFileWatcher::WatchAlso(const std::vector<std::string>& paths) {
  std::vector<Watched> also;
  for (const std::string& p : paths) also.push_back({p, Read(p), std::nullopt});
  absl::MutexLock lock(&mu_);
  also_ = std::move(also);
}

bool ConfigFileWatcher::Check() {
  bool changed = Changed(main_);
  bool pending = main_.pending.has_value();
  {
    absl::MutexLock lock(&mu_);
    for (Watched& w : also_) {
      changed |= Changed(w);
      pending |= w.pending.has_value();
    }
  }
  any_pending_ = pending;
  if (changed && options_.on_change) options_.on_change();
  return changed;
}

void ConfigFileWatcher::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "gpulet-config");
    while (!stop_.load()) {
      dir_.Wait(any_pending_.load() ? options_.settle : options_.poll);
      if (stop_.load()) break;
      Check();
    }
  });
}

void ConfigFileWatcher::Stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  dir_.Wake();
  thread_.join();
}

}  // namespace gpulet::config
