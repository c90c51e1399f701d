#include "cdi/spec.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/hex.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"
#include "yaml/reader.h"

namespace gpulet::cdi {
namespace {

// --- scalar typing --------------------------------------------------------------------------

// absl's ASCII classifiers take unsigned char; these take the chars strings hold.
bool IsDigit(char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }
bool IsAlpha(char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)); }
bool IsAlnum(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); }

bool AllOf(absl::string_view s, absl::string_view allowed) {
  return !s.empty() && s.find_first_not_of(allowed) == absl::string_view::npos;
}

// True when a plain (unquoted) YAML scalar with this text would be read as something other
// than a string by the YAML 1.1 reader Go runtimes use (sigs.k8s.io/yaml over yaml.v2):
// null, a boolean, an integer or a float. Such strings must be quoted when written, and are
// type errors when found unquoted in a string field.
bool PlainScalarIsNotString(absl::string_view s) {
  static const std::set<std::string, std::less<>> kWords = {
      "~",     "null",  "Null",  "NULL",  "y",     "Y",    "yes",  "Yes",   "YES",   "n",
      "N",     "no",    "No",    "NO",    "true",  "True", "TRUE", "false", "False", "FALSE",
      "on",    "On",    "ON",    "off",   "Off",   "OFF",  ".inf", ".Inf",  ".INF",  "+.inf",
      "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN"};
  if (s.empty() || kWords.count(s) > 0) return true;
  absl::string_view body = s;
  if (body[0] == '+' || body[0] == '-') body.remove_prefix(1);
  if (body.empty()) return false;
  if (absl::StartsWith(body, "0x")) return AllOf(body.substr(2), "0123456789abcdefABCDEF_");
  if (absl::StartsWith(body, "0o")) return AllOf(body.substr(2), "01234567_");
  if (absl::StartsWith(body, "0b")) return AllOf(body.substr(2), "01_");
  if (AllOf(body, "0123456789_") && IsDigit(body[0])) return true;
  // Floats: digits with at most one '.', optionally an exponent; ".5" counts too.
  size_t e = body.find_first_of("eE");
  absl::string_view mantissa = body.substr(0, e);
  if (e != absl::string_view::npos) {
    absl::string_view exp = body.substr(e + 1);
    if (!exp.empty() && (exp[0] == '+' || exp[0] == '-')) exp.remove_prefix(1);
    if (!AllOf(exp, "0123456789")) return false;
  }
  if (std::count(mantissa.begin(), mantissa.end(), '.') > 1) return false;
  return AllOf(mantissa, "0123456789._") && mantissa != "." &&
         std::any_of(mantissa.begin(), mantissa.end(), IsDigit);
}

// --- name rules -----------------------------------------------------------------------------

// vendor and class: letter first, letter or digit last, [A-Za-z0-9_.-] between.
absl::Status ValidateKindPart(absl::string_view part, absl::string_view what,
                              absl::string_view kind) {
  if (part.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("kind \"", kind, "\": empty ", what,
                                                   "; a kind is vendor/class, e.g. "
                                                   "nvidia.com/gpu"));
  }
  if (!IsAlpha(part.front())) {
    return absl::InvalidArgumentError(
        absl::StrCat("kind \"", kind, "\": ", what, " \"", part, "\" must start with a letter"));
  }
  if (!IsAlnum(part.back())) {
    return absl::InvalidArgumentError(absl::StrCat("kind \"", kind, "\": ", what, " \"", part,
                                                   "\" must end with a letter or digit"));
  }
  for (char c : part) {
    if (!IsAlnum(c) && c != '_' && c != '-' && c != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat("kind \"", kind, "\": ", what, " \"", part, "\" contains '",
                       std::string(1, c), "'; allowed are letters, digits, '_', '-' and '.'"));
    }
  }
  return absl::OkStatus();
}

// --- encoding helpers -----------------------------------------------------------------------

// What the writer quotes: everything a reader might not take for a string, including YAML
// 1.1's base-60 integers ("0:1" is a MIG device name), which some readers still resolve.
bool NeedsQuotes(absl::string_view s) {
  if (PlainScalarIsNotString(s)) return true;
  return IsDigit(s[0]) && absl::StrContains(s, ":") && AllOf(s, "0123456789:_.");
}

void EmitString(YAML::Emitter& out, const std::string& s) {
  if (NeedsQuotes(s)) {
    out << YAML::DoubleQuoted << s;
  } else {
    out << s;
  }
}

void EmitStringList(YAML::Emitter& out, const char* key, const std::vector<std::string>& v,
                    bool flow = false) {
  if (v.empty()) return;
  out << YAML::Key << key << YAML::Value;
  if (flow) out << YAML::Flow;
  out << YAML::BeginSeq;
  for (const std::string& s : v) EmitString(out, s);
  out << YAML::EndSeq;
}

void EmitStringField(YAML::Emitter& out, const char* key, const std::string& v) {
  if (v.empty()) return;
  out << YAML::Key << key << YAML::Value;
  EmitString(out, v);
}

void EmitAnnotations(YAML::Emitter& out, const std::map<std::string, std::string>& a) {
  if (a.empty()) return;
  out << YAML::Key << "annotations" << YAML::Value << YAML::BeginMap;
  for (const auto& [k, v] : a) {
    out << YAML::Key;
    EmitString(out, k);
    out << YAML::Value;
    EmitString(out, v);
  }
  out << YAML::EndMap;
}

