// libFuzzer target for the talosconfig reader (talos/talosconfig.h): the file comes from a
// Secret Talos writes, mounted into gpulet's pod, so any bytes must give a config or an
// InvalidArgument error that names the file, never a crash. Properties checked:
//  - an error is InvalidArgument and names the talosconfig;
//  - a config has a host without '/', '@' or spaces, a port from 1 to 65535, PEM blocks for
//    the CA, the certificate and the key, and no key left under Talos' Ed25519 label;
//  - CertificateRoles never crashes on whatever the certificate field decoded to.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "talos/talosconfig.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gpulet::talos::Talosconfig> c =
      gpulet::talos::ParseTalosconfig(text, "/var/run/secrets/talos.dev/config");
  if (!c.ok()) {
    if (c.status().code() != absl::StatusCode::kInvalidArgument ||
        !absl::StrContains(c.status().message(), "talosconfig /var/run/secrets/talos.dev/config")) {
      abort();
    }
    return 0;
  }
  if (c->host.empty() || c->host.find_first_of("/@ ") != std::string::npos || c->port < 1 ||
      c->port > 65535) {
    abort();
  }
  if (!absl::StrContains(c->ca_pem, "-----BEGIN CERTIFICATE-----") ||
      !absl::StrContains(c->crt_pem, "-----BEGIN CERTIFICATE-----") ||
      !absl::StrContains(c->key_pem, "PRIVATE KEY-----") ||
      absl::StrContains(c->key_pem, "-----BEGIN ED25519 PRIVATE KEY-----")) {
    abort();
  }
  gpulet::talos::CertificateRoles(c->crt_pem);
  return 0;
}
