#include "sim/state.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "gpu/nvml_api.h"
#include "sim/file_io.h"

namespace gpulet::sim {
namespace {

using nlohmann::json;

constexpr int kFormatVersion = 1;
// A state file is a few hundred bytes; anything this large is not ours.
constexpr size_t kMaxStateFileBytes = 4 << 20;
constexpr unsigned kMaxGpuIndex = 1024;

// Field tables so the JSON reader, the writer and the merge cannot drift apart.
struct UintField {
  const char* name;
  std::optional<unsigned> LoadOverride::*member;
};
struct Uint64Field {
  const char* name;
  std::optional<uint64_t> LoadOverride::*member;
};
constexpr UintField kLoadUintFields[] = {
    {"utilization_gpu", &LoadOverride::utilization_gpu},
    {"utilization_memory", &LoadOverride::utilization_memory},
    {"temperature_c", &LoadOverride::temperature_c},
    {"memory_temperature_c", &LoadOverride::memory_temperature_c},
    {"fan_percent", &LoadOverride::fan_percent},
    {"pstate", &LoadOverride::pstate},
    {"pcie_replay", &LoadOverride::pcie_replay},
    {"encoder_utilization", &LoadOverride::encoder_utilization},
    {"decoder_utilization", &LoadOverride::decoder_utilization},
    {"graphics_clock_mhz", &LoadOverride::graphics_clock_mhz},
    {"sm_clock_mhz", &LoadOverride::sm_clock_mhz},
    {"memory_clock_mhz", &LoadOverride::memory_clock_mhz},
    {"video_clock_mhz", &LoadOverride::video_clock_mhz},
};
constexpr Uint64Field kLoadUint64Fields[] = {
    {"memory_used_mib", &LoadOverride::memory_used_mib},
    {"clocks_event_reasons", &LoadOverride::clocks_event_reasons},
};
constexpr const char* kPowerField = "power_w";
constexpr const char* kGpmField = "gpm";

constexpr GpmMetric kGpmMetrics[] = {
    {"graphics_util", NVML_GPM_METRIC_GRAPHICS_UTIL, true, "Graphics engine utilization"},
    {"sm_util", NVML_GPM_METRIC_SM_UTIL, true, "SM utilization"},
    {"sm_occupancy", NVML_GPM_METRIC_SM_OCCUPANCY, true, "SM occupancy"},
    {"integer_util", NVML_GPM_METRIC_INTEGER_UTIL, true, "Integer pipe utilization"},
    {"any_tensor_util", NVML_GPM_METRIC_ANY_TENSOR_UTIL, true, "Tensor (any) utilization"},
    {"dfma_tensor_util", NVML_GPM_METRIC_DFMA_TENSOR_UTIL, true, "Tensor (DFMA) utilization"},
    {"hmma_tensor_util", NVML_GPM_METRIC_HMMA_TENSOR_UTIL, true, "Tensor (HMMA) utilization"},
    {"imma_tensor_util", NVML_GPM_METRIC_IMMA_TENSOR_UTIL, true, "Tensor (IMMA) utilization"},
    {"dram_bw_util", NVML_GPM_METRIC_DRAM_BW_UTIL, true, "DRAM bandwidth utilization"},
    {"fp64_util", NVML_GPM_METRIC_FP64_UTIL, true, "FP64 pipe utilization"},
    {"fp32_util", NVML_GPM_METRIC_FP32_UTIL, true, "FP32 pipe utilization"},
    {"fp16_util", NVML_GPM_METRIC_FP16_UTIL, true, "FP16 pipe utilization"},
    {"pcie_tx_mib_s", NVML_GPM_METRIC_PCIE_TX_PER_SEC, false, "PCIe transmit rate"},
    {"pcie_rx_mib_s", NVML_GPM_METRIC_PCIE_RX_PER_SEC, false, "PCIe receive rate"},
    {"nvlink_total_rx_mib_s", NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, false,
     "NVLink total receive rate"},
    {"nvlink_total_tx_mib_s", NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, false,
     "NVLink total transmit rate"},
};
static_assert(kNvLinkCounterNames.size() == 4 && NVML_NVLINK_ERROR_DL_CRC_DATA == 3,
              "kNvLinkCounterNames is indexed by nvmlNvLinkErrorCounter_t");
static_assert(kMaxNvLinks == NVML_NVLINK_MAX_LINKS);

void SetError(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
}

// --- strict JSON reading -------------------------------------------------------------------
// Each reader leaves its output untouched when the key is absent and fails on a wrong type.

bool CheckObject(const json& j, const std::string& where, std::string* error) {
  if (j.is_object()) return true;
  SetError(error, where + ": expected an object");
  return false;
}

bool CheckKeys(const json& obj, std::initializer_list<std::string_view> allowed,
               const std::string& where, std::string* error) {
  for (const auto& item : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), item.key()) == allowed.end()) {
      SetError(error, where + ": unknown key \"" + item.key() + "\"");
      return false;
    }
  }
  return true;
}

