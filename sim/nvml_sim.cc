// libgpulet-nvml-sim.so: an NVML look-alike that gpulet dlopen()s instead of
// libnvidia-ml.so.1, so its real loading and calling code runs on machines without a GPU.
//
// It exports the NVML symbols declared in src/gpu/nvml_api.h with NVML's semantics, answering
// from a fixture ($GPULET_SIM_FIXTURE, YAML, read at nvmlInit) and a fault-injection state
// file ($GPULET_SIM_STATE, JSON, re-read whenever it changes). Both formats are documented
// in sim/fixtures/README.md. A change to the state file reaches an nvmlEventSetWait_v2
// waiter through inotify, on one thread of the simulator's own ("nvml-sim-watch", while NVML
// is initialised with a state file): like NVML's own wait, which sleeps in the driver, an
// idle wait costs no CPU (polling every 10 ms did, and the benchmarks charged it to gpulet).
//
// Thread-safety: every exported function may be called from any number of threads at once.
// One mutex guards all simulator state; it is never held while a call sleeps for an injected
// hang or while nvmlEventSetWait_v2 waits, so a hung GPU does not stall the others.
// No C++ exception crosses the C boundary: each entry point catches and returns
// NVML_ERROR_UNKNOWN.

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
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
namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned kMaxDevices = 64;
// How often waiting calls (event waits, hangs) look at the state file again when no watch
// thread tells them of changes, or the file was written too recently to trust stat().
constexpr auto kPollInterval = std::chrono::milliseconds(10);
// The watch thread also looks every so often, should an inotify event be lost (a queue
// overflow, the directory replaced).
constexpr int kWatchFallbackMs = 1000;
// A file modified this recently may change again within the file system's timestamp
// granularity without its stat() changing, so it is re-read until it is older than this.
constexpr int64_t kRacyWindowNs = 100'000'000;
constexpr size_t kMaxQueuedEvents = 1024;
constexpr unsigned kNoInstance = 0xFFFFFFFFu;  // gpuInstanceId/computeInstanceId without MIG
constexpr unsigned long long kMiB = 1ULL << 20;
// A caller that leaks GPM samples gets NVML_ERROR_MEMORY rather than growing us forever.
constexpr size_t kMaxGpmSamples = 65536;

// Field ids served besides those nvml_api.h names.
constexpr unsigned kFieldEccSbeVolatileTotal = 3;
constexpr unsigned kFieldEccDbeVolatileTotal = 4;
constexpr unsigned kFieldRemappedCorrectable = 142;
constexpr unsigned kFieldRemappedUncorrectable = 143;
constexpr unsigned kFieldRemappedPending = 144;
constexpr unsigned kFieldRemappedFailure = 145;

// A MIG instance's memory use beyond its processes' (the instance's own contexts and page
// tables), in MiB: an idle instance is not at zero, as on real GPUs.
constexpr uint64_t kMigInstanceOverheadMib = 13;

nvmlDevice_st g_handles[kMaxDevices];
// MIG device handles, one per (GPU, GPU instance id, compute instance id) that can exist, so
// a MIG handle, too, stays a valid address for the process's life; one whose instance was
// destroyed is recognised and refused.
nvmlDevice_st g_mig_handles[kMaxDevices][kMaxGpuInstanceId + 1][kMaxComputeInstanceId + 1];

nvmlDevice_t HandleFor(unsigned index) { return &g_handles[index]; }

nvmlDevice_t MigHandleFor(unsigned index, unsigned gpu_instance, unsigned compute_instance) {
  return &g_mig_handles[index][gpu_instance][compute_instance];
}

// A MIG handle's GPU index and instance ids, without trusting the handle.
bool MigTableIndex(nvmlDevice_t device, unsigned* index, unsigned* gpu_instance,
                   unsigned* compute_instance) {
  const auto base = reinterpret_cast<uintptr_t>(&g_mig_handles[0][0][0]);
  const auto addr = reinterpret_cast<uintptr_t>(device);
  if (addr < base || addr >= base + sizeof(g_mig_handles)) return false;
  const uintptr_t offset = addr - base;
  if (offset % sizeof(nvmlDevice_st) != 0) return false;
  size_t slot = offset / sizeof(nvmlDevice_st);
  *compute_instance = static_cast<unsigned>(slot % (kMaxComputeInstanceId + 1));
  slot /= kMaxComputeInstanceId + 1;
  *gpu_instance = static_cast<unsigned>(slot % (kMaxGpuInstanceId + 1));
  *index = static_cast<unsigned>(slot / (kMaxGpuInstanceId + 1));
  return true;
}

// Maps a handle back to its table index without trusting it.
bool TableIndex(nvmlDevice_t device, unsigned* index) {
  const auto base = reinterpret_cast<uintptr_t>(&g_handles[0]);
  const auto addr = reinterpret_cast<uintptr_t>(device);
  if (addr < base || addr >= base + sizeof(g_handles)) return false;
  const uintptr_t offset = addr - base;
  if (offset % sizeof(nvmlDevice_st) != 0) return false;
  *index = static_cast<unsigned>(offset / sizeof(nvmlDevice_st));
  return true;
}

struct FileId {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;

  bool operator==(const FileId&) const = default;
};

int64_t ToNs(const timespec& ts) { return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec; }

FileId StatFile(const std::string& path) {
  FileId id;
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    id.size = st.st_size;
    id.mtime_ns = ToNs(st.st_mtim);
    id.ctime_ns = ToNs(st.st_ctim);
  }
  return id;
}

bool IsRacy(const FileId& id) {
  if (!id.exists) return false;
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return ToNs(now) - id.mtime_ns < kRacyWindowNs;
}

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
std::optional<double> GpmValue(const FixtureGpu& fixture, const LoadOverride& load, unsigned id) {
  if (!fixture.gpm.has_value()) return std::nullopt;
  const auto it = fixture.gpm->find(id);
  if (it == fixture.gpm->end()) return std::nullopt;
  const GpmMetric* metric = FindGpmMetricById(id);
  if (metric != nullptr) {
    const auto o = load.gpm.find(metric->name);
    if (o != load.gpm.end() && GpmValueInRange(*metric, o->second)) return o->second;
  }
  return it->second;
}

uint64_t ProcessMib(const std::vector<SimProcess>& processes) {
  uint64_t sum = 0;
  for (const SimProcess& p : processes) sum += p.used_mib;
  return sum;
}

