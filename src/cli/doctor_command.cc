// `gpulet doctor [--json]`: checks the node's GPU stack step by step and prints each check
// as pass/warn/fail with its evidence and fix (see doctor/doctor.h). Exit code: 0 when all
// pass, 1 with warnings, 3 (kExitCheckFailed) with failures, 2 for a bad command line or
// configuration.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "config/config.h"
#include "doctor/doctor.h"
#include "nlohmann/json.hpp"
#include "vram/slice_file.h"

namespace gpulet::cli {
namespace {

// The doctor's one network look (DoctorInput::tcp_probe): a TCP connect to a numeric IPv4
// address, given up after a second.
absl::Status ProbeTcp(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", host));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, "socket");
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = rc == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, 1000) != 1) {
      err = ETIMEDOUT;
    } else {
      socklen_t len = sizeof err;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
  }
  close(fd);
  return err == 0 ? absl::OkStatus() : absl::ErrnoToStatus(err, "connect");
}

// GPU health as the running daemon sees it, read from its /status when the doctor asks.
class DaemonHealth final : public doctor::HealthSource {
 public:
  explicit DaemonHealth(DaemonAddress address) : address_(std::move(address)) {}
  absl::StatusOr<std::vector<doctor::GpuHealth>> GpuHealthStates() const override {
    absl::StatusOr<state::StatusReport> report = FetchStatus(address_);
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
    app.add_option("--config", options_.config_file,
                   "The daemon's config file, to check what its answers name (default: "
                   "$GPULET_CONFIG, which gpulet's DaemonSet sets)")
        ->envname("GPULET_CONFIG");
    app.add_option("--daemon-address", options_.daemon_address,
                   "gpulet serve's metrics address (host:port), to include each GPU's health "
                   "as the daemon sees it")
        ->envname("GPULET_STATUS_ADDRESS");
    app.add_option("--cdi-spec-dir", options_.spec_dirs,
                   "CDI spec directory to check (host path, repeatable; default /etc/cdi and "
                   "/var/run/cdi)");
  }

  int Run(CommandContext& ctx) override {
    std::optional<doctor::Report> report = DoctorOnNode(ctx, options_, "gpulet doctor");
    if (!report) return kExitUsage;
    if (json_) {
      std::printf("%s\n", nlohmann::json(*report).dump(2).c_str());
    } else {
      std::fputs(doctor::FormatReport(*report, ctx.global.verbose).c_str(), stdout);
    }
    return report->ExitCode();
  }

 private:
  bool json_ = false;
  DoctorOptions options_;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeDoctorCommand() { return std::make_unique<DoctorCommand>(); }

std::optional<doctor::Report> DoctorOnNode(CommandContext& ctx, const DoctorOptions& options,
                                           const char* who) {
  nvml::DiscoveryOptions discovery;
  if (!PrepareDiscovery(ctx, &discovery, /*quiet_simulation=*/true)) return std::nullopt;
  nvml::Node node = nvml::DiscoverNode(discovery);
  // A bad file is a usage error, as for serve.
  absl::StatusOr<config::Config> config = config::LoadConfig(options.config_file, {});
  if (!config.ok()) {
    std::fprintf(stderr, "%s: invalid configuration: %s\n", who,
                 std::string(config.status().message()).c_str());
    return std::nullopt;
  }
  doctor::DoctorInput input;
  input.host = node.host.get();
  input.inventory = &node.inventory;
  input.cdi_spec_dirs = options.spec_dirs;
  for (config::DeviceListStrategy s : config->plugin.device_list_strategy) {
    input.gpulet_uses_cdi |= s == config::DeviceListStrategy::kCdiCri ||
                             s == config::DeviceListStrategy::kCdiAnnotations;
  }
  input.gpulet_cdi_spec_dir = config->cdi.spec_dir;
  input.tcp_probe = &ProbeTcp;
  input.gpulet_slices = config->sharing.memory_slices.enabled || config->dra.memory_shares.enabled;
  input.gpulet_vram_enforce = config->sharing.memory_slices.enforce;
  input.gpulet_vram_host_dir = config->sharing.memory_slices.host_dir;
  std::error_code ec;
  absl::StatusOr<std::string> library =
      vram::FindLibraryBeside(std::filesystem::read_symlink("/proc/self/exe", ec).string());
  if (library.ok()) {
    input.gpulet_vram_library = *library;
  } else {
    input.gpulet_vram_library_error = std::string(library.status().message());
  }
  for (const gpu::Gpu& gpu : node.inventory.gpus) {
    if (!gpu.in_nvml || gpu.uuid.empty()) continue;
    bool by_index =
        config->plugin.device_id_strategy == config::DeviceIdStrategy::kIndex && gpu.index;
    input.gpulet_cdi_names.push_back(
        absl::StrCat(config->plugin.cdi_kind, "=", by_index ? absl::StrCat(*gpu.index) : gpu.uuid));
  }
  std::optional<DaemonHealth> health;
  if (!options.daemon_address.empty()) {
    absl::StatusOr<DaemonAddress> address = ParseDaemonAddress(options.daemon_address);
    if (!address.ok()) {
      std::fprintf(stderr, "%s: --daemon-address %s\n", who,
                   std::string(address.status().message()).c_str());
      return std::nullopt;
    }
    health.emplace(*address);
    input.health = &*health;
  }
  return doctor::RunDoctor(input);
}

}  // namespace gpulet::cli
