#include "state/device_id.h"

#include "gtest/gtest.h"

namespace gpulet::state {
namespace {

TEST(DeviceIdTest, FormatsAndMapsBack) {
  struct Case {
    std::string id;
    std::string physical;
  };
  const std::string base = BaseDeviceId("GPU-a1b2", "0000:01:00.0");
  const Case cases[] = {
      {base, "GPU-a1b2"},
      {ReplicaDeviceId(base, 0), "GPU-a1b2"},
      {ReplicaDeviceId(base, 12), "GPU-a1b2"},
      {MemorySliceDeviceId(base, 3), "GPU-a1b2"},
      {BaseDeviceId("", "0000:41:00.0"), "pci-0000:41:00.0"},
      {MemorySliceDeviceId(BaseDeviceId("", "0000:41:00.0"), 0), "pci-0000:41:00.0"},
  };
  for (const Case& c : cases) EXPECT_EQ(PhysicalId(c.id), c.physical) << c.id;
  EXPECT_EQ(ReplicaDeviceId(base, 2), "GPU-a1b2::2");
  EXPECT_EQ(MemorySliceDeviceId(base, 7), "GPU-a1b2::mem7");
}

}  // namespace
}  // namespace gpulet::state
