#include "state/status_report.h"

#include <limits>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpulet {
namespace {

using nlohmann::json;

// Reads typed fields out of one JSON object, naming `path.key` in every error.
class ObjectReader {
 public:
  ObjectReader(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  std::string PathOf(absl::string_view key) const {
    return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
  }

  template <typename T>
  absl::Status Required(absl::string_view key, T* out) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) return absl::InvalidArgumentError(absl::StrCat(PathOf(key), ": missing"));
    return Convert(*it, PathOf(key), out);
  }

  template <typename T>
  absl::Status Optional(absl::string_view key, std::optional<T>* out) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) {
      out->reset();
      return absl::OkStatus();
    }
    T value{};
    if (absl::Status s = Convert(*it, PathOf(key), &value); !s.ok()) return s;
    *out = std::move(value);
    return absl::OkStatus();
  }

  // The array under `key`, or null when absent; an error when it is not an array.
  absl::StatusOr<const json*> OptionalArray(absl::string_view key) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) return nullptr;
    if (!it->is_array()) return Wrong(*it, PathOf(key), "an array");
    return &*it;
  }

  absl::StatusOr<const json*> OptionalObject(absl::string_view key) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) return nullptr;
    if (!it->is_object()) return Wrong(*it, PathOf(key), "an object");
    return &*it;
  }

  static absl::Status Wrong(const json& value, const std::string& path, absl::string_view want) {
    std::string shown = value.dump();
    if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected ", want, ", got ", shown));
  }

  static absl::Status Convert(const json& v, const std::string& path, bool* out) {
    if (!v.is_boolean()) return Wrong(v, path, "true or false");
    *out = v.get<bool>();
    return absl::OkStatus();
  }
  static absl::Status Convert(const json& v, const std::string& path, std::string* out) {
    if (!v.is_string()) return Wrong(v, path, "a string");
    *out = v.get<std::string>();
    return absl::OkStatus();
  }
  static absl::Status Convert(const json& v, const std::string& path, double* out) {
    if (!v.is_number()) return Wrong(v, path, "a number");
    *out = v.get<double>();
    return absl::OkStatus();
  }
  template <typename Int>
  static absl::Status ConvertInt(const json& v, const std::string& path, Int* out) {
    using Limits = std::numeric_limits<Int>;
    const char* want = std::is_signed_v<Int> ? "an integer" : "a non-negative integer";
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(Limits::max())) return Wrong(v, path, want);
      *out = static_cast<Int>(u);
      return absl::OkStatus();
    }
    if (v.is_number_integer()) {
      int64_t i = v.get<int64_t>();
      if (i < 0 && !std::is_signed_v<Int>) return Wrong(v, path, want);
      if constexpr (std::is_signed_v<Int>) {
        if (i < static_cast<int64_t>(Limits::min()) || i > static_cast<int64_t>(Limits::max())) {
          return Wrong(v, path, want);
        }
      }
      *out = static_cast<Int>(i);
      return absl::OkStatus();
    }
    return Wrong(v, path, want);
  }
  static absl::Status Convert(const json& v, const std::string& path, int* out) {
    return ConvertInt(v, path, out);
  }
  static absl::Status Convert(const json& v, const std::string& path, unsigned* out) {
    return ConvertInt(v, path, out);
  }
  static absl::Status Convert(const json& v, const std::string& path, uint64_t* out) {
    return ConvertInt(v, path, out);
  }
  static absl::Status Convert(const json& v, const std::string& path, HealthState* out) {
    std::optional<HealthState> state =
        v.is_string() ? ParseHealthState(v.get<std::string>()) : std::nullopt;
    if (!state) return Wrong(v, path, "Healthy, Degraded or Unhealthy");
    *out = *state;
    return absl::OkStatus();
  }
  static absl::Status Convert(const json& v, const std::string& path, absl::Time* out) {
    std::string err;
    if (!v.is_string() || !absl::ParseTime(absl::RFC3339_full, v.get<std::string>(),
                                           absl::UTCTimeZone(), out, &err)) {
      return Wrong(v, path, "an RFC 3339 time such as 2026-01-02T03:04:05Z");
    }
    return absl::OkStatus();
  }

 private:
  const json& obj_;
  std::string path_;
};

#define GPULET_RETURN_IF_ERROR(expr) \
  do {                               \
    absl::Status _st = (expr);       \
    if (!_st.ok()) return _st;       \
  } while (false)

