#include "daemon/daemon.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cluster/labels.h"
#include "common/host_fs.h"
#include "common/keyed_status.h"
#include "common/log.h"
#include "daemon/compute_shares.h"
#include "daemon/driver_limits.h"
#include "daemon/quarantine_events.h"
#include "daemon/reload_table.h"
#include "daemon/slice_events.h"
#include "dra/registration.h"
#include "health/kmsg_source.h"
#include "node/device_holders.h"
#include "node/driver_gpus.h"
#include "node/os_release.h"
#include "plugin/resources.h"
#include "recorder/fault_keeper.h"
#include "recorder/pci_link.h"
#include "talos/machine_client.h"
#include "vram/slice_file.h"

namespace gpulet::daemon {
namespace {

// The one validator (config.cc) run on a Config built in code: through its YAML form, so the
// error names the key exactly as a bad file would.
absl::Status ValidateConfig(const config::Config& config) {
  return config::ParseConfig(config::ConfigToYaml(config), "configuration", {}).status();
}

// metrics.webConfigFile, read; its errors are the user's (InvalidArgument) and keyed.
absl::StatusOr<http::WebConfig> LoadKeyedWebConfig(const config::Config& config) {
  absl::StatusOr<http::WebConfig> web = http::LoadWebConfig(config.metrics.web_config_file);
  if (!web.ok()) {
    return AtKey("metrics.webConfigFile", absl::InvalidArgumentError(web.status().message()));
  }
  return web;
}

plugin::ControlNodes ControlNodesOf(const node::DriverInfo& drv) {
  plugin::ControlNodes control;
  if (drv.dev_nvidiactl) control.paths.push_back("/dev/nvidiactl");
  if (drv.dev_nvidia_uvm) control.paths.push_back("/dev/nvidia-uvm");
  if (drv.dev_nvidia_uvm_tools) control.paths.push_back("/dev/nvidia-uvm-tools");
  if (drv.dev_nvidia_modeset) control.paths.push_back("/dev/nvidia-modeset");
  control.mig_minors = drv.mig_minors;
  return control;
}

// The resource names pod attribution counts as ours; the mixed MIG strategy's per-profile
// resources come and go with the layout, so they are matched by prefix.
std::set<std::string> ResourceNames(const config::Config& config) {
  std::set<std::string> out;
  for (const plugin::ResourceSpec& r : plugin::ResourcesFor(config)) out.insert(r.name);
  if (config.plugin.mig_strategy == config::MigStrategy::kMixed) {
    const std::string& name = config.resource_name;
    out.insert(absl::StrCat(name.substr(0, name.find('/')), "/mig-*"));
  }
  return out;
}

// Whether a metrics stack built for `a` is the one `b` needs (the web config's content is
// compared separately).
bool SameMetricsInputs(const config::Config& a, const config::Config& b) {
  const config::Config::Metrics& x = a.metrics;
  const config::Config::Metrics& y = b.metrics;
  if (x.address != y.address || x.web_config_file != y.web_config_file ||
      x.sample_interval != y.sample_interval || x.pod_attribution != y.pod_attribution) {
    return false;
  }
  // What the sampler's rounds act on (MakeMetrics captures each): the slice guard, the flight
  // recorder and the remediation rungs, with the quiet period the reset rung's probation
  // lasts.
  const config::Config::Health& h = a.health;
  const config::Config::Health& k = b.health;
  if (a.sharing.memory_slices.over_quota != b.sharing.memory_slices.over_quota ||
      h.recorder != k.recorder || h.evict != k.evict || h.reset != k.reset ||
      h.reboot != k.reboot || h.quiet_period != k.quiet_period) {
    return false;
  }
  if (!x.pod_attribution) return true;
  return x.pod_resources_interval == y.pod_resources_interval && a.kubelet_dir == b.kubelet_dir &&
         ResourceNames(a) == ResourceNames(b) && a.dra.driver_name == b.dra.driver_name;
}

// Contents too: a certificate renewed at the same path (cert-manager, a cron job) is applied
// by SIGHUP.
bool SameWebConfig(const http::WebConfig& a, const http::WebConfig& b) {
  return a.cert_file == b.cert_file && a.key_file == b.key_file && a.users == b.users &&
         a.cert_pem == b.cert_pem && a.key_pem == b.key_pem;
}

std::string MetricsLine(const config::Config& config) {
  return absl::StrCat("metrics on ", config.metrics.address, " (/metrics, /healthz, /status)");
}

// `inventory` (what discovery found) with the MIG layouts of `snap`, which the MIG watcher
// keeps current while an operator re-partitions a GPU under gpulet.
gpu::Inventory WithMigLayouts(gpu::Inventory inventory, const state::Snapshot& snap) {
  for (const state::DeviceRecord& r : snap.devices) {
    if (gpu::Gpu* g = inventory.FindByUuid(r.gpu.uuid); g != nullptr) {
      g->mig_enabled = r.gpu.mig_enabled;
      g->mig_devices = r.gpu.mig_devices;
    }
  }
  return inventory;
}

}  // namespace

std::string ReloadResult::Summary() const {
  if (changed_keys.empty() && actions.empty()) return "no setting changed";
  return absl::StrCat("changed ",
                      changed_keys.empty() ? "nothing" : absl::StrJoin(changed_keys, ", "), "; ",
                      actions.empty() ? "nothing to do" : absl::StrJoin(actions, "; "));
}

Daemon::Daemon(nvml::Node node, config::Config config, DaemonOptions options)
    : options_(std::move(options)),
      node_(std::move(node)),
      boot_id_(node_.host->ReadAttribute("/proc/sys/kernel/random/boot_id").value_or("")),
      config_(std::move(config)),
      control_(ControlNodesOf(node_.inventory.driver)),
      files_inventory_(node_.inventory),
      files_(node_.host.get(), &files_inventory_, options_.bundled_fixture_root, &store_,
             options_.clock) {
  ProcessKiller* killer = options_.process_killer;
  if (killer == nullptr) {
    own_killer_ = MakeProcessKiller(node_.host->root());
    killer = own_killer_.get();
  }
  slice_guard_ = std::make_shared<SliceGuard>(killer);
  recorder::FlightRecorder::Options ro;
  ro.node = options_.node_name;
  ro.boot_id = boot_id_;
  ro.driver_version = node_.inventory.system.driver_version;
  recorder_ = std::make_shared<recorder::FlightRecorder>(ro);
  retirement_ = std::make_unique<GpuRetirement>(&store_, event_inbox_.get(), options_.clock);
  resetter_ = options_.gpu_resetter;
  if (resetter_ == nullptr) {
    own_resetter_ = std::make_unique<node::SysfsGpuResetter>(node_.host.get());
    resetter_ = own_resetter_.get();
  }
  PeriodicWorker::Options reset;
  reset.name = "gpulet-reset";
  reset.interval = absl::Minutes(1);  // and woken when the rung orders a reset
  reset.clock = options_.clock;
  reset.tick_at_start = false;
  reset_worker_ = std::make_unique<PeriodicWorker>(reset, [this] { ResetDue(); });
  reboot_rung_ = std::make_shared<RebootRung>(boot_id_);
}

Daemon::~Daemon() { Stop(); }

int Daemon::metrics_port() const {
  absl::MutexLock lock(&lifecycle_mu_);  // the reset thread may be replacing the server
  return metrics_ != nullptr && metrics_->http != nullptr ? metrics_->http->port() : 0;
}

absl::Status Daemon::Start() {
  if (started_) return absl::FailedPreconditionError("the daemon was started already");
  started_ = true;
  absl::Status started;
  {
    absl::MutexLock lock(&lifecycle_mu_);
    started = StartAll();
  }
  if (!started.ok()) {
    Stop();  // the same path as shutdown: whatever started, stops
    return started;
  }
  reset_worker_->Start();
  return started;
}

void Daemon::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  // First the thread that may restart the components (a reset under way finishes).
  reset_worker_->Stop();
  absl::MutexLock lock(&lifecycle_mu_);
  // Wake every ListAndWatch stream waiting on the store, so the gRPC servers can stop.
  store_.Shutdown();
  lifecycle_.Stop();
  if (options_.bundled_fixture_root) {
    std::error_code ignored;
    std::filesystem::remove_all(SimulationSliceRoot(), ignored);
  }
}

