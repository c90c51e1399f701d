// The reload table names every config key, and ChangedConfigKeys sees a change to each.
#include "daemon/reload_table.h"

#include <map>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet::daemon {
namespace {

using ::testing::ElementsAre;

TEST(ReloadTableTest, NamesEveryConfigKeyOnceAndNothingElse) {
  std::set<std::string> keys;
  for (const std::string& key : config::ConfigKeys()) {
    keys.insert(key);
    const ReloadRule* rule = FindReloadRule(key);
    ASSERT_NE(rule, nullptr) << key << " is missing from the reload table (reload_table.cc)";
    EXPECT_NE(rule->effects, 0u) << key;
    EXPECT_NE(std::string(rule->how), "") << key;
  }
  std::set<std::string> seen;
  for (const ReloadRule& rule : ReloadRules()) {
    EXPECT_TRUE(keys.count(rule.key)) << rule.key << " is not a config key";
    EXPECT_TRUE(seen.insert(rule.key).second) << rule.key << " is in the table twice";
  }
}

// One value other than the default for every key: a new key fails here until it has one, and
// ChangedConfigKeys must report exactly that key.
const std::map<std::string, std::string>& OtherValues() {
  static const auto* kValues = new std::map<std::string, std::string>{
      {"kubeletDir", "/tmp/kubelet"},
      {"resourceName", "example.com/gpu"},
      {"plugin.deviceListStrategy", "cdi-cri"},
      {"plugin.deviceIdStrategy", "index"},
      {"plugin.migStrategy", "mixed"},
      {"plugin.passDeviceSpecs", "true"},
      {"plugin.cdiKind", "example.com/gpu"},
      {"plugin.cdiAnnotationPrefix", "example.com/"},
      {"plugin.devRoot", "/host"},
      {"cdi.specDir", "/etc/cdi"},
      {"cdi.driverRoot", "/driver"},
      {"cdi.devRoot", "/devroot"},
      {"cdi.hookPath", "/usr/bin/nvidia-cdi-hook"},
      {"labels.featuresFile", "/etc/features"},
      {"sharing.timeSlicing.replicas", "4"},
      {"sharing.timeSlicing.renameByDefault", "true"},
      {"sharing.timeSlicing.failRequestsGreaterThanOne", "true"},
      {"sharing.memorySlices.enabled", "true"},
      {"sharing.memorySlices.sliceMiB", "2048"},
      {"sharing.memorySlices.enforce", "false"},
      {"sharing.memorySlices.computeShare", "true"},
      {"sharing.memorySlices.hostDir", "/srv/vram"},
      {"sharing.memorySlices.gpus", "1"},
      {"sharing.memorySlices.resourceName", "example.com/gpu-memory"},
      {"sharing.memorySlices.overQuota.action", "kill"},
      {"sharing.memorySlices.overQuota.marginMiB", "256"},
      {"sharing.memorySlices.overQuota.grace", "1m"},
      {"sharing.memorySlices.overQuota.maxKillsPerHour", "2"},
      {"metrics.address", ":9500"},
      {"metrics.sampleInterval", "5s"},
      {"metrics.webConfigFile", "/etc/web.yaml"},
      {"metrics.podAttribution", "false"},
      {"metrics.podResourcesInterval", "30s"},
      {"health.probeInterval", "2s"},
      {"health.hangTimeout", "2s"},
      {"health.quietPeriod", "10m"},
      {"health.applicationXids", "13"},
      {"health.kmsg", "false"},
      {"health.xidHistoryFile", "/var/lib/other/xids.json"},
      {"health.recorder.window", "1h"},
      {"health.recorder.dir", "/var/lib/other/recorder"},
      {"health.retire.mode", "on"},
      {"health.retire.faults", "5"},
      {"health.retire.window", "24h"},
      {"health.retire.file", "/var/lib/other/retired.json"},
      {"health.evict.mode", "on"},
      {"health.evict.grace", "10m"},
      {"health.evict.maxPerHour", "3"},
      {"health.reset.mode", "on"},
      {"health.reset.maxPerDay", "1"},
      {"health.reboot.mode", "on"},
      {"health.reboot.grace", "30m"},
      {"health.reboot.maxPerWindow", "2"},
      {"health.reboot.window", "48h"},
      {"health.reboot.file", "/var/lib/other/reboots.json"},
      {"health.reboot.sentinel", "/run/reboot-required"},
      {"health.reboot.via", "kured"},
      {"health.reboot.talosconfig", "/etc/talos/config"},
      {"health.reboot.talosEndpoint", "10.5.0.2:50000"},
      {"health.reboot.drainTimeout", "30m"},
      {"cluster.enabled", "true"},
      {"cluster.kubeconfig", "/etc/gpulet/kubeconfig"},
      {"cluster.heartbeat", "30s"},
      {"cluster.events", "false"},
      {"cluster.nodeLabels", "true"},
      {"cluster.taint.enabled", "true"},
      {"cluster.taint.effect", "NoExecute"},
      {"cluster.taint.share", "0.5"},
      {"dra.enabled", "true"},
      {"dra.driverName", "gpu.example.com"},
      {"dra.gpus", "0"},
      {"dra.memoryShares.enabled", "true"},
      {"dra.memoryShares.stepMiB", "512"},
      {"dra.noExecuteOnFatal", "true"},
      {"dra.checkpointFile", "/var/lib/gpulet/other.json"},
      {"dra.rollingUpdate", "true"},
  };
  return *kValues;
}

TEST(ReloadTableTest, ChangedConfigKeysSeesEachKey) {
  absl::StatusOr<config::Config> defaults = config::ParseConfig("", "test", {});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_TRUE(ChangedConfigKeys(*defaults, *defaults).empty());
  for (const std::string& key : config::ConfigKeys()) {
    auto it = OtherValues().find(key);
    ASSERT_NE(it, OtherValues().end()) << "give " << key << " a value in OtherValues()";
    absl::StatusOr<config::Config> changed = config::ParseConfig("", "test", {{key, it->second}});
    ASSERT_TRUE(changed.ok()) << key << ": " << changed.status();
    EXPECT_THAT(ChangedConfigKeys(*defaults, *changed), ElementsAre(key));
    EXPECT_NE(ReloadEffectsOf({key}), 0u) << key;
  }
}

TEST(ReloadTableTest, EffectsAreTheUnionOfTheKeys) {
  EXPECT_EQ(ReloadEffectsOf({"metrics.address", "health.kmsg"}),
            unsigned{kReloadMetrics | kReloadEvents});
  EXPECT_EQ(ReloadEffectsOf({"plugin.cdiKind"}), unsigned{kReloadPluginConfig | kReloadCdiSpec});
  EXPECT_EQ(ReloadEffectsOf({"no.such.key"}), 0u);
}

}  // namespace
}  // namespace gpulet::daemon
