#include "metrics/metrics_server.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "gpu/sample_values.h"
#include "metrics/exposition.h"
#include "state/status_report.h"

namespace gpulet::metrics {

namespace {

// A plain-text answer that lives as long as the process (responses share it).
std::shared_ptr<const std::string> Constant(const char* text) {
  return std::make_shared<const std::string>(text);
}

// The cache slots (http::Response::cache_slot): the exposition by format, and /healthz's
// answer, each served from a response built once (a probe costs no allocation).
constexpr int kTextSlot = 0;
constexpr int kOpenMetricsSlot = 1;
constexpr int kHealthzSlot = 2;
constexpr int kSlots = 3;

}  // namespace

std::string MetricsServer::StatusJson(const state::Snapshot& snap, const SampleSet& samples) {
  return StatusJson(snap, samples, RealClock()->Now());
}

std::string MetricsServer::StatusJson(const state::Snapshot& snap, const SampleSet& samples,
                                      absl::Time now) {
  // The store's part comes from StatusFromSnapshot; the sampler and pod attribution add
  // theirs here. The wire format is StatusReport's (state/status_report.h).
  state::StatusReport report = state::StatusFromSnapshot(snap);
  for (size_t i = 0; i < snap.devices.size(); ++i) {
    const state::DeviceRecord& d = snap.devices[i];
    state::GpuStatus& g = report.gpus[i];
    if (samples.pods != nullptr) {
      g.allocations.emplace();
      auto held = samples.pods->by_gpu.find(d.gpu.uuid);
      if (held != samples.pods->by_gpu.end()) {
        for (const GpuAssignment& a : held->second) {
          g.allocations->push_back(
              {a.holder.namespace_name, a.holder.pod, a.holder.container, a.resource, a.device_id});
        }
      }
    }
    for (const SliceSample& slice : samples.slices) {
      if (slice.usage.gpu_uuid != d.gpu.uuid) continue;
      state::SliceStatus s;
      s.slice = slice.name;
      s.owner = slice.usage.owner;
      s.quota_bytes = slice.usage.quota_bytes;
      s.used_bytes = slice.usage.in_use_bytes;
      s.peak_bytes = slice.usage.peak_bytes;
      s.refused = slice.usage.refused;
      s.processes = static_cast<unsigned>(slice.usage.processes.size());
      if (slice.device) s.device_used_bytes = slice.device->used_bytes;
      if (std::optional<PodContainer> who = SliceHolder(slice, samples.pods.get())) {
        s.namespace_name = who->namespace_name;
        s.pod = who->pod;
        s.container = who->container;
      }
      if (!g.vram_slices) g.vram_slices.emplace();
      g.vram_slices->push_back(std::move(s));
    }
    if (auto holder = samples.vram_holders.find(d.gpu.uuid); holder != samples.vram_holders.end()) {
      g.vram_enforcement = holder->second;
    }
    if (auto fault = samples.last_faults.find(d.gpu.uuid); fault != samples.last_faults.end()) {
      g.last_fault = fault->second;
    }
    if (auto e = samples.evictions.find(d.gpu.uuid); e != samples.evictions.end()) {
      g.evictions = e->second;
    }
    if (auto r = samples.resets.find(d.gpu.uuid); r != samples.resets.end()) g.reset = r->second;
    if (auto r = samples.reboots.find(d.gpu.uuid); r != samples.reboots.end()) g.reboot = r->second;
    auto it = samples.by_uuid.find(d.gpu.uuid);
    if (it == samples.by_uuid.end()) continue;
    const GpuSampleState& st = it->second;
    g.answering = st.answering;
    if (!st.error.empty()) g.sample_error = st.error;
    if (!st.last) continue;
    const gpu::DeviceSample& s = *st.last;
    g.sample_age_seconds = absl::ToDoubleSeconds(now - s.taken);
    if (!st.answering) continue;
    for (const gpu::SampleValue& row : gpu::SampleValues()) {
      if (row.status_key == nullptr) continue;
      if (std::optional<double> v = gpu::ReadValue(row, s)) g.values[row.id] = *v;
    }
    g.processes.emplace();
    for (const gpu::GpuProcess& p : s.processes) {
      state::ProcessStatus ps;
      ps.pid = p.pid;
      auto proc = st.processes.find(p.pid);
      if (proc != st.processes.end()) {
        ps.name = proc->second.name;
        std::optional<PodContainer> pod = ProcessPod(samples, d.gpu.uuid, proc->second);
        if (pod) {
          ps.namespace_name = pod->namespace_name;
          ps.pod = pod->pod;
          ps.container = pod->container;
        }
      }
      ps.used_bytes = p.used_bytes;
      g.processes->push_back(std::move(ps));
    }
  }
  return report.ToJsonText();
}

MetricsServer::MetricsServer(const Sampler* sampler, const state::DeviceStore* store,
                             http::WebConfig web, const Clock* clock, http::Limits limits)
    : sampler_(sampler),
      store_(store),
      clock_(clock),
      server_([this](const http::Request& r) { return Serve(r); },
              http::Options{.name = "metrics server",
                            .address_flag = "--metrics-address",
                            .limits = limits,
                            .web = std::move(web),
                            .open_paths = {"/healthz"},
                            .cache_slots = kSlots}) {}

MetricsServer::~MetricsServer() { Stop(); }

absl::Status MetricsServer::Start(const std::string& address, const MetricsServer* beside) {
  return server_.Start(address, beside != nullptr ? &beside->server_ : nullptr);
}

void MetricsServer::Stop() { server_.Stop(); }

http::Response MetricsServer::Serve(const http::Request& request) const {
  static const std::shared_ptr<const std::string> kOk = Constant("ok\n");
  static const std::shared_ptr<const std::string> kNotFound =
      Constant("not found: gpulet serves /metrics, /healthz, /status\n");
  http::Response r;
  if (request.path == "/healthz") {
    r.body = kOk;
    r.cache_slot = kHealthzSlot;
    return r;
  }
  if (request.path == "/metrics") {
    // Made once per sampler round: the server keeps its responses until the text changes.
    bool om = absl::StrContains(request.accept, "application/openmetrics-text");
    r.body = sampler_->Exposition(om);
    r.content_type = om ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                        : "text/plain; version=0.0.4; charset=utf-8";
    r.compress = true;
    r.cache_slot = om ? kOpenMetricsSlot : kTextSlot;
    return r;
  }
  if (request.path == "/status") {
    r.body = std::make_shared<const std::string>(
        StatusJson(*store_->Get(), *sampler_->Samples(), clock_->Now()));
    r.content_type = "application/json";
    r.compress = true;
    return r;
  }
  r.status = 404;
  r.body = kNotFound;
  return r;
}

}  // namespace gpulet::metrics