absl::StatusOr<AllocationStatus> AllocationFromJson(const json& j, const std::string& path) {
  if (!j.is_object()) return ObjectReader::Wrong(j, path, "an object");
  ObjectReader r(j, path);
  AllocationStatus a;
  GPULET_RETURN_IF_ERROR(r.Required("namespace", &a.namespace_name));
  GPULET_RETURN_IF_ERROR(r.Required("pod", &a.pod));
  GPULET_RETURN_IF_ERROR(r.Required("container", &a.container));
  GPULET_RETURN_IF_ERROR(r.Required("resource", &a.resource));
  GPULET_RETURN_IF_ERROR(r.Required("device_id", &a.device_id));
  return a;
}

absl::StatusOr<ProcessStatus> ProcessFromJson(const json& j, const std::string& path) {
  if (!j.is_object()) return ObjectReader::Wrong(j, path, "an object");
  ObjectReader r(j, path);
  ProcessStatus p;
  GPULET_RETURN_IF_ERROR(r.Required("pid", &p.pid));
  GPULET_RETURN_IF_ERROR(r.Optional("name", &p.name));
  GPULET_RETURN_IF_ERROR(r.Optional("namespace", &p.namespace_name));
  GPULET_RETURN_IF_ERROR(r.Optional("pod", &p.pod));
  GPULET_RETURN_IF_ERROR(r.Optional("container", &p.container));
  GPULET_RETURN_IF_ERROR(r.Optional("used_bytes", &p.used_bytes));
  return p;
}

absl::StatusOr<SliceStatus> SliceFromJson(const json& j, const std::string& path) {
  if (!j.is_object()) return ObjectReader::Wrong(j, path, "an object");
  ObjectReader r(j, path);
  SliceStatus s;
  GPULET_RETURN_IF_ERROR(r.Required("slice", &s.slice));
  GPULET_RETURN_IF_ERROR(r.Required("owner", &s.owner));
  GPULET_RETURN_IF_ERROR(r.Required("quota_bytes", &s.quota_bytes));
  GPULET_RETURN_IF_ERROR(r.Required("used_bytes", &s.used_bytes));
  GPULET_RETURN_IF_ERROR(r.Required("peak_bytes", &s.peak_bytes));
  GPULET_RETURN_IF_ERROR(r.Required("refused", &s.refused));
  GPULET_RETURN_IF_ERROR(r.Required("processes", &s.processes));
  GPULET_RETURN_IF_ERROR(r.Optional("device_used_bytes", &s.device_used_bytes));
  GPULET_RETURN_IF_ERROR(r.Optional("namespace", &s.namespace_name));
  GPULET_RETURN_IF_ERROR(r.Optional("pod", &s.pod));
  GPULET_RETURN_IF_ERROR(r.Optional("container", &s.container));
  return s;
}

absl::StatusOr<FaultStatus> FaultFromJson(const json& j, const std::string& path) {
  if (!j.is_object()) return ObjectReader::Wrong(j, path, "an object");
  ObjectReader r(j, path);
  FaultStatus f;
  GPULET_RETURN_IF_ERROR(r.Required("at", &f.at));
  GPULET_RETURN_IF_ERROR(r.Required("what", &f.what));
  GPULET_RETURN_IF_ERROR(r.Required("verdict", &f.verdict));
  GPULET_RETURN_IF_ERROR(r.Required("headline", &f.headline));
  std::optional<std::string> file;
  GPULET_RETURN_IF_ERROR(r.Optional("file", &file));
  f.file = file.value_or("");
  return f;
}