// The fixture GPU as the state file currently shows it. Overrides only replace values the
// fixture supports: a state file cannot give a GeForce card a memory temperature sensor.
FixtureGpu Effective(const FixtureGpu& fixture, const GpuState& state) {
  FixtureGpu g = fixture;
  const LoadOverride& load = state.load;
  auto replace = [](const auto& from, auto* into) {
    if (from.has_value() && into->has_value()) *into = *from;
  };
  if (g.utilization.has_value()) {
    if (load.utilization_gpu) g.utilization->first = std::min(*load.utilization_gpu, 100u);
    if (load.utilization_memory) g.utilization->second = std::min(*load.utilization_memory, 100u);
  }
  replace(load.temperature_c, &g.temperature_c);
  replace(load.memory_temperature_c, &g.memory_temperature_c);
  if (load.power_w && g.power_usage_mw) {
    g.power_usage_mw = static_cast<unsigned>(std::min(*load.power_w * 1000.0, 4.0e9));
  }
  replace(load.fan_percent, &g.fan_percent);
  replace(load.pstate, &g.pstate);
  replace(load.clocks_event_reasons, &g.clocks_event_reasons);
  replace(load.pcie_replay, &g.pcie_replay);
  if (load.encoder_utilization && g.encoder) g.encoder->utilization = *load.encoder_utilization;
  if (load.decoder_utilization && g.decoder) g.decoder->utilization = *load.decoder_utilization;
  replace(load.graphics_clock_mhz, &g.clocks_mhz[NVML_CLOCK_GRAPHICS]);
  replace(load.sm_clock_mhz, &g.clocks_mhz[NVML_CLOCK_SM]);
  replace(load.memory_clock_mhz, &g.clocks_mhz[NVML_CLOCK_MEM]);
  replace(load.video_clock_mhz, &g.clocks_mhz[NVML_CLOCK_VIDEO]);
  if (state.processes) g.processes = *state.processes;
  // A MIG override applies to a MIG-capable GPU and only with a layout its product takes
  // (RefreshLocked says on stderr when one is ignored).
  if (state.mig && g.mig &&
      (g.mig_product != nullptr
           ? CheckMigLayout(*g.mig_product, state.mig->enabled, state.mig->instances).empty()
           : state.mig->instances.empty())) {
    g.mig->current = g.mig->pending =
        state.mig->enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    g.mig->instances = state.mig->instances;
  }
  if (state.remapped_rows && g.remapped_rows) g.remapped_rows = state.remapped_rows;
  if (state.recovery_action) g.recovery_action = state.recovery_action;
  if (g.gpm.has_value()) {
    for (auto& [id, value] : *g.gpm) value = GpmValue(fixture, load, id).value_or(value);
  }
  if (g.nvlink.has_value()) {
    NvLinkInfo& nvlink = *g.nvlink;
    for (unsigned link : state.nvlink.down) {
      if (link < nvlink.links) nvlink.down.insert(link);
    }
    for (const auto& [link, counters] : state.nvlink.errors) {
      if (link >= nvlink.links) continue;
      auto& values = nvlink.link_errors.try_emplace(link, nvlink.errors).first->second;
      for (size_t i = 0; i < counters.size(); ++i) {
        if (counters[i].has_value()) values[i] = *counters[i];
      }
    }
  }
  if (state.ecc_errors && g.ecc) {
    const EccErrors& e = *state.ecc_errors;
    g.ecc->counts[NVML_MEMORY_ERROR_TYPE_CORRECTED][NVML_VOLATILE_ECC] = e.volatile_corrected;
    g.ecc->counts[NVML_MEMORY_ERROR_TYPE_UNCORRECTED][NVML_VOLATILE_ECC] = e.volatile_uncorrected;
    g.ecc->counts[NVML_MEMORY_ERROR_TYPE_CORRECTED][NVML_AGGREGATE_ECC] = e.aggregate_corrected;
    g.ecc->counts[NVML_MEMORY_ERROR_TYPE_UNCORRECTED][NVML_AGGREGATE_ECC] = e.aggregate_uncorrected;
  }
  // Used memory follows the process list: the fixture's memory not owned by any process
  // (contexts, the display) stays, the processes' share is recomputed.
  uint64_t used = 0;
  if (load.memory_used_mib) {
    used = *load.memory_used_mib;
  } else {
    const uint64_t fixture_process_mib = ProcessMib(fixture.processes);
    const uint64_t overhead = fixture.memory_used_mib > fixture_process_mib
                                  ? fixture.memory_used_mib - fixture_process_mib
                                  : 0;
    used = overhead + ProcessMib(g.processes);
  }
  g.memory_used_mib = std::min(used, g.memory_total_mib - g.memory_reserved_mib);
  return g;
}

