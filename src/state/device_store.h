// DeviceStore: the one piece of shared mutable state in `gpulet serve`.
//
// Per GPU it holds the identity (from discovery) and the health verdict (from the health
// sources: liveness, XIDs, NVML availability), plus node-wide facts (is NVML usable). It
// holds no samples: live readings belong to the metrics Sampler, which keeps its own
// SampleSet. Writers replace parts; every change publishes a new immutable Snapshot with a
// higher version. Readers (the device plugin's ListAndWatch streams, the metrics exporter,
// /status) never call NVML: they take the current snapshot, or block in WaitForChange until
// a newer one exists. Copy-on-write snapshots keep readers lock-free once they hold one.
//
// Thread-safety: all methods are thread-safe. One absl::Mutex guards the current snapshot
// pointer; waiters use absl::Mutex conditions, so any number of streams can wait at once.
#ifndef GPULET_STATE_DEVICE_STORE_H_
#define GPULET_STATE_DEVICE_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpu/gpu_model.h"

namespace gpulet::state {

enum class HealthState { kHealthy, kDegraded, kUnhealthy };

const char* HealthStateName(HealthState state);

// One reason a GPU is not fully healthy, raised by one source ("nvml", "liveness",
// "xid", ...). Sources raise and clear their own conditions; the GPU's state is the worst.
struct HealthCondition {
  HealthState severity = HealthState::kUnhealthy;
  std::string reason;  // in words: "XID 79: GPU has fallen off the bus"
  std::string action;  // what to do: "reboot the node"
  absl::Time since = absl::InfinitePast();
  // Only a node reboot clears it (the XID catalogue or the driver's recovery action says so);
  // the cluster reporter turns it into the node's GpuRebootRequired condition.
  bool reboot_required = false;
  // A GPU reset clears it (the XID catalogue or the driver's recovery action says so): the
  // reset rung (daemon/reset_rung.h) may reset a GPU whose every Unhealthy condition says so.
  bool reset_clears = false;
};

struct GpuHealth {
  HealthState state = HealthState::kHealthy;
  std::string reason;  // of the worst condition; "" when healthy
  std::string action;
  absl::Time since = absl::InfinitePast();            // when `state` began
  std::map<std::string, HealthCondition> conditions;  // by source
  int last_xid = 0;                                   // most recent XID seen (0 = none)
  // What `last_xid` means, in the XID catalogue's words (health/ sets it; metrics/ reads it
  // for dcgm-exporter's `err_msg` label without depending on health/). "" when none.
  std::string last_xid_message;
  std::map<int, uint64_t> xid_counts;  // every XID seen, by code

  // Raises (or replaces) the condition of `source`; keeps its original `since` when the
  // severity is unchanged.
  void Raise(const std::string& source, HealthCondition condition, absl::Time now);
  // Clears the condition of `source`, if any.
  void Clear(const std::string& source, absl::Time now);
  bool Has(const std::string& source) const { return conditions.count(source) > 0; }

 private:
  void Recompute(absl::Time now);
};

// One GPU as the store knows it.
struct DeviceRecord {
  gpu::Gpu gpu;
  GpuHealth health;  // the whole GPU's: when Unhealthy, every MIG device of it is out too
  // Health of the GPU's MIG devices that a fault named (an XID with "GPU-I:NN"), by GPU
  // instance id. Instances without an entry are as healthy as their GPU.
  std::map<unsigned, GpuHealth> mig_health;

  // Whether the MIG device in GPU instance `gpu_instance_id` can take work: neither its GPU
  // nor the instance itself is Unhealthy.
  bool MigHealthy(unsigned gpu_instance_id) const;
  // The reason it cannot ("" when it can): the GPU's, else the instance's.
  std::string MigUnhealthyReason(unsigned gpu_instance_id) const;
};

struct Snapshot {
  uint64_t version = 0;
  bool nvml_ok = false;               // NVML loaded and counted GPUs
  std::string nvml_error;             // why not, when !nvml_ok
  std::vector<DeviceRecord> devices;  // in inventory order

  const DeviceRecord* FindByUuid(const std::string& uuid) const;
};

class DeviceStore {
 public:
  DeviceStore();
  DeviceStore(const DeviceStore&) = delete;
  DeviceStore& operator=(const DeviceStore&) = delete;

  // Replaces the inventory. Health of GPUs that remain (same UUID, or same bus id for
  // GPUs without one) is kept; new GPUs start Healthy, unless NVML is unusable, in which case
  // every GPU is Unhealthy with the NVML error as reason.
  void SetInventory(const gpu::Inventory& inventory, absl::Time now);

  // Sets one GPU's health (matched by UUID, else bus id). Returns false if unknown.
  bool SetHealth(const std::string& uuid_or_bus_id, const GpuHealth& health);

  // Applies `update` to one GPU's health under the lock (read-modify-write for policy).
  bool UpdateHealth(const std::string& uuid_or_bus_id,
                    const std::function<void(GpuHealth&)>& update);
  // The same for the MIG device in GPU instance `gpu_instance_id` of that GPU, and, in the
  // same snapshot, `update_gpu` (when given) for the GPU's own health. Returns false (and
  // changes nothing) when the GPU is unknown or has no such instance now.
  bool UpdateMigHealth(const std::string& uuid_or_bus_id, unsigned gpu_instance_id,
                       const std::function<void(GpuHealth&)>& update,
                       const std::function<void(GpuHealth&)>& update_gpu = nullptr);

  // Replaces one GPU's MIG mode and devices (an operator changed the layout). Health of
  // instances that are gone is dropped. Publishes a new snapshot, and returns true, only
  // when something changed (false also for an unknown GPU).
  bool SetMigLayout(const std::string& uuid_or_bus_id, const gpu::MigLayout& layout);

  std::shared_ptr<const Snapshot> Get() const;

  // Blocks until the version is greater than `seen`, the timeout passes, or Shutdown().
  // Returns the current snapshot either way.
  std::shared_ptr<const Snapshot> WaitForChange(uint64_t seen, absl::Duration timeout) const;

  // Wakes every waiter; later WaitForChange calls return at once.
  void Shutdown();
  // Undoes Shutdown, for a Daemon that restarts its components on a new inventory.
  void Reopen();
  bool shut_down() const;

 private:
  void PublishLocked(std::shared_ptr<Snapshot> next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::shared_ptr<const Snapshot> current_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpulet::state

#endif  // GPULET_STATE_DEVICE_STORE_H_
