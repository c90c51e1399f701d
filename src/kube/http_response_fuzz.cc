// libFuzzer target for the API client's HTTP/1.1 response parser (kube/http.h). It reads
// bytes from the network, so any input must give a response or an error, never a crash, and
// the answer must not depend on how the bytes were split into reads. Properties checked:
//  - the input fed whole, split at a point the input chooses, and fed byte by byte gives the
//    same outcome: the same error code, or the same status, headers, body and bytes used;
//  - a buffered body never exceeds max_body_bytes; a complete response's status is 200-599;
//  - a body sink receives exactly the bytes the buffered parse collects.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kube/http.h"

namespace {

using gpulet::kube::HttpResponse;
using gpulet::kube::HttpResponseParser;

struct Outcome {
  absl::StatusCode code = absl::StatusCode::kOk;
  bool complete = false;
  bool keep_alive = false;
  size_t used = 0;
  HttpResponse response;
  std::string sunk;
};

constexpr HttpResponseParser::Limits kLimits{/*max_head_bytes=*/1024, /*max_body_bytes=*/4096};

Outcome Run(const std::string& wire, size_t step, bool head, bool eof, bool sink) {
  Outcome o;
  HttpResponseParser p(kLimits, head);
  if (sink) {
    p.set_body_sink([&o](absl::string_view piece) {
      o.sunk.append(piece.data(), piece.size());
      return true;
    });
  }
  for (size_t i = 0; i < wire.size(); i += step) {
    absl::StatusOr<size_t> used = p.Feed(absl::string_view(wire).substr(i, step));
    if (!used.ok()) {
      o.code = used.status().code();
      return o;
    }
    o.used += *used;  // past the end of the response, Feed takes nothing more
  }
  if (eof && !p.complete()) {
    absl::Status s = p.FeedEof();
    if (!s.ok()) {
      o.code = s.code();
      return o;
    }
  }
  o.complete = p.complete();
  o.keep_alive = p.keep_alive();
  o.response = p.TakeResponse();
  return o;
}

bool SameResponse(const HttpResponse& a, const HttpResponse& b) {
  if (a.status != b.status || a.reason != b.reason || a.body != b.body ||
      a.headers.size() != b.headers.size()) {
    return false;
  }
  for (size_t i = 0; i < a.headers.size(); ++i) {
    if (a.headers[i].name != b.headers[i].name || a.headers[i].value != b.headers[i].value) {
      return false;
    }
  }
  return true;
}

void Check(const Outcome& a, const Outcome& b) {
  if (a.code != b.code || a.complete != b.complete) std::abort();
  if (a.code != absl::StatusCode::kOk) return;
  if (!SameResponse(a.response, b.response)) std::abort();
  if (a.complete && a.keep_alive != b.keep_alive) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 8192) return 0;
  const uint8_t flags = data[0];
  const std::string wire(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool head = flags & 1;
  const bool eof = flags & 2;
  const size_t split = wire.empty() ? 1 : 1 + (static_cast<size_t>(flags >> 2) * 37) % wire.size();

  Outcome whole = Run(wire, wire.size() + 1, head, eof, false);
  Outcome halves = Run(wire, split, head, eof, false);
  Outcome bytes = Run(wire, 1, head, eof, false);
  Check(whole, halves);
  Check(whole, bytes);
  if (whole.code == absl::StatusCode::kOk) {
    if (whole.response.body.size() > kLimits.max_body_bytes) std::abort();
    if (whole.complete && (whole.response.status < 200 || whole.response.status > 599)) {
      std::abort();
    }
    if (whole.complete && (whole.used != halves.used || whole.used != bytes.used)) std::abort();
    // A sink sees the same body (it is not capped, so it may succeed where buffering failed;
    // here buffering succeeded, so it must too).
    Outcome sunk = Run(wire, split, head, eof, true);
    if (sunk.code != absl::StatusCode::kOk || sunk.sunk != whole.response.body ||
        !sunk.response.body.empty()) {
      std::abort();
    }
  }
  return 0;
}
