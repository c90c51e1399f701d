#include "daemon/inventory_watch.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet::daemon {
namespace {

using ::testing::HasSubstr;

constexpr char k3080[] = "GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080";
constexpr char k5090[] = "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090";

gpu::Inventory Homelab() {
  gpu::Inventory inventory;
  gpu::Gpu a;
  a.uuid = k3080;
  a.bus_id = "0000:01:00.0";
  a.minor = 0;
  gpu::Gpu b;
  b.uuid = k5090;
  b.bus_id = "0000:02:00.0";
  b.minor = 1;
  inventory.gpus = {a, b};
  return inventory;
}

node::DriverGpu Driver(const char* bus, unsigned minor, const char* uuid) {
  node::DriverGpu d;
  d.bus_id = bus;
  d.minor = minor;
  d.uuid = uuid;
  return d;
}

std::vector<node::DriverGpu> BothAsServed() {
  return {Driver("0000:01:00.0", 0, k3080), Driver("0000:02:00.0", 1, k5090)};
}

TEST(InventoryWatchTest, TheSameGpusOnTheSameMinorsAreNothingToDo) {
  InventoryWatch watch;
  EXPECT_EQ(watch.Check(Homelab(), BothAsServed()), "");
  // A card that fell off the bus is the lost-GPU rules' and the reboot rung's, not a reason
  // to drop it from the inventory.
  EXPECT_EQ(watch.Check(Homelab(), std::vector<node::DriverGpu>{BothAsServed()[0]}), "");
  // No procfs (no driver, or a /proc that is not the host's): nothing to go on.
  EXPECT_EQ(watch.Check(Homelab(), absl::NotFoundError("no /proc/driver/nvidia/gpus")), "");
  // The driver's placeholders before it initialised a GPU are not a different UUID.
  std::vector<node::DriverGpu> early = BothAsServed();
  early[1].uuid = "";
  EXPECT_EQ(watch.Check(Homelab(), early), "");
}

TEST(InventoryWatchTest, ACardBackOnAnotherMinorIsToldOnceUntilItClears) {
  InventoryWatch watch;
  std::vector<node::DriverGpu> moved = BothAsServed();
  moved[1].minor = 12;
  EXPECT_EQ(watch.Check(Homelab(), moved),
            absl::StrCat(k5090, " at 0000:02:00.0 is /dev/nvidia12 now (served as /dev/nvidia1)"));
  // A new inventory that did not mend it (NVML still sees minor 1): not again.
  EXPECT_EQ(watch.Check(Homelab(), moved), "");
  // Mended, then moved again: told again.
  gpu::Inventory mended = Homelab();
  mended.gpus[1].minor = 12;
  EXPECT_EQ(watch.Check(mended, moved), "");
  EXPECT_THAT(watch.Check(mended, BothAsServed()), HasSubstr("is /dev/nvidia1 now"));
}

TEST(InventoryWatchTest, NewSwappedAndLateDriverGpusCountButExcludedOnesDoNot) {
  std::vector<node::DriverGpu> driver = BothAsServed();
  driver.push_back(Driver("0000:03:00.0", 2, ""));
  InventoryWatch watch;
  EXPECT_EQ(watch.Check(Homelab(), driver),
            "the GPU at 0000:03:00.0 is served by the driver as /dev/nvidia2, and gpulet does "
            "not serve it");
  driver.back().excluded = true;
  EXPECT_EQ(InventoryWatch().Check(Homelab(), driver), "");

  std::vector<node::DriverGpu> swapped = BothAsServed();
  swapped[0].uuid = "GPU-00000000-0000-0000-0000-000000000001";
  EXPECT_EQ(InventoryWatch().Check(Homelab(), swapped),
            absl::StrCat("0000:01:00.0 holds GPU-00000000-0000-0000-0000-000000000001 now "
                         "(served as ",
                         k3080, ")"));

  // gpulet started before the driver loaded: it serves the cards from PCI, with no minor.
  gpu::Inventory without_driver = Homelab();
  for (gpu::Gpu& g : without_driver.gpus) {
    g.minor.reset();
    g.uuid.clear();
  }
  const std::string both = InventoryWatch().Check(without_driver, BothAsServed());
  EXPECT_THAT(both,
              HasSubstr(absl::StrCat(k3080,
                                     " at 0000:01:00.0 is served by the driver as /dev/nvidia0 now "
                                     "(gpulet serves it without the driver); ")));
  EXPECT_THAT(both, HasSubstr("0000:02:00.0"));
}

}  // namespace
}  // namespace gpulet::daemon
