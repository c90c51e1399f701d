// Tests for libgpulet-nvml-sim.so, loaded the way gpulet loads libnvidia-ml: dlopen() with
// RTLD_LOCAL and one dlsym() per versioned symbol, called through the function-pointer types
// of src/gpu/nvml_api.h. The simulator keeps process-wide state, so every test initialises
// NVML itself and TearDown shuts it down completely.
//
// init_crash is not tested here: it really raises SIGSEGV (the loader tests fork for it).

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gpu/nvml_api.h"
#include "sim/state.h"

namespace gpulet::sim {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

constexpr unsigned long long kMiB = 1ULL << 20;

// Function types nvml_api.h has no alias for.
using InitWithFlagsFn = nvmlReturn_t (*)(unsigned int);
using DeviceGetUint2Fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*);
using DeviceGetInt2Fn = nvmlReturn_t (*)(nvmlDevice_t, int*, int*);
using DeviceGetHandleFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlDevice_t*);

// The simulator's entry points, resolved once for the whole test binary.
struct Nvml {
  gpu::InitFn Init;
  InitWithFlagsFn InitWithFlags;
  gpu::ShutdownFn Shutdown;
  gpu::ErrorStringFn ErrorString;
  gpu::SystemGetStringFn SystemGetDriverVersion;
  gpu::SystemGetStringFn SystemGetNVMLVersion;
  gpu::SystemGetIntFn SystemGetCudaDriverVersion;
  gpu::GetCountFn GetCount;
  gpu::GetHandleByIndexFn GetHandleByIndex;
  gpu::GetHandleByStringFn GetHandleByUUID;
  gpu::GetHandleByStringFn GetHandleByPciBusId;
  gpu::DeviceGetStringFn GetName;
  gpu::DeviceGetStringFn GetUUID;
  gpu::DeviceGetStringFn GetSerial;
  gpu::DeviceGetUintFn GetIndex;
  gpu::DeviceGetUintFn GetMinorNumber;
  gpu::DeviceGetPciInfoFn GetPciInfo;
  gpu::DeviceGetMemoryInfoFn GetMemoryInfo;
  gpu::DeviceGetMemoryInfoV2Fn GetMemoryInfoV2;
  gpu::DeviceGetUtilizationFn GetUtilizationRates;
  gpu::DeviceGetTemperatureFn GetTemperature;
  gpu::DeviceGetUintFn GetPowerUsage;
  gpu::DeviceGetUllFn GetTotalEnergyConsumption;
  gpu::DeviceGetUintFn GetFanSpeed;
  gpu::DeviceGetUintFn GetArchitecture;
  gpu::DeviceGetIntFn GetBrand;
  gpu::DeviceGetCudaCapFn GetCudaComputeCapability;
  gpu::DeviceGetProcessesFn GetComputeProcesses;
  gpu::DeviceGetProcessesFn GetGraphicsProcesses;
  gpu::DeviceGetProcessUtilizationFn GetProcessUtilization;
  gpu::DeviceGetRemappedRowsFn GetRemappedRows;
  DeviceGetInt2Fn GetEccMode;
  gpu::DeviceGetEccErrorsFn GetTotalEccErrors;
  DeviceGetUint2Fn GetEncoderUtilization;
  gpu::DeviceGetFieldValuesFn GetFieldValues;
  gpu::DeviceGetUllFn GetSupportedEventTypes;
  gpu::EventSetCreateFn EventSetCreate;
  gpu::DeviceRegisterEventsFn RegisterEvents;
  gpu::EventSetWaitFn EventSetWait;
  gpu::EventSetFreeFn EventSetFree;
  gpu::DeviceGetLinkIntFn GetNvLinkState;
  gpu::DeviceGetLinkErrorFn GetNvLinkErrorCounter;
  gpu::DeviceGetLinkIntFn GetNvLinkRemoteDeviceType;
  gpu::DeviceGetMigModeFn GetMigMode;
  gpu::DeviceGetIntFn GetVirtualizationMode;
  gpu::GpmQueryDeviceSupportFn GpmQueryDeviceSupport;
  gpu::GpmSampleAllocFn GpmSampleAlloc;
  gpu::GpmSampleFreeFn GpmSampleFree;
  gpu::GpmSampleGetFn GpmSampleGet;
  gpu::GpmMetricsGetFn GpmMetricsGet;
  gpu::DeviceGetUintFn GetMaxMigDeviceCount;
  gpu::DeviceGetMigDeviceHandleByIndexFn GetMigDeviceHandleByIndex;
  gpu::DeviceGetUintFn IsMigDeviceHandle;
  DeviceGetHandleFn GetDeviceHandleFromMigDeviceHandle;
  gpu::DeviceGetUintFn GetGpuInstanceId;
  gpu::DeviceGetUintFn GetComputeInstanceId;
  gpu::DeviceGetAttributesFn GetAttributes;
  gpu::GpmMigSampleGetFn GpmMigSampleGet;
};

template <typename T>
void Resolve(void* lib, const char* name, T* fn) {
  *fn = reinterpret_cast<T>(dlsym(lib, name));
  if (*fn == nullptr) ADD_FAILURE() << "missing symbol " << name;
}

const Nvml& Api() {
  static const Nvml* api = [] {
    void* lib = dlopen(GPULET_SIM_LIB, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      ADD_FAILURE() << "dlopen " << GPULET_SIM_LIB << ": " << dlerror();
      std::abort();
    }
    auto* n = new Nvml();
    Resolve(lib, "nvmlInit_v2", &n->Init);
    Resolve(lib, "nvmlInitWithFlags", &n->InitWithFlags);
    Resolve(lib, "nvmlShutdown", &n->Shutdown);
    Resolve(lib, "nvmlErrorString", &n->ErrorString);
    Resolve(lib, "nvmlSystemGetDriverVersion", &n->SystemGetDriverVersion);
    Resolve(lib, "nvmlSystemGetNVMLVersion", &n->SystemGetNVMLVersion);
    Resolve(lib, "nvmlSystemGetCudaDriverVersion_v2", &n->SystemGetCudaDriverVersion);
    Resolve(lib, "nvmlDeviceGetCount_v2", &n->GetCount);
    Resolve(lib, "nvmlDeviceGetHandleByIndex_v2", &n->GetHandleByIndex);
    Resolve(lib, "nvmlDeviceGetHandleByUUID", &n->GetHandleByUUID);
    Resolve(lib, "nvmlDeviceGetHandleByPciBusId_v2", &n->GetHandleByPciBusId);
    Resolve(lib, "nvmlDeviceGetName", &n->GetName);
    Resolve(lib, "nvmlDeviceGetUUID", &n->GetUUID);
    Resolve(lib, "nvmlDeviceGetSerial", &n->GetSerial);
    Resolve(lib, "nvmlDeviceGetIndex", &n->GetIndex);
    Resolve(lib, "nvmlDeviceGetMinorNumber", &n->GetMinorNumber);
    Resolve(lib, "nvmlDeviceGetPciInfo_v3", &n->GetPciInfo);
    Resolve(lib, "nvmlDeviceGetMemoryInfo", &n->GetMemoryInfo);
    Resolve(lib, "nvmlDeviceGetMemoryInfo_v2", &n->GetMemoryInfoV2);
    Resolve(lib, "nvmlDeviceGetUtilizationRates", &n->GetUtilizationRates);
    Resolve(lib, "nvmlDeviceGetTemperature", &n->GetTemperature);
    Resolve(lib, "nvmlDeviceGetPowerUsage", &n->GetPowerUsage);
    Resolve(lib, "nvmlDeviceGetTotalEnergyConsumption", &n->GetTotalEnergyConsumption);
    Resolve(lib, "nvmlDeviceGetFanSpeed", &n->GetFanSpeed);
    Resolve(lib, "nvmlDeviceGetArchitecture", &n->GetArchitecture);
    Resolve(lib, "nvmlDeviceGetBrand", &n->GetBrand);
    Resolve(lib, "nvmlDeviceGetCudaComputeCapability", &n->GetCudaComputeCapability);
    Resolve(lib, "nvmlDeviceGetComputeRunningProcesses_v3", &n->GetComputeProcesses);
    Resolve(lib, "nvmlDeviceGetGraphicsRunningProcesses_v3", &n->GetGraphicsProcesses);
    Resolve(lib, "nvmlDeviceGetProcessUtilization", &n->GetProcessUtilization);
    Resolve(lib, "nvmlDeviceGetRemappedRows", &n->GetRemappedRows);
    Resolve(lib, "nvmlDeviceGetEccMode", &n->GetEccMode);
    Resolve(lib, "nvmlDeviceGetTotalEccErrors", &n->GetTotalEccErrors);
    Resolve(lib, "nvmlDeviceGetEncoderUtilization", &n->GetEncoderUtilization);
    Resolve(lib, "nvmlDeviceGetFieldValues", &n->GetFieldValues);
    Resolve(lib, "nvmlDeviceGetSupportedEventTypes", &n->GetSupportedEventTypes);
    Resolve(lib, "nvmlEventSetCreate", &n->EventSetCreate);
    Resolve(lib, "nvmlDeviceRegisterEvents", &n->RegisterEvents);
    Resolve(lib, "nvmlEventSetWait_v2", &n->EventSetWait);
    Resolve(lib, "nvmlEventSetFree", &n->EventSetFree);
    Resolve(lib, "nvmlDeviceGetNvLinkState", &n->GetNvLinkState);
    Resolve(lib, "nvmlDeviceGetNvLinkErrorCounter", &n->GetNvLinkErrorCounter);
    Resolve(lib, "nvmlDeviceGetNvLinkRemoteDeviceType", &n->GetNvLinkRemoteDeviceType);
    Resolve(lib, "nvmlDeviceGetMigMode", &n->GetMigMode);
    Resolve(lib, "nvmlDeviceGetVirtualizationMode", &n->GetVirtualizationMode);
    Resolve(lib, "nvmlGpmQueryDeviceSupport", &n->GpmQueryDeviceSupport);
    Resolve(lib, "nvmlGpmSampleAlloc", &n->GpmSampleAlloc);
    Resolve(lib, "nvmlGpmSampleFree", &n->GpmSampleFree);
    Resolve(lib, "nvmlGpmSampleGet", &n->GpmSampleGet);
    Resolve(lib, "nvmlGpmMetricsGet", &n->GpmMetricsGet);
    Resolve(lib, "nvmlDeviceGetMaxMigDeviceCount", &n->GetMaxMigDeviceCount);
    Resolve(lib, "nvmlDeviceGetMigDeviceHandleByIndex", &n->GetMigDeviceHandleByIndex);
    Resolve(lib, "nvmlDeviceIsMigDeviceHandle", &n->IsMigDeviceHandle);
    Resolve(lib, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
            &n->GetDeviceHandleFromMigDeviceHandle);
    Resolve(lib, "nvmlDeviceGetGpuInstanceId", &n->GetGpuInstanceId);
    Resolve(lib, "nvmlDeviceGetComputeInstanceId", &n->GetComputeInstanceId);
    Resolve(lib, "nvmlDeviceGetAttributes_v2", &n->GetAttributes);
    Resolve(lib, "nvmlGpmMigSampleGet", &n->GpmMigSampleGet);
    return n;
  }();
  return *api;
}

std::string FixturePath(const std::string& name) {
  return std::string(GPULET_SOURCE_DIR) + "/sim/fixtures/" + name + ".yaml";
}

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

class NvmlSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpulet-nvml-sim-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    state_path_ = dir_ + "/state.json";
    unsetenv("GPULET_SIM_STATE");
    setenv("GPULET_SIM_FIXTURE", FixturePath("homelab").c_str(), 1);
  }

  void TearDown() override {
    // Leave the process-wide simulator uninitialised for the next test.
    for (int i = 0; i < 16 && Api().Shutdown() == NVML_SUCCESS; ++i) {
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  void UseFixture(const std::string& name) {
    setenv("GPULET_SIM_FIXTURE", FixturePath(name).c_str(), 1);
  }
  void UseState() { setenv("GPULET_SIM_STATE", state_path_.c_str(), 1); }

  void Write(const SimState& state) {
    std::string error;
    ASSERT_TRUE(SaveStateAtomic(state_path_, state, &error)) << error;
  }

  nvmlDevice_t Handle(unsigned index) {
    nvmlDevice_t device = nullptr;
    EXPECT_EQ(Api().GetHandleByIndex(index, &device), NVML_SUCCESS) << "GPU " << index;
    return device;
  }

  // A nvmlGpmMetricsGet_t (13 KiB: on the heap) asking for `ids` between two samples.
  static std::unique_ptr<nvmlGpmMetricsGet_t> MetricsRequest(nvmlGpmSample_t first,
                                                             nvmlGpmSample_t second,
                                                             const std::vector<unsigned>& ids) {
    auto get = std::make_unique<nvmlGpmMetricsGet_t>();
    std::memset(get.get(), 0, sizeof(*get));
    get->version = NVML_GPM_METRICS_GET_VERSION;
    get->numMetrics = static_cast<unsigned>(ids.size());
    get->sample1 = first;
    get->sample2 = second;
    for (size_t i = 0; i < ids.size(); ++i) get->metrics[i].metricId = ids[i];
    return get;
  }

  // Takes two GPM samples of `device` and returns their metrics for `ids`; nullptr (after a
  // test failure) when a call fails.
  std::unique_ptr<nvmlGpmMetricsGet_t> GpmPair(nvmlDevice_t device,
                                               const std::vector<unsigned>& ids) {
    nvmlGpmSample_t first = nullptr, second = nullptr;
    EXPECT_EQ(Api().GpmSampleAlloc(&first), NVML_SUCCESS);
    EXPECT_EQ(Api().GpmSampleAlloc(&second), NVML_SUCCESS);
    std::unique_ptr<nvmlGpmMetricsGet_t> get = MetricsRequest(first, second, ids);
    const bool ok = Api().GpmSampleGet(device, first) == NVML_SUCCESS &&
                    Api().GpmSampleGet(device, second) == NVML_SUCCESS &&
                    Api().GpmMetricsGet(get.get()) == NVML_SUCCESS;
    EXPECT_TRUE(ok) << "a GPM call failed";
    EXPECT_EQ(Api().GpmSampleFree(first), NVML_SUCCESS);
    EXPECT_EQ(Api().GpmSampleFree(second), NVML_SUCCESS);
    if (!ok) return nullptr;
    return get;
  }

  // One nvmlDeviceGetFieldValues entry.
  static nvmlFieldValue_t Field(nvmlDevice_t device, unsigned id, unsigned scope = 0) {
    nvmlFieldValue_t field;
    std::memset(&field, 0, sizeof(field));
    field.fieldId = id;
    field.scopeId = scope;
    EXPECT_EQ(Api().GetFieldValues(device, 1, &field), NVML_SUCCESS);
    return field;
  }

  std::string dir_;
  std::string state_path_;
};

TEST_F(NvmlSimTest, CallsBeforeInitAreUninitialized) {
  unsigned count = 0;
  EXPECT_EQ(Api().GetCount(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(Api().Shutdown(), NVML_ERROR_UNINITIALIZED);
  char buf[80];
  EXPECT_EQ(Api().SystemGetDriverVersion(buf, sizeof(buf)), NVML_ERROR_UNINITIALIZED);
  nvmlEventSet_t set = nullptr;
  EXPECT_EQ(Api().EventSetCreate(&set), NVML_ERROR_UNINITIALIZED);
  EXPECT_STREQ(Api().ErrorString(NVML_ERROR_GPU_IS_LOST), "GPU is lost");
  EXPECT_STREQ(Api().ErrorString(12345), "Unknown Error");
}

TEST_F(NvmlSimTest, InitIsReferenceCounted) {
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  ASSERT_EQ(Api().InitWithFlags(0), NVML_SUCCESS);
  unsigned count = 0;
  EXPECT_EQ(Api().Shutdown(), NVML_SUCCESS);
  EXPECT_EQ(Api().GetCount(&count), NVML_SUCCESS);  // one reference left
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(Api().Shutdown(), NVML_SUCCESS);
  EXPECT_EQ(Api().GetCount(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(Api().Shutdown(), NVML_ERROR_UNINITIALIZED);
}

TEST_F(NvmlSimTest, SystemVersions) {
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  char buf[80];
  ASSERT_EQ(Api().SystemGetDriverVersion(buf, sizeof(buf)), NVML_SUCCESS);
  EXPECT_STREQ(buf, "570.133.20");
  ASSERT_EQ(Api().SystemGetNVMLVersion(buf, sizeof(buf)), NVML_SUCCESS);
  EXPECT_STREQ(buf, "12.570.133.20");
  int cuda = 0;
  ASSERT_EQ(Api().SystemGetCudaDriverVersion(&cuda), NVML_SUCCESS);
  EXPECT_EQ(cuda, 12080);
  EXPECT_EQ(Api().SystemGetDriverVersion(buf, 5), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(Api().SystemGetDriverVersion(nullptr, 80), NVML_ERROR_INVALID_ARGUMENT);
}

// The identity table of sim/fixtures/README.md.
struct Identity {
  const char* fixture;
  unsigned index;
  const char* name;
  const char* bus_id;  // as NVML prints it
  unsigned device_id;
  const char* uuid;
  unsigned long long memory_mib;
  unsigned arch;
  int cc_major, cc_minor;
};

std::vector<Identity> IdentityTable() {
  std::vector<Identity> table = {
      {"homelab", 0, "NVIDIA GeForce RTX 3080", "00000000:01:00.0", 0x2206,
       "GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080", 10240, NVML_DEVICE_ARCH_AMPERE, 8, 6},
      {"homelab", 1, "NVIDIA GeForce RTX 5090", "00000000:02:00.0", 0x2b85,
       "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090", 32607, NVML_DEVICE_ARCH_BLACKWELL, 12, 0},
      {"h200", 0, "NVIDIA H200", "00000000:18:00.0", 0x2335,
       "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200", 143771, NVML_DEVICE_ARCH_HOPPER, 9, 0},
  };
  static const char* const kDgxBus[8] = {"00000000:1B:00.0", "00000000:43:00.0", "00000000:52:00.0",
                                         "00000000:61:00.0", "00000000:9D:00.0", "00000000:C3:00.0",
                                         "00000000:D1:00.0", "00000000:DF:00.0"};
  static std::string dgx_uuids[8];
  for (unsigned i = 0; i < 8; ++i) {
    dgx_uuids[i] = "GPU-5e0c3b7a-6d21-4f8e-a9c4-1b2d3e4f0a0" + std::to_string(i);
    table.push_back({"dgx8", i, "NVIDIA H100 80GB HBM3", kDgxBus[i], 0x2330, dgx_uuids[i].c_str(),
                     81559, NVML_DEVICE_ARCH_HOPPER, 9, 0});
  }
  return table;
}

TEST_F(NvmlSimTest, FixturesMatchTheIdentityTable) {
  // The -mig fixtures are the same machines, partitioned: same identities.
  const std::map<std::string, unsigned> counts = {
      {"homelab", 2}, {"h200", 1}, {"dgx8", 8}, {"h200-mig", 1}, {"dgx8-mig", 8}};
  for (const auto& [fixture, expected_count] : counts) {
    SCOPED_TRACE(fixture);
    UseFixture(fixture);
    ASSERT_EQ(Api().Init(), NVML_SUCCESS);
    unsigned count = 0;
    ASSERT_EQ(Api().GetCount(&count), NVML_SUCCESS);
    EXPECT_EQ(count, expected_count);
    for (const Identity& id : IdentityTable()) {
      if (fixture != id.fixture && fixture != std::string(id.fixture) + "-mig") continue;
      SCOPED_TRACE(id.index);
      nvmlDevice_t device = Handle(id.index);
      char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
      ASSERT_EQ(Api().GetName(device, buf, sizeof(buf)), NVML_SUCCESS);
      EXPECT_STREQ(buf, id.name);
      ASSERT_EQ(Api().GetUUID(device, buf, sizeof(buf)), NVML_SUCCESS);
      EXPECT_STREQ(buf, id.uuid);
      nvmlPciInfo_t pci;
      ASSERT_EQ(Api().GetPciInfo(device, &pci), NVML_SUCCESS);
      EXPECT_STREQ(pci.busId, id.bus_id);
      EXPECT_STREQ(pci.busIdLegacy, std::string(id.bus_id).substr(4).c_str());
      EXPECT_EQ(pci.pciDeviceId, (id.device_id << 16) | 0x10de);
      unsigned value = 0;
      ASSERT_EQ(Api().GetIndex(device, &value), NVML_SUCCESS);
      EXPECT_EQ(value, id.index);
      ASSERT_EQ(Api().GetMinorNumber(device, &value), NVML_SUCCESS);
      EXPECT_EQ(value, id.index);
      ASSERT_EQ(Api().GetArchitecture(device, &value), NVML_SUCCESS);
      EXPECT_EQ(value, id.arch);
      int major = 0, minor = 0;
      ASSERT_EQ(Api().GetCudaComputeCapability(device, &major, &minor), NVML_SUCCESS);
      EXPECT_EQ(major, id.cc_major);
      EXPECT_EQ(minor, id.cc_minor);
      nvmlMemory_t memory;
      ASSERT_EQ(Api().GetMemoryInfo(device, &memory), NVML_SUCCESS);
      EXPECT_EQ(memory.total, id.memory_mib * kMiB);
      EXPECT_EQ(memory.free + memory.used, memory.total);

      nvmlDevice_t by_uuid = nullptr, by_bus = nullptr, by_legacy = nullptr;
      EXPECT_EQ(Api().GetHandleByUUID(id.uuid, &by_uuid), NVML_SUCCESS);
      EXPECT_EQ(Api().GetHandleByPciBusId(id.bus_id, &by_bus), NVML_SUCCESS);
      EXPECT_EQ(Api().GetHandleByPciBusId(pci.busIdLegacy, &by_legacy), NVML_SUCCESS);
      EXPECT_EQ(by_uuid, device);
      EXPECT_EQ(by_bus, device);
      EXPECT_EQ(by_legacy, device);
    }
    ASSERT_EQ(Api().Shutdown(), NVML_SUCCESS);
  }
}

TEST_F(NvmlSimTest, ArgumentErrors) {
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = nullptr;
  EXPECT_EQ(Api().GetHandleByIndex(2, &device), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GetHandleByIndex(0, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &device),
            NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(Api().GetHandleByPciBusId("0000:77:00.0", &device), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(Api().GetHandleByPciBusId("not a bus id", &device), NVML_ERROR_INVALID_ARGUMENT);
  unsigned count = 0;
  EXPECT_EQ(Api().GetCount(nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GetCount(&count), NVML_SUCCESS);

  int not_a_device = 0;
  char buf[96];
  EXPECT_EQ(Api().GetName(reinterpret_cast<nvmlDevice_t>(&not_a_device), buf, sizeof(buf)),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GetName(nullptr, buf, sizeof(buf)), NVML_ERROR_INVALID_ARGUMENT);

  device = Handle(1);
  EXPECT_EQ(Api().GetName(device, buf, 10), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(Api().GetName(device, nullptr, 96), NVML_ERROR_INVALID_ARGUMENT);
  unsigned temp = 0;
  EXPECT_EQ(Api().GetTemperature(device, 7, &temp), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GetTemperature(device, NVML_TEMPERATURE_GPU, nullptr),
            NVML_ERROR_INVALID_ARGUMENT);
  nvmlMemory_v2_t memory{};
  memory.version = 1;
  EXPECT_EQ(Api().GetMemoryInfoV2(device, &memory), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
}

TEST_F(NvmlSimTest, GeForceReportsUnsupportedFeatures) {
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = Handle(1);
  char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE];
  EXPECT_EQ(Api().GetSerial(device, serial, sizeof(serial)), NVML_ERROR_NOT_SUPPORTED);
  int current = 0, pending = 0;
  EXPECT_EQ(Api().GetEccMode(device, &current, &pending), NVML_ERROR_NOT_SUPPORTED);
  unsigned long long ecc = 0;
  EXPECT_EQ(
      Api().GetTotalEccErrors(device, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &ecc),
      NVML_ERROR_NOT_SUPPORTED);
  unsigned a = 0, b = 0, c = 0, d = 0;
  EXPECT_EQ(Api().GetRemappedRows(device, &a, &b, &c, &d), NVML_ERROR_NOT_SUPPORTED);
  unsigned fan = 0;
  EXPECT_EQ(Api().GetFanSpeed(device, &fan), NVML_SUCCESS);
  int brand = -1;
  ASSERT_EQ(Api().GetBrand(device, &brand), NVML_SUCCESS);
  EXPECT_EQ(brand, NVML_BRAND_GEFORCE);

  nvmlFieldValue_t fields[4] = {};
  fields[0].fieldId = NVML_FI_DEV_MEMORY_TEMP;
  fields[1].fieldId = NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION;
  fields[2].fieldId = NVML_FI_DEV_PCIE_REPLAY_COUNTER;
  fields[3].fieldId = 9999;
  ASSERT_EQ(Api().GetFieldValues(device, 4, fields), NVML_SUCCESS);
  EXPECT_EQ(fields[0].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(fields[1].nvmlReturn, NVML_SUCCESS);
  EXPECT_EQ(fields[1].valueType, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG);
  EXPECT_GT(fields[1].value.ullVal, 0u);
  EXPECT_EQ(fields[2].nvmlReturn, NVML_SUCCESS);
  EXPECT_EQ(fields[2].valueType, NVML_VALUE_TYPE_UNSIGNED_INT);
  EXPECT_EQ(fields[3].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
}

TEST_F(NvmlSimTest, DatacenterPartsHaveNoFanButEccAndRemapping) {
  UseFixture("h200");
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = Handle(0);
  unsigned fan = 0;
  EXPECT_EQ(Api().GetFanSpeed(device, &fan), NVML_ERROR_NOT_SUPPORTED);
  int current = 0, pending = 0;
  ASSERT_EQ(Api().GetEccMode(device, &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, NVML_FEATURE_ENABLED);
  unsigned corr = 1, unc = 1, is_pending = 1, failure = 1;
  ASSERT_EQ(Api().GetRemappedRows(device, &corr, &unc, &is_pending, &failure), NVML_SUCCESS);
  EXPECT_EQ(corr + unc + is_pending + failure, 0u);
  nvmlFieldValue_t field{};
  field.fieldId = NVML_FI_DEV_MEMORY_TEMP;
  ASSERT_EQ(Api().GetFieldValues(device, 1, &field), NVML_SUCCESS);
  EXPECT_EQ(field.nvmlReturn, NVML_SUCCESS);
  EXPECT_EQ(field.value.uiVal, 57u);
  char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE];
  EXPECT_EQ(Api().GetSerial(device, serial, sizeof(serial)), NVML_SUCCESS);
  unsigned long long events = 0;
  ASSERT_EQ(Api().GetSupportedEventTypes(device, &events), NVML_SUCCESS);
  EXPECT_NE(events & nvmlEventTypeDoubleBitEccError, 0u);
  EXPECT_NE(events & nvmlEventTypeXidCriticalError, 0u);
}

TEST_F(NvmlSimTest, ProcessesAndMemory) {
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = Handle(1);
  unsigned count = 0;
  ASSERT_EQ(Api().GetComputeProcesses(device, &count, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(count, 2u);
  nvmlProcessInfo_t infos[4];
  count = 4;
  ASSERT_EQ(Api().GetComputeProcesses(device, &count, infos), NVML_SUCCESS);
  ASSERT_EQ(count, 2u);
  EXPECT_EQ(infos[0].pid, 4242u);
  EXPECT_EQ(infos[0].usedGpuMemory, 9216 * kMiB);
  EXPECT_EQ(infos[0].gpuInstanceId, 0xFFFFFFFFu);
  count = 0;
  EXPECT_EQ(Api().GetGraphicsProcesses(device, &count, nullptr), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);

  nvmlMemory_v2_t v2{};
  v2.version = nvmlMemory_v2;
  ASSERT_EQ(Api().GetMemoryInfoV2(device, &v2), NVML_SUCCESS);
  EXPECT_EQ(v2.total, 32607 * kMiB);
  EXPECT_EQ(v2.used, 13364 * kMiB);
  EXPECT_EQ(v2.reserved + v2.used + v2.free, v2.total);
  nvmlMemory_t v1;
  ASSERT_EQ(Api().GetMemoryInfo(device, &v1), NVML_SUCCESS);
  EXPECT_EQ(v1.used, v2.used + v2.reserved);  // v1 "used" includes reserved memory
}

unsigned long long NowMicros() {
  return static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count());
}

// nvmlDeviceGetProcessUtilization: the size protocol, one sample per process with an
// `sm_util` (the fixture's, or the state file's list), stamped now, and NOT_FOUND when there
// is nothing newer than lastSeenTimeStamp.
TEST_F(NvmlSimTest, ProcessUtilizationSamplesProcessesWithSmUtil) {
  const std::string fixture = dir_ + "/util.yaml";
  {
    std::ofstream out(fixture);
    out << "driver: {version: \"570.133.20\", nvml_version: \"12.570.133.20\", "
           "cuda_driver_version: 12080}\n"
           "gpus:\n"
           "  - name: NVIDIA GeForce RTX 5090\n"
           "    uuid: GPU-00000000-0000-4000-8000-000000005090\n"
           "    pci: {bus_id: \"0000:01:00.0\", device_id: 0x2b85}\n"
           "    memory: {total_mib: 32607, used_mib: 13364}\n"
           "    processes:\n"
           "      - {pid: 4242, name: ollama, used_mib: 9216, sm_util: 62}\n"
           "      - {pid: 5120, used_mib: 3850, type: graphics, sm_util: 0}\n"
           "      - {pid: 6001, used_mib: 100}\n"
           "  - name: NVIDIA GeForce RTX 3080\n"
           "    uuid: GPU-00000000-0000-4000-8000-000000003080\n"
           "    pci: {bus_id: \"0000:02:00.0\", device_id: 0x2206}\n"
           "    memory: {total_mib: 10240, used_mib: 530}\n"
           "    processes: [{pid: 3117, used_mib: 412}]\n";
  }
  setenv("GPULET_SIM_FIXTURE", fixture.c_str(), 1);
  UseState();
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = Handle(0);
  const unsigned long long before = NowMicros();

  unsigned count = 0;
  EXPECT_EQ(Api().GetProcessUtilization(device, nullptr, nullptr, 0), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(Api().GetProcessUtilization(device, nullptr, &count, 0), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u);  // pid 6001 has no sm_util: no sample
  nvmlProcessUtilizationSample_t samples[4];
  count = 1;
  ASSERT_EQ(Api().GetProcessUtilization(device, samples, &count, 0), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u);
  count = 4;
  ASSERT_EQ(Api().GetProcessUtilization(device, samples, &count, 0), NVML_SUCCESS);
  ASSERT_EQ(count, 2u);
  EXPECT_EQ(samples[0].pid, 4242u);
  EXPECT_EQ(samples[0].smUtil, 62u);
  EXPECT_EQ(samples[0].memUtil, 0u);
  EXPECT_EQ(samples[1].pid, 5120u);  // graphics processes are sampled too
  EXPECT_EQ(samples[1].smUtil, 0u);
  const unsigned long long stamp = samples[0].timeStamp;
  EXPECT_GE(stamp, before);
  EXPECT_LE(stamp, NowMicros());
  EXPECT_EQ(samples[1].timeStamp, stamp);

  // Nothing newer than a time to come, with or without a buffer.
  count = 4;
  EXPECT_EQ(Api().GetProcessUtilization(device, samples, &count, NowMicros() + 3600000000ULL),
            NVML_ERROR_NOT_FOUND);
  count = 0;
  EXPECT_EQ(Api().GetProcessUtilization(device, nullptr, &count, NowMicros() + 3600000000ULL),
            NVML_ERROR_NOT_FOUND);
  // Newer than the last sample: the next one.
  std::this_thread::sleep_for(milliseconds(2));
  count = 4;
  ASSERT_EQ(Api().GetProcessUtilization(device, samples, &count, stamp), NVML_SUCCESS);
  ASSERT_EQ(count, 2u);
  EXPECT_GT(samples[0].timeStamp, stamp);
  EXPECT_EQ(samples[0].smUtil, 62u);

  // A GPU whose processes have no sm_util has no samples.
  count = 0;
  EXPECT_EQ(Api().GetProcessUtilization(Handle(1), nullptr, &count, 0), NVML_ERROR_NOT_FOUND);

  // The state file's process list, sm_util included, replaces the fixture's.
  SimState state;
  ASSERT_TRUE(SetProcesses(
      &state, "1",
      {{777, "llama-server", 2000, ProcessType::kCompute, std::nullopt, std::nullopt, 100u}}));
  Write(state);
  count = 4;
  ASSERT_EQ(Api().GetProcessUtilization(Handle(1), samples, &count, 0), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(samples[0].pid, 777u);
  EXPECT_EQ(samples[0].smUtil, 100u);
}

TEST_F(NvmlSimTest, EnergyCounterGrowsWithPower) {
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = Handle(1);
  unsigned long long first = 0, second = 0;
  ASSERT_EQ(Api().GetTotalEnergyConsumption(device, &first), NVML_SUCCESS);
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_EQ(Api().GetTotalEnergyConsumption(device, &second), NVML_SUCCESS);
  // 245.8 W for at least 50 ms is at least 12290 mJ.
  EXPECT_GE(second - first, 12000u);
}

TEST_F(NvmlSimTest, StateOverridesLiveValues) {
  UseState();
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = Handle(1);

  SimState state;
  LoadOverride load;
  load.temperature_c = 91;
  load.power_w = 300.5;
  load.utilization_gpu = 100;
  load.memory_temperature_c = 95;  // GeForce has no such sensor: stays unsupported
  ASSERT_TRUE(SetLoad(&state, "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090", load));
  ASSERT_TRUE(SetProcesses(&state, "1",
                           {{777, "llama-server", 20000, ProcessType::kCompute, std::nullopt,
                             std::nullopt, std::nullopt}}));
  Write(state);

  unsigned temp = 0, power = 0;
  ASSERT_EQ(Api().GetTemperature(device, NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
  EXPECT_EQ(temp, 91u);
  ASSERT_EQ(Api().GetPowerUsage(device, &power), NVML_SUCCESS);
  EXPECT_EQ(power, 300500u);
  nvmlUtilization_t util;
  ASSERT_EQ(Api().GetUtilizationRates(device, &util), NVML_SUCCESS);
  EXPECT_EQ(util.gpu, 100u);
  EXPECT_EQ(util.memory, 27u);  // not overridden
  nvmlFieldValue_t field{};
  field.fieldId = NVML_FI_DEV_MEMORY_TEMP;
  ASSERT_EQ(Api().GetFieldValues(device, 1, &field), NVML_SUCCESS);
  EXPECT_EQ(field.nvmlReturn, NVML_ERROR_NOT_SUPPORTED);

  unsigned count = 8;
  nvmlProcessInfo_t infos[8];
  ASSERT_EQ(Api().GetComputeProcesses(device, &count, infos), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(infos[0].pid, 777u);
  nvmlMemory_v2_t memory{};
  memory.version = nvmlMemory_v2;
  ASSERT_EQ(Api().GetMemoryInfoV2(device, &memory), NVML_SUCCESS);
  // The fixture's 298 MiB not owned by processes stays; the processes' share follows the list.
  EXPECT_EQ(memory.used, (298 + 20000) * kMiB);

  // The other GPU is untouched.
  ASSERT_EQ(Api().GetTemperature(Handle(0), NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
  EXPECT_EQ(temp, 47u);
}

TEST_F(NvmlSimTest, LostGpuFailsEveryCallUntilCleared) {
  UseState();
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = Handle(1);
  SimState state;
  ASSERT_TRUE(SetLost(&state, "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090", true));
  Write(state);

  unsigned count = 0;
  ASSERT_EQ(Api().GetCount(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 2u);  // a lost GPU still counts
  nvmlDevice_t again = nullptr;
  EXPECT_EQ(Api().GetHandleByIndex(1, &again), NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(Api().GetHandleByUUID("GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090", &again),
            NVML_ERROR_GPU_IS_LOST);
  char name[96];
  EXPECT_EQ(Api().GetName(device, name, sizeof(name)), NVML_ERROR_GPU_IS_LOST);
  unsigned temp = 0;
  EXPECT_EQ(Api().GetTemperature(device, NVML_TEMPERATURE_GPU, &temp), NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(Api().GetTemperature(Handle(0), NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);

  ASSERT_TRUE(SetLost(&state, "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090", false));
  ASSERT_TRUE(SetResetRequired(&state, "0", true));
  Write(state);
  EXPECT_EQ(Api().GetName(device, name, sizeof(name)), NVML_SUCCESS);
  EXPECT_EQ(Api().GetTemperature(Handle(0), NVML_TEMPERATURE_GPU, &temp),
            NVML_ERROR_RESET_REQUIRED);

  // Deleting the state file clears every fault.
  ASSERT_EQ(unlink(state_path_.c_str()), 0);
  EXPECT_EQ(Api().GetTemperature(Handle(0), NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
}

TEST_F(NvmlSimTest, BrokenStateFileKeepsThePreviousState) {
  UseState();
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = Handle(0);
  SimState state;
  ASSERT_TRUE(SetLost(&state, "0", true));
  Write(state);
  char name[96];
  EXPECT_EQ(Api().GetName(device, name, sizeof(name)), NVML_ERROR_GPU_IS_LOST);
  // Captured from before the rename: the watch thread may read the file first.
  ::testing::internal::CaptureStderr();
  {
    std::ofstream out(state_path_ + ".new");
    out << "{\"gpus\": {\"0\": {\"lsot\": false}}}";
  }
  ASSERT_EQ(rename((state_path_ + ".new").c_str(), state_path_.c_str()), 0);
  EXPECT_EQ(Api().GetName(device, name, sizeof(name)), NVML_ERROR_GPU_IS_LOST);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("lsot"), std::string::npos) << log;
}

TEST_F(NvmlSimTest, HungGpuDoesNotBlockTheOthers) {
  UseState();
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t hung = Handle(0);
  nvmlDevice_t healthy = Handle(1);
  SimState state;
  ASSERT_TRUE(SetHang(&state, "0", 1.0));
  Write(state);

  std::atomic<bool> started{false};
  double hung_seconds = 0;
  nvmlReturn_t hung_ret = NVML_ERROR_UNKNOWN;
  std::thread caller([&] {
    started = true;
    const auto start = SteadyClock::now();
    unsigned temp = 0;
    hung_ret = Api().GetTemperature(hung, NVML_TEMPERATURE_GPU, &temp);
    hung_seconds = SecondsSince(start);
  });
  while (!started) std::this_thread::yield();
  std::this_thread::sleep_for(milliseconds(100));  // let the caller enter its hang
  const auto start = SteadyClock::now();
  unsigned temp = 0;
  EXPECT_EQ(Api().GetTemperature(healthy, NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
  EXPECT_LT(SecondsSince(start), 0.5);
  caller.join();
  EXPECT_EQ(hung_ret, NVML_SUCCESS);
  EXPECT_GE(hung_seconds, 0.9);
}

TEST_F(NvmlSimTest, InjectedXidsReachEventSetsOnce) {
  UseState();
  SimState state;
  ASSERT_TRUE(InjectXid(&state, "1", 13));  // before init: never delivered
  Write(state);
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t geforce = Handle(1);

  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(Api().EventSetCreate(&set), NVML_SUCCESS);
  unsigned long long supported = 0;
  ASSERT_EQ(Api().GetSupportedEventTypes(geforce, &supported), NVML_SUCCESS);
  EXPECT_EQ(supported & nvmlEventTypeDoubleBitEccError, 0u);  // no ECC on GeForce
  EXPECT_EQ(Api().RegisterEvents(
                geforce, nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError, set),
            NVML_ERROR_NOT_SUPPORTED);
  ASSERT_TRUE(InjectXid(&state, "1", 31));  // after init, before registration
  Write(state);
  ASSERT_EQ(Api().RegisterEvents(geforce, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);

  nvmlEventData_t data;
  EXPECT_EQ(Api().EventSetWait(set, &data, 50), NVML_ERROR_TIMEOUT);

  // A waiter blocked in nvmlEventSetWait_v2 wakes soon after another writer injects an XID.
  nvmlReturn_t wait_ret = NVML_ERROR_UNKNOWN;
  double waited = 0;
  std::thread waiter([&] {
    const auto start = SteadyClock::now();
    wait_ret = Api().EventSetWait(set, &data, 5000);
    waited = SecondsSince(start);
  });
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_TRUE(InjectXid(&state, "GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080", 43));  // GPU 0
  ASSERT_TRUE(InjectXid(&state, "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090", 79));
  const auto written = SteadyClock::now();
  Write(state);
  waiter.join();
  ASSERT_EQ(wait_ret, NVML_SUCCESS);
  EXPECT_LT(SecondsSince(written), 1.0);
  EXPECT_LT(waited, 4.0);
  EXPECT_EQ(data.device, geforce);
  EXPECT_EQ(data.eventType, nvmlEventTypeXidCriticalError);
  EXPECT_EQ(data.eventData, 79u);

  // GPU 0 is not registered, and re-reading the file delivers nothing twice.
  EXPECT_EQ(Api().EventSetWait(set, &data, 50), NVML_ERROR_TIMEOUT);
  ASSERT_TRUE(InjectXid(&state, "1", 48));
  Write(state);
  ASSERT_EQ(Api().EventSetWait(set, &data, 2000), NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 48u);
  EXPECT_EQ(Api().EventSetWait(set, &data, 50), NVML_ERROR_TIMEOUT);

  EXPECT_EQ(Api().EventSetWait(set, nullptr, 0), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().EventSetFree(set), NVML_SUCCESS);
  EXPECT_EQ(Api().EventSetWait(set, &data, 0), NVML_ERROR_INVALID_ARGUMENT);
}

// The simulator's "nvml-sim-watch" threads (tids), from /proc.
std::vector<std::string> WatchThreads() {
  std::vector<std::string> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "comm");
    std::string name;
    std::getline(in, name);
    if (name == "nvml-sim-watch") out.push_back(task.path().filename().string());
  }
  return out;
}

// Like NVML's wait, which sleeps in the driver, an idle nvmlEventSetWait_v2 does not wake to
// look at the state file: the watch thread tells it of changes. The thread blocks every
// signal even when nvmlInit is called with SIGTERM unblocked (gpulet's discovery does), and
// it ends with the last nvmlShutdown.
TEST_F(NvmlSimTest, AnIdleEventWaitSleepsUntilTheStateFileChanges) {
  UseState();
  Write(SimState());
  // Past the window in which stat() cannot be trusted, so nothing needs polling.
  std::this_thread::sleep_for(milliseconds(200));
  sigset_t term, caller;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &term, &caller);
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  pthread_sigmask(SIG_SETMASK, &caller, nullptr);
  const std::vector<std::string> watch = WatchThreads();
  ASSERT_EQ(watch.size(), 1u);
  {
    std::ifstream in("/proc/self/task/" + watch[0] + "/status");
    std::string line, blocked;
    while (std::getline(in, line)) {
      if (line.rfind("SigBlk:", 0) == 0) blocked = line.substr(7);
    }
    unsigned long long mask = std::stoull(blocked, nullptr, 16);
    EXPECT_NE(mask & (1ULL << (SIGTERM - 1)), 0u) << blocked;
    EXPECT_NE(mask & (1ULL << (SIGINT - 1)), 0u) << blocked;
  }

  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(Api().EventSetCreate(&set), NVML_SUCCESS);
  ASSERT_EQ(Api().RegisterEvents(Handle(1), nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  // A second of waiting: polling every 10 ms would switch away about 100 times.
  rusage before{}, after{};
  nvmlEventData_t data;
  ASSERT_EQ(getrusage(RUSAGE_THREAD, &before), 0);
  EXPECT_EQ(Api().EventSetWait(set, &data, 1000), NVML_ERROR_TIMEOUT);
  ASSERT_EQ(getrusage(RUSAGE_THREAD, &after), 0);
  EXPECT_LT(after.ru_nvcsw - before.ru_nvcsw, 10) << "voluntary context switches in 1 s";

  // A change still wakes it at once.
  nvmlReturn_t wait_ret = NVML_ERROR_UNKNOWN;
  std::thread waiter([&] { wait_ret = Api().EventSetWait(set, &data, 10000); });
  std::this_thread::sleep_for(milliseconds(100));
  SimState state;
  ASSERT_TRUE(InjectXid(&state, "1", 79));
  const auto written = SteadyClock::now();
  Write(state);
  waiter.join();
  ASSERT_EQ(wait_ret, NVML_SUCCESS);
  EXPECT_LT(SecondsSince(written), 1.0);
  EXPECT_EQ(data.eventData, 79u);

  EXPECT_EQ(Api().EventSetFree(set), NVML_SUCCESS);
  ASSERT_EQ(Api().Shutdown(), NVML_SUCCESS);
  EXPECT_TRUE(WatchThreads().empty());
}

TEST_F(NvmlSimTest, EventWaitReportsALostGpu) {
  UseState();
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(Api().EventSetCreate(&set), NVML_SUCCESS);
  ASSERT_EQ(Api().RegisterEvents(Handle(0), nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  SimState state;
  ASSERT_TRUE(InjectXid(&state, "0", 79));
  ASSERT_TRUE(SetLost(&state, "0", true));
  Write(state);
  nvmlEventData_t data;
  // The XID that announced the loss comes first, then the wait itself fails.
  ASSERT_EQ(Api().EventSetWait(set, &data, 1000), NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 79u);
  EXPECT_EQ(Api().EventSetWait(set, &data, 1000), NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(Api().EventSetFree(set), NVML_SUCCESS);
}

// A card that fails after every reboot (RebootNode) answers normally at first; when its time
// comes, its XID reaches a waiting event set and every call on it fails as lost.
TEST_F(NvmlSimTest, AFaultDueAfterARebootComesAtItsTime) {
  UseState();
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(Api().EventSetCreate(&set), NVML_SUCCESS);
  ASSERT_EQ(Api().RegisterEvents(Handle(1), nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  SimState state;
  ASSERT_TRUE(InjectXid(&state, "1", 79));
  ASSERT_TRUE(SetFailsAfterReboot(&state, "1", 0.4));
  Write(state);
  nvmlEventData_t data;
  ASSERT_EQ(Api().EventSetWait(set, &data, 1000), NVML_SUCCESS);  // the first fault's XID
  RebootNode(&state);
  Write(state);
  const auto rebooted = SteadyClock::now();
  const nvmlDevice_t card = Handle(1);
  char name[96];
  EXPECT_EQ(Api().GetName(card, name, sizeof(name)), NVML_SUCCESS);
  ASSERT_EQ(Api().EventSetWait(set, &data, 3000), NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 79u);
  EXPECT_GE(SteadyClock::now() - rebooted, milliseconds(300));
  EXPECT_EQ(Api().GetName(card, name, sizeof(name)), NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(Api().GetName(Handle(0), name, sizeof(name)), NVML_SUCCESS);
  EXPECT_EQ(Api().EventSetFree(set), NVML_SUCCESS);
}

TEST_F(NvmlSimTest, DriverNotLoaded) {
  UseState();
  SimState state;
  SetDriverNotLoaded(&state, true);
  Write(state);
  EXPECT_EQ(Api().Init(), NVML_ERROR_DRIVER_NOT_LOADED);
  unsigned count = 0;
  EXPECT_EQ(Api().GetCount(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(Api().Shutdown(), NVML_ERROR_UNINITIALIZED);

  SetDriverNotLoaded(&state, false);
  Write(state);
  EXPECT_EQ(Api().Init(), NVML_SUCCESS);
}

TEST_F(NvmlSimTest, InitHang) {
  UseState();
  SimState state;
  SetInitHang(&state, 0.3);
  Write(state);
  const auto start = SteadyClock::now();
  EXPECT_EQ(Api().Init(), NVML_SUCCESS);
  EXPECT_GE(SecondsSince(start), 0.29);
}

TEST_F(NvmlSimTest, GpmSupportFollowsTheFixture) {
  UseFixture("h200");
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlGpmSupport_t support{};
  support.version = NVML_GPM_SUPPORT_VERSION;
  ASSERT_EQ(Api().GpmQueryDeviceSupport(Handle(0), &support), NVML_SUCCESS);
  EXPECT_EQ(support.isSupportedDevice, 1u);
  support.version = 2;
  EXPECT_EQ(Api().GpmQueryDeviceSupport(Handle(0), &support), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  EXPECT_EQ(Api().GpmQueryDeviceSupport(Handle(0), nullptr), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(Api().Shutdown(), NVML_SUCCESS);

  // GeForce (Ampere and consumer Blackwell alike) has no GPM.
  UseFixture("homelab");
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  for (unsigned index : {0u, 1u}) {
    support.version = NVML_GPM_SUPPORT_VERSION;
    support.isSupportedDevice = 7;
    ASSERT_EQ(Api().GpmQueryDeviceSupport(Handle(index), &support), NVML_SUCCESS);
    EXPECT_EQ(support.isSupportedDevice, 0u) << "GPU " << index;
  }
  nvmlGpmSample_t sample = nullptr;
  ASSERT_EQ(Api().GpmSampleAlloc(&sample), NVML_SUCCESS);
  EXPECT_EQ(Api().GpmSampleGet(Handle(1), sample), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Api().GpmSampleFree(sample), NVML_SUCCESS);
}

TEST_F(NvmlSimTest, GpmPairReturnsTheFixtureValues) {
  UseFixture("h200");
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  const std::vector<unsigned> ids = {NVML_GPM_METRIC_SM_UTIL,
                                     NVML_GPM_METRIC_ANY_TENSOR_UTIL,
                                     NVML_GPM_METRIC_DRAM_BW_UTIL,
                                     NVML_GPM_METRIC_PCIE_RX_PER_SEC,
                                     NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
                                     NVML_GPM_METRIC_HMMA_TENSOR_UTIL,  // not in the fixture
                                     999};                              // not a metric at all
  std::unique_ptr<nvmlGpmMetricsGet_t> get = GpmPair(Handle(0), ids);
  ASSERT_NE(get, nullptr);
  const nvmlGpmMetric_t* m = get->metrics;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(m[i].nvmlReturn, NVML_SUCCESS) << ids[i];
  EXPECT_DOUBLE_EQ(m[0].value, 69.2);
  EXPECT_DOUBLE_EQ(m[1].value, 37.6);
  EXPECT_DOUBLE_EQ(m[2].value, 56.3);
  EXPECT_DOUBLE_EQ(m[3].value, 1190);
  EXPECT_DOUBLE_EQ(m[4].value, 0);
  EXPECT_EQ(m[0].metricId, NVML_GPM_METRIC_SM_UTIL);  // ids are left as asked
  EXPECT_STREQ(m[0].metricInfo.shortName, "sm_util");
  EXPECT_STREQ(m[0].metricInfo.unit, "%");
  EXPECT_STREQ(m[3].metricInfo.unit, "MiB/s");
  EXPECT_EQ(m[5].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(m[6].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(m[6].metricInfo.shortName, nullptr);
}

TEST_F(NvmlSimTest, GpmOverridesChangeTheNextPair) {
  UseState();
  UseFixture("h200");
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = Handle(0);
  nvmlGpmSample_t first = nullptr, second = nullptr;
  ASSERT_EQ(Api().GpmSampleAlloc(&first), NVML_SUCCESS);
  ASSERT_EQ(Api().GpmSampleAlloc(&second), NVML_SUCCESS);
  ASSERT_EQ(Api().GpmSampleGet(device, first), NVML_SUCCESS);

  SimState state;
  LoadOverride load;
  load.gpm["any_tensor_util"] = 50;
  load.gpm["pcie_tx_mib_s"] = 4096;
  load.gpm["hmma_tensor_util"] = 20;  // the fixture lacks it: stays unsupported
  ASSERT_TRUE(SetLoad(&state, "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200", load));
  Write(state);

  // The metrics are those of the later sample, taken after the override.
  const std::vector<unsigned> ids = {NVML_GPM_METRIC_ANY_TENSOR_UTIL,
                                     NVML_GPM_METRIC_PCIE_TX_PER_SEC, NVML_GPM_METRIC_SM_UTIL,
                                     NVML_GPM_METRIC_HMMA_TENSOR_UTIL};
  ASSERT_EQ(Api().GpmSampleGet(device, second), NVML_SUCCESS);
  std::unique_ptr<nvmlGpmMetricsGet_t> get = MetricsRequest(first, second, ids);
  ASSERT_EQ(Api().GpmMetricsGet(get.get()), NVML_SUCCESS);
  EXPECT_DOUBLE_EQ(get->metrics[0].value, 50);
  EXPECT_DOUBLE_EQ(get->metrics[1].value, 4096);
  EXPECT_DOUBLE_EQ(get->metrics[2].value, 69.2);  // not overridden
  EXPECT_EQ(get->metrics[3].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);

  // Samples are reusable: the next pair (second, first) sees the cleared state.
  ASSERT_EQ(unlink(state_path_.c_str()), 0);
  ASSERT_EQ(Api().GpmSampleGet(device, first), NVML_SUCCESS);
  get = MetricsRequest(second, first, ids);
  ASSERT_EQ(Api().GpmMetricsGet(get.get()), NVML_SUCCESS);
  EXPECT_DOUBLE_EQ(get->metrics[0].value, 37.6);
  EXPECT_EQ(Api().GpmSampleFree(first), NVML_SUCCESS);
  EXPECT_EQ(Api().GpmSampleFree(second), NVML_SUCCESS);
}

TEST_F(NvmlSimTest, GpmRejectsInvalidSamples) {
  UseState();
  UseFixture("dgx8");
  nvmlGpmSample_t early = nullptr;
  EXPECT_EQ(Api().GpmSampleAlloc(&early), NVML_ERROR_UNINITIALIZED);
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  EXPECT_EQ(Api().GpmSampleAlloc(nullptr), NVML_ERROR_INVALID_ARGUMENT);
  nvmlGpmSample_t a = nullptr, b = nullptr, c = nullptr;
  ASSERT_EQ(Api().GpmSampleAlloc(&a), NVML_SUCCESS);
  ASSERT_EQ(Api().GpmSampleAlloc(&b), NVML_SUCCESS);
  ASSERT_EQ(Api().GpmSampleAlloc(&c), NVML_SUCCESS);
  EXPECT_NE(a, b);
  const std::vector<unsigned> ids = {NVML_GPM_METRIC_SM_UTIL};

  // A pointer that was never allocated is refused, not dereferenced.
  int not_a_sample = 0;
  auto* bogus = reinterpret_cast<nvmlGpmSample_t>(&not_a_sample);
  EXPECT_EQ(Api().GpmSampleGet(Handle(0), bogus), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GpmSampleGet(Handle(0), nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GpmSampleFree(bogus), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(Api().GpmSampleGet(Handle(0), a), NVML_SUCCESS);
  EXPECT_EQ(Api().GpmMetricsGet(MetricsRequest(a, bogus, ids).get()), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GpmMetricsGet(nullptr), NVML_ERROR_INVALID_ARGUMENT);

  // b is allocated but not filled yet.
  EXPECT_EQ(Api().GpmMetricsGet(MetricsRequest(a, b, ids).get()), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(Api().GpmSampleGet(Handle(0), b), NVML_SUCCESS);
  EXPECT_EQ(Api().GpmMetricsGet(MetricsRequest(a, b, ids).get()), NVML_SUCCESS);
  // Reversed, the same sample twice, and samples of two GPUs.
  EXPECT_EQ(Api().GpmMetricsGet(MetricsRequest(b, a, ids).get()), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GpmMetricsGet(MetricsRequest(a, a, ids).get()), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(Api().GpmSampleGet(Handle(1), c), NVML_SUCCESS);
  EXPECT_EQ(Api().GpmMetricsGet(MetricsRequest(a, c, ids).get()), NVML_ERROR_INVALID_ARGUMENT);

  std::unique_ptr<nvmlGpmMetricsGet_t> get = MetricsRequest(a, b, ids);
  get->version = 2;
  EXPECT_EQ(Api().GpmMetricsGet(get.get()), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  get->version = NVML_GPM_METRICS_GET_VERSION;
  get->numMetrics = NVML_GPM_METRIC_MAX + 1;
  EXPECT_EQ(Api().GpmMetricsGet(get.get()), NVML_ERROR_INVALID_ARGUMENT);

  // A lost GPU fails the sample like any other call on it.
  nvmlDevice_t lost = Handle(1);
  SimState state;
  ASSERT_TRUE(SetLost(&state, "1", true));
  Write(state);
  EXPECT_EQ(Api().GpmSampleGet(lost, c), NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(Api().GpmSampleGet(Handle(0), c), NVML_SUCCESS);

  // After nvmlShutdown the samples no longer describe a GPU, but can still be freed (once).
  ASSERT_EQ(Api().Shutdown(), NVML_SUCCESS);
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  EXPECT_EQ(Api().GpmMetricsGet(MetricsRequest(a, b, ids).get()), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(Api().Shutdown(), NVML_SUCCESS);
  EXPECT_EQ(Api().GpmSampleFree(a), NVML_SUCCESS);
  EXPECT_EQ(Api().GpmSampleFree(a), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GpmSampleFree(b), NVML_SUCCESS);
  EXPECT_EQ(Api().GpmSampleFree(c), NVML_SUCCESS);
}

TEST_F(NvmlSimTest, Dgx8HasEighteenNvLinksToNvSwitches) {
  UseFixture("dgx8");
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = Handle(0);
  nvmlFieldValue_t count = Field(device, NVML_FI_DEV_NVLINK_LINK_COUNT);
  ASSERT_EQ(count.nvmlReturn, NVML_SUCCESS);
  EXPECT_EQ(count.valueType, NVML_VALUE_TYPE_UNSIGNED_INT);
  EXPECT_EQ(count.value.uiVal, 18u);
  for (unsigned link = 0; link < 18; ++link) {
    int active = -1, remote = -1;
    ASSERT_EQ(Api().GetNvLinkState(device, link, &active), NVML_SUCCESS) << link;
    EXPECT_EQ(active, NVML_FEATURE_ENABLED);
    ASSERT_EQ(Api().GetNvLinkRemoteDeviceType(device, link, &remote), NVML_SUCCESS);
    EXPECT_EQ(remote, NVML_NVLINK_DEVICE_TYPE_SWITCH);
    for (int counter = NVML_NVLINK_ERROR_DL_REPLAY; counter <= NVML_NVLINK_ERROR_DL_CRC_DATA;
         ++counter) {
      unsigned long long value = 99;
      ASSERT_EQ(Api().GetNvLinkErrorCounter(device, link, counter, &value), NVML_SUCCESS);
      EXPECT_EQ(value, 0u);
    }
  }
  int active = 0;
  unsigned long long value = 0;
  EXPECT_EQ(Api().GetNvLinkState(device, 18, &active), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GetNvLinkState(device, 0, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GetNvLinkErrorCounter(device, 0, 4, &value), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GetNvLinkErrorCounter(device, 0, -1, &value), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GetNvLinkRemoteDeviceType(device, 18, &active), NVML_ERROR_INVALID_ARGUMENT);

  // The data counters start at the fixture's values and grow at the GPM NVLink rate
  // (141312 MiB/s out of GPU 0); a link's counter is its share of the total.
  const nvmlFieldValue_t tx = Field(device, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, UINT_MAX);
  ASSERT_EQ(tx.nvmlReturn, NVML_SUCCESS);
  EXPECT_EQ(tx.valueType, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG);
  EXPECT_GE(tx.value.ullVal, 50009525452800u);
  const nvmlFieldValue_t rx = Field(device, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, UINT_MAX);
  ASSERT_EQ(rx.nvmlReturn, NVML_SUCCESS);
  EXPECT_GE(rx.value.ullVal, 49964226969600u);
  std::this_thread::sleep_for(milliseconds(50));
  nvmlFieldValue_t fields[3];
  std::memset(fields, 0, sizeof(fields));
  fields[0].fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
  fields[0].scopeId = UINT_MAX;
  fields[1].fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
  fields[1].scopeId = 17;
  fields[2].fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
  fields[2].scopeId = 18;  // no such link
  ASSERT_EQ(Api().GetFieldValues(device, 3, fields), NVML_SUCCESS);
  ASSERT_EQ(fields[0].nvmlReturn, NVML_SUCCESS);
  // 141312 MiB/s for at least 50 ms is at least 7235174 KiB.
  EXPECT_GE(fields[0].value.ullVal - tx.value.ullVal, 7235174u);
  ASSERT_EQ(fields[1].nvmlReturn, NVML_SUCCESS);
  EXPECT_EQ(fields[1].value.ullVal, fields[0].value.ullVal / 18);
  EXPECT_EQ(fields[2].nvmlReturn, NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlSimTest, GpusWithoutNvLinkSayNotSupported) {
  for (const char* fixture : {"homelab"}) {
    SCOPED_TRACE(fixture);
    UseFixture(fixture);
    ASSERT_EQ(Api().Init(), NVML_SUCCESS);
    nvmlDevice_t device = Handle(0);
    EXPECT_EQ(Field(device, NVML_FI_DEV_NVLINK_LINK_COUNT).nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(Field(device, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, UINT_MAX).nvmlReturn,
              NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(Field(device, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0).nvmlReturn,
              NVML_ERROR_NOT_SUPPORTED);
    int value = 0;
    unsigned long long count = 0;
    EXPECT_EQ(Api().GetNvLinkState(device, 0, &value), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(Api().GetNvLinkRemoteDeviceType(device, 0, &value), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(Api().GetNvLinkErrorCounter(device, 0, NVML_NVLINK_ERROR_DL_CRC_FLIT, &count),
              NVML_ERROR_NOT_SUPPORTED);
    ASSERT_EQ(Api().Shutdown(), NVML_SUCCESS);
  }
}

// The h200 fixture's SXM GPU is alone in a VM: NVML lists its 18 links, all inactive, with the
// remote end unknown and the data counters at zero (`down: all` in the fixture).
TEST_F(NvmlSimTest, H200AloneInAVmHasEighteenInactiveLinks) {
  UseFixture("h200");
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = Handle(0);
  nvmlFieldValue_t count = Field(device, NVML_FI_DEV_NVLINK_LINK_COUNT);
  ASSERT_EQ(count.nvmlReturn, NVML_SUCCESS);
  EXPECT_EQ(count.value.uiVal, 18u);
  nvmlFieldValue_t tx = Field(device, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, UINT_MAX);
  ASSERT_EQ(tx.nvmlReturn, NVML_SUCCESS);
  EXPECT_EQ(tx.value.ullVal, 0u);
  for (unsigned link = 0; link < 18; ++link) {
    int active = -1, remote = -1;
    ASSERT_EQ(Api().GetNvLinkState(device, link, &active), NVML_SUCCESS);
    EXPECT_EQ(active, NVML_FEATURE_DISABLED) << link;
    ASSERT_EQ(Api().GetNvLinkRemoteDeviceType(device, link, &remote), NVML_SUCCESS);
    EXPECT_EQ(remote, NVML_NVLINK_DEVICE_TYPE_UNKNOWN);
  }
  int active = 0;
  EXPECT_EQ(Api().GetNvLinkState(device, 18, &active), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(Api().Shutdown(), NVML_SUCCESS);
}

TEST_F(NvmlSimTest, StateForcesNvLinksDownAndSetsTheirCounters) {
  UseState();
  UseFixture("dgx8");
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = Handle(2);
  SimState state;
  NvLinkCounters errors;
  errors[NVML_NVLINK_ERROR_DL_CRC_FLIT] = 12;
  errors[NVML_NVLINK_ERROR_DL_REPLAY] = 4;
  ASSERT_TRUE(SetNvLink(&state, "GPU-5e0c3b7a-6d21-4f8e-a9c4-1b2d3e4f0a02", 3, true, errors));
  Write(state);

  int active = -1;
  ASSERT_EQ(Api().GetNvLinkState(device, 3, &active), NVML_SUCCESS);
  EXPECT_EQ(active, NVML_FEATURE_DISABLED);
  ASSERT_EQ(Api().GetNvLinkState(device, 4, &active), NVML_SUCCESS);
  EXPECT_EQ(active, NVML_FEATURE_ENABLED);
  ASSERT_EQ(Api().GetNvLinkState(Handle(1), 3, &active), NVML_SUCCESS);  // another GPU
  EXPECT_EQ(active, NVML_FEATURE_ENABLED);
  auto counter = [&](unsigned link, int which) {
    unsigned long long value = 99;
    EXPECT_EQ(Api().GetNvLinkErrorCounter(device, link, which, &value), NVML_SUCCESS);
    return value;
  };
  EXPECT_EQ(counter(3, NVML_NVLINK_ERROR_DL_CRC_FLIT), 12u);
  EXPECT_EQ(counter(3, NVML_NVLINK_ERROR_DL_REPLAY), 4u);
  EXPECT_EQ(counter(3, NVML_NVLINK_ERROR_DL_RECOVERY), 0u);  // the fixture's
  EXPECT_EQ(counter(4, NVML_NVLINK_ERROR_DL_CRC_FLIT), 0u);
  EXPECT_EQ(Field(device, NVML_FI_DEV_NVLINK_LINK_COUNT).value.uiVal, 18u);  // still there

  // Back up by index key; the counters stay (they count since the driver loaded).
  ASSERT_TRUE(SetNvLink(&state, "GPU-5e0c3b7a-6d21-4f8e-a9c4-1b2d3e4f0a02", 3, false, {}));
  Write(state);
  ASSERT_EQ(Api().GetNvLinkState(device, 3, &active), NVML_SUCCESS);
  EXPECT_EQ(active, NVML_FEATURE_ENABLED);
  EXPECT_EQ(counter(3, NVML_NVLINK_ERROR_DL_CRC_FLIT), 12u);
}

TEST_F(NvmlSimTest, NvLinkCountersFollowTheGpmRateOverride) {
  UseState();
  UseFixture("dgx8");
  SimState state;
  LoadOverride load;
  load.gpm["nvlink_total_rx_mib_s"] = 0;  // an idle fabric: the counter stops
  ASSERT_TRUE(SetLoad(&state, "5", load));
  Write(state);
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t device = Handle(5);
  const unsigned long long before =
      Field(device, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, UINT_MAX).value.ullVal;
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(Field(device, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, UINT_MAX).value.ullVal, before);
}

TEST_F(NvmlSimTest, MigModeAndVirtualization) {
  struct Case {
    const char* fixture;
    unsigned index;
    bool mig_capable;
    int virtualization;
  } cases[] = {
      {"h200", 0, true, NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH},
      {"dgx8", 7, true, NVML_GPU_VIRTUALIZATION_MODE_NONE},
      {"homelab", 0, false, NVML_GPU_VIRTUALIZATION_MODE_NONE},
      {"homelab", 1, false, NVML_GPU_VIRTUALIZATION_MODE_NONE},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.fixture) + " GPU " + std::to_string(c.index));
    UseFixture(c.fixture);
    ASSERT_EQ(Api().Init(), NVML_SUCCESS);
    nvmlDevice_t device = Handle(c.index);
    unsigned current = 9, pending = 9;
    if (c.mig_capable) {
      ASSERT_EQ(Api().GetMigMode(device, &current, &pending), NVML_SUCCESS);
      EXPECT_EQ(current, 0u);  // NVML_DEVICE_MIG_DISABLE
      EXPECT_EQ(pending, 0u);
    } else {
      EXPECT_EQ(Api().GetMigMode(device, &current, &pending), NVML_ERROR_NOT_SUPPORTED);
    }
    EXPECT_EQ(Api().GetMigMode(device, nullptr, &pending), NVML_ERROR_INVALID_ARGUMENT);
    int mode = -1;
    ASSERT_EQ(Api().GetVirtualizationMode(device, &mode), NVML_SUCCESS);
    EXPECT_EQ(mode, c.virtualization);
    EXPECT_EQ(Api().GetVirtualizationMode(device, nullptr), NVML_ERROR_INVALID_ARGUMENT);
    ASSERT_EQ(Api().Shutdown(), NVML_SUCCESS);
  }
}

TEST_F(NvmlSimTest, BadGpmNvLinkMigAndProcessFixturesFailInit) {
  const std::string bad = dir_ + "/bad.yaml";
  struct Case {
    const char* gpu_keys;
    const char* expected;  // in the one-line error
  } cases[] = {
      {"gpm: {sm_util: 120}", "gpus[0].gpm.sm_util: expected a percentage from 0 to 100"},
      {"gpm: {pcie_tx_mib_s: -1}", "gpus[0].gpm.pcie_tx_mib_s: expected a rate in MiB/s"},
      {"gpm: {sm_utilization: 5}", "unknown key \"sm_utilization\""},
      {"gpm: {sm_util: lots}", "gpus[0].gpm.sm_util: expected a number"},
      {"nvlink: {links: 19}", "gpus[0].nvlink.links: expected an integer from 0 to 18"},
      {"nvlink: {remote: nvswitch}", "gpus[0].nvlink.links: expected 1 to 18"},
      {"nvlink: {links: 4, remote: cpu}", "gpus[0].nvlink.remote: \"cpu\" is not one of"},
      {"nvlink: {links: 4, errors: {crc: 1}}", "gpus[0].nvlink.errors: unknown key \"crc\""},
      {"nvlink: {links: 4, down: [4]}", "gpus[0].nvlink.down: expected link numbers 0 to 3"},
      {"nvlink: {links: 4, down: some}", "gpus[0].nvlink.down: expected `all` or a list"},
      {"mig: {current: on}", "gpus[0].mig.current: \"on\" is not one of"},
      {"virtualization: vm", "gpus[0].virtualization: \"vm\" is not one of"},
      {"processes: [{pid: 1, used_mib: 1, sm_util: 101}]", "gpus[0].processes[0].sm_util"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.gpu_keys);
    {
      std::ofstream out(bad);
      out << "driver: {version: \"1\", nvml_version: \"1\", cuda_driver_version: 12080}\n"
             "gpus:\n"
             "  - {name: x, uuid: GPU-x, pci: {bus_id: \"0000:01:00.0\", device_id: 0x2330},\n"
             "     memory: {total_mib: 1024}, "
          << c.gpu_keys << "}\n";
    }
    setenv("GPULET_SIM_FIXTURE", bad.c_str(), 1);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(Api().Init(), NVML_ERROR_UNKNOWN);
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find(c.expected), std::string::npos) << log;
  }
}

TEST_F(NvmlSimTest, BadFixtureFailsInitWithOneLine) {
  const std::string bad = dir_ + "/bad.yaml";
  {
    std::ofstream out(bad);
    out << "driver: {version: \"1\", nvml_version: \"1\", cuda_driver_version: 12080}\n"
           "gpus:\n"
           "  - name: x\n"
           "    uuid: GPU-x\n"
           "    colour: green\n";
  }
  setenv("GPULET_SIM_FIXTURE", bad.c_str(), 1);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(Api().Init(), NVML_ERROR_UNKNOWN);
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find(bad), std::string::npos) << log;
  EXPECT_NE(log.find("colour"), std::string::npos) << log;
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;

  {
    std::ofstream out(bad);
    out << "gpus: [unterminated\n";
  }
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(Api().Init(), NVML_ERROR_UNKNOWN);
  log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find(bad), std::string::npos) << log;

  setenv("GPULET_SIM_FIXTURE", (dir_ + "/missing.yaml").c_str(), 1);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(Api().Init(), NVML_ERROR_UNKNOWN);
  log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("missing.yaml"), std::string::npos) << log;
}

// --- MIG --------------------------------------------------------------------------------

// The MIG devices of `parent`, in nvmlDeviceGetMigDeviceHandleByIndex order.
std::vector<nvmlDevice_t> MigDevices(nvmlDevice_t parent) {
  std::vector<nvmlDevice_t> devices;
  for (unsigned i = 0;; ++i) {
    nvmlDevice_t mig = nullptr;
    const nvmlReturn_t ret = Api().GetMigDeviceHandleByIndex(parent, i, &mig);
    if (ret == NVML_ERROR_NOT_FOUND) break;
    EXPECT_EQ(ret, NVML_SUCCESS) << "MIG device " << i;
    if (ret != NVML_SUCCESS || i > 16) break;
    devices.push_back(mig);
  }
  return devices;
}

std::string Uuid(nvmlDevice_t device) {
  char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  EXPECT_EQ(Api().GetUUID(device, buf, sizeof(buf)), NVML_SUCCESS);
  return buf;
}

TEST_F(NvmlSimTest, H200MigDevicesFollowTheFixtureLayout) {
  UseFixture("h200-mig");
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t gpu = Handle(0);
  unsigned current = 9, pending = 9, value = 0;
  ASSERT_EQ(Api().GetMigMode(gpu, &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, NVML_DEVICE_MIG_ENABLE);
  EXPECT_EQ(pending, NVML_DEVICE_MIG_ENABLE);
  ASSERT_EQ(Api().GetMaxMigDeviceCount(gpu, &value), NVML_SUCCESS);
  EXPECT_EQ(value, 7u);
  ASSERT_EQ(Api().IsMigDeviceHandle(gpu, &value), NVML_SUCCESS);
  EXPECT_EQ(value, 0u);
  EXPECT_EQ(Api().GetGpuInstanceId(gpu, &value), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GetComputeInstanceId(gpu, &value), NVML_ERROR_INVALID_ARGUMENT);
  nvmlDevice_t parent = nullptr;
  EXPECT_EQ(Api().GetDeviceHandleFromMigDeviceHandle(gpu, &parent), NVML_ERROR_INVALID_ARGUMENT);
  nvmlUtilization_t utilization;
  EXPECT_EQ(Api().GetUtilizationRates(gpu, &utilization), NVML_ERROR_NOT_SUPPORTED);

  nvmlDeviceAttributes_t attributes;
  ASSERT_EQ(Api().GetAttributes(gpu, &attributes), NVML_SUCCESS);
  EXPECT_EQ(attributes.gpuInstanceSliceCount, 7u);
  EXPECT_EQ(attributes.computeInstanceSliceCount, 7u);
  EXPECT_EQ(attributes.memorySizeMB, 143771u);
  EXPECT_EQ(attributes.multiprocessorCount, 132u);

  struct Expected {
    unsigned gi;
    const char* profile;
    unsigned slices;
    unsigned long long memory_mib;
    unsigned sms;
    unsigned long long used_mib;  // processes + the 13 MiB instance overhead
  } expected[] = {
      {1, "3g.71gb", 3, 71680, 60, 64500 + 13},
      {2, "2g.35gb", 2, 35840, 32, 13},
      {3, "1g.18gb", 1, 17920, 16, 6144 + 13},
      {4, "1g.18gb", 1, 17920, 16, 13},
  };
  const std::vector<nvmlDevice_t> migs = MigDevices(gpu);
  ASSERT_EQ(migs.size(), 4u);
  for (size_t i = 0; i < migs.size(); ++i) {
    const Expected& e = expected[i];
    SCOPED_TRACE(e.profile);
    nvmlDevice_t mig = migs[i];
    EXPECT_EQ(Uuid(mig), "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d020" + std::to_string(e.gi));
    ASSERT_EQ(Api().IsMigDeviceHandle(mig, &value), NVML_SUCCESS);
    EXPECT_EQ(value, 1u);
    ASSERT_EQ(Api().GetGpuInstanceId(mig, &value), NVML_SUCCESS);
    EXPECT_EQ(value, e.gi);
    ASSERT_EQ(Api().GetComputeInstanceId(mig, &value), NVML_SUCCESS);
    EXPECT_EQ(value, 0u);
    ASSERT_EQ(Api().GetDeviceHandleFromMigDeviceHandle(mig, &parent), NVML_SUCCESS);
    EXPECT_EQ(parent, gpu);
    ASSERT_EQ(Api().GetAttributes(mig, &attributes), NVML_SUCCESS);
    EXPECT_EQ(attributes.gpuInstanceSliceCount, e.slices);
    EXPECT_EQ(attributes.computeInstanceSliceCount, e.slices);
    EXPECT_EQ(attributes.memorySizeMB, e.memory_mib);
    EXPECT_EQ(attributes.multiprocessorCount, e.sms);
    EXPECT_EQ(attributes.sharedCopyEngineCount, e.slices);
    nvmlMemory_t memory;
    ASSERT_EQ(Api().GetMemoryInfo(mig, &memory), NVML_SUCCESS);
    EXPECT_EQ(memory.total, e.memory_mib * kMiB);
    EXPECT_EQ(memory.used, e.used_mib * kMiB);
    EXPECT_EQ(memory.free, memory.total - memory.used);
    nvmlMemory_v2_t memory2;
    memory2.version = nvmlMemory_v2;
    ASSERT_EQ(Api().GetMemoryInfoV2(mig, &memory2), NVML_SUCCESS);
    EXPECT_EQ(memory2.total, memory.total);
    EXPECT_EQ(memory2.used, memory.used);
    EXPECT_EQ(memory2.reserved, 0u);
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    ASSERT_EQ(Api().GetName(mig, name, sizeof(name)), NVML_SUCCESS);
    EXPECT_EQ(std::string(name), std::string("NVIDIA H200 MIG ") + e.profile);
    // Whole-GPU queries are not served on a MIG handle.
    unsigned temp = 0;
    EXPECT_EQ(Api().GetTemperature(mig, NVML_TEMPERATURE_GPU, &temp), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(Api().GetUtilizationRates(mig, &utilization), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(Api().GetMaxMigDeviceCount(mig, &value), NVML_ERROR_NOT_SUPPORTED);
    nvmlDevice_t nested = nullptr;
    EXPECT_EQ(Api().GetMigDeviceHandleByIndex(mig, 0, &nested), NVML_ERROR_NOT_SUPPORTED);
  }
  nvmlDevice_t by_uuid = nullptr;
  ASSERT_EQ(Api().GetHandleByUUID("MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0203", &by_uuid),
            NVML_SUCCESS);
  EXPECT_EQ(by_uuid, migs[2]);
  EXPECT_EQ(Api().GetHandleByUUID("MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0209", &by_uuid),
            NVML_ERROR_NOT_FOUND);
  nvmlDevice_t past = nullptr;
  EXPECT_EQ(Api().GetMigDeviceHandleByIndex(gpu, 4, &past), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(Api().GetMigDeviceHandleByIndex(gpu, 0, nullptr), NVML_ERROR_INVALID_ARGUMENT);

  // Processes carry the instance they run in.
  nvmlProcessInfo_t infos[4];
  unsigned count = 4;
  ASSERT_EQ(Api().GetComputeProcesses(gpu, &count, infos), NVML_SUCCESS);
  ASSERT_EQ(count, 2u);
  EXPECT_EQ(infos[0].pid, 90211u);
  EXPECT_EQ(infos[0].gpuInstanceId, 1u);
  EXPECT_EQ(infos[0].computeInstanceId, 0u);
  EXPECT_EQ(infos[1].pid, 90377u);
  EXPECT_EQ(infos[1].gpuInstanceId, 3u);
  EXPECT_EQ(infos[1].computeInstanceId, 0u);
}

TEST_F(NvmlSimTest, GpmPerGpuInstance) {
  UseFixture("h200-mig");
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t gpu = Handle(0);
  nvmlGpmSample_t first = nullptr, second = nullptr, whole = nullptr;
  ASSERT_EQ(Api().GpmSampleAlloc(&first), NVML_SUCCESS);
  ASSERT_EQ(Api().GpmSampleAlloc(&second), NVML_SUCCESS);
  ASSERT_EQ(Api().GpmSampleAlloc(&whole), NVML_SUCCESS);
  ASSERT_EQ(Api().GpmMigSampleGet(gpu, 1, first), NVML_SUCCESS);
  ASSERT_EQ(Api().GpmMigSampleGet(gpu, 1, second), NVML_SUCCESS);
  auto get = MetricsRequest(
      first, second,
      {NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_FP16_UTIL, NVML_GPM_METRIC_PCIE_TX_PER_SEC});
  ASSERT_EQ(Api().GpmMetricsGet(get.get()), NVML_SUCCESS);
  EXPECT_EQ(get->metrics[0].nvmlReturn, NVML_SUCCESS);
  EXPECT_DOUBLE_EQ(get->metrics[0].value, 84.6);
  EXPECT_DOUBLE_EQ(get->metrics[1].value, 40.8);
  EXPECT_EQ(get->metrics[2].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);  // not in the instance's gpm

  // Another instance's (or the whole GPU's) sample does not pair with it.
  ASSERT_EQ(Api().GpmMigSampleGet(gpu, 3, second), NVML_SUCCESS);
  EXPECT_EQ(Api().GpmMetricsGet(get.get()), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(Api().GpmSampleGet(gpu, whole), NVML_SUCCESS);
  get->sample2 = whole;
  EXPECT_EQ(Api().GpmMetricsGet(get.get()), NVML_ERROR_INVALID_ARGUMENT);

  EXPECT_EQ(Api().GpmMigSampleGet(gpu, 2, first), NVML_ERROR_NOT_SUPPORTED);  // no gpm there
  EXPECT_EQ(Api().GpmMigSampleGet(gpu, 9, first), NVML_ERROR_NOT_FOUND);
  const std::vector<nvmlDevice_t> migs = MigDevices(gpu);
  ASSERT_FALSE(migs.empty());
  EXPECT_EQ(Api().GpmMigSampleGet(migs[0], 1, first), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Api().GpmSampleGet(migs[0], first), NVML_ERROR_NOT_SUPPORTED);
  for (nvmlGpmSample_t s : {first, second, whole}) EXPECT_EQ(Api().GpmSampleFree(s), NVML_SUCCESS);
  ASSERT_EQ(Api().Shutdown(), NVML_SUCCESS);

  UseFixture("h200");  // MIG off: no instances to sample
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  ASSERT_EQ(Api().GpmSampleAlloc(&first), NVML_SUCCESS);
  EXPECT_EQ(Api().GpmMigSampleGet(Handle(0), 1, first), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(Api().GpmSampleFree(first), NVML_SUCCESS);
}

TEST_F(NvmlSimTest, Dgx8MigHasThirtyMigDevicesInMixedLayouts) {
  UseFixture("dgx8-mig");
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  const std::vector<std::vector<const char*>> layouts = {
      {"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"},
      {"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"},
      {"2g.20gb", "2g.20gb", "2g.20gb"},
      {"2g.20gb", "2g.20gb", "2g.20gb"},
      {"4g.40gb", "3g.40gb"},
      {"7g.80gb"},
      {},
      {"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"},
  };
  std::set<std::string> uuids;
  size_t total = 0;
  for (unsigned g = 0; g < 8; ++g) {
    SCOPED_TRACE("GPU " + std::to_string(g));
    nvmlDevice_t gpu = Handle(g);
    unsigned current = 9, pending = 9;
    ASSERT_EQ(Api().GetMigMode(gpu, &current, &pending), NVML_SUCCESS);
    nvmlUtilization_t utilization;
    if (g == 6) {
      EXPECT_EQ(current, NVML_DEVICE_MIG_DISABLE);
      nvmlDevice_t mig = nullptr;
      EXPECT_EQ(Api().GetMigDeviceHandleByIndex(gpu, 0, &mig), NVML_ERROR_INVALID_ARGUMENT);
      EXPECT_EQ(Api().GetUtilizationRates(gpu, &utilization), NVML_SUCCESS);
      nvmlProcessInfo_t info;
      unsigned count = 1;
      ASSERT_EQ(Api().GetComputeProcesses(gpu, &count, &info), NVML_SUCCESS);
      ASSERT_EQ(count, 1u);
      EXPECT_EQ(info.gpuInstanceId, NVML_INVALID_INSTANCE_ID);
      EXPECT_EQ(info.computeInstanceId, NVML_INVALID_INSTANCE_ID);
      continue;
    }
    EXPECT_EQ(current, NVML_DEVICE_MIG_ENABLE);
    EXPECT_EQ(Api().GetUtilizationRates(gpu, &utilization), NVML_ERROR_NOT_SUPPORTED);
    const std::vector<nvmlDevice_t> migs = MigDevices(gpu);
    ASSERT_EQ(migs.size(), layouts[g].size());
    for (size_t i = 0; i < migs.size(); ++i) {
      char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
      ASSERT_EQ(Api().GetName(migs[i], name, sizeof(name)), NVML_SUCCESS);
      EXPECT_EQ(std::string(name), std::string("NVIDIA H100 80GB HBM3 MIG ") + layouts[g][i]);
      uuids.insert(Uuid(migs[i]));
    }
    total += migs.size();
  }
  EXPECT_EQ(total, 30u);
  EXPECT_EQ(uuids.size(), 30u);
  // The 7g.80gb is GPU instance 0, as drivers number a whole-GPU instance.
  unsigned gi = 9;
  ASSERT_EQ(Api().GetGpuInstanceId(MigDevices(Handle(5))[0], &gi), NVML_SUCCESS);
  EXPECT_EQ(gi, 0u);
  ASSERT_EQ(Api().Shutdown(), NVML_SUCCESS);

  UseFixture("homelab");  // not MIG-capable
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  unsigned value = 0;
  EXPECT_EQ(Api().GetMaxMigDeviceCount(Handle(0), &value), NVML_ERROR_NOT_SUPPORTED);
  nvmlDevice_t mig = nullptr;
  EXPECT_EQ(Api().GetMigDeviceHandleByIndex(Handle(0), 0, &mig), NVML_ERROR_NOT_SUPPORTED);
  nvmlDeviceAttributes_t attributes;
  EXPECT_EQ(Api().GetAttributes(Handle(0), &attributes), NVML_ERROR_NOT_SUPPORTED);
}

TEST_F(NvmlSimTest, XidEventsCarryTheMigInstance) {
  UseFixture("h200-mig");
  UseState();
  SimState state;
  Write(state);
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t gpu = Handle(0);
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(Api().EventSetCreate(&set), NVML_SUCCESS);
  ASSERT_EQ(Api().RegisterEvents(gpu, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  EXPECT_EQ(Api().RegisterEvents(MigDevices(gpu)[0], nvmlEventTypeXidCriticalError, set),
            NVML_ERROR_NOT_SUPPORTED);
  ASSERT_TRUE(InjectXid(&state, "0", 31, 3, 0));
  ASSERT_TRUE(InjectXid(&state, "0", 43, 1));
  ASSERT_TRUE(InjectXid(&state, "0", 79));
  Write(state);
  nvmlEventData_t data;
  ASSERT_EQ(Api().EventSetWait(set, &data, 2000), NVML_SUCCESS);
  EXPECT_EQ(data.device, gpu);
  EXPECT_EQ(data.eventData, 31u);
  EXPECT_EQ(data.gpuInstanceId, 3u);
  EXPECT_EQ(data.computeInstanceId, 0u);
  ASSERT_EQ(Api().EventSetWait(set, &data, 2000), NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 43u);
  EXPECT_EQ(data.gpuInstanceId, 1u);
  EXPECT_EQ(data.computeInstanceId, NVML_INVALID_INSTANCE_ID);
  ASSERT_EQ(Api().EventSetWait(set, &data, 2000), NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 79u);
  EXPECT_EQ(data.gpuInstanceId, NVML_INVALID_INSTANCE_ID);
  EXPECT_EQ(data.computeInstanceId, NVML_INVALID_INSTANCE_ID);
  EXPECT_EQ(Api().EventSetFree(set), NVML_SUCCESS);
}

// `gpulet sim mig` writes a MIG override into the state; a running simulator sees it on its
// next call, as an operator's mig-parted change would show.
TEST_F(NvmlSimTest, MigLayoutChangesReachARunningSimulator) {
  UseFixture("h200-mig");
  UseState();
  SimState state;
  Write(state);
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  nvmlDevice_t gpu = Handle(0);
  const std::vector<nvmlDevice_t> before = MigDevices(gpu);
  ASSERT_EQ(before.size(), 4u);
  nvmlDevice_t three_g = before[0];

  // Destroy GPU instance 1 (the 3g.71gb, where vLLM runs) and make two 1g.35gb in its place.
  MigOverride mig;
  mig.enabled = true;
  for (const char* uuid_tail : {"02", "03", "04"}) {
    MigInstance m;
    m.gpu_instance = static_cast<unsigned>(std::stoul(uuid_tail));
    m.profile = m.gpu_instance == 2 ? "2g.35gb" : "1g.18gb";
    m.placement = m.gpu_instance == 2 ? 0 : m.gpu_instance - 1;
    m.uuid = std::string("MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d02") + uuid_tail;
    mig.instances.push_back(m);
  }
  for (unsigned gi : {5u, 6u}) {
    MigInstance m;
    m.gpu_instance = gi;
    m.profile = "1g.35gb";
    m.placement = gi == 5 ? 4 : 6;
    m.uuid = "MIG-00000000-0000-0000-0000-00000000000" + std::to_string(gi);
    mig.instances.push_back(m);
  }
  ASSERT_TRUE(SetMig(&state, "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200", mig));
  Write(state);
  const std::vector<nvmlDevice_t> after = MigDevices(gpu);
  ASSERT_EQ(after.size(), 5u);
  EXPECT_EQ(Uuid(after[3]), "MIG-00000000-0000-0000-0000-000000000005");
  unsigned value = 0;
  EXPECT_EQ(Api().GetGpuInstanceId(three_g, &value), NVML_ERROR_INVALID_ARGUMENT);  // stale
  nvmlProcessInfo_t infos[4];
  unsigned count = 4;
  ASSERT_EQ(Api().GetComputeProcesses(gpu, &count, infos), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);  // vLLM went with its instance
  EXPECT_EQ(infos[0].gpuInstanceId, 3u);

  // A layout the product cannot take is ignored, with one stderr line: the fixture's shows.
  mig.instances.push_back(mig.instances.back());
  ASSERT_TRUE(SetMig(&state, "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200", mig));
  ::testing::internal::CaptureStderr();
  Write(state);
  EXPECT_EQ(MigDevices(gpu).size(), 4u);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("ignoring the MIG layout of GPU 0"), std::string::npos) << log;

  // MIG off: no MIG devices, utilisation back.
  mig.enabled = false;
  mig.instances.clear();
  ASSERT_TRUE(SetMig(&state, "0", mig));
  ASSERT_TRUE(ClearMig(&state, "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200"));
  Write(state);
  nvmlDevice_t none = nullptr;
  EXPECT_EQ(Api().GetMigDeviceHandleByIndex(gpu, 0, &none), NVML_ERROR_INVALID_ARGUMENT);
  nvmlUtilization_t utilization;
  EXPECT_EQ(Api().GetUtilizationRates(gpu, &utilization), NVML_SUCCESS);
  unsigned current = 9, pending = 9;
  ASSERT_EQ(Api().GetMigMode(gpu, &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, NVML_DEVICE_MIG_DISABLE);
  EXPECT_EQ(pending, NVML_DEVICE_MIG_DISABLE);
  count = 4;
  ASSERT_EQ(Api().GetComputeProcesses(gpu, &count, infos), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);  // both processes named instances that are gone
}

TEST_F(NvmlSimTest, BadMigLayoutsFailInit) {
  const std::string bad = dir_ + "/bad.yaml";
  struct Case {
    const char* mig;
    const char* expected;  // in the one-line error
  } cases[] = {
      {"{current: enabled, instances: [{gpu_instance: 1, profile: 1g.18gb, placement: 0}]}",
       "gpus[0].mig (GPU-x, NVIDIA H100 80GB HBM3): GPU instance 1 (1g.18gb at placement 0): "
       "unknown profile for H100 80GB"},
      {"{current: enabled, instances: [{gpu_instance: 1, profile: 3g.40gb, placement: 1}]}",
       "placement 1 is not one 3g.40gb takes on H100 80GB (it starts at 0, 4)"},
      {"{current: enabled, instances: [{gpu_instance: 1, profile: 4g.40gb, placement: 0},\n"
       "  {gpu_instance: 2, profile: 3g.40gb, placement: 0}]}",
       "GPU instance 2 (3g.40gb at placement 0): 3g.40gb at placement 0 overlaps GPU instance 1"},
      {"{current: enabled, instances: [{gpu_instance: 1, profile: 1g.10gb, placement: 0},\n"
       "  {gpu_instance: 1, profile: 1g.10gb, placement: 1}]}",
       "GPU instance id 1 is already GPU instance 1"},
      {"{current: disabled, instances: [{gpu_instance: 1, profile: 1g.10gb, placement: 0}]}",
       "MIG mode is disabled, so there can be no instances"},
      {"{current: enabled, instances: [{gpu_instance: 1, profile: 1g.10gb, placement: 0, "
       "slot: 1}]}",
       "gpus[0].mig.instances[0]: unknown key \"slot\""},
      {"{current: enabled, instances: [{gpu_instance: 1, profile: 1g.10gb}]}",
       "needs gpu_instance, profile and placement"},
      {"{current: enabled, instances: [{gpu_instance: 1, profile: 1g.10gb, placement: 0, "
       "gpm: {sm_util: 200}}]}",
       "instances[0].gpm.sm_util: expected a percentage"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.mig);
    {
      std::ofstream out(bad);
      out << "driver: {version: \"1\", nvml_version: \"1\", cuda_driver_version: 12080}\n"
             "gpus:\n"
             "  - {name: NVIDIA H100 80GB HBM3, uuid: GPU-x,\n"
             "     pci: {bus_id: \"0000:01:00.0\", device_id: 0x2330},\n"
             "     memory: {total_mib: 81559}, mig: "
          << c.mig << "}\n";
    }
    setenv("GPULET_SIM_FIXTURE", bad.c_str(), 1);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(Api().Init(), NVML_ERROR_UNKNOWN);
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find(c.expected), std::string::npos) << log;
    EXPECT_NE(log.find(bad + ":"), std::string::npos) << log;  // file:line:col
  }
  // A process naming an instance the layout lacks is valid, and simply not reported.
  {
    std::ofstream out(bad);
    out << "driver: {version: \"1\", nvml_version: \"1\", cuda_driver_version: 12080}\n"
           "gpus:\n"
           "  - {name: NVIDIA H100 80GB HBM3, uuid: GPU-x,\n"
           "     pci: {bus_id: \"0000:01:00.0\", device_id: 0x2330},\n"
           "     memory: {total_mib: 81559}, mig: {current: enabled},\n"
           "     processes: [{pid: 1, used_mib: 5, gpu_instance: 4}]}\n";
  }
  setenv("GPULET_SIM_FIXTURE", bad.c_str(), 1);
  ASSERT_EQ(Api().Init(), NVML_SUCCESS);
  unsigned count = 0;
  EXPECT_EQ(Api().GetComputeProcesses(Handle(0), &count, nullptr), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
}

}  // namespace
}  // namespace gpulet::sim
