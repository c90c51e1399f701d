#include "testing/fake_apiserver.h"

#include <httplib.h>
#include <openssl/bio.h>
#include <openssl/pem.h>

#include <cstdlib>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/k8s_names.h"

namespace gpulet::testing {
namespace {

using nlohmann::json;

// The fields of Node and events.k8s.io/v1 Event that strict validation knows (from the API
// reference). An object lists its fields; "*" is anything (maps of labels, quantities); a
// one-element array is a list of that.
const json& Schemas() {
  static const json* schemas = new json(json::parse(R"({
    "meta": {"name": "*", "generateName": "*", "namespace": "*", "uid": "*",
             "resourceVersion": "*", "generation": "*", "creationTimestamp": "*",
             "deletionTimestamp": "*", "deletionGracePeriodSeconds": "*", "labels": "*",
             "annotations": "*", "ownerReferences": "*", "finalizers": "*",
             "managedFields": "*", "selfLink": "*"},
    "node": {"apiVersion": "*", "kind": "*", "metadata": "META",
             "spec": {"podCIDR": "*", "podCIDRs": "*", "providerID": "*",
                      "unschedulable": "*", "configSource": "*", "externalID": "*",
                      "taints": [{"key": "*", "value": "*", "effect": "*", "timeAdded": "*"}]},
             "status": {"capacity": "*", "allocatable": "*", "phase": "*",
                        "conditions": [{"type": "*", "status": "*", "lastHeartbeatTime": "*",
                                        "lastTransitionTime": "*", "reason": "*",
                                        "message": "*"}],
                        "addresses": [{"type": "*", "address": "*"}],
                        "daemonEndpoints": "*", "nodeInfo": "*", "images": "*",
                        "volumesInUse": "*", "volumesAttached": "*", "config": "*",
                        "runtimeHandlers": "*", "features": "*"}},
    "event": {"apiVersion": "*", "kind": "*", "metadata": "META", "eventTime": "*",
              "series": {"count": "*", "lastObservedTime": "*"},
              "reportingController": "*", "reportingInstance": "*", "action": "*",
              "reason": "*", "note": "*", "type": "*",
              "regarding": {"kind": "*", "namespace": "*", "name": "*", "uid": "*",
                            "apiVersion": "*", "resourceVersion": "*", "fieldPath": "*"},
              "related": {"kind": "*", "namespace": "*", "name": "*", "uid": "*",
                          "apiVersion": "*", "resourceVersion": "*", "fieldPath": "*"},
              "deprecatedSource": {"component": "*", "host": "*"},
              "deprecatedFirstTimestamp": "*", "deprecatedLastTimestamp": "*",
              "deprecatedCount": "*"},
    "eviction": {"apiVersion": "*", "kind": "*", "metadata": "META",
                 "deleteOptions": {"apiVersion": "*", "kind": "*", "gracePeriodSeconds": "*",
                                   "preconditions": {"uid": "*", "resourceVersion": "*"},
                                   "propagationPolicy": "*", "dryRun": "*",
                                   "orphanDependents": "*"}},
    "lease": {"apiVersion": "*", "kind": "*", "metadata": "META",
              "spec": {"holderIdentity": "*", "leaseDurationSeconds": "*", "acquireTime": "*",
                       "renewTime": "*", "leaseTransitions": "*", "strategy": "*",
                       "preferredHolder": "*"}},
    "resourceslice": {"apiVersion": "*", "kind": "*", "metadata": "META",
      "spec": {"driver": "*", "pool": {"name": "*", "generation": "*", "resourceSliceCount": "*"},
               "nodeName": "*", "nodeSelector": "*", "allNodes": "*",
               "perDeviceNodeSelection": "*", "sharedCounters": [{"name": "*", "counters": "*"}],
               "devices": [{"name": "*", "attributes": "MAP:attribute", "capacity": "MAP:capacity",
                            "consumesCounters": "*", "nodeName": "*", "nodeSelector": "*",
                            "allNodes": "*",
                            "taints": [{"key": "*", "value": "*", "effect": "*",
                                        "timeAdded": "*"}],
                            "bindsToNode": "*", "bindingConditions": "*",
                            "bindingFailureConditions": "*", "allowMultipleAllocations": "*"}]}},
    "attribute": {"int": "*", "bool": "*", "string": "*", "version": "*"},
    "capacity": {"value": "*",
                 "requestPolicy": {"default": "*", "validValues": "*",
                                   "validRange": {"min": "*", "max": "*", "step": "*"}}}
  })"));
  return *schemas;
}

// Finds fields `schema` does not know in `v` (removing them when `prune`), as the real
// server names them: "spec.foo", "status.conditions[0].bar".
void UnknownFields(json& v, const json& schema, const std::string& path,
                   std::vector<std::string>* out, bool prune) {
  if (schema.is_string()) {
    const std::string& kind = schema.get_ref<const std::string&>();
    if (kind == "META") UnknownFields(v, Schemas()["meta"], path, out, prune);
    // "MAP:<schema>": a map with keys of the user's choice, each value of that schema.
    if (absl::StartsWith(kind, "MAP:") && v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it) {
        UnknownFields(it.value(), Schemas()[kind.substr(4)], absl::StrCat(path, "[", it.key(), "]"),
                      out, prune);
      }
    }
    return;
  }
  if (schema.is_array()) {
    if (!v.is_array()) return;
    for (size_t i = 0; i < v.size(); ++i) {
      UnknownFields(v[i], schema[0], absl::StrCat(path, "[", i, "]"), out, prune);
    }
    return;
  }
  if (!v.is_object()) return;
  std::vector<std::string> drop;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& k = it.key();
    if (absl::StartsWith(k, "$")) continue;  // strategic-merge directives
    std::string p = path.empty() ? k : absl::StrCat(path, ".", k);
    if (!schema.contains(k)) {
      out->push_back(p);
      drop.push_back(k);
      continue;
    }
    UnknownFields(it.value(), schema[k], p, out, prune);
  }
  if (prune) {
    for (const std::string& k : drop) v.erase(k);
  }
}

json StatusObject(int code, const std::string& reason, const std::string& message,
                  json details = nullptr) {
  json s = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
            {"status", "Failure"}, {"message", message}, {"reason", reason},
            {"code", code}};
  if (!details.is_null()) s["details"] = std::move(details);
  return s;
}

void Reply(httplib::Response& res, int code, const json& body) {
  res.status = code;
  res.set_content(body.dump(), "application/json");
}

void ReplyStatus(httplib::Response& res, int code, const std::string& reason,
                 const std::string& message, json details = nullptr) {
  Reply(res, code, StatusObject(code, reason, message, std::move(details)));
}

// A list as the API server answers one: kind, apiVersion, the list's resourceVersion, items.
void ReplyList(httplib::Response& res, const char* kind, const char* api_version, int64_t rv,
               json items) {
  Reply(res, 200,
        {{"kind", kind},
         {"apiVersion", api_version},
         {"metadata", {{"resourceVersion", absl::StrCat(rv)}}},
         {"items", std::move(items)}});
}

std::string MergeKey(const std::string& path) {
  if (path == "status.conditions" || path == "status.addresses") return "type";
  if (path == "metadata.ownerReferences") return "uid";
  return "";
}

json StrategicMerge(json target, const json& patch, const std::string& path);

json MergeList(const json& existing, const json& items, const std::string& key) {
  json result = existing.is_array() ? existing : json::array();
  for (const json& item : items) {
    if (!item.is_object() || !item.contains(key)) continue;
    size_t at = result.size();
    for (size_t i = 0; i < result.size(); ++i) {
      if (result[i].is_object() && result[i].value(key, json()) == item[key]) at = i;
    }
    if (item.value("$patch", "") == "delete") {
      if (at < result.size()) result.erase(result.begin() + static_cast<long>(at));
      continue;
    }
    json clean = item;
    clean.erase("$patch");
    if (at < result.size()) {
      result[at] = StrategicMerge(result[at], clean, "");
    } else {
      result.push_back(clean);
    }
  }
  return result;
}

