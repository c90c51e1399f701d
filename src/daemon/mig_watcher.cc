#include "daemon/mig_watcher.h"

#include <string>
#include <utility>
#include <vector>

#include "common/log.h"

namespace gpulet::daemon {

MigWatcher::MigWatcher(gpu::GpuLibrary* library, state::DeviceStore* store, Options options,
                       std::function<void()> on_change)
    : library_(library),
      store_(store),
      options_(std::move(options)),
      on_change_(std::move(on_change)) {}

MigWatcher::~MigWatcher() { Stop(); }

void MigWatcher::Start() {
  PeriodicWorker::Options wo;
  wo.name = "gpulet-mig";
  wo.interval = options_.interval;
  wo.clock = options_.clock;
  wo.tick_at_start = false;  // the inventory was read at start
  worker_ = std::make_unique<PeriodicWorker>(wo, [this] { Tick(); });
  worker_->Start();
}

void MigWatcher::Stop() {
  if (worker_ != nullptr) worker_->Stop();
  worker_.reset();
}

bool MigWatcher::Tick() {
  std::shared_ptr<const state::Snapshot> snap = store_->Get();
  struct Target {
    unsigned index;
    std::string key;
  };
  std::vector<Target> targets;
  for (const state::DeviceRecord& d : snap->devices) {
    if (!d.gpu.index || d.gpu.mig_capable != true || d.gpu.uuid.empty()) continue;
    targets.push_back({*d.gpu.index, d.gpu.uuid});
  }
  bool changed = false;
  for (const Target& t : targets) {
    absl::StatusOr<gpu::MigLayout> layout = library_->GetMigLayout(t.index, options_.timeout);
    if (!layout.ok()) continue;  // liveness reports a lost or hung GPU
    if (store_->SetMigLayout(t.key, *layout)) {
      changed = true;
      GPULET_LOG_INFO("GPU {}: MIG {} with {} MIG device(s)", t.key,
                      layout->enabled ? "enabled" : "disabled", layout->devices.size());
    }
  }
  if (changed && on_change_) on_change_();
  return changed;
}

}  // namespace gpulet::daemon
