#include "kube/tls_transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/clock.h"
#include "common/periodic_worker.h"

namespace gpulet::kube {
namespace {

std::string HostHeader(const std::string& host, int port) {
  std::string h = host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host;
  if (port != 443) absl::StrAppend(&h, ":", port);
  return h;
}

// A raw 4- or 16-byte address as 16 bytes (IPv4 as IPv4-mapped IPv6, so that the two
// compare equal, as Go's net.IP.Equal has them), or nothing for any other length.
std::optional<std::array<unsigned char, 16>> RawIp(absl::string_view raw) {
  std::array<unsigned char, 16> a{};
  if (raw.size() == 4) {
    a[10] = a[11] = 0xff;
    std::memcpy(a.data() + 12, raw.data(), 4);
    return a;
  }
  if (raw.size() == 16) {
    std::memcpy(a.data(), raw.data(), 16);
    return a;
  }
  return std::nullopt;
}

// `text` as RawIp has addresses, or nothing when it is no IP literal.
std::optional<std::array<unsigned char, 16>> ParseIp(const std::string& text) {
  char buf[16];
  if (inet_pton(AF_INET, text.c_str(), buf) == 1) return RawIp(absl::string_view(buf, 4));
  if (inet_pton(AF_INET6, text.c_str(), buf) == 1) return RawIp(absl::string_view(buf, 16));
  return std::nullopt;
}

std::string IpText(const std::string& raw) {
  char buf[INET6_ADDRSTRLEN] = {};
  const int family = raw.size() == 4 ? AF_INET : AF_INET6;
  if (raw.size() != 4 && raw.size() != 16)
    return "(an IP SAN of " + std::to_string(raw.size()) + " bytes)";
  return inet_ntop(family, raw.data(), buf, sizeof(buf)) != nullptr ? buf : "(unprintable IP SAN)";
}

bool DnsNameMatches(std::string pattern, const std::string& host) {
  pattern = absl::AsciiStrToLower(absl::StripSuffix(pattern, "."));
  if (pattern.empty() || host.empty()) return false;
  if (pattern == host) return true;
  // `*` only as the whole leftmost label, standing for exactly one non-empty label.
  if (!absl::StartsWith(pattern, "*.")) return false;
  const absl::string_view rest = absl::string_view(pattern).substr(2);
  if (rest.empty() || rest.find('*') != absl::string_view::npos) return false;
  const size_t dot = host.find('.');
  return dot != std::string::npos && dot > 0 && absl::string_view(host).substr(dot + 1) == rest;
}

MonoTime Now() { return RealClock()->Monotonic(); }

std::string GnutlsError(int code) { return gnutls_strerror(code); }

// A datum viewing `s` (GnuTLS takes const data through a non-const pointer).
gnutls_datum_t Datum(const std::string& s) {
  return {reinterpret_cast<unsigned char*>(const_cast<char*>(s.data())),
          static_cast<unsigned int>(s.size())};
}

// Every PEM certificate in `pem`, owned by the caller (FreeCerts).
absl::StatusOr<std::vector<gnutls_x509_crt_t>> ReadCerts(const std::string& pem,
                                                         const std::string& what) {
  if (pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " holds no PEM certificate (\"-----BEGIN CERTIFICATE-----\" blocks)"));
  }
  gnutls_x509_crt_t* list = nullptr;
  unsigned int n = 0;
  const gnutls_datum_t d = Datum(pem);
  int r = gnutls_x509_crt_list_import2(&list, &n, &d, GNUTLS_X509_FMT_PEM, 0);
  if (r < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " holds a PEM certificate that cannot be read: ", GnutlsError(r)));
  }
  std::vector<gnutls_x509_crt_t> certs(list, list + n);
  gnutls_free(list);
  return certs;
}

void FreeCerts(std::vector<gnutls_x509_crt_t>& certs) {
  for (gnutls_x509_crt_t c : certs) gnutls_x509_crt_deinit(c);
  certs.clear();
}