unsigned long long SupportedEvents(const FixtureGpu& gpu) {
  unsigned long long types = nvmlEventTypePState | nvmlEventTypeXidCriticalError;
  if (gpu.ecc.has_value()) {
    types |= nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError;
  }
  return types;
}

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
  nvmlReturn_t Init() {
    std::unique_lock<std::mutex> lock(mu_);
    if (init_count_ > 0) {
      ++init_count_;
      return NVML_SUCCESS;
    }
    const char* state_env = std::getenv("GPULET_SIM_STATE");
    const std::string state_path = state_env != nullptr ? state_env : "";
    SimState state;
    const FileId state_id = state_path.empty() ? FileId() : StatFile(state_path);
    if (!state_path.empty()) {
      std::string error;
      if (!LoadState(state_path, &state, &error)) {
        std::fprintf(stderr, "gpulet-nvml-sim: ignoring state file: %s\n", error.c_str());
        state = SimState();
      }
    }
    if (state.driver_not_loaded) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (state.init_crash) {
      std::fprintf(stderr, "gpulet-nvml-sim: init_crash is set in %s: raising SIGSEGV\n",
                   state_path.c_str());
      std::fflush(stderr);
      // Unlocked first: a caller that survives SIGSEGV (siglongjmp) must not find mu_ held.
      lock.unlock();
      raise(SIGSEGV);
      return NVML_ERROR_UNKNOWN;  // only reached if the caller handles SIGSEGV and returns
    }
    if (state.init_hang_seconds > 0) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::duration<double>(state.init_hang_seconds));
      lock.lock();
      if (init_count_ > 0) {  // another thread finished initialising meanwhile
        ++init_count_;
        return NVML_SUCCESS;
      }
    }

    const char* fixture_env = std::getenv("GPULET_SIM_FIXTURE");
    if (fixture_env == nullptr || *fixture_env == '\0') {
      std::fprintf(stderr,
                   "gpulet-nvml-sim: GPULET_SIM_FIXTURE is not set; it must name a fixture "
                   "YAML file\n");
      return NVML_ERROR_UNKNOWN;
    }
    auto fixture = std::make_shared<Fixture>();
    std::string error;
    if (!LoadFixture(fixture_env, fixture.get(), &error)) {
      std::fprintf(stderr, "gpulet-nvml-sim: bad fixture: %s\n", error.c_str());
      return NVML_ERROR_UNKNOWN;
    }

    fixture_ = std::move(fixture);
    const Clock::time_point now = Clock::now();
    runtime_.assign(fixture_->gpus.size(), DeviceRuntime());
    for (size_t i = 0; i < runtime_.size(); ++i) {
      const FixtureGpu& gpu = fixture_->gpus[i];
      runtime_[i].energy_mj = static_cast<double>(gpu.energy_mj.value_or(0));
      if (gpu.nvlink.has_value()) {
        runtime_[i].nvlink_tx_kib = static_cast<double>(gpu.nvlink->data_tx_kib);
        runtime_[i].nvlink_rx_kib = static_cast<double>(gpu.nvlink->data_rx_kib);
      }
      runtime_[i].counters_at = now;
    }
    state_path_ = state_path;
    state_ = SimState();
    ++state_generation_;
    state_id_ = state_id;  // so the read below does not complain about a bad file twice
    // Forces the first read. It also moves every GPU's XID watermark past the XIDs already
    // in the file: like NVML, only events that happen after registration are delivered.
    state_racy_ = true;
    RefreshLocked();
    ++init_count_;
    StartWatchLocked();
    // A write between the read above and the watch's start raised no event: look once more.
    watch_dirty_.store(true);
    return NVML_SUCCESS;
  }

  nvmlReturn_t Shutdown() {
    std::unique_lock<std::mutex> lock(mu_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    if (--init_count_ > 0) return NVML_SUCCESS;
    Watch watch = std::move(watch_);
    watch_ = Watch();
    for (auto& entry : event_sets_) entry.second->closed = true;
    event_sets_.clear();
    // The caller still owns its GPM samples (it frees them, maybe after this), but what they
    // hold refers to GPUs of this initialisation only.
    for (auto& entry : gpm_samples_) entry.second->filled = false;
    fixture_.reset();
    runtime_.clear();
    state_ = SimState();
    ++state_generation_;
    state_path_.clear();
    cv_.notify_all();  // waiters return NVML_ERROR_UNINITIALIZED
    lock.unlock();     // the watch thread may be waiting for mu_
    StopWatch(&watch);
    return NVML_SUCCESS;
  }

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
  nvmlReturn_t BeginDeviceCall(nvmlDevice_t device, DeviceCall* call, bool for_handle = false) {
    unsigned index = 0;
    double hang_seconds = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
      RefreshLocked();
      if (!ResolveLocked(device, &index, nullptr)) return NVML_ERROR_INVALID_ARGUMENT;
      hang_seconds = MergedLocked(index).hang_seconds;
    }
    if (hang_seconds > 0) SleepForHang(index, hang_seconds);

    std::lock_guard<std::mutex> lock(mu_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    RefreshLocked();
    std::optional<std::pair<unsigned, unsigned>> mig_ids;
    if (!ResolveLocked(device, &index, &mig_ids)) return NVML_ERROR_INVALID_ARGUMENT;
    const GpuState& state = MergedLocked(index);
    if (state.lost) return NVML_ERROR_GPU_IS_LOST;
    if (state.reset_required && !for_handle) return NVML_ERROR_RESET_REQUIRED;
    call->index = index;
    call->effective = EffectiveLocked(index);
    if (mig_ids.has_value()) {
      // A MIG handle is valid while its instance is in the current layout; after a `sim mig`
      // change destroyed it, it is stale, like a handle from before nvmlShutdown.
      const FixtureGpu& g = call->gpu();
      if (!g.mig || g.mig->current != NVML_DEVICE_MIG_ENABLE || g.mig_product == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
      }
      for (const MigInstance& m : g.mig->instances) {
        if (m.gpu_instance == mig_ids->first && m.compute_instance == mig_ids->second) {
          call->mig = m;
          call->mig_profile = FindMigProfile(*g.mig_product, m.profile);
        }
      }
      if (!call->mig.has_value() || call->mig_profile == nullptr) {
        return NVML_ERROR_INVALID_ARGUMENT;
      }
    }
    AccumulateCountersLocked(index, Clock::now());
    call->energy_mj = runtime_[index].energy_mj;
    call->nvlink_tx_kib = runtime_[index].nvlink_tx_kib;
    call->nvlink_rx_kib = runtime_[index].nvlink_rx_kib;
    return NVML_SUCCESS;
  }

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
  nvmlReturn_t GetMigHandleByUuid(const std::string& uuid, nvmlDevice_t* device) {
    nvmlDevice_t handle = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
      if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
      RefreshLocked();
      for (unsigned i = 0; i < fixture_->gpus.size() && handle == nullptr; ++i) {
        const std::shared_ptr<const FixtureGpu> effective = EffectiveLocked(i);
        const FixtureGpu& g = *effective;
        if (!g.mig || g.mig->current != NVML_DEVICE_MIG_ENABLE) continue;
        for (const MigInstance& m : g.mig->instances) {
          if (m.uuid == uuid) handle = MigHandleFor(i, m.gpu_instance, m.compute_instance);
        }
      }
    }
    if (handle == nullptr) return NVML_ERROR_NOT_FOUND;
    DeviceCall call;
    const nvmlReturn_t ret = BeginDeviceCall(handle, &call, /*for_handle=*/true);
    if (ret != NVML_SUCCESS) return ret;
    *device = handle;
    return NVML_SUCCESS;
  }

  nvmlReturn_t EventSetCreate(nvmlEventSet_t* set) {
    std::lock_guard<std::mutex> lock(mu_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    auto impl = std::make_shared<nvmlEventSet_st>();
    event_sets_[impl.get()] = impl;
    *set = impl.get();
    return NVML_SUCCESS;
  }

  nvmlReturn_t EventSetFree(nvmlEventSet_t set) {
    std::lock_guard<std::mutex> lock(mu_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    auto it = event_sets_.find(set);
    if (it == event_sets_.end()) return NVML_ERROR_INVALID_ARGUMENT;
    it->second->closed = true;  // a thread still waiting on it keeps its shared_ptr
    event_sets_.erase(it);
    cv_.notify_all();
    return NVML_SUCCESS;
  }

  nvmlReturn_t RegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    DeviceCall call;
    const nvmlReturn_t ret = BeginDeviceCall(device, &call);
    if (ret != NVML_SUCCESS) return ret;
    if (call.mig.has_value()) return NVML_ERROR_NOT_SUPPORTED;  // events come on the parent
    std::lock_guard<std::mutex> lock(mu_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    auto it = event_sets_.find(set);
    if (it == event_sets_.end()) return NVML_ERROR_INVALID_ARGUMENT;
    // NVML refuses the whole request when any bit is unsupported; the set stays usable.
    if ((types & ~SupportedEvents(call.gpu())) != 0) return NVML_ERROR_NOT_SUPPORTED;
    // Hand out everything injected so far first, so only later XIDs reach this set.
    RefreshLocked();
    auto& regs = it->second->registrations;
    auto reg = std::find_if(regs.begin(), regs.end(),
                            [&](const auto& r) { return r.index == call.index; });
    if (reg != regs.end()) {
      reg->types |= types;
    } else {
      regs.push_back({call.index, types});
    }
    return NVML_SUCCESS;
  }

  nvmlReturn_t GpmSampleAlloc(nvmlGpmSample_t* sample) {
    std::lock_guard<std::mutex> lock(mu_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    if (sample == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (gpm_samples_.size() >= kMaxGpmSamples) return NVML_ERROR_MEMORY;
    auto impl = std::make_unique<nvmlGpmSample_st>();
    nvmlGpmSample_t handle = impl.get();
    gpm_samples_.emplace(handle, std::move(impl));
    *sample = handle;
    return NVML_SUCCESS;
  }

  // Works without NVML initialised: a caller may free its samples after nvmlShutdown, and
  // refusing would leak them.
  nvmlReturn_t GpmSampleFree(nvmlGpmSample_t sample) {
    std::lock_guard<std::mutex> lock(mu_);
    return gpm_samples_.erase(sample) == 1 ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
  }

  nvmlReturn_t GpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
      if (gpm_samples_.count(sample) == 0) return NVML_ERROR_INVALID_ARGUMENT;
    }
    DeviceCall call;
    const nvmlReturn_t ret = BeginDeviceCall(device, &call);
    if (ret != NVML_SUCCESS) return ret;
    // GPM on a MIG device goes through nvmlGpmMigSampleGet on its parent.
    if (call.mig.has_value() || !call.gpu().gpm.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    return FillSample(call.index, kNoInstance, *call.gpu().gpm, sample);
  }

  // nvmlGpmSampleGet for one GPU instance of a MIG-enabled GPU: the instance's own `gpm`
  // values from the fixture or the state's layout (the state's load.gpm is the whole GPU's).
  nvmlReturn_t GpmMigSampleGet(nvmlDevice_t device, unsigned gpu_instance, nvmlGpmSample_t sample) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
      if (gpm_samples_.count(sample) == 0) return NVML_ERROR_INVALID_ARGUMENT;
    }
    DeviceCall call;
    const nvmlReturn_t ret = BeginDeviceCall(device, &call);
    if (ret != NVML_SUCCESS) return ret;
    if (call.mig.has_value()) return NVML_ERROR_INVALID_ARGUMENT;  // takes the parent GPU
    if (!call.gpu().gpm.has_value() || !call.gpu().mig.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    const MigInstance* instance = nullptr;
    if (call.gpu().mig->current == NVML_DEVICE_MIG_ENABLE) {
      for (const MigInstance& m : call.gpu().mig->instances) {
        if (m.gpu_instance == gpu_instance) instance = &m;
      }
    }
    if (instance == nullptr) return NVML_ERROR_NOT_FOUND;
    if (!instance->gpm.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    std::map<unsigned, double> values;
    for (const auto& [name, value] : *instance->gpm) {
      if (const GpmMetric* metric = FindGpmMetric(name)) values[metric->id] = value;
    }
    return FillSample(call.index, gpu_instance, values, sample);
  }

  // NVML averages counters over the time between the samples; the simulator's values are
  // rates already, so the metrics are the values recorded in the later sample.
  nvmlReturn_t GpmMetricsGet(nvmlGpmMetricsGet_t* get) {
    std::lock_guard<std::mutex> lock(mu_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    if (get == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (get->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (get->numMetrics > NVML_GPM_METRIC_MAX) return NVML_ERROR_INVALID_ARGUMENT;
    const auto first = gpm_samples_.find(get->sample1);
    const auto second = gpm_samples_.find(get->sample2);
    if (first == gpm_samples_.end() || second == gpm_samples_.end()) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    const nvmlGpmSample_st& s1 = *first->second;
    const nvmlGpmSample_st& s2 = *second->second;
    if (!s1.filled || !s2.filled || s1.index != s2.index || s1.gpu_instance != s2.gpu_instance ||
        std::tie(s2.taken, s2.seq) <= std::tie(s1.taken, s1.seq)) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned i = 0; i < get->numMetrics; ++i) {
      nvmlGpmMetric_t& m = get->metrics[i];
      m.value = 0;
      m.metricInfo.shortName = nullptr;
      m.metricInfo.longName = nullptr;
      m.metricInfo.unit = nullptr;
      if (const GpmMetric* info = FindGpmMetricById(m.metricId)) {
        // NVML's struct has char*; these point at string literals nobody may write to.
        m.metricInfo.shortName = const_cast<char*>(info->name);
        m.metricInfo.longName = const_cast<char*>(info->long_name);
        m.metricInfo.unit = const_cast<char*>(info->percent ? "%" : "MiB/s");
      }
      const auto value = s2.values.find(m.metricId);
      if (value == s2.values.end()) {
        m.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      } else {
        m.nvmlReturn = NVML_SUCCESS;
        m.value = value->second;
      }
    }
    return NVML_SUCCESS;
  }

  nvmlReturn_t EventSetWait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned timeout_ms) {
    std::unique_lock<std::mutex> lock(mu_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    if (data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    auto it = event_sets_.find(set);
    if (it == event_sets_.end()) return NVML_ERROR_INVALID_ARGUMENT;
    const std::shared_ptr<nvmlEventSet_st> impl = it->second;
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      // Polling the state file here is what makes an XID written by another process wake
      // this waiter within kPollInterval.
      RefreshLocked();
      if (impl->closed) {
        return init_count_ == 0 ? NVML_ERROR_UNINITIALIZED : NVML_ERROR_INVALID_ARGUMENT;
      }
      if (!impl->pending.empty()) {
        *data = impl->pending.front();
        impl->pending.pop_front();
        return NVML_SUCCESS;
      }
      // Like NVML, a GPU that fell off the bus makes the wait fail rather than time out.
      for (const auto& reg : impl->registrations) {
        if (reg.index < fixture_->gpus.size() && MergedLocked(reg.index).lost) {
          return NVML_ERROR_GPU_IS_LOST;
        }
      }
      const Clock::time_point now = Clock::now();
      if (now >= deadline) return NVML_ERROR_TIMEOUT;
      // The watch thread refreshes and notifies on every change of the state file; without
      // it, or while stat() cannot be trusted, look again soon.
      const bool watched = watch_.thread.joinable() && !state_racy_;
      cv_.wait_until(lock, watched ? deadline : std::min(deadline, now + kPollInterval));
    }
  }

 private:
  bool ValidIndexLocked(nvmlDevice_t device, unsigned* index) const {
    return TableIndex(device, index) && *index < fixture_->gpus.size();
  }

  // A whole-GPU or MIG handle: its GPU index and, for a MIG handle (when `mig` is not null),
  // its (GPU instance, compute instance) ids.
  bool ResolveLocked(nvmlDevice_t device, unsigned* index,
                     std::optional<std::pair<unsigned, unsigned>>* mig) const {
    if (ValidIndexLocked(device, index)) return true;
    unsigned gi = 0, ci = 0;
    if (!MigTableIndex(device, index, &gi, &ci) || *index >= fixture_->gpus.size()) return false;
    if (mig != nullptr) *mig = std::make_pair(gi, ci);
    return true;
  }

  // The GPU's merged state and its effective fixture values, built once per state file
  // generation. The references stay valid while mu_ is held and the state does not change.
  const GpuState& MergedLocked(unsigned index) { return *ViewLocked(index).merged; }
  std::shared_ptr<const FixtureGpu> EffectiveLocked(unsigned index) {
    return ViewLocked(index).effective;
  }
  const DeviceRuntime& ViewLocked(unsigned index) {
    DeviceRuntime& rt = runtime_[index];
    if (rt.view_generation != state_generation_) {
      auto merged = std::make_shared<const GpuState>(
          MergedGpuState(state_, index, fixture_->gpus[index].uuid));
      rt.effective = std::make_shared<const FixtureGpu>(Effective(fixture_->gpus[index], *merged));
      rt.merged = std::move(merged);
      rt.view_generation = state_generation_;
    }
    return rt;
  }

  nvmlReturn_t FillSample(unsigned index, unsigned gpu_instance,
                          const std::map<unsigned, double>& values, nvmlGpmSample_t sample) {
    std::lock_guard<std::mutex> lock(mu_);
    // Looked up again: the sample may have been freed, or NVML shut down, during a hang.
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    auto it = gpm_samples_.find(sample);
    if (it == gpm_samples_.end()) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlGpmSample_st& s = *it->second;
    s.filled = true;
    s.index = index;
    s.gpu_instance = gpu_instance;
    s.taken = Clock::now();
    s.seq = ++gpm_seq_;
    s.values = values;
    return NVML_SUCCESS;
  }

  // Sleeps for an injected hang in short slices, ending early when the hang is cleared from
  // the state file (a recovered driver) or NVML is shut down.
  void SleepForHang(unsigned index, double seconds) {
    const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                          std::chrono::duration<double>(seconds));
    while (true) {
      const Clock::time_point now = Clock::now();
      if (now >= deadline) return;
      std::this_thread::sleep_for(std::min<Clock::duration>(deadline - now, kPollInterval * 2));
      std::lock_guard<std::mutex> lock(mu_);
      if (init_count_ == 0 || index >= fixture_->gpus.size()) return;
      RefreshLocked();
      if (MergedLocked(index).hang_seconds <= 0) return;
    }
  }

  // The state file's watch: an inotify descriptor on its directory, an eventfd that stops
  // the thread, and the thread.
  struct Watch {
    int inotify_fd = -1;
    int stop_fd = -1;
    std::thread thread;
  };

  // Starts the watch thread for state_path_ (none without a state file). When inotify cannot
  // watch the directory, waiters poll as before.
  void StartWatchLocked() {
    if (state_path_.empty() || watch_.thread.joinable()) return;
    const size_t slash = state_path_.rfind('/');
    const std::string dir = slash == std::string::npos ? "."
                            : slash == 0               ? "/"
                                                       : state_path_.substr(0, slash);
    const std::string name =
        slash == std::string::npos ? state_path_ : state_path_.substr(slash + 1);
    Watch w;
    w.inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    w.stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w.inotify_fd < 0 || w.stop_fd < 0 ||
        inotify_add_watch(w.inotify_fd, dir.c_str(),
                          IN_CLOSE_WRITE | IN_MODIFY | IN_MOVED_TO | IN_CREATE | IN_DELETE |
                              IN_MOVED_FROM | IN_ATTRIB) < 0) {
      CloseWatchFds(&w);
      return;
    }
    const int inotify_fd = w.inotify_fd, stop_fd = w.stop_fd;
    // The thread takes every signal blocked, whatever the caller's mask: a caller that
    // unblocks SIGTERM around nvmlInit (gpulet does, during discovery) must not find it
    // delivered, with its default action, to a thread of ours later.
    sigset_t all, caller;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &caller);
    struct RestoreMask {
      const sigset_t* mask;
      ~RestoreMask() { pthread_sigmask(SIG_SETMASK, mask, nullptr); }
    } restore{&caller};
    try {
      w.thread =
          std::thread([this, inotify_fd, stop_fd, name] { WatchLoop(inotify_fd, stop_fd, name); });
      pthread_setname_np(w.thread.native_handle(), "nvml-sim-watch");
    } catch (const std::system_error&) {
      CloseWatchFds(&w);
      return;
    }
    watch_ = std::move(w);
  }

  static void CloseWatchFds(Watch* w) {
    if (w->inotify_fd >= 0) close(w->inotify_fd);
    if (w->stop_fd >= 0) close(w->stop_fd);
    w->inotify_fd = w->stop_fd = -1;
  }

  // Called without mu_: the thread takes it to refresh.
  static void StopWatch(Watch* w) {
    if (w->thread.joinable()) {
      const uint64_t one = 1;
      (void)!write(w->stop_fd, &one, sizeof(one));
      w->thread.join();
    }
    CloseWatchFds(w);
  }

  void WatchLoop(int inotify_fd, int stop_fd, const std::string& name) {
    alignas(inotify_event) char buf[4096];
    while (true) {
      pollfd fds[2] = {{inotify_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
      const int n = poll(fds, 2, kWatchFallbackMs);
      if (n < 0 && errno != EINTR) return;
      if (fds[1].revents != 0) return;
      bool relevant = n == 0;  // the fallback look
      if (fds[0].revents != 0) {
        // Marked before the events leave the queue and cleared after `watch_dirty_` is set,
        // so a device call never sees an empty queue, no read in progress and no dirty
        // flag while a change of the file is in flight (ChangedSinceLastLookLocked).
        watch_reading_.store(true);
        ssize_t len;
        bool file_event = false;
        while ((len = read(inotify_fd, buf, sizeof(buf))) > 0) {
          for (ssize_t at = 0; at < len;) {
            const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
            if ((e->mask & IN_Q_OVERFLOW) != 0 || (e->len > 0 && name == e->name)) {
              file_event = true;
            }
            at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
          }
        }
        if (file_event) watch_dirty_.store(true);
        watch_reading_.store(false);
        relevant = relevant || file_event;
      }
      if (!relevant) continue;
      std::lock_guard<std::mutex> lock(mu_);
      if (init_count_ > 0) RefreshLocked(/*force=*/n == 0);
    }
  }

  // Whether the state file may have changed since RefreshLocked last looked. Without a live
  // watch, or while stat() cannot be trusted, always. With one, only when the watch's inotify
  // queue holds events, the watch thread is reading them, or it read one naming the file
  // since: inotify queues an event before the write that caused it returns, so a call right
  // after a write (a test's, in this process or another) still sees the change, and the other
  // calls (thousands a second under gpulet's sampler) skip the stat() of the file's path.
  bool ChangedSinceLastLookLocked() {
    if (!watch_.thread.joinable() || state_racy_) return true;
    int queued = 0;
    if (ioctl(watch_.inotify_fd, FIONREAD, &queued) != 0 || queued > 0) return true;
    if (watch_reading_.load()) return true;
    return watch_dirty_.exchange(false);
  }

  // Re-reads the state file when stat() says it changed (or it was modified too recently to
  // trust stat()), then applies it.
  void RefreshLocked(bool force = false) {
    if (fixture_ == nullptr || state_path_.empty()) return;
    if (!force && !ChangedSinceLastLookLocked()) return;
    const FileId id = StatFile(state_path_);
    if (id == state_id_ && !state_racy_) return;
    const bool changed = !(id == state_id_);
    state_id_ = id;
    state_racy_ = IsRacy(id);
    SimState next;
    std::string error;
    if (!LoadState(state_path_, &next, &error)) {
      // Keep the previous state: a broken edit should not look like "all faults cleared".
      if (changed)
        std::fprintf(stderr, "gpulet-nvml-sim: ignoring state file: %s\n", error.c_str());
      return;
    }
    const Clock::time_point now = Clock::now();
    for (unsigned i = 0; i < runtime_.size(); ++i) AccumulateCountersLocked(i, now);
    state_ = std::move(next);
    ++state_generation_;
    if (changed) WarnAboutMigOverridesLocked();
    DispatchXidsLocked();
    cv_.notify_all();
  }

  // Energy is the integral of the power reading, and the NVLink data counters the integrals
  // of the GPM NVLink rates, so overrides of those bend the counters too. Called with the
  // state in force since the last call, before a new state replaces it.
  void AccumulateCountersLocked(unsigned index, Clock::time_point now) {
    DeviceRuntime& rt = runtime_[index];
    const FixtureGpu& gpu = fixture_->gpus[index];
    const double seconds = std::chrono::duration<double>(now - rt.counters_at).count();
    rt.counters_at = now;
    if (seconds <= 0 || (!gpu.energy_mj && !gpu.nvlink)) return;
    const GpuState& state = MergedLocked(index);
    if (gpu.energy_mj && gpu.power_usage_mw) {
      double power_mw = *gpu.power_usage_mw;
      if (state.load.power_w) power_mw = *state.load.power_w * 1000.0;
      rt.energy_mj += power_mw * seconds;
    }
    if (gpu.nvlink) {
      const double kib_per_mib = 1024.0;
      rt.nvlink_tx_kib +=
          GpmValue(gpu, state.load, NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC).value_or(0) *
          kib_per_mib * seconds;
      rt.nvlink_rx_kib +=
          GpmValue(gpu, state.load, NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC).value_or(0) *
          kib_per_mib * seconds;
    }
  }

  // Effective() ignores a MIG layout the product cannot take; say so once per state change.
  void WarnAboutMigOverridesLocked() {
    for (unsigned i = 0; i < fixture_->gpus.size(); ++i) {
      const FixtureGpu& gpu = fixture_->gpus[i];
      const GpuState& state = MergedLocked(i);
      if (!state.mig.has_value()) continue;
      std::string why;
      if (!gpu.mig.has_value()) {
        why = "the GPU is not MIG-capable";
      } else if (gpu.mig_product == nullptr) {
        if (!state.mig->instances.empty()) why = "no MIG profile table for " + gpu.name;
      } else {
        why = CheckMigLayout(*gpu.mig_product, state.mig->enabled, state.mig->instances);
      }
      if (!why.empty()) {
        std::fprintf(stderr, "gpulet-nvml-sim: ignoring the MIG layout of GPU %u (%s): %s\n", i,
                     gpu.uuid.c_str(), why.c_str());
      }
    }
  }

  void DispatchXidsLocked() {
    for (unsigned i = 0; i < fixture_->gpus.size(); ++i) {
      DeviceRuntime& rt = runtime_[i];
      uint64_t high = rt.xid_watermark;
      for (const XidEvent& xid : MergedLocked(i).xids) {
        if (xid.seq <= rt.xid_watermark) continue;
        high = std::max(high, xid.seq);
        nvmlEventData_t event;
        std::memset(&event, 0, sizeof(event));
        event.device = HandleFor(i);
        event.eventType = nvmlEventTypeXidCriticalError;
        event.eventData = xid.xid;
        event.gpuInstanceId = xid.gpu_instance.value_or(kNoInstance);
        event.computeInstanceId = xid.compute_instance.value_or(kNoInstance);
        for (auto& entry : event_sets_) {
          nvmlEventSet_st& set = *entry.second;
          for (const auto& reg : set.registrations) {
            if (reg.index == i && (reg.types & nvmlEventTypeXidCriticalError) != 0 &&
                set.pending.size() < kMaxQueuedEvents) {
              set.pending.push_back(event);
            }
          }
        }
      }
      rt.xid_watermark = high;
    }
  }

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
  SimState state_;
  uint64_t state_generation_ = 1;  // bumped whenever state_ changes (DeviceRuntime's views)
  std::map<nvmlEventSet_st*, std::shared_ptr<nvmlEventSet_st>> event_sets_;
  // Every allocated GPM sample, by its handle; kept across nvmlShutdown (see Shutdown).
  std::map<nvmlGpmSample_st*, std::unique_ptr<nvmlGpmSample_st>> gpm_samples_;
  uint64_t gpm_seq_ = 0;
};

// Never destroyed: a thread may still be inside a call while the process exits, and must not
// find a destroyed mutex.
Simulator& Sim() {
  static Simulator* const sim = new Simulator();
  return *sim;
}

template <typename F>
nvmlReturn_t Guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpulet-nvml-sim: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "gpulet-nvml-sim: internal error\n");
  }
  return NVML_ERROR_UNKNOWN;
}

