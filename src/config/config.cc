#include "config/config.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <functional>
#include <set>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/k8s_names.h"
#include "common/read_file.h"
#include "gpu/gpu_list.h"
#include "yaml-cpp/yaml.h"
#include "yaml/kind.h"
#include "yaml/reader.h"

namespace gpulet::config {

const char* MigStrategyName(MigStrategy strategy) {
  switch (strategy) {
    case MigStrategy::kNone:
      return "none";
    case MigStrategy::kSingle:
      return "single";
    case MigStrategy::kMixed:
      return "mixed";
  }
  return "none";
}

const char* RemediationModeName(RemediationMode mode) {
  switch (mode) {
    case RemediationMode::kOff:
      return "off";
    case RemediationMode::kDryRun:
      return "dry-run";
    case RemediationMode::kOn:
      return "on";
  }
  return "?";
}

const char* OverQuotaActionName(OverQuotaAction action) {
  return action == OverQuotaAction::kKill ? "kill" : "event";
}

namespace {

using Setter = std::function<absl::Status(Config&, const std::string&)>;
using Getter = std::function<YAML::Node(const Config&)>;

// What YAML node a key takes: a scalar only, or a scalar (comma-separated, as its flag) or a
// list of scalars.
enum class Shape { kScalar, kList };

struct Field {
  const char* key;      // dotted path
  std::string allowed;  // what values are accepted, for messages
  Setter set;
  Getter get;
  Shape shape = Shape::kScalar;
};

absl::Status Bad(const std::string& key, const std::string& value, const char* allowed) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", value, "' is not a valid value for ", key, " (allowed: ", allowed, ")"));
}

// "all", or GPU indexes and UUIDs, each once (dra.gpus, sharing.memorySlices.gpus).
absl::Status ParseGpuList(const std::string& key, const std::string& v,
                          std::vector<std::string>* gpus) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
    std::string item(absl::StripAsciiWhitespace(part));
    int index = 0;
    const bool is_index = absl::SimpleAtoi(item, &index) && index >= 0 && index < 1024;
    if (item != "all" && !is_index && !absl::StartsWith(item, "GPU-")) {
      return Bad(key, item, "all, or GPU indexes (0, 1) and UUIDs (GPU-...)");
    }
    if (std::find(out.begin(), out.end(), item) != out.end()) {
      return Bad(key, v, "each GPU once");
    }
    out.push_back(item);
  }
  if (std::find(out.begin(), out.end(), "all") != out.end() && out.size() > 1) {
    return Bad(key, v, "all alone, or a list of GPU indexes and UUIDs");
  }
  *gpus = out;
  return absl::OkStatus();
}

YAML::Node GpuListNode(const std::vector<std::string>& gpus) {
  YAML::Node n(YAML::NodeType::Sequence);
  for (const std::string& g : gpus) n.push_back(g);
  return n;
}

absl::Status ParseBool(const std::string& key, const std::string& v, bool* out) {
  std::string s = absl::AsciiStrToLower(v);
  if (s == "true" || s == "1" || s == "yes" || s == "on") {
    *out = true;
  } else if (s == "false" || s == "0" || s == "no" || s == "off") {
    *out = false;
  } else {
    return Bad(key, v, "true or false");
  }
  return absl::OkStatus();
}

absl::Status ParseInt(const std::string& key, const std::string& v, int lo, int hi, int* out) {
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < lo || n > hi) {
    return Bad(key, v, absl::StrCat("an integer from ", lo, " to ", hi).c_str());
  }
  *out = n;
  return absl::OkStatus();
}

// A remediation rung's mode: off, dry-run or on.
// An absolute path of a file (a host path gpulet keeps a file at).
absl::Status ParseFilePath(const std::string& key, const std::string& v, std::string* out) {
  if (v.empty() || v[0] != '/' || v.back() == '/') return Bad(key, v, "an absolute path of a file");
  *out = v;
  return absl::OkStatus();
}

absl::Status ParseMode(const std::string& key, const std::string& v, RemediationMode* out) {
  for (RemediationMode m :
       {RemediationMode::kOff, RemediationMode::kDryRun, RemediationMode::kOn}) {
    if (v == RemediationModeName(m)) {
      *out = m;
      return absl::OkStatus();
    }
  }
  return Bad(key, v, "off, dry-run or on");
}

// The bounds of every duration key, in one table (README's config section says the same;
// ConfigDocsTest.ReadmeSaysEveryBound checks it). A zero or huge interval would busy-loop
// or silently switch a check off, so every duration has a floor and a ceiling.
struct DurationBounds {
  const char* key;
  absl::Duration min, max;
};
constexpr DurationBounds kDurationBounds[] = {
    {"metrics.sampleInterval", absl::Milliseconds(100), absl::Hours(1)},
    {"metrics.podResourcesInterval", absl::Seconds(1), absl::Hours(1)},
    {"health.probeInterval", absl::Milliseconds(100), absl::Hours(1)},
    {"health.hangTimeout", absl::Milliseconds(100), absl::Seconds(10)},
    {"health.quietPeriod", absl::ZeroDuration(), absl::Hours(24)},
    {"cluster.heartbeat", absl::Seconds(10), absl::Hours(1)},
    {"sharing.memorySlices.overQuota.grace", absl::ZeroDuration(), absl::Hours(1)},
    {"health.recorder.window", absl::ZeroDuration(), absl::Hours(24)},
    {"health.retire.window", absl::Hours(1), absl::Hours(24 * 90)},
    {"health.evict.grace", absl::ZeroDuration(), absl::Hours(1)},
    {"health.reboot.grace", absl::ZeroDuration(), absl::Hours(24)},
    {"health.reboot.window", absl::Hours(1), absl::Hours(24 * 30)},
    {"health.reboot.drainTimeout", absl::Minutes(1), absl::Hours(24)},
};

