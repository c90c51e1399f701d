#include "cli/daemon_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/read_file.h"

namespace gpulet::cli {

namespace {

// One GET over plain HTTP/1.0, written here rather than taken from an HTTP client library:
// the daemon answers /status with a Content-Length and closes, so this is all a client
// needs, and it keeps the gpulet binary free of cpp-httplib, which Debian ships only as a
// shared library that brings libstdc++, OpenSSL and brotli in with it.
constexpr absl::Duration kConnectTimeout = absl::Seconds(2);
constexpr absl::Duration kAnswerTimeout = absl::Seconds(5);

int MillisUntil(absl::Time deadline) {
  return static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
}

// Waits for `events` on fd until the deadline; false on timeout or error (errno set).
bool WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int ready = poll(&p, 1, MillisUntil(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) errno = ETIMEDOUT;
    return ready > 0;
  }
}

// A connected, non-blocking socket to the first address of host:port that answers.
absl::StatusOr<int> Connect(const DaemonAddress& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(address.port);
  if (int rc = getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", address.host, ": ", gai_strerror(rc)));
  }
  std::string why = "no address";
  const absl::Time deadline = absl::Now() + kConnectTimeout;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int err = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        socklen_t len = sizeof(err);
        err =
            WaitFor(fd, POLLOUT, deadline) && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0
                ? err
                : errno;
      }
    }
    if (err == 0) {
      freeaddrinfo(found);
      return fd;
    }
    why = std::strerror(err);
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(absl::StrCat("cannot connect: ", why));
}

struct Answer {
  int status = 0;
  std::string body;
};

absl::StatusOr<Answer> Get(const DaemonAddress& address, absl::string_view path) {
  absl::StatusOr<int> connected = Connect(address);
  if (!connected.ok()) return connected.status();
  UniqueFd fd(*connected);
  const absl::Time deadline = absl::Now() + kAnswerTimeout;
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", address.ToString(), "\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN && WaitFor(fd.get(), POLLOUT, deadline)) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat("cannot send: ", std::strerror(errno)));
    sent += static_cast<size_t>(n);
  }
  std::string data;
  char buf[16384];
  while (true) {
    ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      data.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;  // HTTP/1.0: the server closes after the body
    if (errno == EINTR) continue;
    if (errno == EAGAIN && WaitFor(fd.get(), POLLIN, deadline)) continue;
    return absl::UnavailableError(absl::StrCat("no answer: ", std::strerror(errno)));
  }
  const size_t header_end = data.find("\r\n\r\n");
  if (header_end == std::string::npos) return absl::UnavailableError("not an HTTP answer");
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(data).substr(0, header_end), "\r\n");
  std::vector<absl::string_view> first = absl::StrSplit(lines[0], ' ');
  Answer answer;
  if (first.size() < 2 || !absl::StartsWith(first[0], "HTTP/") ||
      !absl::SimpleAtoi(first[1], &answer.status)) {
    return absl::UnavailableError("not an HTTP answer");
  }
  answer.body = data.substr(header_end + 4);
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t length = 0;
    if (absl::StartsWithIgnoreCase(lines[i], "content-length:") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(lines[i].substr(15)), &length)) {
      if (answer.body.size() < length) return absl::UnavailableError("answer cut short");
      answer.body.resize(length);
    }
  }
  return answer;
}

}  // namespace

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
  absl::StatusOr<Answer> res = Get(address, "/status");
  if (!res.ok() || res->status != 200) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach gpulet serve at ", address.ToString(), "/status (",
                     res.ok() ? absl::StrCat("HTTP ", res->status) : res.status().message(),
                     "). Is the daemon running, and is the address its metrics.address?"));
  }
  return std::move(res->body);
}

absl::StatusOr<state::StatusReport> FetchStatus(const DaemonAddress& address) {
  absl::StatusOr<std::string> text = FetchStatusText(address);
  if (!text.ok()) return text.status();
  absl::StatusOr<state::StatusReport> report = state::StatusReport::FromJsonText(*text);
  if (!report.ok()) {
    return absl::DataLossError(absl::StrCat("the answer of ", address.ToString(),
                                            "/status is not gpulet status JSON (",
                                            report.status().message(),
                                            "). Is it the metrics address of a gpulet of the same "
                                            "version?"));
  }
  return report;
}

}  // namespace gpulet::cli
