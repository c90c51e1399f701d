#include "http/web_config.h"

#include <exception>
#include <filesystem>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/read_file.h"
#include "yaml-cpp/yaml.h"
#include "yaml/kind.h"

namespace gpulet::http {
namespace {

class Parser {
 public:
  explicit Parser(const std::string& origin) : origin_(origin) {}

  absl::Status Error(const YAML::Node& at, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("web config ", origin_, ":", at.Mark().line + 1, ": ", what));
  }

  // The keys of mapping `node` at `path`, each a plain name and none repeated.
  absl::Status CheckKeys(const YAML::Node& node, const std::string& path) const {
    std::set<std::string> seen;
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) {
        return Error(kv.first, absl::StrCat("a key under ", path, " is ", yaml::KindName(kv.first),
                                            "; keys are plain names"));
      }
      if (!seen.insert(kv.first.Scalar()).second) {
        return Error(kv.first, absl::StrCat("duplicate key '", path, ".", kv.first.Scalar(),
                                            "': it is set more than once; keep only one"));
      }
    }
    return absl::OkStatus();
  }

  // A section: a non-empty mapping.
  absl::Status Section(const YAML::Node& node, const std::string& path,
                       const std::string& allowed) const {
    if (!node.IsMap() || node.size() == 0) {
      return Error(node, absl::StrCat(path, " must be a mapping of ", allowed, ", not ",
                                      node.IsMap() ? "an empty one" : yaml::KindName(node),
                                      "; remove the section if it should not apply"));
    }
    return CheckKeys(node, path);
  }

  absl::StatusOr<std::string> String(const YAML::Node& node, const std::string& path) const {
    if (!node.IsScalar() || node.Scalar().empty()) {
      return Error(node, absl::StrCat(path, " must be a non-empty string, not ",
                                      node.IsScalar() ? "empty" : yaml::KindName(node)));
    }
    return node.Scalar();
  }

  absl::Status Tls(const YAML::Node& node, WebConfig& web) const {
    const std::string path = "tls_server_config";
    if (absl::Status s = Section(node, path, "cert_file and key_file"); !s.ok()) return s;
    for (const auto& kv : node) {
      const std::string& k = kv.first.Scalar();
      std::string* out = k == "cert_file"  ? &web.cert_file
                         : k == "key_file" ? &web.key_file
                                           : nullptr;
      if (out == nullptr) {
        return Error(kv.first, absl::StrCat(path, ".", k,
                                            " is not supported by gpulet (supported: cert_file, "
                                            "key_file); remove it"));
      }
      absl::StatusOr<std::string> v = String(kv.second, absl::StrCat(path, ".", k));
      if (!v.ok()) return v.status();
      *out = *v;
    }
    if (web.cert_file.empty() || web.key_file.empty()) {
      return Error(node,
                   absl::StrCat(path, " needs both cert_file and key_file (",
                                web.cert_file.empty() ? "cert_file" : "key_file", " is missing)"));
    }
    return absl::OkStatus();
  }

  absl::Status Users(const YAML::Node& node, WebConfig& web) const {
    const std::string path = "basic_auth_users";
    if (absl::Status s = Section(node, path, "user names to bcrypt hashes"); !s.ok()) return s;
    for (const auto& kv : node) {
      const std::string& user = kv.first.Scalar();
      if (user.empty() || absl::StrContains(user, ':')) {
        return Error(kv.first, absl::StrCat(path, ": user name '", user,
                                            "' must be non-empty and hold no ':'"));
      }
      const std::string key = absl::StrCat(path, ".", user);
      absl::StatusOr<std::string> hash = String(kv.second, key);
      if (!hash.ok()) return hash.status();
      if (!IsBcryptHash(*hash)) {
        return Error(kv.second,
                     absl::StrCat(key,
                                  " is not a bcrypt hash ($2a$, $2b$ or $2y$, cost 04 to 31, 60 "
                                  "characters); make one with `htpasswd -nbBC 10 \"\" PASSWORD | "
                                  "tr -d ':\\n'`"));
      }
      web.users[user] = *hash;
    }
    return absl::OkStatus();
  }

  absl::Status Http(const YAML::Node& node) const {
    const std::string path = "http_server_config";
    if (absl::Status s = Section(node, path, "http2"); !s.ok()) return s;
    for (const auto& kv : node) {
      const std::string& k = kv.first.Scalar();
      if (k != "http2") {
        return Error(kv.first, absl::StrCat(path, ".", k,
                                            " is not supported by gpulet (supported: http2, "
                                            "which gpulet ignores: it serves HTTP/1.1); remove "
                                            "it"));
      }
      std::string v = kv.second.IsScalar() ? absl::AsciiStrToLower(kv.second.Scalar()) : "";
      if (v != "true" && v != "false") {
        return Error(kv.second, absl::StrCat(path, ".http2 must be true or false"));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<WebConfig> Parse(const std::string& yaml) const {
    YAML::Node root;
    try {
      root = YAML::Load(yaml);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("web config ", origin_, ":", e.mark.line + 1,
                                                     ": not valid YAML: ", e.msg,
                                                     "; fix the syntax"));
    }
    if (!root.IsMap() || root.size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("web config ", origin_,
                       " must be a mapping with tls_server_config and/or "
                       "basic_auth_users, not ",
                       root.IsMap() ? "an empty one" : yaml::KindName(root),
                       "; to serve plain HTTP without auth, set metrics.webConfigFile to \"\""));
    }
    if (absl::Status s = CheckKeys(root, "(top level)"); !s.ok()) return s;
    WebConfig web;
    for (const auto& kv : root) {
      const std::string& key = kv.first.Scalar();
      absl::Status s;
      if (key == "tls_server_config") {
        s = Tls(kv.second, web);
      } else if (key == "basic_auth_users") {
        s = Users(kv.second, web);
      } else if (key == "http_server_config") {
        s = Http(kv.second);
      } else {
        s = Error(kv.first, absl::StrCat("unknown key '", key,
                                         "' (allowed: tls_server_config, basic_auth_users, "
                                         "http_server_config)"));
      }
      if (!s.ok()) return s;
    }
    if (web.cert_file.empty() && web.users.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("web config ", origin_,
                       " sets neither tls_server_config nor basic_auth_users; to serve plain "
                       "HTTP without auth, set metrics.webConfigFile to \"\""));
    }
    return web;
  }

 private:
  const std::string origin_;
};

