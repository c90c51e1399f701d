#include "common/log.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// What one statement at `level` writes to stderr, with the logger at `threshold`.
template <typename... Args>
std::string Logged(const std::string& threshold, LogLevel level,
                   fmt::format_string<log_internal::FmtArg<Args>...> format, const Args&... args) {
  EXPECT_TRUE(InitLogging(threshold));
  ::testing::internal::CaptureStderr();
  log_internal::Log(level, format, args...);
  std::string out = ::testing::internal::GetCapturedStderr();
  InitLogging("info");
  return out;
}

TEST(LogTest, FormatsEveryKindOfArgumentOnceWithTheLevel) {
  std::string owned = "owned";
  absl::string_view abseil_view = "abseil view";
  std::string out = Logged("info", LogLevel::kWarn, "{} {} {} {:.1f} {} {} {}", "literal", owned,
                           abseil_view, 2.5, 0.1, 42, true);
  EXPECT_THAT(out, HasSubstr(" warning literal owned abseil view 2.5 0.1 42 true\n"));
}

TEST(LogTest, AMessageIsTextNotAFormat) {
  // Braces in an argument reach the log as they are (the sink gets formatted text).
  std::string out = Logged("info", LogLevel::kError, "key {}", absl::string_view("{bad}"));
  EXPECT_THAT(out, HasSubstr(" error key {bad}\n"));
}

TEST(LogTest, BelowTheThresholdNothingIsWritten) {
  EXPECT_EQ(Logged("warn", LogLevel::kInfo, "quiet {}", 1), "");
  EXPECT_EQ(Logged("info", LogLevel::kDebug, "quiet {}", 1), "");
  EXPECT_THAT(Logged("debug", LogLevel::kDebug, "loud {}", 1), HasSubstr(" debug loud 1\n"));
}

TEST(LogTest, MacrosLogAtTheirLevel) {
  ASSERT_TRUE(InitLogging("debug"));
  ::testing::internal::CaptureStderr();
  GPULET_LOG_DEBUG("d {}", 1);
  GPULET_LOG_INFO("i {}", 2);
  GPULET_LOG_WARN("w {}", 3);
  GPULET_LOG_ERROR("e {}", 4);
  std::string out = ::testing::internal::GetCapturedStderr();
  InitLogging("info");
  EXPECT_THAT(out, AllOf(HasSubstr(" debug d 1\n"), HasSubstr(" info i 2\n"),
                         HasSubstr(" warning w 3\n"), HasSubstr(" error e 4\n")));
}

TEST(LogTest, AnUnknownLevelIsRefusedAndTheThresholdKept) {
  ASSERT_TRUE(InitLogging("warn"));
  EXPECT_FALSE(InitLogging("verbose"));
  ::testing::internal::CaptureStderr();
  GPULET_LOG_INFO("quiet");
  GPULET_LOG_WARN("loud");
  std::string out = ::testing::internal::GetCapturedStderr();
  InitLogging("info");
  EXPECT_THAT(out, AllOf(HasSubstr("loud"), Not(HasSubstr("quiet"))));
}

// The build-time point of log.h (its header comment): spdlog is included by log.cc alone and
// fmt's implementation by cmake/fmt_impl.cc alone; every other file sees fmt's core header.
TEST(LogTest, SpdlogAndFmtsImplementationAreIncludedInOneFileEach) {
  const std::filesystem::path root = GPULET_SOURCE_DIR;
  std::vector<std::string> offenders;
  for (const char* dir : {"src", "sim", "bench", "tests", "cmake"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".cc" && ext != ".h") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string rel = std::filesystem::relative(entry.path(), root).string();
      for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
        if (!absl::StartsWith(line, "#include")) continue;
        const bool spdlog = absl::StrContains(line, "spdlog/");
        const bool fmt_impl = absl::StrContains(line, "fmt/format") ||
                              absl::StrContains(line, "fmt/ostream") ||
                              absl::StrContains(line, "fmt/chrono");
        if ((spdlog && rel != "src/common/log.cc") || (fmt_impl && rel != "cmake/fmt_impl.cc")) {
          offenders.push_back(rel + ": " + std::string(line));
        }
      }
    }
  }
  EXPECT_THAT(offenders, ::testing::IsEmpty());
}

}  // namespace
}  // namespace gpulet
