#include "config/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace gpulet::config {
namespace {

using ::testing::HasSubstr;

std::string ReadmeConfigExample() {
  std::ifstream in(std::string(GPULET_SOURCE_DIR) + "/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  size_t start = text.find("```yaml\nversion: v1\n");
  if (start == std::string::npos) return "";
  start += 8;
  return text.substr(start, text.find("```", start) - start);
}

// The README's configuration block is a valid file that shows every key with its default.
TEST(ConfigDocsTest, ReadmeExampleIsValidAndComplete) {
  std::string example = ReadmeConfigExample();
  ASSERT_FALSE(example.empty());
  absl::StatusOr<Config> parsed = ParseConfig(example, "README.md", {});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(ConfigToYaml(*parsed), ConfigToYaml(Config()));
  for (const std::string& key : ConfigKeys()) {
    std::string leaf = key.substr(key.rfind('.') + 1);
    EXPECT_THAT(example, HasSubstr(leaf + ":")) << key << " is not in the README example";
  }
}

TEST(ConfigTest, CdiAndLabelsKeys) {
  Config defaults;
  EXPECT_EQ(defaults.plugin.cdi_kind, "gpulet.dev/gpu");  // never nvidia.com/gpu's node spec
  EXPECT_EQ(defaults.cdi.spec_dir, "/var/run/cdi");
  absl::StatusOr<Config> c = ParseConfig(
      "version: v1\ncdi:\n  specDir: /run/cdi\n  hookPath: /usr/local/bin/nvidia-cdi-hook\n"
      "labels:\n  featuresFile: \"\"\n",
      "test", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cdi.spec_dir, "/run/cdi");
  EXPECT_EQ(c->cdi.hook_path, "/usr/local/bin/nvidia-cdi-hook");
  EXPECT_EQ(c->labels.features_file, "");
  // Empty disables the spec; relative paths are refused with the key and the fix.
  c = ParseConfig("version: v1\n", "test", {{"cdi.specDir", ""}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cdi.spec_dir, "");
  for (const char* key : {"cdi.specDir", "cdi.driverRoot", "cdi.devRoot", "cdi.hookPath"}) {
    c = ParseConfig("version: v1\n", "test", {{key, "relative/dir"}});
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(key));
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("'relative/dir'"));
  }
  c = ParseConfig("version: v1\n", "test", {{"labels.featuresFile", "/etc/features.d/"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("labels.featuresFile"));
}

// --- every key: default, accepted and rejected values ---------------------------------

// The effective configuration as --print-config shows it, parsed.
YAML::Node Printed(const Config& config) { return YAML::Load(ConfigToYaml(config)); }

// The value of `key` in a printed configuration (a list joined with commas).
std::string ValueOf(YAML::Node printed, const std::string& key) {
  YAML::Node node = printed;  // reset() below moves this handle only
  for (absl::string_view part : absl::StrSplit(key, '.')) node.reset(node[std::string(part)]);
  if (!node.IsSequence()) return node.as<std::string>();
  std::vector<std::string> items;
  for (const auto& item : node) items.push_back(item.as<std::string>());
  return absl::StrJoin(items, ",");
}
std::string ValueOf(const Config& config, const std::string& key) {
  return ValueOf(Printed(config), key);
}

// `key: value` as a config file, the key's dots as nested mappings, the value a quoted
// scalar (the file path of the same parser the flags use).
std::string FileWith(const std::string& key, const std::string& value) {
  std::vector<std::string> parts = absl::StrSplit(key, '.');
  std::string yaml = "version: v1\n";
  for (size_t i = 0; i < parts.size(); ++i) {
    yaml += std::string(2 * i, ' ') + parts[i] + ":";
    if (i + 1 < parts.size()) yaml += "\n";
  }
  std::string quoted;
  for (char c : value) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return yaml + " '" + quoted + "'\n";
}

struct Accepted {
  std::string value;
  std::string effective;  // as ValueOf shows it afterwards
};

struct KeyCase {
  std::string key;
  std::string default_value;
  std::vector<Accepted> accepted;
  std::vector<std::string> rejected;
};

const std::vector<KeyCase>& KeyCases() {
  static const auto* kCases = new std::vector<KeyCase>{
      {"kubeletDir", "/var/lib/kubelet", {{"/k", "/k"}}, {"", "var/lib/kubelet"}},
      {"resourceName",
       "nvidia.com/gpu",
       {{"example.com/gpu", "example.com/gpu"}, {"example.com/a_b.c-d", "example.com/a_b.c-d"}},
       {"gpu", "nvidia/gpu", "kubernetes.io/gpu", "k8s.kubernetes.io/gpu", "example.com/-gpu",
        "example.com/gpu!", "example.com/"}},
      {"plugin.deviceListStrategy",
       "envvar",
       {{"volume-mounts", "volume-mounts"},
        {"cdi-cri,cdi-annotations", "cdi-cri,cdi-annotations"},
        {" envvar , cdi-cri ", "envvar,cdi-cri"},
        {"envvar,volume-mounts,cdi-annotations,cdi-cri",
         "envvar,volume-mounts,cdi-annotations,cdi-cri"}},
       {"nvidia", "", ",", "envvar,legacy", "envvar,envvar"}},
      {"plugin.deviceIdStrategy",
       "uuid",
       {{"index", "index"}, {"uuid", "uuid"}},
       {"serial", "UUID", ""}},
      {"plugin.migStrategy",
       "none",
       {{"single", "single"}, {"mixed", "mixed"}, {"none", "none"}},
       {"Mixed", "all", ""}},
      {"plugin.passDeviceSpecs",
       "false",
       {{"true", "true"},
        {"1", "true"},
        {"yes", "true"},
        {"ON", "true"},
        {"off", "false"},
        {"0", "false"}},
       {"maybe", "", "2"}},
      {"plugin.cdiKind",
       "gpulet.dev/gpu",
       {{"nvidia.com/gpu", "nvidia.com/gpu"}},
       {"gpu", "nvidia/gpu", "example.com/", ""}},
      {"plugin.cdiAnnotationPrefix",
       "cdi.k8s.io/",
       {{"example.com/", "example.com/"}},
       {"cdi.k8s.io", ""}},
      {"plugin.devRoot", "/", {{"/host", "/host"}}, {"host", ""}},
      {"cdi.specDir", "/var/run/cdi", {{"", ""}, {"/etc/cdi", "/etc/cdi"}}, {"etc/cdi"}},
      {"cdi.driverRoot", "", {{"/run/nvidia/driver", "/run/nvidia/driver"}, {"", ""}}, {"driver"}},
      {"cdi.devRoot", "", {{"/host", "/host"}}, {"host"}},
      {"cdi.hookPath",
       "",
       {{"/usr/bin/nvidia-cdi-hook", "/usr/bin/nvidia-cdi-hook"}},
       {"nvidia-cdi-hook"}},
      {"sharing.timeSlicing.replicas",
       "1",
       {{"2", "2"}, {"64", "64"}, {"1", "1"}},
       {"0", "65", "-1", "two", "1.5", "", "1e1", "inf", "nan", "99999999999999999999"}},
      {"sharing.timeSlicing.renameByDefault", "false", {{"true", "true"}}, {"sometimes"}},
      {"sharing.timeSlicing.failRequestsGreaterThanOne", "false", {{"true", "true"}}, {"nah"}},
      {"sharing.memorySlices.enabled", "false", {{"true", "true"}}, {"enabled"}},
      {"sharing.memorySlices.sliceMiB",
       "1024",
       {{"128", "128"}, {"1048576", "1048576"}},
       {"127", "1048577", "1GiB", "", "inf", "-1024", "4294967296"}},
      {"sharing.memorySlices.resourceName",
       "nvidia.com/gpu-memory",
       {{"example.com/mem", "example.com/mem"}},
       {"mem", "kubernetes.io/mem"}},
      {"sharing.memorySlices.enforce", "true", {{"false", "false"}}, {"maybe"}},
      {"sharing.memorySlices.computeShare", "false", {{"true", "true"}}, {"half"}},
      {"sharing.memorySlices.hostDir",
       "/var/lib/gpulet/vram",
       {{"/srv/vram", "/srv/vram"}},
       {"vram", "/", "/var/../etc", "/var/./x", "/var//x", "/var/x/", ""}},
      {"sharing.memorySlices.gpus",
       "all",
       {{"1", "1"}, {"0, GPU-8a41", "0,GPU-8a41"}, {"all", "all"}},
       {"second", "all,1", "1,1"}},
      {"sharing.memorySlices.overQuota.action",
       "event",
       {{"kill", "kill"}, {"event", "event"}},
       {"Kill", "evict", ""}},
      {"sharing.memorySlices.overQuota.marginMiB",
       "1024",
       {{"0", "0"}, {"1048576", "1048576"}},
       {"-1", "1048577", "1GiB", ""}},
      {"sharing.memorySlices.overQuota.grace",
       "30s",
       {{"0s", "0"}, {"1h", "1h"}, {"90s", "1m30s"}},
       {"61m", "-1s", "inf", "30", ""}},
      {"sharing.memorySlices.overQuota.maxKillsPerHour",
       "4",
       {{"1", "1"}, {"3600", "3600"}},
       {"0", "3601", "many", ""}},
      {"labels.featuresFile",
       "/etc/kubernetes/node-feature-discovery/features.d/gpulet",
       {{"", ""}, {"/etc/features.d/gpulet", "/etc/features.d/gpulet"}},
       {"/etc/features.d/", "features.d/gpulet"}},
      {"metrics.address",
       ":9400",
       {{"", ""}, {"127.0.0.1:9400", "127.0.0.1:9400"}, {"[::1]:9400", "[::1]:9400"}},
       {"9400", "localhost"}},
      {"metrics.sampleInterval",
       "1s",
       {{"100ms", "100ms"}, {"1500ms", "1.5s"}, {"2m", "2m"}},
       {"99ms", "1", "fast", "-1s", "", "inf", "-inf", "nan", "1h0m0.001s", "2h"}},
      {"metrics.webConfigFile", "", {{"/etc/gpulet/web.yaml", "/etc/gpulet/web.yaml"}}, {}},
      {"metrics.podAttribution", "true", {{"false", "false"}}, {"perhaps"}},
      {"metrics.podResourcesInterval",
       "10s",
       {{"1s", "1s"}, {"1m", "1m"}, {"1h", "1h"}},
       {"999ms", "often", "inf", "nan", "61m", "0"}},
      {"health.probeInterval",
       "1s",
       {{"100ms", "100ms"}, {"30s", "30s"}, {"1h", "1h"}},
       {"99ms", "1", "inf", "nan", "-1s", "0", "2h"}},
      {"health.hangTimeout",
       "750ms",
       {{"100ms", "100ms"}, {"10s", "10s"}},
       {"99ms", "10.001s", "11s", "0", "inf", "nan", "-100ms"}},
      {"health.applicationXids",
       "13,31,43,45,68,94",
       {{"79", "79"}, {"13, 43", "13,43"}, {"", ""}},
       {"0", "1001", "x", "-13", "13,x", "nan", "1e2"}},
      {"health.quietPeriod",
       "5m",
       {{"0s", "0"}, {"90s", "1m30s"}, {"24h", "24h"}},
       {"-1s", "soon", "inf", "+inf", "nan", "24h0m1s", "1000000h"}},
      {"health.kmsg", "true", {{"false", "false"}}, {"no way"}},
      {"health.xidHistoryFile",
       "/var/lib/gpulet/xid-history.json",
       {{"", ""}, {"/data/xids.json", "/data/xids.json"}},
       {"relative/xids.json", "/var/lib/gpulet/"}},
      {"health.recorder.window",
       "30m",
       {{"0", "0"}, {"1h", "1h"}, {"24h", "24h"}},
       {"-1s", "25h", "forever", ""}},
      {"health.recorder.dir",
       "/var/lib/gpulet/recorder",
       {{"", ""}, {"/data/recorder", "/data/recorder"}},
       {"relative/recorder"}},
      {"health.retire.mode", "dry-run", {{"off", "off"}, {"on", "on"}}, {"yes", "true", "dryrun"}},
      {"health.retire.faults", "3", {{"2", "2"}, {"8", "8"}}, {"1", "9", "three"}},
      {"health.retire.window", "168h", {{"1h", "1h"}, {"2160h", "2160h"}}, {"59m", "2161h"}},
      {"health.retire.file",
       "/var/lib/gpulet/retired.json",
       {{"/data/retired.json", "/data/retired.json"}},
       {"", "relative.json", "/var/lib/gpulet/"}},
      {"health.evict.mode", "dry-run", {{"off", "off"}, {"on", "on"}}, {"yes", "true", "evict"}},
      {"health.evict.grace", "2m", {{"0s", "0"}, {"1h", "1h"}}, {"-1s", "61m", "soon"}},
      {"health.evict.maxPerHour", "10", {{"1", "1"}, {"100", "100"}}, {"0", "101", "ten"}},
      {"health.reset.mode", "dry-run", {{"on", "on"}, {"off", "off"}}, {"yes", "true", "reset"}},
      {"health.reset.maxPerDay", "3", {{"1", "1"}, {"10", "10"}}, {"0", "11", "3.5"}},
      {"health.reboot.mode", "dry-run", {{"on", "on"}, {"off", "off"}}, {"yes", "reboot"}},
      {"health.reboot.grace", "10m", {{"0s", "0"}, {"24h", "24h"}}, {"-1s", "25h", "soon"}},
      {"health.reboot.maxPerWindow", "1", {{"1", "1"}, {"10", "10"}}, {"0", "11"}},
      {"health.reboot.window", "24h", {{"1h", "1h"}, {"720h", "720h"}}, {"59m", "721h"}},
      {"health.reboot.file",
       "/var/lib/gpulet/reboots.json",
       {{"/data/reboots.json", "/data/reboots.json"}},
       {"", "reboots.json", "/var/lib/gpulet/"}},
      {"health.reboot.sentinel",
       "/var/run/reboot-required",
       {{"/run/reboot-required", "/run/reboot-required"}},
       {"", "reboot-required"}},
      {"health.reboot.via", "auto", {{"kured", "kured"}, {"talos", "talos"}}, {"", "Talos", "ssh"}},
      {"health.reboot.talosconfig",
       "/var/run/secrets/talos.dev/config",
       {{"/etc/talos/config", "/etc/talos/config"}},
       {"", "config", "/var/run/secrets/talos.dev/"}},
      {"health.reboot.talosEndpoint",
       "",
       {{"10.5.0.2:50000", "10.5.0.2:50000"}, {"[fd00::2]:50000", "[fd00::2]:50000"}, {"", ""}},
       {"talos.default", ":50000", "talos.default:0", "talos.default:65536", "https://t:1"}},
      {"health.reboot.drainTimeout", "15m", {{"1m", "1m"}, {"24h", "24h"}}, {"59s", "25h", "x"}},
      {"cluster.enabled", "false", {{"true", "true"}}, {"yes please"}},
      {"cluster.kubeconfig",
       "",
       {{"/etc/gpulet/kubeconfig", "/etc/gpulet/kubeconfig"}, {"", ""}},
       {"kubeconfig", "/etc/gpulet/"}},
      {"cluster.heartbeat",
       "1m",
       {{"10s", "10s"}, {"1h", "1h"}},
       {"9s", "0", "2h", "inf", "nan", "often"}},
      {"cluster.events", "true", {{"false", "false"}}, {"maybe"}},
      {"cluster.nodeLabels", "false", {{"true", "true"}}, {"1.5"}},
      {"cluster.taint.enabled", "false", {{"true", "true"}}, {"on-ish"}},
      {"cluster.taint.effect",
       "NoSchedule",
       {{"NoExecute", "NoExecute"}, {"PreferNoSchedule", "PreferNoSchedule"}},
       {"noschedule", "Drain", ""}},
      {"cluster.taint.share",
       "1",
       {{"0.5", "0.5"}, {"0.01", "0.01"}, {"1", "1"}},
       {"0", "1.01", "-0.5", "nan", "inf", "half"}},
      {"dra.enabled", "false", {{"true", "true"}}, {"dra"}},
      {"dra.driverName",
       "gpu.gpulet.dev",
       {{"gpu.example.com", "gpu.example.com"}},
       {"GPU.example.com", "gpu..dev", "-gpu.dev", "a/b", "", std::string(64, 'a')}},
      {"dra.gpus",
       "all",
       {{"0", "0"}, {"1, GPU-8a41", "1,GPU-8a41"}, {"all", "all"}},
       {"first", "-1", "all,0", "0,0", "gpu-1"}},
      {"dra.memoryShares.enabled", "false", {{"true", "true"}}, {"shared"}},
      {"dra.memoryShares.stepMiB",
       "1024",
       {{"128", "128"}, {"1048576", "1048576"}},
       {"127", "1048577", "1GiB", "", "-1"}},
      {"dra.noExecuteOnFatal", "false", {{"true", "true"}}, {"evict"}},
      {"dra.checkpointFile",
       "/var/lib/gpulet/dra-checkpoint.json",
       {{"/data/dra.json", "/data/dra.json"}},
       {"", "relative.json", "/var/lib/gpulet/"}},
      {"dra.rollingUpdate", "false", {{"true", "true"}}, {"surge"}},
  };
  return *kCases;
}

// The table covers exactly the keys the config has: a new key needs its row.
TEST(ConfigKeysTest, TableCoversEveryKey) {
  std::vector<std::string> table;
  for (const KeyCase& c : KeyCases()) table.push_back(c.key);
  EXPECT_EQ(table, ConfigKeys());
}

TEST(ConfigKeysTest, Defaults) {
  absl::StatusOr<Config> defaults = ParseConfig("", "test", {});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  YAML::Node built = Printed(Config());
  YAML::Node parsed = Printed(*defaults);
  for (const KeyCase& c : KeyCases()) {
    EXPECT_EQ(ValueOf(built, c.key), c.default_value) << c.key;
    EXPECT_EQ(ValueOf(parsed, c.key), c.default_value) << c.key;
  }
}

TEST(ConfigKeysTest, AcceptedValuesFromFlagsAndFile) {
  for (const KeyCase& c : KeyCases()) {
    for (const Accepted& a : c.accepted) {
      std::string what = c.key + "='" + a.value + "'";
      absl::StatusOr<Config> by_flag = ParseConfig("", "test", {{c.key, a.value}});
      ASSERT_TRUE(by_flag.ok()) << what << ": " << by_flag.status();
      EXPECT_EQ(ValueOf(*by_flag, c.key), a.effective) << what;
      absl::StatusOr<Config> by_file = ParseConfig(FileWith(c.key, a.value), "test.yaml", {});
      ASSERT_TRUE(by_file.ok()) << what << ": " << by_file.status() << "\n"
                                << FileWith(c.key, a.value);
      EXPECT_EQ(ValueOf(*by_file, c.key), a.effective) << what;
      // Nothing else moved.
      YAML::Node printed = Printed(*by_flag);
      for (const KeyCase& other : KeyCases()) {
        if (other.key != c.key) {
          EXPECT_EQ(ValueOf(printed, other.key), other.default_value)
              << what << " moved " << other.key;
        }
      }
    }
  }
}

TEST(ConfigKeysTest, RejectedValuesNameTheKeyFromFlagsAndFile) {
  for (const KeyCase& c : KeyCases()) {
    for (const std::string& value : c.rejected) {
      std::string what = c.key + "='" + value + "'";
      absl::StatusOr<Config> by_flag = ParseConfig("", "test", {{c.key, value}});
      ASSERT_FALSE(by_flag.ok()) << what;
      EXPECT_EQ(by_flag.status().code(), absl::StatusCode::kInvalidArgument) << what;
      EXPECT_THAT(std::string(by_flag.status().message()), HasSubstr(c.key)) << what;
      absl::StatusOr<Config> by_file = ParseConfig(FileWith(c.key, value), "test.yaml", {});
      ASSERT_FALSE(by_file.ok()) << what;
      EXPECT_THAT(std::string(by_file.status().message()), HasSubstr(c.key)) << what;
    }
  }
}

TEST(ConfigKeysTest, RejectionsSayWhatIsAllowed) {
  absl::StatusOr<Config> c = ParseConfig("", "test", {{"plugin.deviceIdStrategy", "serial"}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "'serial' is not a valid value for plugin.deviceIdStrategy (allowed: uuid or index)");
  c = ParseConfig("", "test", {{"sharing.timeSlicing.replicas", "65"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("an integer from 1 to 64"));
  // In a file, the message starts with where: the file and the line.
  c = ParseConfig("version: v1\nplugin:\n  deviceIdStrategy: serial\n", "gpulet.yaml", {});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("gpulet.yaml:3: 'serial'"));
}

TEST(ConfigTest, CrossKeyRules) {
  absl::StatusOr<Config> c = ParseConfig("", "test",
                                         {{"sharing.memorySlices.enabled", "true"},
                                          {"sharing.memorySlices.resourceName", "nvidia.com/gpu"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("sharing.memorySlices.resourceName must differ from resourceName"));
  // Only while slicing is on.
  c = ParseConfig("", "test", {{"sharing.memorySlices.resourceName", "nvidia.com/gpu"}});
  EXPECT_TRUE(c.ok()) << c.status();
  c = ParseConfig("", "test", {{"plugin.deviceListStrategy", "cdi-cri,envvar,cdi-cri"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("lists a strategy twice"));
}

// --- precedence, unknown keys, files --------------------------------------------------

// Flags and environment variables arrive merged (flag over env: the CLI's job, checked end
// to end by PluginIntegrationTest.PrintConfigShowsPrecedenceFlagOverEnvOverFile); here the
// merged overrides beat the file, and the file beats the defaults.
TEST(ConfigTest, OverridesBeatTheFileWhichBeatsDefaults) {
  const std::string file =
      "version: v1\nresourceName: example.com/file\nsharing:\n  timeSlicing:\n"
      "    replicas: 3\nhealth:\n  kmsg: false\n";
  absl::StatusOr<Config> c =
      ParseConfig(file, "test", {{"resourceName", "example.com/flag"}, {"health.kmsg", "true"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->resource_name, "example.com/flag");  // override over file
  EXPECT_TRUE(c->health.kmsg);                      // override over file
  EXPECT_EQ(c->sharing.time_slicing.replicas, 3);   // file over default
  EXPECT_EQ(c->metrics.address, ":9400");           // default
  // Bad input never half-applies: a bad override fails the whole load, and so does a bad
  // file value even when an override would have replaced it.
  c = ParseConfig(file, "test", {{"sharing.timeSlicing.replicas", "0"}});
  EXPECT_FALSE(c.ok());
  c = ParseConfig("version: v1\nsharing:\n  timeSlicing:\n    replicas: 0\n", "test",
                  {{"sharing.timeSlicing.replicas", "2"}});
  EXPECT_FALSE(c.ok());
}

TEST(ConfigTest, UnknownKeysAreRejectedWithWhatIsAllowed) {
  struct Case {
    std::string yaml;
    std::vector<std::string> message_has;
  };
  const Case kCases[] = {
      {"version: v1\nkubeletdir: /k\n",
       {"test.yaml:2", "unknown key 'kubeletdir'", "Allowed here:", "kubeletDir",
        "--print-config"}},
      {"version: v1\nplugin:\n  deviceListStrateg: envvar\n",
       {"test.yaml:3", "unknown key 'plugin.deviceListStrateg'", "deviceListStrategy"}},
      {"version: v1\nsharing:\n  timeSlicing:\n    replica: 2\n",
       {"'sharing.timeSlicing.replica'", "replicas", "renameByDefault"}},
      {"version: v1\nhealth:\n  kmsg:\n    enabled: true\n",
       {"test.yaml:3", "health.kmsg must be true or false (a single value), not a mapping"}},
      {"version: v2\n", {"'version' must be v1 (found 'v2')"}},
      {"kubeletDir: /k\n", {"'version' must be v1 (found '')"}},
      {"- a\n- b\n", {"must be a YAML mapping"}},
      {"version: v1\nplugin: [\n", {"test.yaml:", "not valid YAML"}},
  };
  for (const Case& c : kCases) {
    absl::StatusOr<Config> parsed = ParseConfig(c.yaml, "test.yaml", {});
    ASSERT_FALSE(parsed.ok()) << c.yaml;
    for (const std::string& part : c.message_has) {
      EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(part)) << c.yaml;
    }
  }
  absl::StatusOr<Config> flag = ParseConfig("", "test", {{"plugin.nope", "x"}});
  ASSERT_FALSE(flag.ok());
  EXPECT_THAT(std::string(flag.status().message()), HasSubstr("unknown setting 'plugin.nope'"));
  // A section name is not a setting.
  flag = ParseConfig("", "test", {{"plugin", "x"}});
  EXPECT_FALSE(flag.ok());
}

TEST(ConfigTest, EmptyFilesAndMissingFiles) {
  for (const char* empty : {"", "# only a comment\n", "~\n"}) {
    absl::StatusOr<Config> c = ParseConfig(empty, "test", {});
    ASSERT_TRUE(c.ok()) << empty << ": " << c.status();
    EXPECT_EQ(ConfigToYaml(*c), ConfigToYaml(Config()));
  }
  absl::StatusOr<Config> none = LoadConfig("", {});
  ASSERT_TRUE(none.ok()) << none.status();
  absl::StatusOr<Config> missing = LoadConfig("/nonexistent/gpulet.yaml", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/gpulet.yaml"));
}

// What --print-config writes reads back as the same configuration.
TEST(ConfigTest, PrintedConfigRoundTrips) {
  absl::StatusOr<Config> c = ParseConfig("", "test",
                                         {{"plugin.deviceListStrategy", "cdi-cri,envvar"},
                                          {"health.applicationXids", "13"},
                                          {"health.quietPeriod", "90s"},
                                          {"sharing.memorySlices.enabled", "true"},
                                          {"cdi.specDir", ""}});
  ASSERT_TRUE(c.ok()) << c.status();
  std::string printed = ConfigToYaml(*c);
  absl::StatusOr<Config> back = ParseConfig(printed, "printed", {});
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << printed;
  EXPECT_EQ(ConfigToYaml(*back), printed);
  EXPECT_EQ(back->health.quiet_period, absl::Seconds(90));
  EXPECT_EQ(back->health.application_xids, std::vector<int>{13});
}

TEST(ConfigTest, DurationsAcceptGoSyntax) {
  struct Case {
    const char* text;
    absl::Duration want;
  };
  for (const Case& c : {Case{"1s", absl::Seconds(1)}, Case{"250ms", absl::Milliseconds(250)},
                        Case{"1.5s", absl::Milliseconds(1500)}, Case{"1m30s", absl::Seconds(90)},
                        Case{"2h", absl::Hours(2)}, Case{"1500000us", absl::Milliseconds(1500)}}) {
    absl::StatusOr<Config> cfg = ParseConfig("", "test", {{"health.quietPeriod", c.text}});
    ASSERT_TRUE(cfg.ok()) << c.text << ": " << cfg.status();
    EXPECT_EQ(cfg->health.quiet_period, c.want) << c.text;
  }
}

// --- hostile files: every broken kind is an error naming where, the key and the fix ------

TEST(ConfigHardeningTest, EveryBrokenKindIsAnErrorNamingTheKey) {
  struct Case {
    const char* what;
    std::string yaml;
    std::vector<std::string> message_has;
  };
  const Case kCases[] = {
      {"list version", "version: [v1]\n", {"test.yaml", "'version' must be v1", "a list '[v1]'"}},
      {"map version", "version: {v: 1}\n", {"'version' must be v1", "a mapping"}},
      {"number version", "version: 1\n", {"'version' must be v1 (found '1')"}},
      {"null version", "version:\nkubeletDir: /k\n", {"'version' must be v1"}},
      {"list for a scalar",
       "version: v1\nkubeletDir: [/a, /b]\n",
       {"test.yaml:2", "kubeletDir must be an absolute path (a single value), not a list",
        "[/a, /b]"}},
      {"map for a scalar",
       "version: v1\nresourceName: {a: b}\n",
       {"test.yaml:2", "resourceName must be", "not a mapping"}},
      {"map for a duration",
       "version: v1\nhealth:\n  probeInterval: {s: 1}\n",
       {"test.yaml:3", "health.probeInterval must be a duration from 100ms to 1h", "a mapping"}},
      {"list for a number",
       "version: v1\nsharing:\n  timeSlicing:\n    replicas: [2]\n",
       {"test.yaml:4", "sharing.timeSlicing.replicas must be an integer from 1 to 64", "a list"}},
      {"map for a list",
       "version: v1\nplugin:\n  deviceListStrategy: {envvar: true}\n",
       {"plugin.deviceListStrategy", "one value or a list of values", "not a mapping"}},
      {"nested list in a list",
       "version: v1\nplugin:\n  deviceListStrategy: [envvar, [cdi-cri]]\n",
       {"plugin.deviceListStrategy: list item '[cdi-cri]' is a list"}},
      {"map in a list",
       "version: v1\nhealth:\n  applicationXids: [13, {a: 1}]\n",
       {"health.applicationXids: list item", "is a mapping"}},
      {"commas inside one list item",
       "version: v1\nhealth:\n  applicationXids: ['13,43']\n",
       {"health.applicationXids: list item '13,43' is several values"}},
      {"scalar for a section",
       "version: v1\nplugin: envvar\n",
       {"test.yaml:2", "plugin is a section and must be a mapping of its keys",
        "deviceListStrategy"}},
      {"list for a section", "version: v1\nsharing: [a]\n", {"sharing is a section", "not a list"}},
      {"unknown key", "version: v1\nkubeletDirectory: /k\n", {"unknown key 'kubeletDirectory'"}},
      {"unknown nested key",
       "version: v1\nmetrics:\n  sampleRate: 1s\n",
       {"test.yaml:3", "unknown key 'metrics.sampleRate'", "sampleInterval"}},
      {"duplicate key",
       "version: v1\nkubeletDir: /a\nkubeletDir: /b\n",
       {"test.yaml:3", "duplicate key 'kubeletDir'", "keep only one"}},
      {"duplicate nested key",
       "version: v1\nhealth:\n  kmsg: true\n  kmsg: false\n",
       {"test.yaml:4", "duplicate key 'health.kmsg'"}},
      {"duplicate section",
       "version: v1\nhealth:\n  kmsg: true\nhealth:\n  probeInterval: 2s\n",
       {"test.yaml:4", "duplicate key 'health'"}},
      {"duplicate version", "version: v1\nversion: v1\n", {"duplicate key 'version'"}},
      {"a list as a key", "version: v1\n[a, b]: c\n", {"test.yaml:2", "is a list", "plain names"}},
      {"inf duration",
       "version: v1\nhealth:\n  probeInterval: inf\n",
       {"'inf' is not a valid value for health.probeInterval", "from 100ms to 1h"}},
      {"nan duration",
       "version: v1\nmetrics:\n  sampleInterval: nan\n",
       {"'nan' is not a valid value for metrics.sampleInterval"}},
      {"negative duration",
       "version: v1\nhealth:\n  quietPeriod: -5m\n",
       {"health.quietPeriod", "from 0 to 24h"}},
      {"too long a duration",
       "version: v1\nhealth:\n  hangTimeout: 1h\n",
       {"health.hangTimeout", "from 100ms to 10s"}},
      {"too short a duration",
       "version: v1\nmetrics:\n  podResourcesInterval: 10ms\n",
       {"metrics.podResourcesInterval", "from 1s to 1h"}},
      {"number out of range",
       "version: v1\nsharing:\n  memorySlices:\n    sliceMiB: 99999999999\n",
       {"sharing.memorySlices.sliceMiB", "an integer from 128 to 1048576"}},
      {"float for an integer",
       "version: v1\nsharing:\n  timeSlicing:\n    replicas: 2.0\n",
       {"sharing.timeSlicing.replicas"}},
      {"a NUL in a value",
       "version: v1\nkubeletDir: \"/var/lib\\0/kubelet\"\n",
       {"kubeletDir", "control character"}},
      {"garbage", "\x01\x02\xff\xfe{{{[[[", {"test.yaml"}},
      {"deep nesting", std::string(5000, '[') + std::string(5000, ']'), {"test.yaml"}},
  };
  for (const Case& c : kCases) {
    absl::StatusOr<Config> parsed = ParseConfig(c.yaml, "test.yaml", {});
    ASSERT_FALSE(parsed.ok()) << c.what;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    for (const std::string& part : c.message_has) {
      EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(part)) << c.what;
    }
  }
}

// Lists are accepted in both forms; an empty section keeps its defaults.
TEST(ConfigHardeningTest, ListsAndEmptySectionsStillWork) {
  absl::StatusOr<Config> c = ParseConfig(
      "version: v1\nplugin:\n  deviceListStrategy: [envvar, cdi-cri]\nhealth:\n"
      "  applicationXids: 13, 43\nsharing:\n",
      "test.yaml", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->plugin.device_list_strategy.size(), 2u);
  EXPECT_EQ(c->health.application_xids, (std::vector<int>{13, 43}));
}

// Flags and environment variables take the same path as the file.
TEST(ConfigHardeningTest, OverridesAreValidatedTheSameWay) {
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"health.probeInterval", "inf"},
                                                        {"health.quietPeriod", "nan"},
                                                        {"metrics.sampleInterval", "0"},
                                                        {"health.hangTimeout", "1h"},
                                                        {"kubeletDir", std::string("/a\nb")}}) {
    absl::StatusOr<Config> c = ParseConfig("", "test", {{key, value}});
    ASSERT_FALSE(c.ok()) << key << "=" << value;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(key));
  }
}

// A config path that is not a small regular file is refused at once, naming its kind.
TEST(ConfigHardeningTest, LoadConfigRefusesWhatIsNotARegularFile) {
  std::string dir = ::testing::TempDir() + "/gpulet-config-kinds-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/a-directory");
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0600), 0);
  std::ofstream(dir + "/huge") << "version: v1\n" << std::string(2 << 20, '#');
  const std::pair<std::string, std::string> kCases[] = {
      {dir + "/a-directory", "is a directory"},
      {dir + "/fifo", "is a FIFO"},
      {"/dev/zero", "is a character device"},
      {dir + "/huge", "more than the limit of 1048576 bytes"},
  };
  for (const auto& [path, message] : kCases) {
    absl::StatusOr<Config> c = LoadConfig(path, {});
    ASSERT_FALSE(c.ok()) << path;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(message)) << path;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("config file " + path)) << path;
  }
  std::filesystem::remove_all(dir);
}

// Every duration's bounds are in README's config section, as the error message says them.
TEST(ConfigDocsTest, ReadmeSaysEveryBound) {
  std::ifstream in(std::string(GPULET_SOURCE_DIR) + "/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  for (const char* key :
       {"metrics.sampleInterval", "metrics.podResourcesInterval", "health.probeInterval",
        "health.hangTimeout", "health.quietPeriod", "sharing.memorySlices.overQuota.grace"}) {
    absl::StatusOr<Config> c = ParseConfig("", "test", {{key, "inf"}});
    ASSERT_FALSE(c.ok());
    std::string message(c.status().message());
    size_t from = message.find("a duration from ");
    ASSERT_NE(from, std::string::npos) << message;
    std::string bounds = message.substr(from + 16, message.find(',', from) - from - 16);
    EXPECT_THAT(readme, HasSubstr("`" + std::string(key) + "` | " + bounds))
        << "README's bounds table lacks " << key << " " << bounds;
  }
}

}  // namespace
}  // namespace gpulet::config

