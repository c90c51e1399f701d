// The event-driven metrics server (src/metrics/http_server.h) against misbehaving clients:
// slowloris connections, idle keep-alive connections, more connections than the cap, slow
// basic auth; and its HTTP surface: gzip, OpenMetrics, errors, addresses, Start/Stop.
#include "metrics/http_server.h"

#include <crypt.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "metrics/sampler.h"
#include "testing/http_clients.h"

namespace gpulet {
namespace {

using testing::Get;
using testing::HttpResponse;

// A server over an empty store: the exposition still has gpulet's own families.
class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpLimits limits = HttpLimits(), WebConfig web = WebConfig()) {
    server_ =
        std::make_unique<MetricsServer>(&sampler_, &store_, std::move(web), RealClock(), limits);
    absl::Status s = server_->Start("127.0.0.1:0");
    ASSERT_TRUE(s.ok()) << s;
    port_ = server_->port();
  }

  // GET `path` answers 200 within `bound` and (for /metrics) carries the exposition.
  void ExpectAnswers(const std::string& path, absl::Duration bound = absl::Seconds(1)) {
    absl::Time t0 = absl::Now();
    std::optional<HttpResponse> r = Get(port_, path, bound);
    ASSERT_TRUE(r.has_value()) << path << " did not answer within " << bound << " (after "
                               << absl::Now() - t0 << ")";
    EXPECT_EQ(r->status, 200) << path;
    if (path == "/metrics") {
      EXPECT_TRUE(absl::StrContains(r->body, "gpulet_build_info"));
    }
    if (path == "/healthz") {
      EXPECT_EQ(r->body, "ok\n");
    }
  }

  DeviceStore store_;
  Sampler sampler_{nullptr, &store_, nullptr, {}, {"h", ""}};
  std::unique_ptr<MetricsServer> server_;
  int port_ = 0;
};

// Threads of this process now.
int Threads() {
  return static_cast<int>(std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                                        std::filesystem::directory_iterator()));
}

