// gpulet's daemon configuration (version v1): one options struct, loaded from a YAML file,
// environment variables and flags with precedence flag > env > file, validated once.
//
// Every setting has a dotted key ("sharing.timeSlicing.replicas") used in the file, in
// error messages and in --print-config; flags and env vars map onto the same keys, so there
// is exactly one parser and one validator per setting (the field table in config.cc). Bad
// input never half-applies: LoadConfig returns either a complete valid Config or an error
// naming the key, the bad value and the allowed values.
//
// Hostile input is an InvalidArgument error, never an exception (yaml-cpp's are caught inside)
// or a hang: the file must be a regular file of at most 1 MiB (common/read_file.h); the YAML
// must parse; `version` must be the string v1; every key must be known and given once; every
// value must have its key's shape (one value, or for the two list keys one value or a list of
// values; a section a mapping); numbers are in their range, and durations are finite and
// within their key's bounds (one table in config.cc, listed in README's config section).
//
// Thread-safety: Config is a plain value. Loading is done by the main thread.
#ifndef GPULET_CONFIG_CONFIG_H_
#define GPULET_CONFIG_CONFIG_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gpulet::config {

enum class DeviceListStrategy { kEnvvar, kVolumeMounts, kCdiAnnotations, kCdiCri };
enum class DeviceIdStrategy { kUuid, kIndex };
// How GPUs with MIG enabled are advertised, as NVIDIA's device plugin's --mig-strategy:
// none (whole GPUs only, MIG ignored), single (every GPU's MIG devices under resourceName;
// every GPU must have MIG enabled with one profile), mixed (one resource per profile,
// nvidia.com/mig-<profile>, beside whole GPUs without MIG).
enum class MigStrategy { kNone, kSingle, kMixed };
const char* MigStrategyName(MigStrategy strategy);
// What gpulet does about a VRAM slice holder over its quota by the driver's count
// (sharing.memorySlices.overQuota.action): say so (an Event naming the process a kill would
// take), or also kill that process.
enum class OverQuotaAction { kEvent, kKill };
const char* OverQuotaActionName(OverQuotaAction action);

// How a remediation rung acts (docs/remediation.md): not at all, by saying what it would do
// (an Event and a log line), or for real.
enum class RemediationMode { kOff, kDryRun, kOn };
const char* RemediationModeName(RemediationMode mode);  // "off", "dry-run", "on"

struct Config {
  // Directory holding device-plugins/ and pod-resources/. Default: /var/lib/kubelet.
  std::string kubelet_dir = "/var/lib/kubelet";
  // Extended resource advertised for whole GPUs (or replicas). Default: nvidia.com/gpu.
  std::string resource_name = "nvidia.com/gpu";

  struct Plugin {
    // How Allocate hands devices to the container runtime; several may be combined.
    // Default: [envvar].
    std::vector<DeviceListStrategy> device_list_strategy = {DeviceListStrategy::kEnvvar};
    // Whether device IDs in responses are GPU UUIDs or NVML indexes. Default: uuid.
    DeviceIdStrategy device_id_strategy = DeviceIdStrategy::kUuid;
    // How MIG devices are advertised (none, single, mixed). Default: none.
    MigStrategy mig_strategy = MigStrategy::kNone;
    // Also return DeviceSpecs for /dev/nvidiaN and the control nodes. Default: false.
    bool pass_device_specs = false;
    // CDI kind used in cdi-cri / cdi-annotations names, and of the spec `gpulet serve`
    // writes (see Cdi). A kind of gpulet's own, so that the spec never collides with a
    // node-wide nvidia.com/gpu spec from nvidia-ctk or Talos. Default: gpulet.dev/gpu.
    std::string cdi_kind = "gpulet.dev/gpu";
    // Annotation key prefix for cdi-annotations. Default: cdi.k8s.io/.
    std::string cdi_annotation_prefix = "cdi.k8s.io/";
    // Host directory whose dev/ holds the device nodes, for DeviceSpec host paths. Default: /.
    std::string dev_root = "/";
  } plugin;

