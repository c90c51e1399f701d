#include "cdi/generator.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nvml/nvml_loader.h"

namespace gpulet::cdi {
namespace {

// Read-only bind mount options, as nvidia-ctk uses them: no device files or setuid bits
// through the mount, and no propagation back to the host.
const std::vector<std::string>& MountOptions() {
  static const auto* kOptions =
      new std::vector<std::string>{"ro", "nosuid", "nodev", "rbind", "rprivate"};
  return *kOptions;
}

// Device nodes every CUDA container needs besides its GPUs, in nvidia-ctk's order.
constexpr const char* kControlNodes[] = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                         "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};

// Driver utilities worth having in a GPU container (nvidia-smi above all).
constexpr const char* kBinaries[] = {"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
                                     "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"};
constexpr const char* kBinDirs[] = {"/usr/local/bin", "/usr/bin", "/usr/local/sbin",
                                    "/usr/sbin",      "/bin",     "/sbin"};

// A directory tree on this machine (the driver root or the dev root) and how its paths look
// to the container runtime on the host.
class Tree {
 public:
  Tree(const std::string& local_root, const HostFs& host)
      : fs_(local_root.empty() ? host.root() : local_root),
        host_prefix_(HostPrefix(fs_.root(), host.root())) {}

  const HostFs& fs() const { return fs_; }

  // The path inside the tree that `path` resolves to ("/usr/local/glibc/lib/x" ->
  // "/usr/local/glibc/usr/lib/x"), or nullopt when nothing is there.
  std::optional<std::string> Find(absl::string_view path) const {
    if (!fs_.Exists(path)) return std::nullopt;
    absl::StatusOr<std::string> local = fs_.Resolve(path);
    if (!local.ok()) return std::nullopt;
    if (fs_.is_real_root()) return *local;
    std::string rel = local->substr(fs_.root().size());
    return rel.empty() ? "/" : rel;
  }

  // The host's name for a path inside the tree.
  std::string HostPath(absl::string_view in_tree) const {
    return host_prefix_ == "/" ? std::string(in_tree) : JoinPath(host_prefix_, in_tree);
  }

  const std::string& host_prefix() const { return host_prefix_; }

 private:
  // How the runtime on the host names the tree's root: the host root itself is "/", a
  // directory inside it loses the host-root prefix, anything else is already a host path.
  static std::string HostPrefix(const std::string& local_root, const std::string& host_root) {
    if (host_root == "/") return local_root;
    if (local_root == host_root) return "/";
    if (absl::StartsWith(local_root, host_root + "/")) {
      return local_root.substr(host_root.size());
    }
    return local_root;
  }

