// libgpulet-nvml-sim.so: an NVML look-alike that gpulet dlopen()s instead of
// libnvidia-ml.so.1, so its real loading and calling code runs on machines without a GPU.
//
// This file is the NVML ABI: the symbols declared in src/gpu/nvml_api.h with NVML's
// semantics (argument checks, buffer sizes, return codes, MIG handles), each answered from
// the simulator's state (sim/simulator.h): a fixture ($GPULET_SIM_FIXTURE, YAML, read at
// nvmlInit) and a fault-injection state file ($GPULET_SIM_STATE, JSON, re-read whenever it
// changes). Both formats are documented in sim/fixtures/README.md. A change to the state
// file reaches an nvmlEventSetWait_v2 waiter through inotify, on one thread of the
// simulator's own ("nvml-sim-watch", while NVML is initialised with a state file): like
// NVML's own wait, which sleeps in the driver, an idle wait costs no CPU.
//
// Thread-safety: every exported function may be called from any number of threads at once
// (the simulator's one mutex guards its state). No C++ exception crosses the C boundary:
// each entry point catches and returns NVML_ERROR_UNKNOWN.

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "sim/file_io.h"
#include "sim/simulator.h"

namespace gpulet::sim {
namespace {

template <typename F>
nvmlReturn_t Guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpulet-nvml-sim: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "gpulet-nvml-sim: internal error\n");
  }
  return NVML_ERROR_UNKNOWN;
}

