#include "metrics/http_server.h"

#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <nettle/blowfish.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "common/periodic_worker.h"
#include "common/read_file.h"
#include "common/tcp_listen.h"
#include "gpu/sample_values.h"
#include "metrics/exposition.h"
#include "state/status_report.h"

namespace gpulet {

namespace {

// bcrypt's default cost, used for the dummy hash when no configured hash is bcrypt.
constexpr int kDefaultBcryptCost = 10;

// The cost of a bcrypt hash ("$2a$", "$2b$", "$2x$" or "$2y$" then two digits), or -1.
int BcryptCost(const std::string& hash) {
  if (hash.size() < 7 || hash[0] != '$' || hash[1] != '2' || hash[3] != '$' || hash[6] != '$') {
    return -1;
  }
  int cost = 0;
  if (!absl::SimpleAtoi(hash.substr(4, 2), &cost) || cost < 4 || cost > 31) return -1;
  return cost;
}

// Compares without an early exit: the time depends on the lengths only.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}
}  // namespace

bool CheckPassword(const std::string& password, const std::string& hash) {
  // Nettle's bcrypt (crypt_blowfish's algorithm, as libxcrypt's crypt(3) has it, which the
  // tests hash with): the rounds and salt come from `hash`, and the result is compared here
  // in constant time rather than by blowfish_bcrypt_verify's strcmp.
  uint8_t out[BLOWFISH_BCRYPT_HASH_SIZE] = {};
  if (blowfish_bcrypt_hash(out, password.size(), reinterpret_cast<const uint8_t*>(password.data()),
                           hash.size(), reinterpret_cast<const uint8_t*>(hash.data()), -1,
                           nullptr) != 1) {
    return false;
  }
  return ConstantTimeEquals(reinterpret_cast<const char*>(out), hash);
}

BasicAuth::BasicAuth(std::map<std::string, std::string> users, CheckFn check)
    : users_(std::move(users)), check_(std::move(check)) {
  int cost = -1;
  for (const auto& [user, hash] : users_) cost = std::max(cost, BcryptCost(hash));
  if (cost < 0) cost = kDefaultBcryptCost;
  // A full bcrypt setting with a fixed all-zero salt: bcrypt does the whole cost's work,
  // and its output never equals the setting, so the check fails.
  dummy_hash_ = absl::StrCat("$2b$", cost < 10 ? "0" : "", cost, "$", std::string(22, '.'));
}

bool BasicAuth::Authorize(absl::string_view authorization) const {
  if (!absl::StartsWith(authorization, "Basic ")) return false;
  std::string decoded;
  if (!absl::Base64Unescape(authorization.substr(6), &decoded)) return false;
  size_t c = decoded.find(':');
  if (c == std::string::npos) return false;
  absl::string_view user = absl::string_view(decoded).substr(0, c);
  // Every configured name is compared, whether or not an earlier one matched.
  const std::string* hash = &dummy_hash_;
  bool known = false;
  for (const auto& [name, user_hash] : users_) {
    bool match = ConstantTimeEquals(name, user);
    hash = match ? &user_hash : hash;
    known = known || match;
  }
  bool password_ok = check_(decoded.substr(c + 1), *hash);
  return known && password_ok;
}

std::string MetricsServer::StatusJson(const Snapshot& snap, const SampleSet& samples) {
  return StatusJson(snap, samples, RealClock()->Now());
}

std::string MetricsServer::StatusJson(const Snapshot& snap, const SampleSet& samples,
                                      absl::Time now) {
  // The store's part comes from StatusFromSnapshot; the sampler and pod attribution add
  // theirs here. The wire format is StatusReport's (state/status_report.h).
  StatusReport report = StatusFromSnapshot(snap);
  for (size_t i = 0; i < snap.devices.size(); ++i) {
    const DeviceRecord& d = snap.devices[i];
    GpuStatus& g = report.gpus[i];
    if (samples.pods != nullptr) {
      g.allocations.emplace();
      auto held = samples.pods->by_gpu.find(d.gpu.uuid);
      if (held != samples.pods->by_gpu.end()) {
        for (const GpuAssignment& a : held->second) {
          g.allocations->push_back(
              {a.holder.namespace_name, a.holder.pod, a.holder.container, a.resource, a.device_id});
        }
      }
    }
    for (const SliceSample& slice : samples.slices) {
      if (slice.usage.gpu_uuid != d.gpu.uuid) continue;
      SliceStatus s;
      s.slice = slice.name;
      s.owner = slice.usage.owner;
      s.quota_bytes = slice.usage.quota_bytes;
      s.used_bytes = slice.usage.in_use_bytes;
      s.peak_bytes = slice.usage.peak_bytes;
      s.refused = slice.usage.refused;
      s.processes = static_cast<unsigned>(slice.usage.processes.size());
      if (slice.device) s.device_used_bytes = slice.device->used_bytes;
      if (std::optional<PodContainer> who = SliceHolder(slice, samples.pods.get())) {
        s.namespace_name = who->namespace_name;
        s.pod = who->pod;
        s.container = who->container;
      }
      if (!g.vram_slices) g.vram_slices.emplace();
      g.vram_slices->push_back(std::move(s));
    }
    if (auto holder = samples.vram_holders.find(d.gpu.uuid); holder != samples.vram_holders.end()) {
      g.vram_enforcement = holder->second;
    }
    if (auto fault = samples.last_faults.find(d.gpu.uuid); fault != samples.last_faults.end()) {
      g.last_fault = fault->second;
    }
    auto it = samples.by_uuid.find(d.gpu.uuid);
    if (it == samples.by_uuid.end()) continue;
    const GpuSampleState& st = it->second;
    g.answering = st.answering;
    if (!st.error.empty()) g.sample_error = st.error;
    if (!st.last) continue;
    const DeviceSample& s = *st.last;
    g.sample_age_seconds = absl::ToDoubleSeconds(now - s.taken);
    if (!st.answering) continue;
    for (const SampleValue& row : SampleValues()) {
      if (row.status_key == nullptr) continue;
      if (std::optional<double> v = ReadValue(row, s)) g.values[row.id] = *v;
    }
    g.processes.emplace();
    for (const GpuProcess& p : s.processes) {
      ProcessStatus ps;
      ps.pid = p.pid;
      auto proc = st.processes.find(p.pid);
      if (proc != st.processes.end()) {
        ps.name = proc->second.name;
        std::optional<PodContainer> pod = ProcessPod(samples, d.gpu.uuid, proc->second);
        if (pod) {
          ps.namespace_name = pod->namespace_name;
          ps.pod = pod->pod;
          ps.container = pod->container;
        }
      }
      ps.used_bytes = p.used_bytes;
      g.processes->push_back(std::move(ps));
    }
  }
  return report.ToJsonText();
}

namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

// How often the event loop looks for connections past their header deadline.
constexpr auto kSweepEvery = std::chrono::milliseconds(100);
// Each connection's buffer for the request (header and any body it reads).
constexpr size_t kConnectionMemory = 16 * 1024;
// File descriptors kept for everything but connections when sizing the cap to RLIMIT_NOFILE.
constexpr rlim_t kSpareFds = 256;

// True when an Accept-Encoding value allows gzip ("gzip", "x-gzip", not with q=0).
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
struct Request {
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
Request& PlainRequest() {
  static Request plain;
  return plain;
}

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

// Everything that exists while the server runs. All members without a lock are touched only
// on the event thread (handlers, MHD's callbacks, the sweep), or by Start/Stop while that
// thread is not running.
class MetricsServer::Impl {
 public:
  Impl(MetricsServer* owner, HttpLimits limits) : owner_(owner), limits_(limits) {}
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
  MHD_Result Respond(MHD_Connection* c, absl::string_view path, absl::string_view method);
  MHD_Result Send(MHD_Connection* c, unsigned status, std::shared_ptr<const std::string> body,
                  const char* content_type, bool gzipped);
  MHD_Result SendText(MHD_Connection* c, unsigned status, const char* text);
  // The response for the sampler's current exposition in that format and encoding, built
  // once per round and shared by every scrape until the next; nullptr when MHD or zlib fail.
  MHD_Response* MetricsResponse(bool om, bool gz);
  static MHD_Response* MakeResponse(std::shared_ptr<const std::string> body,
                                    const char* content_type, bool gzipped);
  void Loop();
  void Sweep(SteadyTime now);
  void EvictOldestWaiting();