void EmitEdits(YAML::Emitter& out, const ContainerEdits& e) {
  out << YAML::BeginMap;
  EmitStringList(out, "env", e.env);
  if (!e.device_nodes.empty()) {
    out << YAML::Key << "deviceNodes" << YAML::Value << YAML::BeginSeq;
    for (const DeviceNode& d : e.device_nodes) {
      out << YAML::BeginMap;
      EmitStringField(out, "path", d.path);
      EmitStringField(out, "hostPath", d.host_path);
      EmitStringField(out, "type", d.type);
      if (d.major) out << YAML::Key << "major" << YAML::Value << *d.major;
      if (d.minor) out << YAML::Key << "minor" << YAML::Value << *d.minor;
      if (d.file_mode) out << YAML::Key << "fileMode" << YAML::Value << *d.file_mode;
      EmitStringField(out, "permissions", d.permissions);
      if (d.uid) out << YAML::Key << "uid" << YAML::Value << *d.uid;
      if (d.gid) out << YAML::Key << "gid" << YAML::Value << *d.gid;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  if (!e.mounts.empty()) {
    out << YAML::Key << "mounts" << YAML::Value << YAML::BeginSeq;
    for (const Mount& m : e.mounts) {
      out << YAML::BeginMap;
      EmitStringField(out, "hostPath", m.host_path);
      EmitStringField(out, "containerPath", m.container_path);
      EmitStringField(out, "type", m.type);
      // Mount options are short words: one line keeps a spec of 50 mounts readable.
      EmitStringList(out, "options", m.options, /*flow=*/true);
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  if (!e.hooks.empty()) {
    out << YAML::Key << "hooks" << YAML::Value << YAML::BeginSeq;
    for (const Hook& h : e.hooks) {
      out << YAML::BeginMap;
      EmitStringField(out, "hookName", h.hook_name);
      EmitStringField(out, "path", h.path);
      EmitStringList(out, "args", h.args);
      EmitStringList(out, "env", h.env);
      if (h.timeout) out << YAML::Key << "timeout" << YAML::Value << *h.timeout;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  if (!e.additional_gids.empty()) {
    out << YAML::Key << "additionalGids" << YAML::Value << YAML::BeginSeq;
    for (uint32_t g : e.additional_gids) out << g;
    out << YAML::EndSeq;
  }
  if (e.intel_rdt) {
    const IntelRdt& r = *e.intel_rdt;
    out << YAML::Key << "intelRdt" << YAML::Value << YAML::BeginMap;
    EmitStringField(out, "closID", r.clos_id);
    EmitStringField(out, "l3CacheSchema", r.l3_cache_schema);
    EmitStringField(out, "memBwSchema", r.mem_bw_schema);
    if (r.enable_cmt) out << YAML::Key << "enableCMT" << YAML::Value << *r.enable_cmt;
    if (r.enable_mbm) out << YAML::Key << "enableMBM" << YAML::Value << *r.enable_mbm;
    EmitStringList(out, "schemata", r.schemata);
    if (r.enable_monitoring) {
      out << YAML::Key << "enableMonitoring" << YAML::Value << *r.enable_monitoring;
    }
    out << YAML::EndMap;
  }
  if (!e.net_devices.empty()) {
    out << YAML::Key << "netDevices" << YAML::Value << YAML::BeginSeq;
    for (const NetDevice& n : e.net_devices) {
      out << YAML::BeginMap;
      EmitStringField(out, "hostInterfaceName", n.host_interface_name);
      EmitStringField(out, "name", n.name);
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
}

using OJson = nlohmann::ordered_json;

OJson EditsToJson(const ContainerEdits& e) {
  OJson out = OJson::object();
  if (!e.env.empty()) out["env"] = e.env;
  if (!e.device_nodes.empty()) {
    OJson list = OJson::array();
    for (const DeviceNode& d : e.device_nodes) {
      OJson j = OJson::object();
      j["path"] = d.path;
      if (!d.host_path.empty()) j["hostPath"] = d.host_path;
      if (!d.type.empty()) j["type"] = d.type;
      if (d.major) j["major"] = *d.major;
      if (d.minor) j["minor"] = *d.minor;
      if (d.file_mode) j["fileMode"] = *d.file_mode;
      if (!d.permissions.empty()) j["permissions"] = d.permissions;
      if (d.uid) j["uid"] = *d.uid;
      if (d.gid) j["gid"] = *d.gid;
      list.push_back(std::move(j));
    }
    out["deviceNodes"] = std::move(list);
  }
  if (!e.mounts.empty()) {
    OJson list = OJson::array();
    for (const Mount& m : e.mounts) {
      OJson j = OJson::object();
      j["hostPath"] = m.host_path;
      j["containerPath"] = m.container_path;
      if (!m.type.empty()) j["type"] = m.type;
      if (!m.options.empty()) j["options"] = m.options;
      list.push_back(std::move(j));
    }
    out["mounts"] = std::move(list);
  }
  if (!e.hooks.empty()) {
    OJson list = OJson::array();
    for (const Hook& h : e.hooks) {
      OJson j = OJson::object();
      j["hookName"] = h.hook_name;
      j["path"] = h.path;
      if (!h.args.empty()) j["args"] = h.args;
      if (!h.env.empty()) j["env"] = h.env;
      if (h.timeout) j["timeout"] = *h.timeout;
      list.push_back(std::move(j));
    }
    out["hooks"] = std::move(list);
  }
  if (!e.additional_gids.empty()) out["additionalGids"] = e.additional_gids;
  if (e.intel_rdt) {
    const IntelRdt& r = *e.intel_rdt;
    OJson j = OJson::object();
    if (!r.clos_id.empty()) j["closID"] = r.clos_id;
    if (!r.l3_cache_schema.empty()) j["l3CacheSchema"] = r.l3_cache_schema;
    if (!r.mem_bw_schema.empty()) j["memBwSchema"] = r.mem_bw_schema;
    if (r.enable_cmt) j["enableCMT"] = *r.enable_cmt;
    if (r.enable_mbm) j["enableMBM"] = *r.enable_mbm;
    if (!r.schemata.empty()) j["schemata"] = r.schemata;
    if (r.enable_monitoring) j["enableMonitoring"] = *r.enable_monitoring;
    out["intelRdt"] = std::move(j);
  }
  if (!e.net_devices.empty()) {
    OJson list = OJson::array();
    for (const NetDevice& n : e.net_devices) {
      list.push_back(OJson{{"hostInterfaceName", n.host_interface_name}, {"name", n.name}});
    }
    out["netDevices"] = std::move(list);
  }
  return out;
}

// --- decoding -------------------------------------------------------------------------------

// Reads YAML nodes into the model with Go-like strictness. Every error carries the origin,
// the position (when yaml-cpp knows it) and the field path.
class Decoder {
 public:
  explicit Decoder(absl::string_view origin) : origin_(origin) {}

  absl::Status Error(const YAML::Node& node, const std::string& path,
                     absl::string_view message) const {
    std::string where(origin_);
    YAML::Mark mark = node.IsDefined() ? node.Mark() : YAML::Mark::null_mark();
    if (!mark.is_null()) absl::StrAppend(&where, ":", mark.line + 1, ":", mark.column + 1);
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", path.empty() ? "" : path + ": ", message));
  }

  // Checks that `node` is a map whose keys are all in `allowed`.
  absl::Status CheckMap(const YAML::Node& node, const std::string& path,
                        const std::vector<absl::string_view>& allowed) const {
    if (!node.IsMap()) return Error(node, path, "expected a mapping (key: value pairs)");
    for (const auto& kv : node) {
      std::string key = kv.first.Scalar();
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        return Error(kv.first, path,
                     absl::StrCat("unknown field \"", key,
                                  "\" (CDI consumers reject the whole "
                                  "file for it; known fields here: ",
                                  absl::StrJoin(allowed, ", "), ")"));
      }
    }
    return absl::OkStatus();
  }

  // Optional string; null or absent leaves `out` empty.
  absl::Status String(const YAML::Node& parent, absl::string_view key, const std::string& path,
                      std::string* out) const {
    YAML::Node n = parent[std::string(key)];
    std::string field = Join(path, key);
    if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
    if (!n.IsScalar()) return Error(n, field, "expected a string");
    return ScalarString(n, field, out);
  }

  absl::Status ScalarString(const YAML::Node& n, const std::string& field, std::string* out) const {
    if (!n.IsScalar()) return Error(n, field, "expected a string");
    if (n.Tag() != "!" && PlainScalarIsNotString(n.Scalar())) {
      return Error(n, field,
                   absl::StrCat("value ", n.Scalar(),
                                " is read as a number, boolean or null, not a string; quote it "
                                "(\"",
                                n.Scalar(), "\")"));
    }
    *out = n.Scalar();
    return absl::OkStatus();
  }

  absl::Status StringList(const YAML::Node& parent, absl::string_view key, const std::string& path,
                          std::vector<std::string>* out) const {
    YAML::Node n = parent[std::string(key)];
    std::string field = Join(path, key);
    if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
    if (!n.IsSequence()) return Error(n, field, "expected a list of strings");
    for (size_t i = 0; i < n.size(); ++i) {
      std::string s;
      if (absl::Status st = ScalarString(n[i], absl::StrCat(field, "[", i, "]"), &s); !st.ok()) {
        return st;
      }
      out->push_back(std::move(s));
    }
    return absl::OkStatus();
  }

  absl::Status StringMap(const YAML::Node& parent, absl::string_view key, const std::string& path,
                         std::map<std::string, std::string>* out) const {
    YAML::Node n = parent[std::string(key)];
    std::string field = Join(path, key);
    if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
    if (!n.IsMap()) return Error(n, field, "expected a mapping of strings to strings");
    for (const auto& kv : n) {
      std::string k, v;
      if (absl::Status st = ScalarString(kv.first, field, &k); !st.ok()) return st;
      if (absl::Status st = ScalarString(kv.second, Join(field, k), &v); !st.ok()) return st;
      (*out)[k] = v;
    }
    return absl::OkStatus();
  }

  // Integers as YAML 1.1 reads them: decimal, 0x hex, 0o or leading-0 octal.
  absl::Status Int(const YAML::Node& n, const std::string& field, int64_t min, int64_t max,
                   std::optional<int64_t>* out) const {
    if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
    if (!n.IsScalar() || n.Tag() == "!") return Error(n, field, "expected an integer");
    std::string text = n.Scalar();
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    absl::string_view s = text;
    bool negative = false;
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
      negative = s[0] == '-';
      s.remove_prefix(1);
    }
    int base = 10;
    if (absl::StartsWith(s, "0x")) {
      base = 16;
      s.remove_prefix(2);
    } else if (absl::StartsWith(s, "0o")) {
      base = 8;
      s.remove_prefix(2);
    } else if (s.size() > 1 && s[0] == '0') {
      base = 8;
      s.remove_prefix(1);
    }
    uint64_t value = 0;
    bool ok = !s.empty();
    for (char c : s) {
      int digit = HexDigitValue(c);  // then held to the base: 0-7 for octal, 0-9 for decimal
      if (digit < 0 || digit >= base || value > (uint64_t{1} << 62)) {
        ok = false;
        break;
      }
      value = value * static_cast<uint64_t>(base) + static_cast<uint64_t>(digit);
    }
    if (!ok) return Error(n, field, absl::StrCat("expected an integer, got \"", n.Scalar(), "\""));
    int64_t v = negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
    if (v < min || v > max) {
      return Error(n, field, absl::StrCat("value ", v, " is out of range [", min, ", ", max, "]"));
    }
    *out = v;
    return absl::OkStatus();
  }

  absl::Status Uint32(const YAML::Node& n, const std::string& field,
                      std::optional<uint32_t>* out) const {
    std::optional<int64_t> v;
    if (absl::Status st = Int(n, field, 0, UINT32_MAX, &v); !st.ok()) return st;
    if (v) *out = static_cast<uint32_t>(*v);
    return absl::OkStatus();
  }

  absl::Status Bool(const YAML::Node& n, const std::string& field, std::optional<bool>* out) const {
    if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
    static const std::set<std::string, std::less<>> kTrue = {"true", "True", "TRUE"};
    static const std::set<std::string, std::less<>> kFalse = {"false", "False", "FALSE"};
    if (n.IsScalar() && n.Tag() != "!") {
      if (kTrue.count(n.Scalar())) {
        *out = true;
        return absl::OkStatus();
      }
      if (kFalse.count(n.Scalar())) {
        *out = false;
        return absl::OkStatus();
      }
    }
    return Error(n, field, "expected true or false");
  }

  absl::Status Edits(const YAML::Node& n, const std::string& path, ContainerEdits* out) const {
    if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
    if (absl::Status st = CheckMap(
            n, path,
            {"env", "deviceNodes", "mounts", "hooks", "additionalGids", "intelRdt", "netDevices"});
        !st.ok()) {
      return st;
    }
    if (absl::Status st = StringList(n, "env", path, &out->env); !st.ok()) return st;

    if (absl::Status st = ForEach(
            n, "deviceNodes", path,
            [&](const YAML::Node& d, const std::string& p) { return DeviceNodeAt(d, p, out); });
        !st.ok()) {
      return st;
    }
    if (absl::Status st =
            ForEach(n, "mounts", path,
                    [&](const YAML::Node& m, const std::string& p) { return MountAt(m, p, out); });
        !st.ok()) {
      return st;
    }
    if (absl::Status st =
            ForEach(n, "hooks", path,
                    [&](const YAML::Node& h, const std::string& p) { return HookAt(h, p, out); });
        !st.ok()) {
      return st;
    }
    if (absl::Status st = ForEach(n, "additionalGids", path,
                                  [&](const YAML::Node& g, const std::string& p) {
                                    std::optional<uint32_t> gid;
                                    absl::Status s = Uint32(g, p, &gid);
                                    if (s.ok() && !gid) return Error(g, p, "expected a group id");
                                    if (s.ok()) out->additional_gids.push_back(*gid);
                                    return s;
                                  });
        !st.ok()) {
      return st;
    }
    if (YAML::Node r = n["intelRdt"]; r.IsDefined() && !r.IsNull()) {
      std::string p = Join(path, "intelRdt");
      if (absl::Status st = CheckMap(r, p,
                                     {"closID", "l3CacheSchema", "memBwSchema", "enableCMT",
                                      "enableMBM", "schemata", "enableMonitoring"});
          !st.ok()) {
        return st;
      }
      IntelRdt rdt;
      absl::Status st = String(r, "closID", p, &rdt.clos_id);
      if (st.ok()) st = String(r, "l3CacheSchema", p, &rdt.l3_cache_schema);
      if (st.ok()) st = String(r, "memBwSchema", p, &rdt.mem_bw_schema);
      if (st.ok()) st = Bool(r["enableCMT"], Join(p, "enableCMT"), &rdt.enable_cmt);
      if (st.ok()) st = Bool(r["enableMBM"], Join(p, "enableMBM"), &rdt.enable_mbm);
      if (st.ok()) st = StringList(r, "schemata", p, &rdt.schemata);
      if (st.ok()) {
        st = Bool(r["enableMonitoring"], Join(p, "enableMonitoring"), &rdt.enable_monitoring);
      }
      if (!st.ok()) return st;
      out->intel_rdt = std::move(rdt);
    }
    return ForEach(n, "netDevices", path, [&](const YAML::Node& d, const std::string& p) {
      if (absl::Status st = CheckMap(d, p, {"hostInterfaceName", "name"}); !st.ok()) return st;
      NetDevice dev;
      absl::Status st = String(d, "hostInterfaceName", p, &dev.host_interface_name);
      if (st.ok()) st = String(d, "name", p, &dev.name);
      if (st.ok()) out->net_devices.push_back(std::move(dev));
      return st;
    });
  }

  static std::string Join(const std::string& path, absl::string_view key) {
    return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
  }

  template <typename Fn>
  absl::Status ForEach(const YAML::Node& parent, absl::string_view key, const std::string& path,
                       Fn fn) const {
    YAML::Node n = parent[std::string(key)];
    std::string field = Join(path, key);
    if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
    if (!n.IsSequence()) return Error(n, field, "expected a list");
    for (size_t i = 0; i < n.size(); ++i) {
      if (absl::Status st = fn(n[i], absl::StrCat(field, "[", i, "]")); !st.ok()) return st;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status DeviceNodeAt(const YAML::Node& n, const std::string& p, ContainerEdits* out) const {
    if (absl::Status st = CheckMap(n, p,
                                   {"path", "hostPath", "type", "major", "minor", "fileMode",
                                    "permissions", "uid", "gid"});
        !st.ok()) {
      return st;
    }
    DeviceNode d;
    absl::Status st = String(n, "path", p, &d.path);
    if (st.ok()) st = String(n, "hostPath", p, &d.host_path);
    if (st.ok()) st = String(n, "type", p, &d.type);
    if (st.ok()) st = Int(n["major"], Join(p, "major"), INT64_MIN / 2, INT64_MAX / 2, &d.major);
    if (st.ok()) st = Int(n["minor"], Join(p, "minor"), INT64_MIN / 2, INT64_MAX / 2, &d.minor);
    if (st.ok()) st = Uint32(n["fileMode"], Join(p, "fileMode"), &d.file_mode);
    if (st.ok()) st = String(n, "permissions", p, &d.permissions);
    if (st.ok()) st = Uint32(n["uid"], Join(p, "uid"), &d.uid);
    if (st.ok()) st = Uint32(n["gid"], Join(p, "gid"), &d.gid);
    if (st.ok()) out->device_nodes.push_back(std::move(d));
    return st;
  }

  absl::Status MountAt(const YAML::Node& n, const std::string& p, ContainerEdits* out) const {
    if (absl::Status st = CheckMap(n, p, {"hostPath", "containerPath", "type", "options"});
        !st.ok()) {
      return st;
    }
    Mount m;
    absl::Status st = String(n, "hostPath", p, &m.host_path);
    if (st.ok()) st = String(n, "containerPath", p, &m.container_path);
    if (st.ok()) st = String(n, "type", p, &m.type);
    if (st.ok()) st = StringList(n, "options", p, &m.options);
    if (st.ok()) out->mounts.push_back(std::move(m));
    return st;
  }

  absl::Status HookAt(const YAML::Node& n, const std::string& p, ContainerEdits* out) const {
    if (absl::Status st = CheckMap(n, p, {"hookName", "path", "args", "env", "timeout"});
        !st.ok()) {
      return st;
    }
    Hook h;
    absl::Status st = String(n, "hookName", p, &h.hook_name);
    if (st.ok()) st = String(n, "path", p, &h.path);
    if (st.ok()) st = StringList(n, "args", p, &h.args);
    if (st.ok()) st = StringList(n, "env", p, &h.env);
    std::optional<int64_t> timeout;
    if (st.ok()) st = Int(n["timeout"], Join(p, "timeout"), INT32_MIN, INT32_MAX, &timeout);
    if (timeout) h.timeout = static_cast<int>(*timeout);
    if (st.ok()) out->hooks.push_back(std::move(h));
    return st;
  }

  std::string origin_;
};

// --- validation helpers ---------------------------------------------------------------------

absl::Status ValidateEnv(const std::vector<std::string>& env, const std::string& path) {
  for (size_t i = 0; i < env.size(); ++i) {
    size_t eq = env[i].find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, "[", i, "]: \"", env[i], "\" is not KEY=VALUE"));
    }
  }
  return absl::OkStatus();
}

absl::Status RequireAbsolute(const std::string& value, const std::string& field) {
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": is required"));
  if (value[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", value, "\" must be an absolute path"));
  }
  return absl::OkStatus();
}

bool IsBindMount(const Mount& m) {
  if (m.type == "bind" || m.type == "rbind") return true;
  if (!m.type.empty() && m.type != "none") return false;
  for (const std::string& o : m.options) {
    if (o == "bind" || o == "rbind") return true;
  }
  return m.type.empty();
}

absl::Status ValidateEdits(const ContainerEdits& e, const std::string& path) {
  if (absl::Status st = ValidateEnv(e.env, path + ".env"); !st.ok()) return st;
  for (size_t i = 0; i < e.device_nodes.size(); ++i) {
    const DeviceNode& d = e.device_nodes[i];
    std::string p = absl::StrCat(path, ".deviceNodes[", i, "]");
    if (absl::Status st = RequireAbsolute(d.path, p + ".path"); !st.ok()) return st;
    if (!d.host_path.empty()) {
      if (absl::Status st = RequireAbsolute(d.host_path, p + ".hostPath"); !st.ok()) return st;
    }
    if (!d.type.empty() && d.type != "b" && d.type != "c" && d.type != "u" && d.type != "p") {
      return absl::InvalidArgumentError(
          absl::StrCat(p, ".type: \"", d.type, "\" is not a device type (b, c, u, p or empty)"));
    }
    if ((d.major && *d.major < 0) || (d.minor && *d.minor < 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, ": negative device number (a runtime reads -1 as \"any device\")"));
    }
    if (!d.permissions.empty() && d.permissions != "none" &&
        d.permissions.find_first_not_of("rwm") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, ".permissions: \"", d.permissions,
                       "\" must be letters of \"rwm\" (read, write, mknod)"));
    }
  }
  for (size_t i = 0; i < e.mounts.size(); ++i) {
    const Mount& m = e.mounts[i];
    std::string p = absl::StrCat(path, ".mounts[", i, "]");
    if (m.host_path.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(p, ".hostPath: is required"));
    }
    if (IsBindMount(m)) {
      if (absl::Status st = RequireAbsolute(m.host_path, p + ".hostPath"); !st.ok()) return st;
    }
    if (absl::Status st = RequireAbsolute(m.container_path, p + ".containerPath"); !st.ok()) {
      return st;
    }
  }
  static const std::set<std::string, std::less<>> kHookNames = {
      "prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"};
  for (size_t i = 0; i < e.hooks.size(); ++i) {
    const Hook& h = e.hooks[i];
    std::string p = absl::StrCat(path, ".hooks[", i, "]");
    if (kHookNames.count(h.hook_name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          p, ".hookName: \"", h.hook_name,
          "\" is not a hook name (prestart, createRuntime, createContainer, startContainer, "
          "poststart, poststop)"));
    }
    if (absl::Status st = RequireAbsolute(h.path, p + ".path"); !st.ok()) return st;
    if (absl::Status st = ValidateEnv(h.env, p + ".env"); !st.ok()) return st;
    if (h.timeout && *h.timeout <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, ".timeout: ", *h.timeout, " must be a positive number of seconds"));
    }
  }
  if (e.intel_rdt) {
    const std::string& c = e.intel_rdt->clos_id;
    if (c != "/" && (c == "." || c == ".." || c.size() >= 4096 ||
                     c.find_first_of("/\n") != std::string::npos)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".intelRdt.closID: \"", c, "\" is not a valid CLOS name"));
    }
  }
  std::set<std::string> hosts, names;
  for (size_t i = 0; i < e.net_devices.size(); ++i) {
    const NetDevice& n = e.net_devices[i];
    std::string p = absl::StrCat(path, ".netDevices[", i, "]");
    if (n.host_interface_name.empty() || n.name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, ": hostInterfaceName and name are both required"));
    }
    if (!hosts.insert(n.host_interface_name).second || !names.insert(n.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(p, ": duplicate interface"));
    }
  }
  return absl::OkStatus();
}

