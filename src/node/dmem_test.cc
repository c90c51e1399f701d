#include "node/dmem.h"

#include "gtest/gtest.h"

namespace gpulet::node {
namespace {

TEST(DmemTest, AGpusRegionIsNamedByItsKernelPciAddress) {
  EXPECT_EQ(DmemRegion("00000000:02:00.0"), "nvidia/0000:02:00.0/vidmem");
  EXPECT_EQ(DmemRegion("0000:C1:00.0"), "nvidia/0000:c1:00.0/vidmem");
  EXPECT_EQ(DmemRegion("not a bus"), "");
}

TEST(DmemTest, TheCapacityFileListsARegionOnlyByItsWholeName) {
  const std::string capacity =
      "drm/0000:03:00.0/vram0 12550144\n"
      "nvidia/0000:02:00.0/vidmem 34359738368\n";
  EXPECT_TRUE(DmemCapacityLists(capacity, "00000000:02:00.0"));
  EXPECT_FALSE(DmemCapacityLists(capacity, "0000:03:00.0"));  // another driver's device
  EXPECT_FALSE(DmemCapacityLists("nvidia/0000:02:00.0/vidmem\n", "0000:02:00.0"));  // no size
  EXPECT_FALSE(DmemCapacityLists("nvidia/0000:02:00.0/vidmem2 1\n", "0000:02:00.0"));
  EXPECT_FALSE(DmemCapacityLists("", "0000:02:00.0"));
  EXPECT_FALSE(DmemCapacityLists(capacity, ""));
}

TEST(DmemTest, OnlyR615AndLaterDriversHaveTheCall) {
  EXPECT_FALSE(DriverHasMemoryLimits("570.133.20"));
  EXPECT_FALSE(DriverHasMemoryLimits("614.99"));
  EXPECT_TRUE(DriverHasMemoryLimits("615.20.01"));
  EXPECT_TRUE(DriverHasMemoryLimits("620"));
  EXPECT_FALSE(DriverHasMemoryLimits(""));
  EXPECT_FALSE(DriverHasMemoryLimits("r615"));
}

TEST(DmemTest, TheUnifiedCgroupIsTheZeroLine) {
  EXPECT_EQ(UnifiedCgroupPath("0::/kubepods/besteffort/pod1/ctr2\n"),
            "/kubepods/besteffort/pod1/ctr2");
  // A hybrid host: v1 controllers and the unified hierarchy.
  EXPECT_EQ(UnifiedCgroupPath("12:memory:/kubepods/pod1/c\n0::/kubepods/pod1/c\n"),
            "/kubepods/pod1/c");
  EXPECT_EQ(UnifiedCgroupPath("0::/../../kubepods/pod1/c"), "/../../kubepods/pod1/c");
  EXPECT_EQ(UnifiedCgroupPath("12:memory:/kubepods/pod1/c\n"), std::nullopt);  // v1 only
  EXPECT_EQ(UnifiedCgroupPath("0::relative\n"), std::nullopt);
  EXPECT_EQ(UnifiedCgroupPath(""), std::nullopt);
}

TEST(DmemTest, TheCommonCgroupIsTheDeepestThatHoldsAll) {
  EXPECT_EQ(CommonCgroup({"/kubepods/pod1/a"}), "/kubepods/pod1/a");
  EXPECT_EQ(CommonCgroup({"/kubepods/pod1/a", "/kubepods/pod1/b"}), "/kubepods/pod1");
  EXPECT_EQ(CommonCgroup({"/kubepods/pod1/ab", "/kubepods/pod1/a"}), "/kubepods/pod1");
  EXPECT_EQ(CommonCgroup({"/a/b", "/c"}), "/");
  EXPECT_EQ(CommonCgroup({}), "");
  // Not cgroups (no leading '/'): the climb still ends.
  EXPECT_EQ(CommonCgroup({"abc", "x"}), "/");
  EXPECT_EQ(CommonCgroup({"/a/b", "x"}), "/");
  EXPECT_TRUE(CgroupWithin("/a/b", "/a"));
  EXPECT_TRUE(CgroupWithin("/a", "/a"));
  EXPECT_FALSE(CgroupWithin("/ab", "/a"));
  EXPECT_TRUE(CgroupWithin("/a", "/"));
}

}  // namespace
}  // namespace gpulet::node