// A call on a whole GPU. On a MIG device handle it answers NOT_SUPPORTED: real NVML serves
// only a subset of queries on MIG handles, and the simulator only those OnAnyDevice serves.
template <typename F>
nvmlReturn_t OnDevice(nvmlDevice_t device, F&& body) {
  return Guarded([&]() -> nvmlReturn_t {
    DeviceCall call;
    const nvmlReturn_t ret = Sim().BeginDeviceCall(device, &call);
    if (ret != NVML_SUCCESS) return ret;
    if (call.mig.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    return body(call);
  });
}

// A call that takes a whole-GPU or a MIG device handle (call.mig says which).
template <typename F>
nvmlReturn_t OnAnyDevice(nvmlDevice_t device, F&& body) {
  return Guarded([&]() -> nvmlReturn_t {
    DeviceCall call;
    const nvmlReturn_t ret = Sim().BeginDeviceCall(device, &call);
    if (ret != NVML_SUCCESS) return ret;
    return body(call);
  });
}

bool MigEnabled(const FixtureGpu& gpu) {
  return gpu.mig.has_value() && gpu.mig->current == NVML_DEVICE_MIG_ENABLE;
}

// The instance of the current layout a process names; nullptr when it names none, or one the
// layout lacks.
const MigInstance* ProcessInstance(const FixtureGpu& gpu, const SimProcess& p) {
  if (!p.gpu_instance.has_value() || !MigEnabled(gpu)) return nullptr;
  for (const MigInstance& m : gpu.mig->instances) {
    if (m.gpu_instance == *p.gpu_instance &&
        (!p.compute_instance.has_value() || *p.compute_instance == m.compute_instance)) {
      return &m;
    }
  }
  return nullptr;
}

// Memory of one MIG device in MiB: the profile's size, the instance's processes plus a fixed
// overhead in use (at most the size).
std::pair<uint64_t, uint64_t> MigMemoryMib(const DeviceCall& call) {
  const uint64_t total = call.mig_profile->memory_mib;
  uint64_t used = kMigInstanceOverheadMib;
  for (const SimProcess& p : call.gpu().processes) {
    const MigInstance* m = ProcessInstance(call.gpu(), p);
    if (m != nullptr && m->gpu_instance == call.mig->gpu_instance &&
        m->compute_instance == call.mig->compute_instance) {
      used += p.used_mib;
    }
  }
  return {total, std::min(used, total)};
}

nvmlReturn_t CopyString(const std::string& value, char* buffer, unsigned length) {
  if (buffer == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < value.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buffer, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t CopyOptString(const std::optional<std::string>& value, char* buffer, unsigned length) {
  if (buffer == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!value.has_value()) return NVML_ERROR_NOT_SUPPORTED;
  return CopyString(*value, buffer, length);
}

template <typename T, typename U>
nvmlReturn_t CopyOpt(const std::optional<U>& value, T* out) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!value.has_value()) return NVML_ERROR_NOT_SUPPORTED;
  *out = static_cast<T>(*value);
  return NVML_SUCCESS;
}

nvmlReturn_t Processes(const DeviceCall& call, ProcessType type, unsigned* count,
                       nvmlProcessInfo_t* infos) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<const SimProcess*> matching;
  std::vector<const MigInstance*> instances;
  for (const SimProcess& p : call.gpu().processes) {
    if (p.type != type) continue;
    const MigInstance* instance = ProcessInstance(call.gpu(), p);
    // A process in an instance the current layout lacks (destroyed, or MIG turned off) is
    // gone with it.
    if (p.gpu_instance.has_value() && instance == nullptr) continue;
    matching.push_back(&p);
    instances.push_back(instance);
  }
  if (*count < matching.size()) {
    *count = static_cast<unsigned>(matching.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (!matching.empty() && infos == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (size_t i = 0; i < matching.size(); ++i) {
    infos[i].pid = matching[i]->pid;
    infos[i].usedGpuMemory = matching[i]->used_mib * kMiB;
    infos[i].gpuInstanceId = instances[i] != nullptr ? instances[i]->gpu_instance : kNoInstance;
    infos[i].computeInstanceId =
        instances[i] != nullptr ? instances[i]->compute_instance : kNoInstance;
  }
  *count = static_cast<unsigned>(matching.size());
  return NVML_SUCCESS;
}

// nvmlDeviceGetProcessUtilization: one sample per process with an `sm_util`, stamped now (the
// simulator keeps no history: each call's samples are the processes' current values). None
// newer than `last_seen_us`, or no process with one: NOT_FOUND.
nvmlReturn_t ProcessUtilization(const DeviceCall& call, nvmlProcessUtilizationSample_t* samples,
                                unsigned* count, unsigned long long last_seen_us) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const auto now_us =
      static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
  std::vector<const SimProcess*> sampled;
  for (const SimProcess& p : call.gpu().processes) {
    if (!p.sm_util.has_value()) continue;
    // As in Processes: a process in an instance the current layout lacks is gone.
    if (p.gpu_instance.has_value() && ProcessInstance(call.gpu(), p) == nullptr) continue;
    sampled.push_back(&p);
  }
  if (sampled.empty() || now_us <= last_seen_us) return NVML_ERROR_NOT_FOUND;
  if (samples == nullptr || *count < sampled.size()) {
    *count = static_cast<unsigned>(sampled.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (size_t i = 0; i < sampled.size(); ++i) {
    samples[i] = nvmlProcessUtilizationSample_t{};
    samples[i].pid = sampled[i]->pid;
    samples[i].timeStamp = now_us;
    samples[i].smUtil = *sampled[i]->sm_util;
  }
  *count = static_cast<unsigned>(sampled.size());
  return NVML_SUCCESS;
}

nvmlReturn_t Codec(const std::optional<CodecUtilization>& codec, unsigned* utilization,
                   unsigned* sampling_period_us) {
  if (utilization == nullptr || sampling_period_us == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (!codec.has_value()) return NVML_ERROR_NOT_SUPPORTED;
  *utilization = codec->utilization;
  *sampling_period_us = codec->sampling_period_us;
  return NVML_SUCCESS;
}

nvmlReturn_t ClockValue(const std::array<std::optional<unsigned>, 4>& clocks, int type,
                        unsigned* mhz) {
  if (type < 0 || type >= static_cast<int>(clocks.size())) return NVML_ERROR_INVALID_ARGUMENT;
  return CopyOpt(clocks[static_cast<size_t>(type)], mhz);
}

void FillField(const DeviceCall& call, nvmlFieldValue_t* v) {
  const FixtureGpu& g = call.gpu();
  auto set_uint = [v](const std::optional<unsigned>& value) {
    if (!value.has_value()) {
      v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      return;
    }
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v->value.uiVal = *value;
  };
  auto set_ull = [v](const std::optional<unsigned long long>& value) {
    if (!value.has_value()) {
      v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      return;
    }
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    v->value.ullVal = *value;
  };
  auto remapped = [&g](auto field) -> std::optional<unsigned> {
    if (!g.remapped_rows.has_value()) return std::nullopt;
    return field(*g.remapped_rows);
  };
  auto ecc_volatile = [&g](int type) -> std::optional<unsigned long long> {
    if (!g.ecc.has_value() || !g.ecc->enabled) return std::nullopt;
    return g.ecc->counts[type][NVML_VOLATILE_ECC];
  };
  // NVLink data counters: scopeId UINT_MAX sums every link; a link's own counter is an even
  // share of the total (the simulator models no per-link imbalance).
  auto nvlink_data = [&g, v, &set_ull](double total_kib) {
    if (!g.nvlink.has_value()) {
      v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      return;
    }
    const auto total = static_cast<unsigned long long>(total_kib);
    const unsigned links = g.nvlink->links;
    if (v->scopeId == UINT_MAX) {
      set_ull(total);
    } else if (v->scopeId < links) {
      set_ull(total / links + (v->scopeId < total % links ? 1 : 0));
    } else {
      v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
    }
  };
  v->nvmlReturn = NVML_SUCCESS;
  v->latencyUsec = 0;
  v->timestamp = std::chrono::duration_cast<std::chrono::microseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  switch (v->fieldId) {
    case NVML_FI_DEV_MEMORY_TEMP:
      set_uint(g.memory_temperature_c);
      break;
    case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
      set_ull(g.energy_mj ? std::optional<unsigned long long>(
                                static_cast<unsigned long long>(call.energy_mj))
                          : std::nullopt);
      break;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER:
      set_uint(g.pcie_replay);
      break;
    case NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
      set_uint(g.recovery_action);
      break;
    case NVML_FI_DEV_NVLINK_LINK_COUNT:
      set_uint(g.nvlink ? std::optional<unsigned>(g.nvlink->links) : std::nullopt);
      break;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
      nvlink_data(call.nvlink_tx_kib);
      break;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
      nvlink_data(call.nvlink_rx_kib);
      break;
    case kFieldEccSbeVolatileTotal:
      set_ull(ecc_volatile(NVML_MEMORY_ERROR_TYPE_CORRECTED));
      break;
    case kFieldEccDbeVolatileTotal:
      set_ull(ecc_volatile(NVML_MEMORY_ERROR_TYPE_UNCORRECTED));
      break;
    case kFieldRemappedCorrectable:
      set_uint(remapped([](const RemappedRows& r) { return r.correctable; }));
      break;
    case kFieldRemappedUncorrectable:
      set_uint(remapped([](const RemappedRows& r) { return r.uncorrectable; }));
      break;
    case kFieldRemappedPending:
      set_uint(remapped([](const RemappedRows& r) { return r.pending ? 1u : 0u; }));
      break;
    case kFieldRemappedFailure:
      set_uint(remapped([](const RemappedRows& r) { return r.failure ? 1u : 0u; }));
      break;
    default:
      v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      break;
  }
}

// The first checks of every per-link NVLink query.
nvmlReturn_t CheckLink(const FixtureGpu& gpu, unsigned link) {
  if (!gpu.nvlink.has_value()) return NVML_ERROR_NOT_SUPPORTED;
  if (link >= gpu.nvlink->links) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_SUCCESS;
}

// nvmlErrorString texts, worded after the real library's; callers should switch on codes.
struct ErrorText {
  nvmlReturn_t code;
  const char* text;
};
constexpr ErrorText kErrorTexts[] = {
    {NVML_SUCCESS, "Success"},
    {NVML_ERROR_UNINITIALIZED, "Uninitialized"},
    {NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"},
    {NVML_ERROR_NOT_SUPPORTED, "Not Supported"},
    {NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"},
    {NVML_ERROR_ALREADY_INITIALIZED, "Already Initialized"},
    {NVML_ERROR_NOT_FOUND, "Not Found"},
    {NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size"},
    {NVML_ERROR_INSUFFICIENT_POWER, "Insufficient External Power"},
    {NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"},
    {NVML_ERROR_TIMEOUT, "Timeout"},
    {NVML_ERROR_IRQ_ISSUE, "Interrupt request issue"},
    {NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"},
    {NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found"},
    {NVML_ERROR_CORRUPTED_INFOROM, "Corrupted infoROM"},
    {NVML_ERROR_GPU_IS_LOST, "GPU is lost"},
    {NVML_ERROR_RESET_REQUIRED, "GPU requires reset"},
    {NVML_ERROR_OPERATING_SYSTEM, "GPU access blocked by the operating system"},
    {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "Driver/library version mismatch"},
    {NVML_ERROR_IN_USE, "In use by another client"},
    {NVML_ERROR_MEMORY, "Insufficient Memory"},
    {NVML_ERROR_NO_DATA, "No data"},
    {NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "vGPU ECC Not Supported"},
    {NVML_ERROR_INSUFFICIENT_RESOURCES, "Insufficient Resources"},
    {NVML_ERROR_FREQ_NOT_SUPPORTED, "Frequency Not Supported"},
    {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "Argument Version Mismatch"},
    {NVML_ERROR_DEPRECATED, "Deprecated"},
    {NVML_ERROR_NOT_READY, "Not Ready"},
    {NVML_ERROR_GPU_NOT_FOUND, "GPU Not Found"},
    {NVML_ERROR_INVALID_STATE, "Invalid State"},
};

const char* ErrorString(nvmlReturn_t result) {
  for (const ErrorText& e : kErrorTexts) {
    if (e.code == result) return e.text;
  }
  return "Unknown Error";
}

}  // namespace

// --- the exported NVML ABI ----------------------------------------------------------------
// extern "C" gives these C linkage and plain NVML symbol names even inside the namespace;
// they are the only symbols the library exports (everything else is hidden by default).
#define GPULET_NVML_EXPORT extern "C" __attribute__((visibility("default")))

GPULET_NVML_EXPORT nvmlReturn_t nvmlInit_v2() {
  return Guarded([]() -> nvmlReturn_t { return Sim().Init(); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int /*flags*/) {
  // NO_GPUS / NO_ATTACH change nothing here: GPUs are attached lazily anyway.
  return Guarded([]() -> nvmlReturn_t { return Sim().Init(); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlShutdown() {
  return Guarded([]() -> nvmlReturn_t { return Sim().Shutdown(); });
}

GPULET_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result) { return ErrorString(result); }

GPULET_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return Guarded([&]() -> nvmlReturn_t {
    return Sim().WithFixture([&](const Fixture& f) -> nvmlReturn_t {
      return CopyString(f.driver_version, version, length);
    });
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return Guarded([&]() -> nvmlReturn_t {
    return Sim().WithFixture([&](const Fixture& f) -> nvmlReturn_t {
      return CopyString(f.nvml_version, version, length);
    });
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cuda_driver_version) {
  return Guarded([&]() -> nvmlReturn_t {
    return Sim().WithFixture([&](const Fixture& f) -> nvmlReturn_t {
      if (cuda_driver_version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
      *cuda_driver_version = f.cuda_driver_version;
      return NVML_SUCCESS;
    });
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  return Guarded([&]() -> nvmlReturn_t {
    return Sim().WithFixture([&](const Fixture& f) -> nvmlReturn_t {
      if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
      *count = static_cast<unsigned>(f.gpus.size());  // lost GPUs still count, as in NVML
      return NVML_SUCCESS;
    });
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                              nvmlDevice_t* device) {
  return Guarded([&]() -> nvmlReturn_t {
    // An index past the end is INVALID_ARGUMENT in NVML, not NOT_FOUND.
    return Sim().GetHandle([&](const FixtureGpu&, unsigned i) { return i == index; },
                           NVML_ERROR_INVALID_ARGUMENT, device);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  return Guarded([&]() -> nvmlReturn_t {
    if (uuid == nullptr) {
      return Sim().WithFixture(
          [](const Fixture&) -> nvmlReturn_t { return NVML_ERROR_INVALID_ARGUMENT; });
    }
    const std::string wanted(uuid);
    if (wanted.rfind("MIG-", 0) == 0) return Sim().GetMigHandleByUuid(wanted, device);
    return Sim().GetHandle([&](const FixtureGpu& g, unsigned) { return g.uuid == wanted; },
                           NVML_ERROR_NOT_FOUND, device);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pci_bus_id,
                                                                 nvmlDevice_t* device) {
  return Guarded([&]() -> nvmlReturn_t {
    unsigned domain = 0, bus = 0, dev = 0;
    if (pci_bus_id == nullptr || !ParsePciBusId(pci_bus_id, &domain, &bus, &dev)) {
      return Sim().WithFixture(
          [](const Fixture&) -> nvmlReturn_t { return NVML_ERROR_INVALID_ARGUMENT; });
    }
    return Sim().GetHandle(
        [&](const FixtureGpu& g, unsigned) {
          return g.pci_domain == domain && g.pci_bus == bus && g.pci_device == dev;
        },
        NVML_ERROR_NOT_FOUND, device);
  });
}

// On a MIG device, "<GPU name> MIG <profile>", as NVML names them.
GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                                  unsigned int length) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyString(c.mig ? c.gpu().name + " MIG " + c.mig->profile : c.gpu().name, name, length);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                  unsigned int length) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyString(c.mig ? c.mig->uuid : c.gpu().uuid, uuid, length);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial,
                                                    unsigned int length) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOptString(c.gpu().serial, serial, length);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char* version,
                                                          unsigned int length) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOptString(c.gpu().vbios_version, version, length);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(std::optional<unsigned>(c.index), index);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(std::optional<unsigned>(c.gpu().minor), minor);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const FixtureGpu& g = c.gpu();
    std::memset(pci, 0, sizeof(*pci));
    std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", g.pci_domain,
                  g.pci_bus, g.pci_device);
    std::snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", g.pci_domain, g.pci_bus,
                  g.pci_device);
    pci->domain = g.pci_domain;
    pci->bus = g.pci_bus;
    pci->device = g.pci_device;
    pci->pciDeviceId = (g.pci_device_id << 16) | 0x10deu;
    pci->pciSubSystemId = g.pci_subsystem_id;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (c.mig) {
      const auto [total, used] = MigMemoryMib(c);
      memory->total = total * kMiB;
      memory->used = used * kMiB;
      memory->free = memory->total - memory->used;
      return NVML_SUCCESS;
    }
    const FixtureGpu& g = c.gpu();
    memory->total = g.memory_total_mib * kMiB;
    memory->used = (g.memory_used_mib + g.memory_reserved_mib) * kMiB;  // v1 counts reserved
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                           nvmlMemory_v2_t* memory) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (c.mig) {
      const auto [total, used] = MigMemoryMib(c);
      memory->total = total * kMiB;
      memory->reserved = 0;
      memory->used = used * kMiB;
      memory->free = memory->total - memory->used;
      return NVML_SUCCESS;
    }
    const FixtureGpu& g = c.gpu();
    memory->total = g.memory_total_mib * kMiB;
    memory->reserved = g.memory_reserved_mib * kMiB;
    memory->used = g.memory_used_mib * kMiB;
    memory->free = memory->total - memory->reserved - memory->used;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                              nvmlUtilization_t* utilization) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    // With MIG on, drivers have no whole-GPU utilisation to give (GPM per instance replaces it).
    if (!c.gpu().utilization.has_value() || MigEnabled(c.gpu())) return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = c.gpu().utilization->first;
    utilization->memory = c.gpu().utilization->second;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor,
                                                         unsigned int* temp) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    return CopyOpt(c.gpu().temperature_c, temp);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* mw) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().power_usage_mw, mw);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device,
                                                                unsigned int* mw) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().power_limit_mw, mw);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                                    unsigned long long* mj) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (mj == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().energy_mj.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    *mj = static_cast<unsigned long long>(c.energy_mj);
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type,
                                                       unsigned int* mhz) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return ClockValue(c.gpu().clocks_mhz, type, mhz);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, int type,
                                                          unsigned int* mhz) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return ClockValue(c.gpu().max_clocks_mhz, type, mhz);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int* speed) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().fan_percent, speed);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, int* pstate) {
  return OnDevice(
      device, [&](const DeviceCall& c) -> nvmlReturn_t { return CopyOpt(c.gpu().pstate, pstate); });
}

GPULET_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long* reasons) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().clocks_event_reasons, reasons);
  });
}

// The pre-R535 name of the same query, same bits.
GPULET_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long* reasons) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().clocks_event_reasons, reasons);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major,
                                                                   int* minor) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().compute_capability.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    *major = c.gpu().compute_capability->first;
    *minor = c.gpu().compute_capability->second;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int* arch) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().architecture, arch);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, int* brand) {
  return OnDevice(
      device, [&](const DeviceCall& c) -> nvmlReturn_t { return CopyOpt(c.gpu().brand, brand); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int* mode) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().persistence_mode.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    *mode = *c.gpu().persistence_mode ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                        unsigned int* count,
                                                                        nvmlProcessInfo_t* infos) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return Processes(c, ProcessType::kCompute, count, infos);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                                         unsigned int* count,
                                                                         nvmlProcessInfo_t* infos) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return Processes(c, ProcessType::kGraphics, count, infos);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
    unsigned int* process_samples_count, unsigned long long last_seen_time_stamp) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return ProcessUtilization(c, utilization, process_samples_count, last_seen_time_stamp);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device,
                                                          unsigned int* correctable,
                                                          unsigned int* uncorrectable,
                                                          unsigned int* pending,
                                                          unsigned int* failure) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (correctable == nullptr || uncorrectable == nullptr || pending == nullptr ||
        failure == nullptr) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!c.gpu().remapped_rows.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    const RemappedRows& r = *c.gpu().remapped_rows;
    *correctable = r.correctable;
    *uncorrectable = r.uncorrectable;
    *pending = r.pending ? 1 : 0;
    *failure = r.failure ? 1 : 0;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type,
                                                            int counter_type,
                                                            unsigned long long* count) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (count == nullptr || error_type < 0 || error_type > 1 || counter_type < 0 ||
        counter_type > 1) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    // Counts need ECC mode enabled; a board without ECC has none to report.
    if (!c.gpu().ecc.has_value() || !c.gpu().ecc->enabled) return NVML_ERROR_NOT_SUPPORTED;
    *count = c.gpu().ecc->counts[error_type][counter_type];
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, int* current,
                                                     int* pending) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().ecc.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    *current = c.gpu().ecc->enabled ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    *pending = c.gpu().ecc->pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device,
                                                               unsigned int* value) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return CopyOpt(c.gpu().pcie_replay, value);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device,
                                                                unsigned int* utilization,
                                                                unsigned int* sampling_us) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return Codec(c.gpu().encoder, utilization, sampling_us);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device,
                                                                unsigned int* utilization,
                                                                unsigned int* sampling_us) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    return Codec(c.gpu().decoder, utilization, sampling_us);
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count,
                                                         nvmlFieldValue_t* values) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (count < 0 || (count > 0 && values == nullptr)) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; ++i) FillField(c, &values[i]);
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                                 unsigned long long* types) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (types == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *types = SupportedEvents(c.gpu());
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                         int* is_active) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (is_active == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (const nvmlReturn_t ret = CheckLink(c.gpu(), link); ret != NVML_SUCCESS) return ret;
    *is_active =
        c.gpu().nvlink->down.count(link) != 0 ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device,
                                                                unsigned int link, int counter,
                                                                unsigned long long* value) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (value == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (const nvmlReturn_t ret = CheckLink(c.gpu(), link); ret != NVML_SUCCESS) return ret;
    if (counter < NVML_NVLINK_ERROR_DL_REPLAY || counter > NVML_NVLINK_ERROR_DL_CRC_DATA) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    const NvLinkInfo& nvlink = *c.gpu().nvlink;
    const auto it = nvlink.link_errors.find(link);
    const std::array<uint64_t, 4>& counters =
        it != nvlink.link_errors.end() ? it->second : nvlink.errors;
    *value = counters[static_cast<size_t>(counter)];
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device,
                                                                    unsigned int link, int* type) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (const nvmlReturn_t ret = CheckLink(c.gpu(), link); ret != NVML_SUCCESS) return ret;
    *type = c.gpu().nvlink->remote_type;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                                                     unsigned int* pending) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().mig.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    *current = c.gpu().mig->current;
    *pending = c.gpu().mig->pending;
    return NVML_SUCCESS;
  });
}