void Require(VersionRequirement* req, Version v, std::string reason) {
  if (v > req->version) {
    req->version = v;
    req->reason = std::move(reason);
  }
}

void RequireForEdits(const ContainerEdits& e, const std::string& path, VersionRequirement* req) {
  for (size_t i = 0; i < e.mounts.size(); ++i) {
    if (!e.mounts[i].type.empty()) {
      Require(req, {0, 4, 0}, absl::StrCat(path, ".mounts[", i, "].type"));
    }
  }
  for (size_t i = 0; i < e.device_nodes.size(); ++i) {
    if (!e.device_nodes[i].host_path.empty()) {
      Require(req, {0, 5, 0}, absl::StrCat(path, ".deviceNodes[", i, "].hostPath"));
    }
  }
  if (!e.additional_gids.empty()) Require(req, {0, 7, 0}, path + ".additionalGids");
  if (e.intel_rdt) {
    Require(req, {0, 7, 0}, path + ".intelRdt");
    if (!e.intel_rdt->schemata.empty()) Require(req, {1, 1, 0}, path + ".intelRdt.schemata");
    if (e.intel_rdt->enable_monitoring) {
      Require(req, {1, 1, 0}, path + ".intelRdt.enableMonitoring");
    }
  }
  if (!e.net_devices.empty()) Require(req, {1, 1, 0}, path + ".netDevices");
}

}  // namespace

