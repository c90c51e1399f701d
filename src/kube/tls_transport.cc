#include "kube/tls_transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace gpulet::kube {
namespace {

std::string OpenSslErrors() {
  std::string out;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no OpenSSL error recorded" : out;
}

bool IsIpLiteral(const std::string& host) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

std::string HostHeader(const std::string& host, int port) {
  std::string h = host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host;
  if (port != 443) absl::StrAppend(&h, ":", port);
  return h;
}

// Reads every PEM certificate in `pem`.
absl::StatusOr<std::vector<X509*>> ReadCerts(const std::string& pem, const std::string& what) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return absl::ResourceExhaustedError("BIO_new_mem_buf failed");
  std::vector<X509*> certs;
  while (X509* c = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) certs.push_back(c);
  ERR_clear_error();  // the loop ends on a "no start line" error
  BIO_free(bio);
  if (certs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " holds no PEM certificate (\"-----BEGIN CERTIFICATE-----\" blocks)"));
  }
  return certs;
}

MonoTime Now() { return RealClock()->Monotonic(); }

}  // namespace

struct TlsTransport::Connection {
  int fd = -1;
  SSL* ssl = nullptr;
  MonoTime idle_since;
  ~Connection() {
    if (ssl != nullptr) SSL_free(ssl);
    if (fd >= 0) close(fd);
  }
};

namespace {

using Connection = TlsTransport::Connection;

// Waits until `fd` is ready for `events`, the deadline passes (DeadlineExceeded) or *cancel
// turns true (Cancelled).
absl::Status WaitFd(int fd, short events, MonoTime deadline, const std::atomic<bool>* cancel,
                    const char* what) {
  for (;;) {
    if (cancel != nullptr && cancel->load()) return absl::CancelledError("cancelled");
    absl::Duration left = deadline - Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("timed out ", what));
    }
    if (cancel != nullptr) left = std::min(left, absl::Milliseconds(100));
    pollfd p{fd, events, 0};
    int ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
    int r = poll(&p, 1, ms);
    if (r < 0 && errno != EINTR)
      return absl::InternalError(absl::StrCat("poll: ", strerror(errno)));
    if (r > 0) return absl::OkStatus();
  }
}

// Runs an SSL operation on a non-blocking socket until it makes progress. Returns the
// operation's positive result, 0 for a closed connection, or an error.
template <typename Op>
absl::StatusOr<int> SslIo(Connection& c, Op op, MonoTime deadline, const std::atomic<bool>* cancel,
                          const char* what) {
  for (;;) {
    ERR_clear_error();
    errno = 0;
    int r = op();
    if (r > 0) return r;
    int err = SSL_get_error(c.ssl, r);
    switch (err) {
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE: {
        absl::Status s =
            WaitFd(c.fd, err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline, cancel, what);
        if (!s.ok()) return s;
        continue;
      }
      case SSL_ERROR_ZERO_RETURN:
        return 0;
      case SSL_ERROR_SYSCALL:
        if (errno == 0) return 0;  // EOF without close_notify
        return absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno)));
      default:
        return absl::UnavailableError(absl::StrCat(what, ": ", OpenSslErrors()));
    }
  }
}

