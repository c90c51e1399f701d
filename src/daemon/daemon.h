// Daemon: `gpulet serve` in one object. It owns every component of the node agent and
// drives them through one Lifecycle (daemon/lifecycle.h): started in order, each reload
// prepared by every component before any commits, stopped in reverse order.
//
// Before the components: the discovered Node (HostFs, GpuLibrary, Inventory), the
// DeviceStore everything shares, and what outlives a rebuilt component (the flight recorder,
// the event inbox, the VRAM slice guard, the retirement rule). The components, in order:
//   retirement (health.retire): retired GPUs are out before anything serves them;
//   node files (CDI spec and NFD labels file), written before the plugin serves so that no
//     Allocate answer names a device no spec defines;
//   metrics (PodAttributor, Sampler, MetricsServer; only with metrics.address), listening
//     with a first round of samples before the kubelet learns of any GPU; the sampler's
//     rounds also feed the flight recorder (health.recorder), which writes a GPU's recording
//     on a fault;
//   the plugin manager (kubelet device plugin);
//   the liveness monitor (only with NVML);
//   the MIG watcher (only with NVML and a MIG-capable GPU);
//   the XID policy and the event monitor (NVML events and the kernel log);
//   cluster: the API client, the NodeReporter (cluster.enabled) and the DRA driver
//     (dra.enabled: checkpoint, ResourceSlices, kubelet plugin);
//   the file check ("gpulet-files", a PeriodicWorker): NodeFiles::Check every 10 s, and the
//     inventory watch (InventoryWatch: the driver's procfs against the inventory).
// Outside the components, the reset thread ("gpulet-reset") carries out the reset rung's
// orders (health.reset) and then restarts every component on a new inventory (a reset can
// change minor numbers and invalidate the library's handles), as it does when the inventory
// watch sees the driver serve the GPUs anew; it stops before anything else.
// Their running parts are members declared in that order, so destruction is shutdown. Stop()
// first wakes every DeviceStore waiter, so that ListAndWatch streams end. A Start() that fails
// part-way stops what it started.
//
// Reload(config) applies every changed setting or none. The reload table
// (daemon/reload_table.h) says for each key whether it is applied live or by rebuilding a
// component. The config is validated first (the error names the key); then each component
// prepares beside what runs everything that can fail (the new web config read, the new
// metrics server bound, the new plugin manager started, the kubeconfig read); only when all
// have prepared are the changes committed, in component order. A refused reload leaves every
// component as it was.
//
// Thread-safety: Start, Reload, Stop and the accessors are called from one thread (the
// CLI's main thread, or a test's); the components run their own threads, and the file check
// and the MIG watcher share NodeFiles with Reload under a mutex. The reset thread's restart
// and the main thread's Start, Reload and Stop hold lifecycle_mu_.
#ifndef GPULET_DAEMON_DAEMON_H_
#define GPULET_DAEMON_DAEMON_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cluster/draining_rebooter.h"
#include "cluster/event_inbox.h"
#include "cluster/node_reporter.h"
#include "cluster/pod_eviction.h"
#include "common/clock.h"
#include "common/periodic_worker.h"
#include "config/config.h"
#include "daemon/eviction_rung.h"
#include "daemon/gpu_retirement.h"
#include "daemon/inventory_watch.h"
#include "daemon/lifecycle.h"
#include "daemon/mig_watcher.h"
#include "daemon/node_files.h"
#include "daemon/reboot_rung.h"
#include "daemon/reset_rung.h"
#include "daemon/slice_guard.h"
#include "dra/driver.h"
#include "health/event_monitor.h"
#include "health/liveness.h"
#include "health/xid_policy.h"
#include "http/web_config.h"
#include "kube/kube_client.h"
#include "metrics/metrics_server.h"
#include "metrics/pod_attribution.h"
#include "metrics/sampler.h"
#include "node/kured_sentinel.h"
#include "node/pci_reset.h"
#include "node/rebooter.h"
#include "nvml/discovery.h"
#include "plugin/plugin_manager.h"
#include "recorder/flight_recorder.h"
#include "recorder/recorder_files.h"
#include "state/device_store.h"

