#include "common/atomic_file.h"

#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

size_t Entries(const std::string& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

unsigned ModeOf(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_mode & 0777 : 0;
}

TEST(AtomicFileTest, ReplacesWholeAndLeavesNoTemporaryFile) {
  gpulet::testing::ScratchDir dir;
  const std::string path = dir.path() + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, "a=1\n").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "b=2\n").ok());
  EXPECT_EQ(gpulet::testing::ReadTextFile(path), "b=2\n");
  EXPECT_EQ(ModeOf(path), 0644u);
  EXPECT_EQ(Entries(dir.path()), 1u);
}

TEST(AtomicFileTest, ModeAndParentsAndNotDurable) {
  gpulet::testing::ScratchDir dir;
  const std::string path = dir.path() + "/var/run/cdi/nvidia.yaml";
  // Without create_parents a missing directory is NotFound, naming it.
  absl::Status st = WriteFileAtomically(path, "x");
  EXPECT_TRUE(absl::IsNotFound(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(dir.path() + "/var/run/cdi does not exist"));
  ASSERT_TRUE(WriteFileAtomically(path, "one\n", {.mode = 0600, .create_parents = true}).ok());
  EXPECT_EQ(ModeOf(path), 0600u);
  EXPECT_EQ(ModeOf(dir.path() + "/var/run"), 0755u);
  ASSERT_TRUE(WriteFileAtomically(path, "two\n", {.durable = false}).ok());
  EXPECT_EQ(gpulet::testing::ReadTextFile(path), "two\n");
  EXPECT_EQ(Entries(dir.path() + "/var/run/cdi"), 1u);
}

TEST(AtomicFileTest, FailuresNameThePathAndKeepTheOldFile) {
  gpulet::testing::ScratchDir dir;
  dir.Write("file", "x");
  struct Case {
    std::string path;
    AtomicWriteOptions options;
    absl::StatusCode code;
  };
  const Case cases[] = {
      // A parent that is a file.
      {dir.path() + "/file/sub/nvidia.yaml", {.create_parents = true}, absl::StatusCode::kNotFound},
      {dir.path() + "/file/nvidia.yaml", {}, absl::StatusCode::kNotFound},
      // A path naming a directory.
      {dir.path() + "/", {}, absl::StatusCode::kInvalidArgument},
      // Replacing a directory with a file.
      {dir.path(), {}, absl::StatusCode::kInternal},
  };
  for (const Case& c : cases) {
    absl::Status st = WriteFileAtomically(c.path, "new", c.options);
    EXPECT_EQ(st.code(), c.code) << c.path << ": " << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.path)) << st;
  }
  EXPECT_EQ(gpulet::testing::ReadTextFile(dir.path() + "/file"), "x");
  EXPECT_EQ(Entries(dir.path()), 1u);
}

TEST(AtomicFileTest, ReadOnlyDirectoryIsPermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes into a 0555 directory";
  gpulet::testing::ScratchDir dir;
  const std::string path = dir.Write("ro/f", "old");
  ASSERT_EQ(chmod((dir.path() + "/ro").c_str(), 0555), 0);
  absl::Status st = WriteFileAtomically(path, "new");
  chmod((dir.path() + "/ro").c_str(), 0755);
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  EXPECT_EQ(gpulet::testing::ReadTextFile(path), "old");
}

}  // namespace
}  // namespace gpulet
