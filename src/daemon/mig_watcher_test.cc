#include "daemon/mig_watcher.h"

#include "gtest/gtest.h"
#include "testing/fake_gpu_library.h"

namespace gpulet::daemon {
namespace {

using testing::FakeGpuLibrary;
using testing::kGpu0;
using testing::NvmlGpu;

gpu::MigDeviceInfo Mig(unsigned gi, const char* uuid) {
  gpu::MigDeviceInfo m;
  m.gpu_instance_id = gi;
  m.uuid = uuid;
  m.profile = "1g.18gb";
  return m;
}

TEST(MigWatcherTest, ALayoutChangedUnderGpuletReachesTheStoreAndTheCallbackOnce) {
  FakeGpuLibrary library;
  gpu::DeviceIdentity id;
  id.index = 0;
  id.uuid = kGpu0;
  library.AddDevice(id);
  state::DeviceStore store;
  gpu::Inventory inv;
  inv.gpus.push_back(NvmlGpu(0, kGpu0, "0000:18:00.0"));
  inv.gpus[0].mig_capable = true;
  store.SetInventory(inv, absl::UnixEpoch());
  int changes = 0;
  MigWatcher watcher(&library, &store, {}, [&] { ++changes; });

  EXPECT_FALSE(watcher.Tick());  // MIG disabled, as the inventory says
  library.SetMigLayout(0, gpu::MigLayout{true, true, {Mig(1, "MIG-a"), Mig(2, "MIG-b")}});
  EXPECT_TRUE(watcher.Tick());
  EXPECT_EQ(changes, 1);
  EXPECT_TRUE(store.Get()->devices[0].gpu.mig_enabled);
  EXPECT_EQ(store.Get()->devices[0].gpu.mig_devices.size(), 2u);
  EXPECT_FALSE(watcher.Tick());  // unchanged: no new snapshot, no callback
  EXPECT_EQ(changes, 1);
  // A GPU that cannot answer keeps its last layout.
  library.FailNvml(0, 15);  // GPU_IS_LOST
  EXPECT_FALSE(watcher.Tick());
  EXPECT_EQ(store.Get()->devices[0].gpu.mig_devices.size(), 2u);
  library.Heal(0);
  library.SetMigLayout(0, gpu::MigLayout{});
  EXPECT_TRUE(watcher.Tick());
  EXPECT_FALSE(store.Get()->devices[0].gpu.mig_enabled);
  EXPECT_TRUE(store.Get()->devices[0].gpu.mig_devices.empty());
}

}  // namespace
}  // namespace gpulet::daemon