bool ReadBool(const json& obj, const char* key, const std::string& where, bool* out,
              std::string* error) {
  auto it = obj.find(key);
  if (it == obj.end()) return true;
  if (!it->is_boolean()) {
    SetError(error, where + "." + key + ": expected true or false");
    return false;
  }
  *out = it->get<bool>();
  return true;
}

bool ReadUint64(const json& obj, const char* key, const std::string& where, uint64_t max,
                uint64_t* out, std::string* error) {
  auto it = obj.find(key);
  if (it == obj.end()) return true;
  bool ok = false;
  uint64_t value = 0;
  if (it->is_number_unsigned()) {
    value = it->get<uint64_t>();
    ok = true;
  } else if (it->is_number_integer() && it->get<int64_t>() >= 0) {
    value = static_cast<uint64_t>(it->get<int64_t>());
    ok = true;
  }
  if (!ok || value > max) {
    SetError(error, where + "." + key + ": expected an integer from 0 to " + std::to_string(max));
    return false;
  }
  *out = value;
  return true;
}

template <typename T>
bool ReadUint(const json& obj, const char* key, const std::string& where, T* out,
              std::string* error) {
  uint64_t value = *out;
  if (!ReadUint64(obj, key, where, std::numeric_limits<T>::max(), &value, error)) return false;
  *out = static_cast<T>(value);
  return true;
}

template <typename T>
bool ReadOptionalUint(const json& obj, const char* key, const std::string& where,
                      std::optional<T>* out, std::string* error) {
  if (!obj.contains(key)) return true;
  T value = 0;
  if (!ReadUint(obj, key, where, &value, error)) return false;
  *out = value;
  return true;
}

bool ReadSeconds(const json& obj, const char* key, const std::string& where, double* out,
                 std::string* error) {
  auto it = obj.find(key);
  if (it == obj.end()) return true;
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0) {
    SetError(error, where + "." + key + ": expected a number >= 0");
    return false;
  }
  *out = it->get<double>();
  return true;
}

bool ReadString(const json& obj, const char* key, const std::string& where, std::string* out,
                std::string* error) {
  auto it = obj.find(key);
  if (it == obj.end()) return true;
  if (!it->is_string()) {
    SetError(error, where + "." + key + ": expected a string");
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

// `{"sm_util": 50, ...}`: GPM metric names with values in their ranges.
bool ReadGpmMap(const json& j, const std::string& where, std::map<std::string, double>* out,
                std::string* error) {
  if (!CheckObject(j, where, error)) return false;
  for (const auto& item : j.items()) {
    const GpmMetric* metric = FindGpmMetric(item.key());
    if (metric == nullptr) {
      SetError(error,
               where + ": unknown metric \"" + item.key() + "\" (known: " + GpmMetricNames() + ")");
      return false;
    }
    if (!item.value().is_number() || !GpmValueInRange(*metric, item.value().get<double>())) {
      SetError(error, where + "." + item.key() +
                          (metric->percent ? ": expected a percentage from 0 to 100"
                                           : ": expected a rate in MiB/s, >= 0"));
      return false;
    }
    (*out)[item.key()] = item.value().get<double>();
  }
  return true;
}

bool ReadMig(const json& j, const std::string& where, MigOverride* out, std::string* error) {
  if (!CheckObject(j, where, error) || !CheckKeys(j, {"mode", "instances"}, where, error)) {
    return false;
  }
  std::string mode = "disabled";
  if (!ReadString(j, "mode", where, &mode, error)) return false;
  if (mode != "enabled" && mode != "disabled") {
    SetError(error, where + ".mode: expected \"enabled\" or \"disabled\"");
    return false;
  }
  out->enabled = mode == "enabled";
  if (auto it = j.find("instances"); it != j.end()) {
    if (!it->is_array()) {
      SetError(error, where + ".instances: expected a list");
      return false;
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string w = where + ".instances[" + std::to_string(i) + "]";
      const json& m = (*it)[i];
      MigInstance instance;
      if (!CheckObject(m, w, error) ||
          !CheckKeys(m, {"gpu_instance", "compute_instance", "profile", "placement", "uuid", "gpm"},
                     w, error) ||
          !ReadUint(m, "gpu_instance", w, &instance.gpu_instance, error) ||
          !ReadUint(m, "compute_instance", w, &instance.compute_instance, error) ||
          !ReadString(m, "profile", w, &instance.profile, error) ||
          !ReadUint(m, "placement", w, &instance.placement, error) ||
          !ReadString(m, "uuid", w, &instance.uuid, error)) {
        return false;
      }
      if (!m.contains("gpu_instance") || !m.contains("profile") || !m.contains("placement") ||
          !m.contains("uuid")) {
        SetError(error, w + ": needs gpu_instance, profile, placement and uuid");
        return false;
      }
      if (auto g = m.find("gpm"); g != m.end()) {
        instance.gpm.emplace();
        if (!ReadGpmMap(*g, w + ".gpm", &*instance.gpm, error)) return false;
      }
      out->instances.push_back(std::move(instance));
    }
  }
  return true;
}

bool ReadLoad(const json& j, const std::string& where, LoadOverride* out, std::string* error) {
  if (!CheckObject(j, where, error)) return false;
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    bool known = key == kPowerField || key == kGpmField;
    for (const auto& f : kLoadUintFields) known = known || key == f.name;
    for (const auto& f : kLoadUint64Fields) known = known || key == f.name;
    if (!known) {
      SetError(error, where + ": unknown key \"" + key + "\"");
      return false;
    }
  }
  for (const auto& f : kLoadUintFields) {
    if (!ReadOptionalUint(j, f.name, where, &(out->*f.member), error)) return false;
  }
  for (const auto& f : kLoadUint64Fields) {
    if (!ReadOptionalUint(j, f.name, where, &(out->*f.member), error)) return false;
  }
  if (j.contains(kPowerField)) {
    double watts = 0;
    if (!ReadSeconds(j, kPowerField, where, &watts, error)) return false;
    out->power_w = watts;
  }
  if (out->pstate.has_value() && *out->pstate > 15) {
    SetError(error, where + ".pstate: expected 0 to 15");
    return false;
  }
  if (auto it = j.find(kGpmField); it != j.end()) {
    if (!ReadGpmMap(*it, where + "." + kGpmField, &out->gpm, error)) return false;
  }
  return true;
}

// A link number as a JSON key or list entry: canonical decimal below kMaxNvLinks.
bool ParseLinkKey(std::string_view text, unsigned* link) {
  if (text.empty() || text.size() > 2 || (text.size() > 1 && text[0] == '0')) return false;
  unsigned value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value >= kMaxNvLinks) return false;
  *link = value;
  return true;
}