// The driver's own per-cgroup VRAM limits (drivers r615 and later, with the kernel's dmem
// cgroup controller), held the way that controller holds them: the cgroup directory's
// dmem.max (hard) and dmem.min (soft) files, one "<region> <bytes or max>" line per region,
// the GPU's region being "nvidia/<PCI address>/vidmem"; dmem.current, when present, gives the
// use. A fixture whose driver predates r615 answers FUNCTION_NOT_FOUND (a real library of
// that age has no such symbol; gpulet reads both as "cannot"), a MIG-enabled GPU
// NOT_SUPPORTED (NVML serves these for whole GPUs only), a nameSpace that is not a
// directory NOT_FOUND, and a soft limit above the hard one INVALID_ARGUMENT.
namespace {

nvmlReturn_t MemoryLimitsAvailable() {
  return Sim().WithFixture([](const Fixture& f) -> nvmlReturn_t {
    const int major = std::atoi(f.driver_version.c_str());
    return major >= 615 ? NVML_SUCCESS : NVML_ERROR_FUNCTION_NOT_FOUND;
  });
}

std::string DmemRegion(const FixtureGpu& g) {
  char region[64];
  std::snprintf(region, sizeof(region), "nvidia/%04x:%02x:%02x.0/vidmem", g.pci_domain, g.pci_bus,
                g.pci_device);
  return region;
}

bool IsDirectory(const char* path) {
  struct stat st;
  return path != nullptr && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// The lines of the dmem file at `path` other than `region`'s, and that region's value (nullopt
// when the line is missing; UINT64_MAX for "max"). False when the file cannot be read; a
// missing file has no lines.
bool ReadDmemFile(const std::string& path, const std::string& region,
                  std::vector<std::string>* others, std::optional<unsigned long long>* value) {
  std::string text, error;
  if (ReadCappedRegularFile(path, 1 << 16, "dmem file", &text, &error) == ReadResult::kError) {
    return false;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.compare(0, region.size() + 1, region + " ") != 0) {
      if (!line.empty()) others->push_back(line);
      continue;
    }
    const std::string v = line.substr(region.size() + 1);
    *value = v == "max" ? NVML_DEVICE_MEMORY_LIMIT_MAX : std::strtoull(v.c_str(), nullptr, 10);
  }
  return true;
}

std::optional<unsigned long long> ReadDmemValue(const std::string& path,
                                                const std::string& region) {
  std::vector<std::string> others;
  std::optional<unsigned long long> value;
  ReadDmemFile(path, region, &others, &value);
  return value;
}

// Sets `region`'s line of the dmem file at `path`, keeping the other regions' lines.
bool WriteDmemValue(const std::string& path, const std::string& region, unsigned long long value) {
  std::vector<std::string> others;
  std::optional<unsigned long long> old;
  if (!ReadDmemFile(path, region, &others, &old)) return false;
  std::string out, error;
  for (const std::string& line : others) out += line + "\n";
  out += region + " " +
         (value == NVML_DEVICE_MEMORY_LIMIT_MAX ? std::string("max") : std::to_string(value)) +
         "\n";
  return ReplaceFile(path, out, &error);
}

}  // namespace

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device,
                                                             nvmlSetMemoryLimits_v1_t* limits) {
  if (const nvmlReturn_t ret = MemoryLimitsAvailable(); ret != NVML_SUCCESS) return ret;
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (limits == nullptr || limits->softLimit > limits->hardLimit) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (MigEnabled(c.gpu())) return NVML_ERROR_NOT_SUPPORTED;
    if (!IsDirectory(limits->nameSpace)) return NVML_ERROR_NOT_FOUND;
    const std::string dir = limits->nameSpace;
    const std::string region = DmemRegion(c.gpu());
    if (!WriteDmemValue(dir + "/dmem.max", region, limits->hardLimit) ||
        !WriteDmemValue(dir + "/dmem.min", region, limits->softLimit)) {
      return NVML_ERROR_NO_PERMISSION;
    }
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t device,
                                                             nvmlGetMemoryLimits_v1_t* limits) {
  if (const nvmlReturn_t ret = MemoryLimitsAvailable(); ret != NVML_SUCCESS) return ret;
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (limits == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (MigEnabled(c.gpu())) return NVML_ERROR_NOT_SUPPORTED;
    if (!IsDirectory(limits->nameSpace)) return NVML_ERROR_NOT_FOUND;
    const std::string dir = limits->nameSpace;
    const std::string region = DmemRegion(c.gpu());
    limits->hardLimit =
        ReadDmemValue(dir + "/dmem.max", region).value_or(NVML_DEVICE_MEMORY_LIMIT_MAX);
    limits->softLimit = ReadDmemValue(dir + "/dmem.min", region).value_or(0);
    limits->currentUsed = ReadDmemValue(dir + "/dmem.current", region).value_or(0);
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device,
                                                               unsigned int* count) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().mig.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    *count = kMigComputeSlices;  // every product in sim/mig.h is a 7-slice GPU
    return NVML_SUCCESS;
  });
}

