// http::Server: gpulet's one HTTP server (libmicrohttpd on an epoll loop of its own), apart
// from what it serves. The metrics endpoint (metrics/metrics_server.h: /metrics, /healthz,
// /status) and the image registry (registry/registry_server.h) each give it a Handler; the
// server owns the sockets, the limits, TLS and basic auth.
//
// One thread, "gpulet-http", serves every connection, so an idle or slow connection costs a
// file descriptor and its buffer, never a thread. Limits: a connection must send a whole
// request header within `header_deadline` of its accept or of the end of its previous
// response (so a slowloris client, and an idle keep-alive connection, are closed then); a
// connection silent for `idle_timeout` is closed; at most `max_connections` are open: the next
// one closes the oldest connection that is waiting for a header, and when none is waiting the
// new connection is refused. The soft RLIMIT_NOFILE is raised (up to the hard limit) to fit
// the cap. These deadlines run on the real monotonic clock: they bound real sockets.
//
// TLS and basic auth come from a Prometheus web-config file (http/web_config.h). bcrypt takes
// tens of milliseconds, so basic auth never runs on the event thread: the connection is
// suspended, a fixed pool ("gpulet-httpauth", `auth_threads`) checks the header and resumes
// it; other connections are served meanwhile. More than `max_pending_auth` waiting checks are
// answered 503 at once. Paths in Options::open_paths are served without auth.
//
// Only reads are served: GET and HEAD requests reach the handler once their header and any
// body (read and dropped) are in. Any other method is answered by the server itself, at its
// header and before any auth, with Options::refused_write (405, Allow: GET, HEAD), and the
// connection closes after it (its body is never read); so no write reaches a handler, with
// or without auth.
//
// Thread-safety: Start/Stop from one thread; the Handler runs on "gpulet-http" only, and must
// not block (it answers from prebuilt data).
#ifndef GPULET_HTTP_SERVER_H_
#define GPULET_HTTP_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "http/basic_auth.h"
#include "http/web_config.h"

namespace gpulet::http {

// What connections may cost the server; the defaults are the metrics endpoint's.
struct Limits {
  // Time a connection has to send a whole request header, from its accept or from the end
  // of its previous response.
  absl::Duration header_deadline = absl::Seconds(10);
  // A connection that sends and receives nothing this long is closed (whole seconds).
  absl::Duration idle_timeout = absl::Seconds(10);
  // Open connections at most (see the file comment for what happens beyond).
  int max_connections = 2048;
  // Threads that check basic auth, and checks that may wait for them.
  int auth_threads = 2;
  int max_pending_auth = 64;
};

// What a handler sees of a request. The views are valid during the call only.
struct Request {
  absl::string_view method;
  absl::string_view path;
  absl::string_view accept;  // the Accept header; "" when absent
};

// A handler's answer.
struct Response {
  unsigned status = 200;
  const char* content_type = "text/plain";  // copied when the response is built
  // The body; shared, so that a handler may hand the same text to many requests.
  std::shared_ptr<const std::string> body{};
  // Or a part of a file: sent from `fd` (duplicated by the server) at `offset`.
  int file_fd = -1;
  uint64_t file_offset = 0, file_size = 0;
  // Sent gzip-compressed (with Vary: Accept-Encoding) to a client whose Accept-Encoding
  // allows gzip; plain when zlib fails.
  bool compress = false;
  // A handler that returns the same body object to many requests (an exposition made once a
  // round) names a slot, 0 to Options::cache_slots - 1: the server keeps the finished
  // responses (plain and gzip) built from that body until the slot's body changes, so each is
  // built and compressed once; they keep the headers of the answer they were built from.
  int cache_slot = -1;
  std::vector<std::pair<std::string, std::string>> headers{};  // more headers
};

using Handler = std::function<Response(const Request&)>;

struct Options {
  // Names the server in its log lines and errors ("metrics server"), and the option that set
  // its address ("--metrics-address").
  std::string name = "HTTP server";
  std::string address_flag = "--address";
  Limits limits{};
  WebConfig web{};  // TLS and basic auth; empty: plain HTTP, no auth
  // Served without basic auth ("/healthz").
  std::vector<std::string> open_paths{};
  int cache_slots = 0;
  // One line per request on the log (info): method, path, status.
  bool access_log = false;
  // The answer to a method other than GET and HEAD (its status is 405 whatever is set here;
  // Allow: GET, HEAD is added).
  Response refused_write{.body =
                             std::make_shared<const std::string>("only GET and HEAD are served\n")};
};

class Server {
 public:
  Server(Handler handler, Options options);
  ~Server();  // Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds `address` (":9400", "127.0.0.1:9400", "[::1]:9400"; port 0 picks one) and serves
  // on a thread. Fails naming the address (Unavailable) or the cert and key
  // (InvalidArgument, "cannot start HTTPS ..."); FailedPrecondition while already serving
  // (after Stop it may start again). `beside`: a server running on the same address that this
  // one replaces (a reload): the two share its listening socket (a duplicate descriptor), so
  // the port never closes, nothing else can take it in between, and a fixed port needs no
  // second bind.
  absl::Status Start(const std::string& address, const Server* beside = nullptr);
  // Closes the listener and every connection; idempotent, and fine before Start.
  void Stop();
  int port() const { return port_; }
  const Options& options() const { return options_; }

 private:
  class Impl;
  // Serves on `fd` (bound and listening) through a new Impl.
  absl::Status Serve(const std::string& address, int fd, bool ipv6, int port);

  Handler handler_;
  Options options_;
  BasicAuth auth_;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  // While serving: the address it was started on and its listening socket (MHD's to close).
  std::string address_;
  int listen_fd_ = -1;
  bool ipv6_ = false;
};

// True when an Accept-Encoding value allows gzip ("gzip", "x-gzip", not with q=0).
bool AcceptsGzip(absl::string_view accept_encoding);

}  // namespace gpulet::http

#endif  // GPULET_HTTP_SERVER_H_
