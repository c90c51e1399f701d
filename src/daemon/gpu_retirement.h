// GpuRetirement: the daemon's side of retirement (recorder/retirement.h). It keeps the
// DeviceStore's "retired" conditions in line with the retired-GPU file, and, after each fault
// the flight recorder writes, applies the rule: with health.retire.mode on it adds the GPU to
// the file and takes it out of service; with dry-run it says that it would, once per fault;
// off does nothing. Each step is a log line and a Node Event (GpuRetired, GpuWouldRetire,
// GpuUnretired).
//
// A retired GPU is Unhealthy with the condition "retired" (source "retire"), which no other
// health source clears; it is matched by UUID, and the file's PCI address must be the GPU's
// (a card moved to another slot is named in the log and kept out all the same: the card is
// what faulted).
//
// Thread-safety: thread-safe (one mutex): Configure and Sync run on the main thread and the
// file check's, Consider on the sampler's.
#ifndef GPULET_DAEMON_GPU_RETIREMENT_H_
#define GPULET_DAEMON_GPU_RETIREMENT_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cluster/event_inbox.h"
#include "common/clock.h"
#include "config/config.h"
#include "recorder/retirement.h"
#include "state/device_store.h"

namespace gpulet::daemon {

// The store's condition source for a retired GPU.
inline constexpr char kRetiredSource[] = "retire";

class GpuRetirement {
 public:
  // `store`, `inbox` and `clock` must outlive this.
  GpuRetirement(state::DeviceStore* store, cluster::EventInbox* inbox, const Clock* clock);

  // The rule's settings and the file (null: no file, nothing retired); then Sync().
  void Configure(const config::Config::Health::Retire& settings,
                 std::unique_ptr<recorder::RetiredFile> file);

  // Reads the file and raises or clears the store's retire conditions to match it. A file
  // that cannot be read is logged once per error and retires nothing.
  void Sync();

  // After a fault on `uuid` was recorded: `faults` are the GPU's recorded faults.
  void Consider(const std::string& uuid, const std::vector<recorder::RecorderDump>& faults);

 private:
  void SyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  state::DeviceStore* const store_;
  cluster::EventInbox* const inbox_;
  const Clock* const clock_;
  absl::Mutex mu_;
  config::Config::Health::Retire settings_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<recorder::RetiredFile> file_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> raised_ ABSL_GUARDED_BY(mu_);  // GPUs with a retire condition now
  std::set<std::pair<std::string, int64_t>> dry_runs_ ABSL_GUARDED_BY(mu_);  // told once
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_GPU_RETIREMENT_H_
