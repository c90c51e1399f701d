// The reload table: for every config key, what `gpulet serve` does when SIGHUP changes it.
//
// A reload applies every changed setting or none (Daemon::Reload). Each key names the
// components that read it, and each component is either reconfigured live (the plugin
// manager re-serves its resources, the CDI spec and labels file are rewritten) or rebuilt:
// a new instance is built and started beside the old one where both can run (a new metrics
// server binds before the old one closes, a new plugin manager serves in the new kubelet
// directory before the old one leaves), else the old one is stopped and a new one started
// (liveness, XID policy and event monitor, which read their settings only when built). No
// key needs a restart unconditionally; the health rebuilds are refused while they would lose
// state the running monitors keep (see Daemon::Reload). This table is the one place that
// says so; a unit test checks that it names every key ConfigKeys() knows.
//
// Thread-safety: constant data and pure functions.
#ifndef GPULET_DAEMON_RELOAD_TABLE_H_
#define GPULET_DAEMON_RELOAD_TABLE_H_

#include <string>
#include <vector>

#include "absl/types/span.h"
#include "config/config.h"

namespace gpulet::daemon {

// What a changed key touches; a key may touch several.
enum ReloadEffect : unsigned {
  // Live: PluginManager::Reconfigure re-serves and re-registers the resources.
  kReloadPluginConfig = 1u << 0,
  // Rebuild: a new PluginManager serving in the new kubelet directory, then the old stops.
  kReloadPluginManager = 1u << 1,
  // Live: the CDI spec is generated and written again (the old kind's file removed).
  kReloadCdiSpec = 1u << 2,
  // Live: the labels file is kept at the (new) path.
  kReloadLabelsFile = 1u << 3,
  // Rebuild: pod attributor, sampler and HTTP server, started before the old ones stop.
  kReloadMetrics = 1u << 4,
  // Rebuild: LivenessMonitor (stop, then start with the new options).
  kReloadLiveness = 1u << 5,
  // Rebuild: XidPolicy, and so the EventMonitor that feeds it.
  kReloadXidPolicy = 1u << 6,
  // Rebuild: EventMonitor and its kernel-log source.
  kReloadEvents = 1u << 7,
  // Rebuild: the API client and the NodeReporter; the conditions are sent again at once.
  kReloadCluster = 1u << 8,
  // Rebuild: the DRA driver (kubelet plugin, slice publisher); prepared claims are kept in
  // its checkpoint, so a rebuild loses none.
  kReloadDra = 1u << 9,
  // Live: the retirement rule's settings and its file, read again at once.
  kReloadRetirement = 1u << 10,
};

struct ReloadRule {
  const char* key;   // as in ConfigKeys()
  unsigned effects;  // ReloadEffect bits
  const char* how;   // in words, for docs and the reload log
};

// Every config key, in ConfigKeys() order.
absl::Span<const ReloadRule> ReloadRules();

// The rule for `key`; nullptr when the table lacks it.
const ReloadRule* FindReloadRule(const std::string& key);

// The keys whose values differ between `before` and `after`, in ConfigKeys() order.
// Compared through ConfigToYaml, so it sees every key without a comparison per field.
std::vector<std::string> ChangedConfigKeys(const config::Config& before,
                                           const config::Config& after);

// The union of the effects of `keys` (keys the table lacks touch nothing).
unsigned ReloadEffectsOf(const std::vector<std::string>& keys);

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_RELOAD_TABLE_H_
