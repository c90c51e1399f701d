// `gpulet serve`: the node daemon's command line. Parses the flags, loads the config, sets
// up logging and signals, discovers the node, and runs a Daemon (daemon/daemon.h), which
// owns every component. Signals: SIGHUP loads the config again and hands it to
// Daemon::Reload (which applies all of it or none), SIGTERM/SIGINT stop cleanly and remove
// the sockets. A change of the config file's content (a ConfigMap update) raises SIGHUP by
// itself (config/config_watcher.h).
//
// Threads: main (signals and lifecycle); "gpulet-config" (the config file watcher); the
// daemon's components run their own.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "cli/simulate.h"
#include "common/log.h"
#include "common/malloc_arenas.h"
#include "common/startup_pages.h"
#include "config/config.h"
#include "config/config_watcher.h"
#include "daemon/daemon.h"
#include "http/web_config.h"

namespace gpulet::cli {
namespace {

// When `serve` gives back the code pages only its start-up used (common/startup_pages.h).
constexpr absl::Duration kReleaseStartupCodeAfter = absl::Seconds(10);

// A daemon flag and the config key it sets (flag > env > file, applied in LoadConfig).
struct FlagKey {
  const char* flag;
  const char* env;
  const char* key;
  const char* help;
};

constexpr FlagKey kFlagKeys[] = {
    {"--kubelet-dir", "GPULET_KUBELET_DIR", "kubeletDir", "Kubelet state directory"},
    {"--resource-name", "GPULET_RESOURCE_NAME", "resourceName", "Extended resource name"},
    {"--device-list-strategy", "GPULET_DEVICE_LIST_STRATEGY", "plugin.deviceListStrategy",
     "envvar, volume-mounts, cdi-annotations, cdi-cri (comma-separated)"},
    {"--device-id-strategy", "GPULET_DEVICE_ID_STRATEGY", "plugin.deviceIdStrategy",
     "uuid or index"},
    {"--mig-strategy", "GPULET_MIG_STRATEGY", "plugin.migStrategy",
     "none, single or mixed (as NVIDIA's device plugin)"},
    {"--pass-device-specs", "GPULET_PASS_DEVICE_SPECS", "plugin.passDeviceSpecs", "true or false"},
    {"--cdi-kind", "GPULET_CDI_KIND", "plugin.cdiKind", "CDI kind for CDI strategies"},
    {"--dev-root", "GPULET_DEV_ROOT", "plugin.devRoot", "Host directory holding dev/"},
    {"--cdi-spec-dir", "GPULET_CDI_SPEC_DIR", "cdi.specDir",
     "Host directory for the CDI spec gpulet keeps (empty: write none)"},
    {"--cdi-driver-root", "GPULET_CDI_DRIVER_ROOT", "cdi.driverRoot",
     "Directory holding the driver's files, for the CDI spec (default: the host root)"},
    {"--cdi-dev-root", "GPULET_CDI_DEV_ROOT", "cdi.devRoot",
     "Directory holding dev/, for the CDI spec (default: the host root)"},
    {"--cdi-hook-path", "GPULET_CDI_HOOK_PATH", "cdi.hookPath",
     "Host path of nvidia-cdi-hook for the CDI spec (default: found on the host)"},
    {"--replicas", "GPULET_REPLICAS", "sharing.timeSlicing.replicas",
     "Time-slicing replicas per GPU"},
    {"--memory-slices", "GPULET_MEMORY_SLICES", "sharing.memorySlices.enabled",
     "Advertise memory slices: true or false"},
    {"--memory-slice-mib", "GPULET_MEMORY_SLICE_MIB", "sharing.memorySlices.sliceMiB",
     "Size of one memory slice in MiB"},
    {"--metrics-address", "GPULET_METRICS_ADDRESS", "metrics.address",
     "Listen address for /metrics (empty disables)"},
    {"--sample-interval", "GPULET_SAMPLE_INTERVAL", "metrics.sampleInterval",
     "NVML sampling interval"},
    {"--web-config-file", "GPULET_WEB_CONFIG_FILE", "metrics.webConfigFile",
     "Prometheus web-config file for TLS and basic auth"},
    {"--pod-attribution", "GPULET_POD_ATTRIBUTION", "metrics.podAttribution",
     "Label GPUs and processes with their pods: true or false"},
    {"--pod-resources-interval", "GPULET_POD_RESOURCES_INTERVAL", "metrics.podResourcesInterval",
     "How often to ask the kubelet which pods hold which GPUs"},
    {"--probe-interval", "GPULET_PROBE_INTERVAL", "health.probeInterval",
     "GPU liveness probe interval"},
    {"--hang-timeout", "GPULET_HANG_TIMEOUT", "health.hangTimeout",
     "How long a liveness probe may take before the GPU counts as hung"},
    {"--quiet-period", "GPULET_QUIET_PERIOD", "health.quietPeriod",
     "Quiet time before a recovered GPU is healthy again"},
    {"--application-xids", "GPULET_APPLICATION_XIDS", "health.applicationXids",
     "XIDs that never take a GPU out (comma-separated)"},
    {"--kmsg", "GPULET_KMSG", "health.kmsg", "Read the kernel log for XIDs: true or false"},
    {"--xid-history-file", "GPULET_XID_HISTORY_FILE", "health.xidHistoryFile",
     "Host path where XID repeats are kept across restarts (empty: memory only)"},
    {"--evict", "GPULET_EVICT", "health.evict.mode",
     "Evict the pods of a GPU that stays Unhealthy: off, dry-run or on (needs its RBAC)"},
    {"--reset", "GPULET_RESET", "health.reset.mode",
     "Reset a GPU out for a fault a reset clears, once idle: off, dry-run or on (needs /sys)"},
    {"--reboot", "GPULET_REBOOT", "health.reboot.mode",
     "Ask kured to reboot the node for a GPU fault only a reboot clears: off, dry-run or on"},
    {"--cluster-reporting", "GPULET_CLUSTER_REPORTING", "cluster.enabled",
     "Report GPU health on the Node (conditions, events) through the API server: true or false"},
    {"--kubeconfig", "GPULET_KUBECONFIG", "cluster.kubeconfig",
     "kubeconfig file for the API server (default: the pod's service account)"},
    {"--taint-unhealthy", "GPULET_TAINT_UNHEALTHY", "cluster.taint.enabled",
     "Taint the Node gpulet.dev/gpu-unhealthy while its GPUs are out: true or false"},
    {"--dra", "GPULET_DRA", "dra.enabled",
     "Serve GPUs as a DRA driver (ResourceSlices, NodePrepareResources): true or false"},
    {"--dra-driver-name", "GPULET_DRA_DRIVER_NAME", "dra.driverName",
     "The DRA driver's name, which DeviceClasses select (default gpu.gpulet.dev)"},
    {"--dra-gpus", "GPULET_DRA_GPUS", "dra.gpus",
     "GPUs DRA offers: all, or indexes and UUIDs (comma-separated); the plugin serves the rest"},
    {"--dra-memory-shares", "GPULET_DRA_MEMORY_SHARES", "dra.memoryShares.enabled",
     "Let several claims share a GPU by memory (consumable capacity): true or false"},
};

// In a pod, gethostname() is the pod's name, which changes on every rollout; the DaemonSet
// passes the node's name (downward API) in NODE_NAME, as dcgm-exporter's does.
// SIGTERM and SIGINT during discovery, which can wait long on a driver that hangs in
// nvmlInit (the probe's deadline, seconds): they end the process at once with status 0,
// since nothing gpulet must remove exists yet (the daemon has not served) and every child
// it started dies with it (PR_SET_PDEATHSIG). A handler on the main thread, not a thread
// of its own: a thread running while discovery forks its probe could hold a lock the child
// then needs. gpulet's own threads block every signal (StartNamedThread), so the handler
// runs on the main thread. Afterwards the signals are blocked again and wait, pending,
// for the signal loop; one that arrives while the daemon starts stops it once started.
class DiscoverySignals {
 public:
  DiscoverySignals() {
    struct sigaction action = {};
    action.sa_handler = &DiscoverySignals::OnSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, &previous_term_);
    sigaction(SIGINT, &action, &previous_int_);
    sigemptyset(&stop_);
    sigaddset(&stop_, SIGTERM);
    sigaddset(&stop_, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &stop_, nullptr);  // a pending one is delivered now
  }
  ~DiscoverySignals() {
    pthread_sigmask(SIG_BLOCK, &stop_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
    sigaction(SIGINT, &previous_int_, nullptr);
  }
  DiscoverySignals(const DiscoverySignals&) = delete;
  DiscoverySignals& operator=(const DiscoverySignals&) = delete;

 private:
  static void OnSignal(int) {
    static const char kMessage[] = "gpulet serve: stop signal during discovery: stopping\n";
    (void)!write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    _exit(kExitOk);
  }

  sigset_t stop_;
  struct sigaction previous_term_ = {}, previous_int_ = {};
};

std::string NodeName() {
  if (const char* node_name = std::getenv("NODE_NAME"); node_name != nullptr && *node_name) {
    return node_name;
  }
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  return hostname;
}

class ServeCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--config", config_file_, "Config file (YAML, version: v1)")
        ->envname("GPULET_CONFIG");
    app.add_flag("--print-config", print_config_, "Print the effective config and exit");
    app.add_option("--log-level", log_level_, "debug, info, warn or error")
        ->envname("GPULET_LOG_LEVEL");
    for (const FlagKey& f : kFlagKeys) {
      options_.push_back({app.add_option(f.flag, values_[f.key], f.help)->envname(f.env), f.key});
    }
  }

