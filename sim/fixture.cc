#include "sim/fixture.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string_view>
#include <utility>

#include "sim/file_io.h"
#include "sim/mig.h"
#include "sim/yaml_tree.h"

namespace gpulet::sim {
namespace {

constexpr std::string_view kUnsupported = "unsupported";
constexpr size_t kMaxGpus = 64;  // matches the simulator's handle table
constexpr size_t kMaxFixtureBytes = 8 << 20;

struct NamedValue {
  const char* name;
  uint64_t value;
};

// nvmlDeviceArchitecture_t, nvmlBrandType_t and clock event reason bits by readable name.
constexpr NamedValue kArchitectures[] = {
    {"kepler", 2}, {"maxwell", 3}, {"pascal", 4}, {"volta", 5},      {"turing", 6},
    {"ampere", 7}, {"ada", 8},     {"hopper", 9}, {"blackwell", 10}, {"rubin", 13},
};
constexpr NamedValue kBrands[] = {
    {"unknown", 0},     {"quadro", 1},      {"tesla", 2},       {"nvs", 3},
    {"grid", 4},        {"geforce", 5},     {"titan", 6},       {"nvidia_vapps", 7},
    {"nvidia_vpc", 8},  {"nvidia_vcs", 9},  {"nvidia_vws", 10}, {"nvidia_cloud_gaming", 11},
    {"quadro_rtx", 12}, {"nvidia_rtx", 13}, {"nvidia", 14},     {"geforce_rtx", 15},
    {"titan_rtx", 16},
};
constexpr NamedValue kEventReasons[] = {
    {"gpu_idle", 0x1},
    {"applications_clocks_setting", 0x2},
    {"sw_power_cap", 0x4},
    {"hw_slowdown", 0x8},
    {"sync_boost", 0x10},
    {"sw_thermal_slowdown", 0x20},
    {"hw_thermal_slowdown", 0x40},
    {"hw_power_brake_slowdown", 0x80},
    {"display_clock_setting", 0x100},
};
// nvmlIntNvLinkDeviceType_t, nvmlGpuVirtualizationMode_t and the MIG modes.
constexpr NamedValue kNvLinkRemoteTypes[] = {
    {"gpu", 0}, {"ibmnpu", 1}, {"nvswitch", 2}, {"unknown", 0xFF}};
constexpr NamedValue kVirtualizationModes[] = {
    {"none", 0}, {"passthrough", 1}, {"vgpu", 2}, {"host_vgpu", 3}, {"host_vsga", 4},
};
constexpr NamedValue kMigModes[] = {{"disabled", 0}, {"enabled", 1}};
constexpr const char* kClockNames[4] = {"graphics", "sm", "memory", "video"};

bool ParseUnsigned(std::string_view text, uint64_t* out) {
  if (text.empty() || text[0] == '-' || text[0] == '+') return false;
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    text.remove_prefix(2);
  }
  const std::string copy(text);
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(copy.c_str(), &end, base);
  if (errno != 0 || end == copy.c_str() || *end != '\0') return false;
  *out = value;
  return true;
}

// Reads a fixture with a sticky first error instead of exceptions: every reader returns a
// harmless default once something failed, and LoadFixture checks ok() at the end.
class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  void Fail(const YamlNode& at, const std::string& what) {
    if (!ok()) return;
    error_ = file_;
    const YamlMark mark = at.Mark();
    if (!mark.is_null()) {
      // Appended piece by piece: `":" + std::to_string(...)` trips GCC 12's -Wrestrict
      // false positive at -O3.
      error_ += ':';
      error_ += std::to_string(mark.line + 1);
      error_ += ':';
      error_ += std::to_string(mark.column + 1);
    }
    error_ += ": " + what;
  }