json StrategicMerge(json target, const json& patch, const std::string& path) {
  if (!patch.is_object()) return patch;
  if (!target.is_object()) target = json::object();
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    const std::string& k = it.key();
    if (absl::StartsWith(k, "$")) continue;  // $setElementOrder/..., $retainKeys, $patch
    const std::string p = path.empty() ? k : absl::StrCat(path, ".", k);
    const json& v = it.value();
    if (v.is_null()) {
      target.erase(k);
    } else if (v.is_array() && !MergeKey(p).empty()) {
      target[k] = MergeList(target.contains(k) ? target[k] : json(), v, MergeKey(p));
    } else if (v.is_object()) {
      target[k] = StrategicMerge(target.contains(k) ? target[k] : json::object(), v, p);
    } else {
      target[k] = v;
    }
  }
  return target;
}

// The parsed body with strict or warn field validation applied; answers `res` on failure.
bool CheckedBody(const httplib::Request& req, httplib::Response& res, const json& schema,
                 const std::string& kind, json* out) {
  *out = json::parse(req.body, nullptr, false);
  if (out->is_discarded() || !out->is_object()) {
    ReplyStatus(
        res, 400, "BadRequest",
        absl::StrCat("the body of the request was not a JSON object: ", req.body.substr(0, 64)));
    return false;
  }
  const std::string mode = req.get_param_value("fieldValidation");
  if (!mode.empty() && mode != "Strict" && mode != "Warn" && mode != "Ignore") {
    ReplyStatus(res, 400, "BadRequest",
                absl::StrCat("fieldValidation parameter unsupported: ", mode));
    return false;
  }
  std::vector<std::string> unknown;
  UnknownFields(*out, schema, "", &unknown, mode != "Strict");
  if (unknown.empty()) return true;
  std::vector<std::string> parts;
  for (const std::string& u : unknown) parts.push_back(absl::StrCat("unknown field \"", u, "\""));
  if (mode == "Strict") {
    ReplyStatus(res, 400, "BadRequest",
                absl::StrCat(kind, " in version \"v1\" cannot be handled as a ", kind,
                             ": strict decoding error: ", absl::StrJoin(parts, ", ")));
    return false;
  }
  if (mode != "Ignore") {
    for (const std::string& p : parts) {
      res.set_header("Warning",
                     absl::StrCat("299 - \"", absl::StrReplaceAll(p, {{"\"", "\\\""}}), "\""));
    }
  }
  return true;
}

// Applies a PATCH body to `current` by its Content-Type; answers `res` on failure.
bool ApplyPatch(const httplib::Request& req, httplib::Response& res, const json& patch,
                json* current) {
  std::string type = req.get_header_value("Content-Type");
  type = std::string(absl::StripAsciiWhitespace(type.substr(0, type.find(';'))));
  if (type == "application/merge-patch+json") {
    current->merge_patch(patch);
  } else if (type == "application/strategic-merge-patch+json") {
    *current = StrategicMerge(*current, patch, "");
  } else {
    ReplyStatus(res, 415, "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml, application/strategic-merge-patch+json");
    return false;
  }
  return true;
}

std::string RvOf(const json& obj) {
  if (!obj.is_object() || !obj.contains("metadata") || !obj["metadata"].is_object()) return "";
  const json& rv = obj["metadata"].value("resourceVersion", json());
  return rv.is_string() ? rv.get<std::string>() : "";
}

// --- resource.k8s.io/v1 validation --------------------------------------------------------
// Limits from kubernetes/api resource/v1/types.go at v0.35.0 (Kubernetes 1.35):
// ResourceSliceMaxDevices = 128, ResourceSliceMaxDevicesWithTaintsOrConsumesCounters = 64,
// ResourceSliceMaxAttributesAndCapacitiesPerDevice = 32, DeviceTaintsMaxLength = 16,
// DeviceAttributeMaxValueLength = 64, DriverNameMaxLength = 63, PoolNameMaxLength = 253
// (a DNS subdomain's). The messages are the API server's field errors (apimachinery
// field.Error: "<path>: <type>: <detail>") as pkg/apis/resource/validation words them.
constexpr size_t kMaxDevicesPerSlice = 128;
constexpr size_t kMaxDevicesPerSliceWithTaintsOrCounters = 64;
constexpr size_t kMaxAttributesAndCapacitiesPerDevice = 32;
constexpr size_t kMaxTaintsPerDevice = 16;
constexpr size_t kMaxAttributeValueLength = 64;
constexpr size_t kMaxDriverNameLength = 63;
constexpr size_t kMaxPoolNameLength = 253;

bool IsDnsLabel(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && (c != '-' || i == 0 || i + 1 == s.size())) return false;
  }
  return true;
}

// apimachinery's IsDNS1123Subdomain: 253 characters in all; its labels have no 63 limit.
bool IsDnsSubdomain(const std::string& s) { return gpulet::IsDnsSubdomain(s); }

const char kDnsLabelMessage[] =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const char kDnsSubdomainMessage[] =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

// field.Invalid's rendering of a value: strings quoted, numbers and booleans plain, anything
// else as JSON.
std::string Shown(const json& v) { return v.dump(); }

std::string Str(const json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

int64_t Int(const json& obj, const char* key) {
  if (!obj.is_object()) return 0;
  auto it = obj.find(key);
  return it != obj.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

// "true", "false" or "" (absent or null) for an optional boolean.
std::string Bool(const json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_boolean()) return "";
  return it->get<bool>() ? "true" : "false";
}

void ValidateDevice(const json& d, const std::string& p, std::vector<std::string>* errs) {
  if (!d.is_object()) {
    errs->push_back(absl::StrCat(p, ": Invalid value: ", Shown(d), ": must be an object"));
    return;
  }
  const std::string name = Str(d, "name");
  if (name.empty()) {
    errs->push_back(absl::StrCat(p, ".name: Required value"));
  } else if (!IsDnsLabel(name)) {
    errs->push_back(absl::StrCat(p, ".name: Invalid value: ", Shown(name), ": ", kDnsLabelMessage));
  }
  const json attrs = d.value("attributes", json::object());
  const json caps = d.value("capacity", json::object());
  const size_t n = (attrs.is_object() ? attrs.size() : 0) + (caps.is_object() ? caps.size() : 0);
  if (n > kMaxAttributesAndCapacitiesPerDevice) {
    errs->push_back(absl::StrCat(p, ": Invalid value: ", n,
                                 ": the total number of attributes and capacities must not exceed ",
                                 kMaxAttributesAndCapacitiesPerDevice));
  }
  if (attrs.is_object()) {
    for (auto it = attrs.begin(); it != attrs.end(); ++it) {
      const std::string ap = absl::StrCat(p, ".attributes[", it.key(), "]");
      const json& a = it.value();
      int values = 0;
      for (const char* k : {"int", "bool", "string", "version"}) {
        values += a.is_object() && a.contains(k) && !a[k].is_null();
      }
      if (values != 1) {
        errs->push_back(absl::StrCat(ap, ": Invalid value: ", values == 0 ? "\"\"" : a.dump(),
                                     ": exactly one value must be specified"));
      }
      for (const char* k : {"string", "version"}) {
        if (Str(a, k).size() > kMaxAttributeValueLength) {
          errs->push_back(absl::StrCat(ap, ".", k, ": Too long: may not be more than ",
                                       kMaxAttributeValueLength, " bytes"));
        }
      }
    }
  }
  const bool multiple = Bool(d, "allowMultipleAllocations") == "true";
  if (caps.is_object() && !multiple) {
    for (auto it = caps.begin(); it != caps.end(); ++it) {
      if (it.value().is_object() && it.value().contains("requestPolicy") &&
          !it.value()["requestPolicy"].is_null()) {
        errs->push_back(absl::StrCat(p, ".capacity[", it.key(),
                                     "].requestPolicy: Forbidden: allowMultipleAllocations must "
                                     "be true"));
      }
    }
  }
  const json taints = d.value("taints", json::array());
  if (taints.is_array()) {
    if (taints.size() > kMaxTaintsPerDevice) {
      errs->push_back(absl::StrCat(p, ".taints: Too many: ", taints.size(), ": must have at most ",
                                   kMaxTaintsPerDevice, " items"));
    }
    for (size_t t = 0; t < taints.size(); ++t) {
      const std::string tp = absl::StrCat(p, ".taints[", t, "]");
      if (Str(taints[t], "key").empty()) errs->push_back(absl::StrCat(tp, ".key: Required value"));
      const std::string effect = Str(taints[t], "effect");
      if (effect.empty()) {
        errs->push_back(absl::StrCat(tp, ".effect: Required value"));
      } else if (effect != "NoSchedule" && effect != "NoExecute" && effect != "None") {
        errs->push_back(
            absl::StrCat(tp, ".effect: Unsupported value: ", Shown(effect),
                         ": supported values: \"NoExecute\", \"NoSchedule\", \"None\""));
      }
    }
  }
}

}  // namespace

