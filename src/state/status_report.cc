#include "state/status_report.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/json_reader.h"

namespace gpulet::state {
namespace {

using nlohmann::json;

constexpr char kWhat[] = "a gpulet /status document";

// Reads typed fields out of one object of the document (common/json_reader's JsonFields, with
// the types the report holds). Fields this gpulet does not know are left alone: a newer daemon
// may add some, and `gpulet status` must still read the rest.
class StatusFields {
 public:
  StatusFields(const json& obj, std::string path) : f_(obj, kWhat, std::move(path)) {}

  std::string PathOf(absl::string_view key) const { return f_.PathOf(key); }

  absl::Status Read(absl::string_view key, bool* out) { return f_.Bool(key, out); }
  absl::Status Read(absl::string_view key, std::string* out) { return f_.String(key, out); }
  absl::Status Read(absl::string_view key, double* out) { return f_.Double(key, out); }
  absl::Status Read(absl::string_view key, int* out) { return f_.Int(key, out); }
  absl::Status Read(absl::string_view key, unsigned* out) {
    return f_.Int(key, out, 0u, std::numeric_limits<unsigned>::max(), Presence::kRequired,
                  "a non-negative integer");
  }
  absl::Status Read(absl::string_view key, uint64_t* out) {
    int64_t v = 0;
    absl::Status s = f_.Int64(key, 0, std::numeric_limits<int64_t>::max(), &v, Presence::kRequired,
                              "a non-negative integer");
    if (s.ok()) *out = static_cast<uint64_t>(v);
    return s;
  }
  absl::Status Read(absl::string_view key, HealthState* out) {
    std::string name;
    std::optional<HealthState> state;
    if (f_.Has(key) && f_.String(key, &name).ok()) state = ParseHealthState(name);
    if (!state) return f_.Unexpected(key, "Healthy, Degraded or Unhealthy");
    *out = *state;
    return absl::OkStatus();
  }
  absl::Status Read(absl::string_view key, absl::Time* out) {
    std::string text, err;
    if (!f_.Has(key) || !f_.String(key, &text).ok() ||
        !absl::ParseTime(absl::RFC3339_full, text, absl::UTCTimeZone(), out, &err)) {
      return f_.Unexpected(key, "an RFC 3339 time such as 2026-01-02T03:04:05Z");
    }
    return absl::OkStatus();
  }

  // The value when `key` is present; none when it is absent.
  template <typename T>
  absl::Status Optional(absl::string_view key, std::optional<T>* out) {
    out->reset();
    if (!f_.Has(key)) return absl::OkStatus();
    T value{};
    if (absl::Status s = Read(key, &value); !s.ok()) return s;
    *out = std::move(value);
    return absl::OkStatus();
  }

  // The list or object under `key`, or null when absent.
  absl::StatusOr<const json*> OptionalArray(absl::string_view key) {
    return f_.Array(key, Presence::kOptional);
  }
  absl::StatusOr<const json*> OptionalObject(absl::string_view key) {
    return f_.Object(key, Presence::kOptional);
  }

  // An error about `key` (a check made here).
  absl::Status Bad(absl::string_view key, absl::string_view why) const { return f_.Bad(key, why); }