bool ReadNvLink(const json& j, const std::string& where, NvLinkOverride* out, std::string* error) {
  if (!CheckObject(j, where, error) || !CheckKeys(j, {"down", "errors"}, where, error)) {
    return false;
  }
  const std::string link_range = "a link number from 0 to " + std::to_string(kMaxNvLinks - 1);
  if (auto it = j.find("down"); it != j.end()) {
    if (!it->is_array()) {
      SetError(error, where + ".down: expected a list of link numbers");
      return false;
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const json& link = (*it)[i];
      if (!link.is_number_unsigned() || link.get<uint64_t>() >= kMaxNvLinks) {
        SetError(error, where + ".down[" + std::to_string(i) + "]: expected " + link_range);
        return false;
      }
      out->down.insert(static_cast<unsigned>(link.get<uint64_t>()));
    }
  }
  if (auto it = j.find("errors"); it != j.end()) {
    const std::string w = where + ".errors";
    if (!CheckObject(*it, w, error)) return false;
    for (const auto& item : it->items()) {
      const std::string lw = w + "[\"" + item.key() + "\"]";
      unsigned link = 0;
      if (!ParseLinkKey(item.key(), &link)) {
        SetError(error, lw + ": key must be " + link_range);
        return false;
      }
      if (!CheckObject(item.value(), lw, error) ||
          !CheckKeys(item.value(), {"replay", "recovery", "crc_flit", "crc_data"}, lw, error)) {
        return false;
      }
      NvLinkCounters& counters = out->errors[link];
      for (size_t c = 0; c < kNvLinkCounterNames.size(); ++c) {
        const std::string name(kNvLinkCounterNames[c]);
        if (!ReadOptionalUint(item.value(), name.c_str(), lw, &counters[c], error)) return false;
      }
    }
  }
  return true;
}

bool ReadProcess(const json& j, const std::string& where, SimProcess* out, std::string* error) {
  if (!CheckObject(j, where, error) ||
      !CheckKeys(j,
                 {"pid", "name", "used_mib", "type", "gpu_instance", "compute_instance", "sm_util"},
                 where, error) ||
      !ReadOptionalUint(j, "gpu_instance", where, &out->gpu_instance, error) ||
      !ReadOptionalUint(j, "compute_instance", where, &out->compute_instance, error)) {
    return false;
  }
  if (out->compute_instance.has_value() && !out->gpu_instance.has_value()) {
    SetError(error, where + ": compute_instance needs gpu_instance");
    return false;
  }
  if (!j.contains("pid")) {
    SetError(error, where + ": missing \"pid\"");
    return false;
  }
  if (auto it = j.find("sm_util"); it != j.end()) {
    uint64_t sm_util = 0;
    if (!ReadUint64(j, "sm_util", where, 100, &sm_util, error)) return false;
    out->sm_util = static_cast<unsigned>(sm_util);
  }
  std::string type = "compute";
  if (!ReadUint(j, "pid", where, &out->pid, error) ||
      !ReadString(j, "name", where, &out->name, error) ||
      !ReadUint(j, "used_mib", where, &out->used_mib, error) ||
      !ReadString(j, "type", where, &type, error)) {
    return false;
  }
  if (type == "compute") {
    out->type = ProcessType::kCompute;
  } else if (type == "graphics") {
    out->type = ProcessType::kGraphics;
  } else {
    SetError(error, where + ".type: expected \"compute\" or \"graphics\"");
    return false;
  }
  return true;
}