// The index-th MIG device, by GPU instance id then compute instance id. NVML answers
// INVALID_ARGUMENT when MIG is off and NOT_FOUND past the last device; so does this.
GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                                    unsigned int index,
                                                                    nvmlDevice_t* mig) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.gpu().mig.has_value()) return NVML_ERROR_NOT_SUPPORTED;
    if (!MigEnabled(c.gpu())) return NVML_ERROR_INVALID_ARGUMENT;
    const std::vector<MigInstance> sorted = SortedMigLayout(c.gpu().mig->instances);
    if (index >= sorted.size()) return NVML_ERROR_NOT_FOUND;
    *mig = MigHandleFor(c.index, sorted[index].gpu_instance, sorted[index].compute_instance);
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device,
                                                            unsigned int* is_mig) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (is_mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = c.mig ? 1 : 0;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t device,
                                                                             nvmlDevice_t* parent) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (parent == nullptr || !c.mig) return NVML_ERROR_INVALID_ARGUMENT;
    *parent = HandleFor(c.index);
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (id == nullptr || !c.mig) return NVML_ERROR_INVALID_ARGUMENT;
    *id = c.mig->gpu_instance;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device,
                                                               unsigned int* id) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (id == nullptr || !c.mig) return NVML_ERROR_INVALID_ARGUMENT;
    *id = c.mig->compute_instance;
    return NVML_SUCCESS;
  });
}

