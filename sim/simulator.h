// The NVML simulator's state and rules: the fixture as the state file currently shows it
// (each GPU's effective values, built once per change of the file), the handle tables, the
// counters that evolve while NVML is initialised, event sets and GPM samples, the inotify
// watch on the state file, and the injected faults (hangs, lost GPUs, XIDs). nvml_sim.cc
// exports the NVML ABI on top of it. Private to libgpulet-nvml-sim.so.
//
// Thread-safety: one mutex (Simulator::mu_) guards all simulator state; it is never held
// while a call sleeps for an injected hang or while an event wait waits, so a hung GPU does
// not stall the others.
#ifndef GPULET_SIM_SIMULATOR_H_
#define GPULET_SIM_SIMULATOR_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gpu/nvml_api.h"
#include "sim/fixture.h"
#include "sim/mig.h"
#include "sim/state.h"

// The opaque handle types of the NVML ABI. A device handle is the address of one entry of a
// fixed table, so a handle stays a valid pointer for the life of the process and a stale one
// (from before nvmlShutdown) can be recognised instead of dereferenced.
struct nvmlDevice_st {
  char unused;
};

// An event set: which GPUs and event types it listens to, and what is waiting to be read.
struct nvmlEventSet_st {
  struct Registration {
    unsigned index;
    unsigned long long types;
  };
  std::vector<Registration> registrations;
  std::deque<nvmlEventData_t> pending;
  bool closed = false;  // freed, or NVML was shut down
};

// A GPM sample buffer: which GPU it was taken on, when, and that GPU's GPM values then.
// Allocated samples live in the simulator's registry, so an address that is not one of them
// is rejected without being dereferenced.
struct nvmlGpmSample_st {
  bool filled = false;  // nvmlGpmSampleGet succeeded on it (since the last nvmlInit)
  unsigned index = 0;
  std::chrono::steady_clock::time_point taken;
  uint64_t seq = 0;                     // orders samples taken within one clock tick
  unsigned gpu_instance = 0xFFFFFFFFu;  // nvmlGpmMigSampleGet's instance; all ones: whole GPU
  std::map<unsigned, double> values;    // NVML_GPM_METRIC_* -> percent or MiB/s
};

namespace gpulet::sim {

using Clock = std::chrono::steady_clock;

inline constexpr unsigned kMaxDevices = 64;
// How often waiting calls (event waits, hangs) look at the state file again when no watch
// thread tells them of changes, or the file was written too recently to trust stat().
inline constexpr auto kPollInterval = std::chrono::milliseconds(10);
// The watch thread also looks every so often, should an inotify event be lost (a queue
// overflow, the directory replaced).
inline constexpr int kWatchFallbackMs = 1000;
// A file modified this recently may change again within the file system's timestamp
// granularity without its stat() changing, so it is re-read until it is older than this.
inline constexpr int64_t kRacyWindowNs = 100'000'000;
inline constexpr size_t kMaxQueuedEvents = 1024;
inline constexpr unsigned kNoInstance = 0xFFFFFFFFu;  // gpuInstanceId/computeInstanceId without MIG
inline constexpr unsigned long long kMiB = 1ULL << 20;
// A caller that leaks GPM samples gets NVML_ERROR_MEMORY rather than growing us forever.
inline constexpr size_t kMaxGpmSamples = 65536;

// Field ids served besides those nvml_api.h names.
inline constexpr unsigned kFieldEccSbeVolatileTotal = 3;
inline constexpr unsigned kFieldEccDbeVolatileTotal = 4;
inline constexpr unsigned kFieldRemappedCorrectable = 142;
inline constexpr unsigned kFieldRemappedUncorrectable = 143;
inline constexpr unsigned kFieldRemappedPending = 144;
inline constexpr unsigned kFieldRemappedFailure = 145;

// A MIG instance's memory use beyond its processes' (the instance's own contexts and page
// tables), in MiB: an idle instance is not at zero, as on real GPUs.
inline constexpr uint64_t kMigInstanceOverheadMib = 13;

// The handle tables: a device handle is the address of its entry, so it is recognised
// without being trusted (simulator.cc).
nvmlDevice_t HandleFor(unsigned index);
nvmlDevice_t MigHandleFor(unsigned index, unsigned gpu_instance, unsigned compute_instance);
// A MIG handle's GPU index and instance ids, without trusting the handle.
bool MigTableIndex(nvmlDevice_t device, unsigned* index, unsigned* gpu_instance,
                   unsigned* compute_instance);
// Maps a handle back to its table index without trusting it.
bool TableIndex(nvmlDevice_t device, unsigned* index);

// What stat() said of the state file.
struct FileId {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;