absl::Status WriteAll(Connection& c, const std::string& data, MonoTime deadline) {
  size_t off = 0;
  while (off < data.size()) {
    int n = static_cast<int>(std::min<size_t>(data.size() - off, 1 << 20));
    absl::StatusOr<int> w = SslIo(
        c, [&] { return SSL_write(c.ssl, data.data() + off, n); }, deadline, nullptr,
        "sending the request");
    if (!w.ok()) return w.status();
    if (*w == 0) return absl::UnavailableError("the server closed the connection mid-request");
    off += static_cast<size_t>(*w);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsTransport>> TlsTransport::Create(TlsTransportOptions options) {
  if (options.host.empty()) return absl::InvalidArgumentError("no API server host");
  const std::string ca_what = options.ca_source.empty()
                                  ? "the CA bundle"
                                  : absl::StrCat("the CA bundle ", options.ca_source);
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return absl::InternalError(absl::StrCat("SSL_CTX_new: ", OpenSslErrors()));
  auto fail = [ctx](absl::Status s) {
    SSL_CTX_free(ctx);
    return s;
  };
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(ctx, SSL_MODE_AUTO_RETRY);
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx, kAlpn, sizeof(kAlpn));
  absl::StatusOr<std::vector<X509*>> cas = ReadCerts(options.ca_pem, ca_what);
  if (!cas.ok()) return fail(cas.status());
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);  // empty: the system store is never loaded
  // Every certificate in the bundle is a trust anchor, as in client-go (Go's x509 pools): a
  // ca.crt holding an intermediate CA works without its root.
  X509_STORE_set_flags(store, X509_V_FLAG_PARTIAL_CHAIN);
  for (X509* c : *cas) {
    X509_STORE_add_cert(store, c);
    X509_free(c);
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (!options.client_cert_pem.empty() || !options.client_key_pem.empty()) {
    if (options.client_cert_pem.empty() || options.client_key_pem.empty()) {
      return fail(absl::InvalidArgumentError(
          "a client certificate needs its key and a key its certificate: give both"));
    }
    absl::StatusOr<std::vector<X509*>> chain =
        ReadCerts(options.client_cert_pem, "the client certificate");
    if (!chain.ok()) return fail(chain.status());
    bool ok = SSL_CTX_use_certificate(ctx, (*chain)[0]) == 1;
    for (size_t i = 1; i < chain->size(); ++i) {
      ok = ok && SSL_CTX_add0_chain_cert(ctx, (*chain)[i]) == 1;
      if (ok) (*chain)[i] = nullptr;  // owned by ctx now
    }
    for (X509* c : *chain) X509_free(c);
    if (!ok) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("OpenSSL refused the client certificate: ", OpenSslErrors())));
    }
    BIO* bio = BIO_new_mem_buf(options.client_key_pem.data(),
                               static_cast<int>(options.client_key_pem.size()));
    EVP_PKEY* key =
        bio != nullptr ? PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr) : nullptr;
    BIO_free(bio);
    if (key == nullptr) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("the client key is not an unencrypted PEM private key: ", OpenSslErrors())));
    }
    ok = SSL_CTX_use_PrivateKey(ctx, key) == 1 && SSL_CTX_check_private_key(ctx) == 1;
    EVP_PKEY_free(key);
    if (!ok) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("the client key does not match the client certificate: ", OpenSslErrors())));
    }
  }
  return std::unique_ptr<TlsTransport>(new TlsTransport(std::move(options), ctx));
}

TlsTransport::TlsTransport(TlsTransportOptions options, SSL_CTX* ctx)
    : options_(std::move(options)),
      host_header_(HostHeader(options_.host, options_.port)),
      ctx_(ctx) {}

TlsTransport::~TlsTransport() {
  {
    absl::MutexLock lock(&mu_);
    idle_.clear();
  }
  SSL_CTX_free(ctx_);
}

int TlsTransport::connections_opened() const {
  absl::MutexLock lock(&mu_);
  return connections_opened_;
}

