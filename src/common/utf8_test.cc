#include "common/utf8.h"

#include "gtest/gtest.h"

namespace gpulet {
namespace {

TEST(CutUtf8Test, NeverSplitsACharacterAndKeepsTheMarkerWithinTheLimit) {
  EXPECT_EQ(CutUtf8("short", 10, "..."), "short");
  EXPECT_EQ(CutUtf8("abcdefghij", 10, "..."), "abcdefghij");
  EXPECT_EQ(CutUtf8("abcdefghijk", 10, "..."), "abcdefg...");
  EXPECT_EQ(CutUtf8("abcdefghijk", 10), "abcdefghij");
  // "é" is two bytes, "€" three: a cut inside one backs up to its first byte.
  const std::string accents = "ab\xC3\xA9\xC3\xA9\xE2\x82\xAC";  // abéé€ (9 bytes)
  EXPECT_EQ(CutUtf8(accents, 3), "ab");
  EXPECT_EQ(CutUtf8(accents, 4), "ab\xC3\xA9");
  EXPECT_EQ(CutUtf8(accents, 8), "ab\xC3\xA9\xC3\xA9");
  EXPECT_EQ(CutUtf8(accents, 7, "..."), "ab\xC3\xA9...");
  // A limit shorter than the marker: the text alone, cut.
  EXPECT_EQ(CutUtf8("abcdef", 2, "..."), "");
}

}  // namespace
}  // namespace gpulet