bool ReadGpu(const json& j, const std::string& where, GpuState* out, std::string* error) {
  if (!CheckObject(j, where, error) ||
      !CheckKeys(j,
                 {"lost", "reset_required", "hang_seconds", "xids", "load", "processes",
                  "remapped_rows", "ecc_errors", "recovery_action", "nvlink", "mig",
                  "faults_after_reset", "fails_after_reboot_s", "lost_at", "minor"},
                 where, error) ||
      !ReadBool(j, "lost", where, &out->lost, error) ||
      !ReadBool(j, "reset_required", where, &out->reset_required, error) ||
      !ReadBool(j, "faults_after_reset", where, &out->faults_after_reset, error) ||
      !ReadSeconds(j, "fails_after_reboot_s", where, &out->fails_after_reboot_s, error) ||
      !ReadOptionalUint(j, "minor", where, &out->minor, error) ||
      !ReadSeconds(j, "hang_seconds", where, &out->hang_seconds, error) ||
      !ReadOptionalUint(j, "recovery_action", where, &out->recovery_action, error)) {
    return false;
  }
  if (j.contains("lost_at")) {
    double at = 0;
    if (!ReadSeconds(j, "lost_at", where, &at, error)) return false;
    out->lost_at = at;
  }
  if (auto it = j.find("xids"); it != j.end()) {
    if (!it->is_array()) {
      SetError(error, where + ".xids: expected a list");
      return false;
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string w = where + ".xids[" + std::to_string(i) + "]";
      const json& x = (*it)[i];
      XidEvent event;
      if (!CheckObject(x, w, error) ||
          !CheckKeys(x, {"seq", "xid", "gpu_instance", "compute_instance"}, w, error) ||
          !ReadUint(x, "seq", w, &event.seq, error) || !ReadUint(x, "xid", w, &event.xid, error) ||
          !ReadOptionalUint(x, "gpu_instance", w, &event.gpu_instance, error) ||
          !ReadOptionalUint(x, "compute_instance", w, &event.compute_instance, error)) {
        return false;
      }
      if (!x.contains("seq") || !x.contains("xid")) {
        SetError(error, w + ": needs both \"seq\" and \"xid\"");
        return false;
      }
      if (event.compute_instance.has_value() && !event.gpu_instance.has_value()) {
        SetError(error, w + ": compute_instance needs gpu_instance");
        return false;
      }
      out->xids.push_back(event);
    }
  }
  if (auto it = j.find("load"); it != j.end()) {
    if (!ReadLoad(*it, where + ".load", &out->load, error)) return false;
  }
  if (auto it = j.find("processes"); it != j.end()) {
    if (!it->is_array()) {
      SetError(error, where + ".processes: expected a list");
      return false;
    }
    std::vector<SimProcess> processes;
    for (size_t i = 0; i < it->size(); ++i) {
      SimProcess p;
      if (!ReadProcess((*it)[i], where + ".processes[" + std::to_string(i) + "]", &p, error)) {
        return false;
      }
      processes.push_back(std::move(p));
    }
    out->processes = std::move(processes);
  }
  if (auto it = j.find("remapped_rows"); it != j.end()) {
    const std::string w = where + ".remapped_rows";
    RemappedRows rows;
    if (!CheckObject(*it, w, error) ||
        !CheckKeys(*it, {"correctable", "uncorrectable", "pending", "failure"}, w, error) ||
        !ReadUint(*it, "correctable", w, &rows.correctable, error) ||
        !ReadUint(*it, "uncorrectable", w, &rows.uncorrectable, error) ||
        !ReadBool(*it, "pending", w, &rows.pending, error) ||
        !ReadBool(*it, "failure", w, &rows.failure, error)) {
      return false;
    }
    out->remapped_rows = rows;
  }
  if (auto it = j.find("ecc_errors"); it != j.end()) {
    const std::string w = where + ".ecc_errors";
    EccErrors ecc;
    if (!CheckObject(*it, w, error) ||
        !CheckKeys(*it,
                   {"volatile_corrected", "volatile_uncorrected", "aggregate_corrected",
                    "aggregate_uncorrected"},
                   w, error) ||
        !ReadUint(*it, "volatile_corrected", w, &ecc.volatile_corrected, error) ||
        !ReadUint(*it, "volatile_uncorrected", w, &ecc.volatile_uncorrected, error) ||
        !ReadUint(*it, "aggregate_corrected", w, &ecc.aggregate_corrected, error) ||
        !ReadUint(*it, "aggregate_uncorrected", w, &ecc.aggregate_uncorrected, error)) {
      return false;
    }
    out->ecc_errors = ecc;
  }
  if (auto it = j.find("nvlink"); it != j.end()) {
    if (!ReadNvLink(*it, where + ".nvlink", &out->nvlink, error)) return false;
  }
  if (auto it = j.find("mig"); it != j.end()) {
    MigOverride mig;
    if (!ReadMig(*it, where + ".mig", &mig, error)) return false;
    out->mig = std::move(mig);
  }
  return true;
}

