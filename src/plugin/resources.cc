#include "plugin/resources.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/host_fs.h"
#include "vram/slice_file.h"

namespace gpulet::plugin {
namespace {

constexpr char kVisibleDevices[] = "NVIDIA_VISIBLE_DEVICES";
constexpr char kVolumeMountDir[] = "/var/run/nvidia-container-devices";

// The ID a GPU is advertised under: its UUID, or its bus id when NVML never saw it (such a
// GPU is always Unhealthy, but the kubelet should still count it in capacity).
std::string BaseId(const state::DeviceRecord& d) {
  return state::BaseDeviceId(d.gpu.uuid, d.gpu.bus_id);
}

// The resource's "short" name for its socket: nvidia.com/gpu-memory → gpu-memory.
std::string SocketFor(const std::string& resource) {
  std::string tail = resource.substr(resource.rfind('/') + 1);
  return absl::StrCat("gpulet-", tail, ".sock");
}

int SlicesOf(const state::DeviceRecord& d, const config::Config& config) {
  if (!d.gpu.memory_total_bytes) return 0;
  uint64_t mib = *d.gpu.memory_total_bytes / (1024 * 1024);
  return static_cast<int>(mib / static_cast<uint64_t>(config.sharing.memory_slices.slice_mib));
}

const state::DeviceRecord* FindByBase(const state::Snapshot& snap, const std::string& base,
                                      size_t* pos) {
  for (size_t i = 0; i < snap.devices.size(); ++i) {
    if (BaseId(snap.devices[i]) == base) {
      *pos = i;
      return &snap.devices[i];
    }
  }
  return nullptr;
}

// `root` joined with the absolute `path` and cleaned as Go's filepath.Join does (NVIDIA's
// DeviceSpec host path): "/" + "/dev/nvidia0" is "/dev/nvidia0", "/run/x/" + "/dev/a" is
// "/run/x/dev/a"; empty and "." parts go, ".." removes the part before it.
std::string JoinPath(const std::string& root, const std::string& path) {
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(absl::StrCat(root, "/", path), '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.emplace_back(part);
  }
  return absl::StrCat("/", absl::StrJoin(parts, "/"));
}

}  // namespace

std::string CdiAnnotationKey(const std::string& prefix, const std::string& resource,
                             const std::vector<std::string>& ids) {
  // FNV-1a over the IDs: stable across restarts, so the same answer has the same key.
  uint64_t hash = 1469598103934665603ull;
  for (const std::string& id : ids) {
    for (unsigned char c : id + ",") {
      hash ^= c;
      hash *= 1099511628211ull;
    }
  }
  std::string name = "gpulet_";
  for (char c : resource.substr(0, 32)) {
    name.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_');
  }
  absl::StrAppend(&name, "_", absl::Hex(hash, absl::kZeroPad16));
  return absl::StrCat(prefix, name);
}

namespace {

// Whether the device plugin serves GPU `d` at all: a GPU offered to DRA (dra.gpus) is not,
// so that no GPU can be allocated twice, once by each.
bool PluginServes(const state::DeviceRecord& d, const config::Config& config) {
  return !(d.gpu.index && config.DraOffers(*d.gpu.index, d.gpu.uuid));
}

bool AnyMigEnabled(const config::Config& config, const state::Snapshot* snap) {
  if (snap == nullptr) return false;
  for (const state::DeviceRecord& d : snap->devices) {
    if (d.gpu.mig_enabled && PluginServes(d, config)) return true;
  }
  return false;
}

// "nvidia.com" for resourceName "nvidia.com/gpu": the domain of the MIG resources.
std::string ResourceDomain(const config::Config& config) {
  const std::string& name = config.resource_name;
  size_t slash = name.find('/');
  return slash == std::string::npos ? "nvidia.com" : name.substr(0, slash);
}

// Whether whole GPU `d` is advertised by a kGpu or kMemorySlice resource: with a MIG
// strategy, a GPU with MIG enabled is served by its MIG devices instead.
bool ServedWhole(const state::DeviceRecord& d, const config::Config& config) {
  if (!PluginServes(d, config)) return false;
  return config.plugin.mig_strategy == config::MigStrategy::kNone || !d.gpu.mig_enabled;
}

}  // namespace

std::vector<ResourceSpec> ResourcesFor(const config::Config& config, const state::Snapshot* snap) {
  std::vector<ResourceSpec> out;
  std::vector<std::string> names = config.AdvertisedResources();
  const config::MigStrategy mig = config.plugin.mig_strategy;
  if (mig == config::MigStrategy::kSingle && AnyMigEnabled(config, snap)) {
    out.push_back({names[0], SocketFor(names[0]), ResourceKind::kMig, ""});
  } else {
    out.push_back({names[0], SocketFor(names[0]), ResourceKind::kGpu, ""});
  }
  if (config.sharing.memory_slices.enabled) {
    const std::string& mem = config.sharing.memory_slices.resource_name;
    out.push_back({mem, SocketFor(mem), ResourceKind::kMemorySlice, ""});
  }
  if (mig == config::MigStrategy::kMixed && snap != nullptr) {
    std::set<std::string> profiles;
    for (const state::DeviceRecord& d : snap->devices) {
      if (!d.gpu.mig_enabled || !PluginServes(d, config)) continue;
      for (const gpu::MigDeviceInfo& m : d.gpu.mig_devices) {
        if (!m.profile.empty()) profiles.insert(m.profile);
      }
    }
    for (const std::string& profile : profiles) {
      std::string name = absl::StrCat(ResourceDomain(config), "/mig-", profile);
      out.push_back({name, SocketFor(name), ResourceKind::kMig, profile});
    }
  }
  return out;
}

absl::Status MigLayoutError(const config::Config& config, const state::Snapshot& snap) {
  if (config.plugin.mig_strategy != config::MigStrategy::kSingle || !AnyMigEnabled(config, &snap)) {
    return absl::OkStatus();
  }
  std::vector<std::string> without, empty;
  std::map<std::string, std::vector<std::string>> profiles;  // profile → GPUs
  for (const state::DeviceRecord& d : snap.devices) {
    if (!d.gpu.in_nvml || !PluginServes(d, config)) continue;
    std::string gpu = d.gpu.index ? absl::StrCat(*d.gpu.index) : d.gpu.bus_id;
    if (!d.gpu.mig_enabled) {
      without.push_back(gpu);
      continue;
    }
    if (d.gpu.mig_devices.empty()) empty.push_back(gpu);
    for (const gpu::MigDeviceInfo& m : d.gpu.mig_devices) {
      std::vector<std::string>& on = profiles[m.profile];
      if (on.empty() || on.back() != gpu) on.push_back(gpu);
    }
  }
  const char* fix =
      "; give every GPU MIG with one profile (e.g. nvidia-smi mig or mig-parted "
      "all-1g.18gb), or set plugin.migStrategy to mixed";
  if (!without.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plugin.migStrategy single: all GPUs on the node must have the same MIG mode, but GPU ",
        absl::StrJoin(without, ", "), " has MIG disabled while others have it enabled", fix));
  }
  if (!empty.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("plugin.migStrategy single: GPU ",
                                                      absl::StrJoin(empty, ", "),
                                                      " has MIG enabled but no MIG devices", fix));
  }
  if (profiles.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [profile, gpus] : profiles) {
      parts.push_back(absl::StrCat(profile, " on GPU ", absl::StrJoin(gpus, ", ")));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "plugin.migStrategy single: more than one MIG device type present on the node (",
        absl::StrJoin(parts, "; "), ")", fix));
  }
  return absl::OkStatus();
}

