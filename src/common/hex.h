// ParseHex: the one parser for hexadecimal numbers in gpulet (sysfs IDs and class codes,
// PCI bus id fields, XID intrinfo words, CDI spec integers, kernel-log escapes).
//
// Contract, the same everywhere so that no caller re-implements the corner cases:
//   - ParseHexDigits accepts one or more of [0-9a-fA-F] and nothing else: no "0x", no sign,
//     no whitespace, no underscores.
//   - ParseHex also accepts (does not require) one leading "0x" or "0X"; a bare "0x" is
//     not a number.
//   - Empty input, any other character, or a value above 2^64-1 gives nullopt. Leading
//     zeros are allowed and do not count towards overflow.
// Callers that need a narrower width (a 16-bit PCI ID, a 2-digit bus number) check the digit
// count or the value themselves: the width is part of their format, not of hex.
//
// Thread-safety: pure functions.
#ifndef GPULET_COMMON_HEX_H_
#define GPULET_COMMON_HEX_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace gpulet {

// Digits only (see above).
std::optional<uint64_t> ParseHexDigits(absl::string_view text);

// Digits with an optional "0x"/"0X" prefix (see above).
std::optional<uint64_t> ParseHex(absl::string_view text);

// `text` without one leading "0x"/"0X", if it has one.
absl::string_view StripHexPrefix(absl::string_view text);

// The value of one hex digit, or -1.
int HexDigitValue(char c);

}  // namespace gpulet

#endif  // GPULET_COMMON_HEX_H_
