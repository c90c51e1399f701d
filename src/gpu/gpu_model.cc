#include "gpu/gpu_model.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpu/nvml_api.h"
#include "nlohmann/json.hpp"
#include "node/bus_id.h"
#include "node/pci_ids.h"

namespace gpulet::gpu {

node::Architecture ArchitectureFromNvml(unsigned nvml_arch) {
  // 11 and 12 are unassigned in the published headers; they stay kUnknown rather than
  // being guessed.
  switch (nvml_arch) {
    case NVML_DEVICE_ARCH_KEPLER:
      return node::Architecture::kKepler;
    case NVML_DEVICE_ARCH_MAXWELL:
      return node::Architecture::kMaxwell;
    case NVML_DEVICE_ARCH_PASCAL:
      return node::Architecture::kPascal;
    case NVML_DEVICE_ARCH_VOLTA:
      return node::Architecture::kVolta;
    case NVML_DEVICE_ARCH_TURING:
      return node::Architecture::kTuring;
    case NVML_DEVICE_ARCH_AMPERE:
      return node::Architecture::kAmpere;
    case NVML_DEVICE_ARCH_ADA:
      return node::Architecture::kAda;
    case NVML_DEVICE_ARCH_HOPPER:
      return node::Architecture::kHopper;
    case NVML_DEVICE_ARCH_BLACKWELL:
      return node::Architecture::kBlackwell;
    case NVML_DEVICE_ARCH_RUBIN:
      return node::Architecture::kRubin;
    default:
      return node::Architecture::kUnknown;
  }
}

std::string Gpu::DeviceNode() const {
  return minor ? absl::StrCat("/dev/nvidia", *minor) : std::string();
}

std::string Gpu::ComputeCapability() const {
  return (cc_major && cc_minor) ? absl::StrCat(*cc_major, ".", *cc_minor) : std::string();
}

const Gpu* Inventory::FindByUuid(const std::string& uuid) const {
  for (const Gpu& g : gpus) {
    if (!g.uuid.empty() && g.uuid == uuid) return &g;
  }
  return nullptr;
}

Gpu* Inventory::FindByUuid(const std::string& uuid) {
  return const_cast<Gpu*>(static_cast<const Inventory*>(this)->FindByUuid(uuid));
}

const Gpu* Inventory::FindByBusId(const std::string& any_bus_id_form) const {
  std::string want = node::NormalizeBusId(any_bus_id_form);
  if (want.empty()) return nullptr;  // not a bus id; must not match GPUs without one
  for (const Gpu& g : gpus) {
    if (g.bus_id == want) return &g;
  }
  return nullptr;
}

std::vector<Gpu> MergeGpuViews(const std::vector<absl::StatusOr<DeviceIdentity>>& nvml,
                               const std::vector<node::PciGpu>& pci) {
  std::vector<Gpu> out;
  std::map<std::string, const node::PciGpu*> by_bus;
  for (const node::PciGpu& p : pci) by_bus[p.bus_id] = &p;
  std::map<std::string, bool> matched;

  auto apply_pci = [](Gpu& g, const node::PciGpu& p) {
    g.on_pci = true;
    g.kernel_driver = p.driver;
    g.numa_node = p.numa_node;
    if (g.pci_device_id == 0) g.pci_device_id = p.device_id;
    if (g.architecture == node::Architecture::kUnknown) g.architecture = p.architecture;
    if (g.name.empty()) g.name = std::string(p.product);
  };

  for (size_t i = 0; i < nvml.size(); ++i) {
    Gpu g;
    g.index = static_cast<unsigned>(i);
    if (!nvml[i].ok()) {
      g.nvml_error = std::string(nvml[i].status().message());
      out.push_back(std::move(g));
      continue;
    }
    const DeviceIdentity& id = *nvml[i];
    g.in_nvml = true;
    g.index = id.index;
    g.uuid = id.uuid;
    g.name = id.name;
    g.bus_id = node::NormalizeBusId(id.bus_id);
    g.pci_device_id = static_cast<uint16_t>(id.pci_device_id >> 16);
    g.minor = id.minor;
    g.memory_total_bytes = id.memory_total_bytes;
    g.cc_major = id.cc_major;
    g.cc_minor = id.cc_minor;
    g.serial = id.serial;
    g.vbios_version = id.vbios_version;
    g.mig_capable = id.mig_capable;
    g.virtualization_mode = id.virtualization_mode;
    if (id.nvml_architecture) g.architecture = ArchitectureFromNvml(*id.nvml_architecture);
    if (g.architecture == node::Architecture::kUnknown && g.pci_device_id != 0) {
      if (const node::PciDeviceInfo* info = node::LookupPciDevice(g.pci_device_id)) {
        g.architecture = info->architecture;
      }
    }
    auto it = by_bus.find(g.bus_id);
    if (it != by_bus.end()) {
      apply_pci(g, *it->second);
      matched[g.bus_id] = true;
    }
    out.push_back(std::move(g));
  }
  // GPUs NVML could not open by index are matched to the PCI devices nobody claimed only
  // when that pairing is unambiguous (one of each); otherwise they stay separate records.
  std::vector<const node::PciGpu*> unclaimed;
  for (const node::PciGpu& p : pci) {
    if (!matched.count(p.bus_id)) unclaimed.push_back(&p);
  }
  std::vector<Gpu*> unopened;
  for (Gpu& g : out) {
    if (!g.in_nvml) unopened.push_back(&g);
  }
  if (unopened.size() == 1 && unclaimed.size() == 1) {
    unopened[0]->bus_id = unclaimed[0]->bus_id;
    apply_pci(*unopened[0], *unclaimed[0]);
    unclaimed.clear();
  }
  for (const node::PciGpu* p : unclaimed) {
    Gpu g;
    g.bus_id = p->bus_id;
    apply_pci(g, *p);
    out.push_back(std::move(g));
  }
  for (Gpu& g : out) {
    g.module_flavor = node::ModuleFlavorFor(g.architecture);
    if (g.name.empty() && g.pci_device_id != 0) {
      g.name = absl::StrFormat("NVIDIA device 10de:%04x", g.pci_device_id);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Gpu& a, const Gpu& b) {
    if (a.index.has_value() != b.index.has_value()) return a.index.has_value();
    if (a.index && b.index) return *a.index < *b.index;
    return a.bus_id < b.bus_id;
  });
  return out;
}

Inventory BuildInventory(GpuLibrary* library, const HostFs& host, absl::Status nvml_status) {
  Inventory inv;
  inv.nvml_status = std::move(nvml_status);
  inv.driver = node::ReadDriverInfo(host);
  std::vector<node::PciGpu> pci;
  absl::StatusOr<std::vector<node::PciGpu>> scanned = node::ScanPciGpus(host);
  if (scanned.ok()) {
    pci = std::move(*scanned);
  } else {
    inv.pci_status = scanned.status();
  }
  std::vector<absl::StatusOr<DeviceIdentity>> nvml;
  if (library != nullptr && inv.nvml_status.ok()) {
    absl::StatusOr<SystemInfo> system = library->GetSystemInfo();
    if (system.ok()) inv.system = *system;
    absl::StatusOr<unsigned> count = library->GetDeviceCount();
    if (!count.ok()) {
      inv.nvml_status = count.status();
    } else {
      for (unsigned i = 0; i < *count; ++i) nvml.push_back(library->GetDeviceIdentity(i));
    }
  }
  inv.gpus = MergeGpuViews(nvml, pci);
  if (library != nullptr && inv.nvml_status.ok()) {
    for (Gpu& g : inv.gpus) {
      if (!g.index || g.mig_capable != true) continue;
      // A GPU whose layout cannot be read now is served whole; the MIG watcher reads again.
      absl::StatusOr<MigLayout> layout = library->GetMigLayout(*g.index, absl::Seconds(5));
      if (layout.ok()) ApplyMigLayout(*layout, &g);
    }
  }
  return inv;
}

void ApplyMigLayout(const MigLayout& layout, Gpu* gpu) {
  gpu->mig_enabled = layout.enabled;
  gpu->mig_devices = layout.enabled ? layout.devices : std::vector<MigDeviceInfo>();
}

const MigDeviceInfo* Gpu::FindMig(const std::string& mig_uuid) const {
  for (const MigDeviceInfo& m : mig_devices) {
    if (m.uuid == mig_uuid) return &m;
  }
  return nullptr;
}

const MigDeviceInfo* Gpu::FindMigInstance(unsigned gpu_instance_id,
                                          std::optional<unsigned> compute_instance_id) const {
  for (const MigDeviceInfo& m : mig_devices) {
    if (m.gpu_instance_id == gpu_instance_id &&
        (!compute_instance_id || m.compute_instance_id == *compute_instance_id)) {
      return &m;
    }
  }
  return nullptr;
}

void to_json(nlohmann::json& j, const Gpu& g) {
  j = nlohmann::json::object();
  if (g.index) j["index"] = *g.index;
  if (!g.uuid.empty()) j["uuid"] = g.uuid;
  j["name"] = g.name;
  if (!g.bus_id.empty()) j["pci_bus_id"] = g.bus_id;
  if (g.pci_device_id != 0) j["pci_device_id"] = absl::StrFormat("0x%04x", g.pci_device_id);
  if (g.minor) {
    j["minor"] = *g.minor;
    j["device_node"] = g.DeviceNode();
  }
  if (g.memory_total_bytes) j["memory_total_bytes"] = *g.memory_total_bytes;
  if (!g.ComputeCapability().empty()) j["compute_capability"] = g.ComputeCapability();
  j["architecture"] = std::string(node::ArchitectureName(g.architecture));
  j["kernel_module_flavor"] = std::string(node::ModuleFlavorName(g.module_flavor));
  j["numa_node"] = g.numa_node;
  if (g.on_pci) j["kernel_driver"] = g.kernel_driver.empty() ? "none" : g.kernel_driver;
  if (g.serial) j["serial"] = *g.serial;
  if (g.vbios_version) j["vbios_version"] = *g.vbios_version;
  if (g.mig_capable) j["mig_capable"] = *g.mig_capable;
  if (g.mig_capable == true) j["mig_enabled"] = g.mig_enabled;
  if (!g.mig_devices.empty()) {
    nlohmann::json migs = nlohmann::json::array();
    for (const MigDeviceInfo& m : g.mig_devices) {
      migs.push_back({{"index", m.index},
                      {"uuid", m.uuid},
                      {"profile", m.profile},
                      {"gpu_instance_id", m.gpu_instance_id},
                      {"compute_instance_id", m.compute_instance_id},
                      {"memory_bytes", m.memory_bytes},
                      {"sm_count", m.sm_count}});
    }
    j["mig_devices"] = std::move(migs);
  }
  if (g.virtualization_mode) j["virtualization_mode"] = *g.virtualization_mode;
  nlohmann::json sources = nlohmann::json::array();
  if (g.in_nvml) sources.push_back("nvml");
  if (g.on_pci) sources.push_back("pci");
  j["seen_by"] = sources;
  if (!g.nvml_error.empty()) j["nvml_error"] = g.nvml_error;
}

void to_json(nlohmann::json& j, const Inventory& inv) {
  j = nlohmann::json::object();
  if (!inv.system.driver_version.empty()) j["driver_version"] = inv.system.driver_version;
  if (!inv.system.CudaVersionString().empty()) {
    j["cuda_driver_version"] = inv.system.CudaVersionString();
  }
  if (!inv.system.nvml_version.empty()) j["nvml_version"] = inv.system.nvml_version;
  if (!inv.system.library_path.empty()) j["nvml_library"] = inv.system.library_path;
  if (!inv.nvml_status.ok()) {
    j["nvml_error"] = std::string(inv.nvml_status.message());
    if (inv.nvml_code >= 0) j["nvml_error_code"] = inv.nvml_code;
  }
  if (!inv.pci_status.ok()) j["pci_error"] = std::string(inv.pci_status.message());
  j["gpus"] = inv.gpus;
}

}  // namespace gpulet::gpu
