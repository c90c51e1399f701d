#include "kube/http.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet::kube {
namespace {

using ::testing::HasSubstr;

// Feeds `wire` to a fresh parser in pieces of `step` bytes, then EOF when `eof`.
absl::StatusOr<HttpResponse> Parse(const std::string& wire, size_t step, bool eof = false,
                                   HttpResponseParser::Limits limits = {}) {
  HttpResponseParser p(limits);
  for (size_t i = 0; i < wire.size() && !p.complete(); i += step) {
    absl::StatusOr<size_t> used = p.Feed(absl::string_view(wire).substr(i, step));
    if (!used.ok()) return used.status();
  }
  if (eof) {
    absl::Status s = p.FeedEof();
    if (!s.ok()) return s;
  }
  if (!p.complete()) return absl::DataLossError("incomplete");
  return p.TakeResponse();
}

TEST(KubeHttpParserTest, ContentLengthAndChunkedGiveTheSameBodyHoweverSplit) {
  const std::string length =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
      "11\r\n\r\n{\"a\":\"bcd\"}";
  const std::string chunked =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{\"a\"\r\n7\r\n:\"bcd\"}\r\n"
      "0\r\nTrailer: x\r\n\r\n";
  for (const std::string& wire : {length, chunked}) {
    for (size_t step = 1; step <= wire.size(); ++step) {
      absl::StatusOr<HttpResponse> r = Parse(wire, step);
      ASSERT_TRUE(r.ok()) << r.status() << " step " << step;
      EXPECT_EQ(r->status, 200);
      EXPECT_EQ(r->body, "{\"a\":\"bcd\"}");
    }
  }
  absl::StatusOr<HttpResponse> r = Parse(length, 3);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->Header("content-type"), "application/json");
  EXPECT_EQ(r->reason, "OK");
  EXPECT_FALSE(r->Header("X-Missing").has_value());
}

TEST(KubeHttpParserTest, KeepAliveFollowsVersionAndConnectionHeader) {
  HttpResponseParser a;
  ASSERT_TRUE(a.Feed("HTTP/1.1 204 No Content\r\n\r\n").ok());
  EXPECT_TRUE(a.complete());
  EXPECT_TRUE(a.keep_alive());
  HttpResponseParser b;
  ASSERT_TRUE(b.Feed("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").ok());
  EXPECT_TRUE(b.complete());
  EXPECT_FALSE(b.keep_alive());
  // No length: the body runs to the close, and the connection is done.
  HttpResponseParser c;
  ASSERT_TRUE(c.Feed("HTTP/1.0 200 OK\r\n\r\nabc").ok());
  EXPECT_FALSE(c.complete());
  ASSERT_TRUE(c.FeedEof().ok());
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(c.response().body, "abc");
  EXPECT_FALSE(c.keep_alive());
  // Bytes past the end: the response is complete, the connection not reusable.
  HttpResponseParser d;
  absl::StatusOr<size_t> used = d.Feed("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1");
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(*used, 39u);
  EXPECT_TRUE(d.complete());
  EXPECT_FALSE(d.keep_alive());
}

TEST(KubeHttpParserTest, SkipsInterimResponses) {
  absl::StatusOr<HttpResponse> r =
      Parse("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}", 5);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(r->body, "{}");
}

TEST(KubeHttpParserTest, RefusesMalformedAndAmbiguousResponses) {
  struct Case {
    const char* wire;
    absl::StatusCode code;
    const char* words;
  } cases[] = {
      {"HTTP/2 200 OK\r\n\r\n", absl::StatusCode::kDataLoss, "not an HTTP/1.x status line"},
      {"HTTP/1.1 2000 OK\r\n\r\n", absl::StatusCode::kDataLoss, "bad status code"},
      {"HTTP/1.1 099 Low\r\n\r\n", absl::StatusCode::kDataLoss, "bad status code"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
       absl::StatusCode::kDataLoss, "conflicting Content-Length"},
      {"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", absl::StatusCode::kDataLoss,
       "bad Content-Length"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n",
       absl::StatusCode::kDataLoss, "both Transfer-Encoding and Content-Length"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", absl::StatusCode::kUnimplemented,
       "only chunked"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", absl::StatusCode::kDataLoss,
       "bad chunk size"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
       absl::StatusCode::kDataLoss, "longer than its size"},
      {"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", absl::StatusCode::kDataLoss, "folded"},
      {"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", absl::StatusCode::kDataLoss, "bad header name"},
      {"HTTP/1.1 101 Switching Protocols\r\n\r\n", absl::StatusCode::kUnimplemented, "101"},
      {"HTTP/1.1 200 OK\rX: y\r\n\r\n", absl::StatusCode::kDataLoss, "bare CR"},
  };
  for (const Case& c : cases) {
    for (size_t step : {size_t{1}, size_t{1000}}) {
      absl::StatusOr<HttpResponse> r = Parse(c.wire, step);
      ASSERT_FALSE(r.ok()) << c.wire;
      EXPECT_EQ(r.status().code(), c.code) << c.wire << ": " << r.status();
      EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.words)) << c.wire;
    }
  }
}

