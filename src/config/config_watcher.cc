#include "config/config_watcher.h"

#include <pthread.h>

#include <filesystem>
#include <utility>

#include "common/read_file.h"

namespace gpulet {

namespace {

std::string DirectoryOf(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

ConfigFileWatcher::ConfigFileWatcher(Options options)
    : options_(std::move(options)), dir_(DirectoryOf(options_.path)) {
  seen_ = Read();
}

ConfigFileWatcher::~ConfigFileWatcher() { Stop(); }

std::optional<std::string> ConfigFileWatcher::Read() const {
  absl::StatusOr<std::string> content =
      ReadRegularFile(options_.path, kMaxConfigFileBytes, "config file");
  if (!content.ok()) return std::nullopt;
  return *std::move(content);
}

bool ConfigFileWatcher::Check() {
  std::optional<std::string> now = Read();
  if (!now || now->empty() || now == seen_) {
    pending_.reset();
    return false;
  }
  if (now != pending_) {
    pending_ = std::move(now);
    return false;
  }
  seen_ = std::move(pending_);
  pending_.reset();
  if (options_.on_change) options_.on_change();
  return true;
}

void ConfigFileWatcher::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "gpulet-config");
    while (!stop_.load()) {
      dir_.Wait(pending_ ? options_.settle : options_.poll);
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

}  // namespace gpulet
