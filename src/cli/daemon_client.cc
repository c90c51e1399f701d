#include "cli/daemon_client.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace gpulet {

std::string DaemonAddress::ToString() const { return absl::StrCat(host, ":", port); }

absl::StatusOr<DaemonAddress> ParseDaemonAddress(absl::string_view text) {
  DaemonAddress address;
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos) {
    if (!text.empty()) address.host = std::string(text);
    return address;
  }
  if (colon > 0) address.host = std::string(text.substr(0, colon));
  if (!absl::SimpleAtoi(text.substr(colon + 1), &address.port) || address.port <= 0 ||
      address.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' has no valid port; write host:port, e.g. 127.0.0.1:9400"));
  }
  return address;
}

absl::StatusOr<std::string> FetchStatusText(const DaemonAddress& address) {
  httplib::Client client(address.host, address.port);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(5, 0);
  httplib::Result res = client.Get("/status");
  if (!res || res->status != 200) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach gpulet serve at ", address.ToString(), "/status (",
                     res ? absl::StrCat("HTTP ", res->status) : httplib::to_string(res.error()),
                     "). Is the daemon running, and is the address its metrics.address?"));
  }
  return res->body;
}

absl::StatusOr<StatusReport> FetchStatus(const DaemonAddress& address) {
  absl::StatusOr<std::string> text = FetchStatusText(address);
  if (!text.ok()) return text.status();
  absl::StatusOr<StatusReport> report = StatusReport::FromJsonText(*text);
  if (!report.ok()) {
    return absl::DataLossError(absl::StrCat("the answer of ", address.ToString(),
                                            "/status is not gpulet status JSON (",
                                            report.status().message(),
                                            "). Is it the metrics address of a gpulet of the same "
                                            "version?"));
  }
  return report;
}

}  // namespace gpulet