  void ParseTop(const YamlNode& root, Fixture* out) {
    if (!ExpectMap(root, "the document")) return;
    CheckKeys(root, "top level", {"driver", "gpu_defaults", "gpus"});
    const YamlNode driver = root["driver"];
    if (!driver) return Fail(root, "missing \"driver\"");
    if (!ExpectMap(driver, "driver")) return;
    CheckKeys(driver, "driver", {"version", "nvml_version", "cuda_driver_version"});
    SetString(driver, "version", "driver", &out->driver_version);
    SetString(driver, "nvml_version", "driver", &out->nvml_version);
    uint64_t cuda = 0;
    SetUint(driver, "cuda_driver_version", "driver", 1000000, &cuda);
    out->cuda_driver_version = static_cast<int>(cuda);
    if (out->driver_version.empty() || out->nvml_version.empty() || cuda == 0) {
      return Fail(driver, "driver needs version, nvml_version and cuda_driver_version");
    }

    FixtureGpu defaults;
    if (const YamlNode d = root["gpu_defaults"]) ApplyGpu(d, "gpu_defaults", &defaults);

    const YamlNode gpus = root["gpus"];
    if (!gpus) return Fail(root, "missing \"gpus\"");
    if (!gpus.IsSequence()) return Fail(gpus, "gpus: expected a list");
    if (gpus.size() > kMaxGpus) return Fail(gpus, "gpus: at most 64 GPUs");
    for (size_t i = 0; i < gpus.size() && ok(); ++i) {
      const std::string path = "gpus[" + std::to_string(i) + "]";
      const YamlNode g = gpus[i];
      FixtureGpu gpu = defaults;
      gpu.minor = static_cast<unsigned>(i);
      if (!ExpectMap(g, path)) return;
      if (const YamlNode index = g["index"]) {
        uint64_t value = 0;
        if (ReadUint(index, path + ".index", kMaxGpus, &value) && value != i) {
          return Fail(index, path + ".index: " + std::to_string(value) + " but it is entry " +
                                 std::to_string(i) + " (the index is the position in the list)");
        }
      }
      ApplyGpu(g, path, &gpu);
      if (!ok()) return;
      // Bus ids are per board, so gpu_defaults cannot supply one.
      const YamlNode pci = g["pci"];
      if (!pci || !pci.IsMap() || !pci["bus_id"]) return Fail(g, path + " needs pci.bus_id");
      if (gpu.name.empty() || gpu.uuid.empty() || gpu.pci_device_id == 0 ||
          gpu.memory_total_mib == 0) {
        return Fail(g, path + " needs name, uuid, pci.bus_id, pci.device_id and memory.total_mib");
      }
      if (gpu.memory_reserved_mib > gpu.memory_total_mib) {
        return Fail(g, path + ": memory.reserved_mib exceeds memory.total_mib");
      }
      if (gpu.mig.has_value()) {
        // Checked here, once the entry and the defaults are merged: the product comes from
        // the name, which gpu_defaults may hold.
        const YamlNode at = g["mig"] ? g["mig"] : g;
        const std::string who = path + ".mig (" + gpu.uuid + ", " + gpu.name + ")";
        gpu.mig_product = FindMigProduct(gpu.name);
        if (gpu.mig_product == nullptr && !gpu.mig->instances.empty()) {
          std::string known;
          for (const MigProduct& product : MigProducts()) {
            for (const std::string& name : product.names)
              known += (known.empty() ? "" : ", ") + name;
          }
          return Fail(at, who + ": no MIG profile table for this GPU name (products with one: " +
                              known + ")");
        }
        if (gpu.mig_product != nullptr) {
          const std::string why =
              CheckMigLayout(*gpu.mig_product, gpu.mig->current == 1, gpu.mig->instances);
          if (!why.empty()) return Fail(at, who + ": " + why);
        }
      }
      for (const FixtureGpu& other : out->gpus) {
        if (other.uuid == gpu.uuid) return Fail(g, path + ": duplicate uuid " + gpu.uuid);
        if (other.pci_domain == gpu.pci_domain && other.pci_bus == gpu.pci_bus &&
            other.pci_device == gpu.pci_device) {
          return Fail(g, path + ": duplicate PCI bus id");
        }
      }
      out->gpus.push_back(std::move(gpu));
    }
  }