absl::StatusOr<GpuStatus> GpuFromJson(const json& j, const std::string& path) {
  if (!j.is_object()) return ObjectReader::Wrong(j, path, "an object");
  ObjectReader r(j, path);
  GpuStatus g;
  GPULET_RETURN_IF_ERROR(r.Optional("index", &g.index));
  GPULET_RETURN_IF_ERROR(r.Required("uuid", &g.uuid));
  GPULET_RETURN_IF_ERROR(r.Required("name", &g.name));
  GPULET_RETURN_IF_ERROR(r.Required("pci_bus_id", &g.pci_bus_id));
  GPULET_RETURN_IF_ERROR(r.Required("health", &g.health));
  GPULET_RETURN_IF_ERROR(r.Optional("reason", &g.reason));
  GPULET_RETURN_IF_ERROR(r.Optional("action", &g.action));
  GPULET_RETURN_IF_ERROR(r.Optional("since", &g.since));
  GPULET_RETURN_IF_ERROR(r.Optional("last_xid", &g.last_xid));
  absl::StatusOr<const json*> counts = r.OptionalObject("xid_counts");
  if (!counts.ok()) return counts.status();
  if (*counts != nullptr) {
    for (const auto& [code, count] : (*counts)->items()) {
      std::string key_path = absl::StrCat(r.PathOf("xid_counts"), ".", code);
      int xid = 0;
      if (!absl::SimpleAtoi(code, &xid)) {
        return absl::InvalidArgumentError(
            absl::StrCat(key_path, ": expected an XID number as the key"));
      }
      GPULET_RETURN_IF_ERROR(ObjectReader::Convert(count, key_path, &g.xid_counts[xid]));
    }
  }
  GPULET_RETURN_IF_ERROR(r.Optional("memory_total_bytes", &g.memory_total_bytes));
  absl::StatusOr<const json*> allocations = r.OptionalArray("allocations");
  if (!allocations.ok()) return allocations.status();
  if (*allocations != nullptr) {
    g.allocations.emplace();
    for (size_t i = 0; i < (*allocations)->size(); ++i) {
      absl::StatusOr<AllocationStatus> a = AllocationFromJson(
          (**allocations)[i], absl::StrCat(r.PathOf("allocations"), "[", i, "]"));
      if (!a.ok()) return a.status();
      g.allocations->push_back(*std::move(a));
    }
  }
  GPULET_RETURN_IF_ERROR(r.Optional("answering", &g.answering));
  GPULET_RETURN_IF_ERROR(r.Optional("sample_error", &g.sample_error));
  GPULET_RETURN_IF_ERROR(r.Optional("sample_age_seconds", &g.sample_age_seconds));
  GPULET_RETURN_IF_ERROR(r.Optional("utilization_percent", &g.utilization_percent));
  GPULET_RETURN_IF_ERROR(r.Optional("memory_used_bytes", &g.memory_used_bytes));
  GPULET_RETURN_IF_ERROR(r.Optional("temperature_c", &g.temperature_c));
  GPULET_RETURN_IF_ERROR(r.Optional("power_w", &g.power_w));
  absl::StatusOr<const json*> processes = r.OptionalArray("processes");
  if (!processes.ok()) return processes.status();
  if (*processes != nullptr) {
    g.processes.emplace();
    for (size_t i = 0; i < (*processes)->size(); ++i) {
      absl::StatusOr<ProcessStatus> p =
          ProcessFromJson((**processes)[i], absl::StrCat(r.PathOf("processes"), "[", i, "]"));
      if (!p.ok()) return p.status();
      g.processes->push_back(*std::move(p));
    }
  }
  absl::StatusOr<const json*> slices = r.OptionalArray("vram_slices");
  if (!slices.ok()) return slices.status();
  if (*slices != nullptr) {
    g.vram_slices.emplace();
    for (size_t i = 0; i < (*slices)->size(); ++i) {
      absl::StatusOr<SliceStatus> s =
          SliceFromJson((**slices)[i], absl::StrCat(r.PathOf("vram_slices"), "[", i, "]"));
      if (!s.ok()) return s.status();
      g.vram_slices->push_back(*std::move(s));
    }
  }
  GPULET_RETURN_IF_ERROR(r.Optional("vram_enforcement", &g.vram_enforcement));
  absl::StatusOr<const json*> fault = r.OptionalObject("last_fault");
  if (!fault.ok()) return fault.status();
  if (*fault != nullptr) {
    absl::StatusOr<FaultStatus> f = FaultFromJson(**fault, r.PathOf("last_fault"));
    if (!f.ok()) return f.status();
    g.last_fault = *std::move(f);
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
  if (g.utilization_percent) j["utilization_percent"] = *g.utilization_percent;
  if (g.memory_used_bytes) j["memory_used_bytes"] = *g.memory_used_bytes;
  if (g.temperature_c) j["temperature_c"] = *g.temperature_c;
  if (g.power_w) j["power_w"] = *g.power_w;
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
  return j;
}

}  // namespace

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
  if (!doc.is_object()) return ObjectReader::Wrong(doc, "the /status document", "an object");
  ObjectReader r(doc, "");
  StatusReport report;
  if (absl::Status s = r.Required("nvml_ok", &report.nvml_ok); !s.ok()) return s;
  if (!report.nvml_ok) {
    std::optional<std::string> error;
    if (absl::Status s = r.Optional("nvml_error", &error); !s.ok()) return s;
    report.nvml_error = error.value_or("");
  }
  auto gpus = doc.find("gpus");
  if (gpus == doc.end()) return absl::InvalidArgumentError("gpus: missing");
  if (!gpus->is_array()) return ObjectReader::Wrong(*gpus, "gpus", "an array");
  for (size_t i = 0; i < gpus->size(); ++i) {
    absl::StatusOr<GpuStatus> g = GpuFromJson((*gpus)[i], absl::StrCat("gpus[", i, "]"));
    if (!g.ok()) return g.status();
    report.gpus.push_back(*std::move(g));
  }
  return report;
}

absl::StatusOr<StatusReport> StatusReport::FromJsonText(absl::string_view text) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("not JSON");
  return FromJson(doc);
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

}  // namespace gpulet
