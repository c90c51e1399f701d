#include "common/json_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace gpulet {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string Error(const absl::Status& s) { return std::string(s.message()); }

TEST(ParseStrictJsonTest, ReadsADocument) {
  absl::StatusOr<json> doc =
      ParseStrictJson(R"({"a": {"b": [1, {"c": true}]}, "d": "x"})", "a test file");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ((*doc)["a"]["b"][1]["c"], true);
}

TEST(ParseStrictJsonTest, RefusesWhatJsonWouldTakeSilently) {
  struct Case {
    std::string text, says;
  } cases[] = {
      {"", "not valid JSON"},
      {"{\"a\": 1,}", "not valid JSON"},
      {"{\"a\": 1} trailing", "not valid JSON"},
      {R"({"a": 1, "a": 2})", "the key \"a\" appears twice"},
      {R"({"x": {"a": 1, "b": {"a": 3}, "a": 2}})", "the key \"a\" appears twice"},
      {std::string(40, '[') + std::string(40, ']'), "nests more than 32 levels"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<json> doc = ParseStrictJson(c.text, "a test file");
    ASSERT_FALSE(doc.ok()) << c.text;
    EXPECT_TRUE(absl::IsInvalidArgument(doc.status()));
    EXPECT_THAT(Error(doc.status()), HasSubstr("not a test file: ")) << c.text;
    EXPECT_THAT(Error(doc.status()), HasSubstr(c.says)) << c.text;
  }
  // The same key in two objects is no repeat.
  EXPECT_TRUE(ParseStrictJson(R"({"a": {"k": 1}, "b": {"k": 2}, "k": 3})", "x").ok());
  // Past the size limit, the text is not read at all.
  JsonLimits small;
  small.max_bytes = 8;
  EXPECT_THAT(Error(ParseStrictJson(R"({"a": "long"})", "x", small).status()),
              HasSubstr("more than the 8 read"));
}

TEST(JsonFieldsTest, ReadsEachKindOfField) {
  const json doc =
      json::parse(R"({"s": "v", "b": true, "i": -5, "u": 7, "o": {"k": 1}, "l": [1, 2], "e": ""})");
  JsonFields f(doc, "a test file");
  std::string s;
  bool b = false;
  int64_t i = 0;
  unsigned u = 0;
  ASSERT_TRUE(f.String("s", &s).ok());
  ASSERT_TRUE(f.Bool("b", &b).ok());
  ASSERT_TRUE(f.Int64("i", -10, 10, &i).ok());
  ASSERT_TRUE(f.Int("u", &u).ok());
  EXPECT_EQ(s, "v");
  EXPECT_TRUE(b);
  EXPECT_EQ(i, -5);
  EXPECT_EQ(u, 7u);
  absl::StatusOr<const json*> o = f.Object("o");
  absl::StatusOr<const json*> l = f.Array("l");
  ASSERT_TRUE(o.ok() && l.ok());
  EXPECT_EQ((**o)["k"], 1);
  EXPECT_EQ((*l)->size(), 2u);
  // Optional fields that are absent leave the output as it was.
  std::string kept = "kept";
  EXPECT_TRUE(f.String("absent", &kept, Presence::kOptional).ok());
  EXPECT_EQ(kept, "kept");
  int small = 3;
  EXPECT_TRUE(f.Int("absent", &small, 0, 9, Presence::kOptional).ok());
  EXPECT_EQ(small, 3);
  absl::StatusOr<const json*> none = f.Object("absent", Presence::kOptional);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  // Every key was read but "e".
  EXPECT_THAT(Error(f.NoOtherKeys()), HasSubstr("e is not a field gpulet knows here"));
  ASSERT_TRUE(f.NonEmptyString("e", &s, Presence::kOptional).code() ==
              absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(f.NoOtherKeys().ok());
}

TEST(JsonFieldsTest, ErrorsNameThePathAndWhatWasExpected) {
  const json doc = json::parse(
      R"({"s": 5, "b": "yes", "i": 11, "big": 18446744073709551615, "f": 1.5, "o": [], "l": {}})");
  JsonFields f(doc, "a test file", "events[3]");
  std::string s;
  bool b = false;
  int64_t i = 0;
  EXPECT_EQ(Error(f.String("s", &s)), "not a test file: events[3].s must be a string, not 5");
  EXPECT_EQ(Error(f.Bool("b", &b)),
            "not a test file: events[3].b must be true or false, not the string \"yes\"");
  EXPECT_EQ(Error(f.Int64("i", 0, 10, &i)),
            "not a test file: events[3].i must be an integer from 0 to 10, not 11");
  EXPECT_EQ(Error(f.Int64("i", 0, 10, &i, Presence::kRequired, "a GPU index")),
            "not a test file: events[3].i must be a GPU index, not 11");
  EXPECT_THAT(Error(f.Int64("big", 0, std::numeric_limits<int64_t>::max(), &i)),
              HasSubstr("events[3].big must be an integer"));
  EXPECT_THAT(Error(f.Int64("f", 0, 10, &i)), HasSubstr("not 1.5"));
  EXPECT_THAT(Error(f.Object("o").status()),
              HasSubstr("events[3].o must be an object, not a list"));
  EXPECT_THAT(Error(f.Array("l").status()), HasSubstr("events[3].l must be a list, not an object"));
  EXPECT_EQ(Error(f.String("absent", &s)),
            "not a test file: events[3].absent is missing (a string)");
  EXPECT_EQ(i, 0) << "a refused value is not written";
  EXPECT_EQ(Error(f.Bad("i", "is not a GPU")), "not a test file: events[3].i is not a GPU");
}

TEST(JsonFieldsTest, AStringListNamesTheElementOfAnotherType) {
  const json doc = json::parse(R"({"ids": ["a", "", "c"], "mixed": ["a", 2], "one": "a"})");
  JsonFields f(doc, "a test file", "devices[0]");
  std::vector<std::string> v = {"untouched"};
  ASSERT_TRUE(f.StringList("ids", &v).ok());
  EXPECT_EQ(v, (std::vector<std::string>{"a", "", "c"}));
  v = {"untouched"};
  EXPECT_EQ(Error(f.StringList("mixed", &v)),
            "not a test file: devices[0].mixed[1] must be a string, not 2");
  EXPECT_EQ(v, std::vector<std::string>{"untouched"}) << "a refused list is not written";
  EXPECT_EQ(Error(f.StringList("one", &v)),
            "not a test file: devices[0].one must be a list, not the string \"a\"");
  EXPECT_THAT(Error(f.StringList("absent", &v)), HasSubstr("devices[0].absent is missing"));
  EXPECT_TRUE(f.StringList("absent", &v, Presence::kOptional).ok());
  EXPECT_EQ(v, std::vector<std::string>{"untouched"});
}

TEST(JsonFieldsTest, ADoubleIsAFiniteNumber) {
  json doc = json::parse(R"({"w": 250.5, "n": 3, "s": "250W"})");
  doc["huge"] = std::numeric_limits<double>::infinity();  // (as text, the parser refuses it)
  JsonFields f(doc, "a test file");
  double d = 0;
  ASSERT_TRUE(f.Double("w", &d).ok());
  EXPECT_EQ(d, 250.5);
  ASSERT_TRUE(f.Double("n", &d).ok());
  EXPECT_EQ(d, 3);
  EXPECT_THAT(Error(f.Double("huge", &d)), HasSubstr("huge must be a finite number"));
  EXPECT_EQ(Error(f.Double("s", &d)),
            "not a test file: s must be a finite number, not the string \"250W\"");
  EXPECT_EQ(d, 3);
  EXPECT_EQ(Error(f.Unexpected("s", "a power in watts")),
            "not a test file: s must be a power in watts, not the string \"250W\"");
  EXPECT_EQ(Error(f.Unexpected("absent", "a power in watts")),
            "not a test file: absent is missing (a power in watts)");
}

TEST(JsonFieldsTest, ANonObjectFailsEveryRead) {
  const json doc = json::parse("[1]");
  JsonFields f(doc, "a test file");
  std::string s;
  EXPECT_EQ(Error(f.String("a", &s, Presence::kOptional)),
            "not a test file: the top level must be an object, not a list");
  EXPECT_FALSE(f.NoOtherKeys().ok());
  EXPECT_FALSE(f.Has("a"));
}

}  // namespace
}  // namespace gpulet
