// `gpulet status`: asks the running daemon (its HTTP port) for per-GPU health and use, and
// prints a table: health and why, since when, utilisation, VRAM used and by which process and pod.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/commands.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace gpulet {
namespace {

class StatusCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--address", address_, "The daemon's metrics address (host:port)")
        ->envname("GPULET_STATUS_ADDRESS");
    app.add_flag("--json", json_, "Print the daemon's JSON");
  }

  int Run(CommandContext&) override {
    std::string host = "127.0.0.1";
    int port = 9400;
    size_t colon = address_.rfind(':');
    if (colon != std::string::npos) {
      if (colon > 0) host = address_.substr(0, colon);
      if (!absl::SimpleAtoi(address_.substr(colon + 1), &port)) {
        std::fprintf(stderr, "gpulet status: --address '%s' has no valid port\n", address_.c_str());
        return kExitUsage;
      }
    }
    httplib::Client client(host, port);
    client.set_connection_timeout(2, 0);
    client.set_read_timeout(5, 0);
    httplib::Result res = client.Get("/status");
    if (!res || res->status != 200) {
      std::fprintf(stderr,
                   "gpulet status: cannot reach gpulet serve at %s:%d/status (%s). Is the daemon "
                   "running, and is --address its --metrics-address?\n",
                   host.c_str(), port,
                   res ? absl::StrCat("HTTP ", res->status).c_str()
                       : httplib::to_string(res.error()).c_str());
      return kExitFailure;
    }
    if (json_) {
      std::printf("%s", res->body.c_str());
      return kExitOk;
    }
    nlohmann::json doc = nlohmann::json::parse(res->body, nullptr, false);
    if (doc.is_discarded() || !doc.contains("gpus")) {
      std::fprintf(stderr, "gpulet status: the daemon's answer is not gpulet status JSON\n");
      return kExitFailure;
    }
    int worst = 0;
    std::printf("%-4s %-26s %-10s %-22s %-6s %-22s %s\n", "GPU", "NAME", "HEALTH", "SINCE", "UTIL",
                "MEMORY USED", "PROCESSES");
    for (const auto& g : doc["gpus"]) {
      std::string health = g.value("health", "?");
      if (health != "Healthy") worst = 1;
      std::string util = g.contains("utilization_percent")
                             ? absl::StrCat(g["utilization_percent"].get<int>(), "%")
                             : "-";
      std::string mem = "-";
      if (g.contains("memory_used_bytes")) {
        double used = g["memory_used_bytes"].get<double>() / (1 << 30);
        mem = g.contains("memory_total_bytes")
                  ? absl::StrFormat("%.1f / %.1f GiB", used,
                                    g["memory_total_bytes"].get<double>() / (1 << 30))
                  : absl::StrFormat("%.1f GiB", used);
      }
      std::string procs;
      if (g.contains("processes")) {
        for (const auto& p : g["processes"]) {
          absl::StrAppend(&procs, procs.empty() ? "" : ", ", p.value("name", "?"), "[",
                          p.value("pid", 0), "]");
          if (p.contains("used_bytes")) {
            absl::StrAppend(
                &procs, absl::StrFormat(" %.1f GiB", p["used_bytes"].get<double>() / (1 << 30)));
          }
          if (p.contains("pod")) {
            absl::StrAppend(&procs, " pod ", p.value("namespace", ""), "/", p.value("pod", ""));
            std::string container = p.value("container", "");
            if (!container.empty()) absl::StrAppend(&procs, "/", container);
          }
        }
      }
      if (g.contains("answering") && !g["answering"].get<bool>()) util = "n/a";
      std::printf("%-4s %-26s %-10s %-22s %-6s %-22s %s\n",
                  g.contains("index") ? absl::StrCat(g["index"].get<int>()).c_str() : "-",
                  g.value("name", "").c_str(), health.c_str(), g.value("since", "").c_str(),
                  util.c_str(), mem.c_str(), procs.empty() ? "-" : procs.c_str());
      if (g.contains("allocations") && !g["allocations"].empty()) {
        std::string held;
        for (const auto& a : g["allocations"]) {
          absl::StrAppend(&held, held.empty() ? "" : ", ", a.value("namespace", ""), "/",
                          a.value("pod", ""), "/", a.value("container", ""), " (",
                          a.value("device_id", ""), ")");
        }
        std::printf("     allocated to: %s\n", held.c_str());
      }
      if (g.contains("reason")) {
        std::printf("     why: %s\n", g["reason"].get<std::string>().c_str());
      }
      if (g.contains("action")) {
        std::printf("     do:  %s\n", g["action"].get<std::string>().c_str());
      }
    }
    return worst == 0 ? kExitOk : kExitFailure;
  }

 private:
  std::string address_ = "127.0.0.1:9400";
  bool json_ = false;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeStatusCommand() { return std::make_unique<StatusCommand>(); }

}  // namespace gpulet