// A call on a whole GPU. On a MIG device handle it answers NOT_SUPPORTED: real NVML serves
// only a subset of queries on MIG handles, and the simulator only those OnAnyDevice serves.
template <typename F>
nvmlReturn_t OnDevice(nvmlDevice_t device, F&& body) {
  return Guarded([&]() -> nvmlReturn_t {
    DeviceCall call;
    const nvmlReturn_t ret = Sim().BeginDeviceCall(device, &call);
    if (ret != NVML_SUCCESS) return ret;
    if (call.mig.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    return body(call);
  });
}

// A call that takes a whole-GPU or a MIG device handle (call.mig says which).
template <typename F>
nvmlReturn_t OnAnyDevice(nvmlDevice_t device, F&& body) {
  return Guarded([&]() -> nvmlReturn_t {
    DeviceCall call;
    const nvmlReturn_t ret = Sim().BeginDeviceCall(device, &call);
    if (ret != NVML_SUCCESS) return ret;
    return body(call);
  });
}

bool MigEnabled(const FixtureGpu& gpu) {
  return gpu.mig.has_value() && gpu.mig->current == NVML_DEVICE_MIG_ENABLE;
}

// The instance of the current layout a process names; nullptr when it names none, or one the
// layout lacks.
const MigInstance* ProcessInstance(const FixtureGpu& gpu, const SimProcess& p) {
  if (!p.gpu_instance.has_value() || !MigEnabled(gpu)) return nullptr;
  for (const MigInstance& m : gpu.mig->instances) {
    if (m.gpu_instance == *p.gpu_instance &&
        (!p.compute_instance.has_value() || *p.compute_instance == m.compute_instance)) {
      return &m;
    }
  }
  return nullptr;
}

// Memory of one MIG device in MiB: the profile's size, the instance's processes plus a fixed
// overhead in use (at most the size).
std::pair<uint64_t, uint64_t> MigMemoryMib(const DeviceCall& call) {
  const uint64_t total = call.mig_profile->memory_mib;
  uint64_t used = kMigInstanceOverheadMib;
  for (const SimProcess& p : call.gpu().processes) {
    const MigInstance* m = ProcessInstance(call.gpu(), p);
    if (m != nullptr && m->gpu_instance == call.mig->gpu_instance &&
        m->compute_instance == call.mig->compute_instance) {
      used += p.used_mib;
    }
  }
  return {total, std::min(used, total)};
}

nvmlReturn_t CopyString(const std::string& value, char* buffer, unsigned length) {
  if (buffer == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < value.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buffer, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t CopyOptString(const std::optional<std::string>& value, char* buffer, unsigned length) {
  if (buffer == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!value.has_value()) return NVML_ERROR_NOT_SUPPORTED;
  return CopyString(*value, buffer, length);
}

template <typename T, typename U>
nvmlReturn_t CopyOpt(const std::optional<U>& value, T* out) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!value.has_value()) return NVML_ERROR_NOT_SUPPORTED;
  *out = static_cast<T>(*value);
  return NVML_SUCCESS;
}

nvmlReturn_t Processes(const DeviceCall& call, ProcessType type, unsigned* count,
                       nvmlProcessInfo_t* infos) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<const SimProcess*> matching;
  std::vector<const MigInstance*> instances;
  for (const SimProcess& p : call.gpu().processes) {
    if (p.type != type) continue;
    const MigInstance* instance = ProcessInstance(call.gpu(), p);
    // A process in an instance the current layout lacks (destroyed, or MIG turned off) is
    // gone with it.
    if (p.gpu_instance.has_value() && instance == nullptr) continue;
    matching.push_back(&p);
    instances.push_back(instance);
  }
  if (*count < matching.size()) {
    *count = static_cast<unsigned>(matching.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (!matching.empty() && infos == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (size_t i = 0; i < matching.size(); ++i) {
    infos[i].pid = matching[i]->pid;
    infos[i].usedGpuMemory = matching[i]->used_mib * kMiB;
    infos[i].gpuInstanceId = instances[i] != nullptr ? instances[i]->gpu_instance : kNoInstance;
    infos[i].computeInstanceId =
        instances[i] != nullptr ? instances[i]->compute_instance : kNoInstance;
  }
  *count = static_cast<unsigned>(matching.size());
  return NVML_SUCCESS;
}

nvmlReturn_t Codec(const std::optional<CodecUtilization>& codec, unsigned* utilization,
                   unsigned* sampling_period_us) {
  if (utilization == nullptr || sampling_period_us == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (!codec.has_value()) return NVML_ERROR_NOT_SUPPORTED;
  *utilization = codec->utilization;
  *sampling_period_us = codec->sampling_period_us;
  return NVML_SUCCESS;
}

nvmlReturn_t ClockValue(const std::array<std::optional<unsigned>, 4>& clocks, int type,
                        unsigned* mhz) {
  if (type < 0 || type >= static_cast<int>(clocks.size())) return NVML_ERROR_INVALID_ARGUMENT;
  return CopyOpt(clocks[static_cast<size_t>(type)], mhz);
}

void FillField(const DeviceCall& call, nvmlFieldValue_t* v) {
  const FixtureGpu& g = call.gpu();
  auto set_uint = [v](const std::optional<unsigned>& value) {
    if (!value.has_value()) {
      v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      return;
    }
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v->value.uiVal = *value;
  };
  auto set_ull = [v](const std::optional<unsigned long long>& value) {
    if (!value.has_value()) {
      v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      return;
    }
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    v->value.ullVal = *value;
  };
  auto remapped = [&g](auto field) -> std::optional<unsigned> {
    if (!g.remapped_rows.has_value()) return std::nullopt;
    return field(*g.remapped_rows);
  };
  auto ecc_volatile = [&g](int type) -> std::optional<unsigned long long> {
    if (!g.ecc.has_value() || !g.ecc->enabled) return std::nullopt;
    return g.ecc->counts[type][NVML_VOLATILE_ECC];
  };
  // NVLink data counters: scopeId UINT_MAX sums every link; a link's own counter is an even
  // share of the total (the simulator models no per-link imbalance).
  auto nvlink_data = [&g, v, &set_ull](double total_kib) {
    if (!g.nvlink.has_value()) {
      v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      return;
    }
    const auto total = static_cast<unsigned long long>(total_kib);
    const unsigned links = g.nvlink->links;
    if (v->scopeId == UINT_MAX) {
      set_ull(total);
    } else if (v->scopeId < links) {
      set_ull(total / links + (v->scopeId < total % links ? 1 : 0));
    } else {
      v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
    }
  };
  v->nvmlReturn = NVML_SUCCESS;
  v->latencyUsec = 0;
  v->timestamp = std::chrono::duration_cast<std::chrono::microseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  switch (v->fieldId) {
    case NVML_FI_DEV_MEMORY_TEMP:
      set_uint(g.memory_temperature_c);
      break;
    case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
      set_ull(g.energy_mj ? std::optional<unsigned long long>(
                                static_cast<unsigned long long>(call.energy_mj))
                          : std::nullopt);
      break;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER:
      set_uint(g.pcie_replay);
      break;
    case NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
      set_uint(g.recovery_action);
      break;
    case NVML_FI_DEV_NVLINK_LINK_COUNT:
      set_uint(g.nvlink ? std::optional<unsigned>(g.nvlink->links) : std::nullopt);
      break;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
      nvlink_data(call.nvlink_tx_kib);
      break;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
      nvlink_data(call.nvlink_rx_kib);
      break;
    case kFieldEccSbeVolatileTotal:
      set_ull(ecc_volatile(NVML_MEMORY_ERROR_TYPE_CORRECTED));
      break;
    case kFieldEccDbeVolatileTotal:
      set_ull(ecc_volatile(NVML_MEMORY_ERROR_TYPE_UNCORRECTED));
      break;
    case kFieldRemappedCorrectable:
      set_uint(remapped([](const RemappedRows& r) { return r.correctable; }));
      break;
    case kFieldRemappedUncorrectable:
      set_uint(remapped([](const RemappedRows& r) { return r.uncorrectable; }));
      break;
    case kFieldRemappedPending:
      set_uint(remapped([](const RemappedRows& r) { return r.pending ? 1u : 0u; }));
      break;
    case kFieldRemappedFailure:
      set_uint(remapped([](const RemappedRows& r) { return r.failure ? 1u : 0u; }));
      break;
    default:
      v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      break;
  }
}

// The first checks of every per-link NVLink query.
nvmlReturn_t CheckLink(const FixtureGpu& gpu, unsigned link) {
  if (!gpu.nvlink.has_value()) return NVML_ERROR_NOT_SUPPORTED;
  if (link >= gpu.nvlink->links) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_SUCCESS;
}

// nvmlErrorString texts, worded after the real library's; callers should switch on codes.
struct ErrorText {
  nvmlReturn_t code;
  const char* text;
};
constexpr ErrorText kErrorTexts[] = {
    {NVML_SUCCESS, "Success"},
    {NVML_ERROR_UNINITIALIZED, "Uninitialized"},
    {NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"},
    {NVML_ERROR_NOT_SUPPORTED, "Not Supported"},
    {NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"},
    {NVML_ERROR_ALREADY_INITIALIZED, "Already Initialized"},
    {NVML_ERROR_NOT_FOUND, "Not Found"},
    {NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size"},
    {NVML_ERROR_INSUFFICIENT_POWER, "Insufficient External Power"},
    {NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"},
    {NVML_ERROR_TIMEOUT, "Timeout"},
    {NVML_ERROR_IRQ_ISSUE, "Interrupt request issue"},
    {NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"},
    {NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found"},
    {NVML_ERROR_CORRUPTED_INFOROM, "Corrupted infoROM"},
    {NVML_ERROR_GPU_IS_LOST, "GPU is lost"},
    {NVML_ERROR_RESET_REQUIRED, "GPU requires reset"},
    {NVML_ERROR_OPERATING_SYSTEM, "GPU access blocked by the operating system"},
    {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "Driver/library version mismatch"},
    {NVML_ERROR_IN_USE, "In use by another client"},
    {NVML_ERROR_MEMORY, "Insufficient Memory"},
    {NVML_ERROR_NO_DATA, "No data"},
    {NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "vGPU ECC Not Supported"},
    {NVML_ERROR_INSUFFICIENT_RESOURCES, "Insufficient Resources"},
    {NVML_ERROR_FREQ_NOT_SUPPORTED, "Frequency Not Supported"},
    {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "Argument Version Mismatch"},
    {NVML_ERROR_DEPRECATED, "Deprecated"},
    {NVML_ERROR_NOT_READY, "Not Ready"},
    {NVML_ERROR_GPU_NOT_FOUND, "GPU Not Found"},
    {NVML_ERROR_INVALID_STATE, "Invalid State"},
};

const char* ErrorString(nvmlReturn_t result) {
  for (const ErrorText& e : kErrorTexts) {
    if (e.code == result) return e.text;
  }
  return "Unknown Error";
}

}  // namespace

// --- the exported NVML ABI ----------------------------------------------------------------
// extern "C" gives these C linkage and plain NVML symbol names even inside the namespace;
// they are the only symbols the library exports (everything else is hidden by default).
#define GPULET_NVML_EXPORT extern "C" __attribute__((visibility("default")))

GPULET_NVML_EXPORT nvmlReturn_t nvmlInit_v2() {
  return Guarded([]() -> nvmlReturn_t { return Sim().Init(); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int /*flags*/) {
  // NO_GPUS / NO_ATTACH change nothing here: GPUs are attached lazily anyway.
  return Guarded([]() -> nvmlReturn_t { return Sim().Init(); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlShutdown() {
  return Guarded([]() -> nvmlReturn_t { return Sim().Shutdown(); });
}

GPULET_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result) { return ErrorString(result); }

GPULET_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return Guarded([&]() -> nvmlReturn_t {
    return Sim().WithFixture([&](const Fixture& f) -> nvmlReturn_t {
      return CopyString(f.driver_version, version, length);
    });
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return Guarded([&]() -> nvmlReturn_t {
    return Sim().WithFixture([&](const Fixture& f) -> nvmlReturn_t {
      return CopyString(f.nvml_version, version, length);
    });
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cuda_driver_version) {
  return Guarded([&]() -> nvmlReturn_t {
    return Sim().WithFixture([&](const Fixture& f) -> nvmlReturn_t {
      if (cuda_driver_version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
      *cuda_driver_version = f.cuda_driver_version;
      return NVML_SUCCESS;
    });
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  return Guarded([&]() -> nvmlReturn_t {
    return Sim().WithFixture([&](const Fixture& f) -> nvmlReturn_t {
      if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
      *count = static_cast<unsigned>(f.gpus.size());  // lost GPUs still count, as in NVML
      return NVML_SUCCESS;
    });
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                              nvmlDevice_t* device) {
  return Guarded([&]() -> nvmlReturn_t {
    // An index past the end is INVALID_ARGUMENT in NVML, not NOT_FOUND.
    return Sim().GetHandle([&](const FixtureGpu&, unsigned i) { return i == index; },
                           NVML_ERROR_INVALID_ARGUMENT, device);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  return Guarded([&]() -> nvmlReturn_t {
    if (uuid == nullptr) {
      return Sim().WithFixture(
          [](const Fixture&) -> nvmlReturn_t { return NVML_ERROR_INVALID_ARGUMENT; });
    }
    const std::string wanted(uuid);
    if (wanted.rfind("MIG-", 0) == 0) return Sim().GetMigHandleByUuid(wanted, device);
    return Sim().GetHandle([&](const FixtureGpu& g, unsigned) { return g.uuid == wanted; },
                           NVML_ERROR_NOT_FOUND, device);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pci_bus_id,
                                                                 nvmlDevice_t* device) {
  return Guarded([&]() -> nvmlReturn_t {
    unsigned domain = 0, bus = 0, dev = 0;
    if (pci_bus_id == nullptr || !ParsePciBusId(pci_bus_id, &domain, &bus, &dev)) {
      return Sim().WithFixture(
          [](const Fixture&) -> nvmlReturn_t { return NVML_ERROR_INVALID_ARGUMENT; });
    }
    return Sim().GetHandle(
        [&](const FixtureGpu& g, unsigned) {
          return g.pci_domain == domain && g.pci_bus == bus && g.pci_device == dev;
        },
        NVML_ERROR_NOT_FOUND, device);
  });
}

// On a MIG device, "<GPU name> MIG <profile>", as NVML names them.
GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                                  unsigned int length) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyString(c.mig ? c.gpu().name + " MIG " + c.mig->profile : c.gpu().name, name, length);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                  unsigned int length) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyString(c.mig ? c.mig->uuid : c.gpu().uuid, uuid, length);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial,
                                                    unsigned int length) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOptString(c.gpu().serial, serial, length);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char* version,
                                                          unsigned int length) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOptString(c.gpu().vbios_version, version, length);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(std::optional<unsigned>(c.index), index);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(std::optional<unsigned>(c.gpu().minor), minor);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const FixtureGpu& g = c.gpu();
    std::memset(pci, 0, sizeof(*pci));
    std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", g.pci_domain,
                  g.pci_bus, g.pci_device);
    std::snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", g.pci_domain, g.pci_bus,
                  g.pci_device);
    pci->domain = g.pci_domain;
    pci->bus = g.pci_bus;
    pci->device = g.pci_device;
    pci->pciDeviceId = (g.pci_device_id << 16) | 0x10deu;
    pci->pciSubSystemId = g.pci_subsystem_id;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (c.mig) {
      const auto [total, used] = MigMemoryMib(c);
      memory->total = total * kMiB;
      memory->used = used * kMiB;
      memory->free = memory->total - memory->used;
      return NVML_SUCCESS;
    }
    const FixtureGpu& g = c.gpu();
    memory->total = g.memory_total_mib * kMiB;
    memory->used = (g.memory_used_mib + g.memory_reserved_mib) * kMiB;  // v1 counts reserved
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                           nvmlMemory_v2_t* memory) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (c.mig) {
      const auto [total, used] = MigMemoryMib(c);
      memory->total = total * kMiB;
      memory->reserved = 0;
      memory->used = used * kMiB;
      memory->free = memory->total - memory->used;
      return NVML_SUCCESS;
    }
    const FixtureGpu& g = c.gpu();
    memory->total = g.memory_total_mib * kMiB;
    memory->reserved = g.memory_reserved_mib * kMiB;
    memory->used = g.memory_used_mib * kMiB;
    memory->free = memory->total - memory->reserved - memory->used;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                              nvmlUtilization_t* utilization) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    // With MIG on, drivers have no whole-GPU utilisation to give (GPM per instance replaces it).
    if (!c.gpu().utilization.has_value() || MigEnabled(c.gpu())) return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = c.gpu().utilization->first;
    utilization->memory = c.gpu().utilization->second;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor,
                                                         unsigned int* temp) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    return CopyOpt(c.gpu().temperature_c, temp);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* mw) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().power_usage_mw, mw);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device,
                                                                unsigned int* mw) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().power_limit_mw, mw);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                                    unsigned long long* mj) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (mj == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().energy_mj.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    *mj = static_cast<unsigned long long>(c.energy_mj);
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type,
                                                       unsigned int* mhz) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return ClockValue(c.gpu().clocks_mhz, type, mhz);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, int type,
                                                          unsigned int* mhz) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return ClockValue(c.gpu().max_clocks_mhz, type, mhz);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int* speed) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().fan_percent, speed);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, int* pstate) {
  return OnDevice(
      device, [&](const DeviceCall& c) -> nvmlReturn_t { return CopyOpt(c.gpu().pstate, pstate); });
}

GPULET_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long* reasons) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().clocks_event_reasons, reasons);
  });
}

// The pre-R535 name of the same query, same bits.
GPULET_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long* reasons) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().clocks_event_reasons, reasons);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major,
                                                                   int* minor) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().compute_capability.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    *major = c.gpu().compute_capability->first;
    *minor = c.gpu().compute_capability->second;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int* arch) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().architecture, arch);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, int* brand) {
  return OnDevice(
      device, [&](const DeviceCall& c) -> nvmlReturn_t { return CopyOpt(c.gpu().brand, brand); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int* mode) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().persistence_mode.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    *mode = *c.gpu().persistence_mode ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                        unsigned int* count,
                                                                        nvmlProcessInfo_t* infos) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return Processes(c, ProcessType::kCompute, count, infos);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                                         unsigned int* count,
                                                                         nvmlProcessInfo_t* infos) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return Processes(c, ProcessType::kGraphics, count, infos);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device,
                                                          unsigned int* correctable,
                                                          unsigned int* uncorrectable,
                                                          unsigned int* pending,
                                                          unsigned int* failure) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (correctable == nullptr || uncorrectable == nullptr || pending == nullptr ||
        failure == nullptr) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!c.gpu().remapped_rows.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    const RemappedRows& r = *c.gpu().remapped_rows;
    *correctable = r.correctable;
    *uncorrectable = r.uncorrectable;
    *pending = r.pending ? 1 : 0;
    *failure = r.failure ? 1 : 0;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type,
                                                            int counter_type,
                                                            unsigned long long* count) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (count == nullptr || error_type < 0 || error_type > 1 || counter_type < 0 ||
        counter_type > 1) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    // Counts need ECC mode enabled; a board without ECC has none to report.
    if (!c.gpu().ecc.has_value() || !c.gpu().ecc->enabled) return NVML_ERROR_NOT_SUPPORTED;
    *count = c.gpu().ecc->counts[error_type][counter_type];
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, int* current,
                                                     int* pending) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().ecc.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    *current = c.gpu().ecc->enabled ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    *pending = c.gpu().ecc->pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device,
                                                               unsigned int* value) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().pcie_replay, value);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device,
                                                                unsigned int* utilization,
                                                                unsigned int* sampling_us) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return Codec(c.gpu().encoder, utilization, sampling_us);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device,
                                                                unsigned int* utilization,
                                                                unsigned int* sampling_us) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return Codec(c.gpu().decoder, utilization, sampling_us);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count,
                                                         nvmlFieldValue_t* values) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (count < 0 || (count > 0 && values == nullptr)) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; ++i) FillField(c, &values[i]);
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                                 unsigned long long* types) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (types == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *types = SupportedEvents(c.gpu());
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                         int* is_active) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (is_active == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (const nvmlReturn_t ret = CheckLink(c.gpu(), link); ret != NVML_SUCCESS) return ret;
    *is_active =
        c.gpu().nvlink->down.count(link) != 0 ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device,
                                                                unsigned int link, int counter,
                                                                unsigned long long* value) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (value == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (const nvmlReturn_t ret = CheckLink(c.gpu(), link); ret != NVML_SUCCESS) return ret;
    if (counter < NVML_NVLINK_ERROR_DL_REPLAY || counter > NVML_NVLINK_ERROR_DL_CRC_DATA) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    const NvLinkInfo& nvlink = *c.gpu().nvlink;
    const auto it = nvlink.link_errors.find(link);
    const std::array<uint64_t, 4>& counters =
        it != nvlink.link_errors.end() ? it->second : nvlink.errors;
    *value = counters[static_cast<size_t>(counter)];
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device,
                                                                    unsigned int link, int* type) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (const nvmlReturn_t ret = CheckLink(c.gpu(), link); ret != NVML_SUCCESS) return ret;
    *type = c.gpu().nvlink->remote_type;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                                                     unsigned int* pending) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().mig.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    *current = c.gpu().mig->current;
    *pending = c.gpu().mig->pending;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device,
                                                               unsigned int* count) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().mig.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    *count = kMigComputeSlices;  // every product in sim/mig.h is a 7-slice GPU
    return NVML_SUCCESS;
  });
}

