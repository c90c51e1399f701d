// Asking a running `gpulet serve` for its /status (a StatusReport) over its metrics address:
// used by `gpulet status` (the table) and `gpulet doctor` (the gpu.health check).
//
// Plain HTTP only: a daemon whose metrics.webConfigFile turns on TLS or basic auth answers
// with an error that says so.
//
// Thread-safety: stateless functions; each call opens its own connection.
#ifndef GPULET_CLI_DAEMON_CLIENT_H_
#define GPULET_CLI_DAEMON_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "state/status_report.h"

namespace gpulet::cli {

struct DaemonAddress {
  std::string host = "127.0.0.1";
  int port = 9400;

  std::string ToString() const;  // "127.0.0.1:9400"
};

// "host:port", ":port" or "port"-less "host" (port 9400). InvalidArgument naming the text
// otherwise.
absl::StatusOr<DaemonAddress> ParseDaemonAddress(absl::string_view text);

// GET /status as its JSON text. Unavailable (daemon unreachable or not 200) with a message
// naming the address and what to check.
absl::StatusOr<std::string> FetchStatusText(const DaemonAddress& address);

// FetchStatusText, parsed. DataLoss when the answer is not gpulet's status JSON.
absl::StatusOr<state::StatusReport> FetchStatus(const DaemonAddress& address);

}  // namespace gpulet::cli

#endif  // GPULET_CLI_DAEMON_CLIENT_H_