const DurationBounds& BoundsOf(const char* key) {
  for (const DurationBounds& b : kDurationBounds) {
    if (std::string_view(b.key) == key) return b;
  }
  std::abort();  // a duration field without its row: a programming error caught by every test
}

std::string DurationAllowed(const DurationBounds& b) {
  return absl::StrCat("a duration from ", absl::FormatDuration(b.min), " to ",
                      absl::FormatDuration(b.max), ", such as 1s, 500ms or 1m30s");
}

// Strict: a finite duration (no inf, no nan) within the key's bounds.
absl::Status ParseDur(const std::string& key, const std::string& v, absl::Duration* out) {
  const DurationBounds& b = BoundsOf(key.c_str());
  absl::Duration d;
  if (!absl::ParseDuration(v, &d) || d == absl::InfiniteDuration() ||
      d == -absl::InfiniteDuration() || d < b.min || d > b.max) {
    return Bad(key, v, DurationAllowed(b).c_str());
  }
  *out = d;
  return absl::OkStatus();
}

// An extended resource name: "<domain>/<name>", not in kubernetes.io, DNS-ish characters.
bool ValidResourceName(const std::string& name) {
  std::pair<std::string, std::string> parts = absl::StrSplit(name, absl::MaxSplits('/', 1));
  if (parts.first.empty() || parts.second.empty() || name.size() > 253) return false;
  if (parts.first.find('.') == std::string::npos) return false;
  if (parts.first == "kubernetes.io" || absl::EndsWith(parts.first, ".kubernetes.io")) {
    return false;
  }
  for (char c : name) {
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '/' || c == '_')) return false;
  }
  return absl::ascii_isalnum(parts.second.front()) && absl::ascii_isalnum(parts.second.back());
}

constexpr const char* kStrategyNames[] = {"envvar", "volume-mounts", "cdi-annotations", "cdi-cri"};

YAML::Node Str(const std::string& s) { return YAML::Node(s); }

// A cdi.* path: absolute, or "" for the fallback `allowed` names.
Field CdiPath(const char* key, const char* allowed, std::string Config::Cdi::*member) {
  return {key, allowed,
          [key, allowed, member](Config& c, const std::string& v) {
            if (!v.empty() && v[0] != '/') return Bad(key, v, allowed);
            c.cdi.*member = v;
            return absl::OkStatus();
          },
          [member](const Config& c) { return Str(c.cdi.*member); }};
}

// A duration key; its bounds come from kDurationBounds.
template <typename Section>
Field Dur(const char* key, Section Config::*section, absl::Duration Section::*member) {
  return {
      key, DurationAllowed(BoundsOf(key)),
      [key, section, member](Config& c, const std::string& v) {
        return ParseDur(key, v, &(c.*section.*member));
      },
      [section, member](const Config& c) { return Str(absl::FormatDuration(c.*section.*member)); }};
}