 private:
  // Applies the keys present in `n` to `g`, leaving the others (the defaults) alone.
  void ApplyGpu(const YamlNode& n, const std::string& path, FixtureGpu* g) {
    if (!ExpectMap(n, path)) return;
    CheckKeys(n, path,
              {"index",
               "name",
               "uuid",
               "serial",
               "vbios_version",
               "minor",
               "pci",
               "brand",
               "architecture",
               "compute_capability",
               "persistence_mode",
               "memory",
               "power",
               "clocks",
               "max_clocks",
               "temperature",
               "fan_percent",
               "pstate",
               "clocks_event_reasons",
               "utilization",
               "encoder",
               "decoder",
               "pcie_replay",
               "ecc",
               "remapped_rows",
               "processes",
               "gpm",
               "nvlink",
               "mig",
               "virtualization"});
    SetString(n, "name", path, &g->name);
    SetString(n, "uuid", path, &g->uuid);
    SetOptString(n, "serial", path, &g->serial);
    SetOptString(n, "vbios_version", path, &g->vbios_version);
    SetUint(n, "minor", path, 255, &g->minor);
    if (const YamlNode pci = n["pci"]) ApplyPci(pci, path + ".pci", g);
    SetOptNamed(n, "brand", path, kBrands, &g->brand);
    SetOptNamed(n, "architecture", path, kArchitectures, &g->architecture);
    if (const YamlNode cc = n["compute_capability"]) {
      if (IsUnsupported(cc)) {
        g->compute_capability.reset();
      } else {
        const std::string text = Scalar(cc, path + ".compute_capability");
        const size_t dot = text.find('.');
        uint64_t major = 0, minor = 0;
        if (dot == std::string::npos || !ParseUnsigned(text.substr(0, dot), &major) ||
            !ParseUnsigned(text.substr(dot + 1), &minor) || major > 99 || minor > 9) {
          Fail(cc, path + ".compute_capability: expected MAJOR.MINOR, e.g. \"9.0\"");
        } else {
          g->compute_capability = {static_cast<int>(major), static_cast<int>(minor)};
        }
      }
    }
    SetOptBool(n, "persistence_mode", path, &g->persistence_mode);
    if (const YamlNode m = n["memory"]) {
      const std::string p = path + ".memory";
      if (ExpectMap(m, p)) {
        CheckKeys(m, p, {"total_mib", "reserved_mib", "used_mib"});
        SetUint(m, "total_mib", p, 1 << 24, &g->memory_total_mib);
        SetUint(m, "reserved_mib", p, 1 << 24, &g->memory_reserved_mib);
        SetUint(m, "used_mib", p, 1 << 24, &g->memory_used_mib);
      }
    }
    if (const YamlNode power = n["power"]) {
      const std::string p = path + ".power";
      if (ExpectMap(power, p)) {
        CheckKeys(power, p, {"limit_w", "usage_w", "energy_mj"});
        SetOptWatts(power, "limit_w", p, &g->power_limit_mw);
        SetOptWatts(power, "usage_w", p, &g->power_usage_mw);
        SetOptUint(power, "energy_mj", p, std::numeric_limits<uint64_t>::max() / 2, &g->energy_mj);
      }
    }
    ApplyClocks(n, "clocks", path, &g->clocks_mhz);
    ApplyClocks(n, "max_clocks", path, &g->max_clocks_mhz);
    if (const YamlNode t = n["temperature"]) {
      const std::string p = path + ".temperature";
      if (ExpectMap(t, p)) {
        CheckKeys(t, p, {"gpu_c", "memory_c"});
        SetOptUint(t, "gpu_c", p, 200, &g->temperature_c);
        SetOptUint(t, "memory_c", p, 200, &g->memory_temperature_c);
      }
    }
    SetOptUint(n, "fan_percent", path, 200, &g->fan_percent);
    if (const YamlNode ps = n["pstate"]) {
      if (IsUnsupported(ps)) {
        g->pstate.reset();
      } else {
        std::string text = Scalar(ps, path + ".pstate");
        if (!text.empty() && (text[0] == 'P' || text[0] == 'p')) text.erase(0, 1);
        uint64_t value = 0;
        if (!ParseUnsigned(text, &value) || value > 15) {
          Fail(ps, path + ".pstate: expected P0 to P15");
        } else {
          g->pstate = static_cast<unsigned>(value);
        }
      }
    }
    if (const YamlNode r = n["clocks_event_reasons"]) {
      const std::string p = path + ".clocks_event_reasons";
      if (IsUnsupported(r)) {
        g->clocks_event_reasons.reset();
      } else if (r.IsSequence()) {
        uint64_t bits = 0;
        for (size_t i = 0; i < r.size(); ++i) {
          uint64_t bit = 0;
          if (LookupName(r[i], p, kEventReasons, &bit)) bits |= bit;
        }
        g->clocks_event_reasons = bits;
      } else {
        uint64_t bits = 0;
        if (ReadUint(r, p, std::numeric_limits<uint64_t>::max(), &bits)) {
          g->clocks_event_reasons = bits;
        }
      }
    }
    if (const YamlNode u = n["utilization"]) {
      const std::string p = path + ".utilization";
      if (IsUnsupported(u)) {
        g->utilization.reset();
      } else if (ExpectMap(u, p)) {
        CheckKeys(u, p, {"gpu", "memory"});
        auto value = g->utilization.value_or(std::pair<unsigned, unsigned>{0, 0});
        SetUint(u, "gpu", p, 100, &value.first);
        SetUint(u, "memory", p, 100, &value.second);
        g->utilization = value;
      }
    }
    ApplyCodec(n, "encoder", path, &g->encoder);
    ApplyCodec(n, "decoder", path, &g->decoder);
    SetOptUint(n, "pcie_replay", path, std::numeric_limits<unsigned>::max(), &g->pcie_replay);
    if (const YamlNode e = n["ecc"]) ApplyEcc(e, path + ".ecc", g);
    if (const YamlNode r = n["remapped_rows"]) {
      const std::string p = path + ".remapped_rows";
      if (IsUnsupported(r)) {
        g->remapped_rows.reset();
      } else if (ExpectMap(r, p)) {
        CheckKeys(r, p, {"correctable", "uncorrectable", "pending", "failure"});
        RemappedRows rows = g->remapped_rows.value_or(RemappedRows{});
        SetUint(r, "correctable", p, std::numeric_limits<unsigned>::max(), &rows.correctable);
        SetUint(r, "uncorrectable", p, std::numeric_limits<unsigned>::max(), &rows.uncorrectable);
        SetBool(r, "pending", p, &rows.pending);
        SetBool(r, "failure", p, &rows.failure);
        g->remapped_rows = rows;
      }
    }
    if (const YamlNode procs = n["processes"]) ApplyProcesses(procs, path + ".processes", g);
    if (const YamlNode gpm = n["gpm"]) ApplyGpm(gpm, path + ".gpm", g);
    if (const YamlNode nvlink = n["nvlink"]) ApplyNvLink(nvlink, path + ".nvlink", g);
    if (const YamlNode mig = n["mig"]) {
      const std::string p = path + ".mig";
      if (IsUnsupported(mig)) {
        g->mig.reset();
      } else if (ExpectMap(mig, p)) {
        CheckKeys(mig, p, {"current", "pending", "instances"});
        MigMode mode = g->mig.value_or(MigMode{});
        uint64_t value = 0;
        if (mig["current"] && LookupName(mig["current"], p + ".current", kMigModes, &value)) {
          mode.current = static_cast<unsigned>(value);
          if (!mig["pending"]) mode.pending = mode.current;
        }
        if (mig["pending"] && LookupName(mig["pending"], p + ".pending", kMigModes, &value)) {
          mode.pending = static_cast<unsigned>(value);
        }
        if (mode.current > 1 || mode.pending > 1) {
          return Fail(mig, p + ": modes are disabled or enabled");
        }
        if (const YamlNode instances = mig["instances"]) {
          ApplyMigInstances(instances, p + ".instances", g->uuid, &mode.instances);
        }
        g->mig = mode;
      }
    }
    if (const YamlNode v = n["virtualization"]) {
      uint64_t value = 0;
      if (LookupName(v, path + ".virtualization", kVirtualizationModes, &value)) {
        if (value > 4)
          return Fail(v, path +
                             ".virtualization: expected none, passthrough, vgpu, "
                             "host_vgpu or host_vsga");
        g->virtualization_mode = static_cast<int>(value);
      }
    }
  }