bool ContainerEdits::empty() const {
  return env.empty() && device_nodes.empty() && mounts.empty() && hooks.empty() &&
         additional_gids.empty() && !intel_rdt && net_devices.empty();
}

const Device* Spec::FindDevice(absl::string_view name) const {
  for (const Device& d : devices) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::string Version::ToString() const { return absl::StrCat(major, ".", minor, ".", patch); }

const std::vector<Version>& KnownVersions() {
  static const auto* kVersions =
      new std::vector<Version>{{0, 1, 0}, {0, 2, 0}, {0, 3, 0}, {0, 4, 0}, {0, 5, 0},
                               {0, 6, 0}, {0, 7, 0}, {0, 8, 0}, {1, 0, 0}, {1, 1, 0}};
  return *kVersions;
}

absl::StatusOr<Version> ParseVersion(absl::string_view text) {
  absl::string_view s = text;
  absl::ConsumePrefix(&s, "v");
  std::vector<absl::string_view> parts = absl::StrSplit(s, '.');
  Version v;
  bool ok = parts.size() == 3 && absl::SimpleAtoi(parts[0], &v.major) &&
            absl::SimpleAtoi(parts[1], &v.minor) && absl::SimpleAtoi(parts[2], &v.patch);
  if (ok) {
    const std::vector<Version>& known = KnownVersions();
    if (std::find(known.begin(), known.end(), v) != known.end()) return v;
  }
  std::vector<std::string> names;
  for (const Version& k : KnownVersions()) names.push_back(k.ToString());
  return absl::InvalidArgumentError(
      absl::StrCat("\"", text, "\" is not a CDI spec version (", absl::StrJoin(names, ", "), ")"));
}

VersionRequirement RequiredVersion(const Spec& spec) {
  VersionRequirement req;
  size_t slash = spec.kind.find('/');
  if (slash != std::string::npos && spec.kind.find('.', slash) != std::string::npos) {
    Require(&req, {0, 6, 0}, absl::StrCat("kind \"", spec.kind, "\" (a '.' in the class)"));
  }
  if (!spec.annotations.empty()) Require(&req, {0, 6, 0}, "annotations");
  for (size_t i = 0; i < spec.devices.size(); ++i) {
    const Device& d = spec.devices[i];
    std::string path = absl::StrCat("devices[", i, "]");
    if (!d.name.empty() && IsDigit(d.name[0])) {
      Require(&req, {0, 5, 0},
              absl::StrCat(path, ".name \"", d.name, "\" (a name starting with a digit)"));
    }
    if (!d.annotations.empty()) Require(&req, {0, 6, 0}, path + ".annotations");
    RequireForEdits(d.edits, path + ".containerEdits", &req);
  }
  RequireForEdits(spec.edits, "containerEdits", &req);
  if (!req.reason.empty()) {
    absl::StrAppend(&req.reason, " needs cdiVersion ", req.version.ToString());
  }
  return req;
}

absl::StatusOr<Version> ChooseVersion(const Spec& spec, absl::string_view forced) {
  VersionRequirement req = RequiredVersion(spec);
  if (forced.empty()) return std::max(kDefaultMinimumVersion, req.version);
  absl::StatusOr<Version> target = ParseVersion(forced);
  if (!target.ok()) return target.status();
  if (*target < req.version) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cdiVersion ", target->ToString(), " cannot express this spec: ", req.reason,
        ". Use --cdi-version ", req.version.ToString(),
        " or newer if the container runtime accepts it, or generate without the feature"));
  }
  return *target;
}