const std::vector<Field>& Fields() {
  static const auto* kFields = new std::vector<Field>{
      {"kubeletDir", "an absolute path",
       [](Config& c, const std::string& v) {
         if (v.empty() || v[0] != '/') return Bad("kubeletDir", v, "an absolute path");
         c.kubelet_dir = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.kubelet_dir); }},
      {"resourceName", "an extended resource name such as nvidia.com/gpu",
       [](Config& c, const std::string& v) {
         if (!ValidResourceName(v)) {
           return Bad("resourceName", v, "an extended resource name such as nvidia.com/gpu");
         }
         c.resource_name = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.resource_name); }},
      {"plugin.deviceListStrategy",
       "one or more of envvar, volume-mounts, cdi-annotations, cdi-cri",
       [](Config& c, const std::string& v) {
         std::vector<DeviceListStrategy> out;
         for (absl::string_view part : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
           std::string name(absl::StripAsciiWhitespace(part));
           bool found = false;
           for (int i = 0; i < 4; ++i) {
             if (name == kStrategyNames[i]) {
               out.push_back(static_cast<DeviceListStrategy>(i));
               found = true;
             }
           }
           if (!found) {
             return Bad("plugin.deviceListStrategy", name,
                        "envvar, volume-mounts, cdi-annotations, cdi-cri");
           }
         }
         if (out.empty()) {
           return Bad("plugin.deviceListStrategy", v,
                      "one or more of envvar, volume-mounts, cdi-annotations, cdi-cri");
         }
         c.plugin.device_list_strategy = out;
         return absl::OkStatus();
       },
       [](const Config& c) {
         YAML::Node n(YAML::NodeType::Sequence);
         for (DeviceListStrategy s : c.plugin.device_list_strategy) {
           n.push_back(kStrategyNames[static_cast<int>(s)]);
         }
         return n;
       },
       Shape::kList},
      {"plugin.deviceIdStrategy", "uuid or index",
       [](Config& c, const std::string& v) {
         if (v == "uuid") {
           c.plugin.device_id_strategy = DeviceIdStrategy::kUuid;
         } else if (v == "index") {
           c.plugin.device_id_strategy = DeviceIdStrategy::kIndex;
         } else {
           return Bad("plugin.deviceIdStrategy", v, "uuid or index");
         }
         return absl::OkStatus();
       },
       [](const Config& c) {
         return Str(c.plugin.device_id_strategy == DeviceIdStrategy::kUuid ? "uuid" : "index");
       }},
      {"plugin.migStrategy", "none, single or mixed",
       [](Config& c, const std::string& v) {
         for (MigStrategy m : {MigStrategy::kNone, MigStrategy::kSingle, MigStrategy::kMixed}) {
           if (v == MigStrategyName(m)) {
             c.plugin.mig_strategy = m;
             return absl::OkStatus();
           }
         }
         return Bad("plugin.migStrategy", v, "none, single or mixed");
       },
       [](const Config& c) { return Str(MigStrategyName(c.plugin.mig_strategy)); }},
      {"plugin.passDeviceSpecs", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("plugin.passDeviceSpecs", v, &c.plugin.pass_device_specs);
       },
       [](const Config& c) { return YAML::Node(c.plugin.pass_device_specs); }},
      {"plugin.cdiKind", "a CDI kind vendor.com/class",
       [](Config& c, const std::string& v) {
         std::pair<std::string, std::string> p = absl::StrSplit(v, absl::MaxSplits('/', 1));
         if (p.first.find('.') == std::string::npos || p.second.empty()) {
           return Bad("plugin.cdiKind", v, "a CDI kind vendor.com/class, e.g. nvidia.com/gpu");
         }
         c.plugin.cdi_kind = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.plugin.cdi_kind); }},
      {"plugin.cdiAnnotationPrefix", "an annotation key prefix ending in /",
       [](Config& c, const std::string& v) {
         if (v.empty() || v.back() != '/') {
           return Bad("plugin.cdiAnnotationPrefix", v, "an annotation key prefix ending in /");
         }
         c.plugin.cdi_annotation_prefix = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.plugin.cdi_annotation_prefix); }},
      {"plugin.devRoot", "an absolute path",
       [](Config& c, const std::string& v) {
         if (v.empty() || v[0] != '/') return Bad("plugin.devRoot", v, "an absolute path");
         c.plugin.dev_root = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.plugin.dev_root); }},
      CdiPath("cdi.specDir", "an absolute host path (e.g. /var/run/cdi), or empty to write no spec",
              &Config::Cdi::spec_dir),
      CdiPath("cdi.driverRoot", "an absolute path, or empty for the host root",
              &Config::Cdi::driver_root),
      CdiPath("cdi.devRoot", "an absolute path, or empty for the host root",
              &Config::Cdi::dev_root),
      CdiPath("cdi.hookPath", "an absolute host path, or empty to find nvidia-cdi-hook",
              &Config::Cdi::hook_path),
      {"sharing.timeSlicing.replicas", "an integer from 1 to 64",
       [](Config& c, const std::string& v) {
         return ParseInt("sharing.timeSlicing.replicas", v, 1, 64,
                         &c.sharing.time_slicing.replicas);
       },
       [](const Config& c) { return YAML::Node(c.sharing.time_slicing.replicas); }},
      {"sharing.timeSlicing.renameByDefault", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("sharing.timeSlicing.renameByDefault", v,
                          &c.sharing.time_slicing.rename_by_default);
       },
       [](const Config& c) { return YAML::Node(c.sharing.time_slicing.rename_by_default); }},
      {"sharing.timeSlicing.failRequestsGreaterThanOne", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("sharing.timeSlicing.failRequestsGreaterThanOne", v,
                          &c.sharing.time_slicing.fail_requests_greater_than_one);
       },
       [](const Config& c) {
         return YAML::Node(c.sharing.time_slicing.fail_requests_greater_than_one);
       }},
      {"sharing.memorySlices.enabled", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("sharing.memorySlices.enabled", v, &c.sharing.memory_slices.enabled);
       },
       [](const Config& c) { return YAML::Node(c.sharing.memory_slices.enabled); }},
      {"sharing.memorySlices.sliceMiB", "an integer from 128 to 1048576",
       [](Config& c, const std::string& v) {
         return ParseInt("sharing.memorySlices.sliceMiB", v, 128, 1 << 20,
                         &c.sharing.memory_slices.slice_mib);
       },
       [](const Config& c) { return YAML::Node(c.sharing.memory_slices.slice_mib); }},
      {"sharing.memorySlices.resourceName", "an extended resource name",
       [](Config& c, const std::string& v) {
         if (!ValidResourceName(v)) {
           return Bad("sharing.memorySlices.resourceName", v,
                      "an extended resource name such as nvidia.com/gpu-memory");
         }
         c.sharing.memory_slices.resource_name = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.sharing.memory_slices.resource_name); }},
      {"sharing.memorySlices.enforce", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("sharing.memorySlices.enforce", v, &c.sharing.memory_slices.enforce);
       },
       [](const Config& c) { return YAML::Node(c.sharing.memory_slices.enforce); }},
      {"sharing.memorySlices.computeShare", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("sharing.memorySlices.computeShare", v,
                          &c.sharing.memory_slices.compute_share);
       },
       [](const Config& c) { return YAML::Node(c.sharing.memory_slices.compute_share); }},
      {"sharing.memorySlices.hostDir", "an absolute host path of a directory",
       [](Config& c, const std::string& v) {
         // Mounted into containers and written under --host-root: no way out of either.
         if (v.size() < 2 || v[0] != '/' || v.back() == '/' ||
             absl::StrContains(absl::StrCat(v, "/"), "/../") ||
             absl::StrContains(absl::StrCat(v, "/"), "/./") || absl::StrContains(v, "//")) {
           return Bad("sharing.memorySlices.hostDir", v,
                      "an absolute host path of a directory, without . or .. components");
         }
         c.sharing.memory_slices.host_dir = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.sharing.memory_slices.host_dir); }},
      {"sharing.memorySlices.gpus", "all, or GPU indexes and UUIDs",
       [](Config& c, const std::string& v) {
         return ParseGpuList("sharing.memorySlices.gpus", v, &c.sharing.memory_slices.gpus);
       },
       [](const Config& c) { return GpuListNode(c.sharing.memory_slices.gpus); }, Shape::kList},
      {"sharing.memorySlices.overQuota.action", "event or kill",
       [](Config& c, const std::string& v) {
         for (OverQuotaAction a : {OverQuotaAction::kEvent, OverQuotaAction::kKill}) {
           if (v == OverQuotaActionName(a)) {
             c.sharing.memory_slices.over_quota.action = a;
             return absl::OkStatus();
           }
         }
         return Bad("sharing.memorySlices.overQuota.action", v, "event or kill");
       },
       [](const Config& c) {
         return Str(OverQuotaActionName(c.sharing.memory_slices.over_quota.action));
       }},
      {"sharing.memorySlices.overQuota.marginMiB", "an integer from 0 to 1048576",
       [](Config& c, const std::string& v) {
         return ParseInt("sharing.memorySlices.overQuota.marginMiB", v, 0, 1 << 20,
                         &c.sharing.memory_slices.over_quota.margin_mib);
       },
       [](const Config& c) { return YAML::Node(c.sharing.memory_slices.over_quota.margin_mib); }},
      {"sharing.memorySlices.overQuota.grace",
       DurationAllowed(BoundsOf("sharing.memorySlices.overQuota.grace")),
       [](Config& c, const std::string& v) {
         return ParseDur("sharing.memorySlices.overQuota.grace", v,
                         &c.sharing.memory_slices.over_quota.grace);
       },
       [](const Config& c) {
         return Str(absl::FormatDuration(c.sharing.memory_slices.over_quota.grace));
       }},
      {"sharing.memorySlices.overQuota.maxKillsPerHour", "an integer from 1 to 3600",
       [](Config& c, const std::string& v) {
         return ParseInt("sharing.memorySlices.overQuota.maxKillsPerHour", v, 1, 3600,
                         &c.sharing.memory_slices.over_quota.max_kills_per_hour);
       },
       [](const Config& c) {
         return YAML::Node(c.sharing.memory_slices.over_quota.max_kills_per_hour);
       }},
      {"labels.featuresFile", "an absolute host path, or empty to write no labels",
       [](Config& c, const std::string& v) {
         if (!v.empty() && (v[0] != '/' || v.back() == '/')) {
           return Bad("labels.featuresFile", v, "an absolute host path of a file, or empty");
         }
         c.labels.features_file = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.labels.features_file); }},
      {"metrics.address", "host:port, :port, or empty to disable",
       [](Config& c, const std::string& v) {
         if (!v.empty() && v.rfind(':') == std::string::npos) {
           return Bad("metrics.address", v, "host:port or :port (e.g. :9400), or empty");
         }
         c.metrics.address = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.metrics.address); }},
      Dur("metrics.sampleInterval", &Config::metrics, &Config::Metrics::sample_interval),
      {"metrics.webConfigFile", "a path to a Prometheus web-config file",
       [](Config& c, const std::string& v) {
         c.metrics.web_config_file = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.metrics.web_config_file); }},
      {"metrics.podAttribution", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("metrics.podAttribution", v, &c.metrics.pod_attribution);
       },
       [](const Config& c) { return YAML::Node(c.metrics.pod_attribution); }},
      Dur("metrics.podResourcesInterval", &Config::metrics,
          &Config::Metrics::pod_resources_interval),
      Dur("health.probeInterval", &Config::health, &Config::Health::probe_interval),
      Dur("health.hangTimeout", &Config::health, &Config::Health::hang_timeout),
      {"health.applicationXids", "a list of XID numbers",
       [](Config& c, const std::string& v) {
         std::vector<int> out;
         for (absl::string_view part : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
           int n = 0;
           if (!absl::SimpleAtoi(part, &n) || n <= 0 || n > 1000) {
             return Bad("health.applicationXids", std::string(part), "XID numbers 1 to 1000");
           }
           out.push_back(n);
         }
         c.health.application_xids = out;
         return absl::OkStatus();
       },
       [](const Config& c) {
         YAML::Node n(YAML::NodeType::Sequence);
         for (int x : c.health.application_xids) n.push_back(x);
         return n;
       },
       Shape::kList},
      Dur("health.quietPeriod", &Config::health, &Config::Health::quiet_period),
      {"health.kmsg", "true or false",
       [](Config& c, const std::string& v) { return ParseBool("health.kmsg", v, &c.health.kmsg); },
       [](const Config& c) { return YAML::Node(c.health.kmsg); }},
      {"health.xidHistoryFile", "an absolute path, or empty for none",
       [](Config& c, const std::string& v) {
         if (!v.empty() && (v[0] != '/' || v.back() == '/')) {
           return Bad("health.xidHistoryFile", v, "an absolute path of a file, or empty for none");
         }
         c.health.xid_history_file = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.health.xid_history_file); }},
      {"health.recorder.window", DurationAllowed(BoundsOf("health.recorder.window")),
       [](Config& c, const std::string& v) {
         return ParseDur("health.recorder.window", v, &c.health.recorder.window);
       },
       [](const Config& c) { return Str(absl::FormatDuration(c.health.recorder.window)); }},
      {"health.recorder.dir", "an absolute path, or empty for none",
       [](Config& c, const std::string& v) {
         if (!v.empty() && v[0] != '/') {
           return Bad("health.recorder.dir", v,
                      "an absolute path of a directory, or empty for none");
         }
         c.health.recorder.dir = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.health.recorder.dir); }},
      {"health.retire.mode", "off, dry-run or on",
       [](Config& c, const std::string& v) {
         return ParseMode("health.retire.mode", v, &c.health.retire.mode);
       },
       [](const Config& c) { return Str(RemediationModeName(c.health.retire.mode)); }},
      {"health.retire.faults", "an integer from 2 to 8",
       [](Config& c, const std::string& v) {
         return ParseInt("health.retire.faults", v, 2, 8, &c.health.retire.faults);
       },
       [](const Config& c) { return YAML::Node(c.health.retire.faults); }},
      {"health.retire.window", DurationAllowed(BoundsOf("health.retire.window")),
       [](Config& c, const std::string& v) {
         return ParseDur("health.retire.window", v, &c.health.retire.window);
       },
       [](const Config& c) { return Str(absl::FormatDuration(c.health.retire.window)); }},
      {"health.retire.file", "an absolute path of a file",
       [](Config& c, const std::string& v) {
         return ParseFilePath("health.retire.file", v, &c.health.retire.file);
       },
       [](const Config& c) { return Str(c.health.retire.file); }},
      {"health.evict.mode", "off, dry-run or on",
       [](Config& c, const std::string& v) {
         return ParseMode("health.evict.mode", v, &c.health.evict.mode);
       },
       [](const Config& c) { return Str(RemediationModeName(c.health.evict.mode)); }},
      {"health.evict.grace", DurationAllowed(BoundsOf("health.evict.grace")),
       [](Config& c, const std::string& v) {
         return ParseDur("health.evict.grace", v, &c.health.evict.grace);
       },
       [](const Config& c) { return Str(absl::FormatDuration(c.health.evict.grace)); }},
      {"health.evict.maxPerHour", "an integer from 1 to 100",
       [](Config& c, const std::string& v) {
         return ParseInt("health.evict.maxPerHour", v, 1, 100, &c.health.evict.max_per_hour);
       },
       [](const Config& c) { return YAML::Node(c.health.evict.max_per_hour); }},
      {"health.reset.mode", "off, dry-run or on",
       [](Config& c, const std::string& v) {
         return ParseMode("health.reset.mode", v, &c.health.reset.mode);
       },
       [](const Config& c) { return Str(RemediationModeName(c.health.reset.mode)); }},
      {"health.reset.maxPerDay", "an integer from 1 to 10",
       [](Config& c, const std::string& v) {
         return ParseInt("health.reset.maxPerDay", v, 1, 10, &c.health.reset.max_per_day);
       },
       [](const Config& c) { return YAML::Node(c.health.reset.max_per_day); }},
      {"health.reboot.mode", "off, dry-run or on",
       [](Config& c, const std::string& v) {
         return ParseMode("health.reboot.mode", v, &c.health.reboot.mode);
       },
       [](const Config& c) { return Str(RemediationModeName(c.health.reboot.mode)); }},
      {"health.reboot.grace", DurationAllowed(BoundsOf("health.reboot.grace")),
       [](Config& c, const std::string& v) {
         return ParseDur("health.reboot.grace", v, &c.health.reboot.grace);
       },
       [](const Config& c) { return Str(absl::FormatDuration(c.health.reboot.grace)); }},
      {"health.reboot.maxPerWindow", "an integer from 1 to 10",
       [](Config& c, const std::string& v) {
         return ParseInt("health.reboot.maxPerWindow", v, 1, 10, &c.health.reboot.max_per_window);
       },
       [](const Config& c) { return YAML::Node(c.health.reboot.max_per_window); }},
      {"health.reboot.window", DurationAllowed(BoundsOf("health.reboot.window")),
       [](Config& c, const std::string& v) {
         return ParseDur("health.reboot.window", v, &c.health.reboot.window);
       },
       [](const Config& c) { return Str(absl::FormatDuration(c.health.reboot.window)); }},
      {"health.reboot.file", "an absolute path of a file",
       [](Config& c, const std::string& v) {
         return ParseFilePath("health.reboot.file", v, &c.health.reboot.file);
       },
       [](const Config& c) { return Str(c.health.reboot.file); }},
      {"health.reboot.sentinel", "an absolute path of a file",
       [](Config& c, const std::string& v) {
         return ParseFilePath("health.reboot.sentinel", v, &c.health.reboot.sentinel);
       },
       [](const Config& c) { return Str(c.health.reboot.sentinel); }},
      {"health.reboot.via", "auto, kured or talos",
       [](Config& c, const std::string& v) {
         if (v != "auto" && v != "kured" && v != "talos") {
           return Bad("health.reboot.via", v, "auto, kured or talos");
         }
         c.health.reboot.via = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.health.reboot.via); }},
      {"health.reboot.talosconfig", "an absolute path of a file",
       [](Config& c, const std::string& v) {
         return ParseFilePath("health.reboot.talosconfig", v, &c.health.reboot.talosconfig);
       },
       [](const Config& c) { return Str(c.health.reboot.talosconfig); }},
      {"health.reboot.talosEndpoint", "\"\" or host:port",
       [](Config& c, const std::string& v) {
         const size_t colon = v.rfind(':');
         int port = 0;
         if (!v.empty() && (colon == std::string::npos || colon == 0 ||
                            !absl::SimpleAtoi(v.substr(colon + 1), &port) || port < 1 ||
                            port > 65535 || v.find_first_of("/ @") != std::string::npos)) {
           return Bad("health.reboot.talosEndpoint", v, "\"\" or host:port");
         }
         c.health.reboot.talos_endpoint = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.health.reboot.talos_endpoint); }},
      {"health.reboot.drainTimeout", DurationAllowed(BoundsOf("health.reboot.drainTimeout")),
       [](Config& c, const std::string& v) {
         return ParseDur("health.reboot.drainTimeout", v, &c.health.reboot.drain_timeout);
       },
       [](const Config& c) { return Str(absl::FormatDuration(c.health.reboot.drain_timeout)); }},
      {"cluster.enabled", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("cluster.enabled", v, &c.cluster.enabled);
       },
       [](const Config& c) { return YAML::Node(c.cluster.enabled); }},
      {"cluster.kubeconfig", "an absolute path, or empty for the pod's service account",
       [](Config& c, const std::string& v) {
         if (!v.empty() && (v[0] != '/' || v.back() == '/')) {
           return Bad("cluster.kubeconfig", v,
                      "an absolute path of a kubeconfig file, or empty for the pod's service "
                      "account");
         }
         c.cluster.kubeconfig = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.cluster.kubeconfig); }},
      Dur("cluster.heartbeat", &Config::cluster, &Config::Cluster::heartbeat),
      {"cluster.events", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("cluster.events", v, &c.cluster.events);
       },
       [](const Config& c) { return YAML::Node(c.cluster.events); }},
      {"cluster.nodeLabels", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("cluster.nodeLabels", v, &c.cluster.node_labels);
       },
       [](const Config& c) { return YAML::Node(c.cluster.node_labels); }},
      {"cluster.taint.enabled", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("cluster.taint.enabled", v, &c.cluster.taint.enabled);
       },
       [](const Config& c) { return YAML::Node(c.cluster.taint.enabled); }},
      {"cluster.taint.effect", "NoSchedule, PreferNoSchedule or NoExecute",
       [](Config& c, const std::string& v) {
         if (v != "NoSchedule" && v != "PreferNoSchedule" && v != "NoExecute") {
           return Bad("cluster.taint.effect", v, "NoSchedule, PreferNoSchedule or NoExecute");
         }
         c.cluster.taint.effect = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.cluster.taint.effect); }},
      {"cluster.taint.share", "a number from 0.01 to 1",
       [](Config& c, const std::string& v) {
         double share = 0;
         if (!absl::SimpleAtod(v, &share) || !(share >= 0.01 && share <= 1.0)) {
           return Bad("cluster.taint.share", v,
                      "a number from 0.01 to 1: the share of the node's GPUs that must be out");
         }
         c.cluster.taint.share = share;
         return absl::OkStatus();
       },
       [](const Config& c) { return YAML::Node(c.cluster.taint.share); }},
      {"dra.enabled", "true or false",
       [](Config& c, const std::string& v) { return ParseBool("dra.enabled", v, &c.dra.enabled); },
       [](const Config& c) { return YAML::Node(c.dra.enabled); }},
      {"dra.driverName", "a DNS subdomain of at most 63 characters, such as gpu.gpulet.dev",
       [](Config& c, const std::string& v) {
         if (!IsDnsSubdomain(v, 63)) {
           return Bad("dra.driverName", v,
                      "a DNS subdomain of at most 63 lower-case letters, digits, '-' and '.', "
                      "such as gpu.gpulet.dev");
         }
         c.dra.driver_name = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.dra.driver_name); }},
      {"dra.gpus", "all, or GPU indexes and UUIDs",
       [](Config& c, const std::string& v) { return ParseGpuList("dra.gpus", v, &c.dra.gpus); },
       [](const Config& c) { return GpuListNode(c.dra.gpus); }, Shape::kList},
      {"dra.memoryShares.enabled", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("dra.memoryShares.enabled", v, &c.dra.memory_shares.enabled);
       },
       [](const Config& c) { return YAML::Node(c.dra.memory_shares.enabled); }},
      {"dra.memoryShares.stepMiB", "an integer from 128 to 1048576",
       [](Config& c, const std::string& v) {
         return ParseInt("dra.memoryShares.stepMiB", v, 128, 1 << 20,
                         &c.dra.memory_shares.step_mib);
       },
       [](const Config& c) { return YAML::Node(c.dra.memory_shares.step_mib); }},
      {"dra.noExecuteOnFatal", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("dra.noExecuteOnFatal", v, &c.dra.no_execute_on_fatal);
       },
       [](const Config& c) { return YAML::Node(c.dra.no_execute_on_fatal); }},
      {"dra.checkpointFile", "an absolute path of a file",
       [](Config& c, const std::string& v) {
         if (v.empty() || v[0] != '/' || v.back() == '/') {
           return Bad("dra.checkpointFile", v, "an absolute path of a file");
         }
         c.dra.checkpoint_file = v;
         return absl::OkStatus();
       },
       [](const Config& c) { return Str(c.dra.checkpoint_file); }},
      {"dra.rollingUpdate", "true or false",
       [](Config& c, const std::string& v) {
         return ParseBool("dra.rollingUpdate", v, &c.dra.rolling_update);
       },
       [](const Config& c) { return YAML::Node(c.dra.rolling_update); }},
  };
  return *kFields;
}

