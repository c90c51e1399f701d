#include "config/config.h"

#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "yaml-cpp/yaml.h"

namespace gpulet {
namespace {

using Setter = std::function<absl::Status(Config&, const std::string&)>;
using Getter = std::function<YAML::Node(const Config&)>;

struct Field {
  const char* key;      // dotted path
  const char* allowed;  // what values are accepted, for messages
  Setter set;
  Getter get;
};

absl::Status Bad(const std::string& key, const std::string& value, const char* allowed) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", value, "' is not a valid value for ", key, " (allowed: ", allowed, ")"));
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

absl::Status ParseDur(const std::string& key, const std::string& v, absl::Duration lo,
                      absl::Duration* out) {
  absl::Duration d;
  if (!absl::ParseDuration(v, &d) || d < lo) {
    return Bad(key, v,
               absl::StrCat("a duration such as 1s or 500ms, at least ", absl::FormatDuration(lo))
                   .c_str());
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
       }},
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
      {"metrics.sampleInterval", "a duration of at least 100ms",
       [](Config& c, const std::string& v) {
         return ParseDur("metrics.sampleInterval", v, absl::Milliseconds(100),
                         &c.metrics.sample_interval);
       },
       [](const Config& c) { return Str(absl::FormatDuration(c.metrics.sample_interval)); }},
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
      {"metrics.podResourcesInterval", "a duration of at least 1s",
       [](Config& c, const std::string& v) {
         return ParseDur("metrics.podResourcesInterval", v, absl::Seconds(1),
                         &c.metrics.pod_resources_interval);
       },
       [](const Config& c) { return Str(absl::FormatDuration(c.metrics.pod_resources_interval)); }},
      {"health.probeInterval", "a duration of at least 100ms",
       [](Config& c, const std::string& v) {
         return ParseDur("health.probeInterval", v, absl::Milliseconds(100),
                         &c.health.probe_interval);
       },
       [](const Config& c) { return Str(absl::FormatDuration(c.health.probe_interval)); }},
      {"health.hangTimeout", "a duration from 100ms to 10s",
       [](Config& c, const std::string& v) {
         absl::Status st =
             ParseDur("health.hangTimeout", v, absl::Milliseconds(100), &c.health.hang_timeout);
         if (st.ok() && c.health.hang_timeout > absl::Seconds(10)) {
           return Bad("health.hangTimeout", v, "a duration from 100ms to 10s");
         }
         return st;
       },
       [](const Config& c) { return Str(absl::FormatDuration(c.health.hang_timeout)); }},
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
       }},
      {"health.quietPeriod", "a duration of at least 0s",
       [](Config& c, const std::string& v) {
         return ParseDur("health.quietPeriod", v, absl::ZeroDuration(), &c.health.quiet_period);
       },
       [](const Config& c) { return Str(absl::FormatDuration(c.health.quiet_period)); }},
      {"health.kmsg", "true or false",
       [](Config& c, const std::string& v) { return ParseBool("health.kmsg", v, &c.health.kmsg); },
       [](const Config& c) { return YAML::Node(c.health.kmsg); }},
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

// Walks a YAML mapping, applying scalars (and sequences, joined) to the fields.
absl::Status ApplyNode(Config& c, const YAML::Node& node, const std::string& prefix,
                       const std::string& origin) {
  for (const auto& kv : node) {
    std::string name = kv.first.as<std::string>();
    std::string key = prefix.empty() ? name : absl::StrCat(prefix, ".", name);
    if (prefix.empty() && name == "version") continue;
    const YAML::Node& value = kv.second;
    const Field* field = FindField(key);
    std::string mark = absl::StrCat(origin, ":", kv.first.Mark().line + 1);
    if (field == nullptr) {
      if (value.IsMap() && !AllowedUnder(key).empty()) {
        absl::Status s = ApplyNode(c, value, key, origin);
        if (!s.ok()) return s;
        continue;
      }
      return absl::InvalidArgumentError(
          absl::StrCat(mark, ": unknown key '", key, "'. Allowed here: ", AllowedUnder(prefix),
                       ". Run `gpulet serve --print-config` to see every key"));
    }
    std::string text;
    if (value.IsSequence()) {
      std::vector<std::string> items;
      for (const auto& item : value) items.push_back(item.as<std::string>());
      text = absl::StrJoin(items, ",");
    } else if (value.IsScalar()) {
      text = value.as<std::string>();
    } else if (value.IsNull()) {
      text = "";
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(mark, ": ", key, " must be ", field->allowed, ", not a mapping"));
    }
    absl::Status s = field->set(c, text);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(mark, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status Validate(const Config& c) {
  if (c.sharing.memory_slices.enabled && c.sharing.memory_slices.resource_name == c.resource_name) {
    return absl::InvalidArgumentError(
        absl::StrCat("sharing.memorySlices.resourceName must differ from resourceName (both are ",
                     c.resource_name, ")"));
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

std::vector<std::string> ConfigKeys() {
  std::vector<std::string> out;
  for (const Field& f : Fields()) out.push_back(f.key);
  return out;
}

absl::StatusOr<Config> ParseConfig(const std::string& yaml, const std::string& origin,
                                   const ConfigOverrides& overrides) {
  Config c;
  if (!yaml.empty()) {
    YAML::Node root;
    try {
      root = YAML::Load(yaml);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ":", e.mark.line + 1, ": not valid YAML: ", e.msg));
    }
    if (!root.IsNull()) {
      if (!root.IsMap()) {
        return absl::InvalidArgumentError(absl::StrCat(origin, ": must be a YAML mapping"));
      }
      if (!root["version"] || root["version"].as<std::string>() != "v1") {
        return absl::InvalidArgumentError(
            absl::StrCat(origin, ": 'version' must be v1 (found '",
                         root["version"] ? root["version"].as<std::string>() : "", "')"));
      }
      try {
        absl::Status s = ApplyNode(c, root, "", origin);
        if (!s.ok()) return s;
      } catch (const YAML::Exception& e) {
        return absl::InvalidArgumentError(absl::StrCat(origin, ":", e.mark.line + 1, ": ", e.msg));
      }
    }
  }
  for (const auto& [key, value] : overrides) {
    const Field* field = FindField(key);
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown setting '", key, "'"));
    }
    absl::Status s = field->set(c, value);
    if (!s.ok()) return s;
  }
  absl::Status v = Validate(c);
  if (!v.ok()) return v;
  return c;
}

absl::StatusOr<Config> LoadConfig(const std::string& file, const ConfigOverrides& overrides) {
  std::string text;
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) {
      return absl::NotFoundError(
          absl::StrCat("cannot read config file ", file, ": it does not exist or is not readable"));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
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

}  // namespace gpulet