std::vector<std::string> ValidateResourceSlice(const json& slice, const json* old) {
  std::vector<std::string> errs;
  const json spec = slice.is_object() ? slice.value("spec", json::object()) : json::object();
  const std::string driver = Str(spec, "driver");
  if (driver.empty()) {
    errs.push_back("spec.driver: Required value");
  } else if (driver.size() > kMaxDriverNameLength) {
    errs.push_back(absl::StrCat("spec.driver: Too long: may not be more than ",
                                kMaxDriverNameLength, " bytes"));
  } else if (!IsDnsSubdomain(driver)) {
    errs.push_back(
        absl::StrCat("spec.driver: Invalid value: ", Shown(driver), ": ", kDnsSubdomainMessage));
  }
  const json pool = spec.value("pool", json::object());
  const std::string pool_name = Str(pool, "name");
  if (pool_name.empty()) {
    errs.push_back("spec.pool.name: Required value");
  } else if (pool_name.size() > kMaxPoolNameLength) {
    errs.push_back(absl::StrCat("spec.pool.name: Too long: may not be more than ",
                                kMaxPoolNameLength, " bytes"));
  } else {
    for (absl::string_view part : absl::StrSplit(pool_name, '/')) {
      if (!IsDnsSubdomain(std::string(part))) {
        errs.push_back(absl::StrCat("spec.pool.name: Invalid value: ", Shown(std::string(part)),
                                    ": ", kDnsSubdomainMessage));
      }
    }
  }
  if (Int(pool, "resourceSliceCount") <= 0) {
    errs.push_back(absl::StrCat("spec.pool.resourceSliceCount: Invalid value: ",
                                Int(pool, "resourceSliceCount"), ": must be greater than zero"));
  }
  if (Int(pool, "generation") < 0) {
    errs.push_back(absl::StrCat("spec.pool.generation: Invalid value: ", Int(pool, "generation"),
                                ": must be greater than or equal to zero"));
  }
  std::vector<std::string> set;
  if (!Str(spec, "nodeName").empty()) set.push_back("`nodeName`");
  if (spec.contains("nodeSelector") && !spec["nodeSelector"].is_null()) {
    set.push_back("`nodeSelector`");
  }
  for (const char* k : {"allNodes", "perDeviceNodeSelection"}) {
    if (Bool(spec, k) == "true") set.push_back(absl::StrCat("`", k, "`"));
    if (Bool(spec, k) == "false") {
      errs.push_back(
          absl::StrCat("spec.", k, ": Invalid value: false: must be either unset or set to true"));
    }
  }
  const char kOneOf[] =
      "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is "
      "required";
  if (set.empty()) errs.push_back(absl::StrCat("spec: Required value: ", kOneOf));
  if (set.size() > 1) {
    errs.push_back(absl::StrCat("spec: Invalid value: \"{", absl::StrJoin(set, ", "),
                                "}\": ", kOneOf, ", but multiple fields are set"));
  }
  const json devices = spec.value("devices", json::array());
  if (spec.contains("sharedCounters") && !spec["sharedCounters"].is_null() &&
      spec.contains("devices") && !spec["devices"].is_null()) {
    errs.push_back(
        "spec: Invalid value: \"\": only one of `sharedCounters` or `devices` is allowed");
  }
  if (devices.is_array()) {
    bool advanced = false;
    for (const json& d : devices) {
      advanced |= d.is_object() &&
                  ((d.contains("taints") && d["taints"].is_array() && !d["taints"].empty()) ||
                   (d.contains("consumesCounters") && d["consumesCounters"].is_array() &&
                    !d["consumesCounters"].empty()));
    }
    const size_t max = advanced ? kMaxDevicesPerSliceWithTaintsOrCounters : kMaxDevicesPerSlice;
    if (devices.size() > max) {
      errs.push_back(absl::StrCat("spec.devices: Too many: ", devices.size(),
                                  ": must have at most ", max, " items"));
    }
    std::set<std::string> names;
    for (size_t i = 0; i < devices.size(); ++i) {
      const std::string p = absl::StrCat("spec.devices[", i, "]");
      ValidateDevice(devices[i], p, &errs);
      const std::string name = Str(devices[i], "name");
      if (!name.empty() && !names.insert(name).second) {
        errs.push_back(absl::StrCat(p, ".name: Duplicate value: ", Shown(name)));
      }
    }
  }
  if (old != nullptr) {
    const json old_spec = old->value("spec", json::object());
    for (const char* k : {"driver", "nodeName"}) {
      if (Str(spec, k) != Str(old_spec, k)) {
        errs.push_back(absl::StrCat("spec.", k, ": Invalid value: ", Shown(Str(spec, k)),
                                    ": field is immutable"));
      }
    }
  }
  return errs;
}