std::vector<AdvertisedDevice> AdvertisedDevices(const ResourceSpec& resource,
                                                const config::Config& config,
                                                const state::Snapshot& snap) {
  std::vector<AdvertisedDevice> out;
  const int replicas = std::max(config.sharing.time_slicing.replicas, 1);
  if (resource.kind == ResourceKind::kMig) {
    if (!MigLayoutError(config, snap).ok()) return out;
    for (size_t i = 0; i < snap.devices.size(); ++i) {
      const state::DeviceRecord& d = snap.devices[i];
      if (!d.gpu.mig_enabled || !PluginServes(d, config)) continue;
      for (size_t m = 0; m < d.gpu.mig_devices.size(); ++m) {
        const gpu::MigDeviceInfo& mig = d.gpu.mig_devices[m];
        if (!resource.mig_profile.empty() && mig.profile != resource.mig_profile) continue;
        const bool healthy = d.MigHealthy(mig.gpu_instance_id);
        for (int k = 0; k < replicas; ++k) {
          std::string id = replicas <= 1 ? mig.uuid : state::ReplicaDeviceId(mig.uuid, k);
          out.push_back({std::move(id), i, healthy, d.gpu.numa_node, static_cast<int>(m)});
        }
      }
    }
    return out;
  }
  for (size_t i = 0; i < snap.devices.size(); ++i) {
    const state::DeviceRecord& d = snap.devices[i];
    if (!ServedWhole(d, config)) continue;
    // A GPU serves slices or whole-GPU requests, never both (sharing.memorySlices.gpus).
    if ((resource.kind == ResourceKind::kMemorySlice) !=
        config.SlicesOffer(d.gpu.index, d.gpu.uuid)) {
      continue;
    }
    bool healthy = d.health.state != state::HealthState::kUnhealthy;
    std::string base = BaseId(d);
    int count = 1;
    if (resource.kind == ResourceKind::kMemorySlice) {
      count = SlicesOf(d, config);
    } else if (replicas > 1) {
      count = replicas;
    }
    for (int k = 0; k < count; ++k) {
      std::string id = resource.kind == ResourceKind::kMemorySlice
                           ? state::MemorySliceDeviceId(base, k)
                           : (replicas <= 1 ? base : state::ReplicaDeviceId(base, k));
      out.push_back({std::move(id), i, healthy, d.gpu.numa_node, -1});
    }
  }
  return out;
}