TEST_F(HttpServerTest, SlowlorisAndIdleKeepAliveDoNotBlockMetricsOrHealthz) {
  StartServer();
  const int threads_before = Threads();
  testing::IdleKeepAlive idle;
  ASSERT_TRUE(idle.Open(port_, 8, absl::Seconds(2)));
  testing::SlowClients slow;
  ASSERT_EQ(slow.Open(port_, 200, /*drip=*/true, absl::Seconds(1)), 200);
  // ~3 s of scrapes and probes while all 208 connections stay open and the 200 dribble a
  // header byte a second (each would hold a worker of a thread-per-connection server).
  absl::Time end = absl::Now() + absl::Seconds(3);
  int rounds = 0;
  while (absl::Now() < end) {
    ExpectAnswers("/metrics");
    ExpectAnswers("/healthz");
    ++rounds;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_GE(rounds, 10);
  // Connections cost the server no thread: the only new one is SlowClients' drip thread.
  EXPECT_EQ(Threads(), threads_before + 1);
  // They really were open all along (the header deadline is 10 s), and the idle
  // keep-alive connections still serve.
  EXPECT_EQ(slow.ClosedByServer(), 0);
  EXPECT_EQ(idle.Reuse(absl::Seconds(1)), 8);
}

TEST_F(HttpServerTest, HeaderDeadlineClosesSlowlorisAndIdleConnections) {
  HttpLimits limits;
  limits.header_deadline = absl::Seconds(1);
  limits.idle_timeout = absl::Seconds(30);  // so the deadline, not inactivity, closes them
  StartServer(limits);
  testing::IdleKeepAlive idle;
  ASSERT_TRUE(idle.Open(port_, 4, absl::Seconds(2)));
  testing::SlowClients slow;
  ASSERT_EQ(slow.Open(port_, 20, /*drip=*/true, absl::Milliseconds(200)), 20);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(slow.ClosedByServer(), 0) << "closed before the deadline";
  absl::Time end = absl::Now() + absl::Seconds(5);
  while (slow.ClosedByServer() < 20 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(slow.ClosedByServer(), 20) << "dribbling a byte every 200 ms must not extend the "
                                          "1 s header deadline";
  EXPECT_EQ(idle.Reuse(absl::Milliseconds(500)), 0) << "idle keep-alive outlived the deadline";
  ExpectAnswers("/healthz");
}

TEST_F(HttpServerTest, ConnectionCapOverflowKeepsServing) {
  HttpLimits limits;
  limits.max_connections = 50;
  limits.header_deadline = absl::Seconds(60);
  limits.idle_timeout = absl::Seconds(60);
  StartServer(limits);
  testing::SlowClients slow;
  ASSERT_EQ(slow.Open(port_, 150, /*drip=*/false), 150);
  for (int i = 0; i < 20; ++i) {
    ExpectAnswers("/healthz");
    ExpectAnswers("/metrics");
  }
  // Beyond the cap, the oldest connections still waiting for a header were closed.
  absl::Time end = absl::Now() + absl::Seconds(2);
  while (slow.ClosedByServer() < 100 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_GE(slow.ClosedByServer(), 100);
}

std::string BcryptHash(const std::string& password, int cost) {
  char salt[64];
  EXPECT_NE(crypt_gensalt_rn("$2b$", cost, nullptr, 0, salt, sizeof(salt)), nullptr);
  struct crypt_data data {};
  return crypt_r(password.c_str(), salt, &data);
}

TEST_F(HttpServerTest, SlowBasicAuthDoesNotBlockOtherConnections) {
  WebConfig web;
  web.users["prom"] = BcryptHash("s3cret", 13);  // ~0.5 s a check: far above a probe's bound
  StartServer(HttpLimits(), web);
  const std::string auth = absl::StrCat("Authorization: Basic ", absl::Base64Escape("prom:s3cret"));
  std::atomic<int> authorized{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> scrapers;
  for (int i = 0; i < 2; ++i) {
    scrapers.emplace_back([&] {
      while (!stop) {
        std::optional<HttpResponse> r = Get(port_, "/metrics", absl::Seconds(20), {auth});
        if (r && r->status == 200) ++authorized;
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(100));  // checks are running now
  std::vector<absl::Duration> probes;
  absl::Time end = absl::Now() + absl::Seconds(2);
  while (absl::Now() < end) {
    absl::Time t0 = absl::Now();
    ExpectAnswers("/healthz");
    probes.push_back(absl::Now() - t0);
    absl::SleepFor(absl::Milliseconds(20));
  }
  stop = true;
  for (std::thread& t : scrapers) t.join();
  EXPECT_GE(authorized.load(), 1);
  std::sort(probes.begin(), probes.end());
  // A probe waiting behind a bcrypt check would take its ~0.5 s; the median is far below.
  EXPECT_LT(probes[probes.size() / 2], absl::Milliseconds(200));
  // Without the password, still refused.
  std::optional<HttpResponse> r = Get(port_, "/metrics", absl::Seconds(5));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_TRUE(absl::StrContains(r->headers, "WWW-Authenticate: Basic realm=\"gpulet\""));
}

TEST_F(HttpServerTest, TooManyWaitingAuthChecksAreAnswered503) {
  WebConfig web;
  web.users["prom"] = BcryptHash("s3cret", 12);
  HttpLimits limits;
  limits.auth_threads = 1;
  limits.max_pending_auth = 1;
  StartServer(limits, web);
  const std::string auth = absl::StrCat("Authorization: Basic ", absl::Base64Escape("prom:s3cret"));
  std::vector<int> status(4, 0);
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] {
      std::optional<HttpResponse> r = Get(port_, "/metrics", absl::Seconds(20), {auth});
      status[i] = r ? r->status : 0;
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(std::count(status.begin(), status.end(), 0), 0);
  EXPECT_GE(std::count(status.begin(), status.end(), 200), 1);
  EXPECT_GE(std::count(status.begin(), status.end(), 503), 1);
}

TEST_F(HttpServerTest, StopWhileAuthChecksWaitIsPromptAndClean) {
  WebConfig web;
  web.users["prom"] = BcryptHash("s3cret", 12);  // ~0.25 s a check
  HttpLimits limits;
  limits.auth_threads = 1;
  StartServer(limits, web);
  const std::string auth = absl::StrCat("Authorization: Basic ", absl::Base64Escape("prom:s3cret"));
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&] { (void)Get(port_, "/metrics", absl::Seconds(10), {auth}); });
  }
  absl::SleepFor(absl::Milliseconds(150));  // one check running, the rest suspended
  absl::Time t0 = absl::Now();
  server_->Stop();  // MHD aborts if a connection is still suspended at its stop
  // The running check finishes; the queued ones are refused without hashing.
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  for (std::thread& t : clients) t.join();
  EXPECT_FALSE(Get(port_, "/healthz", absl::Milliseconds(500)).has_value());
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

TEST_F(HttpServerTest, GzipOpenMetricsAndErrors) {
  StartServer();
  std::optional<HttpResponse> plain = Get(port_, "/metrics", absl::Seconds(2));
  ASSERT_TRUE(plain);
  EXPECT_TRUE(absl::StrContains(plain->headers, "text/plain; version=0.0.4"));
  EXPECT_FALSE(absl::StrContains(plain->headers, "Content-Encoding"));
  std::optional<HttpResponse> gz =
      Get(port_, "/metrics", absl::Seconds(2), {"Accept-Encoding: gzip, deflate"});
  ASSERT_TRUE(gz);
  EXPECT_TRUE(absl::StrContains(gz->headers, "Content-Encoding: gzip")) << gz->headers;
  EXPECT_EQ(Gunzip(gz->body), plain->body);
  EXPECT_LT(gz->body.size(), plain->body.size());
  std::optional<HttpResponse> refused =
      Get(port_, "/metrics", absl::Seconds(2), {"Accept-Encoding: gzip;q=0, identity"});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->body, plain->body);

  std::optional<HttpResponse> om =
      Get(port_, "/metrics", absl::Seconds(2),
          {"Accept: application/openmetrics-text; version=1.0.0", "Accept-Encoding: gzip"});
  ASSERT_TRUE(om);
  EXPECT_TRUE(absl::StrContains(om->headers, "application/openmetrics-text; version=1.0.0"));
  EXPECT_TRUE(absl::EndsWith(Gunzip(om->body), "# EOF\n"));

  std::optional<HttpResponse> status =
      Get(port_, "/status", absl::Seconds(2), {"Accept-Encoding: gzip"});
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);
  EXPECT_TRUE(absl::StrContains(status->headers, "application/json"));
  EXPECT_TRUE(absl::StrContains(Gunzip(status->body), "\"gpus\"")) << Gunzip(status->body);

  std::optional<HttpResponse> missing = Get(port_, "/nope", absl::Seconds(2));
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  int fd = testing::ConnectLoopback(port_);
  ASSERT_GE(fd, 0);
  const char post[] = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc";
  ASSERT_EQ(send(fd, post, sizeof(post) - 1, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(post) - 1));
  std::optional<HttpResponse> bad = testing::ReadResponse(fd, absl::Now() + absl::Seconds(2));
  close(fd);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 405);
}

// A reload's new server starts beside the running one on the same address: it shares the
// listening socket, so a fixed port needs no second bind and never closes during the
// handover; once both stop, the port is free.
TEST(HttpServerAddressTest, AServerStartedBesideTheRunningOneSharesItsPort) {
  DeviceStore store;
  Sampler sampler(nullptr, &store, nullptr, {}, {"h", ""});
  MetricsServer first(&sampler, &store, WebConfig());
  ASSERT_TRUE(first.Start("127.0.0.1:0").ok());
  const std::string taken = absl::StrCat("127.0.0.1:", first.port());
  MetricsServer second(&sampler, &store, WebConfig());
  absl::Status s = second.Start("127.0.0.1:0", &first);  // the same address as configured
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(second.port(), first.port());
  first.Stop();
  std::optional<HttpResponse> r = Get(second.port(), "/healthz", absl::Seconds(5));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  // Still held: nothing else binds it in between.
  MetricsServer other(&sampler, &store, WebConfig());
  EXPECT_TRUE(absl::IsUnavailable(other.Start(taken)));
  // Beside a server on another address, or one stopped, a server binds its own.
  MetricsServer third(&sampler, &store, WebConfig());
  ASSERT_TRUE(third.Start("127.0.0.1:0", &first).ok());  // `first` is stopped
  EXPECT_NE(third.port(), second.port());
  second.Stop();
  MetricsServer again(&sampler, &store, WebConfig());
  EXPECT_TRUE(again.Start(taken).ok());
}

TEST(HttpServerAddressTest, PortInUseIsNamedIpv6AndStartStopAnyOrder) {
  DeviceStore store;
  Sampler sampler(nullptr, &store, nullptr, {}, {"h", ""});
  {
    MetricsServer never_started(&sampler, &store, WebConfig());
    never_started.Stop();  // Stop before Start
  }
  MetricsServer first(&sampler, &store, WebConfig());
  ASSERT_TRUE(first.Start("127.0.0.1:0").ok());
  const std::string taken = absl::StrCat("127.0.0.1:", first.port());
  MetricsServer second(&sampler, &store, WebConfig());
  absl::Status s = second.Start(taken);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), taken)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--metrics-address")) << s;
  first.Stop();
  first.Stop();  // idempotent

  // Stop right after Start, many times: never hangs, and the port is free again at once.
  for (int i = 0; i < 50; ++i) {
    MetricsServer quick(&sampler, &store, WebConfig());
    ASSERT_TRUE(quick.Start(taken).ok()) << i;
    quick.Stop();
  }

  // IPv6 loopback, where the machine has it.
  int probe = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  bool v6 = probe >= 0 && bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  if (probe >= 0) close(probe);
  if (!v6) GTEST_SKIP() << "no IPv6 loopback here";
  MetricsServer six(&sampler, &store, WebConfig());
  ASSERT_TRUE(six.Start("[::1]:0").ok());
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  a.sin6_port = htons(static_cast<uint16_t>(six.port()));
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(req) - 1));
  std::optional<HttpResponse> r = testing::ReadResponse(fd, absl::Now() + absl::Seconds(2));
  close(fd);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

}  // namespace
}  // namespace gpulet