  bool operator==(const FileId&) const = default;
};

// Per-GPU values that evolve while NVML is initialised.
// Per-GPU values that evolve while NVML is initialised.
struct DeviceRuntime {
  double energy_mj = 0;
  double nvlink_tx_kib = 0;
  double nvlink_rx_kib = 0;
  Clock::time_point counters_at;  // when the counters above were last brought up to date
  uint64_t xid_watermark = 0;     // highest XID seq already handed to event sets
  // The GPU's state and effective fixture values for the state file's generation
  // `view_generation` (0: none yet), built once per change of the file instead of per call.
  uint64_t view_generation = 0;
  std::shared_ptr<const GpuState> merged;
  std::shared_ptr<const FixtureGpu> effective;
};

// A GPM metric's current value: the fixture's, or the state's override of it. nullopt when
// the fixture does not serve the metric (an override cannot add one).
std::optional<double> GpmValue(const FixtureGpu& fixture, const LoadOverride& load, unsigned id);
// The NVML event types the GPU can deliver.
unsigned long long SupportedEvents(const FixtureGpu& gpu);

// What a device call works from once the hang, lost and reset checks have passed.
// What a device call works from once the hang, lost and reset checks have passed.
struct DeviceCall {
  unsigned index = 0;
  // Fixture values with the state's overrides applied (shared with the simulator's cache:
  // a later state change makes a new one and leaves this one as it was).
  std::shared_ptr<const FixtureGpu> effective;
  const FixtureGpu& gpu() const { return *effective; }
  // Set when the handle is a MIG device's: its instance and profile in the current layout.
  std::optional<MigInstance> mig;
  const MigProfile* mig_profile = nullptr;
  double energy_mj = 0;
  double nvlink_tx_kib = 0;  // all links
  double nvlink_rx_kib = 0;
};

class Simulator {
 public:
  nvmlReturn_t Init();

  nvmlReturn_t Shutdown();

  // Runs `fn(const Fixture&)` under the lock, for the calls that need no GPU.
  template <typename F>
  nvmlReturn_t WithFixture(F&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    RefreshLocked();
    return fn(*fixture_);
  }

  // The common prologue of every call on a GPU: validate the handle, sleep for an injected
  // hang (without the lock), then fail on a lost GPU or fill `*call`. Handle lookups pass
  // `for_handle`: NVML hands out a handle for a GPU that needs a reset (the GPU is still on
  // the bus) and only the queries on it fail.
  nvmlReturn_t BeginDeviceCall(nvmlDevice_t device, DeviceCall* call, bool for_handle = false);

  // Finds a GPU by `match(const FixtureGpu&, unsigned index)` and returns its handle after
  // the same hang and lost checks as any device call (NVML initialises a GPU here).
  template <typename Match>
  nvmlReturn_t GetHandle(Match&& match, nvmlReturn_t not_found, nvmlDevice_t* device) {
    nvmlDevice_t handle = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
      if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
      RefreshLocked();
      for (unsigned i = 0; i < fixture_->gpus.size(); ++i) {
        if (match(fixture_->gpus[i], i)) {
          handle = HandleFor(i);
          break;
        }
      }
    }
    if (handle == nullptr) return not_found;
    DeviceCall call;
    const nvmlReturn_t ret = BeginDeviceCall(handle, &call, /*for_handle=*/true);
    if (ret != NVML_SUCCESS) return ret;
    *device = handle;
    return NVML_SUCCESS;
  }

  // nvmlDeviceGetHandleByUUID with a "MIG-..." UUID: the MIG device of the current layouts,
  // after the same checks as a call on its parent GPU.
  nvmlReturn_t GetMigHandleByUuid(const std::string& uuid, nvmlDevice_t* device);

  nvmlReturn_t EventSetCreate(nvmlEventSet_t* set);

  nvmlReturn_t EventSetFree(nvmlEventSet_t set);