namespace gpulet::config {
namespace {

// Which GPUs' containers get VRAM quotas: DRA's memory shares where DRA offers the GPU,
// memory slices where the device plugin serves it as slices, never a MIG GPU's slices.
TEST(ConfigTest, QuotasOnFollowsWhoServesTheGpu) {
  Config c;
  EXPECT_FALSE(c.QuotasOn(0, "GPU-a", false));
  c.sharing.memory_slices.enabled = true;
  c.sharing.memory_slices.gpus = {"1"};
  EXPECT_FALSE(c.QuotasOn(0, "GPU-a", false));
  EXPECT_TRUE(c.QuotasOn(1, "GPU-b", false));
  EXPECT_TRUE(c.QuotasOn(1, "GPU-b", true));  // MIG strategy none: served whole, as slices
  c.plugin.mig_strategy = MigStrategy::kMixed;
  EXPECT_FALSE(c.QuotasOn(1, "GPU-b", true));
  c.dra.enabled = true;
  c.dra.gpus = {"1"};
  EXPECT_FALSE(c.QuotasOn(1, "GPU-b", false));  // DRA's, without memory shares
  c.dra.memory_shares.enabled = true;
  EXPECT_TRUE(c.QuotasOn(1, "GPU-b", false));
}

TEST(DraConfigTest, KeysParseAndTheSplitFollowsThem) {
  absl::StatusOr<Config> c = ParseConfig(
      "version: v1\ndra:\n  enabled: true\n  driverName: gpu.example.com\n  gpus: [1, GPU-x]\n"
      "  memoryShares: {enabled: true, stepMiB: 512}\n  noExecuteOnFatal: true\n",
      "t", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dra.driver_name, "gpu.example.com");
  EXPECT_EQ(c->dra.gpus, (std::vector<std::string>{"1", "GPU-x"}));
  EXPECT_EQ(c->dra.memory_shares.step_mib, 512);
  EXPECT_TRUE(c->dra.no_execute_on_fatal);
  EXPECT_TRUE(c->DraOffers(1, "GPU-q"));
  EXPECT_TRUE(c->DraOffers(0, "GPU-x"));
  EXPECT_FALSE(c->DraOffers(0, "GPU-q"));
  // Off by default, and "all" when on.
  Config d;
  EXPECT_FALSE(d.DraOffers(0, "GPU-a"));
  d.dra.enabled = true;
  EXPECT_TRUE(d.DraOffers(7, "GPU-a"));
}

TEST(DraConfigTest, BadValuesNameTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"dra.driverName", "Gpu.Example"},
      {"dra.driverName", "../x"},
      {"dra.gpus", "all,0"},
      {"dra.gpus", "0,0"},
      {"dra.gpus", "first"},
      {"dra.memoryShares.stepMiB", "64"},
      {"dra.checkpointFile", "relative"},
      {"dra.checkpointFile", ""},
  };
  for (const auto& [key, value] : cases) {
    absl::StatusOr<Config> c = ParseConfig("", "t", {{key, value}});
    ASSERT_FALSE(c.ok()) << key << "=" << value;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(key)) << c.status();
  }
  absl::StatusOr<Config> empty =
      ParseConfig("version: v1\ndra: {enabled: true, gpus: []}\n", "t", {});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("dra.gpus is empty"));
}

}  // namespace
}  // namespace gpulet::config
