#include "gpu/gpu_model.h"

#include "gpu/nvml_api.h"
#include "gtest/gtest.h"

namespace gpulet::gpu {
namespace {

TEST(ArchitectureTest, FromNvmlValues) {
  EXPECT_EQ(ArchitectureFromNvml(2), node::Architecture::kKepler);
  EXPECT_EQ(ArchitectureFromNvml(3), node::Architecture::kMaxwell);
  EXPECT_EQ(ArchitectureFromNvml(4), node::Architecture::kPascal);
  EXPECT_EQ(ArchitectureFromNvml(5), node::Architecture::kVolta);
  EXPECT_EQ(ArchitectureFromNvml(6), node::Architecture::kTuring);
  EXPECT_EQ(ArchitectureFromNvml(7), node::Architecture::kAmpere);
  EXPECT_EQ(ArchitectureFromNvml(8), node::Architecture::kAda);
  EXPECT_EQ(ArchitectureFromNvml(9), node::Architecture::kHopper);
  EXPECT_EQ(ArchitectureFromNvml(10), node::Architecture::kBlackwell);
  EXPECT_EQ(ArchitectureFromNvml(13), node::Architecture::kRubin);
  EXPECT_EQ(ArchitectureFromNvml(11), node::Architecture::kUnknown);
  EXPECT_EQ(ArchitectureFromNvml(0), node::Architecture::kUnknown);
  EXPECT_EQ(ArchitectureFromNvml(NVML_DEVICE_ARCH_UNKNOWN), node::Architecture::kUnknown);
}

}  // namespace
}  // namespace gpulet::gpu