bool AnswersNameCdiDevices(const config::Config& config) {
  const std::vector<config::DeviceListStrategy>& on = config.plugin.device_list_strategy;
  return std::any_of(on.begin(), on.end(), [](config::DeviceListStrategy s) {
    return s == config::DeviceListStrategy::kCdiAnnotations ||
           s == config::DeviceListStrategy::kCdiCri;
  });
}

v1beta1::ListAndWatchResponse ToListAndWatch(const std::vector<AdvertisedDevice>& devices) {
  v1beta1::ListAndWatchResponse response;
  for (const AdvertisedDevice& a : devices) {
    v1beta1::Device* d = response.add_devices();
    d->set_id(a.id);
    d->set_health(a.healthy ? "Healthy" : "Unhealthy");
    if (a.numa_node >= 0) d->mutable_topology()->add_nodes()->set_id(a.numa_node);
  }
  return response;
}

absl::StatusOr<v1beta1::ContainerAllocateResponse> AllocateContainer(
    const ResourceSpec& resource, const config::Config& config, const state::Snapshot& snap,
    const ControlNodes& control, const std::vector<std::string>& ids) {
  if (ids.empty()) return absl::InvalidArgumentError("Allocate request names no devices");
  if (resource.kind == ResourceKind::kGpu && config.sharing.time_slicing.replicas > 1 &&
      config.sharing.time_slicing.fail_requests_greater_than_one && ids.size() > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "request for ", ids.size(), " ", resource.name,
        " replicas refused: sharing.timeSlicing.failRequestsGreaterThanOne is set, so a "
        "container may ask for at most 1 (replicas give no more GPU, only a time share)"));
  }
  std::vector<AdvertisedDevice> advertised = AdvertisedDevices(resource, config, snap);
  std::map<std::string, const AdvertisedDevice*> by_id;
  for (const AdvertisedDevice& a : advertised) by_id[a.id] = &a;
  std::vector<std::string> unknown, unhealthy;
  // Physical devices, first-use order, de-duplicated: (GPU, MIG device or -1).
  std::vector<std::pair<size_t, int>> gpus;
  for (const std::string& id : ids) {
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      unknown.push_back(id);
      continue;
    }
    if (!it->second->healthy) unhealthy.push_back(id);
    std::pair<size_t, int> device{it->second->gpu, it->second->mig};
    if (std::find(gpus.begin(), gpus.end(), device) == gpus.end()) gpus.push_back(device);
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown ", resource.name,
                                                   " device IDs: ", absl::StrJoin(unknown, ", "),
                                                   " (this node advertises ", advertised.size(),
                                                   " devices; the GPU may have been "
                                                   "removed or the sharing config changed)"));
  }
  if (!unhealthy.empty()) {
    std::vector<std::string> reasons;
    for (const std::string& id : unhealthy) {
      const AdvertisedDevice& a = *by_id[id];
      const state::DeviceRecord& d = snap.devices[a.gpu];
      reasons.push_back(
          absl::StrCat(id, " (",
                       a.mig < 0 ? d.health.reason
                                 : d.MigUnhealthyReason(d.gpu.mig_devices[a.mig].gpu_instance_id),
                       ")"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "unhealthy ", resource.name, " devices requested: ", absl::StrJoin(reasons, "; ")));
  }
  if (resource.kind == ResourceKind::kMemorySlice && gpus.size() > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", ids.size(), " ", resource.name, " units requested span ", gpus.size(),
        " GPUs; a container's memory slices must come "
        "from one GPU (the kubelet follows gpulet's preferred allocation, which packs them)"));
  }

  // The IDs the container runtime understands: UUIDs or NVML indexes; for a MIG device its
  // MIG UUID or "<GPU index>:<MIG index>", as NVIDIA's plugin and nvidia-ctk name them.
  const bool by_index = config.plugin.device_id_strategy == config::DeviceIdStrategy::kIndex;
  std::vector<std::string> runtime_ids;
  for (const auto& [g, m] : gpus) {
    const gpu::Gpu& gpu = snap.devices[g].gpu;
    if (m >= 0) {
      const gpu::MigDeviceInfo& mig = gpu.mig_devices[m];
      runtime_ids.push_back(by_index && gpu.index ? absl::StrCat(*gpu.index, ":", mig.index)
                                                  : mig.uuid);
    } else if (by_index && gpu.index) {
      runtime_ids.push_back(absl::StrCat(*gpu.index));
    } else {
      runtime_ids.push_back(gpu.uuid);
    }
  }

  // The strategies are a set, as in NVIDIA's plugin: the answer never depends on the order
  // the config lists them in. The steps below follow NVIDIA's getAllocateResponse
  // (k8s-device-plugin v0.20.0, internal/plugin/server.go): CDI first, then, unless every
  // strategy is a CDI one, the variable, the volume mounts (which own the variable when both
  // are on) and the device specs.
  const std::set<config::DeviceListStrategy> on(config.plugin.device_list_strategy.begin(),
                                                config.plugin.device_list_strategy.end());
  const bool envvar = on.count(config::DeviceListStrategy::kEnvvar) > 0;
  const bool volume_mounts = on.count(config::DeviceListStrategy::kVolumeMounts) > 0;
  const bool cdi_annotations = on.count(config::DeviceListStrategy::kCdiAnnotations) > 0;
  const bool cdi_cri = on.count(config::DeviceListStrategy::kCdiCri) > 0;

  v1beta1::ContainerAllocateResponse r;
  if (cdi_annotations || cdi_cri) {
    std::vector<std::string> names;
    for (const std::string& id : runtime_ids) {
      names.push_back(absl::StrCat(config.plugin.cdi_kind, "=", id));
    }
    if (cdi_annotations) {
      (*r.mutable_annotations())[CdiAnnotationKey(config.plugin.cdi_annotation_prefix,
                                                  resource.name, ids)] = absl::StrJoin(names, ",");
    }
    if (cdi_cri) {
      for (const std::string& name : names) r.add_cdi_devices()->set_name(name);
    }
  }
  if (resource.kind == ResourceKind::kMemorySlice) {
    // The container's limit, for applications that size themselves from a variable. Set
    // whatever the strategies, as NVIDIA sets NVIDIA_GDS and its other feature variables
    // before it stops for a CDI-only answer; so are the enforcement library's mounts and
    // variables, which no CDI device of a whole GPU carries.
    (*r.mutable_envs())["GPULET_MEMORY_LIMIT_MIB"] =
        absl::StrCat(static_cast<uint64_t>(ids.size()) *
                     static_cast<uint64_t>(config.sharing.memory_slices.slice_mib));
    if (config.sharing.memory_slices.enforce) {
      vram::ContainerEdits edits = vram::EnforcementEdits(config.sharing.memory_slices.host_dir,
                                                          vram::AllocationDirName(ids));
      for (const auto& [key, value] : edits.env) (*r.mutable_envs())[key] = value;
      for (const vram::ContainerEdits::Mount& m : edits.mounts) {
        v1beta1::Mount* mount = r.add_mounts();
        mount->set_container_path(m.container_path);
        mount->set_host_path(m.host_path);
        mount->set_read_only(m.read_only);
      }
    }
  }
  // CDI alone: the runtime injects everything from the spec, so no variable, mounts or
  // device specs, passDeviceSpecs or not.
  if (!envvar && !volume_mounts) return r;

  if (envvar) (*r.mutable_envs())[kVisibleDevices] = absl::StrJoin(runtime_ids, ",");
  if (volume_mounts) {
    // The toolkit reads the device list from the names of these mounts. NVIDIA leaves
    // ReadOnly unset (false); so does gpulet.
    (*r.mutable_envs())[kVisibleDevices] = kVolumeMountDir;
    for (const std::string& id : runtime_ids) {
      v1beta1::Mount* m = r.add_mounts();
      m->set_host_path("/dev/null");
      m->set_container_path(absl::StrCat(kVolumeMountDir, "/", id));
    }
  }
  if (config.plugin.pass_device_specs) {
    const std::string& root = config.plugin.dev_root;
    auto add_spec = [&r, &root](const std::string& path) {
      v1beta1::DeviceSpec* d = r.add_devices();
      d->set_container_path(path);
      d->set_host_path(JoinPath(root, path));
      d->set_permissions("rw");
    };
    // The control nodes that exist first, then the GPUs' nodes, as NVIDIA's GetDevicePaths.
    for (const std::string& path : control.paths) add_spec(path);
    if (resource.kind == ResourceKind::kMig) {
      // The parent GPU's node and the MIG device's two capability nodes, per device.
      std::set<std::string> seen;
      for (const auto& [g, m] : gpus) {
        const gpu::Gpu& gpu = snap.devices[g].gpu;
        if (!gpu.minor) continue;
        const gpu::MigDeviceInfo& mig = gpu.mig_devices[m];
        std::vector<std::string> paths{gpu.DeviceNode()};
        for (std::string& cap : node::MigCapDevicePaths(
                 control.mig_minors, *gpu.minor, mig.gpu_instance_id, mig.compute_instance_id)) {
          paths.push_back(std::move(cap));
        }
        for (const std::string& path : paths) {
          if (seen.insert(path).second) add_spec(path);
        }
      }
    } else if (resource.kind == ResourceKind::kGpu) {
      // One node per requested ID, as NVIDIA (each replica carries its GPU's paths): two
      // replicas of GPU 1 give /dev/nvidia1 twice. The kubelet keeps the first spec of a
      // container path and skips the rest.
      std::set<std::string> seen;
      for (const std::string& id : ids) {
        if (!seen.insert(id).second) continue;
        const gpu::Gpu& gpu = snap.devices[by_id[id]->gpu].gpu;
        if (gpu.minor) add_spec(gpu.DeviceNode());
      }
    } else {
      // Memory slices, gpulet's own: the GPU's node once.
      for (const auto& [g, m] : gpus) {
        const gpu::Gpu& gpu = snap.devices[g].gpu;
        if (gpu.minor) add_spec(gpu.DeviceNode());
      }
    }
  }
  return r;
}

