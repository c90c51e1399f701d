// The CDI spec generator: turns this node's GPUs and driver files into a CDI spec that a
// container runtime (containerd, CRI-O, podman) uses to give a container a GPU.
//
// For each GPU NVML identified it defines a device by index ("0") and/or by UUID
// ("GPU-…"), plus "all". A device brings its /dev/nvidiaN node; the spec-wide edits, applied
// whenever any of its devices is requested, bring the control nodes that exist
// (/dev/nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset), read-only bind mounts of
// the driver's user-space libraries (every lib*.so.<driver version> in the library
// directories the NVML loader knows, which covers Debian/Ubuntu, RHEL, the GPU operator and
// each Talos layout), its utility binaries and GSP firmware, NVIDIA_VISIBLE_DEVICES=void (so
// that an nvidia runtime inside does not inject a second time), and two hooks: one that
// creates the libcuda.so development link and one that refreshes the container's ld.so.cache
// for the library directories. Libraries are mounted file by file, never as a directory:
// a Talos library directory also holds Talos' own glibc, which must not reach a container.
//
// Hooks run on the host, so a hook whose program is missing there stops every GPU container
// at start ("fork/exec /usr/bin/nvidia-ctk: no such file or directory", Talos 1.13 before
// talos PR #13022). The generator therefore probes the host for nvidia-cdi-hook and
// nvidia-ctk, /usr/local/bin first (where Talos keeps them), and emits no hooks at all when
// neither exists, saying so in the warnings.
//
// Paths. The generator reads files through HostFs (under --host-root), but the spec holds
// paths as the runtime on the host sees them. `driver_root` and `dev_root` are directories
// on this machine (default: the host root) holding the driver's files and the /dev tree; a
// file found at <root>/usr/lib/x is written as hostPath "<root as a host path>/usr/lib/x"
// and containerPath "/usr/lib/x". A root inside the host root becomes a host path by
// dropping the host-root prefix (/host/run/nvidia/driver -> /run/nvidia/driver); a root
// elsewhere is taken to be a host path already. Symlinks are resolved inside their root,
// so Talos' /usr/local/glibc/lib -> usr/lib is mounted once, at its real place.
//
// Thread-safety: GenerateSpec keeps no state; it only reads through HostFs.
#ifndef GPULET_CDI_GENERATOR_H_
#define GPULET_CDI_GENERATOR_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cdi/spec.h"
#include "common/host_fs.h"
#include "gpu/gpu_model.h"

namespace gpulet::cdi {

// Which device names to define for each GPU.
enum class NameStrategy {
  kIndex,  // "0", "1": what `nvidia.com/gpu=0` requests
  kUuid,   // "GPU-3f9d…": stable across reboots and re-enumeration
  kBoth,   // both (nvidia-ctk's default too)
};

// "index", "uuid", "both". InvalidArgument otherwise.
absl::StatusOr<NameStrategy> ParseNameStrategy(absl::string_view text);

// Where gpulet writes the spec by default: the dynamic CDI directory, the one place that is
// both scanned by default and writable on Talos.
inline constexpr char kDefaultSpecPath[] = "/var/run/cdi/nvidia.yaml";

// The hook programs probed on the host, in order. nvidia-cdi-hook (toolkit >= 1.16) takes
// the hook name as its first argument; nvidia-ctk needs "hook" before it.
const std::vector<std::string>& HookProgramCandidates();

struct GeneratorOptions {
  std::string kind = "nvidia.com/gpu";  // vendor/class of the devices
  NameStrategy names = NameStrategy::kBoth;
  bool all_device = true;  // also define "all"
  // Local directories holding the driver's user-space files and /dev; "" = the host root.
  std::string driver_root;
  std::string dev_root;
  // Host path of the hook program; "" = probe HookProgramCandidates() under the host root.
  // An explicit path is used as given (it must be absolute).
  std::string hook_path;
  // Target cdiVersion; "" = the lowest the content needs, at least 0.5.0 (see spec.h).
  std::string cdi_version;
};

// A device NVML found that the spec does not define, because a device node it needs is
// missing. A runtime cannot resolve its CDI name, so whoever hands out CDI names (the device
// plugin) must not hand out this one: the daemon marks it Unhealthy (node_files.h).
struct LeftOutDevice {
  std::string gpu_uuid;
  std::optional<unsigned> gpu_instance_id;  // a MIG device of that GPU; nullopt: the whole GPU
  std::string uuid;                         // the GPU's or the MIG device's
  std::string reason;  // what is missing and where: "its device node /dev/nvidia1 is missing …"
  std::string action;  // what creates it: "run `nvidia-modprobe -c 1` …"

  bool operator==(const LeftOutDevice&) const = default;
};

struct GeneratedSpec {
  Spec spec;  // validated; version set
  std::string driver_version;
  std::string hook_path;  // the hook program used, "" when the spec has no hooks
  // Things left out and why (a GPU without a device node, no hook program, no libraries).
  // Each is one sentence with the fix; the command prints them to stderr.
  std::vector<std::string> warnings;
  // The GPUs and MIG devices among the warnings' (those NVML identified), as data.
  std::vector<LeftOutDevice> left_out;
};

// Builds the spec for the GPUs in `inventory` (those NVML identified: index, minor and
// UUID known). `host` is the host root; see the header comment for the roots.
// Errors: FailedPrecondition when NVML is unusable or identified no GPU, or the driver
// version is unknown (the message says why and what to fix); InvalidArgument for bad
// options (kind, forced version the content cannot use).
absl::StatusOr<GeneratedSpec> GenerateSpec(const gpu::Inventory& inventory, const HostFs& host,
                                           const GeneratorOptions& options);

}  // namespace gpulet::cdi

#endif  // GPULET_CDI_GENERATOR_H_
