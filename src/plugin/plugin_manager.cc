#include "plugin/plugin_manager.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/host_fs.h"
#include "common/log.h"
#include "common/periodic_worker.h"
#include "common/unix_socket.h"

namespace gpulet::plugin {
namespace {

constexpr absl::Duration kMinBackoff = absl::Milliseconds(50);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);
constexpr absl::Duration kRegisterTimeout = absl::Seconds(5);

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

std::string NextSocketName(const std::string& name) {
  absl::string_view stem = name;
  absl::ConsumeSuffix(&stem, ".sock");
  int n = 0;
  if (size_t dot = stem.rfind(".r");
      dot != absl::string_view::npos && absl::SimpleAtoi(stem.substr(dot + 2), &n) && n > 0) {
    stem = stem.substr(0, dot);
  } else {
    n = 0;
  }
  return absl::StrCat(stem, ".r", n + 1, ".sock");
}

void PluginManager::MoveToNewSocket(size_t i) {
  ResourceSpec spec = servers_[i]->resource();
  spec.socket_name = NextSocketName(spec.socket_name);
  servers_[i]->Stop();
  servers_[i] = std::make_unique<DevicePluginServer>(spec, config_, store_, control_, plugin_dir_,
                                                     slice_files_);
  if (absl::Status s = servers_[i]->Start(); !s.ok()) GPULET_LOG_ERROR("{}", s.message());
}

PluginManager::PluginManager(state::DeviceStore* store, ControlNodes control, const Clock* clock,
                             SliceFiles slice_files)
    : store_(store),
      control_(std::move(control)),
      slice_files_(std::move(slice_files)),
      clock_(clock) {}

PluginManager::~PluginManager() { Stop(); }

absl::Status PluginManager::Start(std::shared_ptr<const config::Config> config) {
  config_ = std::move(config);
  plugin_dir_ = JoinPath(config_->kubelet_dir, "device-plugins");
  kubelet_socket_ = JoinPath(plugin_dir_, "kubelet.sock");
  mkdir(config_->kubelet_dir.c_str(), 0755);
  if (mkdir(plugin_dir_.c_str(), 0750) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the kubelet device-plugins directory ", plugin_dir_, ": ",
                     std::strerror(errno), ". Mount the host's ", plugin_dir_,
                     " into the gpulet pod (see deploy/) or pass --kubelet-dir"));
  }
  watcher_ = std::make_unique<DirWatcher>(plugin_dir_);
  std::shared_ptr<const state::Snapshot> snap = store_->Get();
  if (absl::Status layout = MigLayoutError(*config_, *snap); !layout.ok()) {
    GPULET_LOG_ERROR("{}; no MIG device is advertised until the layout is fixed", layout.message());
    mig_error_ = std::string(layout.message());
  }
  for (const ResourceSpec& r : ResourcesFor(*config_, snap.get())) {
    servers_.push_back(std::make_unique<DevicePluginServer>(r, config_, store_, control_,
                                                            plugin_dir_, slice_files_));
    absl::Status s = servers_.back()->Start();
    if (!s.ok()) return s;
  }
  thread_ = StartNamedThread("gpulet-plugin", [this] { Run(); });
  return absl::OkStatus();
}

void PluginManager::Reconfigure(std::shared_ptr<const config::Config> config) {
  {
    absl::MutexLock lock(&mu_);
    pending_config_ = std::move(config);
  }
  Wake();
}

void PluginManager::Wake() {
  if (watcher_) watcher_->Wake();
}

void PluginManager::Stop() {
  if (thread_.joinable()) {
    stop_.store(true);
    register_cancel_.Cancel();
    Wake();
    thread_.join();
  }
  for (auto& s : servers_) s->Stop();
  servers_.clear();
  watcher_.reset();
}

void PluginManager::FollowLayout(std::vector<bool>* registered) {
  std::shared_ptr<const state::Snapshot> snap = store_->Get();
  if (snap->version == layout_version_) return;
  layout_version_ = snap->version;
  absl::Status layout = MigLayoutError(*config_, *snap);
  std::string error = layout.ok() ? "" : std::string(layout.message());
  if (error != mig_error_) {
    if (!error.empty()) {
      GPULET_LOG_ERROR("{}; no MIG device is advertised until the layout is fixed", error);
    } else {
      GPULET_LOG_INFO("the MIG layout is servable again with plugin.migStrategy {}",
                      config::MigStrategyName(config_->plugin.mig_strategy));
    }
    mig_error_ = error;
  }
  std::vector<ResourceSpec> want = ResourcesFor(*config_, snap.get());
  std::vector<std::unique_ptr<DevicePluginServer>> kept;
  std::vector<bool> kept_registered;
  for (const ResourceSpec& r : want) {
    bool found = false;
    for (size_t i = 0; i < servers_.size(); ++i) {
      // By what it serves, not its socket: one moved to a new socket name after the kubelet
      // refused an endpoint is still this resource's server (comparing the socket too made
      // every store change restart it and register again: the e2e suite on kubelet 1.37).
      if (servers_[i] != nullptr && servers_[i]->resource().SameResource(r)) {
        kept.push_back(std::move(servers_[i]));
        kept_registered.push_back((*registered)[i]);
        found = true;
        break;
      }
    }
    if (!found) {
      GPULET_LOG_INFO("MIG layout changed: now serving {}", r.name);
      kept.push_back(std::make_unique<DevicePluginServer>(r, config_, store_, control_, plugin_dir_,
                                                          slice_files_));
      kept_registered.push_back(false);  // started and registered by the loop below
    }
  }
  for (auto& s : servers_) {
    if (s == nullptr) continue;
    GPULET_LOG_INFO("MIG layout changed: no longer serving {}", s->resource().name);
    s->Stop();  // its socket goes; the kubelet drops the resource's devices
  }
  servers_ = std::move(kept);
  *registered = std::move(kept_registered);
}