std::vector<std::string> PreferredAllocation(const ResourceSpec& resource,
                                             const config::Config& config,
                                             const state::Snapshot& snap,
                                             const std::vector<std::string>& available,
                                             const std::vector<std::string>& must_include,
                                             int size) {
  std::vector<std::string> chosen = must_include;
  std::set<std::string> taken(must_include.begin(), must_include.end());
  if (static_cast<int>(chosen.size()) >= size) {
    chosen.resize(static_cast<size_t>(size));
    return chosen;
  }
  // Group the free IDs by physical GPU, keeping the kubelet's order within a GPU.
  std::map<std::string, std::vector<std::string>> free_by_gpu;
  std::vector<std::string> gpu_order;
  for (const std::string& id : available) {
    if (taken.count(id)) continue;
    std::string phys = state::PhysicalId(id);
    if (!free_by_gpu.count(phys)) gpu_order.push_back(phys);
    free_by_gpu[phys].push_back(id);
  }
  auto numa_of = [&snap](const std::string& phys) {
    size_t pos = 0;
    const state::DeviceRecord* d = FindByBase(snap, phys, &pos);
    return d != nullptr ? d->gpu.numa_node : -1;
  };
  int need = size - static_cast<int>(chosen.size());

  if (resource.kind == ResourceKind::kMemorySlice) {
    // Pack: all units from the GPU whose free units fit most tightly (best fit), so large
    // requests later still find room. Must-include units fix the GPU.
    std::string fixed = must_include.empty() ? "" : state::PhysicalId(must_include.front());
    std::string best;
    size_t best_free = SIZE_MAX;
    for (const std::string& phys : gpu_order) {
      size_t free = free_by_gpu[phys].size();
      if (!fixed.empty() && phys != fixed) continue;
      if (static_cast<int>(free) >= need && free < best_free) {
        best = phys;
        best_free = free;
      }
    }
    if (best.empty() && !gpu_order.empty()) best = fixed.empty() ? gpu_order.front() : fixed;
    for (const std::string& id : free_by_gpu[best]) {
      if (need-- <= 0) break;
      chosen.push_back(id);
    }
  } else if (config.sharing.time_slicing.replicas > 1) {
    // Spread: one replica per GPU per round, least-used GPU (most free replicas) first.
    std::vector<std::string> order = gpu_order;
    std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
      return free_by_gpu[a].size() > free_by_gpu[b].size();
    });
    std::map<std::string, size_t> next;
    while (need > 0) {
      bool progressed = false;
      for (const std::string& phys : order) {
        if (need <= 0) break;
        size_t& n = next[phys];
        if (n < free_by_gpu[phys].size()) {
          chosen.push_back(free_by_gpu[phys][n++]);
          --need;
          progressed = true;
        }
      }
      if (!progressed) break;
    }
  } else {
    // Whole GPUs: prefer a NUMA node that can satisfy the whole request (the one with the
    // most free GPUs, or the must-include's node), then fill from the rest.
    std::map<int, std::vector<std::string>> by_numa;
    for (const std::string& phys : gpu_order) by_numa[numa_of(phys)].push_back(phys);
    int preferred = 0;
    if (!must_include.empty()) {
      preferred = numa_of(state::PhysicalId(must_include.front()));
    } else {
      // The smallest node that fits the whole request keeps bigger nodes free for bigger
      // requests; when none fits, the node with the most free GPUs.
      size_t best = 0;
      bool best_fits = false;
      for (const auto& [node, list] : by_numa) {
        bool fits = static_cast<int>(list.size()) >= need;
        bool better = best == 0 || (fits && !best_fits) ||
                      (fits && best_fits && list.size() < best) ||
                      (!fits && !best_fits && list.size() > best);
        if (better) {
          preferred = node;
          best = list.size();
          best_fits = fits;
        }
      }
    }
    std::vector<std::string> order = by_numa[preferred];
    for (const std::string& phys : gpu_order) {
      if (std::find(order.begin(), order.end(), phys) == order.end()) order.push_back(phys);
    }
    for (const std::string& phys : order) {
      if (need <= 0) break;
      chosen.push_back(free_by_gpu[phys].front());
      --need;
    }
  }
  return chosen;
}

absl::StatusOr<std::string> SliceFiles::LocalDir(const std::string& host_dir) const {
  absl::StatusOr<std::string> local = HostFs(host_root).Resolve(host_dir);
  if (!local.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("sharing.memorySlices.hostDir ", host_dir,
                                                      " cannot be reached under ", host_root, ": ",
                                                      local.status().message()));
  }
  return local;
}

}  // namespace gpulet::plugin