// The index-th MIG device, by GPU instance id then compute instance id. NVML answers
// INVALID_ARGUMENT when MIG is off and NOT_FOUND past the last device; so does this.
GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                                    unsigned int index,
                                                                    nvmlDevice_t* mig) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().mig.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    if (!MigEnabled(c.gpu())) return NVML_ERROR_INVALID_ARGUMENT;
    const std::vector<MigInstance> sorted = SortedMigLayout(c.gpu().mig->instances);
    if (index >= sorted.size()) return NVML_ERROR_NOT_FOUND;
    *mig = MigHandleFor(c.index, sorted[index].gpu_instance, sorted[index].compute_instance);
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device,
                                                            unsigned int* is_mig) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (is_mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = c.mig ? 1 : 0;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t device,
                                                                             nvmlDevice_t* parent) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (parent == nullptr || !c.mig) return NVML_ERROR_INVALID_ARGUMENT;
    *parent = HandleFor(c.index);
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (id == nullptr || !c.mig) return NVML_ERROR_INVALID_ARGUMENT;
    *id = c.mig->gpu_instance;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device,
                                                               unsigned int* id) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (id == nullptr || !c.mig) return NVML_ERROR_INVALID_ARGUMENT;
    *id = c.mig->compute_instance;
    return NVML_SUCCESS;
  });
}

