#include "common/hex.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace gpulet {
namespace {

struct HexCase {
  const char* text;
  std::optional<uint64_t> with_prefix_allowed;  // ParseHex
  std::optional<uint64_t> digits_only;          // ParseHexDigits
};

TEST(HexTest, Table) {
  const HexCase kCases[] = {
      {"0", 0, 0},
      {"10de", 0x10de, 0x10de},
      {"10DE", 0x10de, 0x10de},
      {"0x10de", 0x10de, std::nullopt},
      {"0X030200", 0x030200, std::nullopt},
      {"000000000000000000000001", 1, 1},  // leading zeros never overflow
      {"ffffffffffffffff", UINT64_MAX, UINT64_MAX},
      {"0xffffffffffffffff", UINT64_MAX, std::nullopt},
      {"10000000000000000", std::nullopt, std::nullopt},  // 2^64
      {"", std::nullopt, std::nullopt},
      {"0x", std::nullopt, std::nullopt},
      {"0x0x1", std::nullopt, std::nullopt},
      {"x1", std::nullopt, std::nullopt},
      {"-1", std::nullopt, std::nullopt},
      {"+1", std::nullopt, std::nullopt},
      {" 1", std::nullopt, std::nullopt},
      {"1 ", std::nullopt, std::nullopt},
      {"1\n", std::nullopt, std::nullopt},
      {"1_000", std::nullopt, std::nullopt},
      {"g", std::nullopt, std::nullopt},
      {"12g", std::nullopt, std::nullopt},
  };
  for (const HexCase& c : kCases) {
    EXPECT_EQ(ParseHex(c.text), c.with_prefix_allowed) << "ParseHex(\"" << c.text << "\")";
    EXPECT_EQ(ParseHexDigits(c.text), c.digits_only) << "ParseHexDigits(\"" << c.text << "\")";
  }
  // A NUL inside the view is a character like any other, not an end.
  EXPECT_EQ(ParseHex(absl::string_view("1\0", 2)), std::nullopt);
}

TEST(HexTest, PrefixAndDigits) {
  EXPECT_EQ(StripHexPrefix("0x1f"), "1f");
  EXPECT_EQ(StripHexPrefix("0X1f"), "1f");
  EXPECT_EQ(StripHexPrefix("1f"), "1f");
  EXPECT_EQ(StripHexPrefix("0"), "0");
  EXPECT_EQ(HexDigitValue('0'), 0);
  EXPECT_EQ(HexDigitValue('9'), 9);
  EXPECT_EQ(HexDigitValue('a'), 10);
  EXPECT_EQ(HexDigitValue('F'), 15);
  EXPECT_EQ(HexDigitValue('g'), -1);
  EXPECT_EQ(HexDigitValue('/'), -1);
  EXPECT_EQ(HexDigitValue(':'), -1);
  EXPECT_EQ(HexDigitValue('@'), -1);
  EXPECT_EQ(HexDigitValue('G'), -1);
  EXPECT_EQ(HexDigitValue('`'), -1);
}

}  // namespace
}  // namespace gpulet
