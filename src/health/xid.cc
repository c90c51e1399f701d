#include "health/xid.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/hex.h"
#include "node/bus_id.h"

namespace gpulet::health {
namespace {

constexpr absl::string_view kNvrm = "NVRM: ";
constexpr int kFallenOffBusXid = 79;
// How many lines after "The NVIDIA GPU <bus>" may pass before "fallen off the bus" must
// have appeared. The driver prints three lines; other CPUs' messages may interleave.
constexpr int kMaxPendingLines = 4;

// Parses up to `max_digits` decimal digits at the start of *s and consumes them.
bool ConsumeDecimal(absl::string_view* s, size_t max_digits, int64_t* out) {
  size_t n = 0;
  int64_t value = 0;
  while (n < s->size() && absl::ascii_isdigit(static_cast<unsigned char>((*s)[n]))) {
    if (n == max_digits) return false;
    value = value * 10 + ((*s)[n] - '0');
    ++n;
  }
  if (n == 0) return false;
  s->remove_prefix(n);
  *out = value;
  return true;
}

// The whole of `s` as a decimal number of at most `max_digits` digits.
bool ParseWholeDecimal(absl::string_view s, size_t max_digits, int64_t* out) {
  return ConsumeDecimal(&s, max_digits, out) && s.empty();
}

// 1-8 hex digits, optional "0x".
bool ParseHex32(absl::string_view s, uint32_t* out) {
  absl::string_view digits = StripHexPrefix(s);
  std::optional<uint64_t> value = digits.size() <= 8 ? ParseHexDigits(digits) : std::nullopt;
  if (!value) return false;
  *out = static_cast<uint32_t>(*value);
  return true;
}

bool IsUpperIdentifier(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (!(absl::ascii_isupper(u) || absl::ascii_isdigit(u) || c == '_')) return false;
  }
  return true;
}

// "NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 ...)".
std::optional<NvlinkXidDetail> ParseNvlinkDetail(absl::string_view message) {
  std::vector<absl::string_view> tokens =
      absl::StrSplit(message, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (tokens.empty() || !IsUpperIdentifier(tokens[0])) return std::nullopt;
  NvlinkXidDetail detail;
  detail.unit = std::string(tokens[0]);
  for (size_t i = 1; i < tokens.size(); ++i) {
    absl::string_view t = tokens[i];
    if (absl::EqualsIgnoreCase(t, "Fatal")) {
      detail.fatal = true;
    } else if (absl::EqualsIgnoreCase(t, "Nonfatal") || absl::EqualsIgnoreCase(t, "Non-fatal")) {
      detail.fatal = false;
    } else if (t == "Link" && i + 1 < tokens.size() && !detail.link) {
      int64_t link = 0;
      if (ParseWholeDecimal(tokens[i + 1], 4, &link)) detail.link = static_cast<int>(link);
    } else if (absl::StartsWith(t, "(") && !detail.intrinfo) {
      t.remove_prefix(1);
      absl::ConsumeSuffix(&t, ")");
      uint32_t intrinfo = 0;
      if (ParseHex32(t, &intrinfo)) {
        detail.intrinfo = intrinfo;
        detail.sub_code = static_cast<int>((intrinfo >> 20) & 0x3f);
      }
    }
  }
  return detail;
}

// The text after the first "NVRM: " in `line` (dropping dmesg/syslog prefixes), trimmed.
absl::string_view AfterNvrm(absl::string_view line) {
  size_t at = line.find(kNvrm);
  if (at != absl::string_view::npos) line.remove_prefix(at + kNvrm.size());
  return absl::StripAsciiWhitespace(line);
}

}  // namespace

std::optional<XidEvent> ParseXidLine(absl::string_view line) {
  constexpr absl::string_view kXid = "NVRM: Xid";
  size_t at = line.find(kXid);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view s = absl::StripLeadingAsciiWhitespace(line.substr(at + kXid.size()));
  if (!absl::ConsumePrefix(&s, "(")) return std::nullopt;
  size_t close = s.find(')');
  if (close == absl::string_view::npos) return std::nullopt;
  absl::string_view inside = s.substr(0, close);
  s.remove_prefix(close + 1);

  XidEvent event;
  std::vector<absl::string_view> tokens =
      absl::StrSplit(inside, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (tokens.empty()) return std::nullopt;
  event.bus_id = node::NormalizeBusId(tokens[0]);
  if (event.bus_id.empty()) return std::nullopt;
  for (size_t i = 1; i < tokens.size(); ++i) {
    int64_t id = 0;
    absl::string_view t = tokens[i];
    if (absl::ConsumePrefix(&t, "GPU-I:") && ParseWholeDecimal(t, 4, &id)) {
      event.gpu_instance = static_cast<int>(id);
    } else if (absl::ConsumePrefix(&t, "GPU-CI:") && ParseWholeDecimal(t, 4, &id)) {
      event.compute_instance = static_cast<int>(id);
    }
    // Other tokens are ignored: a future driver may add attributes here.
  }

  if (!absl::ConsumePrefix(&s, ":")) return std::nullopt;
  s = absl::StripLeadingAsciiWhitespace(s);
  int64_t xid = 0;
  // XIDs are small numbers; 6 digits keep the int conversion safe with room to spare.
  if (!ConsumeDecimal(&s, 6, &xid)) return std::nullopt;
  event.xid = static_cast<int>(xid);
  s = absl::StripTrailingAsciiWhitespace(s);
  if (!s.empty() && !absl::ConsumePrefix(&s, ",")) return std::nullopt;
  s = absl::StripLeadingAsciiWhitespace(s);

  if (absl::ConsumePrefix(&s, "pid=")) {
    size_t comma = s.find(',');
    absl::string_view pid = s.substr(0, comma);
    int64_t value = 0;
    // "'<unknown>'" (kernel threads, interrupt context) leaves pid empty.
    if (ParseWholeDecimal(absl::StripAsciiWhitespace(pid), 10, &value)) event.pid = value;
    s = comma == absl::string_view::npos ? absl::string_view() : s.substr(comma + 1);
    s = absl::StripLeadingAsciiWhitespace(s);
    if (absl::ConsumePrefix(&s, "name=")) {
      // The name is printed unquoted, so a name containing ", " cannot be told apart from
      // the message; the first ", " ends it, as for every name the kernel usually shows.
      size_t end = s.find(", ");
      absl::string_view name = s.substr(0, end);
      if (end == absl::string_view::npos) name = absl::StripTrailingAsciiWhitespace(name);
      if (name != "<unknown>") event.process_name = std::string(name);
      s = end == absl::string_view::npos ? absl::string_view() : s.substr(end + 2);
    }
  }
  event.message = std::string(absl::StripAsciiWhitespace(s));
  if (event.xid >= 144 && event.xid <= 150) event.nvlink = ParseNvlinkDetail(event.message);
  return event;
}

std::optional<GpuUuidMapping> ParseGpuUuidLine(absl::string_view line) {
  constexpr absl::string_view kGpuAt = "NVRM: GPU at ";
  size_t at = line.find(kGpuAt);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view s = line.substr(at + kGpuAt.size());
  size_t sep = s.find(": GPU-");
  if (sep == absl::string_view::npos) return std::nullopt;
  GpuUuidMapping mapping;
  mapping.bus_id = node::NormalizeBusId(s.substr(0, sep));
  if (mapping.bus_id.empty()) return std::nullopt;
  absl::string_view uuid = s.substr(sep + 2);
  size_t end = 4;  // after "GPU-"
  while (end < uuid.size() &&
         (absl::ascii_isxdigit(static_cast<unsigned char>(uuid[end])) || uuid[end] == '-')) {
    ++end;
  }
  // A UUID is 32 hex digits and 4 dashes; anything much shorter is not one.
  if (end < 4 + 32 || end > 4 + 40) return std::nullopt;
  mapping.uuid = std::string(uuid.substr(0, end));
  return mapping;
}

std::optional<XidEvent> ParseFallenOffBusLine(absl::string_view line) {
  constexpr absl::string_view kGpu = "NVRM: GPU ";
  constexpr absl::string_view kFallen = ": GPU has fallen off the bus";
  size_t at = line.find(kGpu);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view s = line.substr(at + kGpu.size());
  size_t end = s.find(kFallen);
  if (end == absl::string_view::npos) return std::nullopt;
  XidEvent event;
  event.bus_id = node::NormalizeBusId(s.substr(0, end));
  if (event.bus_id.empty()) return std::nullopt;
  event.xid = kFallenOffBusXid;
  event.source = XidSource::kFallenOffBusMessage;
  event.message = std::string(absl::StripAsciiWhitespace(s.substr(end + 2)));
  return event;
}

std::vector<KernelLogFinding> KernelLogScanner::Scan(absl::string_view text) {
  std::vector<KernelLogFinding> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    absl::ConsumeSuffix(&line, "\r");
    if (line.empty()) continue;
    ScanLine(line, &out);
  }
  return out;
}

void KernelLogScanner::Reset() {
  pending_bus_id_.clear();
  pending_message_.clear();
  pending_lines_ = 0;
}

void KernelLogScanner::ScanLine(absl::string_view line, std::vector<KernelLogFinding>* out) {
  // Cheap filter: everything below needs "NVRM:"; most kernel lines are not the driver's.
  bool nvrm = absl::StrContains(line, "NVRM:");

  if (nvrm) {
    if (std::optional<XidEvent> xid = ParseXidLine(line)) {
      out->push_back(std::move(*xid));
      return;
    }
    if (std::optional<GpuUuidMapping> mapping = ParseGpuUuidLine(line)) {
      out->push_back(std::move(*mapping));
      return;
    }
    if (std::optional<XidEvent> fallen = ParseFallenOffBusLine(line)) {
      out->push_back(std::move(*fallen));
      return;
    }
  }

  constexpr absl::string_view kTheGpu = "NVRM: The NVIDIA GPU ";
  constexpr absl::string_view kFallenOff = "fallen off the bus";
  if (size_t at = nvrm ? line.find(kTheGpu) : absl::string_view::npos;
      at != absl::string_view::npos) {
    absl::string_view rest = line.substr(at + kTheGpu.size());
    absl::string_view address = rest.substr(0, rest.find_first_of(" \t"));
    std::string bus_id = node::NormalizeBusId(address);
    if (!bus_id.empty()) {
      pending_bus_id_ = bus_id;
      pending_message_ = std::string(AfterNvrm(line));
      pending_lines_ = 0;
      // Some log collectors join the message's lines into one; then it is complete here.
      if (!absl::StrContains(rest, kFallenOff)) return;
    }
  } else if (!pending_bus_id_.empty()) {
    ++pending_lines_;
    if (nvrm) absl::StrAppend(&pending_message_, " ", AfterNvrm(line));
  }

  if (pending_bus_id_.empty()) return;
  if (nvrm && absl::StrContains(line, kFallenOff)) {
    XidEvent event;
    event.bus_id = pending_bus_id_;
    event.xid = kFallenOffBusXid;
    event.source = XidSource::kFallenOffBusMessage;
    event.message = pending_message_;
    out->push_back(std::move(event));
    Reset();
  } else if (pending_lines_ >= kMaxPendingLines) {
    Reset();
  }
}

std::vector<KernelLogFinding> ScanKernelLog(absl::string_view text) {
  KernelLogScanner scanner;
  return scanner.Scan(text);
}

XidAssessment AssessXid(const XidEvent& event) {
  XidAssessment a;
  a.info = DescribeXid(event.xid);
  a.severity = a.info.severity;
  a.action = a.info.action;
  a.if_repeated = a.info.if_repeated;
  if (event.xid == 154) {
    if (std::optional<GpuAction> wanted = RecoveryActionFromXid154(event.message)) {
      a.action = *wanted;
      if (*wanted == GpuAction::kResetGpu || *wanted == GpuAction::kRebootNode) {
        a.severity = XidSeverity::kFatal;
      }
      a.adjustment = absl::StrCat("the driver asks for: ", GpuActionName(*wanted));
    }
  } else if (event.nvlink && event.nvlink->fatal.has_value()) {
    if (*event.nvlink->fatal) {
      a.severity = XidSeverity::kFatal;
      a.action = GpuAction::kResetGpu;
      a.adjustment = "the line marks this NVLink error Fatal";
    } else {
      a.severity = XidSeverity::kWarning;
      a.action = GpuAction::kNone;
      a.adjustment = "the line marks this NVLink error Nonfatal";
    }
  }
  return a;
}

}  // namespace gpulet::health