// A MIG device's profile, or the whole GPU (all slices, all memory) of a product with a MIG
// table; NOT_SUPPORTED for GPUs sim/mig.h has no table for.
GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device,
                                                           nvmlDeviceAttributes_t* attributes) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (attributes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (c.gpu().mig_product == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    const MigProfile& p = c.mig ? *c.mig_profile : c.gpu().mig_product->Full();
    attributes->multiprocessorCount =
        c.mig ? p.multiprocessors : c.gpu().mig_product->multiprocessors;
    attributes->sharedCopyEngineCount = p.copy_engines;
    attributes->sharedDecoderCount = p.decoders;
    attributes->sharedEncoderCount = p.encoders;
    attributes->sharedJpegCount = p.jpegs;
    attributes->sharedOfaCount = p.ofas;
    attributes->gpuInstanceSliceCount = c.mig ? p.slices : kMigComputeSlices;
    attributes->computeInstanceSliceCount = c.mig ? p.slices : kMigComputeSlices;
    attributes->memorySizeMB = c.mig ? p.memory_mib : c.gpu().memory_total_mib;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, int* mode) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = c.gpu().virtualization_mode;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device,
                                                          nvmlGpmSupport_t* support) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (support == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = c.gpu().gpm.has_value() ? 1 : 0;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t* sample) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().GpmSampleAlloc(sample); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().GpmSampleFree(sample); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().GpmSampleGet(device, sample); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpu_instance,
                                                    nvmlGpmSample_t sample) {
  return Guarded(
      [&]() -> nvmlReturn_t { return Sim().GpmMigSampleGet(device, gpu_instance, sample); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t* metrics) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().GpmMetricsGet(metrics); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().EventSetCreate(set); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                         unsigned long long types,
                                                         nvmlEventSet_t set) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().RegisterEvents(device, types, set); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                                    unsigned int timeout_ms) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().EventSetWait(set, data, timeout_ms); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().EventSetFree(set); });
}

#undef GPULET_NVML_EXPORT

}  // namespace gpulet::sim