void PluginManager::Run() {
  std::vector<bool> registered(servers_.size(), false);
  absl::Duration backoff = kMinBackoff;
  // Monotonic: a wall-clock step must not stall or hurry the registration retries.
  const MonoTime kDue = MonoTime::FromOrigin(-absl::InfiniteDuration());  // already due
  MonoTime next_attempt = kDue;
  bool kubelet_seen = false;

  while (!stop_.load()) {
    // A new config: rebuild every server.
    std::shared_ptr<const config::Config> next;
    {
      absl::MutexLock lock(&mu_);
      next = std::move(pending_config_);
    }
    if (next) {
      for (auto& s : servers_) s->Stop();
      servers_.clear();
      config_ = next;
      for (const ResourceSpec& r : ResourcesFor(*config_, store_->Get().get())) {
        servers_.push_back(std::make_unique<DevicePluginServer>(r, config_, store_, control_,
                                                                plugin_dir_, slice_files_));
      }
      registered.assign(servers_.size(), false);
      GPULET_LOG_INFO("configuration changed: serving {} resource(s) again", servers_.size());
    } else {
      // The resource set follows the MIG layout (a profile appears or goes under the mixed
      // strategy, single switches between whole GPUs and MIG devices): serve what it is now.
      FollowLayout(&registered);
    }
    // Our socket gone (kubelet restart cleans the directory) or never started: serve again.
    mkdir(plugin_dir_.c_str(), 0750);
    for (size_t i = 0; i < servers_.size(); ++i) {
      if (!servers_[i]->SocketIntact()) {
        // Replaced by a socket another process serves: the new gpulet pod of a rolling
        // update (maxSurge) took the resource over. The device manager keeps one endpoint per
        // resource, so taking it back would only make the two pods fight over it until this
        // one stops; leave it, and serve again only if the path is freed (the other gone).
        if ((servers_[i]->running() || servers_[i]->yielded()) &&
            ProbeUnixSocket(servers_[i]->socket_path()) == SocketProbe::kServed) {
          if (servers_[i]->running()) {
            GPULET_LOG_INFO(
                "socket {} is served by another process now (a new gpulet pod "
                "took {} over): leaving it",
                servers_[i]->socket_path(), servers_[i]->resource().name);
            servers_[i]->Yield();
          }
          registered[i] = true;  // nothing to register while the other serves
          continue;
        }
        if (servers_[i]->running()) {
          GPULET_LOG_INFO("socket {} was removed (kubelet restart?): serving again",
                          servers_[i]->socket_path());
        }
        servers_[i]->Stop();
        absl::Status s = servers_[i]->Start();
        if (!s.ok()) GPULET_LOG_ERROR("{}", s.message());
        registered[i] = false;
      }
    }
    // Register whatever is not registered, once the kubelet is there.
    bool kubelet_up = Exists(kubelet_socket_);
    if (kubelet_up != kubelet_seen) {
      if (!kubelet_up) GPULET_LOG_WARN("waiting for the kubelet: {} is absent", kubelet_socket_);
      kubelet_seen = kubelet_up;
    }
    bool pending = false;
    if (kubelet_up && clock_->Monotonic() >= next_attempt) {
      for (size_t i = 0; i < servers_.size(); ++i) {
        if (registered[i] || !servers_[i]->running()) continue;
        absl::Status s =
            servers_[i]->Register(kubelet_socket_, kRegisterTimeout, &register_cancel_);
        if (s.ok()) {
          registered[i] = true;
          registrations_.fetch_add(1);
          GPULET_LOG_INFO("registered {} with the kubelet (endpoint {})",
                          servers_[i]->resource().name, servers_[i]->resource().socket_name);
        } else if (absl::IsCancelled(s)) {
          break;  // Stop cancelled it: the loop ends
        } else if (absl::IsFailedPrecondition(s)) {
          // The kubelet refused: the same path may stay refused (see the header).
          MoveToNewSocket(i);
          GPULET_LOG_WARN("{}; serving it under {} and registering that in {}", s.message(),
                          servers_[i]->resource().socket_name, absl::FormatDuration(backoff));
        } else {
          GPULET_LOG_WARN("{}; retrying in {}", s.message(), absl::FormatDuration(backoff));
        }
      }
    }
    for (size_t i = 0; i < servers_.size(); ++i) pending |= !registered[i];
    if (pending && kubelet_up) {
      if (clock_->Monotonic() >= next_attempt) {
        next_attempt = clock_->Monotonic() + backoff;
        backoff = std::min(backoff * 2, kMaxBackoff);
      }
    } else if (!pending) {
      backoff = kMinBackoff;
      next_attempt = kDue;
    }

    // Sleep until something happens in the directory, a wake-up, or the next retry.
    absl::Duration wait = absl::Seconds(1);
    if (pending && kubelet_up) {
      wait = std::max(absl::ZeroDuration(), next_attempt - clock_->Monotonic());
    }
    DirWatcher::Changes changes = watcher_->Wait(std::max(wait, absl::Milliseconds(1)));
    for (const std::string& name : changes.created) {
      if (name == "kubelet.sock") {
        // A (re)started kubelet has forgotten us: register again, right away.
        GPULET_LOG_INFO("kubelet.sock created: registering again");
        registered.assign(servers_.size(), false);
        next_attempt = kDue;
        backoff = kMinBackoff;
      }
    }
  }
}

}  // namespace gpulet::plugin
