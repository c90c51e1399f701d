#include "metrics/metrics_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "http/web_config.h"
#include "metrics/sampler.h"
#include "state/device_store.h"
#include "testing/http_clients.h"

namespace gpulet::metrics {
namespace {

using testing::Get;
using testing::HttpResponse;

// The metrics endpoint over an empty store (the exposition still has gpulet's own families):
// each path's content type and encoding, 404 naming what is served, 405 for a write.
TEST(MetricsServerTest, ServesEachPathGzipWhereAllowedAndRefusesTheRest) {
  state::DeviceStore store;
  Sampler sampler(nullptr, &store, nullptr, {}, {"h", ""});
  MetricsServer server(&sampler, &store, http::WebConfig());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const int port = server.port();
  std::optional<HttpResponse> plain = Get(port, "/metrics", absl::Seconds(2));
  ASSERT_TRUE(plain);
  EXPECT_TRUE(absl::StrContains(plain->headers, "text/plain; version=0.0.4"));
  EXPECT_FALSE(absl::StrContains(plain->headers, "Content-Encoding"));
  std::optional<HttpResponse> gz =
      Get(port, "/metrics", absl::Seconds(2), {"Accept-Encoding: gzip, deflate"});
  ASSERT_TRUE(gz);
  EXPECT_TRUE(absl::StrContains(gz->headers, "Content-Encoding: gzip")) << gz->headers;
  EXPECT_EQ(testing::Gunzip(gz->body), plain->body);
  EXPECT_LT(gz->body.size(), plain->body.size());
  std::optional<HttpResponse> refused =
      Get(port, "/metrics", absl::Seconds(2), {"Accept-Encoding: gzip;q=0, identity"});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->body, plain->body);

  std::optional<HttpResponse> om =
      Get(port, "/metrics", absl::Seconds(2),
          {"Accept: application/openmetrics-text; version=1.0.0", "Accept-Encoding: gzip"});
  ASSERT_TRUE(om);
  EXPECT_TRUE(absl::StrContains(om->headers, "application/openmetrics-text; version=1.0.0"));
  EXPECT_TRUE(absl::EndsWith(testing::Gunzip(om->body), "# EOF\n"));

  std::optional<HttpResponse> status =
      Get(port, "/status", absl::Seconds(2), {"Accept-Encoding: gzip"});
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);
  EXPECT_TRUE(absl::StrContains(status->headers, "application/json"));
  EXPECT_TRUE(absl::StrContains(testing::Gunzip(status->body), "\"gpus\""))
      << testing::Gunzip(status->body);

  std::optional<HttpResponse> missing = Get(port, "/nope", absl::Seconds(2));
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  int fd = testing::ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  const char post[] = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc";
  ASSERT_EQ(send(fd, post, sizeof(post) - 1, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(post) - 1));
  std::optional<HttpResponse> bad = testing::ReadResponse(fd, absl::Now() + absl::Seconds(2));
  close(fd);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 405);

  std::optional<HttpResponse> ok = Get(port, "/healthz", absl::Seconds(2));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->body, "ok\n");
  EXPECT_TRUE(absl::StrContains(missing->body, "gpulet serves /metrics, /healthz, /status"));
  EXPECT_TRUE(absl::StrContains(bad->headers, "Allow: GET, HEAD")) << bad->headers;
}

}  // namespace
}  // namespace gpulet::metrics