  HostFs fs_;
  std::string host_prefix_;
};

std::string Dirname(absl::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos || slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

Mount BindMount(const Tree& tree, const std::string& in_tree) {
  return Mount{tree.HostPath(in_tree), in_tree, "", MountOptions()};
}

// The GPU's device node as a CDI entry, or nullopt when the node is missing.
std::optional<DeviceNode> NodeFor(const Tree& dev, const std::string& path) {
  std::optional<std::string> found = dev.Find(path);
  if (!found) return std::nullopt;
  DeviceNode node;
  node.path = path;
  std::string host_path = dev.HostPath(*found);
  // hostPath is left out when it says nothing new: that keeps the spec expressible in
  // cdiVersion 0.4.0 and below when nothing else needs 0.5.0.
  if (host_path != path) node.host_path = host_path;
  return node;
}

std::string ShortName(const gpu::Gpu& gpu) {
  return absl::StrCat(gpu.bus_id.empty() ? "?" : gpu.bus_id, " (",
                      gpu.name.empty() ? "unknown GPU" : gpu.name, ")");
}

// The driver's user-space libraries: every lib*.so.<version> (and vdpau/ beneath) in the
// library directories the NVML loader knows, once per real file.
void FindLibraries(const Tree& driver, const std::string& version, std::vector<std::string>* libs,
                   std::vector<std::string>* searched) {
  std::set<std::string> seen_dirs, seen_files;
  std::string suffix = absl::StrCat(".so.", version);
  for (const nvml::NvmlSearchLocation& loc : nvml::NvmlSearchLocations()) {
    const std::string& dir = loc.host_dir;
    // The loader's own search, the GPU operator's driver root and a pod's mount point are
    // not places on a driver root: the operator case is --driver-root /run/nvidia/driver.
    if (dir.empty() || absl::StartsWith(dir, "/run/nvidia/driver") || dir == "/nvidia-libs") {
      continue;
    }
    searched->push_back(dir);
    for (const std::string& candidate : {dir, JoinPath(dir, "vdpau")}) {
      std::optional<std::string> real_dir = driver.Find(candidate);
      if (!real_dir || !driver.fs().IsDirectory(*real_dir)) continue;
      if (!seen_dirs.insert(*real_dir).second) continue;
      absl::StatusOr<std::vector<std::string>> names = driver.fs().ListDir(*real_dir);
      if (!names.ok()) continue;
      for (const std::string& name : *names) {
        if (!absl::StartsWith(name, "lib") || !absl::EndsWith(name, suffix)) continue;
        std::optional<std::string> real = driver.Find(JoinPath(*real_dir, name));
        if (!real || driver.fs().IsDirectory(*real)) continue;
        if (seen_files.insert(*real).second) libs->push_back(*real);
      }
    }
  }
}

// Symlinks beside the driver's libraries that name one of them and look like a soname
// (lib*.so.<number>), as (link path, target file name) pairs, sorted.
std::vector<std::pair<std::string, std::string>> SonameLinks(const Tree& driver,
                                                             const std::vector<std::string>& libs) {
  std::set<std::string> lib_set(libs.begin(), libs.end());
  std::set<std::string> dirs;
  for (const std::string& lib : libs) dirs.insert(Dirname(lib));
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& dir : dirs) {
    absl::StatusOr<std::vector<std::string>> names = driver.fs().ListDir(dir);
    if (!names.ok()) continue;
    for (const std::string& name : *names) {
      size_t so = name.rfind(".so.");
      if (!absl::StartsWith(name, "lib") || so == std::string::npos) continue;
      absl::string_view number = absl::string_view(name).substr(so + 4);
      if (number.empty() || !std::all_of(number.begin(), number.end(), ::isdigit)) continue;
      std::string path = JoinPath(dir, name);
      absl::StatusOr<std::string> target = driver.fs().ReadLink(path);
      if (!target.ok() || Dirname(*target) != dir || !lib_set.count(*target)) continue;
      out.emplace_back(path, target->substr(dir.size() + 1));
    }
  }
  return out;
}

// Whether the hook program at `host_path` knows the hook `name`: its subcommand names are
// strings in the program file. An unreadable program knows nothing beyond the basics.
bool HookProgramKnows(const HostFs& host, const std::string& host_path, absl::string_view name) {
  absl::StatusOr<std::string> program = host.ReadFile(host_path, size_t{256} << 20);
  return program.ok() && absl::StrContains(*program, name);
}

}  // namespace

absl::StatusOr<NameStrategy> ParseNameStrategy(absl::string_view text) {
  if (text == "index") return NameStrategy::kIndex;
  if (text == "uuid") return NameStrategy::kUuid;
  if (text == "both") return NameStrategy::kBoth;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device name strategy \"", text, "\" (use index, uuid or both)"));
}

const std::vector<std::string>& HookProgramCandidates() {
  static const auto* kCandidates =
      new std::vector<std::string>{"/usr/local/bin/nvidia-cdi-hook", "/usr/bin/nvidia-cdi-hook",
                                   "/usr/local/bin/nvidia-ctk", "/usr/bin/nvidia-ctk"};
  return *kCandidates;
}

