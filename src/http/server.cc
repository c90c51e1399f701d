#include "http/server.h"

#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "common/periodic_worker.h"
#include "common/read_file.h"
#include "common/tcp_listen.h"

namespace gpulet::http {

namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

// How often the event loop looks for connections past their header deadline.
constexpr auto kSweepEvery = std::chrono::milliseconds(100);
// Each connection's buffer for the request (header and any body it reads).
constexpr size_t kConnectionMemory = 16 * 1024;
// File descriptors kept for everything but connections when sizing the cap to RLIMIT_NOFILE.
constexpr rlim_t kSpareFds = 256;

// `in` as a gzip member (RFC 1952), or nullopt when zlib fails.
std::optional<std::string> Gzip(absl::string_view in) {
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return std::nullopt;
  }
  std::string out(deflateBound(&zs, in.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) return std::nullopt;
  return out;
}

// A fixed pool of threads that runs jobs in order; Stop runs what is queued, then joins.
class JobPool {
 public:
  void Start(int threads, const std::string& name) {
    for (int i = 0; i < threads; ++i) threads_.push_back(StartNamedThread(name, [this] { Run(); }));
  }
  void Submit(std::function<void()> job) {
    absl::MutexLock lock(&mu_);
    jobs_.push_back(std::move(job));
  }
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void Run() {
    while (true) {
      std::function<void()> job;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](JobPool* p)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stop_ || !p->jobs_.empty(); },
            this));
        if (jobs_.empty()) return;  // stopping, nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// One request from its complete header to its end (MHD's per-request context), and its
// basic-auth check, when one runs.
struct PendingRequest {
  bool auth_submitted = false;  // event thread only
  std::string authorization;
  std::atomic<bool> done{false};
  std::atomic<bool> authorized{false};
};

// What the event loop knows of an open connection.
struct ConnState {
  int fd = -1;
  // Since when the connection has been waiting for a request header: its accept, or the end
  // of its previous response.
  SteadyTime waiting_since;
  bool in_request = false;  // a header arrived; until the response is done
  bool dropped = false;     // shut down by us; MHD closes it next
};

// The context of every request without a basic-auth check (never deleted).
PendingRequest& PlainRequest() {
  static PendingRequest plain;
  return plain;
}

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

bool AcceptsGzip(absl::string_view accept_encoding) {
  for (absl::string_view part : absl::StrSplit(accept_encoding, ',')) {
    std::vector<absl::string_view> params = absl::StrSplit(part, ';');
    absl::string_view name = absl::StripAsciiWhitespace(params[0]);
    if (!absl::EqualsIgnoreCase(name, "gzip") && !absl::EqualsIgnoreCase(name, "x-gzip")) {
      continue;
    }
    bool refused = false;
    for (size_t i = 1; i < params.size(); ++i) {
      absl::string_view p = absl::StripAsciiWhitespace(params[i]);
      double q = 1;
      if (absl::ConsumePrefix(&p, "q=") && absl::SimpleAtod(p, &q) && q <= 0) refused = true;
    }
    if (!refused) return true;
  }
  return false;
}

// Everything that exists while the server runs. All members without a lock are touched only
// on the event thread (handlers, MHD's callbacks, the sweep), or by Start/Stop while that
// thread is not running.
class Server::Impl {
 public:
  explicit Impl(Server* owner)
      : owner_(owner),
        limits_(owner->options_.limits),
        cached_(std::max(0, owner->options_.cache_slots)) {}
  ~Impl() { Shutdown(); }

  absl::Status Start(const std::string& address, int listen_fd, bool ipv6);
  void Shutdown();

 private:
  static MHD_Result OnRequest(void* cls, MHD_Connection* c, const char* url, const char* method,
                              const char* version, const char* upload_data,
                              size_t* upload_data_size, void** req_cls);
  static void OnCompleted(void* cls, MHD_Connection* c, void** req_cls,
                          MHD_RequestTerminationCode toe);
  static void OnConnection(void* cls, MHD_Connection* c, void** socket_context,
                           MHD_ConnectionNotificationCode toe);

