// `gpulet serve`: the node daemon. Discovers the GPUs, fills the DeviceStore, serves the
// kubelet device plugin, probes GPU liveness, and handles signals (SIGHUP reloads the
// config, SIGTERM/SIGINT stop cleanly and remove the sockets).
//
// Threads: main (signals, config, lifecycle), plugin-watch (registration), gRPC's own,
// health-liveness.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cdi/spec_keeper.h"
#include "cli/commands.h"
#include "common/host_fs.h"
#include "common/log.h"
#include "config/config.h"
#include "gpu/labels.h"
#include "health/event_monitor.h"
#include "health/kmsg_source.h"
#include "health/liveness.h"
#include "health/xid_policy.h"
#include "metrics/http_server.h"
#include "metrics/pod_attribution.h"
#include "metrics/sampler.h"
#include "plugin/plugin_manager.h"
#include "plugin/resources.h"
#include "state/device_store.h"

namespace gpulet {
namespace {

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
};

// How often the daemon checks that its CDI spec and labels file are still as written.
constexpr absl::Duration kFileCheckInterval = absl::Seconds(10);

// Writes the CDI spec for `config`. A failure is logged, never fatal: the daemon keeps
// serving (envvar answers and metrics work without a spec) and `gpulet doctor` reports it.
void KeepCdiSpec(cdi::SpecKeeper& keeper, const Inventory& inventory, const Config& config) {
  if (config.cdi.spec_dir.empty()) {
    std::string previous = keeper.host_path();
    if (absl::Status st = keeper.Remove(); !st.ok()) {
      GPULET_LOG_ERROR("CDI spec: {}", st.message());
    } else if (!previous.empty()) {
      GPULET_LOG_INFO("CDI spec {} removed: cdi.specDir is now empty", previous);
    }
    GPULET_LOG_INFO(
        "cdi.specDir is empty: no CDI spec written; CDI names in answers ({}=…) "
        "must resolve in a spec written by someone else",
        config.plugin.cdi_kind);
    return;
  }
  cdi::SpecKeeperOptions options;
  options.spec_dir = config.cdi.spec_dir;
  options.generator.kind = config.plugin.cdi_kind;
  options.generator.driver_root = config.cdi.driver_root;
  options.generator.dev_root = config.cdi.dev_root;
  options.generator.hook_path = config.cdi.hook_path;
  absl::StatusOr<cdi::KeepResult> kept = keeper.Reconcile(inventory, options);
  if (!kept.ok()) {
    GPULET_LOG_ERROR("CDI spec: {}", kept.status().message());
    return;
  }
  for (const std::string& warning : kept->warnings) GPULET_LOG_WARN("CDI spec: {}", warning);
  GPULET_LOG_INFO("CDI spec for {} {} {}", config.plugin.cdi_kind,
                  kept->written ? "written to" : "up to date in", kept->host_path);
}

// Logs an error once for as long as it stays the same: a check that fails the same way every
// kFileCheckInterval says so once, and again only when the error changes or after it cleared.
class ErrorOnce {
 public:
  void Report(const std::string& error) {
    if (error != last_) GPULET_LOG_ERROR("{}", error);
    last_ = error;
  }
  void Clear() { last_.clear(); }

 private:
  std::string last_;
};

// Keeps the node-feature-discovery feature file holding this node's GPU labels, so that
// the node's labels follow what gpulet found (NFD's worker reads the file). Writes only when
// the file is missing or differs; errors are logged once each, never fatal.
class LabelsFile {
 public:
  LabelsFile(const HostFs* host, const Inventory& inventory)
      : host_(host),
        text_(FormatFeatureFile(ComputeGpuLabels(inventory, ReadLabelExtras(*host, inventory)))) {}

  void Keep(const std::string& host_path) {
    if (host_path.empty()) return;
    absl::StatusOr<std::string> existing = host_->ReadFile(host_path);
    if (existing.ok() && *existing == text_) return;
    absl::StatusOr<std::string> local = host_->Resolve(host_path);
    absl::Status st = local.ok() ? WriteFileAtomically(*local, text_) : local.status();
    if (!st.ok()) {
      std::string error =
          absl::IsNotFound(st)
              ? absl::StrCat("labels.featuresFile ", host_->Describe(host_path),
                             ": its directory does not exist, so the node's GPU labels are not "
                             "written. deploy/base mounts the host's features.d (created if "
                             "missing); set labels.featuresFile to \"\" to write none")
              : absl::StrCat("labels.featuresFile: ", st.message());
      errors_.Report(error);
      return;
    }
    errors_.Clear();
    GPULET_LOG_INFO("GPU labels written to {}", host_path);
  }

