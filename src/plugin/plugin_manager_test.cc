// PluginManager's pure rules, in process. Its wiring (registration, kubelet restarts, reloads)
// is plugin_integration_test.cc's, against the kubelet stand-in, and `make e2e`'s.
#include "plugin/plugin_manager.h"

#include "gtest/gtest.h"

namespace gpulet::plugin {
namespace {

TEST(NextSocketNameTest, CountsUpFromTheBaseName) {
  EXPECT_EQ(NextSocketName("gpulet-gpu.sock"), "gpulet-gpu.r1.sock");
  EXPECT_EQ(NextSocketName("gpulet-gpu.r1.sock"), "gpulet-gpu.r2.sock");
  EXPECT_EQ(NextSocketName("gpulet-gpu.r9.sock"), "gpulet-gpu.r10.sock");
  EXPECT_EQ(NextSocketName("gpulet-mig-1g.18gb.sock"), "gpulet-mig-1g.18gb.r1.sock");
  EXPECT_EQ(NextSocketName("odd"), "odd.r1.sock");
}

}  // namespace
}  // namespace gpulet::plugin