  // The CDI spec `gpulet serve` keeps for the devices it advertises: every CDI name in an
  // Allocate answer resolves in it.
  struct Cdi {
    // Host directory the spec is written to (under --host-root); empty writes none.
    // Default: /var/run/cdi (scanned by containerd, CRI-O and podman; writable on Talos).
    std::string spec_dir = "/var/run/cdi";
    // Directories (on this machine) holding the driver's files and /dev; "" = the host
    // root. As `gpulet cdi generate --driver-root/--dev-root`.
    std::string driver_root;
    std::string dev_root;
    // Host path of nvidia-cdi-hook or nvidia-ctk; "" = the first that exists on the host.
    std::string hook_path;
  } cdi;

  struct TimeSlicing {
    // Replicas advertised per GPU (IDs <uuid>::<n>); 1 disables sharing. Default: 1.
    int replicas = 1;
    // Advertise <resourceName>.shared instead of <resourceName> when replicas > 1.
    bool rename_by_default = false;
    // Refuse a container asking for more than one replica. Default: false.
    bool fail_requests_greater_than_one = false;
  };
  struct MemorySlices {
    // Advertise one unit of `resource_name` per `slice_mib` of each GPU's memory.
    // Default: false.
    bool enabled = false;
    int slice_mib = 1024;
    std::string resource_name = "nvidia.com/gpu-memory";
    // Hold each container to its slices: the Allocate answer loads gpulet's VRAM
    // enforcement library (src/vramlib/) into it. false: the slices are accounting only.
    // Default: true.
    bool enforce = true;
    // Cap each slice holder's SM time at its share of the card (its slices over the GPU's):
    // the enforcement library paces its kernel launches at a rate gpulet fits each sampling
    // round to the SM time NVML measures (docs/sharing.md, "Compute share"). Needs enforce.
    // Default: false.
    bool compute_share = false;
    // The host directory for the enforcement library and one directory per allocation
    // holding its slice file; mounted into sliced containers. Default: /var/lib/gpulet/vram.
    std::string host_dir = "/var/lib/gpulet/vram";
    // The GPUs served as slices: "all", or GPU indexes and UUIDs. A GPU serves slices or
    // whole-GPU requests, never both (a whole-GPU pod would otherwise land on a card whose
    // memory slices hold); the others stay whole. Default: [all].
    std::vector<std::string> gpus = {"all"};
    // A slice holder whose memory as the driver counts it (NVML's per-process figures, which
    // include each process's CUDA context: memory no allocation call shows the library) is
    // over its quota by more than `margin_mib`: gpulet says so in a Node Event and
    // gpulet_vram_device_used_bytes, naming the process it would kill (its largest by the
    // driver's count). With `action` kill it also kills that process once the holder has been
    // over for `grace`, at most `max_kills_per_hour` on the node. docs/sharing.md.
    struct OverQuota {
      OverQuotaAction action = OverQuotaAction::kEvent;  // Default: event.
      int margin_mib = 1024;                             // Default: 1024.
      absl::Duration grace = absl::Seconds(30);          // Default: 30s.
      int max_kills_per_hour = 4;                        // Default: 4.
      bool operator==(const OverQuota&) const = default;
    } over_quota;
  };
  struct Sharing {
    TimeSlicing time_slicing;
    MemorySlices memory_slices;
  } sharing;

  struct Labels {
    // node-feature-discovery feature file (a host path, under --host-root) that `gpulet
    // serve` keeps holding this node's GPU labels (cluster/labels.h); NFD's worker turns it
    // into node labels. Empty writes none.
    // Default: /etc/kubernetes/node-feature-discovery/features.d/gpulet.
    std::string features_file = "/etc/kubernetes/node-feature-discovery/features.d/gpulet";
  } labels;

