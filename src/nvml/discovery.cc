#include "nvml/discovery.h"

#include "nvml/nvml_gpu_library.h"

namespace gpulet::nvml {

Node DiscoverNode(const DiscoveryOptions& options) {
  Node node;
  node.host = std::make_unique<HostFs>(options.host_root);
  NvmlLoadOptions nvml = options.nvml;
  nvml.worker.call_timeout = options.call_timeout;
  NvmlLoadResult load = LoadNvml(*node.host, nvml);
  if (load.worker) {
    node.gpus = std::move(load.worker);
  } else if (load.library) {
    NvmlGpuLibrary::Options lib_options;
    lib_options.call_timeout = options.call_timeout;
    node.gpus = std::make_unique<NvmlGpuLibrary>(
        std::shared_ptr<NvmlLibrary>(std::move(load.library)), lib_options);
  }
  node.inventory = gpu::BuildInventory(node.gpus.get(), *node.host, load.status);
  node.inventory.nvml_attempts = std::move(load.attempts);
  if (node.inventory.nvml_code < 0) node.inventory.nvml_code = load.nvml_code;
  return node;
}

}  // namespace gpulet::nvml