// A MIG device's profile, or the whole GPU (all slices, all memory) of a product with a MIG
// table; NOT_SUPPORTED for GPUs sim/mig.h has no table for.
GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device,
                                                           nvmlDeviceAttributes_t* attributes) {
  return OnAnyDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (attributes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (c.gpu().mig_product == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    const MigProfile& p = c.mig ? *c.mig_profile : c.gpu().mig_product->Full();
    attributes->multiprocessorCount =
        c.mig ? p.multiprocessors : c.gpu().mig_product->multiprocessors;
    attributes->sharedCopyEngineCount = p.copy_engines;
    attributes->sharedDecoderCount = p.decoders;
    attributes->sharedEncoderCount = p.encoders;
    attributes->sharedJpegCount = p.jpegs;
    attributes->sharedOfaCount = p.ofas;
    attributes->gpuInstanceSliceCount = c.mig ? p.slices : kMigComputeSlices;
    attributes->computeInstanceSliceCount = c.mig ? p.slices : kMigComputeSlices;
    attributes->memorySizeMB = c.mig ? p.memory_mib : c.gpu().memory_total_mib;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, int* mode) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = c.gpu().virtualization_mode;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device,
                                                          nvmlGpmSupport_t* support) {
  return OnDevice(device, [&](const DeviceCall& c) -> nvmlReturn_t {
    if (support == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = c.gpu().gpm.has_value() ? 1 : 0;
    return NVML_SUCCESS;
  });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t* sample) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().GpmSampleAlloc(sample); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().GpmSampleFree(sample); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().GpmSampleGet(device, sample); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpu_instance,
                                                    nvmlGpmSample_t sample) {
  return Guarded(
      [&]() -> nvmlReturn_t { return Sim().GpmMigSampleGet(device, gpu_instance, sample); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t* metrics) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().GpmMetricsGet(metrics); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().EventSetCreate(set); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                         unsigned long long types,
                                                         nvmlEventSet_t set) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().RegisterEvents(device, types, set); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                                    unsigned int timeout_ms) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().EventSetWait(set, data, timeout_ms); });
}

GPULET_NVML_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  return Guarded([&]() -> nvmlReturn_t { return Sim().EventSetFree(set); });
}

#undef GPULET_NVML_EXPORT

}  // namespace gpulet::sim