namespace {

// 422 Invalid for a ResourceSlice, worded as the real server's.
void ReplyInvalidSlice(httplib::Response& res, const std::string& name,
                       const std::vector<std::string>& errs) {
  ReplyStatus(
      res, 422, "Invalid",
      absl::StrCat("ResourceSlice.resource.k8s.io \"", name, "\" is invalid: ",
                   errs.size() == 1 ? errs[0] : absl::StrCat("[", absl::StrJoin(errs, ", "), "]")),
      {{"name", name}, {"group", "resource.k8s.io"}, {"kind", "ResourceSlice"}});
}

// A resource as the API server names it in its Status objects: "pods" (the core group),
// "leases.coordination.k8s.io", with the details' group and kind.
struct Resource {
  const char* plural;
  const char* group;  // "" for the core group
  std::string Qualified() const {
    return *group == '\0' ? plural : absl::StrCat(plural, ".", group);
  }
  json Details(const std::string& name) const {
    json d = {{"name", name}, {"kind", plural}};
    if (*group != '\0') d["group"] = group;
    return d;
  }
};
constexpr Resource kNodes{"nodes", ""};
constexpr Resource kPods{"pods", ""};
constexpr Resource kEvents{"events", "events.k8s.io"};
constexpr Resource kSlices{"resourceslices", "resource.k8s.io"};
constexpr Resource kClaims{"resourceclaims", "resource.k8s.io"};
constexpr Resource kLeases{"leases", "coordination.k8s.io"};

void ReplyNotFound(httplib::Response& res, const Resource& r, const std::string& name) {
  ReplyStatus(res, 404, "NotFound", absl::StrCat(r.Qualified(), " \"", name, "\" not found"),
              r.Details(name));
}

void ReplyAlreadyExists(httplib::Response& res, const Resource& r, const std::string& name) {
  ReplyStatus(res, 409, "AlreadyExists",
              absl::StrCat(r.Qualified(), " \"", name, "\" already exists"), r.Details(name));
}

// A write whose metadata.resourceVersion is not the stored one's.
void ReplyConflict(httplib::Response& res, const Resource& r, const std::string& name) {
  ReplyStatus(res, 409, "Conflict",
              absl::StrCat("Operation cannot be fulfilled on ", r.Qualified(), " \"", name,
                           "\": the object has been modified; please apply your changes to "
                           "the latest version and try again"),
              r.Details(name));
}

// A create of a namespaced object (the caller holds the lock over `objects` and `rv`): 409
// AlreadyExists when its name is taken, else namespace, resourceVersion, uid and type stamped,
// stored, and answered 201 with the object.
void CreateNamespaced(std::map<std::string, json>& objects, int64_t* rv, const Resource& r,
                      const std::string& ns, const char* kind, const char* api_version, json obj,
                      httplib::Response& res) {
  json& meta = obj["metadata"];
  const std::string name = meta.value("name", "");
  const std::string key = absl::StrCat(ns, "/", name);
  if (objects.count(key)) {
    ReplyAlreadyExists(res, r, name);
    return;
  }
  ++*rv;
  meta["namespace"] = ns;
  meta["resourceVersion"] = absl::StrCat(*rv);
  meta["uid"] = absl::StrCat(absl::AsciiStrToLower(kind), "-uid-", *rv);
  obj["kind"] = kind;
  obj["apiVersion"] = api_version;
  objects[key] = obj;
  Reply(res, 201, obj);
}

json* FindOrReplyNotFound(std::map<std::string, json>& objects, const std::string& key,
                          httplib::Response& res, const Resource& resource,
                          const std::string& name) {
  auto it = objects.find(key);
  if (it != objects.end()) return &it->second;
  ReplyNotFound(res, resource, name);
  return nullptr;
}

}  // namespace

FakeApiServer::FakeApiServer() = default;

FakeApiServer::~FakeApiServer() { Stop(); }

std::string FakeApiServer::url() const { return absl::StrCat("https://127.0.0.1:", port_); }

kube::KubeConfig FakeApiServer::ClientConfig(const std::string& token) const {
  kube::KubeConfig c;
  absl::Status parsed = kube::ParseServerUrl(url(), "test", &c);
  if (!parsed.ok()) std::abort();  // url() is always a valid https URL
  c.ca_pem = ca_.cert_pem;
  c.ca_source = "the test CA";
  c.token = token;
  c.source = "test";
  return c;
}

std::string FakeApiServer::Kubeconfig(const std::string& token) const {
  return absl::StrCat(
      "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
      "clusters:\n- name: test\n  cluster:\n    server: ",
      url(), "\n    certificate-authority-data: ", absl::Base64Escape(ca_.cert_pem),
      "\nusers:\n- name: gpulet\n  user:\n    token: ", token,
      "\ncontexts:\n- name: test\n  context: {cluster: test, user: gpulet}\n");
}

absl::Status FakeApiServer::Start(const std::string& token) {
  {
    absl::MutexLock lock(&mu_);
    token_ = token;
  }
  absl::StatusOr<TestCert> ca = MakeTestCa("gpulet-test-ca");
  if (!ca.ok()) return ca.status();
  ca_ = *ca;
  absl::StatusOr<TestCert> cert =
      MakeTestCert(ca_, "kube-apiserver", {"127.0.0.1"}, {"localhost"}, /*client=*/false);
  if (!cert.ok()) return cert.status();
  server_cert_ = *cert;
  BIO* cb = BIO_new_mem_buf(server_cert_.cert_pem.data(), -1);
  X509* x = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
  BIO_free(cb);
  BIO* kb = BIO_new_mem_buf(server_cert_.key_pem.data(), -1);
  EVP_PKEY* k = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
  BIO_free(kb);
  if (x == nullptr || k == nullptr) return absl::InternalError("reading the test server cert");
  server_ = std::make_unique<httplib::SSLServer>(x, k);  // it takes references of its own
  X509_free(x);
  EVP_PKEY_free(k);
  if (!server_->is_valid()) return absl::InternalError("httplib::SSLServer is not valid");
  // As Go's net/http (the API server's) does: without it, a response written in two parts
  // waits out the client's delayed ACK (40 ms) on a kept-alive connection.
  server_->set_tcp_nodelay(true);

  Route("GET", R"(/api/v1/nodes/([^/]+))", &FakeApiServer::GetNode);
  Route("GET", R"(/api/v1/nodes)", &FakeApiServer::ListOrWatchNodes);
  Route("PATCH", R"(/api/v1/nodes/([^/]+)(/status)?)", &FakeApiServer::PatchNode);
  Route("PUT", R"(/api/v1/nodes/([^/]+))", &FakeApiServer::PutNode);
  Route("POST", R"(/apis/events\.k8s\.io/v1/namespaces/([^/]+)/events)",
        &FakeApiServer::CreateEvent);
  Route("PATCH", R"(/apis/events\.k8s\.io/v1/namespaces/([^/]+)/events/([^/]+))",
        &FakeApiServer::PatchEvent);
  Route("GET", R"(/apis/events\.k8s\.io/v1/namespaces/([^/]+)/events/([^/]+))",
        &FakeApiServer::GetEvent);
  Route("POST", R"(/apis/resource\.k8s\.io/v1/resourceslices)",
        &FakeApiServer::CreateResourceSlice);
  Route("GET", R"(/apis/resource\.k8s\.io/v1/resourceslices)", &FakeApiServer::ListResourceSlices);
  Route("GET", R"(/apis/resource\.k8s\.io/v1/resourceslices/([^/]+))",
        &FakeApiServer::GetResourceSlice);
  Route("PUT", R"(/apis/resource\.k8s\.io/v1/resourceslices/([^/]+))",
        &FakeApiServer::PutResourceSlice);
  Route("DELETE", R"(/apis/resource\.k8s\.io/v1/resourceslices/([^/]+))",
        &FakeApiServer::DeleteResourceSlice);
  Route("POST", R"(/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction)", &FakeApiServer::EvictPod);
  Route("GET", R"(/api/v1/pods)", &FakeApiServer::ListPods);
  Route("GET", R"(/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases)",
        &FakeApiServer::ListLeases);
  Route("POST", R"(/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases)",
        &FakeApiServer::CreateLease);
  Route("GET", R"(/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases/([^/]+))",
        &FakeApiServer::GetLease);
  Route("PUT", R"(/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases/([^/]+))",
        &FakeApiServer::PutLeaseRequest);
  Route("DELETE", R"(/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases/([^/]+))",
        &FakeApiServer::DeleteLease);
  Route("GET", R"(/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+))",
        &FakeApiServer::GetResourceClaim);
  port_ = server_->bind_to_any_port("127.0.0.1");
  if (port_ <= 0) return absl::UnavailableError("the stand-in API server cannot bind 127.0.0.1");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib's stop() does nothing until its listen loop runs (it marks itself running there):
  // a Stop() soon after Start() would leave the loop blocked in accept() for good
  // (SlicePublisherTest hung on it in CI). So Start returns once the loop runs.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!server_->is_running()) {
    if (absl::Now() > give_up) {
      return absl::UnavailableError("the stand-in API server's listen loop did not start");
    }
    std::this_thread::yield();
  }
  return absl::OkStatus();
}