// The PEM file at `path` (the value of `key`): a readable regular file holding `marker`.
absl::StatusOr<std::string> ReadPem(const std::string& origin, const std::string& key,
                                    const std::string& path, const std::string& marker) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxConfigFileBytes, key);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("web config ", origin, ": ", text.status().message()));
  }
  if (!absl::StrContains(*text, "-----BEGIN ") || !absl::StrContains(*text, marker)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "web config ", origin, ": ", key, " ", path, " is not a PEM file with '", marker,
        "'; give the PEM ", key == "tls_server_config.cert_file" ? "certificate" : "private key"));
  }
  return text;
}

}  // namespace

std::vector<std::string> WebConfigFiles(const std::string& path) {
  if (path.empty()) return {};
  std::vector<std::string> files = {path};
  absl::StatusOr<WebConfig> web = LoadWebConfig(path);
  if (web.ok() && !web->cert_file.empty()) {
    files.push_back(web->cert_file);
    files.push_back(web->key_file);
  }
  return files;
}

bool IsBcryptHash(const std::string& h) {
  if (h.size() != 60 || h[0] != '$' || h[1] != '2' || h[3] != '$' || h[6] != '$') return false;
  if (h[2] != 'a' && h[2] != 'b' && h[2] != 'y') return false;
  if (!absl::ascii_isdigit(h[4]) || !absl::ascii_isdigit(h[5])) return false;
  int cost = (h[4] - '0') * 10 + (h[5] - '0');
  if (cost < 4 || cost > 31) return false;
  for (size_t i = 7; i < h.size(); ++i) {
    if (!absl::ascii_isalnum(h[i]) && h[i] != '.' && h[i] != '/') return false;
  }
  return true;
}

absl::StatusOr<WebConfig> ParseWebConfig(const std::string& yaml, const std::string& origin) {
  try {
    return Parser(origin).Parse(yaml);
  } catch (const std::exception& e) {  // yaml-cpp's, or anything else: never past the loader
    return absl::InvalidArgumentError(
        absl::StrCat("web config ", origin, " cannot be read: ", e.what()));
  }
}

absl::StatusOr<WebConfig> LoadWebConfig(const std::string& path) {
  if (path.empty()) return WebConfig();
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxConfigFileBytes, "web config file");
  if (!text.ok()) return text.status();
  absl::StatusOr<WebConfig> web = ParseWebConfig(*text, path);
  if (!web.ok() || web->cert_file.empty()) return web;
  // As in Prometheus's exporter-toolkit: relative cert and key paths are relative to the
  // web-config file, not to wherever gpulet was started.
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  for (std::string* file : {&web->cert_file, &web->key_file}) {
    if (!file->empty() && (*file)[0] != '/') *file = (dir / *file).lexically_normal().string();
  }
  absl::StatusOr<std::string> cert =
      ReadPem(path, "tls_server_config.cert_file", web->cert_file, "CERTIFICATE-----");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key =
      ReadPem(path, "tls_server_config.key_file", web->key_file, "PRIVATE KEY-----");
  if (!key.ok()) return key.status();
  web->cert_pem = *std::move(cert);
  web->key_pem = *std::move(key);
  return web;
}

}  // namespace gpulet::http
