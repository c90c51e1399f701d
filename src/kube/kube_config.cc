#include "kube/kube_config.h"

#include <stdlib.h>

#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/read_file.h"
#include "yaml-cpp/yaml.h"
#include "yaml/reader.h"

namespace gpulet::kube {
namespace {

constexpr size_t kMaxFileBytes = 1 << 20;

absl::Status Annotate(const absl::Status& s, const std::string& context) {
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

// The single value at `key` of `map`; nullopt when absent or null. `map` is checked first:
// a key given twice is an error, as kubectl's reader makes it.
absl::StatusOr<std::optional<std::string>> Scalar(const yaml::Map& map, const char* key) {
  if (absl::Status s = map.Check(); !s.ok()) return s;
  return map.Scalar(key, Presence::kOptional, "a string");
}

// The entry named `name` of the list `kind` ("clusters"), returning its `field` ("cluster").
absl::StatusOr<YAML::Node> Named(const YAML::Node& root, const char* kind, const char* field,
                                 const std::string& name, const std::string& path) {
  YAML::Node list = root[kind];
  if (list.IsDefined() && !list.IsNull() && !list.IsSequence()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig ", path, ": ", kind, " must be a list"));
  }
  if (list.IsSequence()) {
    for (const YAML::Node& entry : list) {
      if (entry.IsMap() && entry["name"].IsScalar() && entry["name"].Scalar() == name) {
        YAML::Node v = entry[field];
        if (!v.IsMap()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "kubeconfig ", path, ": ", kind, "[name=", name, "].", field, " must be a map"));
        }
        return v;
      }
    }
  }
  return absl::NotFoundError(absl::StrCat("kubeconfig ", path, ": no entry named \"", name,
                                          "\" in ", kind, "; check the context's ", field,
                                          " and the file's ", kind, " list"));
}

// A path in a kubeconfig is relative to the file's directory, as kubectl resolves it.
std::string Resolve(const std::string& kubeconfig, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return (std::filesystem::path(kubeconfig).parent_path() / p).lexically_normal().string();
}

absl::StatusOr<std::string> ReadFileNamed(const std::string& path, const std::string& what) {
  return ReadRegularFile(path, kMaxFileBytes, what);
}

absl::StatusOr<std::string> DecodeData(const std::string& b64, const std::string& where) {
  std::string out;
  std::string compact;
  for (char c : b64) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) compact += c;
  }
  if (!absl::Base64Unescape(compact, &out) || out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is not base64 (kubeconfig *-data fields hold base64-encoded PEM)"));
  }
  return out;
}

bool IsIpv6(absl::string_view host) { return host.find(':') != absl::string_view::npos; }

}  // namespace

InClusterSource InClusterSource::FromEnvironment() {
  InClusterSource s;
  if (const char* h = getenv("KUBERNETES_SERVICE_HOST")) s.host = h;
  if (const char* p = getenv("KUBERNETES_SERVICE_PORT")) s.port = p;
  return s;
}

absl::Status ParseServerUrl(const std::string& url, const std::string& where, KubeConfig* config) {
  absl::string_view rest = url;
  if (absl::StartsWithIgnoreCase(rest, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " is \"", url,
        "\": plain http:// is refused, because the bearer token would cross the network in the "
        "clear; use the API server's https:// address"));
  }
  if (!absl::ConsumePrefix(&rest, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is \"", url, "\": not an https:// URL (like https://10.0.0.1:6443)"));
  }
  size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  absl::string_view path = slash == absl::string_view::npos ? "" : rest.substr(slash);
  if (authority.find('@') != absl::string_view::npos ||
      path.find_first_of("?#") != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is \"", url,
                     "\": user info, a query or a fragment are not allowed in a server URL"));
  }
  absl::string_view host = authority;
  absl::string_view port;
  if (absl::ConsumePrefix(&host, "[")) {
    size_t close = host.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is \"", url, "\": an unclosed [ in the host"));
    }
    absl::string_view after = host.substr(close + 1);
    host = host.substr(0, close);
    if (!after.empty() && !absl::ConsumePrefix(&after, ":")) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is \"", url, "\": junk after the host"));
    }
    port = after;
  } else {
    size_t colon = host.rfind(':');
    if (colon != absl::string_view::npos) {
      port = host.substr(colon + 1);
      host = host.substr(0, colon);
    }
  }
  int p = 443;
  if (!port.empty() && (!absl::SimpleAtoi(port, &p) || p < 1 || p > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is \"", url, "\": a bad port"));
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is \"", url, "\": no host"));
  }
  while (absl::ConsumeSuffix(&path, "/")) {
  }
  config->server = url;
  config->host = std::string(host);
  config->port = p;
  config->base_path = std::string(path);
  return absl::OkStatus();
}