 private:
  JsonFields f_;
};

#define GPULET_RETURN_IF_ERROR(expr) \
  do {                               \
    absl::Status _st = (expr);       \
    if (!_st.ok()) return _st;       \
  } while (false)

// A list of objects under `key`, each read by `parse` with its path ("gpus[0].processes[1]").
template <typename T, typename Parse>
absl::Status ReadList(StatusFields& r, absl::string_view key, Parse parse,
                      std::optional<std::vector<T>>* out) {
  absl::StatusOr<const json*> list = r.OptionalArray(key);
  if (!list.ok()) return list.status();
  if (*list == nullptr) return absl::OkStatus();
  out->emplace();
  for (size_t i = 0; i < (*list)->size(); ++i) {
    absl::StatusOr<T> item = parse((**list)[i], absl::StrCat(r.PathOf(key), "[", i, "]"));
    if (!item.ok()) return item.status();
    (*out)->push_back(*std::move(item));
  }
  return absl::OkStatus();
}

absl::StatusOr<AllocationStatus> AllocationFromJson(const json& j, const std::string& path) {
  StatusFields r(j, path);
  AllocationStatus a;
  GPULET_RETURN_IF_ERROR(r.Read("namespace", &a.namespace_name));
  GPULET_RETURN_IF_ERROR(r.Read("pod", &a.pod));
  GPULET_RETURN_IF_ERROR(r.Read("container", &a.container));
  GPULET_RETURN_IF_ERROR(r.Read("resource", &a.resource));
  GPULET_RETURN_IF_ERROR(r.Read("device_id", &a.device_id));
  return a;
}

absl::StatusOr<ProcessStatus> ProcessFromJson(const json& j, const std::string& path) {
  StatusFields r(j, path);
  ProcessStatus p;
  GPULET_RETURN_IF_ERROR(r.Read("pid", &p.pid));
  GPULET_RETURN_IF_ERROR(r.Optional("name", &p.name));
  GPULET_RETURN_IF_ERROR(r.Optional("namespace", &p.namespace_name));
  GPULET_RETURN_IF_ERROR(r.Optional("pod", &p.pod));
  GPULET_RETURN_IF_ERROR(r.Optional("container", &p.container));
  GPULET_RETURN_IF_ERROR(r.Optional("used_bytes", &p.used_bytes));
  return p;
}

absl::StatusOr<SliceStatus> SliceFromJson(const json& j, const std::string& path) {
  StatusFields r(j, path);
  SliceStatus s;
  GPULET_RETURN_IF_ERROR(r.Read("slice", &s.slice));
  GPULET_RETURN_IF_ERROR(r.Read("owner", &s.owner));
  GPULET_RETURN_IF_ERROR(r.Read("quota_bytes", &s.quota_bytes));
  GPULET_RETURN_IF_ERROR(r.Read("used_bytes", &s.used_bytes));
  GPULET_RETURN_IF_ERROR(r.Read("peak_bytes", &s.peak_bytes));
  GPULET_RETURN_IF_ERROR(r.Read("refused", &s.refused));
  GPULET_RETURN_IF_ERROR(r.Read("processes", &s.processes));
  GPULET_RETURN_IF_ERROR(r.Optional("device_used_bytes", &s.device_used_bytes));
  GPULET_RETURN_IF_ERROR(r.Optional("namespace", &s.namespace_name));
  GPULET_RETURN_IF_ERROR(r.Optional("pod", &s.pod));
  GPULET_RETURN_IF_ERROR(r.Optional("container", &s.container));
  return s;
}

absl::StatusOr<FaultStatus> FaultFromJson(const json& j, const std::string& path) {
  StatusFields r(j, path);
  FaultStatus f;
  GPULET_RETURN_IF_ERROR(r.Read("at", &f.at));
  GPULET_RETURN_IF_ERROR(r.Read("what", &f.what));
  GPULET_RETURN_IF_ERROR(r.Read("verdict", &f.verdict));
  GPULET_RETURN_IF_ERROR(r.Read("headline", &f.headline));
  std::optional<std::string> file;
  GPULET_RETURN_IF_ERROR(r.Optional("file", &file));
  f.file = file.value_or("");
  return f;
}

absl::StatusOr<EvictionStatus> EvictionFromJson(const json& j, const std::string& path) {
  StatusFields r(j, path);
  EvictionStatus e;
  GPULET_RETURN_IF_ERROR(r.Read("namespace", &e.namespace_name));
  GPULET_RETURN_IF_ERROR(r.Read("pod", &e.pod));
  GPULET_RETURN_IF_ERROR(r.Read("state", &e.state));
  GPULET_RETURN_IF_ERROR(r.Read("tries", &e.tries));
  std::optional<std::string> last;
  GPULET_RETURN_IF_ERROR(r.Optional("last", &last));
  e.last = last.value_or("");
  return e;
}

absl::StatusOr<RungStatus> RungFromJson(const json& j, const std::string& path) {
  StatusFields r(j, path);
  RungStatus e;
  GPULET_RETURN_IF_ERROR(r.Read("state", &e.state));
  GPULET_RETURN_IF_ERROR(r.Read("detail", &e.detail));
  GPULET_RETURN_IF_ERROR(r.Read("tries", &e.tries));
  return e;
}

absl::StatusOr<GpuStatus> GpuFromJson(const json& j, const std::string& path) {
  StatusFields r(j, path);
  GpuStatus g;
  GPULET_RETURN_IF_ERROR(r.Optional("index", &g.index));
  GPULET_RETURN_IF_ERROR(r.Read("uuid", &g.uuid));
  GPULET_RETURN_IF_ERROR(r.Read("name", &g.name));
  GPULET_RETURN_IF_ERROR(r.Read("pci_bus_id", &g.pci_bus_id));
  GPULET_RETURN_IF_ERROR(r.Read("health", &g.health));
  GPULET_RETURN_IF_ERROR(r.Optional("reason", &g.reason));
  GPULET_RETURN_IF_ERROR(r.Optional("action", &g.action));
  GPULET_RETURN_IF_ERROR(r.Optional("since", &g.since));
  GPULET_RETURN_IF_ERROR(r.Optional("last_xid", &g.last_xid));
  absl::StatusOr<const json*> counts = r.OptionalObject("xid_counts");
  if (!counts.ok()) return counts.status();
  if (*counts != nullptr) {
    StatusFields c(**counts, r.PathOf("xid_counts"));
    for (const auto& [code, count] : (*counts)->items()) {
      int xid = 0;
      if (!absl::SimpleAtoi(code, &xid)) return c.Bad(code, "is not an XID number");
      GPULET_RETURN_IF_ERROR(c.Read(code, &g.xid_counts[xid]));
    }
  }
  GPULET_RETURN_IF_ERROR(r.Optional("memory_total_bytes", &g.memory_total_bytes));
  GPULET_RETURN_IF_ERROR(ReadList(r, "allocations", AllocationFromJson, &g.allocations));
  GPULET_RETURN_IF_ERROR(r.Optional("answering", &g.answering));
  GPULET_RETURN_IF_ERROR(r.Optional("sample_error", &g.sample_error));
  GPULET_RETURN_IF_ERROR(r.Optional("sample_age_seconds", &g.sample_age_seconds));
  for (const gpu::SampleValue& row : gpu::SampleValues()) {
    if (row.status_key == nullptr) continue;
    GPULET_RETURN_IF_ERROR(std::visit(
        [&](auto m) -> absl::Status {
          if constexpr (gpu::StoredMember<decltype(m)>) {
            std::optional<typename gpu::MemberValue<decltype(m)>::type> v;
            GPULET_RETURN_IF_ERROR(r.Optional(row.status_key, &v));
            if (v) g.values[row.id] = static_cast<double>(*v);
          }
          return absl::OkStatus();
        },
        row.member));
  }
  GPULET_RETURN_IF_ERROR(ReadList(r, "processes", ProcessFromJson, &g.processes));
  GPULET_RETURN_IF_ERROR(ReadList(r, "vram_slices", SliceFromJson, &g.vram_slices));
  GPULET_RETURN_IF_ERROR(r.Optional("vram_enforcement", &g.vram_enforcement));
  absl::StatusOr<const json*> fault = r.OptionalObject("last_fault");
  if (!fault.ok()) return fault.status();
  if (*fault != nullptr) {
    absl::StatusOr<FaultStatus> f = FaultFromJson(**fault, r.PathOf("last_fault"));
    if (!f.ok()) return f.status();
    g.last_fault = *std::move(f);
  }
  GPULET_RETURN_IF_ERROR(ReadList(r, "evictions", EvictionFromJson, &g.evictions));
  for (auto [key, out] : {std::pair{"reset", &g.reset}, std::pair{"reboot", &g.reboot}}) {
    absl::StatusOr<const json*> rung = r.OptionalObject(key);
    if (!rung.ok()) return rung.status();
    if (*rung != nullptr) {
      absl::StatusOr<RungStatus> e = RungFromJson(**rung, r.PathOf(key));
      if (!e.ok()) return e.status();
      *out = *std::move(e);
    }
  }
  return g;
}

#undef GPULET_RETURN_IF_ERROR

json ProcessToJson(const ProcessStatus& p) {
  json j;
  j["pid"] = p.pid;
  if (p.name) j["name"] = *p.name;
  if (p.namespace_name) j["namespace"] = *p.namespace_name;
  if (p.pod) j["pod"] = *p.pod;
  if (p.container) j["container"] = *p.container;
  if (p.used_bytes) j["used_bytes"] = *p.used_bytes;
  return j;
}

json GpuToJson(const GpuStatus& g) {
  json j;
  if (g.index) j["index"] = *g.index;
  j["uuid"] = g.uuid;
  j["name"] = g.name;
  j["pci_bus_id"] = g.pci_bus_id;
  j["health"] = HealthStateName(g.health);
  if (g.reason) j["reason"] = *g.reason;
  if (g.action) j["action"] = *g.action;
  if (g.since) j["since"] = absl::FormatTime(absl::RFC3339_sec, *g.since, absl::UTCTimeZone());
  if (g.last_xid) j["last_xid"] = *g.last_xid;
  for (const auto& [code, count] : g.xid_counts) j["xid_counts"][absl::StrCat(code)] = count;
  if (g.memory_total_bytes) j["memory_total_bytes"] = *g.memory_total_bytes;
  if (g.allocations) {
    json holders = json::array();
    for (const AllocationStatus& a : *g.allocations) {
      holders.push_back({{"namespace", a.namespace_name},
                         {"pod", a.pod},
                         {"container", a.container},
                         {"resource", a.resource},
                         {"device_id", a.device_id}});
    }
    j["allocations"] = holders;
  }
  if (g.answering) j["answering"] = *g.answering;
  if (g.sample_error) j["sample_error"] = *g.sample_error;
  if (g.sample_age_seconds) j["sample_age_seconds"] = *g.sample_age_seconds;
  for (const auto& [id, value] : g.values) {
    const gpu::SampleValue& row = gpu::Value(id);
    if (row.status_key == nullptr) continue;
    if (gpu::IsIntegerValue(row)) {
      j[row.status_key] = static_cast<int64_t>(value);
    } else {
      j[row.status_key] = value;
    }
  }
  if (g.processes) {
    json procs = json::array();
    for (const ProcessStatus& p : *g.processes) procs.push_back(ProcessToJson(p));
    j["processes"] = procs;
  }
  if (g.vram_slices) {
    json slices = json::array();
    for (const SliceStatus& s : *g.vram_slices) {
      json one = {{"slice", s.slice},
                  {"owner", s.owner},
                  {"quota_bytes", s.quota_bytes},
                  {"used_bytes", s.used_bytes},
                  {"peak_bytes", s.peak_bytes},
                  {"refused", s.refused},
                  {"processes", s.processes}};
      if (s.device_used_bytes) one["device_used_bytes"] = *s.device_used_bytes;
      if (s.namespace_name) one["namespace"] = *s.namespace_name;
      if (s.pod) one["pod"] = *s.pod;
      if (s.container) one["container"] = *s.container;
      slices.push_back(one);
    }
    j["vram_slices"] = slices;
  }
  if (g.vram_enforcement) j["vram_enforcement"] = *g.vram_enforcement;
  if (g.last_fault) {
    const FaultStatus& f = *g.last_fault;
    json fault = {{"at", absl::FormatTime(absl::RFC3339_sec, f.at, absl::UTCTimeZone())},
                  {"what", f.what},
                  {"verdict", f.verdict},
                  {"headline", f.headline}};
    if (!f.file.empty()) fault["file"] = f.file;
    j["last_fault"] = std::move(fault);
  }
  if (g.evictions) {
    json evictions = json::array();
    for (const EvictionStatus& e : *g.evictions) {
      json one = {
          {"namespace", e.namespace_name}, {"pod", e.pod}, {"state", e.state}, {"tries", e.tries}};
      if (!e.last.empty()) one["last"] = e.last;
      evictions.push_back(std::move(one));
    }
    j["evictions"] = std::move(evictions);
  }
  for (auto [key, rung] : {std::pair{"reset", &g.reset}, std::pair{"reboot", &g.reboot}}) {
    if (*rung) {
      j[key] = {{"state", (*rung)->state}, {"detail", (*rung)->detail}, {"tries", (*rung)->tries}};
    }
  }
  return j;
}

}  // namespace

std::optional<double> GpuStatus::Value(gpu::ValueId id) const {
  auto it = values.find(id);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

std::optional<HealthState> ParseHealthState(absl::string_view name) {
  for (HealthState s : {HealthState::kHealthy, HealthState::kDegraded, HealthState::kUnhealthy}) {
    if (name == HealthStateName(s)) return s;
  }
  return std::nullopt;
}

json StatusReport::ToJson() const {
  json doc;
  doc["nvml_ok"] = nvml_ok;
  if (!nvml_ok) doc["nvml_error"] = nvml_error;
  doc["gpus"] = json::array();
  for (const GpuStatus& g : gpus) doc["gpus"].push_back(GpuToJson(g));
  return doc;
}

std::string StatusReport::ToJsonText() const { return ToJson().dump(2) + "\n"; }

absl::StatusOr<StatusReport> StatusReport::FromJson(const json& doc) {
  StatusFields r(doc, "");
  StatusReport report;
  if (absl::Status s = r.Read("nvml_ok", &report.nvml_ok); !s.ok()) return s;
  if (!report.nvml_ok) {
    std::optional<std::string> error;
    if (absl::Status s = r.Optional("nvml_error", &error); !s.ok()) return s;
    report.nvml_error = error.value_or("");
  }
  std::optional<std::vector<GpuStatus>> gpus;
  if (absl::Status s = ReadList(r, "gpus", GpuFromJson, &gpus); !s.ok()) return s;
  if (!gpus) return r.Bad("gpus", "is missing (a list)");
  report.gpus = *std::move(gpus);
  return report;
}

absl::StatusOr<StatusReport> StatusReport::FromJsonText(absl::string_view text) {
  absl::StatusOr<json> doc = ParseStrictJson(text, kWhat);
  if (!doc.ok()) return doc.status();
  return FromJson(*doc);
}

StatusReport StatusFromSnapshot(const Snapshot& snap) {
  StatusReport report;
  report.nvml_ok = snap.nvml_ok;
  if (!snap.nvml_ok) report.nvml_error = snap.nvml_error;
  for (const DeviceRecord& d : snap.devices) {
    GpuStatus g;
    g.index = d.gpu.index;
    g.uuid = d.gpu.uuid;
    g.name = d.gpu.name;
    g.pci_bus_id = d.gpu.bus_id;
    g.health = d.health.state;
    if (!d.health.reason.empty()) g.reason = d.health.reason;
    if (!d.health.action.empty()) g.action = d.health.action;
    if (d.health.since != absl::InfinitePast()) g.since = d.health.since;
    if (d.health.last_xid != 0) g.last_xid = d.health.last_xid;
    g.xid_counts = d.health.xid_counts;
    g.memory_total_bytes = d.gpu.memory_total_bytes;
    report.gpus.push_back(std::move(g));
  }
  return report;
}

}  // namespace gpulet::state
