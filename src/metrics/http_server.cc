#include "metrics/http_server.h"

#include <crypt.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/periodic_worker.h"
#include "httplib.h"
#include "metrics/exposition.h"
#include "state/status_report.h"

namespace gpulet {

namespace {
constexpr size_t kHttpWorkers = 8;

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
  struct crypt_data data;
  std::memset(&data, 0, sizeof(data));
  const char* out = crypt_r(password.c_str(), hash.c_str(), &data);
  if (out == nullptr || out[0] == '*') return false;
  // Constant-time comparison.
  size_t n = std::strlen(out);
  if (n != hash.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(out[i] ^ hash[i]);
  return diff == 0;
}

BasicAuth::BasicAuth(std::map<std::string, std::string> users, CheckFn check)
    : users_(std::move(users)), check_(std::move(check)) {
  int cost = -1;
  for (const auto& [user, hash] : users_) cost = std::max(cost, BcryptCost(hash));
  if (cost < 0) cost = kDefaultBcryptCost;
  // A full bcrypt setting with a fixed all-zero salt: crypt(3) does the whole cost's work,
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

MetricsServer::MetricsServer(const Sampler* sampler, const DeviceStore* store, WebConfig web,
                             const Clock* clock)
    : sampler_(sampler), store_(store), web_(std::move(web)), auth_(web_.users), clock_(clock) {}

MetricsServer::~MetricsServer() { Stop(); }

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
    auto it = samples.by_uuid.find(d.gpu.uuid);
    if (it == samples.by_uuid.end()) continue;
    const GpuSampleState& st = it->second;
    g.answering = st.answering;
    if (!st.error.empty()) g.sample_error = st.error;
    if (!st.last) continue;
    const DeviceSample& s = *st.last;
    g.sample_age_seconds = absl::ToDoubleSeconds(now - s.taken);
    if (!st.answering) continue;
    g.utilization_percent = s.gpu_util;
    g.memory_used_bytes = s.fb_used_bytes;
    g.temperature_c = s.gpu_temp_c;
    g.power_w = s.power_w;
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

absl::Status MetricsServer::Start(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "' needs a port, e.g. :9400"));
  }
  std::string host = address.substr(0, colon);
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "' has an invalid port"));
  }
  if (host.empty()) host = "0.0.0.0";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (!web_.cert_file.empty()) {
    server_ = std::make_unique<httplib::SSLServer>(web_.cert_file.c_str(), web_.key_file.c_str());
    if (!server_->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot start HTTPS with cert ", web_.cert_file, " and key ", web_.key_file,
                       ": check that both exist, are readable and match"));
    }
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& s = *server_;
  s.set_tcp_nodelay(true);
  s.set_read_timeout(5, 0);
  s.set_write_timeout(5, 0);
  // cpp-httplib serves a connection on one worker until it closes, so a kept-alive
  // connection holds its worker between requests. Eight workers serve eight concurrent
  // scrapers without queueing (a node sees one or two); a connection is closed after 100
  // requests or 2 s idle, so extra connections wait at most that long for a worker instead
  // of behind a connection that never ends. Idle workers cost only untouched stack.
  s.set_keep_alive_max_count(100);
  s.set_keep_alive_timeout(2);
  s.new_task_queue = [] { return new httplib::ThreadPool(kHttpWorkers); };
  if (!web_.users.empty()) {
    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path == "/healthz") return httplib::Server::HandlerResponse::Unhandled;
      if (auth_.Authorize(req.get_header_value("Authorization"))) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      res.status = 401;
      res.set_header("WWW-Authenticate", "Basic realm=\"gpulet\"");
      res.set_content("unauthorized\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    });
  }
  s.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    bool om = absl::StrContains(req.get_header_value("Accept"), "application/openmetrics-text");
    std::shared_ptr<const std::string> text = sampler_->Exposition(om);
    res.set_content(*text, om ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                              : "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  s.Get("/status", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(StatusJson(*store_->Get(), *sampler_->Samples(), clock_->Now()),
                    "application/json");
  });
  if (port == 0) {
    port_ = s.bind_to_any_port(host.c_str());
    if (port_ <= 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
    }
  } else {
    if (!s.bind_to_port(host.c_str(), port)) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", address,
          ": the port is in use or the address is not local; change --metrics-address"));
    }
    port_ = port;
  }
  listen_returned_ = false;
  thread_ = StartNamedThread("gpulet-http", [this] {
    server_->listen_after_bind();
    listen_returned_ = true;
  });
  return absl::OkStatus();
}

void MetricsServer::Stop() {
  // httplib's stop() does nothing until the listener thread has entered its accept loop,
  // and that loop would then run forever: a Stop right after Start (a SIGTERM during
  // start-up) waits, briefly, until the loop runs or has returned.
  if (server_ && thread_.joinable()) {
    while (!server_->is_running() && !listen_returned_) std::this_thread::yield();
  }
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace gpulet
