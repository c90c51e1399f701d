// `gpulet status`: asks the running daemon (its HTTP port) for per-GPU health and use, and
// prints a table: health and why, since when, utilisation, VRAM used and by which process and pod.
// The answer is read as a StatusReport (state/status_report.h), the type the daemon writes.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "state/status_report.h"

namespace gpulet::cli {
namespace {

class StatusCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--address", address_, "The daemon's metrics address (host:port)")
        ->envname("GPULET_STATUS_ADDRESS");
    app.add_flag("--json", json_, "Print the daemon's JSON");
  }

  int Run(CommandContext&) override {
    absl::StatusOr<DaemonAddress> address = ParseDaemonAddress(address_);
    if (!address.ok()) {
      std::fprintf(stderr, "gpulet status: --address %s\n",
                   std::string(address.status().message()).c_str());
      return kExitUsage;
    }
    if (json_) {
      absl::StatusOr<std::string> text = FetchStatusText(*address);
      if (!text.ok()) {
        std::fprintf(stderr, "gpulet status: %s\n", std::string(text.status().message()).c_str());
        return kExitFailure;
      }
      std::printf("%s", text->c_str());
      return kExitOk;
    }
    absl::StatusOr<state::StatusReport> report = FetchStatus(*address);
    if (!report.ok()) {
      std::fprintf(stderr, "gpulet status: %s\n", std::string(report.status().message()).c_str());
      return kExitFailure;
    }
    int worst = 0;
    std::printf("%-4s %-26s %-10s %-22s %-6s %-22s %s\n", "GPU", "NAME", "HEALTH", "SINCE", "UTIL",
                "MEMORY USED", "PROCESSES");
    constexpr double kGiB = 1 << 30;
    for (const state::GpuStatus& g : report->gpus) {
      if (g.health != state::HealthState::kHealthy) worst = 1;
      std::optional<double> util_percent = g.Value(gpu::ValueId::kGpuUtil);
      std::string util = util_percent ? absl::StrCat(*util_percent, "%") : "-";
      std::string mem = "-";
      if (std::optional<double> used_bytes = g.Value(gpu::ValueId::kFbUsed)) {
        double used = *used_bytes / kGiB;
        mem = g.memory_total_bytes
                  ? absl::StrFormat("%.1f / %.1f GiB", used,
                                    static_cast<double>(*g.memory_total_bytes) / kGiB)
                  : absl::StrFormat("%.1f GiB", used);
      }
      std::string procs;
      for (const state::ProcessStatus& p :
           g.processes.value_or(std::vector<state::ProcessStatus>{})) {
        absl::StrAppend(&procs, procs.empty() ? "" : ", ", p.name.value_or("?"), "[", p.pid, "]");
        if (p.used_bytes) {
          absl::StrAppend(&procs,
                          absl::StrFormat(" %.1f GiB", static_cast<double>(*p.used_bytes) / kGiB));
        }
        if (p.pod) {
          absl::StrAppend(&procs, " pod ", p.namespace_name.value_or(""), "/", *p.pod);
          std::string container = p.container.value_or("");
          if (!container.empty()) absl::StrAppend(&procs, "/", container);
        }
      }
      if (g.answering == false) util = "n/a";
      std::string since =
          g.since ? absl::FormatTime(absl::RFC3339_sec, *g.since, absl::UTCTimeZone()) : "";
      std::printf("%-4s %-26s %-10s %-22s %-6s %-22s %s\n",
                  g.index ? absl::StrCat(*g.index).c_str() : "-", g.name.c_str(),
                  state::HealthStateName(g.health), since.c_str(), util.c_str(), mem.c_str(),
                  procs.empty() ? "-" : procs.c_str());
      if (g.allocations && !g.allocations->empty()) {
        std::string held;
        for (const state::AllocationStatus& a : *g.allocations) {
          absl::StrAppend(&held, held.empty() ? "" : ", ", a.namespace_name, "/", a.pod, "/",
                          a.container, " (", a.device_id, ")");
        }
        std::printf("     allocated to: %s\n", held.c_str());
      }
      if (g.vram_enforcement) {
        std::printf("     vram quotas held by: %s\n", g.vram_enforcement->c_str());
      }
      if (g.last_fault) {
        std::printf(
            "     last fault: %s %s; verdict %s: %s (gpulet postmortem --gpu %s)\n",
            absl::FormatTime(absl::RFC3339_sec, g.last_fault->at, absl::UTCTimeZone()).c_str(),
            g.last_fault->what.c_str(), g.last_fault->verdict.c_str(),
            g.last_fault->headline.c_str(), g.uuid.c_str());
      }
      for (const state::EvictionStatus& e :
           g.evictions.value_or(std::vector<state::EvictionStatus>{})) {
        std::printf("     %s pod %s/%s%s%s\n", e.state.c_str(), e.namespace_name.c_str(),
                    e.pod.c_str(),
                    e.tries > 0 ? absl::StrFormat(" (tries %d)", e.tries).c_str() : "",
                    e.last.empty() ? "" : absl::StrCat(": ", e.last).c_str());
      }
      for (auto [rung, status] : {std::pair{"reset", &g.reset}, std::pair{"reboot", &g.reboot}}) {
        if (*status) {
          std::printf("     %s: %s: %s (tries: %d)\n", rung, (*status)->state.c_str(),
                      (*status)->detail.c_str(), (*status)->tries);
        }
      }
      for (const state::SliceStatus& s :
           g.vram_slices.value_or(std::vector<state::SliceStatus>{})) {
        std::string holder = s.pod ? absl::StrCat(s.namespace_name.value_or(""), "/", *s.pod, "/",
                                                  s.container.value_or(""))
                                   : s.owner;
        std::string device = s.device_used_bytes
                                 ? absl::StrFormat(" (%.1f by the driver's count)",
                                                   static_cast<double>(*s.device_used_bytes) / kGiB)
                                 : "";
        std::printf(
            "     vram slice %s: %s, %.1f%s of %.1f GiB (peak %.1f), %u processes, %s refused\n",
            s.slice.c_str(), holder.c_str(), static_cast<double>(s.used_bytes) / kGiB,
            device.c_str(), static_cast<double>(s.quota_bytes) / kGiB,
            static_cast<double>(s.peak_bytes) / kGiB, s.processes, absl::StrCat(s.refused).c_str());
      }
      if (g.reason) std::printf("     why: %s\n", g.reason->c_str());
      if (g.action) std::printf("     do:  %s\n", g.action->c_str());
    }
    return worst == 0 ? kExitOk : kExitFailure;
  }

 private:
  std::string address_ = "127.0.0.1:9400";
  bool json_ = false;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeStatusCommand() { return std::make_unique<StatusCommand>(); }

}  // namespace gpulet::cli
