// DriverInfo: what the host says about the NVIDIA kernel driver, without asking NVML.
//
// Reads three kinds of evidence through HostFs: /proc/driver/nvidia/version (present once
// nvidia.ko is loaded; names the version and whether the open or the proprietary modules
// are running), /proc/modules (which of nvidia, nvidia_uvm, nvidia_modeset, nvidia_drm and
// nouveau are loaded) and the /dev/nvidia* nodes containers need. On Talos these are what
// `talosctl read /proc/modules` and `talosctl read /proc/driver/nvidia/version` show, and
// they are exactly what is needed to explain an NVML "driver not loaded" in plain words.
// A missing file is recorded as a fact (module not loaded, node absent), never an error.
//
// Thread-safety: all functions keep no state and only read through the const HostFs; they
// are safe to call concurrently.
#ifndef GPULET_NODE_DRIVER_INFO_H_
#define GPULET_NODE_DRIVER_INFO_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/host_fs.h"
#include "node/mig_minors.h"
#include "node/pci_ids.h"

namespace gpulet::node {

// Which build of nvidia.ko is running.
enum class DriverFlavor {
  kUnknown,      // no version file, or a first line gpulet does not recognise
  kOpen,         // "NVIDIA UNIX Open Kernel Module for x86_64  570.133.20 ..."
  kProprietary,  // "NVIDIA UNIX x86_64 Kernel Module  570.133.20 ..."
};

// "unknown", "open", "proprietary".
absl::string_view DriverFlavorName(DriverFlavor flavor);

// False only when the running flavour is known and the GPU cannot work with it (e.g. the
// proprietary modules with a Blackwell card); an unknown flavour gets the benefit of doubt.
bool DriverFlavorSupports(DriverFlavor running, ModuleFlavor required);

// The parsed "NVRM version:" line of /proc/driver/nvidia/version.
struct NvrmVersion {
  std::string version;  // "570.133.20"; "" when none was found
  DriverFlavor flavor = DriverFlavor::kUnknown;
};

// Parses the contents of /proc/driver/nvidia/version (only the NVRM line matters).
NvrmVersion ParseNvrmVersion(absl::string_view text);

// The NVIDIA-related modules listed in /proc/modules (any state: a module stuck "Loading"
// is still reported as loaded, since it occupies the name).
struct LoadedModules {
  bool nvidia = false;
  bool nvidia_uvm = false;
  bool nvidia_modeset = false;
  bool nvidia_drm = false;
  bool nouveau = false;
};

// Parses the contents of /proc/modules ("name size refcount deps state address ...").
LoadedModules ParseProcModules(absl::string_view text);

struct DriverInfo {
  // /proc/driver/nvidia/version.
  bool version_file_present = false;
  std::string nvrm_line;  // the raw "NVRM version: ..." line, for reports
  std::string version;    // "570.133.20"; "" when unknown
  DriverFlavor flavor = DriverFlavor::kUnknown;
  // /sys/module/nvidia/version: the loaded module's own version, "" when absent. A
  // cross-check for `version`; the two differ only on a broken host.
  std::string module_version;

  // /proc/modules; all false when it cannot be read.
  bool proc_modules_readable = false;
  LoadedModules modules;

  // /dev nodes (existence only; fixtures use regular files as placeholders).
  bool dev_nvidiactl = false;
  bool dev_nvidia_uvm = false;
  bool dev_nvidia_uvm_tools = false;
  bool dev_nvidia_modeset = false;
  std::vector<int> dev_gpu_minors;  // N for each /dev/nvidiaN, ascending

  // /proc/driver/nvidia-caps/mig-minors: the MIG capability devices' minors; empty when the
  // file is absent (no MIG-capable driver) or unreadable.
  MigMinors mig_minors;
};

// Collects the above from the host. Never fails: what cannot be read is reported as absent.
DriverInfo ReadDriverInfo(const HostFs& fs);

}  // namespace gpulet::node

#endif  // GPULET_NODE_DRIVER_INFO_H_
