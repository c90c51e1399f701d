// Node discovery: opens NVML (through the vetting loader), wraps it as a GpuLibrary (in
// process, NvmlGpuLibrary, or in gpulet-nvml-worker under the driver's own glibc,
// NvmlWorkerGpuLibrary), and builds the merged inventory. Used by every command and by the
// daemon at start.
//
// NVML being unusable is not an error here but a fact recorded in the result: the PCI view
// still lists the GPUs, and callers decide (list exits non-zero, serve advertises the GPUs
// as unhealthy, doctor explains).
//
// Thread-safety: Discover() may run on any thread; a Node is owned by one caller.
#ifndef GPULET_NVML_DISCOVERY_H_
#define GPULET_NVML_DISCOVERY_H_

#include <memory>
#include <string>

#include "common/host_fs.h"
#include "gpu/gpu_library.h"
#include "gpu/gpu_model.h"
#include "nvml/nvml_loader.h"

namespace gpulet::nvml {

struct DiscoveryOptions {
  std::string host_root = "/";
  NvmlLoadOptions nvml;
  absl::Duration call_timeout = absl::Seconds(10);
};

struct Node {
  std::unique_ptr<HostFs> host;
  std::unique_ptr<gpu::GpuLibrary> gpus;  // null when NVML could not be loaded
  gpu::Inventory inventory;
};

Node DiscoverNode(const DiscoveryOptions& options);

}  // namespace gpulet::nvml

#endif  // GPULET_NVML_DISCOVERY_H_