absl::StatusOr<QualifiedName> ParseQualifiedName(absl::string_view text) {
  size_t eq = text.find('=');
  size_t slash = text.find('/');
  if (eq == absl::string_view::npos || slash == absl::string_view::npos || slash > eq) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text,
                     "\" is not a qualified CDI device name (vendor/class=name, e.g. "
                     "nvidia.com/gpu=0)"));
  }
  QualifiedName q{std::string(text.substr(0, slash)),
                  std::string(text.substr(slash + 1, eq - slash - 1)),
                  std::string(text.substr(eq + 1))};
  if (absl::Status st = ValidateKind(q.Kind()); !st.ok()) return st;
  if (absl::Status st = ValidateDeviceName(q.name); !st.ok()) return st;
  return q;
}

absl::Status ValidateKind(absl::string_view kind) {
  size_t slash = kind.find('/');
  if (slash == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kind \"", kind, "\" has no '/'; a kind is vendor/class, e.g. nvidia.com/gpu"));
  }
  if (absl::Status st = ValidateKindPart(kind.substr(0, slash), "vendor", kind); !st.ok()) {
    return st;
  }
  return ValidateKindPart(kind.substr(slash + 1), "class", kind);
}

absl::Status ValidateDeviceName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("empty device name");
  if (!IsAlnum(name.front()) || !IsAlnum(name.back())) {
    return absl::InvalidArgumentError(
        absl::StrCat("device name \"", name, "\" must start and end with a letter or digit"));
  }
  for (char c : name) {
    if (!IsAlnum(c) && c != '_' && c != '-' && c != '.' && c != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("device name \"", name, "\" contains '", std::string(1, c),
                       "'; allowed are letters, digits, '_', '-', '.' and ':'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateSpec(const Spec& spec) {
  absl::StatusOr<Version> declared = ParseVersion(spec.version);
  if (!declared.ok())
    return absl::InvalidArgumentError(absl::StrCat("cdiVersion: ", declared.status().message()));
  if (*declared < Version{0, 3, 0}) {
    return absl::InvalidArgumentError(
        absl::StrCat("cdiVersion: ", spec.version,
                     " predates the tagged spec (0.3.0); current runtimes "
                     "reject it"));
  }
  if (absl::Status st = ValidateKind(spec.kind); !st.ok()) return st;
  VersionRequirement req = RequiredVersion(spec);
  if (*declared < req.version) {
    return absl::InvalidArgumentError(absl::StrCat("cdiVersion ", declared->ToString(),
                                                   " is too old for the content: ", req.reason));
  }
  if (spec.devices.empty()) {
    return absl::InvalidArgumentError("devices: a spec must define at least one device");
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < spec.devices.size(); ++i) {
    const Device& d = spec.devices[i];
    std::string path = absl::StrCat("devices[", i, "]");
    if (absl::Status st = ValidateDeviceName(d.name); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".name: ", st.message()));
    }
    if (!seen.insert(d.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".name: device \"", d.name, "\" is defined twice"));
    }
    if (d.edits.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": device \"", d.name,
                       "\" has no containerEdits (a device must change the "
                       "container somehow)"));
    }
    if (absl::Status st = ValidateEdits(d.edits, path + ".containerEdits"); !st.ok()) return st;
    if (d.edits.intel_rdt && *declared >= Version{1, 1, 0} &&
        (d.edits.intel_rdt->enable_cmt || d.edits.intel_rdt->enable_mbm)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path,
                       ".containerEdits.intelRdt: enableCMT/enableMBM were removed in "
                       "cdiVersion 1.1.0"));
    }
  }
  return ValidateEdits(spec.edits, "containerEdits");
}