absl::Status Daemon::StartCluster(Cluster* cluster) {
  if (cluster == nullptr) return absl::OkStatus();
  if (cluster->reporter != nullptr) {
    cluster->reporter->Start();
    GPULET_LOG_INFO("reporting GPU health on Node {} to the API server", options_.node_name);
  }
  if (cluster->evictor != nullptr) cluster->evictor->Start();
  if (cluster->dra != nullptr) {
    if (absl::Status s = cluster->dra->Start(); !s.ok()) {
      return AtKey("dra.enabled", s);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<dra::DraDriver>> Daemon::MakeDra(const config::Config& config,
                                                                kube::KubeClient* client) {
  if (options_.node_name.empty()) {
    return AtKey("dra.enabled", absl::InvalidArgumentError(
                                    "the node's name is unknown; set NODE_NAME (the DaemonSet "
                                    "passes it from spec.nodeName)"));
  }
  if (config.cdi.spec_dir.empty()) {
    return absl::InvalidArgumentError(
        "dra.enabled needs cdi.specDir: prepared claims are handed to the runtime as CDI "
        "devices; set cdi.specDir (default /var/run/cdi)");
  }
  if (options_.bundled_fixture_root) {
    return absl::InvalidArgumentError(
        "dra.enabled needs a host root gpulet can write claim specs and its checkpoint to, not "
        "the bundled simulator fixture; pass --host-root with a copy of it");
  }
  if (config.dra.rolling_update) {
    if (options_.pod_uid.empty()) {
      return AtKey("dra.rollingUpdate",
                   absl::InvalidArgumentError(
                       "the pod's UID is unknown; set POD_UID to the pod's metadata.uid through "
                       "the downward API (deploy/dra does), or set dra.rollingUpdate to false"));
    }
    if (absl::Status s = dra::CheckInstanceName(options_.pod_uid); !s.ok()) {
      return AtKey("dra.rollingUpdate",
                   absl::InvalidArgumentError(absl::StrCat("POD_UID: ", s.message())));
    }
  }
  absl::StatusOr<std::string> checkpoint = node_.host->Resolve(config.dra.checkpoint_file);
  if (!checkpoint.ok()) {
    return AtKey("dra.checkpointFile", absl::InvalidArgumentError(checkpoint.status().message()));
  }
  absl::StatusOr<std::string> cdi_dir = node_.host->Resolve(config.cdi.spec_dir);
  if (!cdi_dir.ok()) {
    return AtKey("cdi.specDir", absl::InvalidArgumentError(cdi_dir.status().message()));
  }
  // A checkpoint that cannot be trusted fails the reload before anything is touched.
  if (absl::StatusOr<dra::ClaimCheckpoint> loaded = dra::CheckpointFile(*checkpoint).Load();
      !loaded.ok()) {
    return AtKey("dra.checkpointFile", absl::FailedPreconditionError(loaded.status().message()));
  }
  dra::DraDriverOptions o;
  o.kubelet_dir = config.kubelet_dir;
  o.checkpoint_path = *checkpoint;
  if (config.dra.rolling_update) o.instance = options_.pod_uid;
  o.slices.driver = config.dra.driver_name;
  o.slices.node_name = options_.node_name;
  o.slices.memory_shares = config.dra.memory_shares.enabled;
  o.slices.share_mib = config.dra.memory_shares.step_mib;
  o.slices.no_execute_on_fatal = config.dra.no_execute_on_fatal;
  o.slices.gpus = config.dra.gpus;
  o.slices.driver_version = node_.inventory.system.driver_version;
  o.slices.cuda_driver_version = node_.inventory.system.CudaVersionString();
  o.preparer.cdi_dir = *cdi_dir;
  o.preparer.generator.driver_root = config.cdi.driver_root;
  o.preparer.generator.dev_root = config.cdi.dev_root;
  o.preparer.generator.hook_path = config.cdi.hook_path;
  const plugin::SliceFiles slice_files = SliceFilesFor();
  o.preparer.vram.enforce = config.sharing.memory_slices.enforce;
  o.preparer.vram.compute_share = config.sharing.memory_slices.compute_share;
  o.preparer.vram.host_dir = config.sharing.memory_slices.host_dir;
  absl::StatusOr<std::string> local_dir =
      slice_files.LocalDir(config.sharing.memory_slices.host_dir);
  o.preparer.vram.local_dir = local_dir.value_or("");
  o.preparer.vram.library = local_dir.ok() ? slice_files.library : "";
  o.preparer.vram.library_error =
      local_dir.ok() ? slice_files.library_error : std::string(local_dir.status().message());
  return std::make_unique<dra::DraDriver>(
      std::move(o), client, &store_,
      [this] {
        absl::MutexLock lock(&files_mu_);
        return files_inventory_;
      },
      node_.host.get(), options_.clock);
}

absl::StatusOr<std::unique_ptr<Daemon::Cluster>> Daemon::MakeCluster(const config::Config& config) {
  if (!config.cluster.enabled && !config.dra.enabled) return nullptr;
  const bool in_cluster = config.cluster.kubeconfig.empty();
  absl::StatusOr<kube::KubeConfig> api =
      in_cluster ? kube::LoadInClusterConfig(kube::InClusterSource::FromEnvironment())
                 : kube::LoadKubeconfig(config.cluster.kubeconfig);
  // The key a user changes to fix what follows: the kubeconfig named, or the switch that asked
  // for the pod's own service account.
  const char* key = !in_cluster              ? "cluster.kubeconfig"
                    : config.cluster.enabled ? "cluster.enabled"
                                             : "dra.enabled";
  if (!api.ok()) {
    return AtKey(key,
                 absl::InvalidArgumentError(absl::StrCat(
                     in_cluster ? "the pod's service account: " : "", api.status().message())));
  }
  auto cluster = std::make_unique<Cluster>();
  absl::StatusOr<std::unique_ptr<kube::KubeClient>> client =
      kube::KubeClient::FromConfig(*api, kube::KubeClientOptions(), options_.clock);
  if (!client.ok()) return AtKey(key, absl::InvalidArgumentError(client.status().message()));
  cluster->client = std::move(*client);
  if (config.dra.enabled) {
    // The DRA driver's calls have their own client and rate limit: a claim's prepare is a
    // pod start the kubelet waits on, so it must not queue behind the reporter's writes, nor
    // at client-go's 5 per second when a node starts a batch of pods.
    kube::KubeClientOptions dra_options;
    dra_options.qps = 20;
    dra_options.burst = 40;
    dra_options.request_timeout = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<kube::KubeClient>> dra_client =
        kube::KubeClient::FromConfig(*api, dra_options, options_.clock);
    if (!dra_client.ok()) {
      return AtKey(in_cluster ? "dra.enabled" : "cluster.kubeconfig",
                   absl::InvalidArgumentError(dra_client.status().message()));
    }
    cluster->dra_client = std::move(*dra_client);
    absl::StatusOr<std::unique_ptr<dra::DraDriver>> driver =
        MakeDra(config, cluster->dra_client.get());
    if (!driver.ok()) return driver.status();
    cluster->dra = std::move(*driver);
  }
  if (!config.cluster.enabled) return cluster;
  cluster::NodeReporter::Options ro;
  ro.node_name = options_.node_name;
  const char* pod = std::getenv("POD_NAME");
  ro.instance = pod != nullptr && *pod != '\0' ? pod : options_.node_name;
  ro.heartbeat = config.cluster.heartbeat;
  ro.hold = config.health.quiet_period;
  ro.events = config.cluster.events;
  ro.taint = config.cluster.taint.enabled;
  ro.taint_effect = config.cluster.taint.effect;
  ro.taint_share = config.cluster.taint.share;
  ro.node_labels = config.cluster.node_labels;
  ro.inbox = event_inbox_;
  if (ro.node_labels) {
    // The host's part read once; the GPUs' part from each snapshot, so that the labels follow
    // a MIG layout changed under gpulet (found by make e2e's mig scenario: the Node kept the
    // labels of the layout gpulet started with).
    ro.labels = [inventory = node_.inventory,
                 extras = cluster::ReadLabelExtras(*node_.host, node_.inventory),
                 sharing = cluster::LabelSharingFromConfig(config)](const state::Snapshot& snap) {
      return cluster::ComputeGpuLabels(WithMigLayouts(inventory, snap), extras, sharing);
    };
  }
  cluster->reporter =
      std::make_unique<cluster::NodeReporter>(&store_, cluster->client.get(), ro, options_.clock);
  if (config.health.evict.mode == config::RemediationMode::kOn) {
    kube::KubeClientOptions evict_options;
    evict_options.max_attempts = 1;
    absl::StatusOr<std::unique_ptr<kube::KubeClient>> evict_client =
        kube::KubeClient::FromConfig(*api, evict_options, options_.clock);
    if (!evict_client.ok())
      return AtKey(key, absl::InvalidArgumentError(evict_client.status().message()));
    cluster->evict_client = std::move(*evict_client);
    cluster->evictor = std::make_unique<cluster::PodEvictor>(
        evictions_.get(), cluster->evict_client.get(), event_inbox_.get(),
        options_.eviction_interval, options_.clock);
  }
  return cluster;
}

std::unique_ptr<plugin::PluginManager> Daemon::MakePlugins() {
  return std::make_unique<plugin::PluginManager>(&store_, control_, options_.clock,
                                                 SliceFilesFor());
}

plugin::SliceFiles Daemon::SliceFilesFor() const {
  plugin::SliceFiles files;
  // A simulation of the bundled fixture reads data, not a node: sliced containers' files go
  // to a directory of this process's, removed when it stops.
  files.host_root = options_.bundled_fixture_root ? SimulationSliceRoot() : node_.host->root();
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  absl::StatusOr<std::string> library = vram::FindLibraryBeside(exe.string());
  if (library.ok()) {
    files.library = *library;
  } else {
    files.library_error = std::string(library.status().message());
  }
  return files;
}

std::string Daemon::SimulationSliceRoot() const {
  const char* tmp = std::getenv("TMPDIR");
  return JoinPath(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp",
                  absl::StrCat("gpulet-sim-slices-", getpid()));
}

std::unique_ptr<health::LivenessMonitor> Daemon::MakeLiveness(const config::Config& config) {
  health::LivenessMonitor::Options lo;
  lo.interval = config.health.probe_interval;
  lo.quiet_period = config.health.quiet_period;
  lo.probe_timeout = config.health.hang_timeout;
  lo.clock = options_.clock;
  return std::make_unique<health::LivenessMonitor>(node_.gpus.get(), &store_, lo);
}

absl::StatusOr<std::unique_ptr<Daemon::Metrics>> Daemon::MakeMetrics(const config::Config& config) {
  auto m = std::make_unique<Metrics>();
  absl::StatusOr<http::WebConfig> web = LoadKeyedWebConfig(config);
  if (!web.ok()) return web.status();
  m->web = *std::move(web);
  // The sampler renders, the HTTP server copies.
  metrics::Sampler::Options so;
  so.interval = config.metrics.sample_interval;
  so.timeout = std::min(config.metrics.sample_interval, absl::Seconds(1));
  so.clock = options_.clock;
  const plugin::SliceFiles slice_files = SliceFilesFor();
  std::function<void(const metrics::SampleSet&, const state::Snapshot&)> slice_round;
  // The driver's own limits, where the node has them, for enforced slices (docs/sharing.md).
  std::shared_ptr<DriverLimits> limits;
  if (config.sharing.memory_slices.enabled || config.dra.memory_shares.enabled) {
    if (config.sharing.memory_slices.enforce && !slice_files.library.empty()) {
      limits = std::make_shared<DriverLimits>(node_.gpus.get(), node_.host.get());
    }
    absl::StatusOr<std::string> local_dir =
        slice_files.LocalDir(config.sharing.memory_slices.host_dir);
    if (!local_dir.ok()) {
      GPULET_LOG_ERROR("VRAM slices are not sampled: {}", local_dir.status().message());
    }
    so.slice_dir = local_dir.value_or("");
    // Slices with a compute share get their launch rate each round (docs/sharing.md).
    std::shared_ptr<ComputeShares> compute;
    if (!so.slice_dir.empty()) compute = std::make_shared<ComputeShares>(so.slice_dir);
    // A slice at its quota becomes a Node event, through the inbox the cluster reporter of
    // the day drains (a new sampler starts from what it finds: nothing is reported twice).
    // A slice over its quota by the driver's count goes to the guard, which says so or kills.
    auto events = std::make_shared<SliceQuotaEvents>();
    slice_round = [events, guard = slice_guard_, policy = config.sharing.memory_slices.over_quota,
                   inbox = event_inbox_, clock = options_.clock, limits,
                   compute](const metrics::SampleSet& set, const state::Snapshot& snap) {
      if (limits != nullptr) limits->Next(set.slices, snap, clock->Now());
      if (compute != nullptr) compute->Next(set.slices, clock->Now());
      std::vector<cluster::NodeEvent> e = events->Next(set.slices, snap, set.pods.get());
      std::vector<cluster::NodeEvent> over =
          guard->Next(set.slices, snap, set.pods.get(), policy, clock->Now());
      e.insert(e.end(), std::make_move_iterator(over.begin()), std::make_move_iterator(over.end()));
      if (!e.empty()) inbox->Post(std::move(e));
    };
  }
  // The flight recorder records every round (a zero window drops what it kept); a GPU's
  // fault is written to the host and judged, and its verdict shown in /status.
  std::shared_ptr<recorder::FaultKeeper> faults;
  if (config.health.recorder.window > absl::ZeroDuration()) {
    faults = std::make_shared<recorder::FaultKeeper>(RecorderFilesFor(config));
    faults->Load();
    so.last_fault = [faults](const state::DeviceRecord& d) { return faults->Latest(d.gpu.uuid); };
  }
  // A GPU that goes out is an Event on every pod holding it, for the cluster reporter; one
  // that stays out has those pods evicted (health.evict), by the cluster's evictor.
  auto quarantine = std::make_shared<QuarantineEvents>();
  if (config.health.evict.mode == config::RemediationMode::kOn &&
      (!config.cluster.enabled || !config.metrics.pod_attribution)) {
    GPULET_LOG_WARN("health.evict.mode is on, but no pod will be evicted: it needs {}",
                    !config.cluster.enabled ? "cluster.enabled (the API server's Eviction API)"
                                            : "metrics.podAttribution (which pods hold a GPU)");
  }
  so.evictions = [queue = evictions_] { return queue->ByGpu(); };
  so.resets = [rung = reset_rung_] { return rung->ByGpu(); };
  so.reboots = [rung = reboot_rung_] { return rung->ByGpu(); };
  // The reboot rung's hand: kured's sentinel under the host root, or Talos' machine API after
  // gpulet's own cordon and drain (health.reboot.via; not for the bundled fixture, which is
  // data).
  std::shared_ptr<node::NodeRebooter> rebooter;
  const bool talos_node = node::ReadOsRelease(*node_.host).talos;
  const std::string& via = config.health.reboot.via;
  const bool through_talos = via == "talos" || (via == "auto" && talos_node);
  if (options_.rebooter != nullptr) {
    rebooter = std::shared_ptr<node::NodeRebooter>(std::shared_ptr<void>(), options_.rebooter);
  } else if (options_.bundled_fixture_root) {
    // no hand: a simulation of the fixture reboots nothing
  } else if (through_talos) {
    if (config.health.reboot.mode == config::RemediationMode::kOn) {
      rebooter = TalosRebooterFor(config);
      if (rebooter == nullptr) {
        reboot_rung_->SetNoRebooterReason(
            config.cluster.enabled
                ? "the API client for the drain could not be made (see the log)"
                : "a reboot through Talos' API needs cluster.enabled (gpulet cordons and drains "
                  "the node through the API server first)");
      }
    }
  } else {
    if (talos_node && config.health.reboot.mode == config::RemediationMode::kOn) {
      GPULET_LOG_WARN(
          "health.reboot.via is kured on a Talos node: kured does not run on Talos, so the "
          "sentinel asks nobody; set health.reboot.via to auto or talos (deploy/reboot-talos)");
    }
    rebooter =
        std::make_shared<node::KuredSentinel>(node_.host.get(), config.health.reboot.sentinel);
  }
  so.on_round = [slice_round, faults, quarantine, inbox = event_inbox_, recorder = recorder_,
                 rung = eviction_rung_, evictions = evictions_, evict = config.health.evict,
                 retirement = retirement_.get(), host = node_.host.get(), d = this,
                 reset = config.health.reset, quiet = config.health.quiet_period,
                 reboot = config.health.reboot, reboot_record = RebootRecordFor(config), rebooter,
                 window = config.health.recorder.window, interval = so.interval,
                 clock = options_.clock](const metrics::SampleSet& set,
                                         const state::Snapshot& snap) {
    if (slice_round) slice_round(set, snap);
    if (std::vector<cluster::NodeEvent> e = quarantine->Next(snap, set.pods.get()); !e.empty()) {
      inbox->Post(std::move(e));
    }
    EvictionRung::Round eviction = rung->Next(snap, set.pods.get(), evict, clock->Now());
    for (const std::string& gpu : eviction.withdrawn) evictions->Withdraw(gpu);
    for (cluster::EvictionOrder& o : eviction.would_evict) evictions->AddDryRun(std::move(o));
    for (cluster::EvictionOrder& o : eviction.orders) evictions->Add(std::move(o));
    if (!eviction.events.empty()) inbox->Post(std::move(eviction.events));
    // Asked only for a GPU whose processes NVML could not list (one that requires a reset).
    const ResetRung::HolderLookup holders = [host](const gpu::Gpu& g) {
      node::DeviceHolderOptions o;
      o.self_pid = static_cast<unsigned>(getpid());  // the host's pid: the pod has hostPID
      return node::ProcessesHolding(*host, g.DeviceNode(), o);
    };
    ResetRung::Round resets =
        d->reset_rung_->Next(snap, set.by_uuid, set.pods.get(), holders, reset, quiet,
                             ResetRung::SettleFor(interval), clock->Now());
    for (const std::string& gpu : resets.probation_over) {
      d->store_.UpdateHealth(
          gpu, [&](state::GpuHealth& h) { h.Clear(ResetRung::kSource, clock->Now()); });
    }
    if (!resets.events.empty()) inbox->Post(std::move(resets.events));
    if (!resets.orders.empty()) {
      {
        absl::MutexLock lock(&d->resets_mu_);
        for (ResetRung::Order& o : resets.orders) d->pending_resets_.push_back(std::move(o));
      }
      d->reset_worker_->Wake();  // before Start (the first round): it runs once started
    }
    std::map<std::string, recorder::PciLinkReading> pci;
    if (window > absl::ZeroDuration()) {
      for (const state::DeviceRecord& d : snap.devices) {
        if (!d.gpu.bus_id.empty()) {
          pci[d.gpu.uuid.empty() ? d.gpu.bus_id : d.gpu.uuid] =
              recorder::ReadPciLink(*host, d.gpu.bus_id);
        }
      }
    }
    for (recorder::RecorderDump& dump :
         recorder->Record(set, snap, pci, window, interval, clock->Now())) {
      if (faults == nullptr) continue;
      const std::string uuid = dump.uuid;
      faults->Keep(std::move(dump));
      retirement->Consider(uuid, faults->Faults(uuid));
    }
    // Last: the recording of a fault is on the host before a reboot is asked for.
    if (std::vector<cluster::NodeEvent> e =
            d->reboot_rung_->Next(snap, reboot, reboot_record.get(), rebooter.get(), clock->Now());
        !e.empty()) {
      inbox->Post(std::move(e));
    }
  };
  // What holds each GPU's VRAM quotas, for /metrics and /status (docs/sharing.md).
  so.vram_holder = [config, library = !slice_files.library.empty(),
                    limits](const state::DeviceRecord& d) {
    if (!config.QuotasOn(d.gpu.index, d.gpu.uuid, d.gpu.mig_enabled)) return std::string();
    if (!config.sharing.memory_slices.enforce) return std::string("none");
    if (!library) return std::string("refused");
    return std::string(limits != nullptr && limits->DriverHolds(d.gpu.uuid) ? "driver" : "library");
  };
  m->sampler = std::make_unique<metrics::Sampler>(
      node_.gpus.get(), &store_, node_.host.get(), so,
      metrics::RenderInfo{options_.node_name, node_.inventory.system.driver_version,
                          &reload_errors_, so.slice_dir.empty() ? nullptr : slice_guard_->kills(),
                          [queue = evictions_] { return queue->counts(); },
                          [rung = reset_rung_] { return rung->counts(); },
                          [rung = reboot_rung_] { return rung->counts(); }});
  // Pod labels: from the kubelet's PodResources API, on their own thread.
  if (config.metrics.pod_attribution) {
    metrics::PodAttributor::Options po;
    po.socket_dir = JoinPath(config.kubelet_dir, "pod-resources");
    po.interval = config.metrics.pod_resources_interval;
    po.resources = ResourceNames(config);
    po.dra = {config.dra.driver_name, options_.node_name};
    po.clock = options_.clock;
    m->pods = std::make_unique<metrics::PodAttributor>(
        metrics::MakeKubeletPodResourcesClient(JoinPath(po.socket_dir, "kubelet.sock")), &store_,
        node_.host.get(), po);
    m->sampler->AttributePodsWith(m->pods.get());
    m->pods->Start();
  }
  // One round before the server listens: a scrape of a new server (at start, or while a
  // reload swaps servers) never sees the GPUs as not answering just because no round ran.
  m->sampler->SampleOnce();
  m->sampler->Start();
  m->http =
      std::make_unique<metrics::MetricsServer>(m->sampler.get(), &store_, m->web, options_.clock);
  // A reload on the same address shares the running server's socket: a fixed port cannot be
  // bound twice, and the port must not close while the old server hands over.
  const metrics::MetricsServer* running = metrics_ != nullptr ? metrics_->http.get() : nullptr;
  if (absl::Status s = m->http->Start(config.metrics.address, running); !s.ok()) {
    // A cert and key that GnuTLS refuses (garbage, or not a pair: Start's one InvalidArgument)
    // are the web config's fault.
    if (absl::IsInvalidArgument(s)) return AtKey("metrics.webConfigFile", s);
    return s;
  }
  return m;
}

std::unique_ptr<recorder::RecorderFiles> Daemon::RecorderFilesFor(
    const config::Config& config) const {
  if (config.health.recorder.dir.empty()) return nullptr;
  std::optional<std::string> local = HostStatePath(
      "health.recorder.dir", config.health.recorder.dir, "recordings are kept in memory only");
  if (!local) return nullptr;
  return std::make_unique<recorder::RecorderFiles>(*local, config.health.recorder.dir);
}

std::optional<std::string> Daemon::HostStatePath(const char* key, const std::string& path,
                                                 const char* otherwise) const {
  // The bundled simulator fixture is data, not a node: nothing is written into it.
  if (options_.bundled_fixture_root) return std::nullopt;
  // A host path: resolved inside the host root, so a symlink cannot lead the writes out.
  absl::StatusOr<std::string> local = node_.host->Resolve(path);
  if (!local.ok()) {
    GPULET_LOG_WARN("{} {}: {}; {}", key, path, local.status().message(), otherwise);
    return std::nullopt;
  }
  return *std::move(local);
}

std::unique_ptr<recorder::RetiredFile> Daemon::RetiredFileFor(const config::Config& config) const {
  std::optional<std::string> local =
      HostStatePath("health.retire.file", config.health.retire.file, "no GPU is retired");
  if (!local) return nullptr;
  return std::make_unique<recorder::RetiredFile>(*local, config.health.retire.file);
}

std::shared_ptr<node::NodeRebooter> Daemon::TalosRebooterFor(const config::Config& config) {
  const config::Config::Health::Reboot& r = config.health.reboot;
  const char* node_ip = std::getenv("GPULET_NODE_IP");
  const std::string settings =
      absl::StrCat(r.talosconfig, "|", r.talos_endpoint, "|", absl::FormatDuration(r.drain_timeout),
                   "|", config.cluster.kubeconfig, "|", node_ip != nullptr ? node_ip : "");
  if (talos_rebooter_ != nullptr &&
      (settings == talos_rebooter_settings_ || talos_rebooter_->Busy())) {
    if (settings != talos_rebooter_settings_) {
      GPULET_LOG_INFO(
          "the new health.reboot settings for Talos apply once the drain under way ends");
    }
    return talos_rebooter_;
  }
  talos_rebooter_.reset();
  if (!config.cluster.enabled) {
    GPULET_LOG_WARN(
        "health.reboot.mode is on through Talos' API, which gpulet asks only after it cordoned and "
        "drained the node through the API server: that needs cluster.enabled; no reboot will be "
        "asked for");
    return nullptr;
  }
  const bool in_cluster = config.cluster.kubeconfig.empty();
  absl::StatusOr<kube::KubeConfig> api =
      in_cluster ? kube::LoadInClusterConfig(kube::InClusterSource::FromEnvironment())
                 : kube::LoadKubeconfig(config.cluster.kubeconfig);
  kube::KubeClientOptions o;
  o.max_attempts = 1;  // a 429 is a budget's answer, tried again at the next step
  absl::StatusOr<std::unique_ptr<kube::KubeClient>> client =
      api.ok() ? kube::KubeClient::FromConfig(*api, o, options_.clock)
               : absl::StatusOr<std::unique_ptr<kube::KubeClient>>(api.status());
  if (!client.ok()) {
    GPULET_LOG_ERROR("no reboot through Talos' API: the API client: {}", client.status().message());
    return nullptr;
  }
  talos::MachineApiOptions mo;
  mo.talosconfig = r.talosconfig;
  mo.dial = r.talos_endpoint;
  mo.node = node_ip != nullptr ? node_ip : "";
  cluster::DrainingRebooter::Options dro;
  dro.node_name = options_.node_name;
  dro.lease_namespace = api->namespace_name.empty() ? "default" : api->namespace_name;
  dro.boot_id = boot_id_;
  dro.drain_timeout = r.drain_timeout;
  talos_rebooter_ = std::make_shared<cluster::DrainingRebooter>(
      *std::move(client), std::make_unique<talos::MachineApiRebooter>(std::move(mo)), dro,
      options_.clock);
  talos_rebooter_settings_ = settings;
  talos_rebooter_->Start();
  return talos_rebooter_;
}

std::shared_ptr<const recorder::RebootRecord> Daemon::RebootRecordFor(
    const config::Config& config) const {
  std::optional<std::string> local =
      HostStatePath("health.reboot.file", config.health.reboot.file, "no reboot is asked for");
  if (!local) return nullptr;
  return std::make_shared<recorder::RebootRecord>(*local, config.health.reboot.file);
}

std::unique_ptr<health::XidPolicy> Daemon::MakeXidPolicy(
    const config::Config& config, std::unique_ptr<health::XidHistoryStore>* history) {
  health::XidPolicyOptions options;
  history->reset();
  // The bundled simulator fixture is data, not a node: nothing is written into it.
  if (!config.health.xid_history_file.empty() && !options_.bundled_fixture_root) {
    // A host path: resolved inside the host root, so a symlink cannot lead the writes out.
    absl::StatusOr<std::string> local = node_.host->Resolve(config.health.xid_history_file);
    if (local.ok()) {
      *history = std::make_unique<health::FileXidHistoryStore>(*local);
      options.history = history->get();
    } else {
      GPULET_LOG_WARN("health.xidHistoryFile {}: {}; the XID history is kept in memory only",
                      config.health.xid_history_file, local.status().message());
    }
  }
  // A changed boot id in the history means the node rebooted since the XID.
  options.boot_id = boot_id_;
  options.on_xid = [recorder = recorder_](const std::string& gpu, int xid, const std::string& text,
                                          absl::Time at) { recorder->AddXid(gpu, xid, text, at); };
  return std::make_unique<health::XidPolicy>(
      &store_,
      std::set<int>(config.health.application_xids.begin(), config.health.application_xids.end()),
      config.health.quiet_period, options);
}

std::unique_ptr<health::EventMonitor> Daemon::MakeEvents(const config::Config& config,
                                                         bool kmsg_at_end) {
  std::unique_ptr<health::KernelLogSource> kmsg;
  if (config.health.kmsg) {
    health::DevKmsgOptions ko;
    ko.host_root = node_.host->root();
    ko.start_at_end = kmsg_at_end;
    kmsg = std::make_unique<health::DevKmsgSource>(ko);
  }
  unsigned gpu_count = 0;
  for (const gpu::Gpu& g : node_.inventory.gpus) gpu_count += g.in_nvml ? 1 : 0;
  health::EventMonitor::Options eo;
  eo.clock = options_.clock;
  return std::make_unique<health::EventMonitor>(node_.gpus.get(), gpu_count, std::move(kmsg),
                                                xid_policy_.get(), eo);
}

absl::StatusOr<ReloadResult> Daemon::Reload(const config::Config& next) {
  absl::StatusOr<ReloadResult> result;
  {
    absl::MutexLock lock(&lifecycle_mu_);
    result = TryReload(next);
  }
  if (result.ok()) {
    GPULET_LOG_INFO("configuration reloaded: {}", result->Summary());
  } else {
    GPULET_LOG_ERROR("configuration not reloaded, the running one is kept: {}",
                     result.status().message());
    CountReloadError(result.status().message());
  }
  return result;
}

void Daemon::CountReloadError(absl::string_view why) {
  ++reload_errors_;
  // A GitOps user sees a refused ConfigMap on the Node, not only in gpulet's log.
  cluster::NodeEvent e;
  e.type = "Warning";
  e.reason = "GpuletConfigRefused";
  e.note = absl::StrCat("gpulet refused its new configuration and keeps the running one: ", why,
                        " (fix the file or ConfigMap; gpulet reloads it when it changes)");
  if (e.note.size() > 1024) e.note.resize(1024);
  event_inbox_->Post({std::move(e)});
}

absl::StatusOr<ReloadResult> Daemon::TryReload(const config::Config& next) {
  if (!started_ || stopped_) return absl::FailedPreconditionError("the daemon is not running");
  if (absl::Status valid = ValidateConfig(next); !valid.ok()) return valid;
  if (absl::Status layout = plugin::MigLayoutError(next, *store_.Get()); !layout.ok())
    return layout;
  ReloadPlan plan{config_, next, ChangedConfigKeys(config_, next)};
  plan.effects = ReloadEffectsOf(plan.changed_keys);
  absl::StatusOr<std::vector<std::string>> actions = lifecycle_.Reload(plan);
  if (!actions.ok()) return actions.status();
  ReloadResult result;
  result.changed_keys = std::move(plan.changed_keys);
  result.actions = *std::move(actions);
  config_ = next;
  return result;
}

// The components. Each keeps its running parts in the Daemon's members (declared in start
// order, so the destructor shuts down as Stop does); a Prepare builds beside them and its
// Change swaps in.
class Daemon::Part : public Component {
 public:
  explicit Part(Daemon* d) : d_(d) {}

 protected:
  Daemon* const d_;
};

// health.retire: retired GPUs are out before anything serves them.
class Daemon::RetirementComponent : public Daemon::Part {
 public:
  using Part::Part;
  absl::Status Start(const config::Config& config) override {
    d_->retirement_->Configure(config.health.retire, d_->RetiredFileFor(config));
    return absl::OkStatus();
  }
  absl::StatusOr<Change> Prepare(const ReloadPlan& plan) override {
    if ((plan.effects & kReloadRetirement) == 0) return Change();
    return Change([d = d_, next = &plan.next](std::vector<std::string>* actions) {
      d->retirement_->Configure(next->health.retire, d->RetiredFileFor(*next));
      actions->push_back("retirement reconfigured");
    });
  }
  void Stop() override {}
};

// The CDI spec and the labels file: before the plugin serves (at start, and in a reload's
// commit), so that no Allocate answer names a device no spec defines. Left on Stop for the
// containers that restart while gpulet is down.
class Daemon::FilesComponent : public Daemon::Part {
 public:
  using Part::Part;
  absl::Status Start(const config::Config& config) override {
    absl::MutexLock lock(&d_->files_mu_);
    d_->files_.Reconcile(config);
    return absl::OkStatus();
  }
  absl::StatusOr<Change> Prepare(const ReloadPlan& plan) override {
    return Change(
        [d = d_, next = &plan.next, effects = plan.effects](std::vector<std::string>* actions) {
          {
            absl::MutexLock lock(&d->files_mu_);
            d->files_.Reconcile(*next);
          }
          if ((effects & (kReloadCdiSpec | kReloadLabelsFile)) != 0) {
            actions->push_back("node files rewritten");
          }
        });
  }
  void Stop() override {}
};

// What runs on the metrics sampler's rounds, and so does nothing without metrics.address: a
// setting that asks for it is said once, not left to be found out after a fault.
void WarnWithoutSampler(const config::Config& c) {
  std::vector<std::string> idle;
  if (c.health.recorder.window > absl::ZeroDuration()) {
    idle.emplace_back("the flight recorder (health.recorder.window)");
  }
  // The rungs that act on the sampler's rounds; the table says which key turns each on.
  const std::pair<config::RemediationMode, const char*> rungs[] = {
      {c.health.evict.mode, "the eviction rung (health.evict.mode)"},
      {c.health.reset.mode, "the reset rung (health.reset.mode)"},
      {c.health.reboot.mode, "the reboot rung (health.reboot.mode)"},
  };
  for (const auto& [mode, rung] : rungs) {
    if (mode != config::RemediationMode::kOff) idle.emplace_back(rung);
  }
  if (c.cluster.enabled && c.metrics.pod_attribution) {
    idle.emplace_back("the Events on the pods of a GPU that goes out");
  }
  if (idle.empty()) return;
  GPULET_LOG_WARN(
      "metrics.address is empty, so nothing samples the GPUs and {} do nothing; set "
      "metrics.address (127.0.0.1:9400 keeps it on the node) or turn them off",
      absl::StrJoin(idle, ", "));
}

// metrics.address: before the plugin, so that by the time the kubelet learns of the GPUs,
// /metrics answers with a first round of samples (a scrape never sees a GPU "down" only
// because no round ran yet). A reload binds the new server (sharing the running one's
// socket on the same address) before the old one stops.
class Daemon::MetricsComponent : public Daemon::Part {
 public:
  using Part::Part;
  absl::Status Start(const config::Config& config) override {
    if (config.metrics.address.empty()) {
      WarnWithoutSampler(config);
      return absl::OkStatus();
    }
    absl::StatusOr<std::unique_ptr<Metrics>> metrics = d_->MakeMetrics(config);
    if (!metrics.ok()) {
      // The web config's errors are the user's to fix; the rest is the node (the address).
      if (!KeyOf(metrics.status()).empty()) return metrics.status();
      return absl::UnavailableError(metrics.status().message());
    }
    d_->metrics_ = std::move(*metrics);
    GPULET_LOG_INFO("{}", MetricsLine(config));
    return absl::OkStatus();
  }
  absl::StatusOr<Change> Prepare(const ReloadPlan& plan) override {
    const config::Config& next = plan.next;
    bool rebuild = (plan.effects & kReloadMetrics) != 0 && !SameMetricsInputs(plan.running, next) &&
                   (d_->metrics_ != nullptr || !next.metrics.address.empty());
    if (!rebuild && d_->metrics_ != nullptr && !next.metrics.web_config_file.empty()) {
      // Same path: the file's content may have changed (new users, a new cert path), or the
      // certificate it names (renewed in place).
      absl::StatusOr<http::WebConfig> web = LoadKeyedWebConfig(next);
      if (!web.ok()) return web.status();
      rebuild = !SameWebConfig(*web, d_->metrics_->web);
    }
    if (!rebuild) return Change();
    std::unique_ptr<Metrics> metrics;
    if (!next.metrics.address.empty()) {
      absl::StatusOr<std::unique_ptr<Metrics>> built = d_->MakeMetrics(next);
      // The web config's errors (a certificate and key that GnuTLS refuses included) come
      // keyed metrics.webConfigFile; the rest is the address.
      if (!built.ok()) return AtKey("metrics.address", built.status());
      metrics = std::move(*built);
    }
    return Change([d = d_, next = &plan.next,
                   metrics = std::move(metrics)](std::vector<std::string>* actions) mutable {
      std::unique_ptr<Metrics> old = std::exchange(d->metrics_, std::move(metrics));
      old.reset();  // the new server already listens
      if (d->metrics_ != nullptr) {
        GPULET_LOG_INFO("{}", MetricsLine(*next));
        actions->push_back(absl::StrCat("metrics rebuilt on ", next->metrics.address));
      } else {
        actions->push_back("metrics stopped (metrics.address is empty)");
        WarnWithoutSampler(*next);
      }
    });
  }
  void Stop() override { d_->metrics_.reset(); }
};

// The kubelet device plugin. A new kubelet directory gets a new manager, serving there
// before the old one leaves; resource settings are re-served live.
class Daemon::PluginsComponent : public Daemon::Part {
 public:
  using Part::Part;
  absl::Status Start(const config::Config& config) override {
    Replace(d_, d_->MakePlugins());
    if (absl::Status s = d_->plugins_->Start(std::make_shared<const config::Config>(config));
        !s.ok()) {
      // The node's kubelet directory, never the user's syntax: a failure exit, not usage.
      return absl::FailedPreconditionError(s.message());
    }
    return absl::OkStatus();
  }
  absl::StatusOr<Change> Prepare(const ReloadPlan& plan) override {
    if ((plan.effects & kReloadPluginManager) != 0) {
      std::unique_ptr<plugin::PluginManager> plugins = d_->MakePlugins();
      if (absl::Status s = plugins->Start(std::make_shared<const config::Config>(plan.next));
          !s.ok()) {
        return absl::FailedPreconditionError(absl::StrCat("kubeletDir: ", s.message()));
      }
      return Change([d = d_, plugins = std::move(plugins),
                     dir = plan.next.kubelet_dir](std::vector<std::string>* actions) mutable {
        Replace(d, std::move(plugins));
        actions->push_back(
            absl::StrCat("plugin manager rebuilt in ", JoinPath(dir, "device-plugins")));
      });
    }
    if ((plan.effects & kReloadPluginConfig) == 0) return Change();
    return Change([d = d_, next = std::make_shared<const config::Config>(plan.next)](
                      std::vector<std::string>* actions) {
      d->plugins_->Reconfigure(next);
      actions->push_back("plugin manager reconfigured");
    });
  }
  void Stop() override { Replace(d_, nullptr); }

 private:
  // Swaps `plugins` in under plugins_mu_ (the MIG watcher's thread reads it there) and stops
  // the one it replaces, which removes its sockets, outside the lock.
  static void Replace(Daemon* d, std::unique_ptr<plugin::PluginManager> plugins) {
    std::unique_ptr<plugin::PluginManager> old;
    {
      absl::MutexLock lock(&d->plugins_mu_);
      old = std::exchange(d->plugins_, std::move(plugins));
    }
  }
};

// Probes each GPU (only with NVML). Its settings are read when it is built: a reload stops
// it and starts a new one that adopts the old one's per-GPU timers, so a GPU out for a
// liveness failure still comes back when its quiet period has passed.
class Daemon::LivenessComponent : public Daemon::Part {
 public:
  using Part::Part;
  absl::Status Start(const config::Config& config) override {
    if (d_->node_.gpus == nullptr) return absl::OkStatus();
    d_->liveness_ = d_->MakeLiveness(config);
    if (d_->carried_liveness_ != nullptr) {
      d_->liveness_->AdoptFrom(*d_->carried_liveness_);
      d_->carried_liveness_.reset();
    }
    d_->liveness_->Start();
    return absl::OkStatus();
  }
  absl::StatusOr<Change> Prepare(const ReloadPlan& plan) override {
    if ((plan.effects & kReloadLiveness) == 0 || d_->node_.gpus == nullptr) return Change();
    return Change([d = d_, next = &plan.next](std::vector<std::string>* actions) {
      std::unique_ptr<health::LivenessMonitor> monitor = d->MakeLiveness(*next);
      if (d->liveness_ != nullptr) {
        d->liveness_->Stop();
        monitor->AdoptFrom(*d->liveness_);
      }
      d->liveness_ = std::move(monitor);
      d->liveness_->Start();
      actions->push_back("liveness monitor rebuilt");
    });
  }
  void Stop() override {
    if (d_->restarting_ && d_->liveness_ != nullptr) {
      d_->liveness_->Stop();
      d_->carried_liveness_ = std::move(d_->liveness_);
    }
    d_->liveness_.reset();
  }
};

// Follows MIG layout changes into the store and the node files (only a MIG-capable GPU, with
// NVML, can change its layout under gpulet). No setting of its own.
class Daemon::MigComponent : public Daemon::Part {
 public:
  using Part::Part;
  absl::Status Start(const config::Config&) override {
    const gpu::Inventory& inventory = d_->node_.inventory;
    const bool mig_capable = std::any_of(inventory.gpus.begin(), inventory.gpus.end(),
                                         [](const gpu::Gpu& g) { return g.mig_capable == true; });
    if (d_->node_.gpus == nullptr || !mig_capable) return absl::OkStatus();
    MigWatcher::Options mo;
    mo.clock = d_->options_.clock;
    d_->mig_ = std::make_unique<MigWatcher>(d_->node_.gpus.get(), &d_->store_, mo, [d = d_] {
      // The CDI spec names MIG devices, the labels count them: rewrite both.
      std::shared_ptr<const state::Snapshot> snap = d->store_.Get();
      absl::MutexLock lock(&d->files_mu_);
      d->files_inventory_ = WithMigLayouts(std::move(d->files_inventory_), *snap);
      d->files_.Refresh();
      // A profile may have appeared or gone: the plugin manager serves the resource set anew.
      absl::MutexLock plugins_lock(&d->plugins_mu_);
      if (d->plugins_ != nullptr) d->plugins_->Wake();
    });
    d_->mig_->Start();
    return absl::OkStatus();
  }
  absl::StatusOr<Change> Prepare(const ReloadPlan&) override { return Change(); }
  void Stop() override { d_->mig_.reset(); }
};

// The XID policy and the event monitor that feeds it (NVML events and the kernel log). A
// reload stops the monitor, so that no XID enters while the policy hands over its timers to
// the new one, and starts a new monitor; nothing of it can fail, so all of it is the commit.
class Daemon::HealthEventsComponent : public Daemon::Part {
 public:
  using Part::Part;
  absl::Status Start(const config::Config& config) override {
    d_->xid_policy_ = d_->MakeXidPolicy(config, &d_->xid_history_);
    if (d_->carried_xid_policy_ != nullptr) {
      d_->xid_policy_->AdoptFrom(*d_->carried_xid_policy_);
      d_->carried_xid_policy_.reset();  // before the store it saves to
      d_->carried_xid_history_.reset();
    }
    // A restart on a new inventory reads the kernel log on from its end: the XIDs before
    // it were applied already.
    d_->events_ = d_->MakeEvents(config, /*kmsg_at_end=*/d_->restarting_);
    d_->events_->Start();
    return absl::OkStatus();
  }
  absl::StatusOr<Change> Prepare(const ReloadPlan& plan) override {
    const bool rebuild_policy = (plan.effects & kReloadXidPolicy) != 0;
    if (!rebuild_policy && (plan.effects & kReloadEvents) == 0) return Change();
    return Change([d = d_, next = &plan.next, kmsg_was_read = plan.running.health.kmsg,
                   rebuild_policy](std::vector<std::string>* actions) {
      d->events_.reset();
      if (rebuild_policy) {
        // The old policy goes before the store it saves to.
        std::unique_ptr<health::XidHistoryStore> history;
        std::unique_ptr<health::XidPolicy> policy = d->MakeXidPolicy(*next, &history);
        policy->AdoptFrom(*d->xid_policy_);
        d->xid_policy_ = std::move(policy);
        d->xid_history_ = std::move(history);
        actions->push_back("XID policy rebuilt");
      }
      d->events_ = d->MakeEvents(*next, /*kmsg_at_end=*/kmsg_was_read);
      d->events_->Start();
      actions->push_back("event monitor rebuilt");
    });
  }
  void Stop() override {
    d_->events_.reset();
    if (d_->restarting_) {
      d_->carried_xid_policy_ = std::move(d_->xid_policy_);
      d_->carried_xid_history_ = std::move(d_->xid_history_);
    }
    d_->xid_policy_.reset();
    d_->xid_history_.reset();
  }
};

// The API client with the NodeReporter (cluster.enabled) and the DRA driver (dra.enabled).
// A reload builds the new ones (reading the kubeconfig, loading the DRA checkpoint) and
// swaps them in; the reporter is also rebuilt for a sharing change that alters the labels it
// writes on the Node.
class Daemon::ClusterComponent : public Daemon::Part {
 public:
  using Part::Part;
  absl::Status Start(const config::Config& config) override {
    absl::StatusOr<std::unique_ptr<Cluster>> cluster = d_->MakeCluster(config);
    if (!cluster.ok()) return cluster.status();
    d_->cluster_ = std::move(*cluster);
    return d_->StartCluster(d_->cluster_.get());
  }
  absl::StatusOr<Change> Prepare(const ReloadPlan& plan) override {
    const config::Config& next = plan.next;
    const nvml::Node& node = d_->node_;
    const gpu::Inventory inventory = WithMigLayouts(node.inventory, *d_->store_.Get());
    const bool rebuild = (plan.effects & (kReloadCluster | kReloadDra)) != 0 ||
                         (next.cluster.enabled && next.cluster.node_labels &&
                          cluster::NodeGpuLabels(inventory, *node.host, next) !=
                              cluster::NodeGpuLabels(inventory, *node.host, plan.running));
    if (!rebuild) return Change();
    absl::StatusOr<std::unique_ptr<Cluster>> built = d_->MakeCluster(next);
    if (!built.ok()) return built.status();
    return Change([d = d_, next = &plan.next,
                   cluster = std::move(*built)](std::vector<std::string>* actions) mutable {
      d->cluster_.reset();  // its thread stops before the new one writes
      d->cluster_ = std::move(cluster);
      if (absl::Status s = d->StartCluster(d->cluster_.get()); !s.ok()) {
        // Checked while preparing (the checkpoint loads, the names are valid); what is left
        // is the node (a socket directory), which a restart would meet the same way.
        GPULET_LOG_ERROR("reload: {}; the DRA driver is not serving", s.message());
        actions->push_back(absl::StrCat("DRA driver failed to start: ", s.message()));
        d->cluster_->dra.reset();
      }
      actions->push_back(d->cluster_ == nullptr ? "API client stopped"
                         : next->dra.enabled && next->cluster.enabled
                             ? "cluster reporter and DRA driver rebuilt"
                         : next->dra.enabled ? "DRA driver rebuilt"
                                             : "cluster reporter rebuilt");
    });
  }
  void Stop() override { d_->cluster_.reset(); }
};

// "gpulet-files": the CDI spec and labels file checked on disk (rewritten when deleted or
// changed) and the retired-GPU file read again (`gpulet retired --clear`, an edit).
class Daemon::FileCheckComponent : public Daemon::Part {
 public:
  using Part::Part;
  absl::Status Start(const config::Config&) override {
    PeriodicWorker::Options check;
    check.name = "gpulet-files";
    check.interval = d_->options_.file_check_interval;
    check.clock = d_->options_.clock;
    check.tick_at_start = false;  // the files component just wrote both files
    d_->file_check_ = std::make_unique<PeriodicWorker>(check, [d = d_] {
      {
        absl::MutexLock lock(&d->files_mu_);
        d->files_.Check();
      }
      d->retirement_->Sync();
      d->WatchInventory();
    });
    d_->file_check_->Start();
    return absl::OkStatus();
  }
  absl::StatusOr<Change> Prepare(const ReloadPlan&) override { return Change(); }
  void Stop() override { d_->file_check_.reset(); }
};
absl::Status Daemon::StartAll() {
  if (absl::Status valid = ValidateConfig(config_); !valid.ok()) return valid;
  store_.SetInventory(node_.inventory, options_.clock->Now());
  if (!node_.inventory.nvml_status.ok()) {
    GPULET_LOG_ERROR("NVML is unavailable; every GPU is advertised Unhealthy: {}",
                     node_.inventory.nvml_status.message());
  }
  GPULET_LOG_INFO("found {} GPU(s)", node_.inventory.gpus.size());
  // A layout the MIG strategy cannot serve is the operator's to fix, as NVIDIA's plugin
  // refuses it; at start it is an error (later changes are logged and advertise nothing).
  if (absl::Status layout = plugin::MigLayoutError(config_, *store_.Get()); !layout.ok())
    return layout;
  // The components, in the order the header lists them.
  lifecycle_.Add(std::make_unique<RetirementComponent>(this));
  lifecycle_.Add(std::make_unique<FilesComponent>(this));
  lifecycle_.Add(std::make_unique<MetricsComponent>(this));
  lifecycle_.Add(std::make_unique<PluginsComponent>(this));
  lifecycle_.Add(std::make_unique<LivenessComponent>(this));
  lifecycle_.Add(std::make_unique<MigComponent>(this));
  lifecycle_.Add(std::make_unique<HealthEventsComponent>(this));
  lifecycle_.Add(std::make_unique<ClusterComponent>(this));
  lifecycle_.Add(std::make_unique<FileCheckComponent>(this));
  if (absl::Status s = lifecycle_.Start(config_); !s.ok()) return s;
  GPULET_LOG_INFO("gpulet {} serving {} on {}/device-plugins", GPULET_VERSION,
                  config_.AdvertisedResources()[0], config_.kubelet_dir);
  return absl::OkStatus();
}

void Daemon::ResetDue() {
  bool reset_one = false;
  for (;;) {
    ResetRung::Order order;
    {
      absl::MutexLock lock(&resets_mu_);
      if (pending_resets_.empty()) break;
      order = std::move(pending_resets_.front());
      pending_resets_.pop_front();
    }
    GPULET_LOG_WARN("resetting GPU {} (out of service for: {})", order.gpu, order.fault);
    // Told first: a failing card raises its XID again the moment the reset is over, and that
    // XID is a repeat after the recommended reset (one the reset could not carry out counts
    // too: a card that cannot be reset is as suspect).
    {
      absl::MutexLock lock(&lifecycle_mu_);
      if (xid_policy_ != nullptr) xid_policy_->NoteReset(order.uuid);
    }
    const absl::Status result = resetter_->Reset(order.uuid, order.bus_id);
    const absl::Time now = options_.clock->Now();
    if (result.ok()) {
      // Raised before the rung hears of it, so that its next round sees the GPU on probation.
      store_.UpdateHealth(order.uuid, [&](state::GpuHealth& h) {
        h.Raise(ResetRung::kSource, ResetRung::ProbationFor(order, now), now);
      });
      reset_one = true;
    }
    if (std::vector<cluster::NodeEvent> e = reset_rung_->Finish(order, result, now); !e.empty()) {
      event_inbox_->Post(std::move(e));
    }
  }
  std::string driver_change;
  {
    absl::MutexLock lock(&resets_mu_);
    driver_change.swap(inventory_due_);
  }
  if (reset_one) {
    TakeInventoryAgain("after a GPU reset");
  } else if (!driver_change.empty()) {
    TakeInventoryAgain("the driver serves the GPUs anew");
  }
}

void Daemon::WatchInventory() {
  // The procfs read outside the lock; the comparison against what is served under it.
  const absl::StatusOr<std::vector<node::DriverGpu>> driver = node::ReadDriverGpus(*node_.host);
  std::string change;
  {
    absl::MutexLock lock(&files_mu_);
    change = inventory_watch_.Check(files_inventory_, driver);
  }
  if (change.empty()) return;
  GPULET_LOG_WARN(
      "the nvidia driver serves the GPUs differently from gpulet's inventory ({}): taking the "
      "inventory again",
      change);
  event_inbox_->Post({cluster::NodeEvent{
      "Normal", "GpuInventoryChanged",
      absl::StrCat("the nvidia driver serves the GPUs anew (", change,
                   "); gpulet takes its inventory again and serves what the driver serves")}});
  {
    absl::MutexLock lock(&resets_mu_);
    inventory_due_ = change;
  }
  reset_worker_->Wake();
}

namespace {

// What differs between two inventories in what the node serves, in words; "" when nothing.
std::string ServedChange(const gpu::Inventory& before, const gpu::Inventory& after) {
  std::vector<std::string> changes;
  if (before.system.driver_version != after.system.driver_version) {
    changes.push_back(
        absl::StrCat("driver ", before.system.driver_version, " -> ", after.system.driver_version));
  }
  if (before.gpus.size() != after.gpus.size()) {
    changes.push_back(absl::StrCat(before.gpus.size(), " GPUs -> ", after.gpus.size()));
  }
  for (const gpu::Gpu& b : before.gpus) {
    const gpu::Gpu* a = b.uuid.empty() ? after.FindByBusId(b.bus_id) : after.FindByUuid(b.uuid);
    const std::string name = b.uuid.empty() ? b.bus_id : b.uuid;
    if (a == nullptr) {
      changes.push_back(absl::StrCat(name, " gone"));
      continue;
    }
    auto text = [](const std::optional<unsigned>& v) {
      return v ? absl::StrCat(*v) : std::string("none");
    };
    if (a->index != b.index) {
      changes.push_back(absl::StrCat(name, " index ", text(b.index), " -> ", text(a->index)));
    }
    if (a->minor != b.minor) {
      changes.push_back(absl::StrCat(name, " minor ", text(b.minor), " -> ", text(a->minor)));
    }
    if (a->bus_id != b.bus_id) {
      changes.push_back(absl::StrCat(name, " at ", b.bus_id, " -> ", a->bus_id));
    }
    if (a->mig_enabled != b.mig_enabled || a->mig_devices.size() != b.mig_devices.size()) {
      changes.push_back(absl::StrCat(name, " MIG layout"));
    }
  }
  return absl::StrJoin(changes, ", ");
}

}  // namespace

void Daemon::TakeInventoryAgain(const char* why) {
  absl::MutexLock lock(&lifecycle_mu_);
  if (stopped_) return;
  // A reset (or the driver reload it may stand for) can change minor numbers, the order, MIG
  // layouts, and invalidate the library's handles: every component stops, the inventory is
  // taken again, and they start on it. The store keeps each GPU's health by UUID, and what
  // outlives a component (the recorder, the rungs, the liveness and XID timers, carried)
  // goes on.
  restarting_ = true;
  store_.Shutdown();  // ListAndWatch streams end, so the plugin servers can stop
  lifecycle_.Stop();
  store_.Reopen();
  gpu::Inventory before;
  {
    absl::MutexLock files_lock(&files_mu_);
    before = files_inventory_;
  }
  if (options_.discover) {
    nvml::Node fresh = options_.discover();
    node_.gpus = std::move(fresh.gpus);  // the old library closes; nothing uses it now
    node_.inventory = std::move(fresh.inventory);
  } else {
    gpu::Inventory seen =
        gpu::BuildInventory(node_.gpus.get(), *node_.host, node_.inventory.nvml_status);
    seen.nvml_attempts = node_.inventory.nvml_attempts;
    node_.inventory = std::move(seen);
  }
  const std::string change = ServedChange(before, node_.inventory);
  GPULET_LOG_INFO("inventory taken again ({}): {}", why, change.empty() ? "unchanged" : change);
  control_ = ControlNodesOf(node_.inventory.driver);
  {
    absl::MutexLock files_lock(&files_mu_);
    files_inventory_ = node_.inventory;
  }
  store_.SetInventory(node_.inventory, options_.clock->Now());
  absl::Status started = lifecycle_.Start(config_);
  restarting_ = false;
  carried_liveness_.reset();
  carried_xid_policy_.reset();
  carried_xid_history_.reset();
  if (!started.ok()) {
    GPULET_LOG_ERROR(
        "gpulet's components did not start again on the new inventory ({}): {}; gpulet serves "
        "nothing until it is restarted",
        why, started.message());
  }
}

}  // namespace gpulet::daemon