 private:
  const HostFs* host_;
  const std::string text_;
  ErrorOnce errors_;
};

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
    if (!InitLogging(log_level_)) {
      std::fprintf(stderr,
                   "gpulet serve: --log-level '%s' is not one of debug, info, warn, error\n",
                   log_level_.c_str());
      return kExitUsage;
    }
    absl::StatusOr<Config> config = Load();
    if (!config.ok()) {
      std::fprintf(stderr, "gpulet serve: invalid configuration: %s\n",
                   std::string(config.status().message()).c_str());
      return kExitUsage;
    }
    if (print_config_) {
      std::printf("%s", ConfigToYaml(*config).c_str());
      return kExitOk;
    }

    // Signals are handled by the main thread only: block them before any thread starts.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    umask(077);  // sockets and files we create are ours alone

    // A simulation without --host-root reads the bundled fixture root, which is data, not a
    // node: no CDI spec is written into it.
    const bool bundled_root = !ctx.global.simulate.empty() &&
                              (ctx.global.host_root.empty() || ctx.global.host_root == "/");
    DiscoveryOptions discovery;
    if (!PrepareDiscovery(ctx, &discovery, /*quiet_simulation=*/false)) return kExitUsage;
    Node node = DiscoverNode(discovery);
    DeviceStore store;
    store.SetInventory(node.inventory, absl::Now());
    if (!node.inventory.nvml_status.ok()) {
      GPULET_LOG_ERROR("NVML is unavailable; every GPU is advertised Unhealthy: {}",
                       node.inventory.nvml_status.message());
    }
    GPULET_LOG_INFO("found {} GPU(s)", node.inventory.gpus.size());
    // The CDI spec that the names in Allocate answers resolve in; before the plugin serves,
    // so that no answer names a device no spec defines.
    cdi::SpecKeeper cdi_spec(node.host.get());
    if (bundled_root) {
      GPULET_LOG_INFO(
          "simulation on the bundled fixture root: no CDI spec written (pass "
          "--host-root with a writable copy of {} to have one)",
          node.host->root());
    } else {
      KeepCdiSpec(cdi_spec, node.inventory, *config);
    }
    LabelsFile labels(node.host.get(), node.inventory);
    std::string labels_path = bundled_root ? "" : config->labels.features_file;
    labels.Keep(labels_path);

    ControlNodes control;
    const DriverInfo& drv = node.inventory.driver;
    if (drv.dev_nvidiactl) control.paths.push_back("/dev/nvidiactl");
    if (drv.dev_nvidia_uvm) control.paths.push_back("/dev/nvidia-uvm");
    if (drv.dev_nvidia_uvm_tools) control.paths.push_back("/dev/nvidia-uvm-tools");
    if (drv.dev_nvidia_modeset) control.paths.push_back("/dev/nvidia-modeset");