absl::StatusOr<Format> ParseFormat(absl::string_view text) {
  if (text == "yaml") return Format::kYaml;
  if (text == "json") return Format::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown spec format \"", text, "\" (use yaml or json)"));
}

std::string ToYaml(const Spec& spec) {
  YAML::Emitter out;
  out << YAML::BeginDoc << YAML::BeginMap;
  EmitStringField(out, "cdiVersion", spec.version);
  EmitStringField(out, "kind", spec.kind);
  EmitAnnotations(out, spec.annotations);
  out << YAML::Key << "devices" << YAML::Value << YAML::BeginSeq;
  for (const Device& d : spec.devices) {
    out << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value;
    EmitString(out, d.name);
    EmitAnnotations(out, d.annotations);
    out << YAML::Key << "containerEdits" << YAML::Value;
    EmitEdits(out, d.edits);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  if (!spec.edits.empty()) {
    out << YAML::Key << "containerEdits" << YAML::Value;
    EmitEdits(out, spec.edits);
  }
  out << YAML::EndMap;
  return absl::StrCat(out.c_str(), "\n");
}

std::string ToJson(const Spec& spec) {
  OJson j = OJson::object();
  j["cdiVersion"] = spec.version;
  j["kind"] = spec.kind;
  if (!spec.annotations.empty()) j["annotations"] = spec.annotations;
  OJson devices = OJson::array();
  for (const Device& d : spec.devices) {
    OJson dev = OJson::object();
    dev["name"] = d.name;
    if (!d.annotations.empty()) dev["annotations"] = d.annotations;
    dev["containerEdits"] = EditsToJson(d.edits);
    devices.push_back(std::move(dev));
  }
  j["devices"] = std::move(devices);
  if (!spec.edits.empty()) j["containerEdits"] = EditsToJson(spec.edits);
  return j.dump(2) + "\n";
}

std::string Encode(const Spec& spec, Format format) {
  return format == Format::kJson ? ToJson(spec) : ToYaml(spec);
}

absl::StatusOr<Spec> ParseSpec(absl::string_view text, absl::string_view origin) {
  YAML::Node loaded;
  try {
    // yaml-cpp reports syntax errors by exception; they stop here.
    loaded = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ":", e.mark.line + 1, ":",
                                                   e.mark.column + 1,
                                                   ": not valid YAML or "
                                                   "JSON: ",
                                                   e.msg));
  }
  // Read through a const view: yaml-cpp's non-const operator[] may add keys.
  const YAML::Node& root = loaded;
  // A field given twice: yaml-cpp keeps both and a lookup finds the first; Go's decoders, the
  // runtimes', refuse the spec.
  if (absl::Status st = yaml::CheckKeys(root, origin); !st.ok()) return st;
  Decoder dec(origin);
  Spec spec;
  try {
    if (absl::Status st = dec.CheckMap(
            root, "", {"cdiVersion", "kind", "annotations", "devices", "containerEdits"});
        !st.ok()) {
      return st;
    }
    for (absl::string_view required : {"cdiVersion", "kind", "devices"}) {
      if (!root[std::string(required)].IsDefined()) {
        return dec.Error(root, "", absl::StrCat("required field \"", required, "\" is missing"));
      }
    }
    absl::Status st = dec.String(root, "cdiVersion", "", &spec.version);
    if (st.ok()) st = dec.String(root, "kind", "", &spec.kind);
    if (st.ok()) st = dec.StringMap(root, "annotations", "", &spec.annotations);
    if (st.ok()) {
      st = dec.ForEach(root, "devices", "", [&](const YAML::Node& n, const std::string& p) {
        if (absl::Status s = dec.CheckMap(n, p, {"name", "annotations", "containerEdits"});
            !s.ok()) {
          return s;
        }
        if (!n["name"].IsDefined()) return dec.Error(n, p, "required field \"name\" is missing");
        Device d;
        absl::Status s = dec.String(n, "name", p, &d.name);
        if (s.ok()) s = dec.StringMap(n, "annotations", p, &d.annotations);
        if (s.ok())
          s = dec.Edits(n["containerEdits"], Decoder::Join(p, "containerEdits"), &d.edits);
        if (s.ok()) spec.devices.push_back(std::move(d));
        return s;
      });
    }
    if (st.ok()) st = dec.Edits(root["containerEdits"], "containerEdits", &spec.edits);
    if (!st.ok()) return st;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": unreadable spec: ", e.msg));
  }
  return spec;
}

}  // namespace gpulet::cdi
