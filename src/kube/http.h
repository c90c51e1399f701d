// HTTP/1.1 for the Kubernetes API client: request and response values, the request's wire
// form, an incremental response parser, and HttpTransport, the interface the client sends
// through (kube/tls_transport.h is the real one; tests put a fake behind it).
//
// The parser is written for one peer, the API server, reached over TLS, but it reads bytes
// that cross the network, so it is strict and bounded: a status line and header block of at
// most `max_head_bytes`, a body of at most `max_body_bytes` (a buffered response; a watch's
// stream goes to a sink and is bounded by its reader), Content-Length or chunked
// transfer-coding (watches are chunked) or, for HTTP/1.0-style responses, the body up to the
// connection's close. Transfer codings other than chunked are refused (gpulet never sends
// Accept-Encoding, so a conforming server never uses them); a response with both
// Transfer-Encoding and Content-Length, or with conflicting Content-Lengths, is refused as a
// possible smuggling attempt (RFC 9112 section 6.3). Interim 1xx responses are skipped. It is
// fuzzed (kube/http_response_fuzz.cc): any input, split anywhere, gives the same response or
// the same error.
//
// Thread-safety: the values are plain data; a parser belongs to one connection and one
// thread. HttpTransport implementations say their own contract (TlsTransport: any thread).
#ifndef GPULET_KUBE_HTTP_H_
#define GPULET_KUBE_HTTP_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gpulet::kube {

struct HttpHeader {
  std::string name;
  std::string value;
};

struct HttpRequest {
  std::string method;  // GET, POST, PUT, PATCH
  // origin-form: path and query ("/api/v1/nodes/n1?fieldManager=gpulet"), already escaped.
  std::string target;
  // Besides Host, Content-Length and Connection, which the transport writes itself.
  std::vector<HttpHeader> headers;
  std::string body;
};

struct HttpResponse {
  int status = 0;
  std::string reason;
  std::vector<HttpHeader> headers;
  std::string body;  // empty when the body went to a sink (a watch)

  // The first header called `name` (compared without case), or nullopt.
  std::optional<std::string> Header(absl::string_view name) const;
};

// The request on the wire: request line, Host, the caller's headers, Content-Length when
// there is a body (or the method is one that carries one), then the body. `host_header` is
// "host" or "host:port" as RFC 9110 section 7.2 says.
std::string SerializeRequest(const HttpRequest& request, absl::string_view host_header);

// Receives a response body piece by piece; returns false to stop reading (the transport
// then closes the connection).
using BodySink = std::function<bool(absl::string_view)>;

class HttpResponseParser {
 public:
  struct Limits {
    size_t max_head_bytes = 64 * 1024;
    size_t max_body_bytes = 16 * 1024 * 1024;  // buffered bodies only; a sink is unbounded
  };

  // `head_request`: the request was HEAD, so the response has no body whatever it says.
  explicit HttpResponseParser(Limits limits, bool head_request = false);
  HttpResponseParser() : HttpResponseParser(Limits{}) {}

  // Body bytes go to `sink` instead of response().body.
  void set_body_sink(BodySink sink) { sink_ = std::move(sink); }

  // Parses the next bytes of the connection. Returns how many it used: all of `data` unless
  // the response ended inside it (the rest is not this response's, and the connection must
  // not be reused). Errors: DataLoss (malformed), ResourceExhausted (over a limit),
  // Unimplemented (a transfer coding other than chunked, 101 Switching Protocols),
  // Cancelled (the sink asked to stop). After an error the parser takes nothing more.
  absl::StatusOr<size_t> Feed(absl::string_view data);
  // The peer closed the connection: completes a body that runs to the close; anywhere
  // else, DataLoss ("the connection closed after N bytes of ...").
  absl::Status FeedEof();

  bool head_complete() const { return state_ > State::kHeaders; }
  bool complete() const { return state_ == State::kDone; }
  // Whether the connection may carry another request once this response is complete.
  bool keep_alive() const { return keep_alive_; }
  const HttpResponse& response() const { return response_; }
  HttpResponse TakeResponse() { return std::move(response_); }

 private:
  enum class State {
    kStatusLine,
    kHeaders,
    kBodyLength,
    kChunkSize,
    kChunkData,
    kChunkDataEnd,
    kTrailers,
    kUntilClose,
    kDone,
    kError,
  };

  absl::Status Fail(absl::Status status);
  // Takes one line (without its CRLF or LF) from `data` at `*pos` into line_; true once a
  // whole line is there. Counts toward `limit` bytes of lines.
  absl::StatusOr<bool> TakeLine(absl::string_view data, size_t* pos, size_t limit,
                                absl::string_view what);
  absl::Status OnStatusLine();
  absl::Status OnHeaderLine();
  absl::Status OnHeadEnd();
  absl::Status OnChunkSizeLine();
  absl::Status Body(absl::string_view piece);

  Limits limits_;
  bool head_request_;
  BodySink sink_;
  State state_ = State::kStatusLine;
  absl::Status error_;
  HttpResponse response_;
  std::string line_;
  bool line_cr_ = false;  // line_ ended in CR: the LF may come in the next piece
  size_t head_bytes_ = 0;
  size_t body_bytes_ = 0;
  size_t remaining_ = 0;  // of the Content-Length body or of the current chunk
  bool keep_alive_ = false;
  bool http10_ = false;
};

// What a caller may ask of a streamed request.
struct StreamOptions {
  // The longest wait for the next bytes; past it the stream ends with DeadlineExceeded.
  absl::Duration idle_timeout = absl::Minutes(5);
  // Checked between reads (at least every 100 ms): once true, the stream ends with
  // Cancelled. May be null.
  const std::atomic<bool>* cancel = nullptr;
};

// Sends HTTP requests to one server. Errors are the transport's own (the connection, TLS,
// a malformed or oversized response): Unavailable (connect, reset, closed early),
// DeadlineExceeded (a deadline passed), DataLoss (malformed response), ResourceExhausted
// (over a size limit), FailedPrecondition (TLS verification failed: not retried, the
// configuration is wrong), Cancelled. An HTTP error status is a response, not an error.
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;

  // One request and its whole response, within `timeout` (connect, send, receive).
  virtual absl::StatusOr<HttpResponse> RoundTrip(const HttpRequest& request,
                                                 absl::Duration timeout) = 0;

  // A request whose response body is a stream: the head is returned once the body has ended
  // (or `on_body` returned false: then OK with what was read); each body piece goes to
  // `on_body` as it arrives. The connection is never reused. `connect_timeout` bounds the
  // connect, the request and the response head.
  virtual absl::StatusOr<HttpResponse> Stream(const HttpRequest& request,
                                              absl::Duration connect_timeout,
                                              const StreamOptions& options,
                                              const BodySink& on_body) = 0;
};

}  // namespace gpulet::kube

#endif  // GPULET_KUBE_HTTP_H_
