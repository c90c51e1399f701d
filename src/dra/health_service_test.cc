// What DRAResourceHealth reports per device, as a pure function of a snapshot; the stream
// itself is tested over real sockets in dra_integration_test.cc.
#include "dra/health_service.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet::dra {
namespace {

using ::testing::ElementsAre;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

state::DeviceRecord Record(unsigned index) {
  state::DeviceRecord d;
  d.gpu.index = index;
  d.gpu.uuid = "GPU-" + std::to_string(index);
  d.gpu.in_nvml = d.gpu.on_pci = true;
  return d;
}

gpu::MigDeviceInfo Mig(unsigned gi, unsigned ci) {
  gpu::MigDeviceInfo m;
  m.uuid = "MIG-" + std::to_string(gi);
  m.gpu_instance_id = gi;
  m.compute_instance_id = ci;
  m.profile = "1g.18gb";
  return m;
}

DeviceHealthEntry E(const std::string& device, DeviceHealthStatus s) { return {device, s}; }

TEST(DeviceHealthListTest, NamesDevicesAsTheSlicesDoWithEachOnesHealth) {
  state::Snapshot snap;
  snap.nvml_ok = true;
  snap.devices = {Record(0), Record(1), Record(2)};
  // GPU 1 is out; GPU 2 runs MIG, and one of its instances is out on its own.
  snap.devices[1].health.Raise("xid", {state::HealthState::kUnhealthy, "XID 79", "", kT0, true},
                               kT0);
  state::DeviceRecord& mig = snap.devices[2];
  mig.gpu.mig_enabled = true;
  mig.gpu.mig_devices = {Mig(1, 0), Mig(2, 0)};
  mig.mig_health[2].Raise("xid", {state::HealthState::kUnhealthy, "XID 94", "", kT0, false}, kT0);
  // A degraded GPU still takes work.
  snap.devices[0].health.Raise("remap", {state::HealthState::kDegraded, "pending", "", kT0, false},
                               kT0);
  // A GPU NVML does not know is not published, so it has no health to report either.
  state::DeviceRecord unknown;
  unknown.gpu.bus_id = "0000:99:00.0";
  snap.devices.push_back(unknown);

  EXPECT_THAT(DeviceHealthList(snap),
              ElementsAre(E("gpu-0", DeviceHealthStatus::kHealthy),
                          E("gpu-1", DeviceHealthStatus::kUnhealthy),
                          E("gpu-2-mig-1-0", DeviceHealthStatus::kHealthy),
                          E("gpu-2-mig-2-0", DeviceHealthStatus::kUnhealthy)));

  // The GPU's own fault takes every MIG device of it out.
  snap.devices[2].health.Raise(
      "liveness", {state::HealthState::kUnhealthy, "GPU is lost", "", kT0, false}, kT0);
  EXPECT_EQ(DeviceHealthList(snap)[2], E("gpu-2-mig-1-0", DeviceHealthStatus::kUnhealthy));
}

TEST(DeviceHealthListTest, EverythingIsUnknownWithoutNvml) {
  state::Snapshot snap;
  snap.nvml_ok = false;
  snap.devices = {Record(0)};
  EXPECT_THAT(DeviceHealthList(snap), ElementsAre(E("gpu-0", DeviceHealthStatus::kUnknown)));
}

}  // namespace
}  // namespace gpulet::dra
