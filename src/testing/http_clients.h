// Raw HTTP/1.1 clients over loopback TCP for tests and benchmarks of gpulet's HTTP server:
// well-behaved requests with a deadline, idle keep-alive connections, and slowloris
// connections (a partial request header, then a byte now and then, or nothing).
//
// Thread-safety: each object is used from one thread, except SlowClients' own drip thread.
#ifndef GPULET_TESTING_HTTP_CLIENTS_H_
#define GPULET_TESTING_HTTP_CLIENTS_H_

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"

namespace gpulet::testing {

// A connected TCP socket to 127.0.0.1:`port`, or -1.
int ConnectLoopback(int port);

// One response read from `fd`: the status, the body (by Content-Length) and whether the
// server said it would close. nullopt when nothing complete arrived before `deadline`.
struct HttpResponse {
  int status = 0;
  std::string body;
  std::string headers;  // the header block, lower-cased names kept as sent
};
std::optional<HttpResponse> ReadResponse(int fd, absl::Time deadline);

// GET `path` on a new connection ("Connection: close"), all within `timeout`.
// `extra_headers` are whole lines without the CRLF.
std::optional<HttpResponse> Get(int port, const std::string& path, absl::Duration timeout,
                                const std::vector<std::string>& extra_headers = {});

// A gzip member's contents (a Content-Encoding: gzip body); "" when `in` is not one.
std::string Gunzip(const std::string& in);

// `count` keep-alive connections that each answered one GET /healthz and now sit idle.
class IdleKeepAlive {
 public:
  ~IdleKeepAlive();
  // False when a connection could not be made or its first request was not answered 200.
  bool Open(int port, int count, absl::Duration timeout);
  // Sends GET /healthz again on every connection; how many answered 200 within `timeout`.
  int Reuse(absl::Duration timeout);
  int size() const { return static_cast<int>(fds_.size()); }

 private:
  std::vector<int> fds_;
};

// `count` connections that sent "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " and then, when
// `drip` is set, one more byte every `drip_every` (from a thread), never finishing the header.
class SlowClients {
 public:
  ~SlowClients();
  // Returns how many connected.
  int Open(int port, int count, bool drip, absl::Duration drip_every = absl::Seconds(1));
  // How many of them the server has closed by now (end of stream or reset).
  int ClosedByServer();
  int size() const { return static_cast<int>(fds_.size()); }

 private:
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::thread drip_;
};

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_HTTP_CLIENTS_H_
