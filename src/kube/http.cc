#include "kube/http.h"

#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gpulet::kube {
namespace {

// RFC 9110 section 5.6.2: tchar.
bool IsTokenChar(char c) {
  if (absl::ascii_isalnum(static_cast<unsigned char>(c))) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

// Field values may hold visible characters, SP, HTAB and obs-text; never CR, LF or NUL.
bool IsFieldValue(absl::string_view v) {
  for (char c : v) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 && c != '\t') return false;
    if (u == 0x7f) return false;
  }
  return true;
}

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> HttpResponse::Header(absl::string_view name) const {
  for (const HttpHeader& h : headers) {
    if (absl::EqualsIgnoreCase(h.name, name)) return h.value;
  }
  return std::nullopt;
}

std::string SerializeRequest(const HttpRequest& request, absl::string_view host_header) {
  std::string out =
      absl::StrCat(request.method, " ", request.target, " HTTP/1.1\r\nHost: ", host_header, "\r\n");
  for (const HttpHeader& h : request.headers) absl::StrAppend(&out, h.name, ": ", h.value, "\r\n");
  if (!request.body.empty() || request.method == "POST" || request.method == "PUT" ||
      request.method == "PATCH") {
    absl::StrAppend(&out, "Content-Length: ", request.body.size(), "\r\n");
  }
  absl::StrAppend(&out, "\r\n", request.body);
  return out;
}

HttpResponseParser::HttpResponseParser(Limits limits, bool head_request)
    : limits_(limits), head_request_(head_request) {}

absl::Status HttpResponseParser::Fail(absl::Status status) {
  state_ = State::kError;
  keep_alive_ = false;
  error_ = status;
  return status;
}

absl::StatusOr<bool> HttpResponseParser::TakeLine(absl::string_view data, size_t* pos, size_t limit,
                                                  absl::string_view what) {
  if (line_cr_) {
    // The previous piece ended in CR: only LF may follow it.
    if (*pos >= data.size()) return false;
    if (data[*pos] != '\n')
      return Fail(absl::DataLossError(absl::StrCat("a bare CR in the ", what)));
    ++*pos;
    ++head_bytes_;
    line_cr_ = false;
    return true;
  }
  size_t lf = data.find('\n', *pos);
  size_t end = lf == absl::string_view::npos ? data.size() : lf;
  size_t take = end - *pos;
  // A CR is allowed only right before the LF (or at the end of this piece, the LF to come):
  // refusing any other at once makes the outcome independent of where reads split.
  // (A limit that the bytes up to that CR already pass is reported first, as a byte-by-byte
  // read would.)
  size_t cr = data.substr(*pos, take).find('\r');
  if (cr != absl::string_view::npos && cr + 1 < take) {
    take = cr + 1;
    if (line_.size() + take <= limit && head_bytes_ + take <= limits_.max_head_bytes) {
      return Fail(absl::DataLossError(absl::StrCat("a bare CR in the ", what)));
    }
  }
  if (line_.size() + take > limit || head_bytes_ + take > limits_.max_head_bytes) {
    return Fail(absl::ResourceExhaustedError(absl::StrCat(
        "the ", what, " is longer than ", std::min(limit, limits_.max_head_bytes), " bytes")));
  }
  line_.append(data.data() + *pos, take);
  head_bytes_ += take;
  *pos = end;
  if (lf == absl::string_view::npos) {
    if (!line_.empty() && line_.back() == '\r') {
      line_.pop_back();
      line_cr_ = true;
    }
    return false;
  }
  ++*pos;  // the LF
  ++head_bytes_;
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  return true;
}

absl::Status HttpResponseParser::OnStatusLine() {
  // HTTP-version SP status-code SP [ reason-phrase ]; some servers omit the last SP.
  absl::string_view l = line_;
  if (l.empty() && response_.status == 0 && head_bytes_ <= 2) {
    return absl::OkStatus();  // RFC 9112 section 2.2: a leading empty line may be ignored
  }
  if (!absl::StartsWith(l, "HTTP/1.") || l.size() < 12 || l[8] != ' ' ||
      (l[7] != '0' && l[7] != '1')) {
    return Fail(absl::DataLossError(
        absl::StrCat("not an HTTP/1.x status line: \"", absl::CEscape(l.substr(0, 64)), "\"")));
  }
  http10_ = l[7] == '0';
  absl::string_view code = l.substr(9, 3);
  int status = 0;
  if (!AllDigits(code) || !absl::SimpleAtoi(code, &status) || status < 100 || status > 599 ||
      (l.size() > 12 && l[12] != ' ')) {
    return Fail(absl::DataLossError(
        absl::StrCat("a bad status code in \"", absl::CEscape(l.substr(0, 64)), "\"")));
  }
  absl::string_view reason = l.size() > 13 ? l.substr(13) : absl::string_view();
  if (!IsFieldValue(reason))
    return Fail(absl::DataLossError("a control character (such as a bare CR) in the reason"));
  response_.status = status;
  response_.reason = std::string(reason);
  response_.headers.clear();
  state_ = State::kHeaders;
  return absl::OkStatus();
}