  // `gpm: {sm_util: 69.2, ...}`: merged into the defaults metric by metric; `unsupported`
  // drops one metric, or the whole section.
  void ApplyGpm(const YamlNode& n, const std::string& p, FixtureGpu* g) {
    if (IsUnsupported(n)) {
      g->gpm.reset();
      return;
    }
    if (!ExpectMap(n, p)) return;
    std::map<unsigned, double> values = g->gpm.value_or(std::map<unsigned, double>{});
    for (const auto& kv : n) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string("?");
      const GpmMetric* metric = FindGpmMetric(key);
      if (metric == nullptr) {
        return Fail(kv.first,
                    p + ": unknown key \"" + key + "\" (GPM metrics: " + GpmMetricNames() + ")");
      }
      if (IsUnsupported(kv.second)) {
        values.erase(metric->id);
        continue;
      }
      double value = 0;
      if (!ReadDouble(kv.second, p + "." + key, &value)) return;
      if (!GpmValueInRange(*metric, value)) {
        return Fail(kv.second, p + "." + key +
                                   (metric->percent ? ": expected a percentage from 0 to 100"
                                                    : ": expected a rate in MiB/s, >= 0"));
      }
      values[metric->id] = value;
    }
    g->gpm = std::move(values);
  }

  // `instances: [{gpu_instance: 1, profile: 3g.71gb, placement: 4, uuid: MIG-...}]`. The
  // layout is checked against the product's table once the whole entry is read (ParseTop).
  void ApplyMigInstances(const YamlNode& n, const std::string& p, const std::string& parent_uuid,
                         std::vector<MigInstance>* out) {
    if (!n.IsSequence()) return Fail(n, p + ": expected a list");
    out->clear();
    for (size_t i = 0; i < n.size() && ok(); ++i) {
      const std::string ip = p + "[" + std::to_string(i) + "]";
      const YamlNode m = n[i];
      if (!ExpectMap(m, ip)) return;
      CheckKeys(m, ip, {"gpu_instance", "compute_instance", "profile", "placement", "uuid", "gpm"});
      if (!m["gpu_instance"] || !m["profile"] || !m["placement"]) {
        return Fail(m, ip + ": needs gpu_instance, profile and placement");
      }
      MigInstance instance;
      SetUint(m, "gpu_instance", ip, 1000, &instance.gpu_instance);
      SetUint(m, "compute_instance", ip, 1000, &instance.compute_instance);
      SetString(m, "profile", ip, &instance.profile);
      SetUint(m, "placement", ip, 1000, &instance.placement);
      SetString(m, "uuid", ip, &instance.uuid);
      if (instance.uuid.empty()) {
        instance.uuid = MigUuid(parent_uuid, instance.gpu_instance, instance.compute_instance);
      }
      if (const YamlNode gpm = m["gpm"]) {
        const std::string gp = ip + ".gpm";
        if (!ExpectMap(gpm, gp)) return;
        std::map<std::string, double> values;
        for (const auto& kv : gpm) {
          const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string("?");
          const GpmMetric* metric = FindGpmMetric(key);
          if (metric == nullptr) {
            return Fail(kv.first, gp + ": unknown key \"" + key +
                                      "\" (GPM metrics: " + GpmMetricNames() + ")");
          }
          double value = 0;
          if (!ReadDouble(kv.second, gp + "." + key, &value)) return;
          if (!GpmValueInRange(*metric, value)) {
            return Fail(kv.second, gp + "." + key +
                                       (metric->percent ? ": expected a percentage from 0 to 100"
                                                        : ": expected a rate in MiB/s, >= 0"));
          }
          values[key] = value;
        }
        instance.gpm = std::move(values);
      }
      out->push_back(std::move(instance));
    }
  }

  void ApplyNvLink(const YamlNode& n, const std::string& p, FixtureGpu* g) {
    if (IsUnsupported(n)) {
      g->nvlink.reset();
      return;
    }
    if (!ExpectMap(n, p)) return;
    CheckKeys(n, p, {"links", "remote", "data_tx_kib", "data_rx_kib", "errors", "down"});
    NvLinkInfo info = g->nvlink.value_or(NvLinkInfo{});
    SetUint(n, "links", p, kMaxNvLinks, &info.links);
    if (const YamlNode remote = n["remote"]) {
      uint64_t value = 0;
      if (LookupName(remote, p + ".remote", kNvLinkRemoteTypes, &value)) {
        info.remote_type = static_cast<int>(value);
      }
    }
    SetUint(n, "data_tx_kib", p, std::numeric_limits<uint64_t>::max() / 2, &info.data_tx_kib);
    SetUint(n, "data_rx_kib", p, std::numeric_limits<uint64_t>::max() / 2, &info.data_rx_kib);
    if (const YamlNode e = n["errors"]) {
      const std::string ep = p + ".errors";
      if (!ExpectMap(e, ep)) return;
      CheckKeys(e, ep, {"replay", "recovery", "crc_flit", "crc_data"});
      for (size_t c = 0; c < kNvLinkCounterNames.size(); ++c) {
        const std::string name(kNvLinkCounterNames[c]);
        SetUint(e, name.c_str(), ep, std::numeric_limits<uint64_t>::max(), &info.errors[c]);
      }
    }
    if (!ok()) return;
    if (info.links == 0) {
      return Fail(n, p + ".links: expected 1 to " + std::to_string(kMaxNvLinks) +
                         " (leave nvlink out for a GPU without NVLink)");
    }
    // Links the GPU has but does not use (an SXM GPU alone in a VM): `all` or a list.
    if (const YamlNode down = n["down"]) {
      const std::string dp = p + ".down";
      info.down.clear();
      if (down.IsScalar() && down.Scalar() == "all") {
        for (unsigned l = 0; l < info.links; ++l) info.down.insert(l);
      } else if (down.IsSequence()) {
        for (size_t i = 0; i < down.size(); ++i) {
          unsigned link = 0;
          const std::string text = down[i].IsScalar() ? down[i].Scalar() : "";
          const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), link);
          if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
              link >= info.links) {
            return Fail(down[i],
                        dp + ": expected link numbers 0 to " + std::to_string(info.links - 1));
          }
          info.down.insert(link);
        }
      } else {
        return Fail(down, dp + ": expected `all` or a list of link numbers");
      }
    }
    g->nvlink = info;
  }

  void ApplyPci(const YamlNode& pci, const std::string& p, FixtureGpu* g) {
    if (!ExpectMap(pci, p)) return;
    CheckKeys(pci, p, {"bus_id", "device_id", "subsystem_id"});
    if (const YamlNode bus = pci["bus_id"]) {
      const std::string text = Scalar(bus, p + ".bus_id");
      if (ok() && !ParsePciBusId(text, &g->pci_domain, &g->pci_bus, &g->pci_device)) {
        Fail(bus, p + ".bus_id: expected DDDD:BB:DD.F, e.g. 0000:01:00.0");
      }
    }
    SetUint(pci, "device_id", p, 0xffff, &g->pci_device_id);
    SetUint(pci, "subsystem_id", p, 0xffffffffu, &g->pci_subsystem_id);
  }

  void ApplyClocks(const YamlNode& n, const char* key, const std::string& path,
                   std::array<std::optional<unsigned>, 4>* clocks) {
    const YamlNode c = n[key];
    if (!c) return;
    const std::string p = path + "." + key;
    if (IsUnsupported(c)) {
      for (auto& clock : *clocks) clock.reset();
      return;
    }
    if (!ExpectMap(c, p)) return;
    CheckKeys(c, p, {"graphics", "sm", "memory", "video"});
    for (int i = 0; i < 4; ++i) SetOptUint(c, kClockNames[i], p, 100000, &(*clocks)[i]);
  }

  void ApplyCodec(const YamlNode& n, const char* key, const std::string& path,
                  std::optional<CodecUtilization>* out) {
    const YamlNode c = n[key];
    if (!c) return;
    const std::string p = path + "." + key;
    if (IsUnsupported(c)) {
      out->reset();
      return;
    }
    if (!ExpectMap(c, p)) return;
    CheckKeys(c, p, {"utilization", "sampling_period_us"});
    CodecUtilization value = out->value_or(CodecUtilization{0, 167000});
    SetUint(c, "utilization", p, 100, &value.utilization);
    SetUint(c, "sampling_period_us", p, 100000000, &value.sampling_period_us);
    *out = value;
  }

  void ApplyEcc(const YamlNode& e, const std::string& p, FixtureGpu* g) {
    if (IsUnsupported(e)) {
      g->ecc.reset();
      return;
    }
    if (!ExpectMap(e, p)) return;
    CheckKeys(e, p, {"enabled", "pending", "volatile", "aggregate"});
    EccInfo ecc = g->ecc.value_or(EccInfo{});
    SetBool(e, "enabled", p, &ecc.enabled);
    if (e["enabled"] && !e["pending"]) ecc.pending = ecc.enabled;
    SetBool(e, "pending", p, &ecc.pending);
    const char* counters[2] = {"volatile", "aggregate"};
    for (int c = 0; c < 2; ++c) {
      const YamlNode counts = e[counters[c]];
      if (!counts) continue;
      const std::string cp = p + "." + counters[c];
      if (!ExpectMap(counts, cp)) return;
      CheckKeys(counts, cp, {"corrected", "uncorrected"});
      SetUint(counts, "corrected", cp, std::numeric_limits<uint64_t>::max(), &ecc.counts[0][c]);
      SetUint(counts, "uncorrected", cp, std::numeric_limits<uint64_t>::max(), &ecc.counts[1][c]);
    }
    g->ecc = ecc;
  }

  void ApplyProcesses(const YamlNode& procs, const std::string& p, FixtureGpu* g) {
    if (!procs.IsSequence()) return Fail(procs, p + ": expected a list");
    g->processes.clear();
    for (size_t i = 0; i < procs.size() && ok(); ++i) {
      const std::string pp = p + "[" + std::to_string(i) + "]";
      const YamlNode n = procs[i];
      if (!ExpectMap(n, pp)) return;
      CheckKeys(n, pp,
                {"pid", "name", "used_mib", "type", "gpu_instance", "compute_instance", "sm_util"});
      SimProcess process;
      SetOptUint(n, "gpu_instance", pp, 1000, &process.gpu_instance);
      SetOptUint(n, "compute_instance", pp, 1000, &process.compute_instance);
      if (process.compute_instance.has_value() && !process.gpu_instance.has_value()) {
        return Fail(n, pp + ": compute_instance needs gpu_instance");
      }
      if (!n["pid"]) return Fail(n, pp + ": missing \"pid\"");
      SetUint(n, "pid", pp, std::numeric_limits<unsigned>::max(), &process.pid);
      SetString(n, "name", pp, &process.name);
      SetUint(n, "used_mib", pp, 1 << 24, &process.used_mib);
      SetOptUint(n, "sm_util", pp, 100, &process.sm_util);
      std::string type = "compute";
      SetString(n, "type", pp, &type);
      if (type == "graphics") {
        process.type = ProcessType::kGraphics;
      } else if (type != "compute") {
        return Fail(n["type"], pp + ".type: expected compute or graphics");
      }
      g->processes.push_back(std::move(process));
    }
  }

  // --- scalar readers ----------------------------------------------------------------------

  static bool IsUnsupported(const YamlNode& n) {
    return n.IsScalar() && n.Scalar() == kUnsupported;
  }

  bool ExpectMap(const YamlNode& n, const std::string& path) {
    if (n.IsMap()) return true;
    Fail(n, path + ": expected a mapping");
    return false;
  }

  void CheckKeys(const YamlNode& map, const std::string& path,
                 std::initializer_list<std::string_view> allowed) {
    for (const auto& kv : map) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string("?");
      bool known = false;
      for (std::string_view a : allowed) known = known || key == a;
      if (!known) return Fail(kv.first, path + ": unknown key \"" + key + "\"");
    }
  }

  std::string Scalar(const YamlNode& n, const std::string& path) {
    if (!n.IsScalar()) {
      Fail(n, path + ": expected a single value");
      return "";
    }
    return n.Scalar();
  }

  bool ReadUint(const YamlNode& n, const std::string& path, uint64_t max, uint64_t* out) {
    if (!ok()) return false;
    const std::string text = Scalar(n, path);
    uint64_t value = 0;
    if (!ok()) return false;
    if (!ParseUnsigned(text, &value) || value > max) {
      Fail(n, path + ": expected an integer from 0 to " + std::to_string(max) +
                  (text == kUnsupported ? " (this value cannot be unsupported)" : ""));
      return false;
    }
    *out = value;
    return true;
  }

  template <typename T>
  void SetUint(const YamlNode& map, const char* key, const std::string& path, uint64_t max,
               T* out) {
    const YamlNode n = map[key];
    uint64_t value = 0;
    if (n && ReadUint(n, path + "." + key, max, &value)) *out = static_cast<T>(value);
  }

  template <typename T>
  void SetOptUint(const YamlNode& map, const char* key, const std::string& path, uint64_t max,
                  std::optional<T>* out) {
    const YamlNode n = map[key];
    if (!n) return;
    if (IsUnsupported(n)) {
      out->reset();
      return;
    }
    uint64_t value = 0;
    if (ReadUint(n, path + "." + key, max, &value)) *out = static_cast<T>(value);
  }

  bool ReadDouble(const YamlNode& n, const std::string& path, double* out) {
    const std::string text = Scalar(n, path);
    if (!ok()) return false;
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(value)) {
      Fail(n, path + ": expected a number");
      return false;
    }
    *out = value;
    return true;
  }

  void SetOptWatts(const YamlNode& map, const char* key, const std::string& path,
                   std::optional<unsigned>* out_mw) {
    const YamlNode n = map[key];
    if (!n) return;
    if (IsUnsupported(n)) {
      out_mw->reset();
      return;
    }
    const std::string text = Scalar(n, path + "." + key);
    char* end = nullptr;
    const double watts = std::strtod(text.c_str(), &end);
    if (!ok()) return;
    if (text.empty() || *end != '\0' || !std::isfinite(watts) || watts < 0 || watts > 100000) {
      return Fail(n, path + "." + key + ": expected watts, e.g. 312.5");
    }
    *out_mw = static_cast<unsigned>(std::lround(watts * 1000));
  }

  void SetString(const YamlNode& map, const char* key, const std::string& path, std::string* out) {
    if (const YamlNode n = map[key]) {
      std::string value = Scalar(n, path + "." + key);
      if (ok()) *out = std::move(value);
    }
  }

  void SetOptString(const YamlNode& map, const char* key, const std::string& path,
                    std::optional<std::string>* out) {
    const YamlNode n = map[key];
    if (!n) return;
    if (IsUnsupported(n)) {
      out->reset();
      return;
    }
    std::string value = Scalar(n, path + "." + key);
    if (ok()) *out = std::move(value);
  }

  bool ReadBool(const YamlNode& n, const std::string& path, bool* out) {
    const std::string text = Scalar(n, path);
    if (!ok()) return false;
    if (text == "true" || text == "enabled") {
      *out = true;
    } else if (text == "false" || text == "disabled") {
      *out = false;
    } else {
      Fail(n, path + ": expected true/false (or enabled/disabled)");
      return false;
    }
    return true;
  }

  void SetBool(const YamlNode& map, const char* key, const std::string& path, bool* out) {
    if (const YamlNode n = map[key]) ReadBool(n, path + "." + key, out);
  }

  void SetOptBool(const YamlNode& map, const char* key, const std::string& path,
                  std::optional<bool>* out) {
    const YamlNode n = map[key];
    if (!n) return;
    if (IsUnsupported(n)) {
      out->reset();
      return;
    }
    bool value = false;
    if (ReadBool(n, path + "." + key, &value)) *out = value;
  }

  template <size_t N>
  bool LookupName(const YamlNode& n, const std::string& path, const NamedValue (&table)[N],
                  uint64_t* out) {
    const std::string text = Scalar(n, path);
    if (!ok()) return false;
    for (const NamedValue& entry : table) {
      if (text == entry.name) {
        *out = entry.value;
        return true;
      }
    }
    if (ParseUnsigned(text, out)) return true;  // a raw NVML value is fine too
    std::string names;
    for (const NamedValue& entry : table)
      names += std::string(names.empty() ? "" : ", ") + entry.name;
    Fail(n, path + ": \"" + text + "\" is not one of " + names + " or a number");
    return false;
  }

  template <typename T, size_t N>
  void SetOptNamed(const YamlNode& map, const char* key, const std::string& path,
                   const NamedValue (&table)[N], std::optional<T>* out) {
    const YamlNode n = map[key];
    if (!n) return;
    if (IsUnsupported(n)) {
      out->reset();
      return;
    }
    uint64_t value = 0;
    if (LookupName(n, path + "." + key, table, &value)) *out = static_cast<T>(value);
  }

  std::string file_;
  std::string error_;
};

}  // namespace