namespace gpulet::daemon {

struct DaemonOptions {
  // The node's name for the metrics' hostname label (NODE_NAME, else gethostname()).
  std::string node_name;
  // The pod's UID (POD_UID, from the downward API's metadata.uid; "" outside a pod): with
  // dra.rollingUpdate, the DRA driver's socket names carry it.
  std::string pod_uid;
  // The host root is the bundled simulator fixture: data, not a node; no files written.
  bool bundled_fixture_root = false;
  // Time for the store's timestamps and the file check's ticks.
  const Clock* clock = RealClock();
  // How often the CDI spec and labels file are checked on disk.
  absl::Duration file_check_interval = absl::Seconds(10);
  // How often the pod evictor tries the evictions due (health.evict mode on).
  absl::Duration eviction_interval = absl::Seconds(5);
  // What kills a process of a VRAM slice over its quota (sharing.memorySlices.overQuota);
  // null: the real killer, through the host root's /proc. Must outlive the daemon.
  ProcessKiller* process_killer = nullptr;
  // What resets a GPU (health.reset mode on); null: the kernel's PCI function reset through
  // sysfs under the host root. Must outlive the daemon.
  node::GpuResetter* gpu_resetter = nullptr;
  // Takes the node's inventory again when a reset changed what the running library reports
  // (minor numbers, order, MIG layout), from scratch: the library loaded and vetted anew, as
  // at start. Null: the running library's inventory is taken instead. Called on the reset
  // thread with every component stopped.
  std::function<nvml::Node()> discover = nullptr;
  // What asks for a node reboot (health.reboot mode on); null: kured's sentinel under the
  // host root (health.reboot.sentinel). Must outlive the daemon.
  node::NodeRebooter* rebooter = nullptr;
};

// What a successful Reload did.
struct ReloadResult {
  std::vector<std::string> changed_keys;  // in ConfigKeys() order
  std::vector<std::string> actions;       // "plugin manager reconfigured", "sampler rebuilt"...
  // One line for the log: the keys and the actions, or that nothing changed.
  std::string Summary() const;
};

class Daemon {
 public:
  // `node`: from DiscoverNode (or a test's own). `config` is checked by Start.
  Daemon(nvml::Node node, config::Config config, DaemonOptions options);
  ~Daemon();  // Stop()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Starts every component. Errors: InvalidArgument for configuration the user must fix (a
  // bad key, an unusable metrics.webConfigFile); others (FailedPrecondition: the kubelet
  // directory; Unavailable: the metrics address) for the node. On error everything started
  // is stopped again. Call once.
  absl::Status Start();

  // Applies `next` (see the header comment). Errors name the key: InvalidArgument for a bad
  // value, Unavailable when a new metrics address cannot listen, FailedPrecondition for a
  // key that cannot change now (the message says why and that a restart applies it).
  absl::StatusOr<ReloadResult> Reload(const config::Config& next);

  // Counts a reload that failed before Reload was called (the file could not be loaded, `why`
  // says how), in gpulet_config_reload_errors_total, and says so in a GpuletConfigRefused
  // Node Event, as Reload does for the ones it refuses.
  void CountReloadError(absl::string_view why);
  uint64_t reload_errors() const { return reload_errors_.load(); }

  // Stops every component, in reverse order; sockets are removed, the CDI spec is left for
  // containers that restart while gpulet is down. Idempotent.
  void Stop();

  // The running configuration.
  const config::Config& config() const { return config_; }
  // The port /metrics listens on; 0 when metrics are off or not started.
  int metrics_port() const;
  // The shared device state (tests read health conditions from it).
  const state::DeviceStore& store() const { return store_; }
  // The Node events waiting for the cluster reporter (tests without one drain them here).
  cluster::EventInbox& event_inbox() { return *event_inbox_; }

 private:
  // The metrics components, declared so that destruction stops the server first.
  struct Metrics {
    http::WebConfig web;
    std::unique_ptr<metrics::PodAttributor> pods;
    std::unique_ptr<metrics::Sampler> sampler;
    std::unique_ptr<metrics::MetricsServer> http;
  };

  // The components (daemon.cc), nested for the members they run.
  class Part;
  class RetirementComponent;
  class FilesComponent;
  class MetricsComponent;
  class PluginsComponent;
  class LivenessComponent;
  class MigComponent;
  class HealthEventsComponent;
  class ClusterComponent;
  class FileCheckComponent;