// The subject alternative names of `cert`: DNS names and raw IP addresses.
void ReadSans(gnutls_x509_crt_t cert, std::vector<std::string>* dns,
              std::vector<std::string>* ips) {
  for (unsigned int i = 0; i < 1024; ++i) {  // a bound, should a SAN never end the list
    std::string buf(256, '\0');
    size_t size = buf.size();
    unsigned int type = 0;
    int r = gnutls_x509_crt_get_subject_alt_name2(cert, i, buf.data(), &size, &type, nullptr);
    if (r == GNUTLS_E_SHORT_MEMORY_BUFFER) {
      buf.resize(size);
      r = gnutls_x509_crt_get_subject_alt_name2(cert, i, buf.data(), &size, &type, nullptr);
    }
    if (r == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE) return;
    if (r < 0) continue;  // a SAN GnuTLS cannot read names nothing
    buf.resize(size);
    if (r == GNUTLS_SAN_DNSNAME) dns->push_back(buf);
    if (r == GNUTLS_SAN_IPADDRESS) ips->push_back(buf);
  }
}

}  // namespace

bool CertificateNamesHost(const std::vector<std::string>& dns_sans,
                          const std::vector<std::string>& ip_sans, const std::string& host) {
  std::string candidate = host;
  if (candidate.size() >= 3 && candidate.front() == '[' && candidate.back() == ']') {
    candidate = candidate.substr(1, candidate.size() - 2);
  }
  if (std::optional<std::array<unsigned char, 16>> ip = ParseIp(candidate)) {
    return std::any_of(ip_sans.begin(), ip_sans.end(),
                       [&](const std::string& raw) { return RawIp(raw) == ip; });
  }
  const std::string name = absl::AsciiStrToLower(absl::StripSuffix(host, "."));
  return std::any_of(dns_sans.begin(), dns_sans.end(),
                     [&](const std::string& san) { return DnsNameMatches(san, name); });
}

struct TlsTransport::Credentials {
  gnutls_certificate_credentials_t cred = nullptr;
  gnutls_priority_t priority = nullptr;
  ~Credentials() {
    if (priority != nullptr) gnutls_priority_deinit(priority);
    if (cred != nullptr) gnutls_certificate_free_credentials(cred);
  }
};

struct TlsTransport::Connection {
  int fd = -1;
  gnutls_session_t session = nullptr;
  MonoTime idle_since;
  // The name the server's certificate must carry, for the check in the handshake (VerifyPeer).
  std::string verify_name;
  std::string verify_error;  // why the server's certificate was refused
  ~Connection() {
    if (session != nullptr) gnutls_deinit(session);
    if (fd >= 0) close(fd);
  }
};

namespace {

using Connection = TlsTransport::Connection;

// Runs during the handshake, once the server's certificate chain has arrived: the chain
// against the configured CAs (the credentials' trust list), then the name. A refusal
// records why in the connection and fails the handshake.
int VerifyPeer(gnutls_session_t session) {
  auto* c = static_cast<Connection*>(gnutls_session_get_ptr(session));
  unsigned int status = 0;
  int r = gnutls_certificate_verify_peers2(session, &status);
  if (r < 0) {
    c->verify_error = absl::StrCat("its certificate could not be checked: ", GnutlsError(r));
    return -1;
  }
  if (status != 0) {
    gnutls_datum_t out{};
    if (gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &out, 0) == 0) {
      c->verify_error.assign(reinterpret_cast<const char*>(out.data), out.size);
      gnutls_free(out.data);
    } else {
      c->verify_error = absl::StrCat("verification status 0x", absl::Hex(status));
    }
    return -1;
  }
  unsigned int n = 0;
  const gnutls_datum_t* chain = gnutls_certificate_get_peers(session, &n);
  gnutls_x509_crt_t leaf = nullptr;
  if (chain == nullptr || n == 0 || gnutls_x509_crt_init(&leaf) < 0 ||
      gnutls_x509_crt_import(leaf, &chain[0], GNUTLS_X509_FMT_DER) < 0) {
    if (leaf != nullptr) gnutls_x509_crt_deinit(leaf);
    c->verify_error = "its certificate could not be read";
    return -1;
  }
  std::vector<std::string> dns, ips;
  ReadSans(leaf, &dns, &ips);
  gnutls_x509_crt_deinit(leaf);
  if (CertificateNamesHost(dns, ips, c->verify_name)) return 0;
  std::vector<std::string> names = dns;
  for (const std::string& ip : ips) names.push_back(IpText(ip));
  c->verify_error =
      names.empty()
          ? "the certificate has no subject alternative names (the common name is not used)"
          : absl::StrCat("the certificate's names (", absl::StrJoin(names, ", "),
                         ") do not include ", c->verify_name);
  return -1;
}

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