    auto shared_config = std::make_shared<const Config>(*config);
    PluginManager plugins(&store, control);
    absl::Status started = plugins.Start(shared_config);
    if (!started.ok()) {
      GPULET_LOG_ERROR("{}", started.message());
      return kExitFailure;
    }
    std::unique_ptr<LivenessMonitor> liveness;
    if (node.gpus) {
      LivenessMonitor::Options lo;
      lo.interval = config->health.probe_interval;
      lo.quiet_period = config->health.quiet_period;
      lo.probe_timeout = config->health.hang_timeout;
      liveness = std::make_unique<LivenessMonitor>(node.gpus.get(), &store, lo);
      liveness->Start();
    }
    // Metrics: the sampler renders, the HTTP server copies.
    // In a pod, gethostname() is the pod's name, which changes on every rollout; the
    // DaemonSet passes the node's name (downward API) in NODE_NAME, as dcgm-exporter's does.
    char hostname[256] = {};
    gethostname(hostname, sizeof(hostname) - 1);
    if (const char* node_name = std::getenv("NODE_NAME"); node_name != nullptr && *node_name) {
      std::snprintf(hostname, sizeof(hostname), "%s", node_name);
    }
    Sampler::Options so;
    so.interval = config->metrics.sample_interval;
    so.timeout = std::min(config->metrics.sample_interval, absl::Seconds(1));
    Sampler sampler(node.gpus.get(), &store, node.host.get(), so,
                    {hostname, node.inventory.system.driver_version});
    // Pod labels: from the kubelet's PodResources API, on their own thread.
    std::unique_ptr<PodAttributor> pods;
    if (config->metrics.pod_attribution) {
      PodAttributor::Options po;
      po.socket_dir = JoinPath(config->kubelet_dir, "pod-resources");
      po.interval = config->metrics.pod_resources_interval;
      for (const ResourceSpec& r : ResourcesFor(*config)) po.resources.insert(r.name);
      pods = std::make_unique<PodAttributor>(
          MakeKubeletPodResourcesClient(JoinPath(po.socket_dir, "kubelet.sock")), &store,
          node.host.get(), po);
      sampler.AttributePodsWith(pods.get());
    }
    std::unique_ptr<MetricsServer> http;
    if (!config->metrics.address.empty()) {
      absl::StatusOr<WebConfig> web = LoadWebConfig(config->metrics.web_config_file);
      if (!web.ok()) {
        GPULET_LOG_ERROR("metrics.webConfigFile: {}", web.status().message());
        plugins.Stop();
        return kExitUsage;
      }
      if (pods) pods->Start();
      sampler.Start();
      http = std::make_unique<MetricsServer>(&sampler, &store, *web);
      absl::Status listening = http->Start(config->metrics.address);
      if (!listening.ok()) {
        GPULET_LOG_ERROR("{}", listening.message());
        sampler.Stop();
        plugins.Stop();
        return kExitFailure;
      }
      GPULET_LOG_INFO("metrics on {} (/metrics, /healthz, /status)", config->metrics.address);
    }
    // XIDs from NVML events and the kernel log, through one policy.
    XidPolicy xid_policy(&store,
                         std::set<int>(config->health.application_xids.begin(),
                                       config->health.application_xids.end()),
                         config->health.quiet_period);
    std::unique_ptr<KernelLogSource> kmsg;
    if (config->health.kmsg) {
      DevKmsgOptions ko;
      ko.host_root = node.host->root();
      kmsg = std::make_unique<DevKmsgSource>(ko);
    }
    unsigned gpu_count = 0;
    for (const Gpu& g : node.inventory.gpus) gpu_count += g.in_nvml ? 1 : 0;
    EventMonitor events(node.gpus.get(), gpu_count, std::move(kmsg), &xid_policy);
    events.Start();
    GPULET_LOG_INFO("gpulet {} serving {} on {}/device-plugins", GPULET_VERSION,
                    config->AdvertisedResources()[0], config->kubelet_dir);

    absl::Time next_file_check = absl::Now() + kFileCheckInterval;
    ErrorOnce cdi_errors;
    while (true) {
      struct timespec wait = {1, 0};
      int sig = sigtimedwait(&signals, nullptr, &wait);
      if (absl::Now() >= next_file_check) {
        next_file_check = absl::Now() + kFileCheckInterval;
        labels.Keep(labels_path);
        absl::StatusOr<bool> rewritten = cdi_spec.Verify();
        if (!rewritten.ok()) {
          cdi_errors.Report(absl::StrCat("CDI spec: ", rewritten.status().message()));
        } else {
          cdi_errors.Clear();
          if (*rewritten) {
            GPULET_LOG_WARN("CDI spec {} was missing or changed on disk; written again",
                            cdi_spec.host_path());
          }
        }
      }
      if (sig == SIGHUP) {
        absl::StatusOr<Config> next = Load();
        if (!next.ok()) {
          GPULET_LOG_ERROR("SIGHUP: keeping the running configuration; the new one is invalid: {}",
                           next.status().message());
          continue;
        }
        GPULET_LOG_INFO("SIGHUP: configuration reloaded");
        if (!bundled_root) {
          KeepCdiSpec(cdi_spec, node.inventory, *next);
          labels_path = next->labels.features_file;
          labels.Keep(labels_path);
        }
        plugins.Reconfigure(std::make_shared<const Config>(*next));
      } else if (sig == SIGTERM || sig == SIGINT) {
        GPULET_LOG_INFO("received {}: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        break;
      }
    }
    store.Shutdown();
    if (http) http->Stop();
    events.Stop();
    sampler.Stop();
    if (pods) pods->Stop();
    if (liveness) liveness->Stop();
    plugins.Stop();
    GPULET_LOG_INFO("stopped");
    return kExitOk;
  }

 private:
  absl::StatusOr<Config> Load() {
    ConfigOverrides overrides;
    for (const auto& [opt, key] : options_) {
      if (opt->count() > 0) overrides[key] = values_[key];
    }
    return LoadConfig(config_file_, overrides);
  }

  std::string config_file_;
  bool print_config_ = false;
  std::string log_level_ = "info";
  std::map<std::string, std::string> values_;
  std::vector<std::pair<CLI::Option*, std::string>> options_;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeServeCommand() { return std::make_unique<ServeCommand>(); }

}  // namespace gpulet