  absl::Status StartAll();
  // The "gpulet-reset" thread's round: carries out the reset rung's orders, then takes the
  // inventory again (TakeInventoryAgain) when one succeeded or the inventory watch asked.
  void ResetDue();
  // After a reset, or when the driver serves the GPUs anew (`why`, for the log): restarts
  // every component on a new inventory (options_.discover's, else the running library's),
  // the store keeping each GPU's health by UUID.
  void TakeInventoryAgain(const char* why);
  // The file check's look at the driver's GPUs (InventoryWatch); a difference wakes the reset
  // thread to take the inventory again.
  void WatchInventory();
  // Reload without the logging.
  absl::StatusOr<ReloadResult> TryReload(const config::Config& next);
  std::unique_ptr<plugin::PluginManager> MakePlugins();
  // Where sliced containers' files are written, and the enforcement library.
  plugin::SliceFiles SliceFilesFor() const;
  // Where a simulation of the bundled fixture keeps sliced containers' files.
  std::string SimulationSliceRoot() const;
  std::unique_ptr<health::LivenessMonitor> MakeLiveness(const config::Config& config);
  // Builds, starts and binds a metrics stack for `config` (address non-empty); errors name
  // metrics.webConfigFile or metrics.address.
  absl::StatusOr<std::unique_ptr<Metrics>> MakeMetrics(const config::Config& config);
  // Where the flight recorder writes (health.recorder.dir under the host root); null when
  // it keeps recordings in memory only.
  std::unique_ptr<recorder::RecorderFiles> RecorderFilesFor(const config::Config& config) const;
  // `path` (the value of the host-path setting `key`) resolved under the host root; nullopt
  // for the bundled fixture (data: nothing is written into it), and after a warning that
  // ends with `otherwise` (what gpulet does without the file) when it cannot be resolved.
  std::optional<std::string> HostStatePath(const char* key, const std::string& path,
                                           const char* otherwise) const;
  // The retired-GPU file (health.retire.file under the host root); null when it cannot be
  // used (logged) or on the bundled simulator fixture.
  std::unique_ptr<recorder::RetiredFile> RetiredFileFor(const config::Config& config) const;
  // health.reboot.file under the host root; null for the bundled fixture or a bad path.
  std::shared_ptr<const recorder::RebootRecord> RebootRecordFor(const config::Config& config) const;
  // Builds the XID policy and its history store; the caller keeps the store (in
  // xid_history_) at least as long as the policy.
  std::unique_ptr<health::XidPolicy> MakeXidPolicy(
      const config::Config& config, std::unique_ptr<health::XidHistoryStore>* history);
  // `kmsg_at_end`: read the kernel log on from its end (a rebuild; the start was read).
  std::unique_ptr<health::EventMonitor> MakeEvents(const config::Config& config, bool kmsg_at_end);
  // The API client with its NodeReporter and DRA driver (not started) for `config`; null
  // when neither cluster.enabled nor dra.enabled is set. Errors name cluster.kubeconfig,
  // cluster.enabled or the dra.* key.
  // The API client and what uses it: the NodeReporter (cluster.enabled) and the DRA driver
  // (dra.enabled), each null when off; the whole is null when both are.
  struct Cluster {
    std::unique_ptr<kube::KubeClient> client;
    std::unique_ptr<cluster::NodeReporter> reporter;  // declared after the client it uses
    std::unique_ptr<kube::KubeClient> dra_client;     // the DRA driver's (its own rate limit)
    std::unique_ptr<dra::DraDriver> dra;
    // The eviction rung's client (no retries of its own: a 429 is a budget's answer) and
    // worker (health.evict.mode on); the worker is declared after the client it uses.
    std::unique_ptr<kube::KubeClient> evict_client;
    std::unique_ptr<cluster::PodEvictor> evictor;
    // Cancels the clients' calls first, so that the users' threads, which may wait on an
    // unreachable API server, stop at once.
    ~Cluster() {
      if (client != nullptr) client->Cancel();
      if (dra_client != nullptr) dra_client->Cancel();
      if (evict_client != nullptr) evict_client->Cancel();
    }
  };
  // Starts what `cluster` holds (null: nothing); errors name dra.* keys.
  absl::Status StartCluster(Cluster* cluster);
  absl::StatusOr<std::unique_ptr<Cluster>> MakeCluster(const config::Config& config);
  // The DRA driver (not started) for `config`, using `client`.
  absl::StatusOr<std::unique_ptr<dra::DraDriver>> MakeDra(const config::Config& config,
                                                          kube::KubeClient* client);