bool ReadState(const json& j, SimState* out, std::string* error) {
  const std::string where = "state";
  if (!CheckObject(j, where, error) ||
      !CheckKeys(j,
                 {"version", "driver_not_loaded", "init_crash", "init_hang_seconds", "next_xid_seq",
                  "boots", "gpus"},
                 where, error)) {
    return false;
  }
  uint64_t version = kFormatVersion;
  if (!ReadUint64(j, "version", where, std::numeric_limits<int>::max(), &version, error)) {
    return false;
  }
  if (version != kFormatVersion) {
    SetError(error, "state.version: " + std::to_string(version) + " is not supported (expected " +
                        std::to_string(kFormatVersion) + ")");
    return false;
  }
  if (!ReadBool(j, "driver_not_loaded", where, &out->driver_not_loaded, error) ||
      !ReadBool(j, "init_crash", where, &out->init_crash, error) ||
      !ReadSeconds(j, "init_hang_seconds", where, &out->init_hang_seconds, error) ||
      !ReadUint(j, "next_xid_seq", where, &out->next_xid_seq, error) ||
      !ReadUint(j, "boots", where, &out->boots, error)) {
    return false;
  }
  if (auto it = j.find("gpus"); it != j.end()) {
    if (!CheckObject(*it, where + ".gpus", error)) return false;
    for (const auto& item : it->items()) {
      const std::string w = where + ".gpus[\"" + item.key() + "\"]";
      if (!IsValidGpuKey(item.key())) {
        SetError(error, w + ": key must be a GPU UUID (GPU-...) or a decimal index");
        return false;
      }
      GpuState gpu;
      if (!ReadGpu(item.value(), w, &gpu, error)) return false;
      out->gpus[item.key()] = std::move(gpu);
    }
  }
  return true;
}

// --- JSON writing: only what differs from the default, so files stay short ---------------

json LoadToJson(const LoadOverride& load) {
  json j = json::object();
  for (const auto& f : kLoadUintFields) {
    if ((load.*f.member).has_value()) j[f.name] = *(load.*f.member);
  }
  for (const auto& f : kLoadUint64Fields) {
    if ((load.*f.member).has_value()) j[f.name] = *(load.*f.member);
  }
  if (load.power_w.has_value()) j[kPowerField] = *load.power_w;
  if (!load.gpm.empty()) {
    json gpm = json::object();
    for (const auto& [name, value] : load.gpm) gpm[name] = value;
    j[kGpmField] = std::move(gpm);
  }
  return j;
}

json NvLinkToJson(const NvLinkOverride& nvlink) {
  json j = json::object();
  if (!nvlink.down.empty()) {
    json down = json::array();
    for (unsigned link : nvlink.down) down.push_back(link);
    j["down"] = std::move(down);
  }
  json errors = json::object();
  for (const auto& [link, counters] : nvlink.errors) {
    json c = json::object();
    for (size_t i = 0; i < counters.size(); ++i) {
      if (counters[i].has_value()) c[std::string(kNvLinkCounterNames[i])] = *counters[i];
    }
    if (!c.empty()) errors[std::to_string(link)] = std::move(c);
  }
  if (!errors.empty()) j["errors"] = std::move(errors);
  return j;
}