TEST(KubeHttpParserTest, EnforcesItsLimits) {
  HttpResponseParser::Limits small{/*max_head_bytes=*/64, /*max_body_bytes=*/8};
  absl::StatusOr<HttpResponse> r =
      Parse("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n123456789", 4, false, small);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  r = Parse(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n12345\r\n5\r\n12345\r\n0\r\n\r\n",
      7, false, small);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  r = Parse(std::string("HTTP/1.1 200 OK\r\nX: ") + std::string(100, 'a') + "\r\n\r\n", 9, false,
            small);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  // Exactly at the limits is fine.
  r = Parse("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n12345678", 4, false, small);
  ASSERT_TRUE(r.ok()) << r.status();
}

TEST(KubeHttpParserTest, StreamsTheBodyToASinkThatMayStopIt) {
  std::string got;
  HttpResponseParser p(HttpResponseParser::Limits{1024, 4});  // a sink is not capped
  p.set_body_sink([&](absl::string_view piece) {
    got.append(piece.data(), piece.size());
    return got.size() < 12;
  });
  ASSERT_TRUE(p.Feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n").ok());
  EXPECT_TRUE(p.head_complete());
  EXPECT_FALSE(p.complete());
  EXPECT_EQ(got, "abcdef");
  absl::StatusOr<size_t> r = p.Feed("6\r\nghijkl\r\n");
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  EXPECT_EQ(got, "abcdefghijkl");
  EXPECT_TRUE(p.response().body.empty());
}

TEST(KubeHttpParserTest, ACloseBeforeTheEndIsAnError) {
  HttpResponseParser p;
  ASSERT_TRUE(p.Feed("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc").ok());
  absl::Status s = p.FeedEof();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("response body"));
  HttpResponseParser q;
  s = q.FeedEof();
  EXPECT_THAT(std::string(s.message()), HasSubstr("status line"));
}

TEST(KubeHttpParserTest, SerializesRequestsWithHostAndLength) {
  HttpRequest req{
      "PATCH", "/api/v1/nodes/n1?fieldValidation=Strict", {{"Accept", "application/json"}}, "{}"};
  EXPECT_EQ(SerializeRequest(req, "10.0.0.1:6443"),
            "PATCH /api/v1/nodes/n1?fieldValidation=Strict HTTP/1.1\r\nHost: 10.0.0.1:6443\r\n"
            "Accept: application/json\r\nContent-Length: 2\r\n\r\n{}");
  HttpRequest get{"GET", "/api", {}, ""};
  EXPECT_EQ(SerializeRequest(get, "h"), "GET /api HTTP/1.1\r\nHost: h\r\n\r\n");
}

}  // namespace
}  // namespace gpulet::kube