const Field* FindField(const std::string& key) {
  for (const Field& f : Fields()) {
    if (key == f.key) return &f;
  }
  return nullptr;
}

// The keys allowed directly under `prefix` ("" for the top level), for messages.
std::string AllowedUnder(const std::string& prefix) {
  std::set<std::string> names;
  if (prefix.empty()) names.insert("version");
  for (const Field& f : Fields()) {
    std::string key = f.key;
    if (!prefix.empty()) {
      if (key.rfind(prefix + ".", 0) != 0) continue;
      key = key.substr(prefix.size() + 1);
    }
    names.insert(key.substr(0, key.find('.')));
  }
  return absl::StrJoin(names, ", ");
}

// Whether `key` names a section (a mapping of keys), such as "plugin" or "sharing.timeSlicing".
bool IsSection(const std::string& key) {
  for (const Field& f : Fields()) {
    if (absl::StartsWith(f.key, key + ".")) return true;
  }
  return false;
}

// A YAML node for messages: a scalar as written, anything else in flow style, cut short.
std::string Show(const YAML::Node& node) {
  std::string out;
  if (node.IsScalar()) {
    out = node.Scalar();
  } else if (node.IsNull()) {
    out = "";
  } else {
    YAML::Emitter e;
    e << YAML::Flow << node;
    out = e.good() ? e.c_str() : "(unprintable)";
  }
  if (out.size() > 80) out = absl::StrCat(out.substr(0, 77), "...");
  return out;
}

