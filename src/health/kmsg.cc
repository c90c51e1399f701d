#include "health/kmsg.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/hex.h"

namespace gpulet::health {
namespace {

// Strict unsigned decimal: digits only, no sign or spaces, no overflow.
bool ParseDecimal(absl::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  uint64_t value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) return false;
    value = value * 10 + digit;
  }
  *out = value;
  return true;
}

// A short, printable excerpt of the record for error messages.
std::string Excerpt(absl::string_view raw) {
  constexpr size_t kMax = 60;
  std::string out;
  for (char c : raw.substr(0, kMax)) {
    unsigned char u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? c : '?';
  }
  if (raw.size() > kMax) out += "...";
  return out;
}

absl::Status Malformed(absl::string_view raw, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed /dev/kmsg record '", Excerpt(raw), "': ", why,
                   " (expected '<prio>,<seq>,<usec>,<flag>;<text>')"));
}

}  // namespace

std::string UnescapeKmsgText(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size() && text[i + 1] == 'x') {
      int hi = HexDigitValue(text[i + 2]);
      int lo = HexDigitValue(text[i + 3]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 3;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

absl::StatusOr<KmsgRecord> ParseKmsgRecord(absl::string_view raw) {
  size_t semi = raw.find(';');
  if (semi == absl::string_view::npos) return Malformed(raw, "no ';' after the header");
  absl::string_view header = raw.substr(0, semi);
  if (header.find('\n') != absl::string_view::npos) {
    return Malformed(raw, "the header spans lines");
  }
  std::vector<absl::string_view> fields = absl::StrSplit(header, ',');
  if (fields.size() < 4) return Malformed(raw, "fewer than 4 header fields");

  KmsgRecord record;
  uint64_t prio = 0;
  // Facilities above 1023 do not exist (prio is 10 bits in the kernel's log format); a
  // bound also keeps the int conversion below safe.
  if (!ParseDecimal(fields[0], &prio) || prio > 1023) {
    return Malformed(raw, "priority is not a number from 0 to 1023");
  }
  record.facility = static_cast<int>(prio >> 3);
  record.level = static_cast<int>(prio & 7);
  if (!ParseDecimal(fields[1], &record.seq)) return Malformed(raw, "sequence is not a number");
  if (!ParseDecimal(fields[2], &record.timestamp_us)) {
    return Malformed(raw, "timestamp is not a number");
  }
  if (fields[3].empty()) return Malformed(raw, "empty flag field");
  record.continuation = fields[3][0] == 'c' || fields[3][0] == '+';
  // Fields after the fourth (caller id on newer kernels) are ignored on purpose.

  absl::string_view rest = raw.substr(semi + 1);
  size_t newline = rest.find('\n');
  record.text = UnescapeKmsgText(rest.substr(0, newline));
  if (newline == absl::string_view::npos) return record;

  rest.remove_prefix(newline + 1);
  while (!rest.empty()) {
    size_t end = rest.find('\n');
    absl::string_view line = rest.substr(0, end);
    rest = end == absl::string_view::npos ? absl::string_view() : rest.substr(end + 1);
    if (line.empty()) continue;
    if (line[0] != ' ') {
      return Malformed(raw, "a second record follows the first (pass records one at a time)");
    }
    line.remove_prefix(1);
    size_t eq = line.find('=');
    // A dictionary line without '=' carries nothing usable; skipping it keeps the record.
    if (eq == absl::string_view::npos || eq == 0) continue;
    record.dict[std::string(line.substr(0, eq))] = UnescapeKmsgText(line.substr(eq + 1));
  }
  return record;
}

std::vector<std::string> SplitKmsgRecords(absl::string_view text) {
  std::vector<std::string> records;
  bool in_record = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!line.empty() && line[0] == ' ' && in_record) {
      absl::StrAppend(&records.back(), line, "\n");
      continue;
    }
    if (line.empty() || line[0] == '#' || line[0] == ' ') {
      in_record = false;
      continue;
    }
    records.push_back(absl::StrCat(line, "\n"));
    in_record = true;
  }
  return records;
}

}  // namespace gpulet::health
