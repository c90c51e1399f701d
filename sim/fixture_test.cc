#include "sim/fixture.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "testing/files.h"

namespace gpulet::sim {
namespace {

std::string BundledFixture(const std::string& name) {
  return std::string(GPULET_SOURCE_DIR) + "/sim/fixtures/" + name + ".yaml";
}

TEST(FixtureTest, BundledFixturesLoad) {
  for (const char* name : {"homelab", "dgx8", "dgx8-mig", "h200", "h200-mig"}) {
    SCOPED_TRACE(name);
    Fixture fixture;
    std::string error;
    ASSERT_TRUE(LoadFixture(BundledFixture(name), &fixture, &error)) << error;
    EXPECT_FALSE(fixture.gpus.empty());
    EXPECT_FALSE(fixture.driver_version.empty());
  }
}

// What cannot be read, or is not YAML, is one line naming the file and, for a syntax
// error, the line and column; never a hang on a FIFO.
TEST(FixtureTest, UnreadableAndMalformedFilesSayWhere) {
  testing::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string bad = dir.path() + "/bad.yaml";
  { std::ofstream(bad) << "driver: {version: \"1\"\ngpus: []\n"; }
  const std::string fifo = dir.path() + "/fifo.yaml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string list = dir.path() + "/list.yaml";
  { std::ofstream(list) << "- a\n- b\n"; }
  struct Case {
    std::string path, message;
  } cases[] = {
      {bad, bad + ":2:"},
      {fifo, "is a FIFO"},
      {dir.path(), "is a directory"},
      {dir.path() + "/missing.yaml", "does not exist"},
      {list, list + ":1:1: the document: expected a mapping"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    Fixture fixture;
    std::string error;
    EXPECT_FALSE(LoadFixture(c.path, &fixture, &error));
    EXPECT_NE(error.find(c.message), std::string::npos) << error;
    EXPECT_NE(error.find(c.path), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace gpulet::sim
