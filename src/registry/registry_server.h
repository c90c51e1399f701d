// RegistryServer: a read-only container registry over one OCI image archive, the pull half of
// the OCI distribution API (what containerd, CRI-O, podman and skopeo use to pull): /v2/,
// manifests by tag or digest, blobs by digest, the tag list; GET and HEAD only. It is what
// `gpulet image-serve` runs so that a node with no registry can pull gpulet's image from the
// machine that built it (docs/no-registry.md).
//
// Plain HTTP, on purpose: clients pull by digest (the manifests gpulet renders pin it), and
// containerd checks every manifest and blob against its digest, so a changed byte is refused
// whatever the transport. Nothing can be pushed, and only the archive's own blobs are served.
//
// Served by http::Server (http/server.h: one event thread, its header deadline and connection
// cap); a connection silent for `idle_timeout` is closed; at most `max_connections` are open.
//
// Thread-safety: Start/Stop from one thread; requests are served on the server's thread from
// the archive, which is immutable.
#ifndef GPULET_REGISTRY_REGISTRY_SERVER_H_
#define GPULET_REGISTRY_REGISTRY_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "http/server.h"
#include "registry/oci_archive.h"

namespace gpulet::registry {

struct ServerOptions {
  // The repository path the image is served under ("gpulet": pulled as HOST:PORT/gpulet).
  std::string repository;
  absl::Duration idle_timeout = absl::Seconds(60);
  int max_connections = 256;
  // One line per request on the log (info): method, path, status.
  bool access_log = true;
};

class RegistryServer {
 public:
  // `archive` must outlive the server.
  RegistryServer(const OciArchive* archive, ServerOptions options);
  ~RegistryServer();
  RegistryServer(const RegistryServer&) = delete;
  RegistryServer& operator=(const RegistryServer&) = delete;

  // Binds `address` (as ListenTcp reads it; `flag` names the option in errors) and serves.
  absl::Status Start(const std::string& address, const std::string& flag = "--address");
  void Stop();
  int port() const { return server_ != nullptr ? server_->port() : 0; }
  // Reads answered so far (for tests and the exit summary; a refused push is not counted).
  uint64_t requests() const { return requests_.load(); }

 private:
  // The answer to one request (status, headers, body or blob), on the server's thread.
  http::Response Answer(absl::string_view url);

  const OciArchive* archive_;
  ServerOptions options_;
  std::unique_ptr<http::Server> server_;
  std::atomic<uint64_t> requests_{0};
};

}  // namespace gpulet::registry

#endif  // GPULET_REGISTRY_REGISTRY_SERVER_H_
