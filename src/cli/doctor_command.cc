// `gpulet doctor [--json]`: checks the node's GPU stack step by step and prints each check
// as pass/warn/fail with its evidence and fix (see doctor/doctor.h). Exit code: 0 when all
// pass, 1 with warnings, 2 with failures.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "config/config.h"
#include "doctor/doctor.h"
#include "nlohmann/json.hpp"

namespace gpulet {
namespace {

class DoctorCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_flag("--json", json_, "Print the report as JSON");
    app.add_option("--config", config_file_,
                   "The daemon's config file, to check what its answers name (default: "
                   "$GPULET_CONFIG, which gpulet's DaemonSet sets)")
        ->envname("GPULET_CONFIG");
    app.add_option("--cdi-spec-dir", spec_dirs_,
                   "CDI spec directory to check (host path, repeatable; default /etc/cdi and "
                   "/var/run/cdi)");
  }

  int Run(CommandContext& ctx) override {
    DiscoveryOptions options;
    if (!PrepareDiscovery(ctx, &options, /*quiet_simulation=*/true)) return kExitUsage;
    Node node = DiscoverNode(options);
    // A bad file is a usage error, as for serve.
    absl::StatusOr<Config> config = LoadConfig(config_file_, {});
    if (!config.ok()) {
      std::fprintf(stderr, "gpulet doctor: invalid configuration: %s\n",
                   std::string(config.status().message()).c_str());
      return kExitUsage;
    }
    doctor::DoctorInput input;
    input.host = node.host.get();
    input.inventory = &node.inventory;
    input.cdi_spec_dirs = spec_dirs_;
    for (DeviceListStrategy s : config->plugin.device_list_strategy) {
      input.gpulet_uses_cdi |=
          s == DeviceListStrategy::kCdiCri || s == DeviceListStrategy::kCdiAnnotations;
    }
    input.gpulet_cdi_spec_dir = config->cdi.spec_dir;
    for (const Gpu& gpu : node.inventory.gpus) {
      if (!gpu.in_nvml || gpu.uuid.empty()) continue;
      bool by_index = config->plugin.device_id_strategy == DeviceIdStrategy::kIndex && gpu.index;
      input.gpulet_cdi_names.push_back(absl::StrCat(
          config->plugin.cdi_kind, "=", by_index ? absl::StrCat(*gpu.index) : gpu.uuid));
    }
    // input.health stays null until the health module provides a HealthSource (doctor.h).
    doctor::Report report = doctor::RunDoctor(input);
    if (json_) {
      std::printf("%s\n", nlohmann::json(report).dump(2).c_str());
    } else {
      std::fputs(doctor::FormatReport(report, ctx.global.verbose).c_str(), stdout);
    }
    return report.ExitCode();
  }

 private:
  bool json_ = false;
  std::vector<std::string> spec_dirs_;
  std::string config_file_;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeDoctorCommand() { return std::make_unique<DoctorCommand>(); }

}  // namespace gpulet