void FakeApiServer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void FakeApiServer::Route(const char* method, const char* pattern, Handler h) {
  auto fn = [this, h](const httplib::Request& req, httplib::Response& res) { Serve(req, res, h); };
  const std::string m = method;
  if (m == "GET") server_->Get(pattern, fn);
  if (m == "PATCH") server_->Patch(pattern, fn);
  if (m == "PUT") server_->Put(pattern, fn);
  if (m == "POST") server_->Post(pattern, fn);
  if (m == "DELETE") server_->Delete(pattern, fn);
}

void FakeApiServer::Serve(const httplib::Request& req, httplib::Response& res, Handler h) {
  RecordedRequest rec;
  rec.method = req.method;
  rec.target = req.target;
  rec.path = req.path;
  for (const auto& [k, v] : req.params) rec.params.emplace(k, v);
  rec.authorization = req.get_header_value("Authorization");
  rec.content_type = req.get_header_value("Content-Type");
  rec.body = req.body;
  bool handled = false;
  {
    absl::MutexLock lock(&mu_);
    if (rec.authorization != absl::StrCat("Bearer ", token_)) {
      // The real server's answer to a missing, wrong or expired token.
      ReplyStatus(res, 401, "Unauthorized", "Unauthorized");
      handled = true;
    } else if (fail_left_ > 0 && req.get_param_value("watch") != "true") {
      --fail_left_;
      if (fail_status_ == 429) {
        ReplyStatus(res, 429, "TooManyRequests", "Too many requests, please try again later.",
                    {{"retryAfterSeconds", std::max(fail_retry_after_, 0)}});
      } else {
        ReplyStatus(res, fail_status_, fail_status_ == 503 ? "ServiceUnavailable" : "InternalError",
                    "the stand-in was told to fail this request");
      }
      if (fail_retry_after_ >= 0) res.set_header("Retry-After", absl::StrCat(fail_retry_after_));
      handled = true;
    }
  }
  if (!handled) (this->*h)(req, res);
  rec.status = res.status;
  absl::MutexLock lock(&mu_);
  requests_.push_back(std::move(rec));
}

void FakeApiServer::StoreNodeLocked(json node, const std::string& type) {
  ++rv_;
  node["metadata"]["resourceVersion"] = absl::StrCat(rv_);
  const std::string name = node["metadata"].value("name", "");
  nodes_[name] = node;
  history_.push_back({rv_, type, node});
  const std::string line = json{{"type", type}, {"object", node}}.dump() + "\n";
  for (const auto& w : watchers_) {
    if (w->name.empty() || w->name == name) w->lines.push_back(line);
  }
}

void FakeApiServer::AddNode(json node) {
  absl::MutexLock lock(&mu_);
  const std::string name = node["metadata"].value("name", "");
  if (!node["metadata"].contains("uid")) node["metadata"]["uid"] = absl::StrCat("uid-", name);
  node["kind"] = "Node";
  node["apiVersion"] = "v1";
  StoreNodeLocked(std::move(node), nodes_.count(name) ? "MODIFIED" : "ADDED");
}

std::optional<json> FakeApiServer::Node(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return std::nullopt;
  return it->second;
}

std::vector<json> FakeApiServer::Events() const {
  absl::MutexLock lock(&mu_);
  std::vector<json> out;
  for (const auto& [k, v] : events_) out.push_back(v);
  return out;
}

json FakeApiServer::NodeCondition(const std::string& name, const std::string& type) const {
  std::optional<json> node = Node(name);
  if (!node) return nullptr;
  for (const json& c : (*node).value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == type) return c;
  }
  return nullptr;
}

std::vector<json> FakeApiServer::EventsWithReason(const std::string& reason) const {
  std::vector<json> out;
  for (json& e : Events()) {
    if (e.value("reason", "") == reason) out.push_back(std::move(e));
  }
  return out;
}

int64_t FakeApiServer::resource_version() const {
  absl::MutexLock lock(&mu_);
  return rv_;
}

void FakeApiServer::SetToken(const std::string& token) {
  absl::MutexLock lock(&mu_);
  token_ = token;
}

void FakeApiServer::FailNext(int n, int status, int retry_after_seconds) {
  absl::MutexLock lock(&mu_);
  fail_left_ = n;
  fail_status_ = status;
  fail_retry_after_ = retry_after_seconds;
}

void FakeApiServer::Compact(int64_t resource_version) {
  absl::MutexLock lock(&mu_);
  compacted_ = resource_version;
  std::erase_if(history_, [&](const HistoryEntry& e) { return e.rv < resource_version; });
}

void FakeApiServer::SendBookmarks() {
  absl::MutexLock lock(&mu_);
  json bm = {{"type", "BOOKMARK"},
             {"object",
              {{"kind", "Node"},
               {"apiVersion", "v1"},
               {"metadata", {{"resourceVersion", absl::StrCat(rv_)}}}}}};
  const std::string line = bm.dump() + "\n";
  for (const auto& w : watchers_) {
    if (w->bookmarks) w->lines.push_back(line);
  }
}

void FakeApiServer::DropWatches() {
  absl::MutexLock lock(&mu_);
  for (const auto& w : watchers_) w->drop = true;
  watchers_.clear();
}

std::vector<FakeApiServer::RecordedRequest> FakeApiServer::Requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}

bool FakeApiServer::AwaitRequests(size_t n, absl::Duration limit) const {
  absl::MutexLock lock(&mu_);
  struct Ctx {
    const FakeApiServer* s;
    size_t n;
  } ctx{this, n};
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Ctx* c) ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->s->requests_.size() >= c->n; },
          &ctx),
      limit);
}

bool FakeApiServer::AwaitOpenWatches(int n, absl::Duration limit) const {
  absl::MutexLock lock(&mu_);
  struct Ctx {
    const FakeApiServer* s;
    int n;
  } ctx{this, n};
  return mu_.AwaitWithTimeout(absl::Condition(
                                  +[](Ctx* c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                    return static_cast<int>(c->s->watchers_.size()) >= c->n;
                                  },
                                  &ctx),
                              limit);
}

void FakeApiServer::GetNode(const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.matches[1];
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) {
    ReplyNotFound(res, kNodes, name);
    return;
  }
  Reply(res, 200, it->second);
}

void FakeApiServer::ListOrWatchNodes(const httplib::Request& req, httplib::Response& res) {
  std::string name;
  const std::string selector = req.get_param_value("fieldSelector");
  if (!selector.empty()) {
    absl::string_view s = selector;
    if (!absl::ConsumePrefix(&s, "metadata.name=")) {
      ReplyStatus(res, 400, "BadRequest",
                  absl::StrCat("field label not supported by the stand-in: ", selector));
      return;
    }
    name = std::string(s);
  }
  absl::MutexLock lock(&mu_);
  if (req.get_param_value("watch") != "true") {
    json items = json::array();
    for (const auto& [n, node] : nodes_) {
      if (name.empty() || n == name) items.push_back(node);
    }
    ReplyList(res, "NodeList", "v1", rv_, std::move(items));
    return;
  }
  auto w = std::make_shared<Watcher>();
  w->name = name;
  w->bookmarks = req.get_param_value("allowWatchBookmarks") == "true";
  const std::string rv_param = req.get_param_value("resourceVersion");
  int64_t from = 0;
  if (rv_param.empty() || rv_param == "0") {
    for (const auto& [n, node] : nodes_) {
      if (name.empty() || n == name) {
        w->lines.push_back(json{{"type", "ADDED"}, {"object", node}}.dump() + "\n");
      }
    }
    watchers_.push_back(w);
  } else if (!absl::SimpleAtoi(rv_param, &from)) {
    ReplyStatus(res, 400, "BadRequest", absl::StrCat("invalid resource version: ", rv_param));
    return;
  } else if (from < compacted_) {
    // As the real server: 200, then an ERROR event with a 410 Status, then the end.
    w->lines.push_back(json{{"type", "ERROR"},
                            {"object", StatusObject(410, "Expired",
                                                    absl::StrCat("too old resource version: ", from,
                                                                 " (", compacted_, ")"))}}
                           .dump() +
                       "\n");
    w->done = true;
  } else {
    for (const HistoryEntry& e : history_) {
      if (e.rv > from && (name.empty() || e.object["metadata"].value("name", "") == name)) {
        w->lines.push_back(json{{"type", e.type}, {"object", e.object}}.dump() + "\n");
      }
    }
    watchers_.push_back(w);
  }
  res.status = 200;
  res.set_chunked_content_provider("application/json", [this, w](size_t, httplib::DataSink& sink) {
    std::deque<std::string> out;
    bool drop;
    bool done;
    {
      absl::MutexLock lock(&mu_);
      struct Ctx {
        const FakeApiServer* s;
        const Watcher* w;
      } ctx{this, w.get()};
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](Ctx* c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                 return !c->w->lines.empty() || c->w->drop || c->w->done ||
                                        c->s->stopping_;
                               },
                               &ctx),
                           absl::Milliseconds(100));
      out.swap(w->lines);
      drop = w->drop || stopping_;
      done = w->done;
    }
    if (drop) return false;  // the connection closes with the chunked body unfinished
    for (const std::string& line : out) {
      if (!sink.write(line.data(), line.size())) return false;
    }
    if (done) sink.done();
    return true;
  });
}