json GpuToJson(const GpuState& gpu) {
  json j = json::object();
  if (gpu.lost) j["lost"] = true;
  if (gpu.reset_required) j["reset_required"] = true;
  if (gpu.faults_after_reset) j["faults_after_reset"] = true;
  if (gpu.fails_after_reboot_s > 0) j["fails_after_reboot_s"] = gpu.fails_after_reboot_s;
  if (gpu.lost_at.has_value()) j["lost_at"] = *gpu.lost_at;
  if (gpu.minor.has_value()) j["minor"] = *gpu.minor;
  if (gpu.hang_seconds > 0) j["hang_seconds"] = gpu.hang_seconds;
  if (!gpu.xids.empty()) {
    json xids = json::array();
    for (const XidEvent& x : gpu.xids) {
      json xid = {{"seq", x.seq}, {"xid", x.xid}};
      if (x.gpu_instance.has_value()) xid["gpu_instance"] = *x.gpu_instance;
      if (x.compute_instance.has_value()) xid["compute_instance"] = *x.compute_instance;
      xids.push_back(std::move(xid));
    }
    j["xids"] = std::move(xids);
  }
  if (json load = LoadToJson(gpu.load); !load.empty()) j["load"] = std::move(load);
  if (gpu.processes.has_value()) {
    json processes = json::array();
    for (const SimProcess& p : *gpu.processes) {
      json process = {{"pid", p.pid},
                      {"name", p.name},
                      {"used_mib", p.used_mib},
                      {"type", p.type == ProcessType::kGraphics ? "graphics" : "compute"}};
      if (p.gpu_instance.has_value()) process["gpu_instance"] = *p.gpu_instance;
      if (p.compute_instance.has_value()) process["compute_instance"] = *p.compute_instance;
      if (p.sm_util.has_value()) process["sm_util"] = *p.sm_util;
      processes.push_back(std::move(process));
    }
    j["processes"] = std::move(processes);
  }
  if (gpu.recovery_action.has_value()) j["recovery_action"] = *gpu.recovery_action;
  if (gpu.remapped_rows.has_value()) {
    const RemappedRows& r = *gpu.remapped_rows;
    j["remapped_rows"] = {{"correctable", r.correctable},
                          {"uncorrectable", r.uncorrectable},
                          {"pending", r.pending},
                          {"failure", r.failure}};
  }
  if (gpu.ecc_errors.has_value()) {
    const EccErrors& e = *gpu.ecc_errors;
    j["ecc_errors"] = {{"volatile_corrected", e.volatile_corrected},
                       {"volatile_uncorrected", e.volatile_uncorrected},
                       {"aggregate_corrected", e.aggregate_corrected},
                       {"aggregate_uncorrected", e.aggregate_uncorrected}};
  }
  if (json nvlink = NvLinkToJson(gpu.nvlink); !nvlink.empty()) j["nvlink"] = std::move(nvlink);
  if (gpu.mig.has_value()) {
    json instances = json::array();
    for (const MigInstance& m : gpu.mig->instances) {
      json instance = {{"gpu_instance", m.gpu_instance},
                       {"compute_instance", m.compute_instance},
                       {"profile", m.profile},
                       {"placement", m.placement},
                       {"uuid", m.uuid}};
      if (m.gpm.has_value()) instance["gpm"] = *m.gpm;
      instances.push_back(std::move(instance));
    }
    j["mig"] = {{"mode", gpu.mig->enabled ? "enabled" : "disabled"},
                {"instances", std::move(instances)}};
  }
  return j;
}

GpuState* Entry(SimState* state, const std::string& key) {
  if (!IsValidGpuKey(key)) return nullptr;
  return &state->gpus[key];
}

template <typename T>
void MergeOptional(const std::optional<T>& from, std::optional<T>* into) {
  if (from.has_value()) *into = from;
}

// Adds `from` into `into`; `from`'s overrides win.
void MergeInto(const GpuState& from, GpuState* into) {
  into->lost = into->lost || from.lost;
  into->reset_required = into->reset_required || from.reset_required;
  into->faults_after_reset = into->faults_after_reset || from.faults_after_reset;
  into->fails_after_reboot_s = std::max(into->fails_after_reboot_s, from.fails_after_reboot_s);
  MergeOptional(from.lost_at, &into->lost_at);
  MergeOptional(from.minor, &into->minor);
  into->hang_seconds = std::max(into->hang_seconds, from.hang_seconds);
  into->xids.insert(into->xids.end(), from.xids.begin(), from.xids.end());
  for (const auto& f : kLoadUintFields) MergeOptional(from.load.*f.member, &(into->load.*f.member));
  for (const auto& f : kLoadUint64Fields) {
    MergeOptional(from.load.*f.member, &(into->load.*f.member));
  }
  MergeOptional(from.load.power_w, &into->load.power_w);
  for (const auto& [name, value] : from.load.gpm) into->load.gpm[name] = value;
  into->nvlink.down.insert(from.nvlink.down.begin(), from.nvlink.down.end());
  for (const auto& [link, counters] : from.nvlink.errors) {
    NvLinkCounters& merged = into->nvlink.errors[link];
    for (size_t i = 0; i < counters.size(); ++i) MergeOptional(counters[i], &merged[i]);
  }
  MergeOptional(from.processes, &into->processes);
  MergeOptional(from.remapped_rows, &into->remapped_rows);
  MergeOptional(from.ecc_errors, &into->ecc_errors);
  MergeOptional(from.recovery_action, &into->recovery_action);
  MergeOptional(from.mig, &into->mig);
}

}  // namespace

std::span<const GpmMetric> GpmMetrics() { return kGpmMetrics; }

const GpmMetric* FindGpmMetric(std::string_view name) {
  for (const GpmMetric& m : kGpmMetrics) {
    if (std::string_view(m.name) == name) return &m;
  }
  return nullptr;
}

const GpmMetric* FindGpmMetricById(unsigned id) {
  for (const GpmMetric& m : kGpmMetrics) {
    if (m.id == id) return &m;
  }
  return nullptr;
}

bool GpmValueInRange(const GpmMetric& metric, double value) {
  return std::isfinite(value) && value >= 0 && (!metric.percent || value <= 100);
}

