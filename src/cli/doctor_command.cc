// `gpulet doctor [--json]`: checks the node's GPU stack step by step and prints each check
// as pass/warn/fail with its evidence and fix (see doctor/doctor.h). Exit code: 0 when all
// pass, 1 with warnings, 3 (kExitCheckFailed) with failures, 2 for a bad command line or
// configuration.
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "config/config.h"
#include "doctor/doctor.h"
#include "nlohmann/json.hpp"

namespace gpulet {
namespace {

// GPU health as the running daemon sees it, read from its /status when the doctor asks.
class DaemonHealth final : public doctor::HealthSource {
 public:
  explicit DaemonHealth(DaemonAddress address) : address_(std::move(address)) {}
  absl::StatusOr<std::vector<doctor::GpuHealth>> GpuHealthStates() const override {
    absl::StatusOr<StatusReport> report = FetchStatus(address_);
    if (!report.ok()) return report.status();
    return doctor::HealthFromStatus(*report);
  }

 private:
  DaemonAddress address_;
};

class DoctorCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_flag("--json", json_, "Print the report as JSON");
    app.add_option("--config", config_file_,
                   "The daemon's config file, to check what its answers name (default: "
                   "$GPULET_CONFIG, which gpulet's DaemonSet sets)")
        ->envname("GPULET_CONFIG");
    app.add_option("--daemon-address", daemon_address_,
                   "gpulet serve's metrics address (host:port), to include each GPU's health "
                   "as the daemon sees it")
        ->envname("GPULET_STATUS_ADDRESS");
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
    std::optional<DaemonHealth> health;
    if (!daemon_address_.empty()) {
      absl::StatusOr<DaemonAddress> address = ParseDaemonAddress(daemon_address_);
      if (!address.ok()) {
        std::fprintf(stderr, "gpulet doctor: --daemon-address %s\n",
                     std::string(address.status().message()).c_str());
        return kExitUsage;
      }
      health.emplace(*address);
      input.health = &*health;
    }
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
  std::string daemon_address_;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeDoctorCommand() { return std::make_unique<DoctorCommand>(); }

}  // namespace gpulet