  struct Metrics {
    // Listen address for /metrics, /healthz and /status. Default: :9400. Empty disables.
    std::string address = ":9400";
    // How often the sampler reads NVML. Default: 1s.
    absl::Duration sample_interval = absl::Seconds(1);
    // Prometheus web-config file (tls_server_config, basic_auth_users). Default: none.
    std::string web_config_file;
    // Label GPUs and processes with their pods (kubelet PodResources API). Default: true.
    bool pod_attribution = true;
    // How often the PodResources list is refreshed. Default: 10s.
    absl::Duration pod_resources_interval = absl::Seconds(10);
  } metrics;

  struct Health {
    // How often liveness probes each GPU. Default: 1s.
    absl::Duration probe_interval = absl::Seconds(1);
    // How long a liveness probe may take before the GPU counts as hung. A healthy GPU
    // answers in well under a millisecond; probe interval + this bounds detection.
    // Default: 750ms.
    absl::Duration hang_timeout = absl::Milliseconds(750);
    // XIDs that are the application's fault and never take a GPU out. Default: 13, 31,
    // 43, 45, 68, 94.
    std::vector<int> application_xids = {13, 31, 43, 45, 68, 94};
    // How long a GPU must stay quiet after a fatal condition clears before it is Healthy
    // again. Default: 5m.
    absl::Duration quiet_period = absl::Minutes(5);
    // Whether to read the kernel log (/dev/kmsg under the host root). Default: true.
    bool kmsg = true;
    // Where the XID repeat history is kept across gpulet restarts (a host path, under the
    // host root): an XID that comes back after its recommended reset or reboot calls for
    // hardware inspection. Empty: kept in memory only. Default:
    // /var/lib/gpulet/xid-history.json.
    std::string xid_history_file = "/var/lib/gpulet/xid-history.json";
    struct Recorder {
      // How much of each GPU's recent history the flight recorder keeps in memory (what
      // the metrics sampler reads, every metrics.sampleInterval; docs/remediation.md); 0
      // turns it off. Needs metrics.address. Default: 30m.
      absl::Duration window = absl::Minutes(30);
      // Where a GPU's recording is written when it faults, to survive the reboot the fault
      // may cause (a host path, under the host root); empty: kept in memory only. Default:
      // /var/lib/gpulet/recorder.
      std::string dir = "/var/lib/gpulet/recorder";
      bool operator==(const Recorder&) const = default;
    } recorder;
    struct Retire {
      // What to do with a GPU that went Unhealthy `faults` times within `window` (each
      // time after it had recovered: a reset, a reboot, a quiet period), counted from the
      // flight recorder's files (docs/remediation.md): keep it out of service across
      // restarts and reboots (on), say that it would (dry-run), or nothing (off). Default:
      // dry-run.
      RemediationMode mode = RemediationMode::kDryRun;
      int faults = 3;                               // 2 to 8. Default: 3.
      absl::Duration window = absl::Hours(24 * 7);  // 1h to 90 days. Default: 168h.
      // The retired GPUs, kept across reboots (a host path, under the host root); edit it
      // with `gpulet retired`. Default: /var/lib/gpulet/retired.json.
      std::string file = "/var/lib/gpulet/retired.json";
    } retire;
    struct Evict {
      // What to do with the pods that hold a GPU that has been Unhealthy for `grace`
      // (docs/remediation.md): evict them through the Eviction API, so that their
      // controllers reschedule them onto a healthy GPU and PodDisruptionBudgets hold (on;
      // needs cluster.enabled, pod attribution and the RBAC of deploy/evict), say
      // that it would (dry-run), or nothing (off). Other pods, and pods on other GPUs, are
      // never touched. Default: dry-run.
      RemediationMode mode = RemediationMode::kDryRun;
      // How long a GPU stays Unhealthy before its pods are evicted: a fault that clears
      // within it costs no pod. 0s to 1h. Default: 2m.
      absl::Duration grace = absl::Minutes(2);
      // At most this many pods evicted per hour on the node, all GPUs together. 1 to 100.
      // Default: 10.
      int max_per_hour = 10;
      bool operator==(const Evict&) const = default;
    } evict;
    struct Reset {
      // What to do with a GPU that is out for a fault a GPU reset clears (an XID NVIDIA's
      // catalogue answers with a reset, the driver's recovery action GPU_RESET) once nothing
      // runs on it and no pod holds it (docs/remediation.md): reset it through the kernel's
      // PCI function reset under the host root (on; needs deploy/reset), say that it would
      // (dry-run), or nothing (off). Default: dry-run.
      RemediationMode mode = RemediationMode::kDryRun;
      // At most this many resets of one GPU in any 24 hours; a GPU that needs more waits for
      // a person or a reboot. 1 to 10. Default: 3.
      int max_per_day = 3;
      bool operator==(const Reset&) const = default;
    } reset;
    struct Reboot {
      // What to do when a GPU's fault only a node reboot clears has lasted `grace`
      // (docs/remediation.md): ask kured to reboot the node through its sentinel file (on;
      // needs kured and deploy/reboot), say that it would (dry-run), or nothing (off).
      // Default: dry-run.
      RemediationMode mode = RemediationMode::kDryRun;
      // How long the GPU is out before the reboot is asked for. 0s to 24h. Default: 10m.
      absl::Duration grace = absl::Minutes(10);
      // At most this many reboots asked for within `window`, counted across reboots (the
      // record in `file`). 1 to 10. Default: 1.
      int max_per_window = 1;
      absl::Duration window = absl::Hours(24);  // 1h to 30 days. Default: 24h.
      // The record of the reboots asked for (a host path under the host root), which the
      // budget and the outcome after the reboot are read from. Default:
      // /var/lib/gpulet/reboots.json.
      std::string file = "/var/lib/gpulet/reboots.json";
      // kured's sentinel (its --reboot-sentinel), a host path. Default:
      // /var/run/reboot-required.
      std::string sentinel = "/var/run/reboot-required";
      // Who reboots: "kured" (its sentinel), "talos" (Talos' machine API, after gpulet's own
      // cordon and drain, one node at a time per reason), or "auto": talos on a Talos node,
      // kured elsewhere. Default: auto.
      std::string via = "auto";
      // The talosconfig Talos writes for gpulet's talos.dev ServiceAccount, a path in the
      // container (deploy/reboot-talos mounts its Secret there). Default:
      // /var/run/secrets/talos.dev/config.
      std::string talosconfig = "/var/run/secrets/talos.dev/config";
      // host:port to reach Talos' API at instead of the talosconfig's endpoint (whose name
      // apid's certificate must still carry); "" for the endpoint. Default: "".
      std::string talos_endpoint;
      // How long gpulet's drain before a reboot through Talos may take; past it the node is
      // uncordoned and the reboot asked for again an hour later. 1m to 24h. Default: 15m.
      absl::Duration drain_timeout = absl::Minutes(15);
      bool operator==(const Reboot&) const = default;
    } reboot;
  } health;