  MHD_Result Handle(MHD_Connection* c, absl::string_view path, absl::string_view method,
                    size_t* upload_data_size, void** req_cls);
  // Asks the handler and queues its answer.
  MHD_Result Respond(MHD_Connection* c, absl::string_view path, absl::string_view method);
  // Answers a method other than GET and HEAD with Options::refused_write.
  MHD_Result RefuseWrite(MHD_Connection* c, absl::string_view path, absl::string_view method);
  // Queues `r` (logged when the access log is on).
  MHD_Result Queue(MHD_Connection* c, absl::string_view path, absl::string_view method,
                   const Response& r, bool accepts_gzip);
  // Queues the server's own plain-text answer (401, 503).
  MHD_Result QueueText(MHD_Connection* c, absl::string_view path, absl::string_view method,
                       unsigned status, const char* text,
                       std::vector<std::pair<std::string, std::string>> headers = {});
  // The finished response for `r` (gzip-compressed when `gz` and the handler allows it);
  // nullptr when MHD or zlib fail. With a cache slot, built once a body and kept.
  MHD_Response* ResponseFor(const Response& r, bool gz, bool* cached);
  static MHD_Response* MakeResponse(const Response& r, std::shared_ptr<const std::string> body,
                                    bool gzipped);
  void Loop();
  void Sweep(SteadyTime now);
  void EvictOldestWaiting();

  Server* owner_;
  const Limits& limits_;  // the owner's
  int max_connections_ = 0;
  MHD_Daemon* daemon_ = nullptr;
  int epoll_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
  JobPool auth_pool_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> pending_auth_{0};
  std::unordered_map<MHD_Connection*, ConnState> conns_;
  SteadyTime last_sweep_;
  // By cache slot and encoding (identity, gzip): the body a response was built from, and the
  // response.
  struct CachedResponse {
    std::shared_ptr<const std::string> text;
    MHD_Response* response = nullptr;
  };
  std::vector<std::array<CachedResponse, 2>> cached_;
  // The TLS PEMs; MHD reads them at start, kept for the daemon's life all the same.
  std::string cert_pem_, key_pem_;
  // Names the server in libmicrohttpd's messages (MHD keeps the pointer).
  std::string who_;
};