std::map<std::string, json>::iterator FakeApiServer::WritableNodeLocked(const std::string& name,
                                                                        const json& write,
                                                                        httplib::Response& res) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) {
    ReplyNotFound(res, kNodes, name);
    return it;
  }
  const std::string want = RvOf(write);
  if (!want.empty() && want != RvOf(it->second)) {
    ReplyConflict(res, kNodes, name);
    return nodes_.end();
  }
  return it;
}

void FakeApiServer::PatchNode(const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.matches[1];
  const bool status = req.matches[2].matched;
  json patch;
  if (!CheckedBody(req, res, Schemas()["node"], "Node", &patch)) return;
  absl::MutexLock lock(&mu_);
  auto it = WritableNodeLocked(name, patch, res);
  if (it == nodes_.end()) return;
  json updated = it->second;
  if (!ApplyPatch(req, res, patch, &updated)) return;
  // The status subresource changes only status; the main resource never changes it.
  if (status) {
    updated["spec"] = it->second.value("spec", json::object());
  } else {
    updated["status"] = it->second.value("status", json::object());
  }
  updated["metadata"]["name"] = name;
  updated["metadata"]["uid"] = it->second["metadata"]["uid"];
  StoreNodeLocked(updated, "MODIFIED");
  Reply(res, 200, nodes_[name]);
}

void FakeApiServer::PutNode(const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.matches[1];
  json body;
  if (!CheckedBody(req, res, Schemas()["node"], "Node", &body)) return;
  absl::MutexLock lock(&mu_);
  auto it = WritableNodeLocked(name, body, res);
  if (it == nodes_.end()) return;
  body["status"] = it->second.value("status", json::object());
  body["metadata"]["name"] = name;
  body["metadata"]["uid"] = it->second["metadata"]["uid"];
  body["kind"] = "Node";
  body["apiVersion"] = "v1";
  StoreNodeLocked(body, "MODIFIED");
  Reply(res, 200, nodes_[name]);
}

void FakeApiServer::CreateEvent(const httplib::Request& req, httplib::Response& res) {
  const std::string ns = req.matches[1];
  json ev;
  if (!CheckedBody(req, res, Schemas()["event"], "Event", &ev)) return;
  json& meta = ev["metadata"];
  if (!meta.is_object()) meta = json::object();
  if (meta.contains("namespace") && meta["namespace"] != ns) {
    ReplyStatus(res, 400, "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the "
                "request");
    return;
  }
  absl::MutexLock lock(&mu_);
  if (!meta.contains("name") && meta.contains("generateName")) {
    meta["name"] = absl::StrCat(meta["generateName"].get<std::string>(), rv_ + 1);
  }
  const std::string name = meta.value("name", "");
  // events.k8s.io/v1 validation of a new Event: what the API reference marks required.
  std::vector<std::string> missing;
  if (name.empty())
    missing.push_back("metadata.name: Required value: name or generateName is required");
  for (const char* f :
       {"eventTime", "reportingController", "reportingInstance", "action", "reason"}) {
    if (!ev.contains(f) || ev[f] == "" || ev[f].is_null()) {
      missing.push_back(absl::StrCat(f, ": Required value"));
    }
  }
  if (ev.value("type", "") != "Normal" && ev.value("type", "") != "Warning") {
    missing.push_back("type: Unsupported value: must be Normal or Warning");
  }
  // pkg/apis/core/validation/events.go (v1.34): NameIsDNSSubdomain and the length limits.
  if (!name.empty() && !IsDnsSubdomain(name)) {
    missing.push_back(absl::StrCat(
        "metadata.name: Invalid value: ", Shown(name), ": ",
        name.size() > 253 ? "must be no more than 253 characters" : kDnsSubdomainMessage));
  }
  for (const auto& [field, limit] : {std::pair<const char*, size_t>{"reportingInstance", 128},
                                     {"action", 128},
                                     {"reason", 128},
                                     {"note", 1024}}) {
    if (ev.contains(field) && ev[field].is_string() &&
        ev[field].get<std::string>().size() > limit) {
      missing.push_back(
          absl::StrCat(field, ": Invalid value: \"\": can have at most ", limit, " characters"));
    }
  }
  if (!missing.empty()) {
    ReplyStatus(
        res, 422, "Invalid",
        absl::StrCat("Event.events.k8s.io \"", name, "\" is invalid: ",
                     missing.size() == 1 ? missing[0]
                                         : absl::StrCat("[", absl::StrJoin(missing, ", "), "]")),
        {{"name", name}, {"group", "events.k8s.io"}, {"kind", "Event"}});
    return;
  }
  CreateNamespaced(events_, &rv_, kEvents, ns, "Event", "events.k8s.io/v1", std::move(ev), res);
}

void FakeApiServer::PatchEvent(const httplib::Request& req, httplib::Response& res) {
  const std::string ns = req.matches[1];
  const std::string name = req.matches[2];
  json patch;
  if (!CheckedBody(req, res, Schemas()["event"], "Event", &patch)) return;
  absl::MutexLock lock(&mu_);
  auto it = events_.find(absl::StrCat(ns, "/", name));
  if (it == events_.end()) {
    ReplyNotFound(res, kEvents, name);
    return;
  }
  const std::string want = RvOf(patch);
  if (!want.empty() && want != RvOf(it->second)) {
    ReplyConflict(res, kEvents, name);
    return;
  }
  json updated = it->second;
  if (!ApplyPatch(req, res, patch, &updated)) return;
  ++rv_;
  updated["metadata"]["resourceVersion"] = absl::StrCat(rv_);
  updated["metadata"]["name"] = name;
  it->second = updated;
  Reply(res, 200, updated);
}

void FakeApiServer::GetEvent(const httplib::Request& req, httplib::Response& res) {
  const std::string ns = req.matches[1];
  const std::string name = req.matches[2];
  absl::MutexLock lock(&mu_);
  auto it = events_.find(absl::StrCat(ns, "/", name));
  if (it == events_.end()) {
    ReplyNotFound(res, kEvents, name);
    return;
  }
  Reply(res, 200, it->second);
}

// --- resource.k8s.io/v1 ---------------------------------------------------------------------

std::vector<json> FakeApiServer::ResourceSlices() const {
  absl::MutexLock lock(&mu_);
  std::vector<json> out;
  for (const auto& [name, slice] : slices_) out.push_back(slice);
  return out;
}

std::optional<json> FakeApiServer::ResourceSlice(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = slices_.find(name);
  if (it == slices_.end()) return std::nullopt;
  return it->second;
}