absl::StatusOr<std::unique_ptr<TlsTransport::Connection>> TlsTransport::Connect(
    absl::Duration timeout) {
  const MonoTime deadline = Now() + timeout;
  const std::string where = absl::StrCat(options_.host.find(':') != std::string::npos
                                             ? absl::StrCat("[", options_.host, "]")
                                             : options_.host,
                                         ":", options_.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = absl::StrCat(options_.port);
  int gai = getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &res);
  if (gai != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve the API server host ", options_.host,
                                               ": ", gai_strerror(gai)));
  }
  auto conn = std::make_unique<Connection>();
  absl::Status last = absl::UnavailableError(absl::StrCat("no address for ", options_.host));
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last = absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = absl::UnavailableError(
          absl::StrCat("connecting to the API server at ", where, ": ", strerror(errno)));
      close(fd);
      continue;
    }
    absl::Status w = WaitFd(fd, POLLOUT, deadline, nullptr, "connecting to the API server");
    int soerr = 0;
    socklen_t len = sizeof(soerr);
    if (w.ok() && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr != 0) {
      w = absl::UnavailableError(
          absl::StrCat("connecting to the API server at ", where, ": ", strerror(soerr)));
    }
    if (!w.ok()) {
      last = absl::Status(w.code(), absl::StrCat(w.message(), " at ", where));
      close(fd);
      if (absl::IsDeadlineExceeded(w)) break;
      continue;
    }
    conn->fd = fd;
    break;
  }
  freeaddrinfo(res);
  if (conn->fd < 0) return last;

  conn->ssl = SSL_new(ctx_);
  if (conn->ssl == nullptr) return absl::InternalError(absl::StrCat("SSL_new: ", OpenSslErrors()));
  SSL_set_fd(conn->ssl, conn->fd);
  const std::string& name = options_.server_name.empty() ? options_.host : options_.server_name;
  X509_VERIFY_PARAM* param = SSL_get0_param(conn->ssl);
  if (IsIpLiteral(name)) {
    if (X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) != 1) {
      return absl::InternalError(absl::StrCat("X509_VERIFY_PARAM_set1_ip_asc: ", OpenSslErrors()));
    }
  } else {
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (SSL_set1_host(conn->ssl, name.c_str()) != 1 ||
        SSL_set_tlsext_host_name(conn->ssl, name.c_str()) != 1) {
      return absl::InternalError(absl::StrCat("setting the TLS host name: ", OpenSslErrors()));
    }
  }
  absl::StatusOr<int> hs = SslIo(
      *conn, [&] { return SSL_connect(conn->ssl); }, deadline, nullptr, "in the TLS handshake");
  if (!hs.ok() || *hs == 0) {
    long verify = SSL_get_verify_result(conn->ssl);
    if (verify != X509_V_OK) {
      return absl::FailedPreconditionError(
          absl::StrCat("the API server at ", where,
                       " presented a certificate that does not verify as ", name, " against ",
                       options_.ca_source.empty() ? "the configured CA"
                                                  : absl::StrCat("the CA in ", options_.ca_source),
                       ": ", X509_verify_cert_error_string(verify),
                       "; check the server address and that the CA is the cluster's"));
    }
    absl::Status s =
        hs.ok() ? absl::UnavailableError("the server closed the connection") : hs.status();
    return absl::Status(s.code(), absl::StrCat("TLS handshake with the API server at ", where,
                                               " failed: ", s.message()));
  }
  absl::MutexLock lock(&mu_);
  ++connections_opened_;
  return conn;
}

std::unique_ptr<TlsTransport::Connection> TlsTransport::TakeIdle() {
  absl::MutexLock lock(&mu_);
  const MonoTime now = Now();
  while (!idle_.empty()) {
    std::unique_ptr<Connection> c = std::move(idle_.back());
    idle_.pop_back();
    if (now - c->idle_since >= options_.idle_keepalive) continue;  // dropped: likely closed
    // Readable while idle means the server closed it (or sent garbage): not reusable.
    pollfd p{c->fd, POLLIN, 0};
    if (poll(&p, 1, 0) != 0) continue;
    return c;
  }
  return nullptr;
}

void TlsTransport::ReturnIdle(std::unique_ptr<Connection> conn) {
  conn->idle_since = Now();
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(idle_.size()) < options_.max_idle_connections) {
    idle_.push_back(std::move(conn));
  }
}

