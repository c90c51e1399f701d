#include "dra/resource_slices.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gpu/gpu_list.h"

namespace gpulet::dra {
namespace {

using json = nlohmann::json;

json Str(const std::string& v) { return {{"string", v}}; }
json Int(int64_t v) { return {{"int", v}}; }
// A semantic version attribute: "9.0" → "9.0.0", "570.133.20" as it is.
json Version(const std::string& v) { return {{"version", SemVer(v)}}; }

// The brand as NVML names it, from the product name (the model keeps no NVML brand).
std::string BrandName(const gpu::Gpu& gpu) {
  const std::string& name = gpu.name;
  if (name.find("GeForce") != std::string::npos) return "GeForce";
  if (name.find("Quadro") != std::string::npos) return "Quadro";
  return "Nvidia";
}

// The attributes every device of `gpu` shares.
json GpuAttributes(const gpu::Gpu& gpu, const SliceOptions& options) {
  json a = json::object();
  if (!SemVer(options.driver_version).empty()) a["driverVersion"] = Version(options.driver_version);
  if (!SemVer(options.cuda_driver_version).empty()) {
    a["cudaDriverVersion"] = Version(options.cuda_driver_version);
  }
  a["productName"] = Str(gpu.name);
  a["brand"] = Str(BrandName(gpu));
  a["architecture"] = Str(std::string(node::ArchitectureName(gpu.architecture)));
  if (!gpu.ComputeCapability().empty())
    a["cudaComputeCapability"] = Version(gpu.ComputeCapability());
  if (gpu.index) a["index"] = Int(*gpu.index);
  if (gpu.minor) a["minor"] = Int(*gpu.minor);
  if (!gpu.bus_id.empty()) a["resource.kubernetes.io/pciBusID"] = Str(gpu.bus_id);
  return a;
}

bool Fatal(const state::GpuHealth& h) {
  for (const auto& [source, c] : h.conditions) {
    if (c.severity == state::HealthState::kUnhealthy && c.reboot_required) return true;
  }
  return false;
}

// The taints of a device whose health is `h`.
json Taints(const state::GpuHealth& h, const SliceOptions& options) {
  json taints = json::array();
  if (h.state != state::HealthState::kUnhealthy) return taints;
  taints.push_back(
      {{"key", kUnhealthyTaintKey},
       {"value", TaintValue(h)},
       {"effect", options.no_execute_on_fatal && Fatal(h) ? "NoExecute" : "NoSchedule"},
       {"timeAdded", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", h.since, absl::UTCTimeZone())}});
  return taints;
}

}  // namespace

std::string GpuDeviceName(const gpu::Gpu& gpu) {
  return absl::StrCat("gpu-", gpu.index ? absl::StrCat(*gpu.index) : "x");
}

std::string MigDeviceName(const gpu::Gpu& gpu, const gpu::MigDeviceInfo& mig) {
  return absl::StrCat(GpuDeviceName(gpu), "-mig-", mig.gpu_instance_id, "-",
                      mig.compute_instance_id);
}

std::string TaintValue(const state::GpuHealth& health) {
  if (health.state == state::HealthState::kHealthy) return "";
  // The worst condition's source names the cause.
  std::string source;
  for (const auto& [s, c] : health.conditions) {
    if (c.severity == health.state && c.reason == health.reason) source = s;
  }
  if (source == "xid" && health.last_xid > 0) return absl::StrCat("xid-", health.last_xid);
  if (source == "liveness") {
    return health.reason.find("hung") != std::string::npos ||
                   health.reason.find("did not answer") != std::string::npos
               ? "hung"
               : "lost";
  }
  if (source == "nvml") return "nvml";
  if (source == "remap") return "remap-failure";
  return "unhealthy";
}

bool Offers(const SliceOptions& options, const gpu::Gpu& gpu) {
  std::optional<int> index;
  if (gpu.index) index = static_cast<int>(*gpu.index);
  return gpu::GpuListNames(options.gpus, index, gpu.uuid);
}

std::string SemVer(const std::string& v) {
  std::vector<std::string> parts = absl::StrSplit(v, '.');
  if (parts.size() > 3) return "";
  for (std::string& p : parts) {
    if (p.empty() || p.size() > 9 || !std::all_of(p.begin(), p.end(), absl::ascii_isdigit)) {
      return "";
    }
    p = std::to_string(std::stoul(p));
  }
  while (parts.size() < 3) parts.push_back("0");
  return absl::StrJoin(parts, ".");
}

std::vector<json> BuildSliceSpecs(const state::Snapshot& snap, const SliceOptions& options) {
  std::vector<json> devices;
  for (const state::DeviceRecord& d : snap.devices) {
    const gpu::Gpu& g = d.gpu;
    if (!g.index || g.uuid.empty() || !Offers(options, g)) continue;
    const json common = GpuAttributes(g, options);
    if (!g.mig_enabled) {
      json dev = {{"name", GpuDeviceName(g)}};
      json attrs = common;
      attrs["type"] = Str("gpu");
      attrs["uuid"] = Str(g.uuid);
      dev["attributes"] = attrs;
      if (g.memory_total_bytes) {
        json memory = {{"value", absl::StrCat(*g.memory_total_bytes >> 20, "Mi")}};
        if (options.memory_shares) {
          const std::string step = absl::StrCat(options.share_mib, "Mi");
          // A claim that names no memory gets the whole card (in whole steps), as it would
          // without shares: sharing is what a claim asks for, never what it gets by omission.
          const uint64_t total_mib = *g.memory_total_bytes >> 20;
          const uint64_t share = static_cast<uint64_t>(options.share_mib);
          const uint64_t whole = std::max<uint64_t>(total_mib / share, 1) * share;
          memory["requestPolicy"] = {{"default", absl::StrCat(whole, "Mi")},
                                     {"validRange", {{"min", step}, {"step", step}}}};
          dev["allowMultipleAllocations"] = true;
        }
        dev["capacity"] = {{"memory", memory}};
      }
      json taints = Taints(d.health, options);
      if (!taints.empty()) dev["taints"] = taints;
      devices.push_back(std::move(dev));
      continue;
    }
    for (const gpu::MigDeviceInfo& m : g.mig_devices) {
      json dev = {{"name", MigDeviceName(g, m)}};
      json attrs = common;
      attrs["type"] = Str("mig");
      attrs["uuid"] = Str(m.uuid);
      attrs["parentUUID"] = Str(g.uuid);
      attrs["profile"] = Str(m.profile);
      attrs["gpuInstanceID"] = Int(m.gpu_instance_id);
      attrs["computeInstanceID"] = Int(m.compute_instance_id);
      dev["attributes"] = attrs;
      dev["capacity"] = {{"memory", {{"value", absl::StrCat(m.memory_bytes >> 20, "Mi")}}},
                         {"multiprocessors", {{"value", absl::StrCat(m.sm_count)}}}};
      // A GPU-level fault takes every MIG device out; an instance's own, that one.
      auto own = d.mig_health.find(m.gpu_instance_id);
      const state::GpuHealth& h =
          d.health.state == state::HealthState::kUnhealthy || own == d.mig_health.end()
              ? d.health
              : own->second;
      json taints = Taints(h, options);
      if (!taints.empty()) dev["taints"] = taints;
      devices.push_back(std::move(dev));
    }
  }
  const size_t count =
      std::max<size_t>(1, (devices.size() + kDevicesPerSlice - 1) / kDevicesPerSlice);
  std::vector<json> specs;
  for (size_t i = 0; i < count; ++i) {
    json spec = {{"driver", options.driver},
                 {"nodeName", options.node_name},
                 {"pool",
                  {{"name", options.node_name},
                   {"generation", options.generation},
                   {"resourceSliceCount", count}}},
                 {"devices", json::array()}};
    for (size_t k = i * kDevicesPerSlice; k < devices.size() && k < (i + 1) * kDevicesPerSlice;
         ++k) {
      spec["devices"].push_back(devices[k]);
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace gpulet::dra