void FakeApiServer::PutResourceClaim(json claim) {
  absl::MutexLock lock(&mu_);
  json& meta = claim["metadata"];
  const std::string key = absl::StrCat(meta.value("namespace", ""), "/", meta.value("name", ""));
  ++rv_;
  if (!meta.contains("uid")) meta["uid"] = absl::StrCat("claim-uid-", rv_);
  meta["resourceVersion"] = absl::StrCat(rv_);
  claim["kind"] = "ResourceClaim";
  claim["apiVersion"] = "resource.k8s.io/v1";
  claims_[key] = std::move(claim);
}

void FakeApiServer::DeleteResourceClaim(const std::string& ns, const std::string& name) {
  absl::MutexLock lock(&mu_);
  claims_.erase(absl::StrCat(ns, "/", name));
}

void FakeApiServer::CreateResourceSlice(const httplib::Request& req, httplib::Response& res) {
  json slice;
  if (!CheckedBody(req, res, Schemas()["resourceslice"], "ResourceSlice", &slice)) return;
  json& meta = slice["metadata"];
  if (!meta.is_object()) meta = json::object();
  absl::MutexLock lock(&mu_);
  if (Str(meta, "name").empty() && !Str(meta, "generateName").empty()) {
    // The real server appends five random characters; a counter is enough to be unique.
    meta["name"] = absl::StrCat(Str(meta, "generateName"), "g", rv_ + 1);
  }
  const std::string name = Str(meta, "name");
  std::vector<std::string> errs;
  if (name.empty()) {
    errs.push_back("metadata.name: Required value: name or generateName is required");
  } else if (!IsDnsSubdomain(name)) {
    errs.push_back(
        absl::StrCat("metadata.name: Invalid value: ", Shown(name), ": ", kDnsSubdomainMessage));
  }
  for (std::string& e : ValidateResourceSlice(slice, nullptr)) errs.push_back(std::move(e));
  if (!errs.empty()) {
    ReplyInvalidSlice(res, name, errs);
    return;
  }
  if (slices_.count(name)) {
    ReplyAlreadyExists(res, kSlices, name);
    return;
  }
  DropDisabledSliceFieldsLocked(&slice);
  ++rv_;
  meta["resourceVersion"] = absl::StrCat(rv_);
  meta["uid"] = absl::StrCat("slice-uid-", rv_);
  meta["generation"] = 1;
  slice["kind"] = "ResourceSlice";
  slice["apiVersion"] = "resource.k8s.io/v1";
  slices_[name] = slice;
  Reply(res, 201, slice);
}

void FakeApiServer::GetResourceSlice(const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.matches[1];
  absl::MutexLock lock(&mu_);
  if (json* stored = FindOrReplyNotFound(slices_, name, res, kSlices, name)) {
    Reply(res, 200, *stored);
  }
}

void FakeApiServer::ListResourceSlices(const httplib::Request& req, httplib::Response& res) {
  // The field selectors the real server offers for ResourceSlices: spec.nodeName, spec.driver
  // (comma-separated terms, all of which must hold).
  std::vector<std::pair<std::string, std::string>> terms;
  const std::string selector = req.get_param_value("fieldSelector");
  if (!selector.empty()) {
    for (absl::string_view term : absl::StrSplit(selector, ',')) {
      std::vector<std::string> kv = absl::StrSplit(term, absl::MaxSplits('=', 1));
      if (kv.size() != 2 || (kv[0] != "spec.nodeName" && kv[0] != "spec.driver")) {
        ReplyStatus(res, 400, "BadRequest",
                    absl::StrCat("field label not supported: ", kv.empty() ? "" : kv[0]));
        return;
      }
      terms.emplace_back(kv[0].substr(5), kv[1]);  // "nodeName" or "driver"
    }
  }
  absl::MutexLock lock(&mu_);
  json items = json::array();
  for (const auto& [name, slice] : slices_) {
    bool match = true;
    for (const auto& [field, value] : terms) {
      match &= Str(slice.value("spec", json::object()), field.c_str()) == value;
    }
    if (match) items.push_back(slice);
  }
  ReplyList(res, "ResourceSliceList", "resource.k8s.io/v1", rv_, std::move(items));
}

void FakeApiServer::PutResourceSlice(const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.matches[1];
  json slice;
  if (!CheckedBody(req, res, Schemas()["resourceslice"], "ResourceSlice", &slice)) return;
  json& meta = slice["metadata"];
  if (!meta.is_object()) meta = json::object();
  if (!Str(meta, "name").empty() && Str(meta, "name") != name) {
    ReplyStatus(res, 400, "BadRequest",
                absl::StrCat("the name of the object (", Str(meta, "name"),
                             ") does not match the name on the URL (", name, ")"));
    return;
  }
  absl::MutexLock lock(&mu_);
  json* stored = FindOrReplyNotFound(slices_, name, res, kSlices, name);
  if (stored == nullptr) return;
  const std::string want = RvOf(slice);
  if (!want.empty() && want != RvOf(*stored)) {
    ReplyConflict(res, kSlices, name);
    return;
  }
  std::vector<std::string> errs = ValidateResourceSlice(slice, stored);
  if (!errs.empty()) {
    ReplyInvalidSlice(res, name, errs);
    return;
  }
  DropDisabledSliceFieldsLocked(&slice);
  ++rv_;
  meta["name"] = name;
  meta["uid"] = (*stored)["metadata"]["uid"];
  meta["resourceVersion"] = absl::StrCat(rv_);
  const int64_t generation = Int((*stored)["metadata"], "generation");
  meta["generation"] = slice["spec"] == (*stored)["spec"] ? generation : generation + 1;
  slice["kind"] = "ResourceSlice";
  slice["apiVersion"] = "resource.k8s.io/v1";
  *stored = slice;
  Reply(res, 200, slice);
}

void FakeApiServer::SetDraGatesOff(bool device_taints, bool consumable_capacity) {
  absl::MutexLock lock(&mu_);
  taints_gate_off_ = device_taints;
  capacity_gate_off_ = consumable_capacity;
}

void FakeApiServer::DropDisabledSliceFieldsLocked(json* slice) {
  if (!(*slice).contains("spec") || !(*slice)["spec"].contains("devices")) return;
  for (json& d : (*slice)["spec"]["devices"]) {
    if (!d.is_object()) continue;
    if (taints_gate_off_) d.erase("taints");
    if (!capacity_gate_off_) continue;
    d.erase("allowMultipleAllocations");
    if (d.contains("capacity") && d["capacity"].is_object()) {
      for (auto& [name, c] : d["capacity"].items()) {
        if (c.is_object()) c.erase("requestPolicy");
      }
    }
  }
}

void FakeApiServer::DeleteResourceSlice(const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.matches[1];
  absl::MutexLock lock(&mu_);
  json* stored = FindOrReplyNotFound(slices_, name, res, kSlices, name);
  if (stored == nullptr) return;
  ++rv_;
  json gone = std::move(*stored);
  slices_.erase(name);
  Reply(res, 200, gone);  // no finalizers: deleted at once, and the object answered
}

void FakeApiServer::GetResourceClaim(const httplib::Request& req, httplib::Response& res) {
  const std::string ns = req.matches[1];
  const std::string name = req.matches[2];
  absl::MutexLock lock(&mu_);
  if (json* stored =
          FindOrReplyNotFound(claims_, absl::StrCat(ns, "/", name), res, kClaims, name)) {
    Reply(res, 200, *stored);
  }
}

void FakeApiServer::PutPod(json pod) {
  absl::MutexLock lock(&mu_);
  json& meta = pod["metadata"];
  const std::string key = absl::StrCat(meta.value("namespace", ""), "/", meta.value("name", ""));
  ++rv_;
  if (!meta.contains("uid")) meta["uid"] = absl::StrCat("pod-uid-", rv_);
  meta["resourceVersion"] = absl::StrCat(rv_);
  pod["kind"] = "Pod";
  pod["apiVersion"] = "v1";
  pods_[key] = std::move(pod);
}