// Runs a GnuTLS operation on a non-blocking socket until it makes progress. `op` returns
// GnuTLS's result: positive for progress, 0 for a closed connection (a peer that closes
// without close_notify counts as closed too), negative for an error.
template <typename Op>
absl::StatusOr<int> TlsIo(Connection& c, Op op, MonoTime deadline, const std::atomic<bool>* cancel,
                          const char* what) {
  for (;;) {
    errno = 0;
    const int r = op();
    if (r >= 0) return r;
    switch (r) {
      case GNUTLS_E_AGAIN:
      case GNUTLS_E_INTERRUPTED: {
        const short events = gnutls_record_get_direction(c.session) == 0 ? POLLIN : POLLOUT;
        absl::Status s = WaitFd(c.fd, events, deadline, cancel, what);
        if (!s.ok()) return s;
        continue;
      }
      case GNUTLS_E_PREMATURE_TERMINATION:
        return 0;
      case GNUTLS_E_PUSH_ERROR:
      case GNUTLS_E_PULL_ERROR:
        if (errno != 0) return absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno)));
        return absl::UnavailableError(absl::StrCat(what, ": ", GnutlsError(r)));
      case GNUTLS_E_REHANDSHAKE:
        return absl::UnavailableError(
            absl::StrCat(what, ": the server asked to renegotiate, which gpulet refuses"));
      default:
        if (gnutls_error_is_fatal(r) == 0) continue;  // a warning alert, say
        return absl::UnavailableError(absl::StrCat(what, ": ", GnutlsError(r)));
    }
  }
}