absl::StatusOr<KubeConfig> LoadInClusterConfig(const InClusterSource& source) {
  if (source.host.empty() || source.port.empty()) {
    return absl::FailedPreconditionError(
        "not running in a Kubernetes pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
        "are not both set; run gpulet as a pod with a service account, or give --kubeconfig");
  }
  KubeConfig c;
  std::string url = absl::StrCat("https://", IsIpv6(source.host) ? "[" : "", source.host,
                                 IsIpv6(source.host) ? "]" : "", ":", source.port);
  absl::Status s = ParseServerUrl(
      url, "the API server address from KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT", &c);
  if (!s.ok()) return s;
  const char* fix =
      "; the pod needs a service account token mounted (automountServiceAccountToken must not "
      "be false)";
  absl::StatusOr<std::string> ca = ReadFileNamed(source.ca_file, "service account CA file");
  if (!ca.ok()) return Annotate(ca.status(), absl::StrCat("in-cluster configuration", fix));
  c.ca_pem = std::move(*ca);
  c.ca_source = source.ca_file;
  // The token is read now to fail early; the client re-reads it from token_file as it rotates.
  absl::StatusOr<std::string> token =
      ReadFileNamed(source.token_file, "service account token file");
  if (!token.ok()) return Annotate(token.status(), absl::StrCat("in-cluster configuration", fix));
  if (absl::StripAsciiWhitespace(*token).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("in-cluster configuration: the service account token file ", source.token_file,
                     " is empty", fix));
  }
  c.token_file = source.token_file;
  absl::StatusOr<std::string> ns =
      ReadFileNamed(source.namespace_file, "service account namespace file");
  if (ns.ok()) c.namespace_name = std::string(absl::StripAsciiWhitespace(*ns));
  c.source = "in-cluster service account";
  return c;
}

absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  absl::StatusOr<std::string> text = ReadFileNamed(path, "kubeconfig file");
  if (!text.ok()) return text.status();
  const std::string file = absl::StrCat("kubeconfig ", path);
  absl::StatusOr<YAML::Node> loaded = yaml::Load(*text, file);
  if (!loaded.ok()) return loaded.status();
  const YAML::Node& root = *loaded;
  if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(file, " is not a YAML map"));
  try {
    std::string ctx_name = context;
    if (ctx_name.empty()) {
      absl::StatusOr<std::optional<std::string>> cur =
          Scalar(yaml::Map(root, file), "current-context");
      if (!cur.ok()) return cur.status();
      if (!cur->has_value() || (*cur)->empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            file,
            " has no current-context; set one (kubectl config use-context) or name a context"));
      }
      ctx_name = **cur;
    }
    absl::StatusOr<YAML::Node> ctx = Named(root, "contexts", "context", ctx_name, path);
    if (!ctx.ok()) return ctx.status();
    const std::string ctx_path = absl::StrCat("contexts[name=", ctx_name, "].context");
    const std::string ctx_where = absl::StrCat(file, ": ", ctx_path);
    const yaml::Map ctx_map(*ctx, file, ctx_path);
    absl::StatusOr<std::optional<std::string>> cluster_name = Scalar(ctx_map, "cluster");
    absl::StatusOr<std::optional<std::string>> user_name = Scalar(ctx_map, "user");
    absl::StatusOr<std::optional<std::string>> ns = Scalar(ctx_map, "namespace");
    if (!cluster_name.ok()) return cluster_name.status();
    if (!user_name.ok()) return user_name.status();
    if (!ns.ok()) return ns.status();
    if (!cluster_name->has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(ctx_where, " names no cluster"));
    }
    if (!user_name->has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(ctx_where, " names no user: gpulet needs credentials for every call"));
    }

    KubeConfig c;
    c.source = file;
    c.namespace_name = ns->value_or("");
    // The cluster.
    absl::StatusOr<YAML::Node> cluster = Named(root, "clusters", "cluster", **cluster_name, path);
    if (!cluster.ok()) return cluster.status();
    const std::string cluster_path = absl::StrCat("clusters[name=", **cluster_name, "].cluster");
    const std::string cw = absl::StrCat(file, ": ", cluster_path);
    const yaml::Map cluster_map(*cluster, file, cluster_path);
    YAML::Node insecure = (*cluster)["insecure-skip-tls-verify"];
    if (insecure.IsScalar() && insecure.as<bool>(false)) {
      return absl::InvalidArgumentError(absl::StrCat(
          cw,
          ".insecure-skip-tls-verify is true: gpulet never talks to an API server it cannot "
          "verify; remove the key and set certificate-authority or certificate-authority-data"));
    }
    for (const char* key : {"proxy-url"}) {
      if ((*cluster)[key].IsDefined() && !(*cluster)[key].IsNull()) {
        return absl::InvalidArgumentError(
            absl::StrCat(cw, ".", key, " is set: gpulet does not go through proxies; remove it"));
      }
    }
    absl::StatusOr<std::optional<std::string>> server = Scalar(cluster_map, "server");
    if (!server.ok()) return server.status();
    if (!server->has_value()) return absl::InvalidArgumentError(absl::StrCat(cw, " has no server"));
    absl::Status s = ParseServerUrl(**server, absl::StrCat(cw, ".server"), &c);
    if (!s.ok()) return s;
    absl::StatusOr<std::optional<std::string>> tsn = Scalar(cluster_map, "tls-server-name");
    if (!tsn.ok()) return tsn.status();
    c.tls_server_name = tsn->value_or("");
    absl::StatusOr<std::optional<std::string>> ca_data =
        Scalar(cluster_map, "certificate-authority-data");
    absl::StatusOr<std::optional<std::string>> ca_file =
        Scalar(cluster_map, "certificate-authority");
    if (!ca_data.ok()) return ca_data.status();
    if (!ca_file.ok()) return ca_file.status();
    if (ca_data->has_value()) {
      c.ca_source = absl::StrCat(cw, ".certificate-authority-data");
      absl::StatusOr<std::string> pem = DecodeData(**ca_data, c.ca_source);
      if (!pem.ok()) return pem.status();
      c.ca_pem = std::move(*pem);
    } else if (ca_file->has_value()) {
      c.ca_source = Resolve(path, **ca_file);
      absl::StatusOr<std::string> pem = ReadFileNamed(c.ca_source, "certificate-authority file");
      if (!pem.ok()) return Annotate(pem.status(), absl::StrCat(cw, ".certificate-authority"));
      c.ca_pem = std::move(*pem);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          cw,
          " has neither certificate-authority nor certificate-authority-data: gpulet trusts "
          "only the cluster's own CA, never the system store; add the cluster's CA"));
    }

    // The user.
    absl::StatusOr<YAML::Node> user = Named(root, "users", "user", **user_name, path);
    if (!user.ok()) return user.status();
    const std::string user_path = absl::StrCat("users[name=", **user_name, "].user");
    const std::string uw = absl::StrCat(file, ": ", user_path);
    const yaml::Map user_map(*user, file, user_path);
    for (const char* key : {"exec", "auth-provider", "username", "password", "as", "impersonate"}) {
      if ((*user)[key].IsDefined() && !(*user)[key].IsNull()) {
        return absl::InvalidArgumentError(absl::StrCat(
            uw, ".", key,
            " is set, which gpulet does not support; give the user a token, tokenFile or a "
            "client certificate and key"));
      }
    }
    struct Field {
      const char* key;
      std::optional<std::string> value;
    };
    Field fields[] = {{"token", {}},
                      {"tokenFile", {}},
                      {"client-certificate", {}},
                      {"client-certificate-data", {}},
                      {"client-key", {}},
                      {"client-key-data", {}}};
    for (Field& f : fields) {
      absl::StatusOr<std::optional<std::string>> v = Scalar(user_map, f.key);
      if (!v.ok()) return v.status();
      f.value = *v;
      if (f.value.has_value() && f.value->empty()) f.value.reset();
    }
    auto& [token, token_file, cert_file, cert_data, key_file, key_data] = fields;
    // tokenFile wins over token: it is the one that can rotate.
    if (token_file.value.has_value()) {
      c.token_file = Resolve(path, *token_file.value);
      absl::StatusOr<std::string> t = ReadFileNamed(c.token_file, "token file");
      if (!t.ok()) return Annotate(t.status(), absl::StrCat(uw, ".tokenFile"));
    } else if (token.value.has_value()) {
      c.token = *token.value;
    }
    auto load = [&](const Field& data, const Field& file_field, std::string* out) -> absl::Status {
      if (data.value.has_value()) {
        absl::StatusOr<std::string> pem = DecodeData(*data.value, absl::StrCat(uw, ".", data.key));
        if (!pem.ok()) return pem.status();
        *out = std::move(*pem);
      } else if (file_field.value.has_value()) {
        absl::StatusOr<std::string> pem =
            ReadFileNamed(Resolve(path, *file_field.value), absl::StrCat(file_field.key, " file"));
        if (!pem.ok()) return Annotate(pem.status(), absl::StrCat(uw, ".", file_field.key));
        *out = std::move(*pem);
      }
      return absl::OkStatus();
    };
    if (absl::Status ls = load(cert_data, cert_file, &c.client_cert_pem); !ls.ok()) return ls;
    if (absl::Status ls = load(key_data, key_file, &c.client_key_pem); !ls.ok()) return ls;
    if (c.client_cert_pem.empty() != c.client_key_pem.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          uw,
          " has a client certificate without a key or a key without a certificate: give "
          "client-certificate(-data) and client-key(-data) together"));
    }
    if (c.token.empty() && c.token_file.empty() && c.client_cert_pem.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(uw,
                       " has no credentials gpulet can use: give token, tokenFile, or "
                       "client-certificate(-data) with client-key(-data)"));
    }
    return c;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", e.what()));
  }
}

}  // namespace gpulet::kube
