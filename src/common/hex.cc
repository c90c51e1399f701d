#include "common/hex.h"

namespace gpulet {

int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

absl::string_view StripHexPrefix(absl::string_view text) {
  if (text.size() >= 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
  }
  return text;
}

std::optional<uint64_t> ParseHexDigits(absl::string_view text) {
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    int digit = HexDigitValue(c);
    if (digit < 0) return std::nullopt;
    if (value > (UINT64_MAX >> 4)) return std::nullopt;  // the next shift would lose bits
    value = (value << 4) | static_cast<uint64_t>(digit);
  }
  return value;
}

std::optional<uint64_t> ParseHex(absl::string_view text) {
  return ParseHexDigits(StripHexPrefix(text));
}

}  // namespace gpulet
