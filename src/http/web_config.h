// WebConfig: the TLS and basic-auth settings of gpulet's HTTP server (http/server.h), read from a
// Prometheus exporter-toolkit web-config file (the `metrics.webConfigFile` key):
//
//   tls_server_config: {cert_file: PATH, key_file: PATH}
//   basic_auth_users: {USER: BCRYPT-HASH, ...}
//   http_server_config: {http2: BOOL}        # accepted and ignored (gpulet serves HTTP/1.1)
//
// It fails closed: the file asks for protection, so anything gpulet cannot honour exactly is
// an error, never a server with less TLS or auth than the file says. Errors: YAML that does
// not parse, an unknown or repeated key, a value of the wrong type (a list where a mapping
// or a string is expected), a section present but empty, a cert_file without a key_file
// (or the reverse), a cert or key that is not a readable PEM file, a user name that is empty
// or holds ':', a hash that is not bcrypt ($2a$, $2b$ or $2y$, cost 04 to 31), a file that
// names neither TLS nor users, and a file that is not a regular file of at most 1 MiB. Every
// message names the file, the key (dotted, e.g. "tls_server_config.cert_file") and what to do.
// A relative cert_file or key_file is used as written (relative to gpulet's working
// directory).
//
// Thread-safety: pure functions of their input (LoadWebConfig also reads files); safe from
// any thread.
#ifndef GPULET_HTTP_WEB_CONFIG_H_
#define GPULET_HTTP_WEB_CONFIG_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gpulet::http {

struct WebConfig {
  std::string cert_file, key_file;           // both set: serve HTTPS
  std::map<std::string, std::string> users;  // user → bcrypt hash
  // The PEM texts LoadWebConfig read from cert_file and key_file: the server uses exactly
  // what was checked, and a certificate rotated at the same path counts as a change.
  std::string cert_pem, key_pem;
};

// Parses web-config YAML; `origin` names it in messages. Touches no file: the cert and key
// are checked by LoadWebConfig.
absl::StatusOr<WebConfig> ParseWebConfig(const std::string& yaml, const std::string& origin);

// Reads the web-config file at `path` (a regular file of at most 1 MiB), parses it and checks
// that its cert_file and key_file are readable PEM files; relative cert_file and key_file
// paths are taken relative to the web-config file's directory (as Prometheus exporters do)
// and returned absolute. An empty `path` gives no TLS and no auth.
absl::StatusOr<WebConfig> LoadWebConfig(const std::string& path);

// The files the web config at `path` reads: itself, and the certificate and key it names
// (absolute) when it can be loaded. Empty for an empty `path`. For the config watcher, so that
// a certificate renewed in place is reloaded.
std::vector<std::string> WebConfigFiles(const std::string& path);

// Whether `hash` is a bcrypt hash: $2a$, $2b$ or $2y$, a two-digit cost from 04 to 31, and
// 53 characters of bcrypt's base64 (22 of salt, 31 of hash).
bool IsBcryptHash(const std::string& hash);

}  // namespace gpulet::http

#endif  // GPULET_HTTP_WEB_CONFIG_H_