absl::Status HttpResponseParser::OnHeaderLine() {
  absl::string_view l = line_;
  if (l[0] == ' ' || l[0] == '\t') {
    return Fail(absl::DataLossError("an obsolete folded header line (RFC 9112 section 5.2)"));
  }
  size_t colon = l.find(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return Fail(absl::DataLossError(
        absl::StrCat("a header line without a name: \"", absl::CEscape(l.substr(0, 64)), "\"")));
  }
  absl::string_view name = l.substr(0, colon);
  for (char c : name) {
    if (!IsTokenChar(c)) {
      return Fail(absl::DataLossError(
          absl::StrCat("a bad header name \"", absl::CEscape(name.substr(0, 64)), "\"")));
    }
  }
  absl::string_view value = absl::StripAsciiWhitespace(l.substr(colon + 1));
  if (!IsFieldValue(value)) {
    return Fail(absl::DataLossError(absl::StrCat("a control character in header ", name)));
  }
  if (response_.headers.size() >= 256) {
    return Fail(absl::ResourceExhaustedError("more than 256 header lines"));
  }
  response_.headers.push_back({std::string(name), std::string(value)});
  return absl::OkStatus();
}

absl::Status HttpResponseParser::OnHeadEnd() {
  const int status = response_.status;
  if (status == 101) {
    return Fail(absl::UnimplementedError("101 Switching Protocols: gpulet never asks to upgrade"));
  }
  if (status < 200) {
    // An interim response: the real one follows.
    state_ = State::kStatusLine;
    response_ = HttpResponse();
    return absl::OkStatus();
  }
  // Connection options.
  bool close = http10_;
  std::optional<std::string> length;
  std::optional<std::string> coding;
  for (const HttpHeader& h : response_.headers) {
    if (absl::EqualsIgnoreCase(h.name, "Connection")) {
      for (absl::string_view opt : absl::StrSplit(h.value, ',')) {
        opt = absl::StripAsciiWhitespace(opt);
        if (absl::EqualsIgnoreCase(opt, "close")) close = true;
        if (absl::EqualsIgnoreCase(opt, "keep-alive") && http10_) close = false;
      }
    } else if (absl::EqualsIgnoreCase(h.name, "Content-Length")) {
      // Repeated, equal values (or "n, n") are allowed; different ones are not.
      for (absl::string_view v : absl::StrSplit(h.value, ',')) {
        v = absl::StripAsciiWhitespace(v);
        if (!AllDigits(v) || v.size() > 18) {
          return Fail(absl::DataLossError(
              absl::StrCat("a bad Content-Length \"", absl::CEscape(h.value.substr(0, 32)), "\"")));
        }
        if (length.has_value() && *length != v) {
          return Fail(absl::DataLossError("conflicting Content-Length headers"));
        }
        length = std::string(v);
      }
    } else if (absl::EqualsIgnoreCase(h.name, "Transfer-Encoding")) {
      if (coding.has_value()) {
        absl::StrAppend(&*coding, ",", h.value);
      } else {
        coding = h.value;
      }
    }
  }
  keep_alive_ = !close;
  if (head_request_ || status == 204 || status == 304) {
    state_ = State::kDone;
    return absl::OkStatus();
  }
  if (coding.has_value()) {
    if (length.has_value()) {
      return Fail(absl::DataLossError("both Transfer-Encoding and Content-Length"));
    }
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(*coding), "chunked")) {
      return Fail(absl::UnimplementedError(absl::StrCat("transfer coding \"",
                                                        absl::CEscape(coding->substr(0, 64)),
                                                        "\" (only chunked is read)")));
    }
    state_ = State::kChunkSize;
    return absl::OkStatus();
  }
  if (length.has_value()) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(*length, &n)) return Fail(absl::DataLossError("a bad Content-Length"));
    if (!sink_ && n > limits_.max_body_bytes) {
      return Fail(absl::ResourceExhaustedError(absl::StrCat(
          "a response body of ", n, " bytes, over the limit of ", limits_.max_body_bytes)));
    }
    remaining_ = static_cast<size_t>(n);
    state_ = remaining_ == 0 ? State::kDone : State::kBodyLength;
    return absl::OkStatus();
  }
  // Neither: the body runs to the close, and the connection cannot be reused.
  keep_alive_ = false;
  state_ = State::kUntilClose;
  return absl::OkStatus();
}

