#include "yaml/reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace gpulet::yaml {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(YamlLoadTest, BadSyntaxNamesTheLineAndTooLongIsRefusedUnparsed) {
  absl::StatusOr<YAML::Node> bad = Load("a: 1\nb: [\n", "test.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(Message(bad.status()), HasSubstr("test.yaml:"));
  EXPECT_THAT(Message(bad.status()), HasSubstr("not valid YAML"));

  absl::StatusOr<YAML::Node> big = Load(std::string(100, 'a'), "big.yaml", Limits{10});
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(Message(big.status()), HasSubstr("big.yaml is 100 bytes; the limit is 10"));

  // Nesting deep enough to exhaust a recursive parser is an error, not a crash.
  absl::StatusOr<YAML::Node> deep = Load(std::string(100000, '['), "deep.yaml");
  EXPECT_FALSE(deep.ok());
}

TEST(YamlMapTest, RefusesADuplicateKeyThatYamlCppWouldKeepSilently) {
  YAML::Node root = *Load("a: 1\nsub:\n  x: 1\n  x: 2\n", "f.yaml");
  // yaml-cpp takes the file, and a lookup finds the first x: the second line does nothing.
  EXPECT_EQ(root["sub"]["x"].Scalar(), "1");
  Map top(root, "f.yaml");
  ASSERT_TRUE(top.Check().ok());
  Map sub(top.Get("sub"), "f.yaml", "sub");
  EXPECT_EQ(Message(sub.Check()),
            "f.yaml:4: duplicate key 'sub.x': it is set more than once; keep only one");
}

TEST(YamlMapTest, RefusesAKeyThatIsNotAPlainNameAndANodeThatIsNotAMapping) {
  Map complex_key(*Load("[a, b]: 1\n", "f.yaml"), "f.yaml");
  EXPECT_EQ(Message(complex_key.Check()),
            "f.yaml:1: a key under the top level is a list; keys are plain names");
  Map list(*Load("- a\n", "f.yaml"), "f.yaml", "tls");
  EXPECT_EQ(Message(list.Check()), "f.yaml:1: tls must be a mapping of keys, not a list");
  // Absent or null: an empty mapping.
  Map null_map(*Load("a:\n", "f.yaml"), "f.yaml");
  ASSERT_TRUE(null_map.Check().ok());
  EXPECT_TRUE(Map(null_map.Get("a"), "f.yaml", "a").Check().ok());
  EXPECT_TRUE(Map(null_map.Get("a"), "f.yaml", "a").empty());
}

TEST(YamlMapTest, ReadsNameThePathTheLineAndWhatWasExpected) {
  Map m(
      *Load("name: gpu\nempty: ''\nflag: TRUE\nyes_flag: yes\nlist: [1]\nnull_value:\n", "f.yaml"),
      "f.yaml", "sec");
  ASSERT_TRUE(m.Check().ok());
  EXPECT_THAT(m.keys(), ElementsAre("name", "empty", "flag", "yes_flag", "list", "null_value"));
  std::string s = "kept";
  EXPECT_TRUE(m.String("name", &s).ok());
  EXPECT_EQ(s, "gpu");
  EXPECT_TRUE(m.String("empty", &s).ok());
  EXPECT_EQ(s, "");
  s = "kept";
  EXPECT_EQ(Message(m.NonEmptyString("empty", &s)),
            "f.yaml:2: sec.empty must be a non-empty string");
  EXPECT_EQ(Message(m.NonEmptyString("list", &s)),
            "f.yaml:5: sec.list must be a non-empty string, not a list");
  EXPECT_EQ(Message(m.String("absent", &s)), "f.yaml:1: sec.absent is missing; set it to a string");
  EXPECT_TRUE(m.String("absent", &s, Presence::kOptional).ok());
  EXPECT_TRUE(m.String("null_value", &s, Presence::kOptional).ok());
  EXPECT_EQ(s, "kept");

  bool b = false;
  EXPECT_TRUE(m.Bool("flag", &b).ok());
  EXPECT_TRUE(b);
  EXPECT_EQ(Message(m.Bool("yes_flag", &b)),
            "f.yaml:4: sec.yes_flag must be true or false, not 'yes'");
  EXPECT_EQ(Message(m.Bool("list", &b)), "f.yaml:5: sec.list must be true or false, not a list");
}

TEST(YamlMapTest, OnlyKeysNamesTheFirstUnknownKeyAtItsLine) {
  Map m(*Load("cert_file: /c\nkey_flie: /k\n", "f.yaml"), "f.yaml", "tls");
  ASSERT_TRUE(m.Check().ok());
  EXPECT_TRUE(m.OnlyKeys({"cert_file", "key_flie"}).ok());
  EXPECT_EQ(Message(m.OnlyKeys({"cert_file", "key_file"})),
            "f.yaml:2: unknown key 'tls.key_flie' (allowed: cert_file, key_file)");
  EXPECT_EQ(Message(m.ErrorAtKey("cert_file", "bad")), "f.yaml:1: bad");
}

// A reader that words its own error for an unknown key gets the key from FirstUnknown; a
// section read through Child carries its path and its lines.
TEST(YamlMapTest, FirstUnknownAndChildKeepThePathAndTheLines) {
  Map top(*Load("a: 1\nsection:\n  x: 1\n  typo: 2\n", "f.yaml"), "f.yaml");
  ASSERT_TRUE(top.Check().ok());
  EXPECT_EQ(top.FirstUnknown({"a", "section"}), std::nullopt);
  EXPECT_EQ(top.FirstUnknown({"a"}), "section");
  Map section = top.Child("section");
  ASSERT_TRUE(section.Check().ok());
  EXPECT_EQ(section.path(), "section");
  EXPECT_EQ(section.FirstUnknown({"x", "y"}), "typo");
  EXPECT_EQ(Message(section.OnlyKeys({"x", "y"})),
            "f.yaml:4: unknown key 'section.typo' (allowed: x, y)");
  EXPECT_EQ(Message(section.Error("is wrong")), "f.yaml:3: is wrong");
  // An absent section is an empty mapping, and an error about it falls back to no line.
  Map absent = top.Child("missing");
  EXPECT_TRUE(absent.Check().ok());
  EXPECT_TRUE(absent.empty());
  EXPECT_EQ(Message(absent.Error("is missing")), "f.yaml: is missing");
}

TEST(YamlCheckKeysTest, FindsADuplicateAtAnyDepthWithItsPathAndLine) {
  YAML::Node root = *Load(
      "entries:\n- id: a\n  fix:\n    generic: x\n- id: b\n  fix:\n    generic: y\n"
      "    generic: z\n",
      "cat.yaml");
  EXPECT_EQ(Message(CheckKeys(root, "cat.yaml")),
            "cat.yaml:8: duplicate key 'entries[1].fix.generic': it is set more than once; keep "
            "only one");
  // A document cut from a longer file counts its lines from the file's.
  EXPECT_THAT(Message(CheckKeys(root, "all.yaml", 10)), HasSubstr("all.yaml:18: "));
  EXPECT_EQ(Message(CheckKeys(*Load("a:\n  {x: 1}: 2\n", "f.yaml"), "f.yaml")),
            "f.yaml:2: a key under a is a mapping; keys are plain names");
  EXPECT_TRUE(CheckKeys(*Load("a: [1, {b: 2}, [c]]\nd: e\n", "f.yaml"), "f.yaml").ok());
}

}  // namespace
}  // namespace gpulet::yaml
