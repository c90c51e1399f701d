#include "testing/http_clients.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace gpulet::testing {

namespace {

bool SendAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

int MillisLeft(absl::Time deadline) {
  return static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
}

}  // namespace

int ConnectLoopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

std::optional<HttpResponse> ReadResponse(int fd, absl::Time deadline) {
  std::string data;
  size_t header_end = std::string::npos;
  size_t want = std::string::npos;
  HttpResponse r;
  char buf[16384];
  while (true) {
    if (header_end == std::string::npos) {
      header_end = data.find("\r\n\r\n");
      if (header_end != std::string::npos) {
        r.headers = data.substr(0, header_end);
        std::vector<std::string> lines = absl::StrSplit(r.headers, "\r\n");
        std::vector<std::string> first = absl::StrSplit(lines[0], ' ');
        if (first.size() < 2 || !absl::SimpleAtoi(first[1], &r.status)) return std::nullopt;
        size_t length = 0;
        for (size_t i = 1; i < lines.size(); ++i) {
          if (absl::StartsWithIgnoreCase(lines[i], "content-length:")) {
            if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(lines[i].substr(15)), &length)) {
              return std::nullopt;
            }
          }
        }
        want = header_end + 4 + length;
      }
    }
    if (want != std::string::npos && data.size() >= want) {
      r.body = data.substr(header_end + 4, want - header_end - 4);
      return r;
    }
    pollfd p{fd, POLLIN, 0};
    int left = MillisLeft(deadline);
    if (left == 0) return std::nullopt;
    int ready = poll(&p, 1, left);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return std::nullopt;
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    data.append(buf, static_cast<size_t>(n));
  }
}

std::optional<HttpResponse> Get(int port, const std::string& path, absl::Duration timeout,
                                const std::vector<std::string>& extra_headers) {
  absl::Time deadline = absl::Now() + timeout;
  int fd = ConnectLoopback(port);
  if (fd < 0) return std::nullopt;
  std::string req = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  for (const std::string& h : extra_headers) absl::StrAppend(&req, h, "\r\n");
  absl::StrAppend(&req, "Connection: close\r\n\r\n");
  std::optional<HttpResponse> r;
  if (SendAll(fd, req)) r = ReadResponse(fd, deadline);
  close(fd);
  return r;
}

IdleKeepAlive::~IdleKeepAlive() {
  for (int fd : fds_) close(fd);
}

bool IdleKeepAlive::Open(int port, int count, absl::Duration timeout) {
  for (int i = 0; i < count; ++i) {
    int fd = ConnectLoopback(port);
    if (fd < 0) return false;
    fds_.push_back(fd);
  }
  return Reuse(timeout) == count;
}

int IdleKeepAlive::Reuse(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  const std::string req = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  int ok = 0;
  for (int fd : fds_) {
    if (!SendAll(fd, req)) continue;
    std::optional<HttpResponse> r = ReadResponse(fd, deadline);
    if (r && r->status == 200) ++ok;
  }
  return ok;
}

SlowClients::~SlowClients() {
  stop_ = true;
  if (drip_.joinable()) drip_.join();
  for (int fd : fds_) close(fd);
}

int SlowClients::Open(int port, int count, bool drip, absl::Duration drip_every) {
  const std::string partial = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  for (int i = 0; i < count; ++i) {
    int fd = ConnectLoopback(port);
    if (fd < 0) break;
    SendAll(fd, partial);
    fds_.push_back(fd);
  }
  if (drip && !drip_.joinable()) {
    std::vector<int> fds = fds_;
    drip_ = std::thread([this, fds, drip_every] {
      while (!stop_) {
        absl::Time next = absl::Now() + drip_every;
        for (int fd : fds) (void)send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        while (!stop_ && absl::Now() < next) absl::SleepFor(absl::Milliseconds(20));
      }
    });
  }
  return static_cast<int>(fds_.size());
}

int SlowClients::ClosedByServer() {
  int closed = 0;
  char buf[4096];
  for (int fd : fds_) {
    while (true) {
      ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) continue;  // the server said something (an error page): read past it
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) ++closed;
      break;
    }
  }
  return closed;
}

std::string Gunzip(const std::string& in) {
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  if (inflateInit2(&zs, 15 + 16) != Z_OK) return "";
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  std::string out;
  char buf[65536];
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - zs.avail_out);
  }
  inflateEnd(&zs);
  return rc == Z_STREAM_END ? out : "";
}

}  // namespace gpulet::testing
