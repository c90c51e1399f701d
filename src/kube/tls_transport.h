// TlsTransport: HTTP/1.1 over TLS to one API server, with GnuTLS directly (no HTTP library:
// the binary is meant to be mostly static, and Debian 12 ships cpp-httplib only as a shared
// library; GnuTLS is the metrics server's TLS already, so the API client adds no TLS library).
//
// Security, fail closed: TLS 1.2 or newer; the server's chain must verify against the
// configured CA bundle alone (never the system store: an API server's CA is its cluster's);
// each certificate in the bundle is an anchor, as in client-go, so a bundle holding the
// server's own certificate works. The certificate must name the host
// as client-go (Go's crypto/x509) checks it, not as GnuTLS would: a DNS name matches a DNS
// SAN, where `*` stands for exactly one whole leftmost label (no partial-label wildcards
// such as f*.example.com); an IP literal matches an IP SAN only; the subject's common name
// is never consulted. A mismatch names what the certificate does name. An optional
// `server_name` replaces the host for the check and SNI (kubeconfig's tls-server-name); SNI
// is sent for DNS names only. A client certificate and key are presented when configured.
// ALPN offers one protocol, http/1.1 unless the options say otherwise, so an API server never
// picks HTTP/2; a renegotiation the server asks for is refused.
//
// A tunnel (OpenTunnel) carries one TLS connection to a plain socket, for a client that speaks
// its own protocol over a file descriptor: gpulet's gRPC is built without TLS, so its call to
// Talos' machine API (talos/machine_client.h) runs HTTP/2 over the tunnel, with ALPN "h2".
//
// Connections: a round trip takes an idle keep-alive connection when there is one (at most
// `max_idle_connections` are kept, each for at most `idle_keepalive`), else connects anew;
// after a complete response that allows it, the connection goes back to the pool. A reused
// connection that the server had already closed (the request fails before a single response
// byte arrives) is retried once on a new connection: the server closing idle connections is
// the common cause, so the request was never processed. A stream (a watch) always has its
// own connection and closes it at the end.
//
// Deadlines run on the real monotonic clock (they bound real sockets): a round trip's
// `timeout` covers connect, handshake, request and the whole response; a stream's
// connect_timeout covers everything up to the response head, then each wait for body bytes
// is bounded by StreamOptions::idle_timeout. Name resolution (getaddrinfo) is blocking and
// not bounded by the deadline; in-cluster the host is an IP literal, so none happens.
//
// Thread-safety: RoundTrip and Stream may be called from any number of threads at once;
// each call uses its own connection (the credentials are shared, read-only once made).
#ifndef GPULET_KUBE_TLS_TRANSPORT_H_
#define GPULET_KUBE_TLS_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/http.h"

namespace gpulet::kube {

struct TlsTransportOptions {
  std::string peer = "the API server";  // what the server is, for messages
  std::string alpn = "http/1.1";        // the one application protocol offered
  std::string host;                     // DNS name or IP literal (IPv6 without brackets)
  int port = 443;
  std::string server_name;      // checked against the certificate instead of `host` when set
  std::string ca_pem;           // PEM bundle of the CA certificates to trust; required
  std::string ca_source;        // where ca_pem came from, for messages ("/path/ca.crt")
  std::string client_cert_pem;  // optional: PEM certificate (and chain) to present
  std::string client_key_pem;   // with its PEM private key
  HttpResponseParser::Limits limits;
  int max_idle_connections = 2;
  absl::Duration idle_keepalive = absl::Seconds(50);
};

// A TLS connection carried to a plain socket: what is written to the socket (TakePlainFd)
// reaches the server inside TLS, and what the server sends comes out of it. A thread
// ("gpulet-tls-pump") moves the bytes until either side closes or the tunnel is destroyed.
//
// Thread-safety: TakePlainFd once, from any thread; the destructor stops the pump and joins.
class TlsTunnel {
 public:
  virtual ~TlsTunnel() = default;
  // The plain end, now the caller's to close (gRPC's CreateInsecureChannelFromFd takes it
  // and closes it with the channel); -1 after the first call.
  virtual int TakePlainFd() = 0;
  // Why the server's side ended with an error ("the server sent the TLS alert: Unknown
  // certificate authority"), once it has; "" otherwise. For messages: a server that refuses
  // the client certificate says so only in an alert, after the handshake.
  virtual std::string EndedBy() const = 0;
};

class TlsTransport final : public HttpTransport {
 public:
  // Checks and loads the CA bundle and client credentials. InvalidArgument names what is
  // wrong with them (no certificate in the bundle, a key that does not match, ...).
  static absl::StatusOr<std::unique_ptr<TlsTransport>> Create(TlsTransportOptions options);
  ~TlsTransport() override;
  TlsTransport(const TlsTransport&) = delete;
  TlsTransport& operator=(const TlsTransport&) = delete;

  absl::StatusOr<HttpResponse> RoundTrip(const HttpRequest& request,
                                         absl::Duration timeout) override;
  absl::StatusOr<HttpResponse> Stream(const HttpRequest& request, absl::Duration connect_timeout,
                                      const StreamOptions& options,
                                      const BodySink& on_body) override;

  // Connects and shakes hands as RoundTrip would, then hands the connection to a tunnel.
  // FailedPrecondition when the server does not agree to the options' ALPN protocol.
  absl::StatusOr<std::unique_ptr<TlsTunnel>> OpenTunnel(absl::Duration connect_timeout);

  // Connections opened so far (for tests of keep-alive reuse).
  int connections_opened() const;

  struct Connection;
  struct Credentials;

 private:
  TlsTransport(TlsTransportOptions options, std::unique_ptr<Credentials> credentials);

  absl::StatusOr<std::unique_ptr<Connection>> Connect(absl::Duration timeout);
  std::unique_ptr<Connection> TakeIdle();
  void ReturnIdle(std::unique_ptr<Connection> conn);

  const TlsTransportOptions options_;
  const std::string host_header_;
  const std::unique_ptr<Credentials> credentials_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_ ABSL_GUARDED_BY(mu_);
  int connections_opened_ ABSL_GUARDED_BY(mu_) = 0;
};

// Whether a certificate with these subject alternative names names `host` (a DNS name, or an
// IP literal without brackets), by client-go's rules above. `ip_sans` are the raw 4- or
// 16-byte addresses. Exposed for its tests.
bool CertificateNamesHost(const std::vector<std::string>& dns_sans,
                          const std::vector<std::string>& ip_sans, const std::string& host);

}  // namespace gpulet::kube

#endif  // GPULET_KUBE_TLS_TRANSPORT_H_
