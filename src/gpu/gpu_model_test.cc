#include "gpu/gpu_model.h"

#include "gpu/nvml_api.h"
#include "gtest/gtest.h"

namespace gpulet {
namespace {

TEST(ArchitectureTest, FromNvmlValues) {
  EXPECT_EQ(ArchitectureFromNvml(2), Architecture::kKepler);
  EXPECT_EQ(ArchitectureFromNvml(3), Architecture::kMaxwell);
  EXPECT_EQ(ArchitectureFromNvml(4), Architecture::kPascal);
  EXPECT_EQ(ArchitectureFromNvml(5), Architecture::kVolta);
  EXPECT_EQ(ArchitectureFromNvml(6), Architecture::kTuring);
  EXPECT_EQ(ArchitectureFromNvml(7), Architecture::kAmpere);
  EXPECT_EQ(ArchitectureFromNvml(8), Architecture::kAda);
  EXPECT_EQ(ArchitectureFromNvml(9), Architecture::kHopper);
  EXPECT_EQ(ArchitectureFromNvml(10), Architecture::kBlackwell);
  EXPECT_EQ(ArchitectureFromNvml(13), Architecture::kRubin);
  EXPECT_EQ(ArchitectureFromNvml(11), Architecture::kUnknown);
  EXPECT_EQ(ArchitectureFromNvml(0), Architecture::kUnknown);
  EXPECT_EQ(ArchitectureFromNvml(NVML_DEVICE_ARCH_UNKNOWN), Architecture::kUnknown);
}

}  // namespace
}  // namespace gpulet
