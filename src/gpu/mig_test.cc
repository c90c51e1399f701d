#include "gpu/mig.h"

#include "gtest/gtest.h"

namespace gpulet::gpu {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Memory sizes as `nvidia-smi mig -lgip` and nvmlDeviceGetAttributes_v2 report them; the
// names are those of NVIDIA's MIG user guide ("Supported MIG Profiles").
TEST(MigProfileNameTest, GivesNvidiasNamesForH100AndH200Profiles) {
  const uint64_t h100 = 81559 * kMiB;
  EXPECT_EQ(MigProfileName(1, 1, 9984, h100), "1g.10gb");
  EXPECT_EQ(MigProfileName(1, 1, 20224, h100), "1g.20gb");
  EXPECT_EQ(MigProfileName(2, 2, 20224, h100), "2g.20gb");
  EXPECT_EQ(MigProfileName(3, 3, 40704, h100), "3g.40gb");
  EXPECT_EQ(MigProfileName(4, 4, 40704, h100), "4g.40gb");
  EXPECT_EQ(MigProfileName(7, 7, 81408, h100), "7g.80gb");
  const uint64_t h200 = 143771 * kMiB;
  EXPECT_EQ(MigProfileName(1, 1, 17920, h200), "1g.18gb");
  EXPECT_EQ(MigProfileName(2, 2, 35840, h200), "2g.35gb");
  EXPECT_EQ(MigProfileName(3, 3, 71680, h200), "3g.71gb");
  EXPECT_EQ(MigProfileName(7, 7, 143616, h200), "7g.141gb");
}

TEST(MigProfileNameTest, NamesAComputeInstanceSmallerThanItsGpuInstance) {
  EXPECT_EQ(MigProfileName(3, 1, 40704, 81559 * kMiB), "1c.3g.40gb");
  EXPECT_EQ(MigProfileName(7, 7, 0, 81559 * kMiB), "");  // not a MIG device
  EXPECT_EQ(MigProfileName(0, 0, 9984, 81559 * kMiB), "");
  EXPECT_EQ(MigMemoryGb(0, 9984), 0u);
}

}  // namespace
}  // namespace gpulet::gpu
