// ResetRung: when the reset rung of the remediation ladder resets a GPU (health.reset;
// docs/remediation.md), and what it says meanwhile. The Daemon's "gpulet-reset" thread
// carries its orders out (node::GpuResetter) and hands each outcome back (Finish).
//
// A GPU is reset when all of these hold:
//  - it is Unhealthy, and each of its Unhealthy conditions is one a reset clears
//    (HealthCondition::reset_clears: an XID NVIDIA's catalogue answers with a GPU reset, the
//    driver's recovery action GPU_RESET). A GPU that is also lost, hung, retired, waiting
//    for a reboot or out for anything else is left to those rungs and to a person;
//  - it has been out for `settle` (SettleFor), so that the flight recorder wrote the fault
//    first;
//  - nothing holds it: NVML's latest sample of it answered and lists no process (or, where
//    NVML cannot answer for the GPU, as when it requires a reset, no process on the host holds
//    its device node open: node::ProcessesHolding, gpulet's own and the driver's daemon
//    aside), and, with pod attribution on, its latest list succeeded and no pod holds the
//    GPU (the eviction rung moves them; health.evict);
//  - it is not in MIG mode (a reset would take its GPU instances with it);
//  - NVML is available and the GPU has a UUID and a PCI address;
//  - its budget allows: fewer than `max_per_day` tries in the last 24 hours, and the quiet
//    period has passed since the last try.
// A reset that succeeded keeps the GPU out under the rung's own condition (ProbationFor,
// source kSource) for the quiet period; the rung lifts it when that has passed, and the GPU
// returns when the fault's own conditions have cleared too (their sources clear them: the
// XID policy after its quiet period, liveness when the driver reports no recovery action).
// A fault that comes back after the reset is a repeat the XID policy escalates to
// inspect-hardware, and counts toward retirement. Mode dry-run names each GPU it would reset
// in an Event (once per time out); off does nothing.
//
// Times are the injected clock's wall time and the policy the configuration's, both passed
// in by the caller (as for EvictionRung).
//
// Thread-safety: all methods may be called from any thread; one mutex serialises them.
#ifndef GPULET_DAEMON_RESET_RUNG_H_
#define GPULET_DAEMON_RESET_RUNG_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cluster/node_health.h"
#include "config/config.h"
#include "metrics/pod_attribution.h"
#include "metrics/sampler.h"
#include "node/device_holders.h"
#include "state/device_store.h"
#include "state/status_report.h"

namespace gpulet::daemon {

class ResetRung {
 public:
  // How long a GPU is out before it is reset at `sample_interval`: the flight recorder writes
  // a fault within a round of the sampler, and an XID's kXidSettle after it; two rounds
  // more for a slow one.
  static absl::Duration SettleFor(absl::Duration sample_interval);
  // The source of the condition that keeps a reset GPU out for the quiet period.
  static constexpr char kSource[] = "reset";

  struct Order {
    std::string uuid;
    std::string bus_id;
    std::string gpu;                                     // GpuText: how Events and the log name it
    std::string fault;                                   // the GPU's reason when it was ordered
    absl::Duration quiet_period = absl::ZeroDuration();  // the probation after a reset
  };
  struct Round {
    std::vector<Order> orders;  // for the reset thread
    std::vector<cluster::NodeEvent> events;
    std::vector<std::string> probation_over;  // GPUs whose kSource condition is lifted now
  };

  // The processes on the host that hold a GPU's device node open (node::ProcessesHolding).
  using HolderLookup =
      std::function<absl::StatusOr<std::vector<node::DeviceHolder>>(const gpu::Gpu& gpu)>;

  // `samples`: the sampler's latest round, by GPU UUID; `pods` may be null (attribution off);
  // `holders` (may be empty) is asked only for a GPU whose processes NVML did not list.
  Round Next(const state::Snapshot& snap,
             const std::map<std::string, metrics::GpuSampleState>& samples,
             const metrics::PodMap* pods, const HolderLookup& holders,
             const config::Config::Health::Reset& policy, absl::Duration quiet_period,
             absl::Duration settle, absl::Time now);

  // The outcome of `order`; returns the Events that tell it.
  std::vector<cluster::NodeEvent> Finish(const Order& order, const absl::Status& result,
                                         absl::Time now);

  // The condition that keeps the GPU of `order`, reset at `now`, out for its quiet period.
  static state::HealthCondition ProbationFor(const Order& order, absl::Time now);

  // What the rung is doing about each GPU it has something to say of, by UUID.
  std::map<std::string, state::RungStatus> ByGpu() const;
  // Its tries by result: "reset", "failed" and "dry_run" (gpulet_gpu_resets_total).
  std::map<std::string, uint64_t> counts() const;

 private:
  struct Gpu {
    std::deque<absl::Time> tries = {};  // within the last 24 hours
    bool in_flight = false;
    std::optional<absl::Time> reset_at = std::nullopt;  // the last reset that succeeded
    std::optional<state::RungStatus> status = std::nullopt;
    bool told = false;  // the dry run's or the budget's Event, once per time out
  };

  // Why nothing may reset `d` now ("" when it may).
  static std::string Held(const state::DeviceRecord& d,
                          const std::map<std::string, metrics::GpuSampleState>& samples,
                          const metrics::PodMap* pods, const HolderLookup& holders);

  mutable absl::Mutex mu_;
  std::map<std::string, Gpu> gpus_ ABSL_GUARDED_BY(mu_);  // by UUID
  std::map<std::string, uint64_t> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_RESET_RUNG_H_
