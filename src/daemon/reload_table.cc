#include "daemon/reload_table.h"

#include "absl/strings/str_split.h"
#include "yaml-cpp/yaml.h"

namespace gpulet::daemon {
namespace {

// The pod attributor asks the kubelet (kubeletDir) about our advertised resources
// (resourceName, sharing.*), so those keys rebuild the metrics stack as well; the daemon
// skips that rebuild when the attributor's inputs came out the same.
constexpr unsigned kResources = kReloadPluginConfig | kReloadMetrics;

constexpr ReloadRule kRules[] = {
    {"kubeletDir", kReloadPluginManager | kReloadMetrics,
     "rebuilt: a new plugin manager serves and registers in the new directory, then the old "
     "one stops and removes its sockets; pod attribution watches the new pod-resources"},
    {"resourceName", kResources,
     "live: the plugin manager re-serves and re-registers; pod attribution follows"},
    {"plugin.deviceListStrategy", kReloadPluginConfig, "live: the plugin manager re-serves"},
    {"plugin.deviceIdStrategy", kReloadPluginConfig, "live: the plugin manager re-serves"},
    {"plugin.migStrategy", kReloadPluginConfig | kReloadLabelsFile,
     "live: the plugin manager re-serves; labels rewritten"},
    {"plugin.passDeviceSpecs", kReloadPluginConfig, "live: the plugin manager re-serves"},
    {"plugin.cdiKind", kReloadPluginConfig | kReloadCdiSpec,
     "live: the CDI spec of the new kind is written (the old kind's removed), then the plugin "
     "manager re-serves"},
    {"plugin.cdiAnnotationPrefix", kReloadPluginConfig, "live: the plugin manager re-serves"},
    {"plugin.devRoot", kReloadPluginConfig, "live: the plugin manager re-serves"},
    {"cdi.specDir", kReloadCdiSpec,
     "live: the spec is written in the new directory and the old file removed (empty: "
     "removed)"},
    {"cdi.driverRoot", kReloadCdiSpec, "live: the CDI spec is generated again"},
    {"cdi.devRoot", kReloadCdiSpec, "live: the CDI spec is generated again"},
    {"cdi.hookPath", kReloadCdiSpec, "live: the CDI spec is generated again"},
    {"labels.featuresFile", kReloadLabelsFile,
     "live: the labels file is kept at the new path (the old file is left as it is)"},
    {"sharing.timeSlicing.replicas", kResources,
     "live: the plugin manager re-serves; pod attribution follows a renamed resource"},
    {"sharing.timeSlicing.renameByDefault", kResources,
     "live: the plugin manager re-serves; pod attribution follows a renamed resource"},
    {"sharing.timeSlicing.failRequestsGreaterThanOne", kReloadPluginConfig,
     "live: the plugin manager re-serves"},
    {"sharing.memorySlices.enabled", kResources,
     "live: the plugin manager re-serves; pod attribution follows"},
    {"sharing.memorySlices.sliceMiB", kReloadPluginConfig, "live: the plugin manager re-serves"},
    {"sharing.memorySlices.resourceName", kResources,
     "live: the plugin manager re-serves; pod attribution follows"},
    {"sharing.memorySlices.enforce", kReloadPluginConfig,
     "live: containers allocated from then on (running ones keep what they were given)"},
    {"sharing.memorySlices.computeShare", kReloadPluginConfig,
     "live: containers allocated from then on (running ones keep what they were given)"},
    {"sharing.memorySlices.hostDir", kReloadPluginConfig | kReloadMetrics,
     "live: containers allocated from then on use the new directory; the sampler reads it"},
    {"sharing.memorySlices.gpus", kResources,
     "live: the plugin manager re-serves (running containers keep what they hold)"},
    {"sharing.memorySlices.overQuota.action", kReloadMetrics,
     "rebuilt: sampler and server; the over-quota guard keeps its slices' timers and its kill "
     "budget"},
    {"sharing.memorySlices.overQuota.marginMiB", kReloadMetrics,
     "rebuilt: sampler and server; the over-quota guard keeps its timers and budget"},
    {"sharing.memorySlices.overQuota.grace", kReloadMetrics,
     "rebuilt: sampler and server; the over-quota guard keeps its timers and budget"},
    {"sharing.memorySlices.overQuota.maxKillsPerHour", kReloadMetrics,
     "rebuilt: sampler and server; the over-quota guard keeps the kills it made this hour"},
    {"metrics.address", kReloadMetrics,
     "rebuilt: the new server listens before the old one closes; refused when it cannot "
     "listen"},
    {"metrics.sampleInterval", kReloadMetrics, "rebuilt: sampler and server"},
    {"metrics.webConfigFile", kReloadMetrics,
     "rebuilt (also when only the file's content, or the certificate it names, changed): "
     "refused when the file is unusable"},
    {"metrics.podAttribution", kReloadMetrics, "rebuilt: sampler, pod attributor and server"},
    {"metrics.podResourcesInterval", kReloadMetrics, "rebuilt: pod attributor, sampler, server"},
    {"health.probeInterval", kReloadLiveness,
     "rebuilt: liveness monitor, taking over the old one's per-GPU timers (a GPU out stays "
     "out until its quiet period passes)"},
    {"health.hangTimeout", kReloadLiveness,
     "rebuilt: liveness monitor, taking over the old one's per-GPU timers"},
    {"health.quietPeriod", kReloadLiveness | kReloadXidPolicy | kReloadCluster | kReloadMetrics,
     "rebuilt: liveness monitor, XID policy and event monitor, taking over their per-GPU "
     "timers; a GPU out comes back after the new quiet period; the cluster reporter, whose "
     "Node conditions clear after the new quiet period; the sampler, whose rounds end the "
     "reset rung's probation"},
    {"health.applicationXids", kReloadXidPolicy,
     "rebuilt: XID policy and event monitor, taking over the old policy's per-GPU timers"},
    {"health.xidHistoryFile", kReloadXidPolicy,
     "rebuilt: XID policy (reading the history from the new file, taking over the old "
     "policy's per-GPU timers) and event monitor"},
    {"health.recorder.window", kReloadMetrics,
     "rebuilt: the sampler that feeds the flight recorder; what was recorded is kept (a "
     "shorter window keeps the newest part)"},
    {"health.recorder.dir", kReloadMetrics,
     "rebuilt: the sampler; the next fault is written to the new directory"},
    {"health.retire.mode", kReloadRetirement, "live: the next fault is judged by the new mode"},
    {"health.retire.faults", kReloadRetirement, "live: the next fault is judged by the new count"},
    {"health.retire.window", kReloadRetirement, "live: the next fault is judged by the new window"},
    {"health.retire.file", kReloadRetirement,
     "live: the new file is read at once; GPUs only the old one listed return to service"},
    {"health.evict.mode", kReloadMetrics | kReloadCluster,
     "rebuilt: the sampler whose rounds order evictions, and the API client, whose evictor "
     "runs only with mode on; orders in flight are kept"},
    {"health.evict.grace", kReloadMetrics,
     "rebuilt: the sampler; a GPU already out is judged by the new grace from when it went out"},
    {"health.evict.maxPerHour", kReloadMetrics,
     "rebuilt: the sampler; the evictions of the last hour still count"},
    {"health.reset.mode", kReloadMetrics,
     "rebuilt: the sampler whose rounds order resets; a reset under way finishes"},
    {"health.reset.maxPerDay", kReloadMetrics,
     "rebuilt: the sampler; the resets of the last 24 hours still count"},
    {"health.reboot.mode", kReloadMetrics, "rebuilt: the sampler whose rounds ask for reboots"},
    {"health.reboot.grace", kReloadMetrics,
     "rebuilt: the sampler; a GPU already out is judged by the new grace from when it went out"},
    {"health.reboot.maxPerWindow", kReloadMetrics,
     "rebuilt: the sampler; the reboots in the record still count"},
    {"health.reboot.window", kReloadMetrics,
     "rebuilt: the sampler; the reboots in the record still count"},
    {"health.reboot.file", kReloadMetrics, "rebuilt: the sampler; the new record is read at once"},
    {"health.reboot.sentinel", kReloadMetrics,
     "rebuilt: the sampler; the next reboot is asked for at the new path"},
    {"health.reboot.via", kReloadMetrics,
     "rebuilt: the sampler; the next reboot is asked for the new way (a drain under way for "
     "Talos finishes first)"},
    {"health.reboot.talosconfig", kReloadMetrics,
     "rebuilt: the sampler; Talos' API is reached with the new file (once no drain is under "
     "way)"},
    {"health.reboot.talosEndpoint", kReloadMetrics,
     "rebuilt: the sampler; Talos' API is reached at the new address (once no drain is under "
     "way)"},
    {"health.reboot.drainTimeout", kReloadMetrics,
     "rebuilt: the sampler; the next drain has the new limit (once no drain is under way)"},
    {"health.kmsg", kReloadEvents,
     "rebuilt: event monitor; a kernel log already read is read on from its end, a newly "
     "enabled one from its start (as at startup)"},
    {"cluster.enabled", kReloadCluster,
     "rebuilt: the cluster reporter starts or stops (conditions it wrote stay on the Node)"},
    {"cluster.kubeconfig", kReloadCluster,
     "rebuilt: a new API client; refused when the file is unusable"},
    {"cluster.heartbeat", kReloadCluster, "rebuilt: the cluster reporter"},
    {"cluster.events", kReloadCluster, "rebuilt: the cluster reporter"},
    {"cluster.nodeLabels", kReloadCluster,
     "rebuilt: the cluster reporter (labels it wrote are removed when turned off)"},
    {"cluster.taint.enabled", kReloadCluster,
     "rebuilt: the cluster reporter adds or removes its taint"},
    {"cluster.taint.effect", kReloadCluster, "rebuilt: the cluster reporter rewrites its taint"},
    {"cluster.taint.share", kReloadCluster, "rebuilt: the cluster reporter"},
    {"dra.enabled", kReloadDra | kReloadPluginConfig,
     "rebuilt: the DRA driver starts or stops; the device plugin takes or gives up its GPUs"},
    {"dra.driverName", kReloadDra | kReloadMetrics,
     "rebuilt: the DRA driver registers under the new name (the old name's slices stay until "
     "the kubelet removes them); the pod attributor follows the new name"},
    {"dra.gpus", kReloadDra | kReloadPluginConfig,
     "rebuilt: the DRA driver publishes the new set; the device plugin serves the rest"},
    {"dra.memoryShares.enabled", kReloadDra, "rebuilt: the DRA driver republishes its slices"},
    {"dra.memoryShares.stepMiB", kReloadDra, "rebuilt: the DRA driver republishes its slices"},
    {"dra.noExecuteOnFatal", kReloadDra, "rebuilt: the DRA driver republishes its slices"},
    {"dra.checkpointFile", kReloadDra,
     "rebuilt: the DRA driver reads the new checkpoint (claims recorded in the old one are "
     "not moved)"},
    {"dra.rollingUpdate", kReloadDra,
     "rebuilt: the DRA driver serves and registers again under the new socket names (with "
     "or without the pod UID)"},
};

// The node at a dotted key in a ConfigToYaml document.
YAML::Node At(const YAML::Node& root, const std::string& key) {
  YAML::Node node = root;
  for (absl::string_view part : absl::StrSplit(key, '.')) {
    const YAML::Node& parent = node;  // const: a lookup never adds a key
    YAML::Node next = parent[std::string(part)];
    node.reset(next);
  }
  return node;
}

}  // namespace

absl::Span<const ReloadRule> ReloadRules() { return kRules; }

const ReloadRule* FindReloadRule(const std::string& key) {
  for (const ReloadRule& r : kRules) {
    if (key == r.key) return &r;
  }
  return nullptr;
}

std::vector<std::string> ChangedConfigKeys(const config::Config& before,
                                           const config::Config& after) {
  YAML::Node a = YAML::Load(config::ConfigToYaml(before));
  YAML::Node b = YAML::Load(config::ConfigToYaml(after));
  std::vector<std::string> out;
  for (const std::string& key : config::ConfigKeys()) {
    if (YAML::Dump(At(a, key)) != YAML::Dump(At(b, key))) out.push_back(key);
  }
  return out;
}

unsigned ReloadEffectsOf(const std::vector<std::string>& keys) {
  unsigned effects = 0;
  for (const std::string& key : keys) {
    if (const ReloadRule* r = FindReloadRule(key)) effects |= r->effects;
  }
  return effects;
}

}  // namespace gpulet::daemon