absl::Status Server::Impl::Start(const std::string& address, int listen_fd, bool ipv6) {
  const WebConfig& web = owner_->options_.web;
  const std::string& name = owner_->options_.name;
  const bool tls = !web.cert_file.empty();
  if (tls && !web.cert_pem.empty() && !web.key_pem.empty()) {
    cert_pem_ = web.cert_pem;  // what LoadWebConfig read and checked
    key_pem_ = web.key_pem;
  } else if (tls) {
    absl::StatusOr<std::string> cert =
        ReadRegularFile(web.cert_file, kMaxConfigFileBytes, "TLS certificate file");
    absl::StatusOr<std::string> key =
        ReadRegularFile(web.key_file, kMaxConfigFileBytes, "TLS key file");
    if (!cert.ok() || !key.ok()) {
      close(listen_fd);
      return absl::InvalidArgumentError(
          absl::StrCat("cannot start HTTPS with cert ", web.cert_file, " and key ", web.key_file,
                       ": ", (!cert.ok() ? cert.status() : key.status()).message(),
                       "; check that both exist, are readable and match"));
    }
    cert_pem_ = *std::move(cert);
    key_pem_ = *std::move(key);
  }
  // The cap must fit the open-file limit: raise the soft limit towards the hard one.
  rlimit nofile{};
  max_connections_ = std::max(1, limits_.max_connections);
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    rlim_t want = static_cast<rlim_t>(max_connections_) + kSpareFds;
    if (nofile.rlim_cur != RLIM_INFINITY && nofile.rlim_cur < want) {
      rlimit raised = nofile;
      raised.rlim_cur = nofile.rlim_max == RLIM_INFINITY ? want : std::min(want, nofile.rlim_max);
      if (setrlimit(RLIMIT_NOFILE, &raised) == 0) nofile = raised;
    }
    if (nofile.rlim_cur != RLIM_INFINITY && nofile.rlim_cur < want) {
      int fit = static_cast<int>(std::max<rlim_t>(nofile.rlim_cur, 2 * kSpareFds) - kSpareFds);
      GPULET_LOG_WARN(
          "{}: the open-file limit ({}) leaves room for {} connections, not {}; "
          "raise the hard limit (ulimit -Hn) to allow more",
          name, nofile.rlim_cur, fit, max_connections_);
      max_connections_ = std::max(16, fit);
    }
  }

  std::vector<MHD_OptionItem> opts;
  auto opt = [&](MHD_OPTION o, intptr_t v, void* p = nullptr) { opts.push_back({o, v, p}); };
  who_ = absl::StrCat(name, " (libmicrohttpd)");
  opt(MHD_OPTION_EXTERNAL_LOGGER, reinterpret_cast<intptr_t>(&LogLibraryMessage), who_.data());
  opt(MHD_OPTION_LISTEN_SOCKET, listen_fd);
  opt(MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&Impl::OnCompleted), this);
  opt(MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(&Impl::OnConnection), this);
  opt(MHD_OPTION_CONNECTION_TIMEOUT,
      std::max<intptr_t>(1, absl::ToInt64Seconds(limits_.idle_timeout)));
  // Our cap (OnConnection) closes an old connection for each new one; MHD's own limit, a
  // little higher, refuses new connections only when no old one was waiting for a header.
  opt(MHD_OPTION_CONNECTION_LIMIT, max_connections_ + 16);
  opt(MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionMemory);
  if (tls) {
    opt(MHD_OPTION_HTTPS_MEM_CERT, 0, cert_pem_.data());
    opt(MHD_OPTION_HTTPS_MEM_KEY, 0, key_pem_.data());
  }
  opt(MHD_OPTION_END, 0);
  unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  if (tls) flags |= MHD_USE_TLS;
  if (ipv6) flags |= MHD_USE_IPv6;
  daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &Impl::OnRequest, this, MHD_OPTION_ARRAY,
                             opts.data(), MHD_OPTION_END);
  if (daemon_ == nullptr) {
    // MHD has closed `listen_fd` (it owns it from here on, failing or not).
    if (tls) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot start HTTPS with cert ", web.cert_file, " and key ", web.key_file,
                       ": GnuTLS refused them (see the log above); check that "
                       "both are PEM and that the key matches the certificate"));
    }
    return absl::UnavailableError(absl::StrCat(
        "cannot serve on ", address, ": libmicrohttpd did not start (see the log above)"));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_EPOLL_FD);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (info == nullptr || epoll_fd_ < 0 || stop_fd_ < 0) {
    return absl::InternalError(absl::StrCat("cannot serve on ", address,
                                            ": cannot set up the event loop: ", strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = info->epoll_fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, info->epoll_fd, &ev) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot serve on ", address, ": epoll_ctl failed: ", strerror(errno)));
  }
  ev.data.fd = stop_fd_;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, stop_fd_, &ev) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot serve on ", address, ": epoll_ctl failed: ", strerror(errno)));
  }
  if (owner_->auth_.enabled()) {
    auth_pool_.Start(std::max(1, limits_.auth_threads), "gpulet-httpauth");
  }
  last_sweep_ = std::chrono::steady_clock::now();
  thread_ = StartNamedThread("gpulet-http", [this] { Loop(); });
  return absl::OkStatus();
}

