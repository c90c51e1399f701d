#include "metrics/sampler.h"

#include "absl/strings/str_cat.h"
#include "metrics/exposition.h"

namespace gpulet {

Sampler::Sampler(GpuLibrary* library, const DeviceStore* store, const HostFs* host, Options options,
                 RenderInfo info)
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
  std::shared_ptr<const Snapshot> snap = store_->Get();
  if (library_ != nullptr) {
    for (const DeviceRecord& d : snap->devices) {
      if (!d.gpu.in_nvml || !d.gpu.index) continue;
      GpuSampleState& st = working_.by_uuid[d.gpu.uuid];
      st.last_attempt = options_.clock->Now();
      absl::StatusOr<DeviceSample> s = library_->Sample(*d.gpu.index, options_.timeout);
      if (!s.ok()) {
        st.answering = false;
        st.error = std::string(s.status().message());
        ++working_.nvml_errors;
        continue;
      }
      st.answering = true;
      st.error.clear();
      // Names and pods come from /proc under the host root, once per pid; dead pids go.
      std::map<unsigned, GpuSampleState::Process> processes;
      for (const GpuProcess& p : s->processes) {
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
  working_.last_round_seconds = absl::ToDoubleSeconds(options_.clock->Monotonic() - start);
  ++working_.rounds;
  Render(working_);
  if (options_.on_round) options_.on_round(working_, *snap);
}

GpuSampleState::Process Sampler::ReadProcess(unsigned pid) const {
  GpuSampleState::Process out;
  if (host_ == nullptr) return out;
  std::string proc = absl::StrCat("/proc/", pid);
  absl::StatusOr<std::string> comm = host_->ReadAttribute(proc + "/comm");
  if (comm.ok()) out.name = *comm;
  absl::StatusOr<std::string> cgroup = host_->ReadFile(proc + "/cgroup");
  if (cgroup.ok()) out.cgroup = ParseCgroupPod(*cgroup);
  return out;
}

void Sampler::Render(const SampleSet& set) {
  std::shared_ptr<const Snapshot> snap = store_->Get();
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

}  // namespace gpulet