  int Run(CommandContext& ctx) override {
    // Signals are handled by gpulet's own threads only: block them first, before anything
    // can start a thread or a SIGTERM can arrive while its default action still applies.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    // One malloc arena for every thread: the daemon's private memory stays flat
    // (common/malloc_arenas.h).
    UseOneMallocArena();
    if (!InitLogging(log_level_)) {
      std::fprintf(stderr,
                   "gpulet serve: --log-level '%s' is not one of debug, info, warn, error\n",
                   log_level_.c_str());
      return kExitUsage;
    }
    // A changed config file (a ConfigMap update) is reloaded as on SIGHUP; what the watcher
    // compares against is read before the config is, so no change in between is missed.
    std::optional<config::ConfigFileWatcher> watcher;
    if (!config_file_.empty()) {
      watcher.emplace(config::ConfigFileWatcher::Options{
          .path = config_file_, .on_change = [path = config_file_] {
            GPULET_LOG_INFO("{} changed: reloading it", path);
            kill(getpid(), SIGHUP);  // to the process: the main thread waits for it
          }});
    }
    absl::StatusOr<config::Config> config = Load();
    if (!config.ok()) {
      std::fprintf(stderr, "gpulet serve: invalid configuration: %s\n",
                   std::string(config.status().message()).c_str());
      return kExitUsage;
    }
    if (print_config_) {
      std::printf("%s", config::ConfigToYaml(*config).c_str());
      return kExitOk;
    }

    umask(077);  // sockets and files we create are ours alone

    daemon::DaemonOptions options;
    // A simulation without --host-root reads the bundled fixture root, which is data, not a
    // node: no CDI spec is written into it.
    options.bundled_fixture_root = !ctx.global.simulate.empty() &&
                                   (ctx.global.host_root.empty() || !ctx.global.host_root_given);
    options.node_name = NodeName();
    if (const char* uid = std::getenv("POD_UID"); uid != nullptr) options.pod_uid = uid;
    nvml::DiscoveryOptions discovery;
    if (!PrepareDiscovery(ctx, &discovery, /*quiet_simulation=*/false)) return kExitUsage;
    std::optional<DiscoverySignals> discovery_signals(std::in_place);
    nvml::Node node = nvml::DiscoverNode(discovery);
    discovery_signals.reset();
    // After a GPU reset the node is discovered again the same way (the daemon's reset
    // thread, with its components stopped; the vetting probe forks and execs at once).
    options.discover = [discovery] { return nvml::DiscoverNode(discovery); };
    // A simulated card is reset in the simulator, not through this machine's /sys.
    std::optional<SimGpuResetter> sim_resetter;
    if (const char* state = std::getenv("GPULET_SIM_STATE");
        !ctx.global.simulate.empty() && state != nullptr) {
      sim_resetter.emplace(state);
      options.gpu_resetter = &*sim_resetter;
    }
    daemon::Daemon daemon(std::move(node), *std::move(config), options);
    if (absl::Status started = daemon.Start(); !started.ok()) {
      GPULET_LOG_ERROR("{}", started.message());
      return absl::IsInvalidArgument(started) ? kExitUsage : kExitFailure;
    }

    if (watcher) {
      watcher->WatchAlso(http::WebConfigFiles(daemon.config().metrics.web_config_file));
      watcher->Start();
    }

    // Start-up is over well within this (the first NVML round, the kubelet's Register, the
    // first scrapes): then the code pages only start-up ran go back (common/startup_pages.h).
    const absl::Time release_startup_code_at = absl::Now() + kReleaseStartupCodeAfter;
    bool startup_code_released = false;
    while (true) {
      int sig;
      if (startup_code_released) {
        sig = sigwaitinfo(&signals, nullptr);
      } else {
        const timespec wait =
            absl::ToTimespec(std::max(release_startup_code_at - absl::Now(), absl::ZeroDuration()));
        sig = sigtimedwait(&signals, nullptr, &wait);
        if (sig < 0 && errno == EAGAIN) {
          startup_code_released = true;
          absl::StatusOr<size_t> released = ReleaseStartupCode();
          if (!released.ok()) {
            GPULET_LOG_DEBUG("start-up code stays resident: {}", released.status().message());
          }
          continue;
        }
      }
      if (sig < 0) continue;  // EINTR: a signal we do not wait for
      if (sig == SIGHUP) {
        absl::StatusOr<config::Config> next = Load();
        if (!next.ok()) {
          GPULET_LOG_ERROR("SIGHUP: keeping the running configuration; the new one is invalid: {}",
                           next.status().message());
          daemon.CountReloadError(next.status().message());
          continue;
        }
        // Reload logs what it applied, or why it refused and kept the running config.
        if (daemon.Reload(*next).ok()) GPULET_LOG_INFO("SIGHUP: configuration reloaded");
        // The files the running configuration names (a new web config, or one naming a new
        // certificate), whether or not this reload was taken.
        if (watcher)
          watcher->WatchAlso(http::WebConfigFiles(daemon.config().metrics.web_config_file));
      } else if (sig == SIGTERM || sig == SIGINT) {
        GPULET_LOG_INFO("received {}: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        break;
      }
    }
    if (watcher) watcher->Stop();
    daemon.Stop();
    GPULET_LOG_INFO("stopped");
    return kExitOk;
  }

 private:
  absl::StatusOr<config::Config> Load() {
    config::ConfigOverrides overrides;
    for (const auto& [opt, key] : options_) {
      if (opt->count() > 0) overrides[key] = values_[key];
    }
    return config::LoadConfig(config_file_, overrides);
  }

  std::string config_file_;
  bool print_config_ = false;
  std::string log_level_ = "info";
  std::map<std::string, std::string> values_;
  std::vector<std::pair<CLI::Option*, std::string>> options_;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeServeCommand() { return std::make_unique<ServeCommand>(); }

}  // namespace gpulet::cli