void Server::Impl::Shutdown() {
  stopping_ = true;
  if (stop_fd_ >= 0) {
    uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  // Checks still queued finish at once (refused, as stopping_ is set) and resume their
  // connections, so none is suspended when MHD closes them all.
  auth_pool_.Stop();
  if (daemon_ != nullptr) {
    // Quiesced first: MHD then leaves the listening socket alone when it stops (no shutdown
    // of it, which a server sharing it after a reload would feel), and it is closed here.
    MHD_socket listener = MHD_quiesce_daemon(daemon_);
    MHD_stop_daemon(daemon_);
    if (listener != MHD_INVALID_SOCKET) close(listener);
  }
  daemon_ = nullptr;
  for (auto& by_encoding : cached_) {
    for (CachedResponse& cached : by_encoding) {
      if (cached.response != nullptr) MHD_destroy_response(cached.response);
      cached = CachedResponse();
    }
  }
  conns_.clear();
  CloseFd(epoll_fd_);
  CloseFd(stop_fd_);
}

void Server::Impl::Loop() {
  epoll_event events[2];
  while (!stopping_) {
    int wait_ms = 1000;
    MHD_UNSIGNED_LONG_LONG mhd_ms = 0;
    if (MHD_get_timeout(daemon_, &mhd_ms) == MHD_YES) {
      wait_ms = static_cast<int>(std::min<MHD_UNSIGNED_LONG_LONG>(mhd_ms, wait_ms));
    }
    if (!conns_.empty()) {
      wait_ms = std::min(wait_ms, static_cast<int>(kSweepEvery.count()));
    }
    int n = epoll_wait(epoll_fd_, events, 2, wait_ms);
    if (n < 0 && errno != EINTR) {
      GPULET_LOG_ERROR("{}: epoll_wait failed: {}; serving stops", owner_->options_.name,
                       strerror(errno));
      return;
    }
    if (stopping_) return;
    MHD_run(daemon_);
    SteadyTime now = std::chrono::steady_clock::now();
    if (now - last_sweep_ >= kSweepEvery) Sweep(now);
  }
}

void Server::Impl::Sweep(SteadyTime now) {
  last_sweep_ = now;
  auto deadline = absl::ToChronoNanoseconds(limits_.header_deadline);
  for (auto& [conn, st] : conns_) {
    if (st.in_request || st.dropped || now - st.waiting_since < deadline) continue;
    // MHD sees the end of the stream and closes the connection itself (the descriptor stays
    // MHD's to close, so it cannot be reused under it).
    shutdown(st.fd, SHUT_RDWR);
    st.dropped = true;
  }
}

void Server::Impl::EvictOldestWaiting() {
  ConnState* oldest = nullptr;
  for (auto& [conn, st] : conns_) {
    if (st.in_request || st.dropped) continue;
    if (oldest == nullptr || st.waiting_since < oldest->waiting_since) oldest = &st;
  }
  if (oldest == nullptr) return;
  shutdown(oldest->fd, SHUT_RDWR);
  oldest->dropped = true;
}

void Server::Impl::OnConnection(void* cls, MHD_Connection* c, void** /*socket_context*/,
                                MHD_ConnectionNotificationCode toe) {
  Impl* self = static_cast<Impl*>(cls);
  if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
    self->conns_.erase(c);
    return;
  }
  const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  ConnState st;
  st.fd = info != nullptr ? info->connect_fd : -1;
  st.waiting_since = std::chrono::steady_clock::now();
  // The newest connection is not a candidate: it is the one being let in.
  size_t open = self->conns_.size() + 1;
  if (open > static_cast<size_t>(self->max_connections_)) self->EvictOldestWaiting();
  self->conns_[c] = st;
}

void Server::Impl::OnCompleted(void* cls, MHD_Connection* c, void** req_cls,
                               MHD_RequestTerminationCode /*toe*/) {
  Impl* self = static_cast<Impl*>(cls);
  if (*req_cls != &PlainRequest()) delete static_cast<PendingRequest*>(*req_cls);
  *req_cls = nullptr;
  auto it = self->conns_.find(c);
  if (it != self->conns_.end()) {
    it->second.in_request = false;
    it->second.waiting_since = std::chrono::steady_clock::now();
  }
}

MHD_Result Server::Impl::OnRequest(void* cls, MHD_Connection* c, const char* url,
                                   const char* method, const char* /*version*/,
                                   const char* /*upload_data*/, size_t* upload_data_size,
                                   void** req_cls) {
  return static_cast<Impl*>(cls)->Handle(c, url, method, upload_data_size, req_cls);
}

