#include "node/mig_minors.h"

#include "gtest/gtest.h"

namespace gpulet::node {
namespace {

TEST(MigMinorsTest, ParsesTheDriversListAndNamesTheCapNodesOfAMigDevice) {
  absl::StatusOr<MigMinors> m = ParseMigMinors(
      "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n\ngpu0/gi1/access 12\n"
      "gpu0/gi1/ci0/access 13\ngpu1/gi1/access 147\ngpu1/gi1/ci0/access 148\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->at("monitor"), 2u);
  EXPECT_EQ(
      MigCapDevicePaths(*m, 0, 1, 0),
      (std::vector<std::string>{"/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"}));
  EXPECT_EQ(MigCapDevicePaths(*m, 1, 1, 0),
            (std::vector<std::string>{"/dev/nvidia-caps/nvidia-cap147",
                                      "/dev/nvidia-caps/nvidia-cap148"}));
  // A compute instance the driver does not list: no half answer.
  EXPECT_TRUE(MigCapDevicePaths(*m, 0, 1, 3).empty());
  EXPECT_TRUE(MigCapDevicePaths(*m, 2, 1, 0).empty());
}

TEST(MigMinorsTest, RejectsALineThatIsNotNameAndNumberNamingIt) {
  absl::StatusOr<MigMinors> m = ParseMigMinors("config 1\ngpu0/gi1/access twelve\n");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(),
            "mig-minors line 2 is not \"<capability> <minor>\": \"gpu0/gi1/access twelve\"");
  EXPECT_FALSE(ParseMigMinors("gpu0/gi1/access 12 13").ok());
}

}  // namespace
}  // namespace gpulet::node