std::optional<json> FakeApiServer::Pod(const std::string& ns, const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(absl::StrCat(ns, "/", name));
  if (it == pods_.end()) return std::nullopt;
  return it->second;
}

void FakeApiServer::BlockEvictions(const std::string& ns, const std::string& name, bool blocked) {
  absl::MutexLock lock(&mu_);
  const std::string key = absl::StrCat(ns, "/", name);
  if (blocked) {
    eviction_blocked_.insert(key);
  } else {
    eviction_blocked_.erase(key);
  }
}

// The pods/eviction subresource as the real registry answers it (pkg/registry/core/pod/
// storage/eviction.go): the Eviction must name the pod of the URL; a UID precondition that
// names another pod is a Conflict; a PodDisruptionBudget at its minimum is 429 with the
// message every `kubectl drain` prints; otherwise the pod is deleted and the answer is 201
// with a Success Status.
void FakeApiServer::EvictPod(const httplib::Request& req, httplib::Response& res) {
  const std::string ns = req.matches[1];
  const std::string name = req.matches[2];
  json eviction;
  if (!CheckedBody(req, res, Schemas()["eviction"], "Eviction", &eviction)) return;
  const json meta = eviction.value("metadata", json::object());
  if (eviction.value("kind", "") != "Eviction" || meta.value("name", "") != name ||
      meta.value("namespace", ns) != ns) {
    ReplyStatus(res, 400, "BadRequest", "name in URL does not match name in Eviction object");
    return;
  }
  absl::MutexLock lock(&mu_);
  const std::string key = absl::StrCat(ns, "/", name);
  json* pod = FindOrReplyNotFound(pods_, key, res, kPods, name);
  if (pod == nullptr) return;
  const std::string uid = (*pod)["metadata"].value("uid", "");
  const json pre =
      eviction.value("deleteOptions", json::object()).value("preconditions", json::object());
  if (pre.contains("uid") && pre["uid"] != uid) {
    ReplyStatus(res, 409, "Conflict",
                absl::StrCat("Operation cannot be fulfilled on pods \"", name,
                             "\": Precondition failed: UID in precondition: ",
                             pre["uid"].get<std::string>(), ", UID in object meta: ", uid));
    return;
  }
  if (eviction_blocked_.contains(key)) {
    ReplyStatus(res, 429, "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
                {{"causes",
                  {{{"reason", "DisruptionBudget"},
                    {"message",
                     "The disruption budget pdb needs 1 healthy pods and has 1 "
                     "currently"}}}}});
    return;
  }
  pods_.erase(key);
  ++rv_;
  Reply(res, 201,
        {{"kind", "Status"},
         {"apiVersion", "v1"},
         {"metadata", json::object()},
         {"status", "Success"},
         {"code", 201}});
}

void FakeApiServer::ListPods(const httplib::Request& req, httplib::Response& res) {
  std::string node;
  const std::string selector = req.get_param_value("fieldSelector");
  if (!selector.empty()) {
    std::vector<std::string> kv = absl::StrSplit(selector, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0] != "spec.nodeName") {
      ReplyStatus(res, 400, "BadRequest",
                  absl::StrCat("field label not supported: ", kv.empty() ? "" : kv[0]));
      return;
    }
    node = kv[1];
  }
  absl::MutexLock lock(&mu_);
  json items = json::array();
  for (const auto& [key, pod] : pods_) {
    if (selector.empty() || Str(pod.value("spec", json::object()), "nodeName") == node) {
      items.push_back(pod);
    }
  }
  ReplyList(res, "PodList", "v1", rv_, std::move(items));
}

std::optional<json> FakeApiServer::Lease(const std::string& ns, const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(absl::StrCat(ns, "/", name));
  if (it == leases_.end()) return std::nullopt;
  return it->second;
}

void FakeApiServer::PutLease(json lease) {
  absl::MutexLock lock(&mu_);
  json& meta = lease["metadata"];
  ++rv_;
  meta["resourceVersion"] = absl::StrCat(rv_);
  lease["kind"] = "Lease";
  lease["apiVersion"] = "coordination.k8s.io/v1";
  leases_[absl::StrCat(meta.value("namespace", ""), "/", meta.value("name", ""))] =
      std::move(lease);
}

// labelSelector: "key" (exists) or "key=value", the forms gpulet sends.
void FakeApiServer::ListLeases(const httplib::Request& req, httplib::Response& res) {
  const std::string ns = req.matches[1];
  const std::string selector = req.get_param_value("labelSelector");
  std::vector<std::string> kv = absl::StrSplit(selector, absl::MaxSplits('=', 1));
  absl::MutexLock lock(&mu_);
  json items = json::array();
  for (const auto& [key, lease] : leases_) {
    if (!absl::StartsWith(key, ns + "/")) continue;
    const json labels = lease["metadata"].value("labels", json::object());
    if (!selector.empty() &&
        (!labels.contains(kv[0]) || (kv.size() == 2 && Str(labels, kv[0].c_str()) != kv[1]))) {
      continue;
    }
    items.push_back(lease);
  }
  ReplyList(res, "LeaseList", "coordination.k8s.io/v1", rv_, std::move(items));
}

void FakeApiServer::CreateLease(const httplib::Request& req, httplib::Response& res) {
  const std::string ns = req.matches[1];
  json lease;
  if (!CheckedBody(req, res, Schemas()["lease"], "Lease", &lease)) return;
  if (!lease["metadata"].is_object()) lease["metadata"] = json::object();
  absl::MutexLock lock(&mu_);
  CreateNamespaced(leases_, &rv_, kLeases, ns, "Lease", "coordination.k8s.io/v1", std::move(lease),
                   res);
}

void FakeApiServer::GetLease(const httplib::Request& req, httplib::Response& res) {
  const std::string ns = req.matches[1];
  const std::string name = req.matches[2];
  absl::MutexLock lock(&mu_);
  if (json* stored =
          FindOrReplyNotFound(leases_, absl::StrCat(ns, "/", name), res, kLeases, name)) {
    Reply(res, 200, *stored);
  }
}

void FakeApiServer::PutLeaseRequest(const httplib::Request& req, httplib::Response& res) {
  const std::string ns = req.matches[1];
  const std::string name = req.matches[2];
  json lease;
  if (!CheckedBody(req, res, Schemas()["lease"], "Lease", &lease)) return;
  absl::MutexLock lock(&mu_);
  json* stored = FindOrReplyNotFound(leases_, absl::StrCat(ns, "/", name), res, kLeases, name);
  if (stored == nullptr) return;
  const std::string want = RvOf(lease);
  if (!want.empty() && want != RvOf(*stored)) {
    ReplyConflict(res, kLeases, name);
    return;
  }
  ++rv_;
  lease["metadata"]["resourceVersion"] = absl::StrCat(rv_);
  lease["kind"] = "Lease";
  lease["apiVersion"] = "coordination.k8s.io/v1";
  *stored = lease;
  Reply(res, 200, lease);
}

void FakeApiServer::DeleteLease(const httplib::Request& req, httplib::Response& res) {
  const std::string ns = req.matches[1];
  const std::string name = req.matches[2];
  absl::MutexLock lock(&mu_);
  const std::string key = absl::StrCat(ns, "/", name);
  if (FindOrReplyNotFound(leases_, key, res, kLeases, name) == nullptr) {
    return;
  }
  leases_.erase(key);
  ++rv_;
  Reply(res, 200,
        {{"kind", "Status"},
         {"apiVersion", "v1"},
         {"metadata", json::object()},
         {"status", "Success"}});
}

}  // namespace gpulet::testing