MHD_Result Server::Impl::Handle(MHD_Connection* c, absl::string_view path, absl::string_view method,
                                size_t* upload_data_size, void** req_cls) {
  auto* req = static_cast<PendingRequest*>(*req_cls);
  const Options& options = owner_->options_;
  if (req == nullptr) {
    // The header is complete. A write is refused at once, its body unread (MHD closes the
    // connection after the answer). Otherwise MHD closes a connection whose response is
    // queued in this first call, so the answer waits for the next one (keep-alive).
    if (method != "GET" && method != "HEAD") return RefuseWrite(c, path, method);
    auto it = conns_.find(c);
    if (it != conns_.end()) it->second.in_request = true;
    bool check = owner_->auth_.enabled() &&
                 std::find(options.open_paths.begin(), options.open_paths.end(), path) ==
                     options.open_paths.end();
    *req_cls = check ? new PendingRequest : &PlainRequest();
    return MHD_YES;
  }
  if (*upload_data_size != 0) {  // a request body is never used: read and dropped
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (req != &PlainRequest()) {
    if (!req->auth_submitted) {
      if (pending_auth_.load() >= limits_.max_pending_auth) {
        return QueueText(c, path, method, MHD_HTTP_SERVICE_UNAVAILABLE,
                         "too many basic-auth checks waiting; retry in a second\n");
      }
      const char* authorization =
          MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
      req->authorization = authorization != nullptr ? authorization : "";
      req->auth_submitted = true;
      ++pending_auth_;
      MHD_suspend_connection(c);
      auth_pool_.Submit([this, c, req] {
        bool ok = !stopping_ && owner_->auth_.Authorize(req->authorization);
        req->authorized = ok;
        req->done = true;
        --pending_auth_;
        MHD_resume_connection(c);  // `req` may be gone once this returns
      });
      return MHD_YES;
    }
    if (!req->done) return MHD_YES;
    if (!req->authorized) {
      return QueueText(c, path, method, MHD_HTTP_UNAUTHORIZED, "unauthorized\n",
                       {{MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Basic realm=\"gpulet\""}});
    }
  }
  return Respond(c, path, method);
}

MHD_Result Server::Impl::Respond(MHD_Connection* c, absl::string_view path,
                                 absl::string_view method) {
  auto header = [c](const char* name) {
    const char* v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    return absl::string_view(v != nullptr ? v : "");
  };
  return Queue(c, path, method,
               owner_->handler_(Request{method, path, header(MHD_HTTP_HEADER_ACCEPT)}),
               AcceptsGzip(header(MHD_HTTP_HEADER_ACCEPT_ENCODING)));
}

MHD_Result Server::Impl::RefuseWrite(MHD_Connection* c, absl::string_view path,
                                     absl::string_view method) {
  Response r = owner_->options_.refused_write;
  r.status = MHD_HTTP_METHOD_NOT_ALLOWED;
  r.cache_slot = -1;
  r.headers.emplace_back(MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  return Queue(c, path, method, r, false);
}

MHD_Result Server::Impl::Queue(MHD_Connection* c, absl::string_view path, absl::string_view method,
                               const Response& r, bool accepts_gzip) {
  bool gz = r.compress && accepts_gzip;
  bool cached = false;
  MHD_Response* response = ResponseFor(r, gz, &cached);
  if (response == nullptr && gz) response = ResponseFor(r, false, &cached);  // zlib failed
  if (response == nullptr) return MHD_NO;
  if (owner_->options_.access_log) {
    GPULET_LOG_INFO("{}: {} {} {}", owner_->options_.name, method, path, r.status);
  }
  MHD_Result q = MHD_queue_response(c, r.status, response);
  if (!cached) MHD_destroy_response(response);
  return q;
}

MHD_Response* Server::Impl::ResponseFor(const Response& r, bool gz, bool* cached) {
  *cached = false;
  if (r.file_fd >= 0) {
    int fd = fcntl(r.file_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return nullptr;
    MHD_Response* response = MHD_create_response_from_fd_at_offset64(
        r.file_size, fd, static_cast<int64_t>(r.file_offset));
    if (response == nullptr) {
      close(fd);
      return nullptr;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type);
    for (const auto& [name, value] : r.headers) {
      MHD_add_response_header(response, name.c_str(), value.c_str());
    }
    return response;
  }
  std::shared_ptr<const std::string> text =
      r.body != nullptr ? r.body : std::make_shared<const std::string>();
  const bool slot = r.cache_slot >= 0 && static_cast<size_t>(r.cache_slot) < cached_.size();
  CachedResponse* entry = slot ? &cached_[r.cache_slot][gz ? 1 : 0] : nullptr;
  // The cache holds the text it was built from, so a new text never has its address.
  if (entry != nullptr && entry->response != nullptr && entry->text == text) {
    *cached = true;
    return entry->response;
  }
  std::shared_ptr<const std::string> body = text;
  if (gz) {
    std::optional<std::string> zipped = Gzip(*text);
    if (!zipped) return nullptr;
    body = std::make_shared<const std::string>(*std::move(zipped));
  }
  MHD_Response* response = MakeResponse(r, std::move(body), gz);
  if (response == nullptr || entry == nullptr) return response;
  // Connections still sending the old response keep it (MHD counts references).
  if (entry->response != nullptr) MHD_destroy_response(entry->response);
  entry->text = std::move(text);
  entry->response = response;
  *cached = true;
  return response;
}

MHD_Response* Server::Impl::MakeResponse(const Response& r, std::shared_ptr<const std::string> body,
                                         bool gzipped) {
  // The response points into `body`, kept alive until MHD has no use for it.
  auto* hold = new std::shared_ptr<const std::string>(std::move(body));
  MHD_Response* response = MHD_create_response_from_buffer_with_free_callback_cls(
      (*hold)->size(), const_cast<char*>((*hold)->data()),
      [](void* p) { delete static_cast<std::shared_ptr<const std::string>*>(p); }, hold);
  if (response == nullptr) {
    delete hold;
    return nullptr;
  }
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type);
  if (gzipped) MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
  if (r.compress) {
    MHD_add_response_header(response, MHD_HTTP_HEADER_VARY, MHD_HTTP_HEADER_ACCEPT_ENCODING);
  }
  if (r.status == MHD_HTTP_SERVICE_UNAVAILABLE) {
    MHD_add_response_header(response, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  }
  for (const auto& [name, value] : r.headers) {
    MHD_add_response_header(response, name.c_str(), value.c_str());
  }
  return response;
}

MHD_Result Server::Impl::QueueText(MHD_Connection* c, absl::string_view path,
                                   absl::string_view method, unsigned status, const char* text,
                                   std::vector<std::pair<std::string, std::string>> headers) {
  Response r;
  r.status = status;
  r.body = std::make_shared<const std::string>(text);
  r.headers = std::move(headers);
  return Queue(c, path, method, r, false);
}

Server::Server(Handler handler, Options options)
    : handler_(std::move(handler)), options_(std::move(options)), auth_(options_.web.users) {}

Server::~Server() { Stop(); }

absl::Status Server::Start(const std::string& address, const Server* beside) {
  if (impl_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(options_.name, " on ", address, " was already started; make a new one"));
  }
  if (beside != nullptr && beside->impl_ != nullptr && beside->listen_fd_ >= 0 &&
      beside->address_ == address) {
    int fd = fcntl(beside->listen_fd_, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot share the listening socket on ", address, ": ", strerror(errno)));
    }
    return Serve(address, fd, beside->ipv6_, beside->port_);
  }
  absl::StatusOr<TcpListener> listener = ListenTcp(address, options_.address_flag);
  if (!listener.ok()) return listener.status();
  return Serve(address, listener->fd, listener->ipv6, listener->port);
}

absl::Status Server::Serve(const std::string& address, int fd, bool ipv6, int port) {
  impl_ = std::make_unique<Impl>(this);
  if (absl::Status s = impl_->Start(address, fd, ipv6); !s.ok()) {
    impl_.reset();
    return s;
  }
  port_ = port;
  address_ = address;
  listen_fd_ = fd;
  ipv6_ = ipv6;
  return absl::OkStatus();
}

void Server::Stop() {
  impl_.reset();
  listen_fd_ = -1;
}

}  // namespace gpulet::http
