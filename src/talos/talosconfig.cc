#include "talos/talosconfig.h"

#include <arpa/inet.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/read_file.h"
#include "yaml/kind.h"
#include "yaml/reader.h"

namespace gpulet::talos {
namespace {

// An error at `key`'s line that names its path ("contexts.default.ca is not base64").
absl::Status KeyError(const yaml::Map& map, absl::string_view key, absl::string_view what) {
  return map.ErrorAtKey(key, absl::StrCat(map.PathOf(key), " ", what));
}

constexpr size_t kMaxBytes = size_t{256} << 10;  // a talosconfig is a few KiB

absl::StatusOr<std::string> DecodePem(const yaml::Map& ctx, absl::string_view key,
                                      absl::string_view begins) {
  std::string b64;
  if (absl::Status s = ctx.NonEmptyString(key, &b64); !s.ok()) return s;
  std::string compact;
  for (char c : b64) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) compact += c;
  }
  std::string pem;
  if (!absl::Base64Unescape(compact, &pem) || pem.empty()) {
    return KeyError(ctx, key, "is not base64 (a talosconfig holds base64-encoded PEM)");
  }
  if (!absl::StrContains(pem, begins)) {
    return KeyError(ctx, key,
                    absl::StrCat("does not decode to PEM with a \"", begins,
                                 "\" block; regenerate the talosconfig"));
  }
  return pem;
}

}  // namespace

absl::StatusOr<Talosconfig> ParseTalosconfig(absl::string_view text, const std::string& source) {
  const std::string origin = absl::StrCat("talosconfig ", source);
  absl::StatusOr<YAML::Node> root = yaml::Load(text, origin, {kMaxBytes});
  if (!root.ok()) return root.status();
  yaml::Map top(*root, origin);
  if (absl::Status s = top.Check(); !s.ok()) return s;
  Talosconfig out;
  out.source = source;
  if (absl::Status s = top.NonEmptyString("context", &out.context); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), " (the talosconfig names no current context)"));
  }
  const YAML::Node contexts = top.Get("contexts");
  if (!contexts.IsDefined() || !contexts.IsMap()) {
    return KeyError(top, "contexts",
                    absl::StrCat("must be a mapping of contexts, not ", yaml::KindName(contexts)));
  }
  yaml::Map all(contexts, origin, "contexts");
  if (absl::Status s = all.Check(); !s.ok()) return s;
  if (!all.Has(out.context)) {
    return all.Error(absl::StrCat("has no context '", out.context,
                                  "', the one `context` names; regenerate the talosconfig"));
  }
  const YAML::Node ctx_node = all.Get(out.context);
  if (!ctx_node.IsMap()) {
    return KeyError(all, out.context,
                    absl::StrCat("must be a mapping, not ", yaml::KindName(ctx_node)));
  }
  yaml::Map ctx = all.Child(out.context);
  if (absl::Status s = ctx.Check(); !s.ok()) return s;
  const YAML::Node endpoints = ctx.Get("endpoints");
  if (!endpoints.IsSequence() || endpoints.size() == 0 || !endpoints[0].IsScalar() ||
      endpoints[0].Scalar().empty()) {
    return KeyError(ctx, "endpoints",
                    "must list at least one endpoint (Talos writes talos.default)");
  }
  // host, host:port, [v6] or [v6]:port; a bare IPv6 address has more than one colon.
  std::string endpoint = absl::AsciiStrToLower(endpoints[0].Scalar());
  std::optional<std::string> port;
  if (!endpoint.empty() && endpoint[0] == '[') {
    const size_t close = endpoint.find(']');
    if (close == std::string::npos) {
      return KeyError(ctx, "endpoints", absl::StrCat("has '", endpoint, "' with no closing ]"));
    }
    if (close + 1 < endpoint.size()) {
      if (endpoint[close + 1] != ':') {
        return KeyError(ctx, "endpoints",
                        absl::StrCat("has '", endpoint, "', which is not [address]:port"));
      }
      port = endpoint.substr(close + 2);
    }
    out.host = endpoint.substr(1, close - 1);
  } else if (const size_t colon = endpoint.find(':');
             colon != std::string::npos && endpoint.find(':', colon + 1) == std::string::npos) {
    out.host = endpoint.substr(0, colon);
    port = endpoint.substr(colon + 1);
  } else {
    out.host = endpoint;
  }
  if (port.has_value() &&
      (!absl::SimpleAtoi(*port, &out.port) || out.port < 1 || out.port > 65535)) {
    return KeyError(ctx, "endpoints",
                    absl::StrCat("has '", endpoint, "', whose port is not 1-65535"));
  }
  in6_addr v6;
  if (out.host.empty() || out.host.find_first_of("/ @[]") != std::string::npos ||
      (out.host.find(':') != std::string::npos &&
       inet_pton(AF_INET6, out.host.c_str(), &v6) != 1)) {
    return KeyError(ctx, "endpoints",
                    absl::StrCat("has '", endpoint, "', which is not a host or host:port"));
  }
  absl::StatusOr<std::string> ca = DecodePem(ctx, "ca", "-----BEGIN CERTIFICATE-----");
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::string> crt = DecodePem(ctx, "crt", "-----BEGIN CERTIFICATE-----");
  if (!crt.ok()) return crt.status();
  absl::StatusOr<std::string> key = DecodePem(ctx, "key", "PRIVATE KEY-----");
  if (!key.ok()) return key.status();
  out.ca_pem = *std::move(ca);
  out.crt_pem = *std::move(crt);
  // Talos' Ed25519 label, over a PKCS#8 body: the label PKCS#8 has.
  out.key_pem = absl::StrReplaceAll(
      *key, {{"-----BEGIN ED25519 PRIVATE KEY-----", "-----BEGIN PRIVATE KEY-----"},
             {"-----END ED25519 PRIVATE KEY-----", "-----END PRIVATE KEY-----"}});
  // A label left after the rewrite was not a PEM boundary of its own (labels run together,
  // "-----BEGIN ED25519 PRIVATE KEY-----BEGIN ED25519 ..."): not a key Talos writes.
  if (absl::StrContains(out.key_pem, "ED25519 PRIVATE KEY-----")) {
    return KeyError(ctx, "key", "is not one PEM private key (its ED25519 labels run together)");
  }
  return out;
}

absl::StatusOr<Talosconfig> ReadTalosconfig(const std::string& path) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxBytes, "talosconfig");
  if (!text.ok()) return text.status();
  return ParseTalosconfig(*text, path);
}

std::vector<std::string> CertificateRoles(const std::string& crt_pem) {
  std::vector<std::string> roles;
  gnutls_x509_crt_t crt = nullptr;
  if (gnutls_x509_crt_init(&crt) < 0) return roles;
  const gnutls_datum_t d{reinterpret_cast<unsigned char*>(const_cast<char*>(crt_pem.data())),
                         static_cast<unsigned int>(crt_pem.size())};
  if (gnutls_x509_crt_import(crt, &d, GNUTLS_X509_FMT_PEM) >= 0) {
    for (unsigned int i = 0; i < 64; ++i) {
      char buf[256];
      size_t size = sizeof(buf);
      if (gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_ORGANIZATION_NAME, i, 0, buf, &size) <
          0) {
        break;
      }
      roles.emplace_back(buf, size);
    }
  }
  gnutls_x509_crt_deinit(crt);
  return roles;
}

}  // namespace gpulet::talos