std::string GpmMetricNames() {
  std::string names;
  for (const GpmMetric& m : kGpmMetrics) {
    if (!names.empty()) names += ", ";
    names += m.name;
  }
  return names;
}

bool IsValidGpuKey(std::string_view key) {
  if (key.size() > 4 && (key.substr(0, 4) == "GPU-" || key.substr(0, 4) == "MIG-")) return true;
  if (key.empty() || key.size() > 4) return false;
  unsigned value = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  // "007" would never match the index the simulator formats, so only canonical numbers.
  return value < kMaxGpuIndex && (key.size() == 1 || key[0] != '0');
}

bool StateFromJson(std::string_view text, SimState* out, std::string* error) {
  try {
    json j = json::parse(text.begin(), text.end());
    SimState state;
    if (!ReadState(j, &state, error)) return false;
    *out = std::move(state);
    return true;
  } catch (const std::exception& e) {
    // nlohmann reports syntax errors (and, defensively, anything else) by throwing.
    SetError(error, e.what());
    return false;
  }
}

std::string StateToJson(const SimState& state) {
  try {
    json j = json::object();
    j["version"] = kFormatVersion;
    if (state.driver_not_loaded) j["driver_not_loaded"] = true;
    if (state.init_crash) j["init_crash"] = true;
    if (state.init_hang_seconds > 0) j["init_hang_seconds"] = state.init_hang_seconds;
    j["next_xid_seq"] = state.next_xid_seq;
    if (state.boots > 0) j["boots"] = state.boots;
    json gpus = json::object();
    for (const auto& [key, gpu] : state.gpus) {
      json g = GpuToJson(gpu);
      if (!g.empty()) gpus[key] = std::move(g);
    }
    if (!gpus.empty()) j["gpus"] = std::move(gpus);
    // Process names come from callers; replace invalid UTF-8 rather than throw.
    return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  } catch (const std::exception&) {
    return "{}\n";  // Only bad_alloc can get here.
  }
}

bool LoadState(const std::string& path, SimState* out, std::string* error) {
  // Non-blocking, regular files only, size-capped: the simulator runs inside NVML calls,
  // where a FIFO or /dev/zero at the state path must not hang or flood the caller.
  std::string text, read_error;
  switch (
      ReadCappedRegularFile(path, kMaxStateFileBytes, "simulator state file", &text, &read_error)) {
    case ReadResult::kMissing:
      *out = SimState();
      return true;
    case ReadResult::kError:
      SetError(error, read_error);
      return false;
    case ReadResult::kOk:
      break;
  }
  std::string parse_error;
  if (!StateFromJson(text, out, &parse_error)) {
    SetError(error, path + ": " + parse_error);
    return false;
  }
  return true;
}

bool SaveStateAtomic(const std::string& path, const SimState& state, std::string* error) {
  std::string write_error;
  if (!ReplaceFile(path, StateToJson(state), &write_error)) {
    SetError(error, write_error);
    return false;
  }
  return true;
}

bool InjectXid(SimState* state, const std::string& gpu_key, unsigned xid,
               std::optional<unsigned> gpu_instance, std::optional<unsigned> compute_instance) {
  if (compute_instance.has_value() && !gpu_instance.has_value()) return false;
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  const uint64_t seq = std::max(state->next_xid_seq, WallMicros());
  gpu->xids.push_back({seq, xid, gpu_instance, compute_instance});
  state->next_xid_seq = seq + 1;
  return true;
}

bool SetLost(SimState* state, const std::string& gpu_key, bool lost) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  gpu->lost = lost;
  if (!lost) gpu->lost_at.reset();
  return true;
}

bool SetResetRequired(SimState* state, const std::string& gpu_key, bool reset_required) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  gpu->reset_required = reset_required;
  return true;
}

bool SetFaultsAfterReset(SimState* state, const std::string& gpu_key, bool faults) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  gpu->faults_after_reset = faults;
  return true;
}

bool SetFailsAfterReboot(SimState* state, const std::string& gpu_key, double seconds) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr || !std::isfinite(seconds)) return false;
  gpu->fails_after_reboot_s = std::max(0.0, seconds);
  return true;
}

bool SetMinor(SimState* state, const std::string& gpu_key, std::optional<unsigned> minor) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  gpu->minor = minor;
  return true;
}

void RebootNode(SimState* state) {
  ++state->boots;
  const double now = WallSeconds();
  for (auto& [key, gpu] : state->gpus) {
    gpu.lost = false;
    gpu.lost_at.reset();
    gpu.reset_required = false;
    gpu.hang_seconds = 0;
    if (gpu.recovery_action.has_value()) gpu.recovery_action = 0;
    gpu.processes.reset();
    gpu.load = LoadOverride();
    gpu.minor.reset();
    if (gpu.fails_after_reboot_s > 0) {
      gpu.lost_at = now + gpu.fails_after_reboot_s;
      if (!gpu.xids.empty()) {
        // Due at lost_at; next_xid_seq stays, so XIDs injected before then are not held back.
        XidEvent again = gpu.xids.back();
        again.seq = std::max(static_cast<uint64_t>(*gpu.lost_at * 1e6), again.seq + 1);
        gpu.xids.push_back(again);
      }
    }
  }
}