  nvmlReturn_t RegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set);

  nvmlReturn_t GpmSampleAlloc(nvmlGpmSample_t* sample);

  // Works without NVML initialised: a caller may free its samples after nvmlShutdown, and
  // refusing would leak them.
  nvmlReturn_t GpmSampleFree(nvmlGpmSample_t sample);

  nvmlReturn_t GpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample);

  // nvmlGpmSampleGet for one GPU instance of a MIG-enabled GPU: the instance's own `gpm`
  // values from the fixture or the state's layout (the state's load.gpm is the whole GPU's).
  nvmlReturn_t GpmMigSampleGet(nvmlDevice_t device, unsigned gpu_instance, nvmlGpmSample_t sample);

  // NVML averages counters over the time between the samples; the simulator's values are
  // rates already, so the metrics are the values recorded in the later sample.
  nvmlReturn_t GpmMetricsGet(nvmlGpmMetricsGet_t* get);

  nvmlReturn_t EventSetWait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned timeout_ms);

 private:
  // A GPM call's checks: NVML initialised, `sample` one of ours, then BeginDeviceCall's.
  nvmlReturn_t BeginGpmCall(nvmlDevice_t device, nvmlGpmSample_t sample, DeviceCall* call);
  bool ValidIndexLocked(nvmlDevice_t device, unsigned* index) const;

  // A whole-GPU or MIG handle: its GPU index and, for a MIG handle (when `mig` is not null),
  // its (GPU instance, compute instance) ids.
  bool ResolveLocked(nvmlDevice_t device, unsigned* index,
                     std::optional<std::pair<unsigned, unsigned>>* mig) const;

  // The GPU's merged state and its effective fixture values, built once per state file
  // generation. The references stay valid while mu_ is held and the state does not change.
  const GpuState& MergedLocked(unsigned index) { return *ViewLocked(index).merged; }
  std::shared_ptr<const FixtureGpu> EffectiveLocked(unsigned index);
  const DeviceRuntime& ViewLocked(unsigned index);

  nvmlReturn_t FillSample(unsigned index, unsigned gpu_instance,
                          const std::map<unsigned, double>& values, nvmlGpmSample_t sample);

  // Sleeps for an injected hang in short slices, ending early when the hang is cleared from
  // the state file (a recovered driver) or NVML is shut down.
  void SleepForHang(unsigned index, double seconds);

  // The state file's watch: an inotify descriptor on its directory, an eventfd that stops
  // the thread, and the thread.
  struct Watch {
    int inotify_fd = -1;
    int stop_fd = -1;
    std::thread thread;
  };

  // Starts the watch thread for state_path_ (none without a state file). When inotify cannot
  // watch the directory, waiters poll as before.
  void StartWatchLocked();

  static void CloseWatchFds(Watch* w);

  // Called without mu_: the thread takes it to refresh.
  static void StopWatch(Watch* w);

  void WatchLoop(int inotify_fd, int stop_fd, const std::string& name);

  // Whether the state file may have changed since RefreshLocked last looked. Without a live
  // watch, or while stat() cannot be trusted, always. With one, only when the watch's inotify
  // queue holds events, the watch thread is reading them, or it read one naming the file
  // since: inotify queues an event before the write that caused it returns, so a call right
  // after a write (a test's, in this process or another) still sees the change, and the other
  // calls (thousands a second under gpulet's sampler) skip the stat() of the file's path.
  bool ChangedSinceLastLookLocked();

  // Re-reads the state file when stat() says it changed (or it was modified too recently to
  // trust stat()), then applies it.
  void RefreshLocked(bool force = false);

  // Energy is the integral of the power reading, and the NVLink data counters the integrals
  // of the GPM NVLink rates, so overrides of those bend the counters too. Called with the
  // state in force since the last call, before a new state replaces it.
  void AccumulateCountersLocked(unsigned index, Clock::time_point now);

  // Effective() ignores a MIG layout the product cannot take; say so once per state change.
  void WarnAboutMigOverridesLocked();

  void DispatchXidsLocked();

  std::mutex mu_;
  std::condition_variable cv_;  // signalled on state changes, set frees and shutdown
  // Everything below is guarded by mu_.
  int init_count_ = 0;
  std::shared_ptr<const Fixture> fixture_;  // set while init_count_ > 0
  std::vector<DeviceRuntime> runtime_;      // one per fixture GPU
  std::string state_path_;
  Watch watch_;  // while initialised with a state file
  // Set by the watch thread (ChangedSinceLastLookLocked reads them without mu_'s help).
  std::atomic<bool> watch_reading_{false};
  std::atomic<bool> watch_dirty_{false};
  FileId state_id_;
  bool state_racy_ = false;
  // A fault is due later (GpuState::lost_at, an XID numbered ahead): waiters poll, and each
  // poll delivers the XIDs that have come due (DispatchXidsLocked sets it).
  bool timed_faults_ = false;
  SimState state_;
  uint64_t state_generation_ = 1;  // bumped whenever state_ changes (DeviceRuntime's views)
  std::map<nvmlEventSet_st*, std::shared_ptr<nvmlEventSet_st>> event_sets_;
  // Every allocated GPM sample, by its handle; kept across nvmlShutdown (see Shutdown).
  std::map<nvmlGpmSample_st*, std::unique_ptr<nvmlGpmSample_st>> gpm_samples_;
  uint64_t gpm_seq_ = 0;
};

// The one simulator of the process. Never destroyed: a thread may still be inside a call
// while the process exits, and must not find a destroyed mutex.
Simulator& Sim();

}  // namespace gpulet::sim

#endif  // GPULET_SIM_SIMULATOR_H_
