#include "gpu/nvml_errors.h"

#include <set>

#include "gpu/nvml_api.h"
#include "gtest/gtest.h"

namespace gpulet::gpu {
namespace {

TEST(NvmlErrorsTest, EveryCodeFromTheAbiHasAnEntry) {
  for (int code = 0; code <= 30; ++code) {
    const NvmlReturnInfo& info = DescribeNvmlReturn(code);
    EXPECT_EQ(info.code, code) << "missing entry for " << code;
    EXPECT_FALSE(info.cause.empty());
    EXPECT_FALSE(info.fix.empty());
  }
  EXPECT_EQ(DescribeNvmlReturn(NVML_ERROR_UNKNOWN).name, "NVML_ERROR_UNKNOWN");
}

TEST(NvmlErrorsTest, TableIsSortedAndNamesAreUnique) {
  std::set<std::string> names;
  int last = -1;
  for (const NvmlReturnInfo& e : AllNvmlReturns()) {
    EXPECT_GT(e.code, last);
    last = e.code;
    EXPECT_TRUE(names.insert(std::string(e.name)).second) << e.name;
  }
}

TEST(NvmlErrorsTest, KeyCausesSayWhatToDo) {
  EXPECT_NE(DescribeNvmlReturn(NVML_ERROR_DRIVER_NOT_LOADED).fix.find("machine.kernel.modules"),
            absl::string_view::npos);
  EXPECT_NE(DescribeNvmlReturn(NVML_ERROR_LIB_RM_VERSION_MISMATCH).cause.find("without a reboot"),
            absl::string_view::npos);
  EXPECT_NE(DescribeNvmlReturn(NVML_ERROR_GPU_IS_LOST).cause.find("fallen off the bus"),
            absl::string_view::npos);
}

TEST(NvmlErrorsTest, UnknownCodeGetsGenericEntry) {
  EXPECT_EQ(DescribeNvmlReturn(12345).name, "NVML_ERROR_UNRECOGNISED");
}

TEST(NvmlErrorsTest, FindByName) {
  ASSERT_NE(FindNvmlReturnByName("GPU_IS_LOST"), nullptr);
  EXPECT_EQ(FindNvmlReturnByName("gpu_is_lost")->code, NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(FindNvmlReturnByName("NVML_ERROR_DRIVER_NOT_LOADED")->code,
            NVML_ERROR_DRIVER_NOT_LOADED);
  EXPECT_EQ(FindNvmlReturnByName("NO_SUCH_THING"), nullptr);
}

TEST(NvmlErrorsTest, StatusCarriesCallContextCodeAndFix) {
  absl::Status s = NvmlError(NVML_ERROR_DRIVER_NOT_LOADED, "nvmlInit_v2", "/usr/lib/libx.so");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("nvmlInit_v2 (/usr/lib/libx.so) failed"), absl::string_view::npos);
  EXPECT_NE(s.message().find("NVML_ERROR_DRIVER_NOT_LOADED (9)"), absl::string_view::npos);
  EXPECT_NE(s.message().find("Fix:"), absl::string_view::npos);
  EXPECT_EQ(NvmlCodeOf(s), NVML_ERROR_DRIVER_NOT_LOADED);
  EXPECT_EQ(NvmlError(NVML_ERROR_GPU_IS_LOST, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(NvmlError(NVML_ERROR_NOT_SUPPORTED, "x").code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(NvmlCodeOf(absl::InternalError("plain")), -1);
}

}  // namespace
}  // namespace gpulet::gpu