absl::Status WriteAll(Connection& c, const std::string& data, MonoTime deadline) {
  size_t off = 0;
  while (off < data.size()) {
    int n = static_cast<int>(std::min<size_t>(data.size() - off, 1 << 20));
    absl::StatusOr<int> w = TlsIo(
        c, [&] { return static_cast<int>(gnutls_record_send(c.session, data.data() + off, n)); },
        deadline, nullptr, "sending the request");
    if (!w.ok()) return w.status();
    if (*w == 0) return absl::UnavailableError("the server closed the connection mid-request");
    off += static_cast<size_t>(*w);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsTransport>> TlsTransport::Create(TlsTransportOptions options) {
  if (options.host.empty())
    return absl::InvalidArgumentError(absl::StrCat("no host for ", options.peer));
  const std::string ca_what = options.ca_source.empty()
                                  ? "the CA bundle"
                                  : absl::StrCat("the CA bundle ", options.ca_source);
  auto creds = std::make_unique<Credentials>();
  int r = gnutls_certificate_allocate_credentials(&creds->cred);
  if (r < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("gnutls_certificate_allocate_credentials: ", GnutlsError(r)));
  }
  // TLS 1.2 and 1.3 only; otherwise GnuTLS's defaults (which the system policy may narrow).
  const char* bad = nullptr;
  r = gnutls_priority_init2(&creds->priority, "-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2", &bad,
                            GNUTLS_PRIORITY_INIT_DEF_APPEND);
  if (r < 0) {
    return absl::InternalError(absl::StrCat("the TLS priority string is refused at \"",
                                            bad != nullptr ? bad : "", "\": ", GnutlsError(r)));
  }
  absl::StatusOr<std::vector<gnutls_x509_crt_t>> cas = ReadCerts(options.ca_pem, ca_what);
  if (!cas.ok()) return cas.status();
  // The trust list holds the bundle alone (the system store is never loaded). GnuTLS takes
  // any certificate in it as an anchor: a chain stops at the first trusted certificate, and
  // a server certificate that is itself in the list is trusted.
  r = gnutls_certificate_set_x509_trust(creds->cred, cas->data(), static_cast<int>(cas->size()));
  FreeCerts(*cas);
  if (r < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ca_what, " cannot be used as trust anchors: ", GnutlsError(r)));
  }
  gnutls_certificate_set_verify_function(creds->cred, VerifyPeer);
  if (!options.client_cert_pem.empty() || !options.client_key_pem.empty()) {
    if (options.client_cert_pem.empty() || options.client_key_pem.empty()) {
      return absl::InvalidArgumentError(
          "a client certificate needs its key and a key its certificate: give both");
    }
    absl::StatusOr<std::vector<gnutls_x509_crt_t>> chain =
        ReadCerts(options.client_cert_pem, "the client certificate");
    if (!chain.ok()) return chain.status();
    gnutls_x509_privkey_t key = nullptr;
    const gnutls_datum_t key_pem = Datum(options.client_key_pem);
    r = gnutls_x509_privkey_init(&key);
    if (r >= 0) r = gnutls_x509_privkey_import(key, &key_pem, GNUTLS_X509_FMT_PEM);
    if (r < 0) {
      if (key != nullptr) gnutls_x509_privkey_deinit(key);
      FreeCerts(*chain);
      return absl::InvalidArgumentError(
          absl::StrCat("the client key is not an unencrypted PEM private key: ", GnutlsError(r)));
    }
    // Copies the chain and key, and checks that the key is the certificate's.
    r = gnutls_certificate_set_x509_key(creds->cred, chain->data(), static_cast<int>(chain->size()),
                                        key);
    gnutls_x509_privkey_deinit(key);
    FreeCerts(*chain);
    if (r == GNUTLS_E_CERTIFICATE_KEY_MISMATCH) {
      return absl::InvalidArgumentError(
          "the client key does not match the client certificate (the first certificate in "
          "its file)");
    }
    if (r < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the client certificate and key are refused: ", GnutlsError(r)));
    }
  }
  return std::unique_ptr<TlsTransport>(new TlsTransport(std::move(options), std::move(creds)));
}

TlsTransport::TlsTransport(TlsTransportOptions options, std::unique_ptr<Credentials> credentials)
    : options_(std::move(options)),
      host_header_(HostHeader(options_.host, options_.port)),
      credentials_(std::move(credentials)) {}