bool ParsePciBusId(const std::string& text, unsigned* domain, unsigned* bus, unsigned* device) {
  // [domain:]bus:device.function, hex fields; NVML accepts both 4- and 8-digit domains.
  const size_t dot = text.rfind('.');
  if (dot == std::string::npos) return false;
  std::string_view head(text.data(), dot);
  uint64_t fields[3] = {0, 0, 0};
  int count = 0;
  while (true) {
    const size_t colon = head.find(':');
    const std::string_view part = head.substr(0, colon);
    if (count == 3 || part.empty() || part.size() > 8) return false;
    uint64_t value = 0;
    if (!ParseUnsigned("0x" + std::string(part), &value)) return false;
    fields[count++] = value;
    if (colon == std::string_view::npos) break;
    head.remove_prefix(colon + 1);
  }
  if (count < 2) return false;
  uint64_t function = 0;
  if (!ParseUnsigned("0x" + text.substr(dot + 1), &function) || function > 7) return false;
  const uint64_t d = count == 3 ? fields[0] : 0;
  const uint64_t b = fields[count - 2];
  const uint64_t dev = fields[count - 1];
  if (d > 0xffffffffu || b > 0xff || dev > 0x1f) return false;
  *domain = static_cast<unsigned>(d);
  *bus = static_cast<unsigned>(b);
  *device = static_cast<unsigned>(dev);
  return true;
}

bool LoadFixture(const std::string& path, Fixture* out, std::string* error) {
  std::string text;
  if (ReadCappedRegularFile(path, kMaxFixtureBytes, "simulator fixture", &text, error) !=
      ReadResult::kOk) {
    return false;
  }
  return ParseFixture(text, path, out, error);
}

bool ParseFixture(std::string_view text, const std::string& file, Fixture* out,
                  std::string* error) {
  std::string syntax;
  std::unique_ptr<YamlTree> tree = YamlTree::Parse(text, &syntax);
  if (tree == nullptr) {
    *error = file + ":" + syntax;
    return false;
  }
  Parser parser(file);
  Fixture fixture;
  parser.ParseTop(tree->root(), &fixture);
  if (!parser.ok()) {
    *error = parser.error();
    return false;
  }
  *out = std::move(fixture);
  return true;
}

}  // namespace gpulet::sim
