#include "sim/simulator.h"

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
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <tuple>

namespace gpulet::sim {
namespace {

nvmlDevice_st g_handles[kMaxDevices];
// MIG device handles, one per (GPU, GPU instance id, compute instance id) that can exist, so
// a MIG handle, too, stays a valid address for the process's life; one whose instance was
// destroyed is recognised and refused.
nvmlDevice_st g_mig_handles[kMaxDevices][kMaxGpuInstanceId + 1][kMaxComputeInstanceId + 1];

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
  if (state.minor) g.minor = *state.minor;
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

}  // namespace

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

unsigned long long SupportedEvents(const FixtureGpu& gpu) {
  unsigned long long types = nvmlEventTypePState | nvmlEventTypeXidCriticalError;
  if (gpu.ecc.has_value()) {
    types |= nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError;
  }
  return types;
}

nvmlReturn_t Simulator::Init() {
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

nvmlReturn_t Simulator::Shutdown() {
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

nvmlReturn_t Simulator::BeginDeviceCall(nvmlDevice_t device, DeviceCall* call, bool for_handle) {
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
  if (LostNow(state)) return NVML_ERROR_GPU_IS_LOST;
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

nvmlReturn_t Simulator::GetMigHandleByUuid(const std::string& uuid, nvmlDevice_t* device) {
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

nvmlReturn_t Simulator::EventSetCreate(nvmlEventSet_t* set) {
  std::lock_guard<std::mutex> lock(mu_);
  if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  auto impl = std::make_shared<nvmlEventSet_st>();
  event_sets_[impl.get()] = impl;
  *set = impl.get();
  return NVML_SUCCESS;
}

nvmlReturn_t Simulator::EventSetFree(nvmlEventSet_t set) {
  std::lock_guard<std::mutex> lock(mu_);
  if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
  auto it = event_sets_.find(set);
  if (it == event_sets_.end()) return NVML_ERROR_INVALID_ARGUMENT;
  it->second->closed = true;  // a thread still waiting on it keeps its shared_ptr
  event_sets_.erase(it);
  cv_.notify_all();
  return NVML_SUCCESS;
}

nvmlReturn_t Simulator::RegisterEvents(nvmlDevice_t device, unsigned long long types,
                                       nvmlEventSet_t set) {
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
  auto reg =
      std::find_if(regs.begin(), regs.end(), [&](const auto& r) { return r.index == call.index; });
  if (reg != regs.end()) {
    reg->types |= types;
  } else {
    regs.push_back({call.index, types});
  }
  return NVML_SUCCESS;
}

nvmlReturn_t Simulator::GpmSampleAlloc(nvmlGpmSample_t* sample) {
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

nvmlReturn_t Simulator::GpmSampleFree(nvmlGpmSample_t sample) {
  std::lock_guard<std::mutex> lock(mu_);
  return gpm_samples_.erase(sample) == 1 ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t Simulator::BeginGpmCall(nvmlDevice_t device, nvmlGpmSample_t sample,
                                     DeviceCall* call) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    if (gpm_samples_.count(sample) == 0) return NVML_ERROR_INVALID_ARGUMENT;
  }
  return BeginDeviceCall(device, call);
}

nvmlReturn_t Simulator::GpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
  DeviceCall call;
  if (const nvmlReturn_t ret = BeginGpmCall(device, sample, &call); ret != NVML_SUCCESS) {
    return ret;
  }
  // GPM on a MIG device goes through nvmlGpmMigSampleGet on its parent.
  if (call.mig.has_value() || !call.gpu().gpm.has_value()) return NVML_ERROR_NOT_SUPPORTED;
  return FillSample(call.index, kNoInstance, *call.gpu().gpm, sample);
}

nvmlReturn_t Simulator::GpmMigSampleGet(nvmlDevice_t device, unsigned gpu_instance,
                                        nvmlGpmSample_t sample) {
  DeviceCall call;
  if (const nvmlReturn_t ret = BeginGpmCall(device, sample, &call); ret != NVML_SUCCESS) {
    return ret;
  }
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

nvmlReturn_t Simulator::GpmMetricsGet(nvmlGpmMetricsGet_t* get) {
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

nvmlReturn_t Simulator::EventSetWait(nvmlEventSet_t set, nvmlEventData_t* data,
                                     unsigned timeout_ms) {
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
    if (timed_faults_) DispatchXidsLocked();
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
      if (reg.index < fixture_->gpus.size() && LostNow(MergedLocked(reg.index))) {
        return NVML_ERROR_GPU_IS_LOST;
      }
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return NVML_ERROR_TIMEOUT;
    // The watch thread refreshes and notifies on every change of the state file; without
    // it, while stat() cannot be trusted, or while a fault is due later (a card that falls
    // off the bus again after a reboot), look again soon.
    const bool watched = watch_.thread.joinable() && !state_racy_ && !timed_faults_;
    cv_.wait_until(lock, watched ? deadline : std::min(deadline, now + kPollInterval));
  }
}

bool Simulator::ValidIndexLocked(nvmlDevice_t device, unsigned* index) const {
  return TableIndex(device, index) && *index < fixture_->gpus.size();
}

bool Simulator::ResolveLocked(nvmlDevice_t device, unsigned* index,
                              std::optional<std::pair<unsigned, unsigned>>* mig) const {
  if (ValidIndexLocked(device, index)) return true;
  unsigned gi = 0, ci = 0;
  if (!MigTableIndex(device, index, &gi, &ci) || *index >= fixture_->gpus.size()) return false;
  if (mig != nullptr) *mig = std::make_pair(gi, ci);
  return true;
}

std::shared_ptr<const FixtureGpu> Simulator::EffectiveLocked(unsigned index) {
  return ViewLocked(index).effective;
}

const DeviceRuntime& Simulator::ViewLocked(unsigned index) {
  DeviceRuntime& rt = runtime_[index];
  if (rt.view_generation != state_generation_) {
    auto merged =
        std::make_shared<const GpuState>(MergedGpuState(state_, index, fixture_->gpus[index].uuid));
    rt.effective = std::make_shared<const FixtureGpu>(Effective(fixture_->gpus[index], *merged));
    rt.merged = std::move(merged);
    rt.view_generation = state_generation_;
  }
  return rt;
}

nvmlReturn_t Simulator::FillSample(unsigned index, unsigned gpu_instance,
                                   const std::map<unsigned, double>& values,
                                   nvmlGpmSample_t sample) {
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

void Simulator::SleepForHang(unsigned index, double seconds) {
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

void Simulator::StartWatchLocked() {
  if (state_path_.empty() || watch_.thread.joinable()) return;
  const size_t slash = state_path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : state_path_.substr(0, slash);
  const std::string name = slash == std::string::npos ? state_path_ : state_path_.substr(slash + 1);
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

void Simulator::CloseWatchFds(Watch* w) {
  if (w->inotify_fd >= 0) close(w->inotify_fd);
  if (w->stop_fd >= 0) close(w->stop_fd);
  w->inotify_fd = w->stop_fd = -1;
}

void Simulator::StopWatch(Watch* w) {
  if (w->thread.joinable()) {
    const uint64_t one = 1;
    (void)!write(w->stop_fd, &one, sizeof(one));
    w->thread.join();
  }
  CloseWatchFds(w);
}

void Simulator::WatchLoop(int inotify_fd, int stop_fd, const std::string& name) {
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

bool Simulator::ChangedSinceLastLookLocked() {
  if (!watch_.thread.joinable() || state_racy_) return true;
  int queued = 0;
  if (ioctl(watch_.inotify_fd, FIONREAD, &queued) != 0 || queued > 0) return true;
  if (watch_reading_.load()) return true;
  return watch_dirty_.exchange(false);
}

void Simulator::RefreshLocked(bool force) {
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
    if (changed) std::fprintf(stderr, "gpulet-nvml-sim: ignoring state file: %s\n", error.c_str());
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

void Simulator::AccumulateCountersLocked(unsigned index, Clock::time_point now) {
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

void Simulator::WarnAboutMigOverridesLocked() {
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

void Simulator::DispatchXidsLocked() {
  // An XID whose sequence number (microseconds since the epoch) is still ahead is due then: a
  // card's fault scheduled after a reboot.
  const uint64_t now = WallMicros();  // once a refresh, not once an NVML call
  timed_faults_ = false;
  for (unsigned i = 0; i < fixture_->gpus.size(); ++i) {
    DeviceRuntime& rt = runtime_[i];
    uint64_t high = rt.xid_watermark;
    const GpuState& merged = MergedLocked(i);
    if (merged.lost_at.has_value() && !merged.lost && *merged.lost_at * 1e6 > now) {
      timed_faults_ = true;
    }
    for (const XidEvent& xid : merged.xids) {
      if (xid.seq <= rt.xid_watermark) continue;
      if (xid.seq > now) {
        timed_faults_ = true;
        break;  // sorted by seq: the rest are due later too
      }
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

Simulator& Sim() {
  static Simulator* const sim = new Simulator();
  return *sim;
}

}  // namespace gpulet::sim
