#include "metrics/http_server.h"

#include <crypt.h>

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/periodic_worker.h"
#include "httplib.h"
#include "metrics/exposition.h"
#include "state/status_report.h"
#include "yaml-cpp/yaml.h"

namespace gpulet {

namespace {
constexpr size_t kHttpWorkers = 8;
}  // namespace

absl::StatusOr<WebConfig> LoadWebConfig(const std::string& path) {
  WebConfig web;
  if (path.empty()) return web;
  try {
    YAML::Node root = YAML::LoadFile(path);
    for (const auto& kv : root) {
      std::string key = kv.first.as<std::string>();
      if (key == "tls_server_config") {
        for (const auto& t : kv.second) {
          std::string k = t.first.as<std::string>();
          if (k == "cert_file") {
            web.cert_file = t.second.as<std::string>();
          } else if (k == "key_file") {
            web.key_file = t.second.as<std::string>();
          } else {
            return absl::InvalidArgumentError(
                absl::StrCat(path, ": tls_server_config.", k,
                             " is not supported by gpulet (supported: cert_file, key_file)"));
          }
        }
      } else if (key == "basic_auth_users") {
        for (const auto& u : kv.second) {
          web.users[u.first.as<std::string>()] = u.second.as<std::string>();
        }
      } else if (key == "http_server_config") {
        continue;  // HTTP/2 and header settings do not apply to gpulet's server
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": unknown key '", key,
                         "' (allowed: tls_server_config, basic_auth_users, http_server_config)"));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read web config ", path, ": ", e.what()));
  }
  if (web.cert_file.empty() != web.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tls_server_config needs both cert_file and key_file"));
  }
  return web;
}

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

MetricsServer::MetricsServer(const Sampler* sampler, const DeviceStore* store, WebConfig web,
                             const Clock* clock)
    : sampler_(sampler), store_(store), web_(std::move(web)), clock_(clock) {}

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
      std::string auth = req.get_header_value("Authorization");
      if (absl::StartsWith(auth, "Basic ")) {
        std::string decoded;
        if (absl::Base64Unescape(auth.substr(6), &decoded)) {
          size_t c = decoded.find(':');
          if (c != std::string::npos) {
            auto it = web_.users.find(decoded.substr(0, c));
            if (it != web_.users.end() && CheckPassword(decoded.substr(c + 1), it->second)) {
              return httplib::Server::HandlerResponse::Unhandled;
            }
          }
        }
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
  thread_ = StartNamedThread("gpulet-http", [this] { server_->listen_after_bind(); });
  return absl::OkStatus();
}

void MetricsServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace gpulet