  MetricsServer* owner_;
  HttpLimits limits_;
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
  // By format (text, OpenMetrics) and encoding (identity, gzip): the exposition a response
  // was built from, and the response.
  struct CachedResponse {
    std::shared_ptr<const std::string> text;
    MHD_Response* response = nullptr;
  };
  CachedResponse cached_[2][2];
  // The TLS PEMs; MHD reads them at start, kept for the daemon's life all the same.
  std::string cert_pem_, key_pem_;
};

absl::Status MetricsServer::Impl::Start(const std::string& address, int listen_fd, bool ipv6) {
  const WebConfig& web = owner_->web_;
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
          "metrics server: the open-file limit ({}) leaves room for {} connections, not {}; "
          "raise the hard limit (ulimit -Hn) to allow more",
          nofile.rlim_cur, fit, max_connections_);
      max_connections_ = std::max(16, fit);
    }
  }

  std::vector<MHD_OptionItem> opts;
  auto opt = [&](MHD_OPTION o, intptr_t v, void* p = nullptr) { opts.push_back({o, v, p}); };
  static char kWho[] = "metrics server (libmicrohttpd)";
  opt(MHD_OPTION_EXTERNAL_LOGGER, reinterpret_cast<intptr_t>(&LogLibraryMessage), kWho);
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
  if (!owner_->web_.users.empty()) {
    auth_pool_.Start(std::max(1, limits_.auth_threads), "gpulet-httpauth");
  }
  last_sweep_ = std::chrono::steady_clock::now();
  thread_ = StartNamedThread("gpulet-http", [this] { Loop(); });
  return absl::OkStatus();
}