  const DaemonOptions options_;
  nvml::Node node_;
  // This boot's id (/proc/sys/kernel/random/boot_id under the host root; "" when unreadable),
  // read once: the XID policy and the flight recorder tell reboots apart by it.
  const std::string boot_id_;
  config::Config config_;
  plugin::ControlNodes control_;
  state::DeviceStore store_;
  absl::Mutex files_mu_;
  // The inventory the node files are written from: node_.inventory with the MIG layouts the
  // MIG watcher has seen since (node_.inventory itself is read on the main thread only).
  gpu::Inventory files_inventory_ ABSL_GUARDED_BY(files_mu_);
  NodeFiles files_ ABSL_GUARDED_BY(files_mu_);
  // Refused reloads; declared before the metrics stack that renders it.
  std::atomic<uint64_t> reload_errors_{0};
  // Node events from the sampler (VRAM slices at their quota) for the cluster reporter; the
  // daemon's, so that either side can be rebuilt on reload.
  std::shared_ptr<cluster::EventInbox> event_inbox_ = std::make_shared<cluster::EventInbox>();
  // Acts on VRAM slices over their quota by the driver's count; the daemon's, so that its
  // timers and kill budget outlive a rebuilt metrics stack. Declared before that stack.
  std::unique_ptr<ProcessKiller> own_killer_;
  std::shared_ptr<SliceGuard> slice_guard_;
  // The eviction rung (health.evict): which pods, when (fed by the sampler's rounds), and the
  // orders in flight (carried out by the cluster's evictor); the daemon's, so that a rebuilt
  // sampler or cluster client takes over the episodes, budget and orders.
  std::shared_ptr<EvictionRung> eviction_rung_ = std::make_shared<EvictionRung>();
  std::shared_ptr<cluster::EvictionQueue> evictions_ = std::make_shared<cluster::EvictionQueue>();
  // Each GPU's last minutes (health.recorder), fed by the sampler's rounds and the XID
  // policy; the daemon's, so that a rebuilt sampler or policy keeps what was recorded.
  std::shared_ptr<recorder::FlightRecorder> recorder_;
  // Keeps GPUs that fault again and again out of service across restarts (health.retire).
  std::unique_ptr<GpuRetirement> retirement_;
  std::unique_ptr<Metrics> metrics_;
  // The main thread replaces plugins_ (start, reload) under plugins_mu_ and reads it without;
  // the MIG watcher's thread reads it under plugins_mu_ only, to wake it.
  absl::Mutex plugins_mu_;
  std::unique_ptr<plugin::PluginManager> plugins_;
  std::unique_ptr<health::LivenessMonitor> liveness_;
  std::unique_ptr<health::XidHistoryStore> xid_history_;  // outlives the policy that saves to it
  std::unique_ptr<health::XidPolicy> xid_policy_;
  std::unique_ptr<health::EventMonitor> events_;  // after the policy it feeds
  std::unique_ptr<Cluster> cluster_;              // reads the store; null without cluster.enabled
  std::unique_ptr<PeriodicWorker> file_check_;
  // Follows MIG layout changes into the store and the node files; null without NVML.
  std::unique_ptr<MigWatcher> mig_;
  bool started_ = false;
  bool stopped_ = false;
  // Set while the components restart on a new inventory: the liveness monitor and the XID
  // policy stopped then are carried into their successors (their timers and memory of
  // recent XIDs), and the kernel log is read on from its end.
  bool restarting_ = false;
  std::unique_ptr<health::LivenessMonitor> carried_liveness_;
  std::unique_ptr<health::XidHistoryStore> carried_xid_history_;
  std::unique_ptr<health::XidPolicy> carried_xid_policy_;
  // Serialises the lifecycle's users: the main thread (Start, Reload, Stop) and the reset
  // thread (a restart on a new inventory).
  mutable absl::Mutex lifecycle_mu_;
  Lifecycle lifecycle_;  // after everything it refers to
  // The reset rung (health.reset): decided in the sampler's rounds, carried out on the
  // "gpulet-reset" thread, which stops first (it may restart the lifecycle above).
  std::shared_ptr<ResetRung> reset_rung_ = std::make_shared<ResetRung>();
  std::unique_ptr<node::GpuResetter> own_resetter_;
  node::GpuResetter* resetter_ = nullptr;
  absl::Mutex resets_mu_;
  std::deque<ResetRung::Order> pending_resets_ ABSL_GUARDED_BY(resets_mu_);
  // What the inventory watch saw differ, for the reset thread ("" when nothing is due).
  std::string inventory_due_ ABSL_GUARDED_BY(resets_mu_);
  // The file check thread's (a new inventory rebuilds that thread, not the watch, so that a
  // difference a new inventory did not mend is not acted on again).
  InventoryWatch inventory_watch_;
  std::unique_ptr<PeriodicWorker> reset_worker_;
  // The reboot rung (health.reboot), on the sampler's rounds; the daemon's, so that its
  // record and Events outlive a rebuilt sampler.
  std::shared_ptr<RebootRung> reboot_rung_;
  // The rung's hand through Talos' API (health.reboot.via talos), the daemon's so that a drain
  // under way outlives a rebuilt sampler; rebuilt when its settings change and it is idle.
  std::shared_ptr<node::NodeRebooter> TalosRebooterFor(const config::Config& config);
  std::shared_ptr<cluster::DrainingRebooter> talos_rebooter_;
  std::string talos_rebooter_settings_;  // what it was built from
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_DAEMON_H_