absl::StatusOr<GeneratedSpec> GenerateSpec(const gpu::Inventory& inventory, const HostFs& host,
                                           const GeneratorOptions& options) {
  if (absl::Status st = ValidateKind(options.kind); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--kind: ", st.message()));
  }
  if (!options.hook_path.empty() && options.hook_path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("hook path \"", options.hook_path, "\" must be an absolute host path"));
  }
  if (!inventory.nvml_status.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot generate a CDI spec: the GPUs' identities (index, UUID, minor number) come "
        "from NVML, which is not usable: ",
        inventory.nvml_status.message(), "\nRun `gpulet doctor` for the cause."));
  }
  GeneratedSpec out;
  std::vector<const gpu::Gpu*> gpus;
  for (const gpu::Gpu& gpu : inventory.gpus) {
    if (gpu.in_nvml && gpu.index && gpu.minor && !gpu.uuid.empty()) {
      gpus.push_back(&gpu);
    } else if (gpu.on_pci) {
      out.warnings.push_back(
          absl::StrCat("GPU ", ShortName(gpu),
                       " is on the PCI bus but NVML did not identify it (kernel "
                       "driver: ",
                       gpu.kernel_driver.empty() ? "none" : gpu.kernel_driver,
                       gpu.nvml_error.empty() ? "" : absl::StrCat("; ", gpu.nvml_error),
                       "); it is left out of the spec. Run `gpulet doctor`."));
    }
  }
  if (gpus.empty()) {
    return absl::FailedPreconditionError(
        "cannot generate a CDI spec: NVML identified no GPU on this node (a spec needs at "
        "least one device). Run `gpulet list` and `gpulet doctor`.");
  }
  out.driver_version = !inventory.system.driver_version.empty() ? inventory.system.driver_version
                                                                : inventory.driver.version;
  if (out.driver_version.empty()) {
    return absl::FailedPreconditionError(
        "cannot generate a CDI spec: the driver version is unknown (NVML did not report it "
        "and /proc/driver/nvidia/version is missing), so the driver's libraries cannot be "
        "told apart. Check that the nvidia kernel module is loaded.");
  }

  Tree driver(options.driver_root, host);
  Tree dev(options.dev_root, host);
  Spec& spec = out.spec;
  spec.kind = options.kind;

  // Per-GPU devices.
  std::vector<std::pair<const gpu::Gpu*, DeviceNode>> usable;
  for (const gpu::Gpu* gpu : gpus) {
    std::string path = absl::StrCat("/dev/nvidia", *gpu->minor);
    std::optional<DeviceNode> node = NodeFor(dev, path);
    if (!node) {
      LeftOutDevice left{
          gpu->uuid, std::nullopt, gpu->uuid,
          absl::StrCat("its device node ", path, " is missing under ", dev.fs().Describe(path)),
          absl::StrCat("run `nvidia-modprobe -c ", *gpu->minor,
                       "`; on Talos the toolkit extension's udev rule does this")};
      out.warnings.push_back(absl::StrCat("GPU ", *gpu->index, " ", ShortName(*gpu), ": ",
                                          left.reason,
                                          ", so it is left out of the spec. The node appears "
                                          "when the nvidia module has bound the GPU (",
                                          left.action, ")."));
      out.left_out.push_back(std::move(left));
      continue;
    }
    usable.emplace_back(gpu, *node);
  }
  // Two GPUs with one minor would share /dev/nvidiaN: a container asking for one would get
  // the other. The driver never does this; a broken sysfs or NVML answer does.
  for (size_t i = 0; i < usable.size(); ++i) {
    for (size_t j = i + 1; j < usable.size(); ++j) {
      if (*usable[i].first->minor == *usable[j].first->minor) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot generate a CDI spec: GPU ", *usable[i].first->index, " ",
            ShortName(*usable[i].first), " and GPU ", *usable[j].first->index, " ",
            ShortName(*usable[j].first), " both report device minor ", *usable[i].first->minor,
            " (/dev/nvidia", *usable[i].first->minor,
            "), so neither can be given to a container alone. Reload the nvidia module or "
            "reboot the node, then check `gpulet list`."));
      }
    }
  }
  if (usable.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot generate a CDI spec: no GPU has its /dev/nvidiaN node under ", dev.fs().root(),
        ". Load the nvidia modules, or pass --dev-root where /dev lives"));
  }
  auto add_device = [&](const std::string& name, std::vector<DeviceNode> nodes) {
    Device d;
    d.name = name;
    d.edits.device_nodes = std::move(nodes);
    spec.devices.push_back(std::move(d));
  };
  if (options.names != NameStrategy::kUuid) {
    for (const auto& [gpu, node] : usable) add_device(absl::StrCat(*gpu->index), {node});
  }
  if (options.names != NameStrategy::kIndex) {
    for (const auto& [gpu, node] : usable) add_device(gpu->uuid, {node});
  }
  // MIG devices, named as nvidia-ctk names them ("<GPU index>:<MIG index>" and the MIG
  // UUID): the parent GPU's node plus the capability nodes of the GPU and compute instance.
  for (const auto& [gpu, node] : usable) {
    for (const gpu::MigDeviceInfo& mig : gpu->mig_devices) {
      std::vector<std::string> caps = node::MigCapDevicePaths(
          inventory.driver.mig_minors, *gpu->minor, mig.gpu_instance_id, mig.compute_instance_id);
      std::vector<DeviceNode> nodes{node};
      for (const std::string& cap : caps) {
        if (std::optional<DeviceNode> n = NodeFor(dev, cap)) nodes.push_back(*n);
      }
      if (caps.empty() || nodes.size() != caps.size() + 1) {
        LeftOutDevice left{
            gpu->uuid, mig.gpu_instance_id, mig.uuid,
            caps.empty() ? "/proc/driver/nvidia-caps/mig-minors does not list its capabilities"
                         : absl::StrCat("its capability nodes (", absl::StrJoin(caps, ", "),
                                        ") are missing under ", dev.fs().root()),
            absl::StrCat("`nvidia-modprobe -f /proc/driver/nvidia/capabilities/gpu", *gpu->minor,
                         "/mig/gi", mig.gpu_instance_id,
                         "/access` creates them (the toolkit does this on a MIG node)")};
        out.warnings.push_back(absl::StrCat(
            "GPU ", *gpu->index, " MIG device ", mig.index, " (", mig.profile, ", ", mig.uuid,
            ") is left out of the spec: ", left.reason, ". ", left.action, "."));
        out.left_out.push_back(std::move(left));
        continue;
      }
      if (options.names != NameStrategy::kUuid) {
        add_device(absl::StrCat(*gpu->index, ":", mig.index), nodes);
      }
      if (options.names != NameStrategy::kIndex) add_device(mig.uuid, nodes);
    }
  }
  if (options.all_device) {
    std::vector<DeviceNode> all;
    for (const auto& [gpu, node] : usable) all.push_back(node);
    add_device("all", std::move(all));
  }

  // Spec-wide edits.
  ContainerEdits& edits = spec.edits;
  edits.env.push_back("NVIDIA_VISIBLE_DEVICES=void");
  for (const char* path : kControlNodes) {
    if (std::optional<DeviceNode> node = NodeFor(dev, path)) {
      edits.device_nodes.push_back(*node);
    } else if (absl::string_view(path) == "/dev/nvidiactl" ||
               absl::string_view(path) == "/dev/nvidia-uvm") {
      out.warnings.push_back(
          absl::StrCat(path, " is missing under ", dev.fs().Describe(path),
                       ": CUDA programs will fail in containers until it exists (load the ",
                       absl::string_view(path) == "/dev/nvidiactl" ? "nvidia" : "nvidia_uvm",
                       " module; `nvidia-modprobe -c 0 -u` creates the nodes)."));
    }
  }

  std::vector<std::string> libs, searched;
  FindLibraries(driver, out.driver_version, &libs, &searched);
  if (libs.empty()) {
    out.warnings.push_back(absl::StrCat(
        "no driver libraries (lib*.so.", out.driver_version, ") found under driver root ",
        driver.fs().root(), " in ", absl::StrJoin(searched, ", "),
        "; containers get device nodes but no CUDA or NVML. Pass --driver-root where the "
        "driver's user-space files are (GPU operator: /run/nvidia/driver)."));
  }
  std::vector<std::string> lib_dirs;
  std::string libcuda_dir;
  for (const std::string& lib : libs) {
    edits.mounts.push_back(BindMount(driver, lib));
    std::string dir = Dirname(lib);
    if (std::find(lib_dirs.begin(), lib_dirs.end(), dir) == lib_dirs.end()) {
      lib_dirs.push_back(dir);
    }
    if (lib.substr(dir.size() + 1) == absl::StrCat("libcuda.so.", out.driver_version)) {
      libcuda_dir = dir;
    }
  }
  std::set<std::string> seen_bins;
  for (const char* name : kBinaries) {
    for (const char* dir : kBinDirs) {
      std::optional<std::string> found = driver.Find(JoinPath(dir, name));
      if (!found || driver.fs().IsDirectory(*found)) continue;
      if (seen_bins.insert(*found).second) edits.mounts.push_back(BindMount(driver, *found));
      break;
    }
  }
  std::set<std::string> seen_fw;
  for (const char* base : {"/lib/firmware/nvidia", "/usr/lib/firmware/nvidia"}) {
    std::optional<std::string> dir = driver.Find(JoinPath(base, out.driver_version));
    if (!dir || !driver.fs().IsDirectory(*dir) || !seen_fw.insert(*dir).second) continue;
    absl::StatusOr<std::vector<std::string>> names = driver.fs().ListDir(*dir);
    if (!names.ok()) continue;
    for (const std::string& name : *names) {
      std::string file = JoinPath(*dir, name);
      if (!driver.fs().IsDirectory(file)) edits.mounts.push_back(BindMount(driver, file));
    }
  }

  // Hooks, only with a program that exists on the host.
  if (!options.hook_path.empty()) {
    out.hook_path = options.hook_path;
  } else {
    for (const std::string& candidate : HookProgramCandidates()) {
      if (host.Exists(candidate)) {
        out.hook_path = candidate;
        break;
      }
    }
  }
  if (out.hook_path.empty()) {
    if (!libs.empty()) {
      out.warnings.push_back(absl::StrCat(
          "neither nvidia-cdi-hook nor nvidia-ctk exists on the host (looked at ",
          absl::StrJoin(HookProgramCandidates(), ", "),
          "), so the spec has no hooks: containers get the libraries but no ld.so.cache "
          "entries for them. Install the NVIDIA container toolkit (Talos: the "
          "nvidia-container-toolkit-production extension), or set LD_LIBRARY_PATH=",
          absl::StrJoin(lib_dirs, ":"), " in the pod."));
    }
  } else if (!lib_dirs.empty()) {
    std::string program = out.hook_path.substr(out.hook_path.rfind('/') + 1);
    // nvidia-ctk takes hooks as a subcommand ("nvidia-ctk hook update-ldcache"); the
    // stand-alone nvidia-cdi-hook (and anything else given explicitly) takes them directly.
    std::vector<std::string> argv0 = {program};
    if (program == "nvidia-ctk") argv0.push_back("hook");
    auto hook = [&](std::vector<std::string> args) {
      Hook h;
      h.hook_name = "createContainer";
      h.path = out.hook_path;
      h.args = argv0;
      h.args.insert(h.args.end(), args.begin(), args.end());
      edits.hooks.push_back(std::move(h));
    };
    std::vector<std::string> links = {"create-symlinks"};
    if (!libcuda_dir.empty()) {
      // Programs linked against -lcuda look for libcuda.so, which the driver does not ship.
      links.push_back("--link");
      links.push_back(absl::StrCat("libcuda.so.1::", JoinPath(libcuda_dir, "libcuda.so")));
    }
    // The soname links (libnvidia-ml.so.1 -> libnvidia-ml.so.<version>) the driver's
    // installer made on the host: programs dlopen the soname, and only the versioned files
    // are mounted. update-ldcache makes them too, but only where ldconfig finds the files
    // it expects; recreating the host's own links does not depend on that.
    for (const auto& [link, target] : SonameLinks(driver, libs)) {
      links.push_back("--link");
      links.push_back(absl::StrCat(target, "::", link));
    }
    if (links.size() > 1) hook(std::move(links));
    // Newer hook programs know more hooks (nvidia-ctk adds them in this order). A hook the
    // program does not know stops every container at start, so each is emitted only when
    // the program on the host names it.
    if (HookProgramKnows(host, out.hook_path, "enable-cuda-compat")) {
      hook({"enable-cuda-compat", absl::StrCat("--host-driver-version=", out.driver_version)});
    }
    std::vector<std::string> args = {"update-ldcache"};
    for (const std::string& dir : lib_dirs) {
      args.push_back("--folder");
      args.push_back(dir);
    }
    hook(std::move(args));
    if (HookProgramKnows(host, out.hook_path, "disable-device-node-modification")) {
      hook({"disable-device-node-modification"});
    }
  }

  absl::StatusOr<Version> version = ChooseVersion(spec, options.cdi_version);
  if (!version.ok()) return version.status();
  spec.version = version->ToString();
  if (absl::Status st = ValidateSpec(spec); !st.ok()) {
    return absl::InternalError(
        absl::StrCat("generated spec is invalid (a gpulet bug): ", st.message()));
  }
  return out;
}

}  // namespace gpulet::cdi