bool ResetGpu(SimState* state, const std::string& gpu_key) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  gpu->reset_required = false;
  gpu->hang_seconds = 0;
  if (gpu->recovery_action.has_value()) gpu->recovery_action = 0;
  gpu->processes = std::vector<SimProcess>();
  if (gpu->faults_after_reset && !gpu->xids.empty()) {
    const XidEvent last = gpu->xids.back();
    return InjectXid(state, gpu_key, last.xid, last.gpu_instance, last.compute_instance);
  }
  return true;
}

bool SetHang(SimState* state, const std::string& gpu_key, double seconds) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr || !std::isfinite(seconds)) return false;
  gpu->hang_seconds = std::max(0.0, seconds);
  return true;
}

bool SetLoad(SimState* state, const std::string& gpu_key, const LoadOverride& load) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  GpuState from;
  from.load = load;
  MergeInto(from, gpu);
  return true;
}

bool AddProcess(SimState* state, const std::string& gpu_key, const SimProcess& process) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  if (!gpu->processes.has_value()) gpu->processes.emplace();
  auto& list = *gpu->processes;
  auto it = std::find_if(list.begin(), list.end(),
                         [&](const SimProcess& p) { return p.pid == process.pid; });
  if (it != list.end()) {
    *it = process;
  } else {
    list.push_back(process);
  }
  return true;
}

bool SetProcesses(SimState* state, const std::string& gpu_key,
                  const std::vector<SimProcess>& processes) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  gpu->processes = processes;
  return true;
}

bool SetRemappedRows(SimState* state, const std::string& gpu_key, const RemappedRows& rows) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  gpu->remapped_rows = rows;
  return true;
}

bool SetRecoveryAction(SimState* state, const std::string& gpu_key,
                       std::optional<unsigned> action) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  gpu->recovery_action = action;
  return true;
}

bool SetEccErrors(SimState* state, const std::string& gpu_key, const EccErrors& errors) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  gpu->ecc_errors = errors;
  return true;
}

bool SetNvLink(SimState* state, const std::string& gpu_key, unsigned link, std::optional<bool> down,
               const NvLinkCounters& errors) {
  if (link >= kMaxNvLinks) return false;
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  if (down.has_value()) {
    if (*down) {
      gpu->nvlink.down.insert(link);
    } else {
      gpu->nvlink.down.erase(link);
    }
  }
  bool any = false;
  for (const auto& counter : errors) any = any || counter.has_value();
  if (any) {
    NvLinkCounters& counters = gpu->nvlink.errors[link];
    for (size_t i = 0; i < errors.size(); ++i) MergeOptional(errors[i], &counters[i]);
  }
  return true;
}

bool SetMig(SimState* state, const std::string& gpu_key, const MigOverride& mig) {
  GpuState* gpu = Entry(state, gpu_key);
  if (gpu == nullptr) return false;
  gpu->mig = mig;
  return true;
}

bool ClearMig(SimState* state, const std::string& gpu_key) {
  if (!IsValidGpuKey(gpu_key)) return false;
  auto it = state->gpus.find(gpu_key);
  if (it != state->gpus.end()) it->second.mig.reset();
  return true;
}

void SetDriverNotLoaded(SimState* state, bool not_loaded) { state->driver_not_loaded = not_loaded; }

void SetInitCrash(SimState* state, bool crash) { state->init_crash = crash; }

void SetInitHang(SimState* state, double seconds) {
  state->init_hang_seconds = std::isfinite(seconds) ? std::max(0.0, seconds) : 0.0;
}

void Reset(SimState* state) {
  const uint64_t next_seq = state->next_xid_seq;
  const uint64_t boots = state->boots;
  *state = SimState();
  state->next_xid_seq = next_seq;
  state->boots = boots;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

uint64_t WallMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

bool LostAt(const GpuState& state, double now_s) {
  return state.lost || (state.lost_at.has_value() && now_s >= *state.lost_at);
}

bool LostNow(const GpuState& state) {
  return state.lost || (state.lost_at.has_value() && WallSeconds() >= *state.lost_at);
}

GpuState MergedGpuState(const SimState& state, unsigned index, std::string_view uuid) {
  GpuState merged;
  if (auto it = state.gpus.find(std::to_string(index)); it != state.gpus.end()) {
    MergeInto(it->second, &merged);
  }
  if (!uuid.empty()) {
    if (auto it = state.gpus.find(std::string(uuid)); it != state.gpus.end()) {
      MergeInto(it->second, &merged);
    }
  }
  std::stable_sort(merged.xids.begin(), merged.xids.end(),
                   [](const XidEvent& a, const XidEvent& b) { return a.seq < b.seq; });
  return merged;
}

}  // namespace gpulet::sim
