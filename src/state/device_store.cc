#include "state/device_store.h"

#include "node/bus_id.h"

namespace gpulet::state {

const char* HealthStateName(HealthState state) {
  switch (state) {
    case HealthState::kHealthy:
      return "Healthy";
    case HealthState::kDegraded:
      return "Degraded";
    case HealthState::kUnhealthy:
      return "Unhealthy";
  }
  return "Unknown";
}

void GpuHealth::Raise(const std::string& source, HealthCondition condition, absl::Time now) {
  auto it = conditions.find(source);
  if (it != conditions.end() && it->second.severity == condition.severity) {
    condition.since = it->second.since;
  } else if (condition.since == absl::InfinitePast()) {
    condition.since = now;
  }
  conditions[source] = std::move(condition);
  Recompute(now);
}

void GpuHealth::Clear(const std::string& source, absl::Time now) {
  if (conditions.erase(source) > 0) Recompute(now);
}

void GpuHealth::Recompute(absl::Time now) {
  const HealthCondition* worst = nullptr;
  for (const auto& [source, c] : conditions) {
    if (worst == nullptr || c.severity > worst->severity ||
        (c.severity == worst->severity && c.since < worst->since)) {
      worst = &c;
    }
  }
  HealthState next = worst == nullptr ? HealthState::kHealthy : worst->severity;
  if (next != state) since = now;
  state = next;
  reason = worst == nullptr ? "" : worst->reason;
  action = worst == nullptr ? "" : worst->action;
}

const DeviceRecord* Snapshot::FindByUuid(const std::string& uuid) const {
  for (const DeviceRecord& d : devices) {
    if (d.gpu.uuid == uuid) return &d;
  }
  return nullptr;
}

DeviceStore::DeviceStore() : current_(std::make_shared<Snapshot>()) {}

void DeviceStore::PublishLocked(std::shared_ptr<Snapshot> next) {
  next->version = current_->version + 1;
  current_ = std::move(next);
}

namespace {

// Finds a record by UUID, or by bus id in any of its spellings.
template <typename SnapshotT>
auto* FindRecord(SnapshotT& s, const std::string& key) {
  std::string bus = node::NormalizeBusId(key);
  decltype(&s.devices[0]) found = nullptr;
  for (auto& d : s.devices) {
    if ((!d.gpu.uuid.empty() && d.gpu.uuid == key) || (!bus.empty() && d.gpu.bus_id == bus)) {
      found = &d;
      break;
    }
  }
  return found;
}

}  // namespace

void DeviceStore::SetInventory(const gpu::Inventory& inventory, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto next = std::make_shared<Snapshot>();
  next->nvml_ok = inventory.nvml_status.ok();
  next->nvml_error = std::string(inventory.nvml_status.message());
  for (const gpu::Gpu& gpu : inventory.gpus) {
    DeviceRecord record;
    record.gpu = gpu;
    record.health.since = now;
    if (const DeviceRecord* prev =
            FindRecord(*current_, gpu.uuid.empty() ? gpu.bus_id : gpu.uuid)) {
      record.health = prev->health;
      record.mig_health = prev->mig_health;
    }
    // Without NVML nothing can vouch for a GPU: advertising it Healthy would send pods to
    // a card that cannot run them.
    if (!next->nvml_ok) {
      record.health.Raise("nvml",
                          {HealthState::kUnhealthy, "NVML unavailable: " + next->nvml_error,
                           "run `gpulet doctor` on the node", now},
                          now);
    } else if (!gpu.in_nvml) {
      std::string driver = gpu.kernel_driver.empty() ? "none" : gpu.kernel_driver;
      record.health.Raise(
          "nvml",
          {HealthState::kUnhealthy,
           gpu.nvml_error.empty()
               ? "on the PCI bus but not visible to NVML (kernel driver: " + driver + ")"
               : gpu.nvml_error,
           "run `gpulet doctor` on the node", now},
          now);
    } else {
      record.health.Clear("nvml", now);
    }
    next->devices.push_back(std::move(record));
  }
  PublishLocked(std::move(next));
}

bool DeviceRecord::MigHealthy(unsigned gpu_instance_id) const {
  if (health.state == HealthState::kUnhealthy) return false;
  auto it = mig_health.find(gpu_instance_id);
  return it == mig_health.end() || it->second.state != HealthState::kUnhealthy;
}

std::string DeviceRecord::MigUnhealthyReason(unsigned gpu_instance_id) const {
  if (health.state == HealthState::kUnhealthy) return health.reason;
  auto it = mig_health.find(gpu_instance_id);
  if (it == mig_health.end() || it->second.state != HealthState::kUnhealthy) return "";
  return it->second.reason;
}

bool DeviceStore::UpdateMigHealth(const std::string& key, unsigned gpu_instance_id,
                                  const std::function<void(GpuHealth&)>& update,
                                  const std::function<void(GpuHealth&)>& update_gpu) {
  absl::MutexLock lock(&mu_);
  auto next = std::make_shared<Snapshot>(*current_);
  DeviceRecord* record = FindRecord(*next, key);
  if (record == nullptr || record->gpu.FindMigInstance(gpu_instance_id, std::nullopt) == nullptr) {
    return false;
  }
  update(record->mig_health[gpu_instance_id]);
  if (update_gpu) update_gpu(record->health);
  PublishLocked(std::move(next));
  return true;
}

bool DeviceStore::SetMigLayout(const std::string& key, const gpu::MigLayout& layout) {
  absl::MutexLock lock(&mu_);
  const DeviceRecord* now = FindRecord(*current_, key);
  if (now == nullptr) return false;
  gpu::Gpu changed = now->gpu;
  gpu::ApplyMigLayout(layout, &changed);
  if (changed.mig_enabled == now->gpu.mig_enabled && changed.mig_devices == now->gpu.mig_devices) {
    return false;
  }
  auto next = std::make_shared<Snapshot>(*current_);
  DeviceRecord* record = FindRecord(*next, key);
  record->gpu = std::move(changed);
  for (auto it = record->mig_health.begin(); it != record->mig_health.end();) {
    it = record->gpu.FindMigInstance(it->first, std::nullopt) == nullptr
             ? record->mig_health.erase(it)
             : std::next(it);
  }
  PublishLocked(std::move(next));
  return true;
}

bool DeviceStore::UpdateHealth(const std::string& key,
                               const std::function<void(GpuHealth&)>& update) {
  absl::MutexLock lock(&mu_);
  auto next = std::make_shared<Snapshot>(*current_);
  DeviceRecord* record = FindRecord(*next, key);
  if (record == nullptr) return false;
  update(record->health);
  PublishLocked(std::move(next));
  return true;
}

bool DeviceStore::SetHealth(const std::string& key, const GpuHealth& health) {
  return UpdateHealth(key, [&health](GpuHealth& h) { h = health; });
}

std::shared_ptr<const Snapshot> DeviceStore::Get() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

std::shared_ptr<const Snapshot> DeviceStore::WaitForChange(uint64_t seen,
                                                           absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || current_->version > seen;
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  return current_;
}

void DeviceStore::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

void DeviceStore::Reopen() {
  absl::MutexLock lock(&mu_);
  shutdown_ = false;
}

bool DeviceStore::shut_down() const {
  absl::MutexLock lock(&mu_);
  return shutdown_;
}

}  // namespace gpulet::state