  struct Cluster {
    // Tell the cluster about the GPUs' health through the Kubernetes API server: conditions
    // on the Node, Events, the optional taint and node labels (cluster/node_reporter.h).
    // Needs the RBAC in deploy/base. Default: false.
    bool enabled = false;
    // A kubeconfig file, for gpulet outside a pod; empty: the pod's service account.
    // Default: "".
    std::string kubeconfig;
    // How often the conditions are sent again when nothing changed. Default: 1m.
    absl::Duration heartbeat = absl::Minutes(1);
    // Events on the Node for health transitions and XIDs. Default: true.
    bool events = true;
    // Write the GPU labels (cluster/labels.h) on the Node itself, besides or instead of the
    // node-feature-discovery file. Default: false.
    bool node_labels = false;
    struct Taint {
      // Taint the Node gpulet.dev/gpu-unhealthy while enough GPUs are out. Default: false.
      bool enabled = false;
      // NoSchedule, PreferNoSchedule or NoExecute. Default: NoSchedule.
      std::string effect = "NoSchedule";
      // The share of the node's GPUs that must be Unhealthy (0.01 to 1). Default: 1 (all).
      double share = 1.0;
    } taint;
  } cluster;

  struct Dra {
    // Serve GPUs as a Kubernetes DRA driver (docs/dra.md): ResourceSlices through the API
    // server, NodePrepareResources for the kubelet. Needs Kubernetes 1.34+ and the RBAC in
    // deploy/dra. The API client is cluster's (cluster.kubeconfig). Default: false.
    bool enabled = false;
    // The driver's name, which DeviceClasses select on: a DNS subdomain of at most 63
    // characters. Default: gpu.gpulet.dev.
    std::string driver_name = "gpu.gpulet.dev";
    // The GPUs DRA offers: "all", or GPU indexes and UUIDs. The device plugin serves the
    // others: a GPU is offered by one or the other, never both. Default: [all].
    std::vector<std::string> gpus = {"all"};
    struct MemoryShares {
      // Whole GPUs allow several claims at once, with memory as consumable capacity
      // (KEP-5075). Default: false.
      bool enabled = false;
      // The step a claim's memory request is rounded up to (128 MiB to 1 TiB). Default: 1024.
      int step_mib = 1024;
    } memory_shares;
    // A device taint of NoExecute (evicting the pods) instead of NoSchedule for faults that
    // need a node reboot (XID 79 and the like). Default: false.
    bool no_execute_on_fatal = false;
    // Where prepared claims are recorded across restarts (under --host-root). Default:
    // /var/lib/gpulet/dra-checkpoint.json.
    std::string checkpoint_file = "/var/lib/gpulet/dra-checkpoint.json";
    // Rolling updates of gpulet without a gap (Kubernetes 1.33+, docs/dra.md): the kubelet
    // plugin's sockets carry the pod UID, which the DaemonSet passes in POD_UID (downward API
    // metadata.uid), so an old and a new pod serve side by side. Default: false.
    bool rolling_update = false;
  } dra;

