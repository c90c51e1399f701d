// Sampler: reads every GPU's live values from NVML on its own interval and publishes a
// prebuilt Prometheus exposition, so a scrape only copies a string.
//
// NVML can be slow or hang; scrapes must not. The sampler is the only metrics code that
// calls NVML, each GPU under a deadline (a hung GPU costs one deadline, then its lane fails
// fast), and each round ends by rendering the text for both formats and swapping it in.
// Each GPU's values carry the time they were taken; a GPU that stopped answering keeps no
// stale values: it is reported as not answering (gpulet_gpu_up 0) with its sample age.
//
// Rounds run every Options::interval on Options::clock's monotonic time; sample times and
// ages are its wall time.
//
// Thread-safety: Start/Stop from one thread; the sampler runs on "gpulet-sampler" (a
// PeriodicWorker); Exposition() and Samples() may be called from any thread.
#ifndef GPULET_METRICS_SAMPLER_H_
#define GPULET_METRICS_SAMPLER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/host_fs.h"
#include "common/periodic_worker.h"
#include "gpu/gpu_library.h"
#include "metrics/pod_attribution.h"
#include "metrics/slice_metrics.h"
#include "state/device_store.h"
#include "state/status_report.h"

namespace gpulet::metrics {

struct GpuSampleState {
  std::optional<gpu::DeviceSample> last;  // the latest successful sample
  bool answering = false;                 // the latest attempt succeeded
  std::string error;                      // why the latest attempt failed
  int nvml_code = -1;  // NVML's code for that failure (NvmlCodeOf); -1: none, or not NVML's
  absl::Time last_attempt = absl::InfinitePast();
  double call_seconds = 0;  // how long the latest attempt took (the flight recorder keeps it)
  struct Process {
    std::string name;                                    // comm, from /proc/<pid>/comm
    std::optional<CgroupPod> cgroup;                     // its pod, from /proc/<pid>/cgroup
    std::optional<uint64_t> start_ticks = std::nullopt;  // starttime, from /proc/<pid>/stat
  };
  std::map<unsigned, Process> processes;  // by pid; read once per pid
};

struct SampleSet {
  std::map<std::string, GpuSampleState> by_uuid;
  double last_round_seconds = 0;
  uint64_t rounds = 0;
  uint64_t nvml_errors = 0;
  std::shared_ptr<const PodMap> pods;  // null when pod attribution is off
  std::vector<SliceSample> slices;     // VRAM slices on this node (slice_metrics.h)
  // GPU UUID → what holds its containers' VRAM quotas (Sampler::Options::vram_holder), for
  // the GPUs that have quotas.
  std::map<std::string, std::string> vram_holders;
  // GPU UUID → the flight recorder's latest fault on it (Sampler::Options::last_fault).
  std::map<std::string, state::FaultStatus> last_faults;
  // GPU UUID → the eviction rung's pods for it (Sampler::Options::evictions).
  std::map<std::string, std::vector<state::EvictionStatus>> evictions;
  // GPU UUID → the reset rung's word on it (Sampler::Options::resets).
  std::map<std::string, state::RungStatus> resets;
  // GPU UUID → the reboot rung's word on it (Sampler::Options::reboots).
  std::map<std::string, state::RungStatus> reboots;
};

// Fills each slice's `device` from its GPU's sample of this round (left absent when the GPU
// did not answer): the slice's own processes (its slots' holders, by the PID the slice file's
// lock names) and the processes pod attribution puts in the slice's container that never
// loaded the library (a container that bypasses it is counted all the same).
void AttachDeviceUse(SampleSet* set);

// starttime (field 22) of a /proc/<pid>/stat line; nullopt when the line is malformed.
std::optional<uint64_t> ProcStartTicks(absl::string_view stat);

struct RenderInfo {
  std::string hostname;
  std::string driver_version;
  // The daemon's count of refused configuration reloads (gpulet_config_reload_errors_total);
  // not exported when null. Must outlive the sampler.
  const std::atomic<uint64_t>* reload_errors = nullptr;
  // Processes gpulet killed for holding a VRAM slice over its quota by the driver's count
  // (gpulet_vram_over_quota_kills_total); not exported when null. Must outlive the sampler.
  const std::atomic<uint64_t>* vram_kills = nullptr;
  // The eviction rung's tries by result (gpulet_gpu_pod_evictions_total{result}); not
  // exported when empty. Must outlive the sampler.
  std::function<std::map<std::string, uint64_t>()> evictions = nullptr;
  // The reset rung's tries by result (gpulet_gpu_resets_total{result}); not exported when
  // empty. Must outlive the sampler.
  std::function<std::map<std::string, uint64_t>()> resets = nullptr;
  // The reboot rung's requests by result (gpulet_node_reboots_total{result}); not exported
  // when empty. Must outlive the sampler.
  std::function<std::map<std::string, uint64_t>()> reboots = nullptr;
};

class Sampler {
 public:
  struct Options {
    absl::Duration interval = absl::Seconds(1);
    absl::Duration timeout = absl::Seconds(1);
    const Clock* clock = RealClock();
    // Where the VRAM slices' allocation directories are, as this process reaches them
    // (sharing.memorySlices.hostDir under the host root); "" reads none.
    std::string slice_dir = "";
    // Called on the sampler's thread after each round with what it sampled, before the
    // round's exposition is rendered (e.g. to turn slices' refusals into events, or to act
    // on a slice over its quota); may be empty.
    std::function<void(const SampleSet&, const state::Snapshot&)> on_round = nullptr;
    // What holds the VRAM quotas of a GPU's containers: "driver" (the driver's own per-cgroup
    // limits, with the library reporting them), "library" (the enforcement library alone),
    // "none" (sharing.memorySlices.enforce false: accounting only) or "refused" (the library
    // is missing: sliced containers are refused); "" for a GPU without quotas. May be empty.
    std::function<std::string(const state::DeviceRecord&)> vram_holder = nullptr;
    // The flight recorder's latest fault on a GPU, for /status; nullopt when none. May be
    // empty.
    std::function<std::optional<state::FaultStatus>(const state::DeviceRecord&)> last_fault =
        nullptr;
    // The pods the eviction rung named for each GPU (GPU UUID → pods), for /status. May be
    // empty.
    std::function<std::map<std::string, std::vector<state::EvictionStatus>>()> evictions = nullptr;
    // The reset rung's word on each GPU (GPU UUID → status), for /status. May be empty.
    std::function<std::map<std::string, state::RungStatus>()> resets = nullptr;
    // The reboot rung's word on each GPU (GPU UUID → status), for /status. May be empty.
    std::function<std::map<std::string, state::RungStatus>()> reboots = nullptr;
  };