absl::Status HttpResponseParser::OnChunkSizeLine() {
  absl::string_view l = line_;
  size_t semi = l.find(';');
  absl::string_view hex = absl::StripTrailingAsciiWhitespace(l.substr(0, semi));
  if (hex.empty() || hex.size() > 15) {
    return Fail(absl::DataLossError(
        absl::StrCat("a bad chunk size line \"", absl::CEscape(l.substr(0, 32)), "\"")));
  }
  uint64_t n = 0;
  for (char c : hex) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return Fail(absl::DataLossError(
          absl::StrCat("a bad chunk size \"", absl::CEscape(hex.substr(0, 32)), "\"")));
    }
    n = n * 16 + static_cast<uint64_t>(d);
  }
  if (n == 0) {
    state_ = State::kTrailers;
    return absl::OkStatus();
  }
  if (!sink_ && n > limits_.max_body_bytes - body_bytes_) {
    return Fail(absl::ResourceExhaustedError(
        absl::StrCat("a response body over the limit of ", limits_.max_body_bytes, " bytes")));
  }
  remaining_ = static_cast<size_t>(n);
  state_ = State::kChunkData;
  return absl::OkStatus();
}

absl::Status HttpResponseParser::Body(absl::string_view piece) {
  if (piece.empty()) return absl::OkStatus();
  if (sink_) {
    body_bytes_ += piece.size();
    if (!sink_(piece)) return Fail(absl::CancelledError("the reader stopped the response body"));
    return absl::OkStatus();
  }
  if (piece.size() > limits_.max_body_bytes - body_bytes_) {
    return Fail(absl::ResourceExhaustedError(
        absl::StrCat("a response body over the limit of ", limits_.max_body_bytes, " bytes")));
  }
  body_bytes_ += piece.size();
  response_.body.append(piece.data(), piece.size());
  return absl::OkStatus();
}

absl::StatusOr<size_t> HttpResponseParser::Feed(absl::string_view data) {
  size_t pos = 0;
  while (pos < data.size()) {
    switch (state_) {
      case State::kError:
        return error_;
      case State::kDone:
        keep_alive_ = false;  // bytes past the response: never reuse this connection
        return pos;
      case State::kStatusLine:
      case State::kHeaders:
      case State::kTrailers: {
        absl::StatusOr<bool> got =
            TakeLine(data, &pos, limits_.max_head_bytes,
                     state_ == State::kStatusLine ? "status line" : "header block");
        if (!got.ok()) return got.status();
        if (!*got) break;
        absl::Status s;
        if (state_ == State::kStatusLine) {
          s = OnStatusLine();
        } else if (line_.empty()) {
          s = state_ == State::kHeaders ? OnHeadEnd() : absl::OkStatus();
          if (s.ok() && state_ == State::kTrailers) state_ = State::kDone;
        } else if (state_ == State::kHeaders) {
          s = OnHeaderLine();
        }  // trailer fields are read and dropped
        line_.clear();
        if (!s.ok()) return s;
        break;
      }
      case State::kChunkSize: {
        absl::StatusOr<bool> got = TakeLine(data, &pos, 4096, "chunk size line");
        if (!got.ok()) return got.status();
        if (!*got) break;
        absl::Status s = OnChunkSizeLine();
        line_.clear();
        if (!s.ok()) return s;
        break;
      }
      case State::kChunkData:
      case State::kBodyLength: {
        size_t take = std::min(remaining_, data.size() - pos);
        absl::Status s = Body(data.substr(pos, take));
        if (!s.ok()) return s;
        pos += take;
        remaining_ -= take;
        if (remaining_ == 0) {
          state_ = state_ == State::kChunkData ? State::kChunkDataEnd : State::kDone;
        }
        break;
      }
      case State::kChunkDataEnd: {
        // The CRLF (or bare LF) after a chunk's data, a byte at a time.
        const char c = data[pos++];
        if (c == '\r' && !line_cr_) {
          line_cr_ = true;
        } else if (c == '\n') {
          line_cr_ = false;
          state_ = State::kChunkSize;
        } else {
          return Fail(absl::DataLossError("a chunk longer than its size (no CRLF after its data)"));
        }
        break;
      }
      case State::kUntilClose: {
        absl::Status s = Body(data.substr(pos));
        if (!s.ok()) return s;
        pos = data.size();
        break;
      }
    }
  }
  return pos;
}

absl::Status HttpResponseParser::FeedEof() {
  switch (state_) {
    case State::kError:
      return error_;
    case State::kDone:
      return absl::OkStatus();
    case State::kUntilClose:
      state_ = State::kDone;
      return absl::OkStatus();
    default:
      break;
  }
  const char* where = state_ == State::kStatusLine ? "the status line"
                      : state_ <= State::kHeaders  ? "the response head"
                                                   : "the response body";
  return Fail(absl::DataLossError(absl::StrCat("the server closed the connection in ", where,
                                               " (after ", head_bytes_ + body_bytes_, " bytes)")));
}

}  // namespace gpulet::kube