// Sets `field` from text (the file's scalar or list, or a flag): the one path every value
// takes. Control characters (a NUL, a newline) are never part of a valid value.
absl::Status SetField(Config& c, const Field& field, const std::string& text) {
  for (char ch : text) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", absl::CHexEscape(text), "' is not a valid value for ", field.key,
                       ": it contains a control character (allowed: ", field.allowed, ")"));
    }
  }
  return field.set(c, text);
}

// The text of `value` for `field`, checking the node's type: a scalar key takes one value; a
// list key one value or a list of them (each one value, no commas).
absl::StatusOr<std::string> FieldText(const Field& field, const YAML::Node& value,
                                      const std::string& key) {
  if (value.IsNull()) return std::string();
  if (value.IsScalar()) return value.Scalar();
  if (value.IsSequence() && field.shape == Shape::kList) {
    std::vector<std::string> items;
    for (const YAML::Node& item : value) {
      if (!item.IsScalar() || item.Scalar().find(',') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(key, ": list item '", Show(item), "' is ",
                         item.IsScalar() ? "several values" : yaml::KindName(item),
                         "; each item must be one value (allowed: ", field.allowed, ")"));
      }
      items.push_back(item.Scalar());
    }
    return absl::StrJoin(items, ",");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      key, " must be ", field.allowed,
      field.shape == Shape::kList ? " (one value or a list of values)" : " (a single value)",
      ", not ", yaml::KindName(value), " ('", Show(value), "')"));
}

