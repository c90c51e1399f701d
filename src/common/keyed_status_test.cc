#include "common/keyed_status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace gpulet {
namespace {

TEST(KeyedStatusTest, NamesTheKeyInTheMessageAndAsAPayloadKeepingTheCode) {
  absl::Status s = AtKey("dra.checkpointFile", absl::PermissionDeniedError("cannot write x"));
  EXPECT_TRUE(absl::IsPermissionDenied(s));
  EXPECT_EQ(s.message(), "dra.checkpointFile: cannot write x");
  EXPECT_EQ(KeyOf(s), "dra.checkpointFile");
}

TEST(KeyedStatusTest, TheInnermostKeyWins) {
  absl::Status inner = AtKey("dra.checkpointFile", absl::DataLossError("torn"));
  absl::Status outer = AtKey("dra.enabled", inner);
  EXPECT_EQ(outer, inner);
  EXPECT_EQ(KeyOf(outer), "dra.checkpointFile");
}

TEST(KeyedStatusTest, OtherPayloadsAreKept) {
  absl::Status s = absl::UnavailableError("down");
  s.SetPayload("type.example/code", absl::Cord("9"));
  absl::Status keyed = AtKey("metrics.address", s);
  ASSERT_TRUE(keyed.GetPayload("type.example/code").has_value());
  EXPECT_EQ(std::string(*keyed.GetPayload("type.example/code")), "9");
}

TEST(KeyedStatusTest, AnOkStatusAndAnUnkeyedOneNameNoKey) {
  EXPECT_TRUE(AtKey("metrics.address", absl::OkStatus()).ok());
  EXPECT_EQ(KeyOf(absl::OkStatus()), "");
  // Text that looks like a key is not one: only the payload says so.
  EXPECT_EQ(KeyOf(absl::InvalidArgumentError("metrics.webConfigFile: bad")), "");
}

// What to do with an error is decided by its code or a typed payload (a key here, NVML's
// code, the API server's Status), never by its words: a reworded message must not change
// behaviour. The scan finds an error's text held against a literal in product code.
TEST(KeyedStatusTest, NoProductCodeDecidesByAnErrorsText) {
  const std::regex by_text(
      R"((StrContains|StartsWith|EndsWith|EqualsIgnoreCase|StrContainsIgnoreCase|)"
      R"(StartsWithIgnoreCase)\(\s*[^,;]*(message|ToString)\(\)\s*,\s*")"
      R"(|(message|ToString)\(\)\s*(==|!=)\s*")"
      R"(|(message|ToString)\(\)\s*\.(find|rfind|starts_with|ends_with|contains)\(\s*")");
  const std::filesystem::path root = GPULET_SOURCE_DIR;
  std::vector<std::string> offenders;
  for (const char* dir : {"src", "sim"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root / dir)) {
      const std::string rel = std::filesystem::relative(entry.path(), root).string();
      const std::string ext = entry.path().extension().string();
      if ((ext != ".cc" && ext != ".h") || absl::EndsWith(rel, "_test.cc") ||
          absl::EndsWith(rel, "_fuzz.cc") || absl::StartsWith(rel, "src/testing/")) {
        continue;
      }
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      // Statement by statement (a call may wrap lines), and only those that read an error's
      // text: std::regex is slow on long input.
      for (absl::string_view statement : absl::StrSplit(text.str(), ';')) {
        if (!absl::StrContains(statement, "message()") &&
            !absl::StrContains(statement, "ToString()")) {
          continue;
        }
        std::string one(statement);
        for (char& c : one) {
          if (c == '\n') c = ' ';
        }
        std::smatch m;
        if (std::regex_search(one, m, by_text)) offenders.push_back(rel + ": " + m.str());
      }
    }
  }
  EXPECT_THAT(offenders, ::testing::IsEmpty());
  // The rule finds what it is for.
  EXPECT_TRUE(std::regex_search(
      R"(if (absl::StartsWith(built.status().message(), "metrics.")) return)", by_text));
  EXPECT_TRUE(std::regex_search(R"(s.message().find("not registered") != npos)", by_text));
  EXPECT_FALSE(std::regex_search(R"(s.message() != last_error)", by_text));
}

}  // namespace
}  // namespace gpulet
