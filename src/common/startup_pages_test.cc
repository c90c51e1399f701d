#include "common/startup_pages.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet {
namespace {

int Twice(int x) { return 2 * x; }

TEST(ReleaseStartupCodeTest, AdvisesTheExecutablesReadOnlyMappingsAndCodeStillRuns) {
  absl::StatusOr<size_t> released = ReleaseStartupCode();
  if (absl::IsUnimplemented(released.status())) GTEST_SKIP() << released.status();
  ASSERT_TRUE(released.ok()) << released.status();
  // At least the code of this test binary, which is larger than a page.
  EXPECT_GT(*released, 4096u);
  // What was paged out is faulted back in from the file.
  volatile int x = 21;
  EXPECT_EQ(Twice(x), 42);
  EXPECT_TRUE(ReleaseStartupCode().ok());
}

}  // namespace
}  // namespace gpulet