TlsTransport::~TlsTransport() {
  // The connections' sessions refer to the credentials: they go first.
  absl::MutexLock lock(&mu_);
  idle_.clear();
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
    return absl::UnavailableError(absl::StrCat("cannot resolve the host of ", options_.peer, ", ",
                                               options_.host, ": ", gai_strerror(gai)));
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
          absl::StrCat("connecting to ", options_.peer, " at ", where, ": ", strerror(errno)));
      close(fd);
      continue;
    }
    const std::string connecting = absl::StrCat("connecting to ", options_.peer);
    absl::Status w = WaitFd(fd, POLLOUT, deadline, nullptr, connecting.c_str());
    int soerr = 0;
    socklen_t len = sizeof(soerr);
    if (w.ok() && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr != 0) {
      w = absl::UnavailableError(absl::StrCat(connecting, " at ", where, ": ", strerror(soerr)));
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

  int r = gnutls_init(&conn->session, GNUTLS_CLIENT | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL);
  if (r < 0) return absl::ResourceExhaustedError(absl::StrCat("gnutls_init: ", GnutlsError(r)));
  gnutls_session_t session = conn->session;
  const std::string& name = options_.server_name.empty() ? options_.host : options_.server_name;
  conn->verify_name = name;
  gnutls_session_set_ptr(session, conn.get());
  const gnutls_datum_t alpn = Datum(options_.alpn);
  if ((r = gnutls_priority_set(session, credentials_->priority)) < 0 ||
      (r = gnutls_credentials_set(session, GNUTLS_CRD_CERTIFICATE, credentials_->cred)) < 0 ||
      (r = gnutls_alpn_set_protocols(session, &alpn, 1, 0)) < 0 ||
      (!ParseIp(name).has_value() &&
       (r = gnutls_server_name_set(session, GNUTLS_NAME_DNS, name.data(), name.size())) < 0)) {
    return absl::InternalError(absl::StrCat("setting up the TLS session: ", GnutlsError(r)));
  }
  gnutls_transport_set_int(session, conn->fd);
  absl::StatusOr<int> hs = TlsIo(
      *conn,
      [&] {
        const int h = gnutls_handshake(session);
        return h == 0 ? 1 : h;
      },
      deadline, nullptr, "in the TLS handshake");
  if (!hs.ok() || *hs == 0) {
    if (!conn->verify_error.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          options_.peer, " at ", where, " presented a certificate that does not verify as ", name,
          " against ",
          options_.ca_source.empty() ? "the configured CA"
                                     : absl::StrCat("the CA in ", options_.ca_source),
          ": ", absl::StripSuffix(absl::StripTrailingAsciiWhitespace(conn->verify_error), "."),
          "; check the server address and that the CA is the cluster's"));
    }
    absl::Status s =
        hs.ok() ? absl::UnavailableError("the server closed the connection") : hs.status();
    return absl::Status(s.code(), absl::StrCat("TLS handshake with ", options_.peer, " at ", where,
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
    absl::StatusOr<int> n = TlsIo(
        c, [&] { return static_cast<int>(gnutls_record_recv(c.session, buf, sizeof(buf))); },
        deadline, cancel,
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

namespace {

// The pump: TLS records one way, plain bytes the other. It owns the TLS connection and its
// end of the socket pair; the other end goes to the caller.
class PumpedTunnel final : public TlsTunnel {
 public:
  PumpedTunnel(std::unique_ptr<Connection> conn, int pump_fd, int plain_fd)
      : conn_(std::move(conn)), pump_fd_(pump_fd), plain_fd_(plain_fd) {
    thread_ = StartNamedThread("gpulet-tls-pump", [this] { Pump(); });
  }
  ~PumpedTunnel() override {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    close(pump_fd_);
    if (plain_fd_ >= 0) close(plain_fd_);
  }
  int TakePlainFd() override { return std::exchange(plain_fd_, -1); }
  std::string EndedBy() const override {
    absl::MutexLock lock(&mu_);
    return ended_by_;
  }

 private:
  // Moves bytes until either side is done. Each direction has one buffer: filled from its
  // source only when empty, so a slow side holds the other back rather than growing memory.
  void Pump() {
    gnutls_session_t session = conn_->session;
    std::string to_plain, to_server;
    size_t to_plain_off = 0;
    bool send_blocked = false;  // a gnutls_record_send waits on the socket: same data again
    bool server_open = true;
    char buf[16384];
    while (!stop_) {
      bool progress = false;
      bool want_server_in = false, want_plain_in = false, want_plain_out = false;
      // Server to plain.
      if (to_plain_off == to_plain.size() && server_open) {
        to_plain.clear();
        to_plain_off = 0;
        const ssize_t n = gnutls_record_recv(session, buf, sizeof(buf));
        if (n > 0) {
          to_plain.assign(buf, static_cast<size_t>(n));
          progress = true;
        } else if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) {
          want_server_in = true;
        } else if (n == 0 || gnutls_error_is_fatal(static_cast<int>(n)) != 0) {
          if (n == GNUTLS_E_FATAL_ALERT_RECEIVED) {
            absl::MutexLock lock(&mu_);
            ended_by_ = absl::StrCat("the server sent the TLS alert: ",
                                     gnutls_alert_get_name(gnutls_alert_get(session)));
          } else if (n < 0) {
            absl::MutexLock lock(&mu_);
            ended_by_ = GnutlsError(static_cast<int>(n));
          }
          server_open = false;
          shutdown(pump_fd_, SHUT_WR);  // the client sees the end of the stream
        }
      }
      if (to_plain_off < to_plain.size()) {
        const ssize_t w = send(pump_fd_, to_plain.data() + to_plain_off,
                               to_plain.size() - to_plain_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
          to_plain_off += static_cast<size_t>(w);
          progress = true;
        } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
          want_plain_out = true;
        } else {
          return;  // the client closed its end
        }
      }
      // Plain to server.
      if (to_server.empty()) {
        const ssize_t n = recv(pump_fd_, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
          to_server.assign(buf, static_cast<size_t>(n));
          progress = true;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
          want_plain_in = true;
        } else {
          gnutls_bye(session, GNUTLS_SHUT_WR);  // the client is done: so is the connection
          return;
        }
      }
      if (!to_server.empty() && server_open) {
        const ssize_t w = send_blocked
                              ? gnutls_record_send(session, nullptr, 0)
                              : gnutls_record_send(session, to_server.data(), to_server.size());
        if (w > 0) {
          send_blocked = false;
          to_server.erase(0, static_cast<size_t>(w));
          progress = true;
        } else if (w == GNUTLS_E_AGAIN || w == GNUTLS_E_INTERRUPTED) {
          send_blocked = true;
        } else {
          server_open = false;
          shutdown(pump_fd_, SHUT_WR);
        }
      }
      if (!server_open && to_plain_off == to_plain.size()) {
        // Nothing more can come from the server; wait for the client to close its end.
        want_server_in = false;
        send_blocked = false;
        to_server.clear();
      }
      if (progress || gnutls_record_check_pending(session) > 0) continue;
      pollfd p[2] = {{conn_->fd, 0, 0}, {pump_fd_, 0, 0}};
      if (want_server_in) p[0].events |= POLLIN;
      if (send_blocked) p[0].events |= POLLOUT;
      if (want_plain_in || !server_open) p[1].events |= POLLIN;
      if (want_plain_out) p[1].events |= POLLOUT;
      poll(p, 2, 100);  // the timeout bounds how long the destructor waits for the pump
    }
  }

  const std::unique_ptr<Connection> conn_;
  const int pump_fd_;
  int plain_fd_;
  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  std::string ended_by_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TlsTunnel>> TlsTransport::OpenTunnel(
    absl::Duration connect_timeout) {
  absl::StatusOr<std::unique_ptr<Connection>> conn = Connect(connect_timeout);
  if (!conn.ok()) return conn.status();
  gnutls_datum_t selected{};
  if (gnutls_alpn_get_selected_protocol((*conn)->session, &selected) != 0 ||
      absl::string_view(reinterpret_cast<const char*>(selected.data), selected.size) !=
          options_.alpn) {
    return absl::FailedPreconditionError(absl::StrCat(
        options_.peer, " at ", options_.host, ":", options_.port, " did not agree to ",
        options_.alpn, " in the TLS handshake (ALPN): it is not the server gpulet expects there"));
  }
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  return std::make_unique<PumpedTunnel>(*std::move(conn), fds[0], fds[1]);
}

}  // namespace gpulet::kube
