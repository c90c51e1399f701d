#include "metrics/sampler.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpu/nvml_errors.h"
#include "metrics/exposition.h"
#include "node/device_holders.h"

namespace gpulet::metrics {

Sampler::Sampler(gpu::GpuLibrary* library, const state::DeviceStore* store, const HostFs* host,
                 Options options, RenderInfo info)
    : library_(library), store_(store), host_(host), options_(options), info_(std::move(info)) {
  Render(working_);
}

Sampler::~Sampler() { Stop(); }

void Sampler::Start() {
  if (worker_) return;
  worker_ = std::make_unique<PeriodicWorker>(
      // A round already done (the daemon samples once before it listens) is not repeated.
      PeriodicWorker::Options{.name = "gpulet-sampler",
                              .interval = options_.interval,
                              .clock = options_.clock,
                              .tick_at_start = Samples()->rounds == 0},
      [this] { SampleOnce(); });
  worker_->Start();
}

void Sampler::Stop() {
  if (worker_) worker_->Stop();
}

void Sampler::SampleOnce() {
  const MonoTime start = options_.clock->Monotonic();
  std::shared_ptr<const state::Snapshot> snap = store_->Get();
  if (library_ != nullptr) {
    for (const state::DeviceRecord& d : snap->devices) {
      if (!d.gpu.in_nvml || !d.gpu.index) continue;
      GpuSampleState& st = working_.by_uuid[d.gpu.uuid];
      st.last_attempt = options_.clock->Now();
      const MonoTime called = options_.clock->Monotonic();
      absl::StatusOr<gpu::DeviceSample> s = library_->Sample(*d.gpu.index, options_.timeout);
      st.call_seconds = absl::ToDoubleSeconds(options_.clock->Monotonic() - called);
      if (!s.ok()) {
        st.answering = false;
        st.error = std::string(s.status().message());
        st.nvml_code = gpu::NvmlCodeOf(s.status());
        ++working_.nvml_errors;
        continue;
      }
      st.answering = true;
      st.error.clear();
      st.nvml_code = -1;
      // Names and pods come from /proc under the host root, once per pid; dead pids go.
      std::map<unsigned, GpuSampleState::Process> processes;
      for (const gpu::GpuProcess& p : s->processes) {
        auto known = st.processes.find(p.pid);
        processes[p.pid] =
            known != st.processes.end() ? std::move(known->second) : ReadProcess(p.pid);
      }
      st.processes = std::move(processes);
      st.last = std::move(*s);
    }
  }
  if (pods_ != nullptr) working_.pods = pods_->Current();
  working_.slices = ReadSlices(options_.slice_dir);
  AttachDeviceUse(&working_);
  working_.vram_holders.clear();
  if (options_.vram_holder) {
    for (const state::DeviceRecord& d : snap->devices) {
      if (std::string holder = options_.vram_holder(d); !holder.empty()) {
        working_.vram_holders[d.gpu.uuid] = std::move(holder);
      }
    }
  }
  working_.last_faults.clear();
  if (options_.last_fault) {
    for (const state::DeviceRecord& d : snap->devices) {
      if (std::optional<state::FaultStatus> f = options_.last_fault(d))
        working_.last_faults[d.gpu.uuid] = *f;
    }
  }
  working_.evictions = options_.evictions
                           ? options_.evictions()
                           : std::map<std::string, std::vector<state::EvictionStatus>>();
  working_.resets =
      options_.resets ? options_.resets() : std::map<std::string, state::RungStatus>();
  working_.reboots =
      options_.reboots ? options_.reboots() : std::map<std::string, state::RungStatus>();
  working_.last_round_seconds = absl::ToDoubleSeconds(options_.clock->Monotonic() - start);
  ++working_.rounds;
  // What the round's callback did (a kill the guard made) is in this round's exposition.
  if (options_.on_round) options_.on_round(working_, *snap);
  Render(working_);
}

GpuSampleState::Process Sampler::ReadProcess(unsigned pid) const {
  GpuSampleState::Process out;
  if (host_ == nullptr) return out;
  std::string proc = absl::StrCat("/proc/", pid);
  absl::StatusOr<std::string> comm = host_->ReadAttribute(proc + "/comm");
  if (comm.ok()) out.name = *comm;
  absl::StatusOr<std::string> cgroup = host_->ReadFile(proc + "/cgroup");
  if (cgroup.ok()) out.cgroup = ParseCgroupPod(*cgroup);
  absl::StatusOr<std::string> stat = host_->ReadFile(proc + "/stat");
  if (stat.ok()) out.start_ticks = ProcStartTicks(*stat);
  return out;
}

std::optional<uint64_t> ProcStartTicks(absl::string_view stat) {
  return node::ProcStatField(stat, 22);  // starttime
}

void AttachDeviceUse(SampleSet* set) {
  for (SliceSample& slice : set->slices) {
    slice.device.reset();
    auto gpu = set->by_uuid.find(slice.usage.gpu_uuid);
    if (gpu == set->by_uuid.end() || !gpu->second.answering || !gpu->second.last) continue;
    const GpuSampleState& st = gpu->second;
    std::optional<PodContainer> holder = SliceHolder(slice, set->pods.get());
    SliceDeviceUse use;
    auto process_of = [&](unsigned pid) -> SliceDeviceUse::Process& {
      for (SliceDeviceUse::Process& p : use.processes) {
        if (p.pid == pid) return p;
      }
      SliceDeviceUse::Process& p = use.processes.emplace_back();
      p.pid = pid;
      if (auto known = st.processes.find(pid); known != st.processes.end()) {
        p.name = known->second.name;
        p.start_ticks = known->second.start_ticks;
      }
      return p;
    };
    for (const vram::SliceUsage::Process& p : slice.usage.processes) {
      if (p.pid <= 0) continue;  // its holder is in a PID namespace this one cannot see
      SliceDeviceUse::Process& mine = process_of(static_cast<unsigned>(p.pid));
      mine.in_slice = true;
      mine.library_bytes = p.used_bytes;
    }
    for (const gpu::GpuProcess& p : st.last->processes) {
      bool counted = false;
      for (const SliceDeviceUse::Process& mine : use.processes) counted |= mine.pid == p.pid;
      if (!counted && holder && set->pods != nullptr) {
        // Not in the slice file: the container's all the same when attribution says so.
        auto known = st.processes.find(p.pid);
        counted =
            known != st.processes.end() && known->second.cgroup &&
            AttributeProcess(*set->pods, slice.usage.gpu_uuid, *known->second.cgroup) == holder;
      }
      if (counted) {
        SliceDeviceUse::Process& mine = process_of(p.pid);
        mine.driver_bytes = p.used_bytes.value_or(0);
        mine.sm_percent = p.sm_percent;
      }
    }
    for (const SliceDeviceUse::Process& p : use.processes) {
      use.used_bytes += std::max(p.driver_bytes, p.library_bytes);
    }
    slice.device = std::move(use);
  }
}

void Sampler::Render(const SampleSet& set) {
  std::shared_ptr<const state::Snapshot> snap = store_->Get();
  absl::Time now = options_.clock->Now();
  auto text = std::make_shared<const std::string>(RenderMetrics(*snap, set, info_, false, now));
  auto om = std::make_shared<const std::string>(RenderMetrics(*snap, set, info_, true, now));
  auto copy = std::make_shared<const SampleSet>(set);
  absl::MutexLock lock(&mu_);
  text_ = std::move(text);
  openmetrics_ = std::move(om);
  samples_ = std::move(copy);
}

std::shared_ptr<const std::string> Sampler::Exposition(bool openmetrics) const {
  absl::MutexLock lock(&mu_);
  return openmetrics ? openmetrics_ : text_;
}

std::shared_ptr<const SampleSet> Sampler::Samples() const {
  absl::MutexLock lock(&mu_);
  return samples_;
}

}  // namespace gpulet::metrics