// Walks a YAML mapping, checking every key (known, a plain name, not repeated) and every
// value's type, and applies the values to the fields.
absl::Status ApplyNode(Config& c, const yaml::Map& m) {
  if (absl::Status s = m.Check(); !s.ok()) return s;
  const std::string& prefix = m.path();
  for (const std::string& name : m.keys()) {
    if (prefix.empty() && name == "version") continue;  // checked by ApplyFile
    const std::string key = m.PathOf(name);
    const YAML::Node value = m.Get(name);
    const Field* field = FindField(key);
    if (field == nullptr) {
      if (IsSection(key)) {
        if (value.IsNull()) continue;  // an empty section: its defaults
        if (!value.IsMap()) {
          return m.ErrorAtKey(
              name, absl::StrCat(key, " is a section and must be a mapping of its keys (",
                                 AllowedUnder(key), "), not ", yaml::KindName(value), " ('",
                                 Show(value), "')"));
        }
        if (absl::Status s = ApplyNode(c, m.Child(name)); !s.ok()) return s;
        continue;
      }
      return m.ErrorAtKey(
          name, absl::StrCat("unknown key '", key, "'. Allowed here: ", AllowedUnder(prefix),
                             ". Run `gpulet serve --print-config` to see every key"));
    }
    absl::StatusOr<std::string> text = FieldText(*field, value, key);
    if (!text.ok()) return m.ErrorAtKey(name, text.status().message());
    if (absl::Status s = SetField(c, *field, *text); !s.ok()) {
      return m.ErrorAtKey(name, s.message());
    }
  }
  return absl::OkStatus();
}

