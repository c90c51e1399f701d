#include "http/web_config.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/read_file.h"
#include "yaml-cpp/yaml.h"
#include "yaml/kind.h"
#include "yaml/reader.h"

namespace gpulet::http {
namespace {

class Parser {
 public:
  explicit Parser(const std::string& origin) : origin_(absl::StrCat("web config ", origin)) {}

  // The section at `key` of `top`: a non-empty mapping of plain keys, none repeated.
  absl::StatusOr<yaml::Map> Section(const yaml::Map& top, const std::string& key,
                                    const std::string& allowed) const {
    const YAML::Node node = top.Get(key);
    if (!node.IsMap() || node.size() == 0) {
      return top.ErrorAt(node, absl::StrCat(key, " must be a mapping of ", allowed, ", not ",
                                            node.IsMap() ? "an empty one" : yaml::KindName(node),
                                            "; remove the section if it should not apply"));
    }
    yaml::Map section = top.Child(key);
    if (absl::Status s = section.Check(); !s.ok()) return s;
    return section;
  }

  // The first key of `section` that is not in `supported`.
  static absl::Status Supported(const yaml::Map& section,
                                std::initializer_list<absl::string_view> supported,
                                absl::string_view note) {
    const std::optional<std::string> k = section.FirstUnknown(supported);
    if (!k) return absl::OkStatus();
    return section.ErrorAtKey(
        *k, absl::StrCat(section.PathOf(*k), " is not supported by gpulet (supported: ",
                         absl::StrJoin(supported, ", "), note, "); remove it"));
  }

  absl::Status Tls(const yaml::Map& top, WebConfig& web) const {
    absl::StatusOr<yaml::Map> tls = Section(top, "tls_server_config", "cert_file and key_file");
    if (!tls.ok()) return tls.status();
    if (absl::Status s = Supported(*tls, {"cert_file", "key_file"}, ""); !s.ok()) return s;
    for (auto [key, out] : {std::pair{"cert_file", &web.cert_file}, {"key_file", &web.key_file}}) {
      if (absl::Status s = tls->NonEmptyString(key, out, Presence::kOptional); !s.ok()) return s;
    }
    if (web.cert_file.empty() || web.key_file.empty()) {
      return top.ErrorAtKey(
          "tls_server_config",
          absl::StrCat("tls_server_config needs both cert_file and key_file (",
                       web.cert_file.empty() ? "cert_file" : "key_file", " is missing)"));
    }
    return absl::OkStatus();
  }

  absl::Status Users(const yaml::Map& top, WebConfig& web) const {
    absl::StatusOr<yaml::Map> users =
        Section(top, "basic_auth_users", "user names to bcrypt hashes");
    if (!users.ok()) return users.status();
    for (const std::string& user : users->keys()) {
      if (user.empty() || absl::StrContains(user, ':')) {
        return users->ErrorAtKey(user, absl::StrCat("basic_auth_users: user name '", user,
                                                    "' must be non-empty and hold no ':'"));
      }
      std::string hash;
      if (absl::Status s = users->NonEmptyString(user, &hash); !s.ok()) return s;
      if (!IsBcryptHash(hash)) {
        return users->ErrorAt(
            users->Get(user),
            absl::StrCat(users->PathOf(user),
                         " is not a bcrypt hash ($2a$, $2b$ or $2y$, cost 04 to 31, 60 "
                         "characters); make one with `htpasswd -nbBC 10 \"\" PASSWORD | "
                         "tr -d ':\\n'`"));
      }
      web.users[user] = hash;
    }
    return absl::OkStatus();
  }

  absl::Status Http(const yaml::Map& top) const {
    absl::StatusOr<yaml::Map> http = Section(top, "http_server_config", "http2");
    if (!http.ok()) return http.status();
    if (absl::Status s = Supported(*http, {"http2"}, ", which gpulet ignores: it serves HTTP/1.1");
        !s.ok()) {
      return s;
    }
    bool http2 = false;
    return http->Bool("http2", &http2);
  }

  absl::StatusOr<WebConfig> Parse(const std::string& text) const {
    absl::StatusOr<YAML::Node> root = yaml::Load(text, origin_);
    if (!root.ok()) return root.status();
    if (!root->IsMap() || root->size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin_,
                       " must be a mapping with tls_server_config and/or "
                       "basic_auth_users, not ",
                       root->IsMap() ? "an empty one" : yaml::KindName(*root),
                       "; to serve plain HTTP without auth, set metrics.webConfigFile to \"\""));
    }
    yaml::Map top(*root, origin_);
    if (absl::Status s = top.Check(); !s.ok()) return s;
    if (absl::Status s =
            top.OnlyKeys({"tls_server_config", "basic_auth_users", "http_server_config"});
        !s.ok()) {
      return s;
    }
    WebConfig web;
    if (top.Has("tls_server_config")) {
      if (absl::Status s = Tls(top, web); !s.ok()) return s;
    }
    if (top.Has("basic_auth_users")) {
      if (absl::Status s = Users(top, web); !s.ok()) return s;
    }
    if (top.Has("http_server_config")) {
      if (absl::Status s = Http(top); !s.ok()) return s;
    }
    if (web.cert_file.empty() && web.users.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin_,
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