  // `library` may be null (NVML unavailable): only health and self series are exported.
  Sampler(gpu::GpuLibrary* library, const state::DeviceStore* store, const HostFs* host,
          Options options, RenderInfo info);
  ~Sampler();

  // Labels GPUs and processes with their pods from `pods` (may be null). Before Start.
  void AttributePodsWith(const PodAttributor* pods) { pods_ = pods; }

  // Samples every interval: at once, or one interval after a round SampleOnce already did.
  void Start();
  void Stop();
  void SampleOnce();  // one round + render

  // The latest exposition text; `openmetrics` selects the OpenMetrics variant.
  std::shared_ptr<const std::string> Exposition(bool openmetrics) const;
  std::shared_ptr<const SampleSet> Samples() const;

 private:
  void Render(const SampleSet& set);
  GpuSampleState::Process ReadProcess(unsigned pid) const;

  gpu::GpuLibrary* library_;
  const state::DeviceStore* store_;
  const HostFs* host_;
  Options options_;
  RenderInfo info_;
  const PodAttributor* pods_ = nullptr;
  std::unique_ptr<PeriodicWorker> worker_;  // Start/Stop only
  SampleSet working_;                       // sampler thread only
  mutable absl::Mutex mu_;
  std::shared_ptr<const std::string> text_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const std::string> openmetrics_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const SampleSet> samples_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::metrics

#endif  // GPULET_METRICS_SAMPLER_H_