// The file part of ParseConfig.
absl::Status ApplyFile(Config& c, const std::string& yaml, const std::string& origin) {
  absl::StatusOr<YAML::Node> loaded = yaml::Load(yaml, origin, {kMaxConfigFileBytes});
  if (!loaded.ok()) return loaded.status();
  const YAML::Node& root = *loaded;
  if (root.IsNull()) return absl::OkStatus();
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": must be a YAML mapping starting with 'version: v1', not ",
                     yaml::KindName(root)));
  }
  const yaml::Map top(root, origin);
  if (absl::Status s = top.Check(); !s.ok()) return s;
  const YAML::Node version = top.Get("version");
  if (!version.IsScalar() || version.Scalar() != "v1") {
    std::string found = "''";  // what the file says, for the message
    if (version.IsScalar()) {
      found = absl::StrCat("'", Show(version), "'");
    } else if (version.IsDefined() && !version.IsNull()) {
      found = absl::StrCat(yaml::KindName(version), " '", Show(version), "'");
    }
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": 'version' must be v1 (found ", found,
                     "); start the file with the line 'version: v1'"));
  }
  return ApplyNode(c, top);
}

absl::Status Validate(const Config& c) {
  if (c.sharing.memory_slices.enabled && c.sharing.memory_slices.resource_name == c.resource_name) {
    return absl::InvalidArgumentError(
        absl::StrCat("sharing.memorySlices.resourceName must differ from resourceName (both are ",
                     c.resource_name, ")"));
  }
  if (c.dra.enabled && c.dra.gpus.empty()) {
    return absl::InvalidArgumentError(
        "dra.gpus is empty, so DRA would offer no GPU: list the GPUs (indexes or UUIDs) or say "
        "all, or set dra.enabled to false");
  }
  std::set<DeviceListStrategy> seen(c.plugin.device_list_strategy.begin(),
                                    c.plugin.device_list_strategy.end());
  if (seen.size() != c.plugin.device_list_strategy.size()) {
    return absl::InvalidArgumentError("plugin.deviceListStrategy lists a strategy twice");
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> Config::AdvertisedResources() const {
  std::vector<std::string> out;
  std::string gpu = resource_name;
  if (sharing.time_slicing.replicas > 1 && sharing.time_slicing.rename_by_default) {
    gpu += ".shared";
  }
  out.push_back(gpu);
  if (sharing.memory_slices.enabled) out.push_back(sharing.memory_slices.resource_name);
  return out;
}

bool Config::DraOffers(int index, const std::string& uuid) const {
  return dra.enabled && gpu::GpuListNames(dra.gpus, index, uuid);
}

bool Config::SlicesOffer(std::optional<int> index, const std::string& uuid) const {
  return sharing.memory_slices.enabled &&
         gpu::GpuListNames(sharing.memory_slices.gpus, index, uuid);
}

bool Config::QuotasOn(std::optional<int> index, const std::string& uuid, bool mig_enabled) const {
  if (index && DraOffers(*index, uuid)) return dra.memory_shares.enabled;
  if (mig_enabled && plugin.mig_strategy != MigStrategy::kNone) return false;
  return SlicesOffer(index, uuid);
}

std::vector<std::string> ConfigKeys() {
  std::vector<std::string> out;
  for (const Field& f : Fields()) out.push_back(f.key);
  return out;
}

absl::StatusOr<Config> ParseConfig(const std::string& yaml, const std::string& origin,
                                   const ConfigOverrides& overrides) {
  Config c;
  if (!yaml.empty()) {
    absl::Status s = ApplyFile(c, yaml, origin);
    if (!s.ok()) return s;
  }
  for (const auto& [key, value] : overrides) {
    const Field* field = FindField(key);
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown setting '", key, "'. Run `gpulet serve --print-config` to see every key"));
    }
    absl::Status s = SetField(c, *field, value);
    if (!s.ok()) return s;
  }
  absl::Status v = Validate(c);
  if (!v.ok()) return v;
  return c;
}

absl::StatusOr<Config> LoadConfig(const std::string& file, const ConfigOverrides& overrides) {
  std::string text;
  if (!file.empty()) {
    absl::StatusOr<std::string> read = ReadRegularFile(file, kMaxConfigFileBytes, "config file");
    if (!read.ok()) return read.status();
    text = *std::move(read);
  }
  return ParseConfig(text, file.empty() ? "(defaults)" : file, overrides);
}

std::string ConfigToYaml(const Config& c) {
  YAML::Node root;
  root["version"] = "v1";
  for (const Field& f : Fields()) {
    std::vector<std::string> path = absl::StrSplit(f.key, '.');
    YAML::Node node = root;
    for (size_t i = 0; i + 1 < path.size(); ++i) node.reset(node[path[i]]);
    node[path.back()] = f.get(c);
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace gpulet::config
