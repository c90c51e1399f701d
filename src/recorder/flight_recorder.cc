#include "recorder/flight_recorder.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "gpu/sample_values.h"
#include "metrics/exposition.h"

namespace gpulet::recorder {
namespace {

std::string Clip(std::string text) { return CutUtf8(std::move(text), kMaxEventText); }

std::string PodOf(const metrics::SampleSet& set, const std::string& uuid,
                  const metrics::GpuSampleState::Process& proc) {
  std::optional<metrics::PodContainer> pod = metrics::ProcessPod(set, uuid, proc);
  if (!pod) return "";
  return absl::StrCat(pod->namespace_name, "/", pod->pod, "/", pod->container);
}

std::string HealthText(const state::GpuHealth& h) {
  std::string text = state::HealthStateName(h.state);
  if (!h.reason.empty()) absl::StrAppend(&text, ": ", h.reason);
  if (!h.action.empty()) absl::StrAppend(&text, " (", h.action, ")");
  return text;
}

template <typename T>
std::optional<int64_t> Opt(const std::optional<T>& v) {
  if (!v) return std::nullopt;
  return static_cast<int64_t>(*v);
}

// The recorded columns that are rows of the value table (gpu/sample_values.h), and how each
// is kept in the recording's integer cells.
enum class Cell : uint8_t {
  kAsIs,
  kMilli,      // watts as milliwatts
  kMiB,        // bytes as whole MiB
  kLow31Bits,  // a bitmask's low 31 bits (the clocks event reasons NVML defines)
};
struct SampledColumn {
  Column column;
  gpu::ValueId value;
  Cell cell;
};
constexpr SampledColumn kSampledColumns[] = {
    {Column::kGpuTempC, gpu::ValueId::kGpuTemp, Cell::kAsIs},
    {Column::kMemTempC, gpu::ValueId::kMemTemp, Cell::kAsIs},
    {Column::kPowerMw, gpu::ValueId::kPower, Cell::kMilli},
    {Column::kPowerLimitMw, gpu::ValueId::kPowerLimit, Cell::kMilli},
    {Column::kSmClockMhz, gpu::ValueId::kSmClock, Cell::kAsIs},
    {Column::kMemClockMhz, gpu::ValueId::kMemClock, Cell::kAsIs},
    {Column::kThrottleReasons, gpu::ValueId::kClocksEventReasons, Cell::kLow31Bits},
    {Column::kGpuUtilPercent, gpu::ValueId::kGpuUtil, Cell::kAsIs},
    {Column::kFbUsedMib, gpu::ValueId::kFbUsed, Cell::kMiB},
    {Column::kPcieReplays, gpu::ValueId::kPcieReplays, Cell::kAsIs},
    {Column::kRemappedUncorrectable, gpu::ValueId::kRemappedUncorrectable, Cell::kAsIs},
    {Column::kEccSbe, gpu::ValueId::kEccSbeVolatile, Cell::kAsIs},
    {Column::kEccDbe, gpu::ValueId::kEccDbeVolatile, Cell::kAsIs},
};

std::optional<int64_t> CellOf(Cell cell, std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return std::nullopt;
  switch (cell) {
    case Cell::kMilli:
      return static_cast<int64_t>(std::llround(*v * 1000));
    case Cell::kMiB:
      return static_cast<int64_t>(static_cast<uint64_t>(*v) >> 20);
    case Cell::kLow31Bits:
      return static_cast<int64_t>(static_cast<uint64_t>(*v) & 0x7fffffff);
    case Cell::kAsIs:
      break;
  }
  return static_cast<int64_t>(*v);
}

}  // namespace

int64_t UnixMillis(absl::Time t) { return absl::ToUnixMillis(t); }

FlightRecorder::FlightRecorder(Options options) : options_(std::move(options)) {}

void FlightRecorder::Ring::Resize(size_t capacity) {
  if (capacity == items_.size()) return;
  std::vector<RecordedSample> kept;
  AppendTo(&kept);
  if (kept.size() > capacity) kept.erase(kept.begin(), kept.end() - static_cast<long>(capacity));
  std::vector<RecordedSample> items(capacity);
  std::copy(kept.begin(), kept.end(), items.begin());
  items_ = std::move(items);
  count_ = kept.size();
  next_ = capacity == 0 ? 0 : count_ % capacity;
}

std::optional<RecordedSample> FlightRecorder::Ring::Push(const RecordedSample& s) {
  if (items_.empty()) return s;
  std::optional<RecordedSample> out;
  if (count_ == items_.size()) {
    out = items_[next_];
  } else {
    ++count_;
  }
  items_[next_] = s;
  next_ = (next_ + 1) % items_.size();
  return out;
}

void FlightRecorder::Ring::AppendTo(std::vector<RecordedSample>* out) const {
  // The oldest is at next_ once full, at 0 while filling.
  const size_t start = count_ == items_.size() ? next_ : 0;
  for (size_t i = 0; i < count_; ++i) out->push_back(items_[(start + i) % items_.size()]);
}

void FlightRecorder::AddEventLocked(Gpu& gpu, RecordedEvent event) {
  event.text = Clip(std::move(event.text));
  event.pod = Clip(std::move(event.pod));
  // Events arrive from two threads; keep them in time order.
  auto at = std::upper_bound(gpu.events.begin(), gpu.events.end(), event.at_ms,
                             [](int64_t t, const RecordedEvent& e) { return t < e.at_ms; });
  gpu.events.insert(at, std::move(event));
  while (gpu.events.size() > kMaxEvents) gpu.events.pop_front();
}

std::vector<RecorderDump> FlightRecorder::Record(const metrics::SampleSet& set,
                                                 const state::Snapshot& snap,
                                                 const std::map<std::string, PciLinkReading>& pci,
                                                 absl::Duration window, absl::Duration interval,
                                                 absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::vector<RecorderDump> dumps;
  if (window <= absl::ZeroDuration() || interval <= absl::ZeroDuration()) {
    gpus_.clear();
    return dumps;
  }
  const absl::Duration fine_span = std::min(window, kFineSpan);
  const size_t fine = std::clamp<size_t>(
      static_cast<size_t>(std::ceil(absl::FDivDuration(fine_span, interval))), 1, kMaxSamples);
  const size_t coarse =
      window > kFineSpan
          ? std::min<size_t>(
                static_cast<size_t>(std::ceil(absl::FDivDuration(window - kFineSpan, kCoarseStep))),
                kMaxSamples)
          : 0;
  interval_ms_ = absl::ToInt64Milliseconds(interval);
  const int64_t now_ms = UnixMillis(now);
  for (const state::DeviceRecord& d : snap.devices) {
    const std::string key = d.gpu.uuid.empty() ? d.gpu.bus_id : d.gpu.uuid;
    if (key.empty()) continue;  // a GPU the ladder could not name is not recorded
    Gpu& g = gpus_[key];
    g.identity_name = d.gpu.name;
    g.bus_id = d.gpu.bus_id;
    g.index = d.gpu.index;
    g.state = state::HealthStateName(d.health.state);
    // A new window or interval keeps the newest samples that fit.
    g.fine.Resize(fine);
    g.coarse.Resize(coarse);
    if (coarse == 0) g.bucket.reset();
    if (!g.health && !g.answering && g.fine.size() == 0) {
      AddEventLocked(g, {.at_ms = now_ms,
                         .kind = EventKind::kRecorderStart,
                         .text = absl::StrCat("gpulet ", GPULET_VERSION, " recording; driver ",
                                              options_.driver_version)});
    }
    RecordedSample s;
    s.at_ms = now_ms;
    std::map<unsigned, std::string> processes;
    auto st = set.by_uuid.find(d.gpu.uuid);
    if (st != set.by_uuid.end() && st->second.last_attempt != absl::InfinitePast()) {
      const metrics::GpuSampleState& state = st->second;
      s.Set(Column::kAnswering, state.answering ? 1 : 0);
      s.Set(Column::kNvmlMs, static_cast<int64_t>(std::llround(state.call_seconds * 1000)));
      if (g.answering != state.answering) {
        if (!state.answering) {
          AddEventLocked(g, {.at_ms = now_ms,
                             .kind = EventKind::kNvmlError,
                             .text = absl::StrCat("NVML stopped answering: ", state.error),
                             .nvml_code = state.nvml_code});
        } else if (g.answering) {
          AddEventLocked(
              g, {.at_ms = now_ms, .kind = EventKind::kNvmlError, .text = "NVML answers again"});
        }
      }
      g.answering = state.answering;
      if (state.answering && state.last) {
        const gpu::DeviceSample& x = *state.last;
        for (const SampledColumn& c : kSampledColumns) {
          s.Set(c.column, CellOf(c.cell, gpu::ReadValue(gpu::Value(c.value), x)));
        }
        s.Set(Column::kProcesses, static_cast<int64_t>(x.processes.size()));
        for (const gpu::GpuProcess& p : x.processes) {
          auto proc = state.processes.find(p.pid);
          processes[p.pid] =
              proc == state.processes.end() ? "" : PodOf(set, d.gpu.uuid, proc->second);
          if (!g.processes.count(p.pid)) {
            std::string name = proc == state.processes.end() ? "" : proc->second.name;
            AddEventLocked(g, {.at_ms = now_ms,
                               .kind = EventKind::kProcessStart,
                               .pid = p.pid,
                               .pod = processes[p.pid],
                               .text = absl::StrCat("pid ", p.pid, " ", name, " started")});
          }
        }
        for (const auto& [pid, pod] : g.processes) {
          if (processes.count(pid)) continue;
          AddEventLocked(g, {.at_ms = now_ms,
                             .kind = EventKind::kProcessStop,
                             .pid = pid,
                             .pod = pod,
                             .text = absl::StrCat("pid ", pid, " left the GPU")});
        }
        g.processes = std::move(processes);
      }
    }
    if (auto link = pci.find(key); link != pci.end()) {
      s.Set(Column::kPcieLinkWidth, Opt(link->second.width));
      s.Set(Column::kPcieLinkMts, Opt(link->second.mts));
      s.Set(Column::kAerCorrectable, Opt(link->second.aer_correctable));
      s.Set(Column::kAerNonFatal, Opt(link->second.aer_nonfatal));
      s.Set(Column::kAerFatal, Opt(link->second.aer_fatal));
    }
    // A sample leaving the fine ring is folded into the coarse one.
    if (std::optional<RecordedSample> out = g.fine.Push(s); out && coarse > 0) {
      if (g.bucket && out->at_ms - g.bucket_start_ms >= absl::ToInt64Milliseconds(kCoarseStep)) {
        g.coarse.Push(*g.bucket);
        g.bucket.reset();
      }
      if (!g.bucket) {
        g.bucket = *out;
        g.bucket_start_ms = out->at_ms;
      } else {
        g.bucket->FoldIn(*out);
      }
    }
    if (g.health != d.health.state) {
      if (g.health || d.health.state != state::HealthState::kHealthy) {
        AddEventLocked(g,
                       {.at_ms = now_ms, .kind = EventKind::kHealth, .text = HealthText(d.health)});
      }
      // A GPU that goes out while gpulet watches is a fault; one already out when gpulet
      // started was dumped by the gpulet that saw it go.
      if (g.health && d.health.state == state::HealthState::kUnhealthy) {
        g.pending = {now_ms, HealthText(d.health)};
        g.pending_forced = true;
      }
      g.health = d.health.state;
    }
    const bool settled =
        g.pending && now_ms - g.pending->first >= absl::ToInt64Milliseconds(kXidSettle);
    if (g.pending && (g.pending_forced || (settled && now - g.last_xid_dump >= kXidDumpGap))) {
      dumps.push_back(DumpLocked(key, g, g.pending->first, g.pending->second));
      if (!g.pending_forced) g.last_xid_dump = now;
      g.pending.reset();
      g.pending_forced = false;
    }
  }
  return dumps;
}

void FlightRecorder::AddXid(const std::string& uuid, int xid, const std::string& text,
                            absl::Time at) {
  absl::MutexLock lock(&mu_);
  auto it = gpus_.find(uuid);
  if (it == gpus_.end()) return;  // not recording (off, or a GPU no round has seen)
  Gpu& g = it->second;
  const int64_t at_ms = UnixMillis(at);
  AddEventLocked(g, {.at_ms = at_ms, .kind = EventKind::kXid, .xid = xid, .text = text});
  if (!g.pending) g.pending = {at_ms, absl::StrCat("XID ", xid, ": ", Clip(text))};
}

RecorderDump FlightRecorder::DumpLocked(const std::string& uuid, const Gpu& g, int64_t fault_ms,
                                        const std::string& fault) const {
  RecorderDump d;
  d.uuid = uuid;
  d.name = g.identity_name;
  d.pci_bus_id = g.bus_id;
  d.index = g.index;
  d.node = options_.node;
  d.boot_id = options_.boot_id;
  d.driver_version = options_.driver_version;
  d.gpulet_version = GPULET_VERSION;
  d.fault_ms = fault_ms;
  d.fault = fault;
  d.health = g.state;
  d.interval_ms = interval_ms_;
  d.samples.reserve(g.coarse.size() + 1 + g.fine.size());
  g.coarse.AppendTo(&d.samples);
  if (g.bucket) d.samples.push_back(*g.bucket);
  g.fine.AppendTo(&d.samples);
  d.events.assign(g.events.begin(), g.events.end());
  return d;
}

std::optional<RecorderDump> FlightRecorder::Dump(const std::string& uuid, const std::string& fault,
                                                 absl::Time at) const {
  absl::MutexLock lock(&mu_);
  auto it = gpus_.find(uuid);
  if (it == gpus_.end()) return std::nullopt;
  return DumpLocked(uuid, it->second, UnixMillis(at), fault);
}

size_t FlightRecorder::MemoryBytes() const {
  absl::MutexLock lock(&mu_);
  size_t bytes = 0;
  for (const auto& [uuid, g] : gpus_) {
    bytes += g.fine.MemoryBytes() + g.coarse.MemoryBytes();
    for (const RecordedEvent& e : g.events) {
      bytes += sizeof(RecordedEvent) + e.text.capacity() + e.pod.capacity();
    }
  }
  return bytes;
}

}  // namespace gpulet::recorder
