// `gpulet list [--json]`: the GPUs of this node, merged from NVML and PCI sysfs.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/commands.h"
#include "nlohmann/json.hpp"

namespace gpulet::cli {
namespace {

std::string FormatMemory(const std::optional<uint64_t>& bytes) {
  if (!bytes) return "-";
  return absl::StrFormat("%.1f GiB", static_cast<double>(*bytes) / (1024.0 * 1024 * 1024));
}

// Prints rows as left-aligned columns sized to their widest cell.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size());
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

class ListCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_flag("--json", json_, "Print JSON instead of a table");
  }

  int Run(CommandContext& ctx) override {
    nvml::DiscoveryOptions options;
    if (!PrepareDiscovery(ctx, &options, /*quiet_simulation=*/json_)) return kExitUsage;
    nvml::Node node = nvml::DiscoverNode(options);
    const gpu::Inventory& inv = node.inventory;
    if (json_) {
      std::printf("%s\n", nlohmann::json(inv).dump(2).c_str());
    } else {
      PrintHuman(inv);
    }
    if (!inv.nvml_status.ok()) {
      std::fprintf(stderr, "\ngpulet: %s\n", std::string(inv.nvml_status.message()).c_str());
      return kExitFailure;
    }
    return kExitOk;
  }

 private:
  static void PrintHuman(const gpu::Inventory& inv) {
    if (inv.gpus.empty()) {
      std::printf("No NVIDIA GPU found%s.\n",
                  inv.pci_status.ok() ? " on the PCI bus" : " (PCI sysfs unreadable)");
    } else {
      std::vector<std::vector<std::string>> rows = {
          {"GPU", "NAME", "MEMORY", "ARCH", "CC", "PCI BUS ID", "NUMA", "DRIVER", "UUID"}};
      for (const gpu::Gpu& g : inv.gpus) {
        rows.push_back(
            {g.index ? absl::StrCat(*g.index) : "-", g.name, FormatMemory(g.memory_total_bytes),
             std::string(node::ArchitectureName(g.architecture)),
             g.ComputeCapability().empty() ? "-" : g.ComputeCapability(),
             g.bus_id.empty() ? "-" : g.bus_id, g.numa_node >= 0 ? absl::StrCat(g.numa_node) : "-",
             g.on_pci ? (g.kernel_driver.empty() ? "none" : g.kernel_driver) : "-",
             g.uuid.empty() ? "-" : g.uuid});
        // MIG devices under their GPU, named as nvidia-smi -L and nvidia-ctk name them.
        for (const gpu::MigDeviceInfo& m : g.mig_devices) {
          rows.push_back({absl::StrCat(g.index ? absl::StrCat(*g.index) : "-", ":", m.index),
                          absl::StrCat("  MIG ", m.profile, " (GI ", m.gpu_instance_id, ", CI ",
                                       m.compute_instance_id, ")"),
                          FormatMemory(m.memory_bytes), "", "", "", "", "", m.uuid});
        }
        if (g.mig_enabled && g.mig_devices.empty()) {
          rows.push_back({"", "  MIG enabled, no MIG devices", "", "", "", "", "", "", ""});
        }
      }
      PrintTable(rows);
    }
    if (inv.nvml_status.ok()) {
      std::printf(
          "\nDriver %s, CUDA %s, NVML %s\n",
          inv.system.driver_version.empty() ? "?" : inv.system.driver_version.c_str(),
          inv.system.CudaVersionString().empty() ? "?" : inv.system.CudaVersionString().c_str(),
          inv.system.library_path.c_str());
    }
    for (const gpu::Gpu& g : inv.gpus) {
      if (!g.nvml_error.empty()) {
        std::printf("GPU %s: %s\n", g.index ? absl::StrCat(*g.index).c_str() : g.bus_id.c_str(),
                    g.nvml_error.c_str());
      } else if (g.on_pci && !g.in_nvml && inv.nvml_status.ok()) {
        std::printf(
            "GPU %s (%s) is on the PCI bus but NVML does not list it (kernel driver: %s)."
            " Run `gpulet doctor`.\n",
            g.bus_id.c_str(), g.name.c_str(),
            g.kernel_driver.empty() ? "none" : g.kernel_driver.c_str());
      }
    }
  }

  bool json_ = false;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeListCommand() { return std::make_unique<ListCommand>(); }

}  // namespace gpulet::cli
