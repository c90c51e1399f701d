// `gpulet labels [--config FILE] [--output FILE]`: writes the node's GPU labels
// (cluster/labels.h) as a node-feature-discovery feature file, by default where
// gpu-feature-discovery would (/etc/kubernetes/node-feature-discovery/features.d/gpulet under
// --host-root); `--output -` prints them. `--config` reads the daemon's config file so that
// the sharing labels (gpu.replicas, gpu.sharing-strategy, the -SHARED product) are the ones
// `gpulet serve` advertises with it: both call NodeGpuLabels.
//
// The labels come from DiscoverNode(): NVML when it works, PCI sysfs and /proc otherwise
// (then NVML-only values are left out and the command says so, but still succeeds: the
// labels it can give are correct). A node without GPUs gets an empty file, so that labels
// from an earlier run disappear.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cluster/labels.h"
#include "common/atomic_file.h"
#include "config/config.h"

namespace gpulet::cli {
namespace {

class LabelsCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--config", config_file_,
                   "The daemon's config file, so that the sharing labels match what `gpulet "
                   "serve` advertises with it (default: the built-in defaults: no sharing)");
    app.add_option("--output,-o", output_,
                   "Feature file to write atomically, or - for stdout (default: " +
                       std::string(cluster::kDefaultFeaturesFile) + " under --host-root)");
  }

  int Run(CommandContext& ctx) override {
    nvml::DiscoveryOptions options;
    if (!PrepareDiscovery(ctx, &options, /*quiet_simulation=*/output_ == "-")) {
      return kExitUsage;
    }
    absl::StatusOr<config::Config> config = config::LoadConfig(config_file_, {});
    if (!config.ok()) {
      std::fprintf(stderr,
                   "gpulet labels: invalid configuration: %s (fix the file named, or leave out "
                   "--config to label with the defaults)\n",
                   std::string(config.status().message()).c_str());
      return kExitUsage;
    }
    nvml::Node node = nvml::DiscoverNode(options);
    const gpu::Inventory& inv = node.inventory;
    cluster::NodeLabels labels = cluster::NodeGpuLabels(inv, *node.host, *config);
    if (!inv.nvml_status.ok() && !inv.gpus.empty()) {
      std::fprintf(stderr,
                   "gpulet labels: NVML is not usable, so memory, compute capability and CUDA "
                   "labels are left out (run `gpulet doctor`): %s\n",
                   std::string(inv.nvml_status.message()).c_str());
    }
    std::string text = cluster::FormatFeatureFile(labels);
    if (output_.empty()) {
      // The default is a path on the node: under --host-root when run in gpulet's pod.
      absl::StatusOr<std::string> local = node.host->Resolve(cluster::kDefaultFeaturesFile);
      if (!local.ok()) {
        std::fprintf(stderr, "gpulet labels: %s\n", std::string(local.status().message()).c_str());
        return kExitFailure;
      }
      output_ = *local;
    }
    if (output_ == "-") {
      std::fputs(text.c_str(), stdout);
      return kExitOk;
    }
    absl::Status written = WriteFileAtomically(output_, text);
    if (!written.ok()) {
      const char* hint =
          absl::IsNotFound(written)
              ? ". node-feature-discovery's worker creates it on the nodes it runs on; create "
                "it yourself, or pass --output - to print the labels"
          : absl::IsPermissionDenied(written) ? " (run as root, or pick --output)"
                                              : "";
      std::fprintf(stderr, "gpulet labels: %s%s\n", std::string(written.message()).c_str(), hint);
      return kExitFailure;
    }
    if (labels.empty()) {
      std::fprintf(stderr, "gpulet labels: no NVIDIA GPU on this node; wrote an empty %s\n",
                   output_.c_str());
    } else {
      std::fprintf(stderr, "gpulet labels: wrote %zu labels to %s\n", labels.size(),
                   output_.c_str());
    }
    return kExitOk;
  }

 private:
  std::string config_file_;  // "" = the defaults
  std::string output_;       // "" = kDefaultFeaturesFile under the host root
};

}  // namespace

std::unique_ptr<CommandHandler> MakeLabelsCommand() { return std::make_unique<LabelsCommand>(); }

}  // namespace gpulet::cli
