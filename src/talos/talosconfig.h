// Talosconfig: what a talosconfig file says about reaching Talos' API (the endpoint, the
// Talos CA, the client certificate and key), as Talos writes it into the Secret of a
// talos.dev/v1alpha1 ServiceAccount (mounted in gpulet's pod at
// /var/run/secrets/talos.dev/config; docs/remediation.md).
//
// The file names a current `context`; that context holds `endpoints` (a list of hosts, each
// optionally with a port, 50000 when none) and `ca`, `crt` and `key`, each base64 of PEM.
// Keys this reader does not use (nodes, auth, cluster) are ignored: the file is Talos'
// to extend. Talos labels an Ed25519 client key `-----BEGIN ED25519 PRIVATE KEY-----`
// though its body is PKCS#8, which TLS libraries read only as `PRIVATE KEY`: the label is
// rewritten (../shared/reference/quotas-remediation-realk8s.md, section 4.2).
//
// Errors are InvalidArgument and name the file, the key and what to do.
//
// Thread-safety: pure functions; safe from any thread.
#ifndef GPULET_TALOS_TALOSCONFIG_H_
#define GPULET_TALOS_TALOSCONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpulet::talos {

// Talos' API port (apid), when an endpoint names none.
inline constexpr int kApidPort = 50000;

struct Talosconfig {
  std::string source;   // the file, for messages
  std::string context;  // the context read
  std::string host;     // the first endpoint's host (IPv6 without brackets)
  int port = kApidPort;
  std::string ca_pem;
  std::string crt_pem;
  std::string key_pem;  // with the label TLS libraries read
};

// Reads `text`, from `source` (a path, for messages).
absl::StatusOr<Talosconfig> ParseTalosconfig(absl::string_view text, const std::string& source);

// Reads the file at `path`.
absl::StatusOr<Talosconfig> ReadTalosconfig(const std::string& path);

// The roles a client certificate (PEM) carries: Talos reads them from the subject's
// Organization values ("os:operator"). Empty when it names none or cannot be read.
std::vector<std::string> CertificateRoles(const std::string& crt_pem);

}  // namespace gpulet::talos

#endif  // GPULET_TALOS_TALOSCONFIG_H_