namespace {

struct Exchange {
  absl::StatusOr<HttpResponse> response;
  bool got_bytes = false;  // any response byte arrived
  bool reusable = false;
};

// Sends `wire` on `c` and reads the response through `parser` until it completes.
Exchange Run(Connection& c, const std::string& wire, HttpResponseParser& parser,
             MonoTime head_deadline, const StreamOptions* stream) {
  Exchange x;
  absl::Status s = WriteAll(c, wire, head_deadline);
  if (!s.ok()) {
    x.response = s;
    return x;
  }
  char buf[16384];
  for (;;) {
    MonoTime deadline = head_deadline;
    const std::atomic<bool>* cancel = nullptr;
    if (stream != nullptr && parser.head_complete()) {
      deadline = Now() + stream->idle_timeout;
      cancel = stream->cancel;
    }
    absl::StatusOr<int> n = SslIo(
        c, [&] { return SSL_read(c.ssl, buf, sizeof(buf)); }, deadline, cancel,
        parser.head_complete() ? "reading the response body" : "waiting for the response");
    if (!n.ok()) {
      x.response = n.status();
      return x;
    }
    if (*n == 0) {
      absl::Status eof = parser.FeedEof();
      if (!eof.ok()) {
        // A connection closed before any response byte is the server's to explain, and the
        // caller's to retry.
        x.response =
            x.got_bytes
                ? eof
                : absl::UnavailableError("the API server closed the connection without a response");
        return x;
      }
      break;
    }
    x.got_bytes = true;
    absl::StatusOr<size_t> used = parser.Feed(absl::string_view(buf, static_cast<size_t>(*n)));
    if (!used.ok()) {
      // The sink stopped the stream: the caller asked for it, so it is not an error.
      if (stream != nullptr && absl::IsCancelled(used.status()) && parser.head_complete()) break;
      x.response = used.status();
      return x;
    }
    if (parser.complete()) break;
  }
  x.reusable = parser.complete() && parser.keep_alive();
  x.response = parser.TakeResponse();
  return x;
}

}  // namespace

absl::StatusOr<HttpResponse> TlsTransport::RoundTrip(const HttpRequest& request,
                                                     absl::Duration timeout) {
  const MonoTime deadline = Now() + timeout;
  const std::string wire = SerializeRequest(request, host_header_);
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<Connection> conn = attempt == 0 ? TakeIdle() : nullptr;
    const bool reused = conn != nullptr;
    if (!reused) {
      absl::StatusOr<std::unique_ptr<Connection>> c = Connect(deadline - Now());
      if (!c.ok()) return c.status();
      conn = std::move(*c);
    }
    HttpResponseParser parser(options_.limits, request.method == "HEAD");
    Exchange x = Run(*conn, wire, parser, deadline, nullptr);
    if (!x.response.ok() && reused && !x.got_bytes && absl::IsUnavailable(x.response.status())) {
      continue;  // a stale keep-alive connection: once more on a new one
    }
    if (x.response.ok() && x.reusable) ReturnIdle(std::move(conn));
    return std::move(x.response);
  }
}

absl::StatusOr<HttpResponse> TlsTransport::Stream(const HttpRequest& request,
                                                  absl::Duration connect_timeout,
                                                  const StreamOptions& options,
                                                  const BodySink& on_body) {
  const MonoTime deadline = Now() + connect_timeout;
  absl::StatusOr<std::unique_ptr<Connection>> conn = Connect(connect_timeout);
  if (!conn.ok()) return conn.status();
  HttpResponseParser parser(options_.limits);
  // The body goes to the caller only for a success; an error's body is its Status object,
  // kept in the response for the caller to read.
  std::string error_body;
  parser.set_body_sink([&](absl::string_view piece) {
    const int status = parser.response().status;
    if (status >= 200 && status < 300) return on_body(piece);
    if (error_body.size() + piece.size() > options_.limits.max_body_bytes) return false;
    error_body.append(piece.data(), piece.size());
    return true;
  });
  Exchange x = Run(**conn, SerializeRequest(request, host_header_), parser, deadline, &options);
  if (!x.response.ok()) return x.response.status();
  x.response->body = std::move(error_body);
  return std::move(x.response);
}

}  // namespace gpulet::kube