void MetricsServer::Impl::Shutdown() {
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

void MetricsServer::Impl::Loop() {
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
      GPULET_LOG_ERROR("metrics server: epoll_wait failed: {}; serving stops", strerror(errno));
      return;
    }
    if (stopping_) return;
    MHD_run(daemon_);
    SteadyTime now = std::chrono::steady_clock::now();
    if (now - last_sweep_ >= kSweepEvery) Sweep(now);
  }
}

void MetricsServer::Impl::Sweep(SteadyTime now) {
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

void MetricsServer::Impl::EvictOldestWaiting() {
  ConnState* oldest = nullptr;
  for (auto& [conn, st] : conns_) {
    if (st.in_request || st.dropped) continue;
    if (oldest == nullptr || st.waiting_since < oldest->waiting_since) oldest = &st;
  }
  if (oldest == nullptr) return;
  shutdown(oldest->fd, SHUT_RDWR);
  oldest->dropped = true;
}

void MetricsServer::Impl::OnConnection(void* cls, MHD_Connection* c, void** /*socket_context*/,
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

void MetricsServer::Impl::OnCompleted(void* cls, MHD_Connection* c, void** req_cls,
                                      MHD_RequestTerminationCode /*toe*/) {
  Impl* self = static_cast<Impl*>(cls);
  if (*req_cls != &PlainRequest()) delete static_cast<Request*>(*req_cls);
  *req_cls = nullptr;
  auto it = self->conns_.find(c);
  if (it != self->conns_.end()) {
    it->second.in_request = false;
    it->second.waiting_since = std::chrono::steady_clock::now();
  }
}

MHD_Result MetricsServer::Impl::OnRequest(void* cls, MHD_Connection* c, const char* url,
                                          const char* method, const char* /*version*/,
                                          const char* /*upload_data*/, size_t* upload_data_size,
                                          void** req_cls) {
  return static_cast<Impl*>(cls)->Handle(c, url, method, upload_data_size, req_cls);
}

MHD_Result MetricsServer::Impl::Handle(MHD_Connection* c, absl::string_view path,
                                       absl::string_view method, size_t* upload_data_size,
                                       void** req_cls) {
  auto* req = static_cast<Request*>(*req_cls);
  if (req == nullptr) {
    // The header is complete. MHD closes a connection whose response is queued in this
    // first call, so the answer waits for the next one (keep-alive).
    auto it = conns_.find(c);
    if (it != conns_.end()) it->second.in_request = true;
    bool check = !owner_->web_.users.empty() && path != "/healthz";
    *req_cls = check ? new Request : &PlainRequest();
    return MHD_YES;
  }
  if (*upload_data_size != 0) {  // a request body is never used: read and dropped
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (req != &PlainRequest()) {
    if (!req->auth_submitted) {
      if (pending_auth_.load() >= limits_.max_pending_auth) {
        return SendText(c, MHD_HTTP_SERVICE_UNAVAILABLE,
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
      MHD_Response* r = MHD_create_response_from_buffer(13, const_cast<char*>("unauthorized\n"),
                                                        MHD_RESPMEM_PERSISTENT);
      if (r == nullptr) return MHD_NO;
      MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
      MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Basic realm=\"gpulet\"");
      MHD_Result q = MHD_queue_response(c, MHD_HTTP_UNAUTHORIZED, r);
      MHD_destroy_response(r);
      return q;
    }
  }
  return Respond(c, path, method);
}

MHD_Result MetricsServer::Impl::Respond(MHD_Connection* c, absl::string_view path,
                                        absl::string_view method) {
  if (method != "GET" && method != "HEAD") {
    return SendText(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD are served\n");
  }
  auto header = [c](const char* name) {
    const char* v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    return absl::string_view(v != nullptr ? v : "");
  };
  if (path == "/healthz") return SendText(c, MHD_HTTP_OK, "ok\n");
  if (path == "/metrics") {
    bool om = absl::StrContains(header(MHD_HTTP_HEADER_ACCEPT), "application/openmetrics-text");
    bool gz = AcceptsGzip(header(MHD_HTTP_HEADER_ACCEPT_ENCODING));
    MHD_Response* r = MetricsResponse(om, gz);
    if (r == nullptr && gz) r = MetricsResponse(om, false);  // zlib failed: send it plain
    if (r == nullptr) return MHD_NO;
    return MHD_queue_response(c, MHD_HTTP_OK, r);
  }
  if (path == "/status") {
    std::string json = MetricsServer::StatusJson(
        *owner_->store_->Get(), *owner_->sampler_->Samples(), owner_->clock_->Now());
    bool gz = AcceptsGzip(header(MHD_HTTP_HEADER_ACCEPT_ENCODING));
    std::optional<std::string> zipped;
    if (gz) zipped = Gzip(json);
    bool gzipped = zipped.has_value();  // read before the move below: argument order is free
    return Send(c, MHD_HTTP_OK,
                std::make_shared<const std::string>(gzipped ? *std::move(zipped) : std::move(json)),
                "application/json", gzipped);
  }
  return SendText(c, MHD_HTTP_NOT_FOUND, "not found: gpulet serves /metrics, /healthz, /status\n");
}

MHD_Response* MetricsServer::Impl::MetricsResponse(bool om, bool gz) {
  std::shared_ptr<const std::string> text = owner_->sampler_->Exposition(om);
  if (text == nullptr) text = std::make_shared<const std::string>();
  CachedResponse& cached = cached_[om ? 1 : 0][gz ? 1 : 0];
  // The cache holds the text it was built from, so a new round's text never has its address.
  if (cached.response != nullptr && cached.text == text) return cached.response;
  std::shared_ptr<const std::string> body = text;
  if (gz) {
    std::optional<std::string> zipped = Gzip(*text);
    if (!zipped) return nullptr;
    body = std::make_shared<const std::string>(*std::move(zipped));
  }
  MHD_Response* r = MakeResponse(std::move(body),
                                 om ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                    : "text/plain; version=0.0.4; charset=utf-8",
                                 gz);
  if (r == nullptr) return nullptr;
  // Connections still sending the old response keep it (MHD counts references).
  if (cached.response != nullptr) MHD_destroy_response(cached.response);
  cached.text = std::move(text);
  cached.response = r;
  return r;
}

MHD_Response* MetricsServer::Impl::MakeResponse(std::shared_ptr<const std::string> body,
                                                const char* content_type, bool gzipped) {
  // The response points into `body`, kept alive until MHD has no use for it.
  auto* hold = new std::shared_ptr<const std::string>(std::move(body));
  MHD_Response* r = MHD_create_response_from_buffer_with_free_callback_cls(
      (*hold)->size(), const_cast<char*>((*hold)->data()),
      [](void* p) { delete static_cast<std::shared_ptr<const std::string>*>(p); }, hold);
  if (r == nullptr) {
    delete hold;
    return nullptr;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (gzipped) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
  MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, MHD_HTTP_HEADER_ACCEPT_ENCODING);
  return r;
}

MHD_Result MetricsServer::Impl::Send(MHD_Connection* c, unsigned status,
                                     std::shared_ptr<const std::string> body,
                                     const char* content_type, bool gzipped) {
  MHD_Response* r = MakeResponse(std::move(body), content_type, gzipped);
  if (r == nullptr) return MHD_NO;
  MHD_Result q = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return q;
}

MHD_Result MetricsServer::Impl::SendText(MHD_Connection* c, unsigned status, const char* text) {
  MHD_Response* r = MHD_create_response_from_buffer(std::strlen(text), const_cast<char*>(text),
                                                    MHD_RESPMEM_PERSISTENT);
  if (r == nullptr) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
  if (status == MHD_HTTP_SERVICE_UNAVAILABLE) {
    MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  }
  MHD_Result q = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return q;
}

MetricsServer::MetricsServer(const Sampler* sampler, const DeviceStore* store, WebConfig web,
                             const Clock* clock, HttpLimits limits)
    : sampler_(sampler),
      store_(store),
      web_(std::move(web)),
      auth_(web_.users),
      clock_(clock),
      limits_(limits) {}

MetricsServer::~MetricsServer() { Stop(); }

absl::Status MetricsServer::Start(const std::string& address, const MetricsServer* beside) {
  if (impl_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("metrics server on ", address, " was already started; make a new one"));
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
  absl::StatusOr<TcpListener> listener = ListenTcp(address, "--metrics-address");
  if (!listener.ok()) return listener.status();
  return Serve(address, listener->fd, listener->ipv6, listener->port);
}

absl::Status MetricsServer::Serve(const std::string& address, int fd, bool ipv6, int port) {
  impl_ = std::make_unique<Impl>(this, limits_);
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

void MetricsServer::Stop() {
  impl_.reset();
  listen_fd_ = -1;
}

}  // namespace gpulet