  // The resource names this config advertises (one per plugin server).
  std::vector<std::string> AdvertisedResources() const;
  // Whether DRA offers the GPU with `index` and `uuid` (so the device plugin does not);
  // false whenever dra.enabled is.
  bool DraOffers(int index, const std::string& uuid) const;
  // Whether the device plugin serves this GPU as memory slices (sharing.memorySlices.gpus),
  // and so not whole.
  bool SlicesOffer(std::optional<int> index, const std::string& uuid) const;
  // Whether containers on this GPU get VRAM quotas: memory shares where DRA offers it, else
  // memory slices where the device plugin serves it as slices (a MIG-enabled GPU under a MIG
  // strategy other than none serves MIG devices, never slices).
  bool QuotasOn(std::optional<int> index, const std::string& uuid, bool mig_enabled) const;
};

// Values from flags and environment variables, keyed by config key ("plugin.deviceIdStrategy").
// The caller merges them flag-over-env before calling LoadConfig.
using ConfigOverrides = std::map<std::string, std::string>;

// Defaults, then `file` (if non-empty), then `overrides`; then validation. `file` is read
// with ReadRegularFile: a directory, FIFO, device, socket, symlink loop or a file over 1 MiB
// is refused at once, naming what it is.
absl::StatusOr<Config> LoadConfig(const std::string& file, const ConfigOverrides& overrides);

// Same, from YAML text (for tests and the fuzzer); `origin` names the text in messages.
absl::StatusOr<Config> ParseConfig(const std::string& yaml, const std::string& origin,
                                   const ConfigOverrides& overrides);

// The effective configuration as YAML, every key present.
std::string ConfigToYaml(const Config& config);

// Every config key, in file order (for docs, flags and error messages).
std::vector<std::string> ConfigKeys();

}  // namespace gpulet::config

#endif  // GPULET_CONFIG_CONFIG_H_
