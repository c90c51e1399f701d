// Hand-written declarations of the slice of the NVML C ABI that gpulet uses.
//
// gpulet never includes NVIDIA's nvml.h and never links libnvidia-ml: the library is
// dlopen()ed at run time (see nvml_library.h) and every function is looked up by its exact
// versioned symbol name. The types, enum values and struct layouts below were written from
// the documented ABI (LP64, see ../shared/reference/nvml-metrics-health.md section 2); the
// simulator in sim/ implements the same declarations, so both sides agree by construction.
//
// Thread-safety: plain declarations, no state.
#ifndef GPULET_GPU_NVML_API_H_
#define GPULET_GPU_NVML_API_H_

#include <cstddef>
#include <cstdint>

extern "C" {

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;

// nvmlReturn_t values.
enum : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
  NVML_ERROR_UNKNOWN = 999,
};

// Buffer sizes (bytes, including the terminating NUL).
enum : unsigned {
  NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96,
  NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96,
  NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80,
  NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE = 80,
  NVML_DEVICE_SERIAL_BUFFER_SIZE = 30,
  NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE = 32,
  NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32,
};

// nvmlDeviceArchitecture_t.
enum : unsigned {
  NVML_DEVICE_ARCH_KEPLER = 2,
  NVML_DEVICE_ARCH_MAXWELL = 3,
  NVML_DEVICE_ARCH_PASCAL = 4,
  NVML_DEVICE_ARCH_VOLTA = 5,
  NVML_DEVICE_ARCH_TURING = 6,
  NVML_DEVICE_ARCH_AMPERE = 7,
  NVML_DEVICE_ARCH_ADA = 8,
  NVML_DEVICE_ARCH_HOPPER = 9,
  NVML_DEVICE_ARCH_BLACKWELL = 10,
  NVML_DEVICE_ARCH_RUBIN = 13,
  NVML_DEVICE_ARCH_UNKNOWN = 0xffffffffu,
};

// nvmlBrandType_t (subset).
enum : int {
  NVML_BRAND_UNKNOWN = 0,
  NVML_BRAND_QUADRO = 1,
  NVML_BRAND_TESLA = 2,
  NVML_BRAND_NVS = 3,
  NVML_BRAND_GRID = 4,
  NVML_BRAND_GEFORCE = 5,
  NVML_BRAND_TITAN = 6,
  NVML_BRAND_NVIDIA = 14,
};

// nvmlTemperatureSensors_t, nvmlClockType_t, nvmlEnableState_t, nvmlMemoryErrorType_t,
// nvmlEccCounterType_t.
enum : int { NVML_TEMPERATURE_GPU = 0 };
enum : int { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_CLOCK_VIDEO = 3 };
enum : int { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 };
enum : int { NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };
enum : int { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 };

// Event type bits.
constexpr unsigned long long nvmlEventTypeSingleBitEccError = 0x1ULL;
constexpr unsigned long long nvmlEventTypeDoubleBitEccError = 0x2ULL;
constexpr unsigned long long nvmlEventTypePState = 0x4ULL;
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8ULL;
constexpr unsigned long long nvmlEventTypeGpuUnavailableError = 0x4000ULL;

// Clock event (throttle) reason bits.
constexpr unsigned long long nvmlClocksEventReasonGpuIdle = 0x1ULL;
constexpr unsigned long long nvmlClocksEventReasonApplicationsClocksSetting = 0x2ULL;
constexpr unsigned long long nvmlClocksEventReasonSwPowerCap = 0x4ULL;
constexpr unsigned long long nvmlClocksEventReasonHwSlowdown = 0x8ULL;
constexpr unsigned long long nvmlClocksEventReasonSyncBoost = 0x10ULL;
constexpr unsigned long long nvmlClocksEventReasonSwThermalSlowdown = 0x20ULL;
constexpr unsigned long long nvmlClocksEventReasonHwThermalSlowdown = 0x40ULL;
constexpr unsigned long long nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80ULL;
constexpr unsigned long long nvmlClocksEventReasonDisplayClockSetting = 0x100ULL;

// Field ids for nvmlDeviceGetFieldValues.
enum : unsigned {
  NVML_FI_DEV_MEMORY_TEMP = 82,
  NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83,
  // Number of NVLinks the GPU has (0, or NOT_SUPPORTED, without NVLink).
  NVML_FI_DEV_NVLINK_LINK_COUNT = 91,
  NVML_FI_DEV_PCIE_REPLAY_COUNTER = 94,
  // NVLink data payload sent / received, KiB since the driver loaded; scopeId UINT_MAX sums
  // every link.
  NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138,
  NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139,
  // The recovery the driver wants for the GPU now (nvmlDeviceGpuRecoveryAction_t); drivers
  // from R570 report it.
  NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230,
};

// nvmlDeviceGpuRecoveryAction_t: the values NVML_FI_DEV_GET_GPU_RECOVERY_ACTION reports.
enum : unsigned {
  NVML_GPU_RECOVERY_ACTION_NONE = 0,
  NVML_GPU_RECOVERY_ACTION_GPU_RESET = 1,
  NVML_GPU_RECOVERY_ACTION_NODE_REBOOT = 2,
  NVML_GPU_RECOVERY_ACTION_DRAIN_P2P = 3,
  NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET = 4,
};

// NVLink: nvmlNvLinkErrorCounter_t and nvmlIntNvLinkDeviceType_t. NVML_NVLINK_MAX_LINKS is
// 18 since Hopper (NVLink 4 and 5).
enum : unsigned { NVML_NVLINK_MAX_LINKS = 18 };
enum : int {
  NVML_NVLINK_ERROR_DL_REPLAY = 0,
  NVML_NVLINK_ERROR_DL_RECOVERY = 1,
  NVML_NVLINK_ERROR_DL_CRC_FLIT = 2,
  NVML_NVLINK_ERROR_DL_CRC_DATA = 3,
};
enum : int {
  NVML_NVLINK_DEVICE_TYPE_GPU = 0,
  NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1,
  NVML_NVLINK_DEVICE_TYPE_SWITCH = 2,
  NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF,
};

// nvmlGpuVirtualizationMode_t.
enum : int {
  NVML_GPU_VIRTUALIZATION_MODE_NONE = 0,
  NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH = 1,
  NVML_GPU_VIRTUALIZATION_MODE_VGPU = 2,  // this machine is a vGPU guest
  NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU = 3,
  NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA = 4,
};

// nvmlDeviceGetMigMode's modes.
enum : unsigned { NVML_DEVICE_MIG_DISABLE = 0, NVML_DEVICE_MIG_ENABLE = 1 };
// nvmlProcessInfo_t / nvmlEventData_t instance ids when the process or event is not tied to a
// MIG instance.
constexpr unsigned NVML_INVALID_INSTANCE_ID = 0xFFFFFFFFu;

// GPU Performance Monitoring (GPM, Hopper and newer): nvmlGpmMetricId_t values gpulet reads.
// Utilisations are percent (0.0-100.0), rates MiB per second, both averaged over the time
// between the two samples given to nvmlGpmMetricsGet.
enum : unsigned {
  NVML_GPM_METRIC_GRAPHICS_UTIL = 1,
  NVML_GPM_METRIC_SM_UTIL = 2,
  NVML_GPM_METRIC_SM_OCCUPANCY = 3,
  NVML_GPM_METRIC_INTEGER_UTIL = 4,
  NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5,
  NVML_GPM_METRIC_DFMA_TENSOR_UTIL = 6,
  NVML_GPM_METRIC_HMMA_TENSOR_UTIL = 7,
  NVML_GPM_METRIC_IMMA_TENSOR_UTIL = 9,
  NVML_GPM_METRIC_DRAM_BW_UTIL = 10,
  NVML_GPM_METRIC_FP64_UTIL = 11,
  NVML_GPM_METRIC_FP32_UTIL = 12,
  NVML_GPM_METRIC_FP16_UTIL = 13,
  NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20,
  NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21,
  NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC = 60,
  NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = 61,
};
// The metrics[] capacity of nvmlGpmMetricsGet_t. NVML reads only numMetrics entries, so a
// capacity at least as large as any header's is safe with every driver.
constexpr unsigned NVML_GPM_METRIC_MAX = 333;
constexpr unsigned NVML_GPM_METRICS_GET_VERSION = 1;
constexpr unsigned NVML_GPM_SUPPORT_VERSION = 1;

// nvmlValueType_t.
enum : int {
  NVML_VALUE_TYPE_DOUBLE = 0,
  NVML_VALUE_TYPE_UNSIGNED_INT = 1,
  NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
  NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
  NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
  NVML_VALUE_TYPE_SIGNED_INT = 5,
};

typedef struct nvmlPciInfo_st {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;     // (device id << 16) | vendor id
  unsigned int pciSubSystemId;  // (subsystem id << 16) | subsystem vendor id
  char busId[32];               // "%08X:%02X:%02X.0"
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;  // includes reserved memory in this (v1) struct
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
  unsigned int version;  // nvmlMemory_v2 below
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;
constexpr unsigned int nvmlMemory_v2 =
    static_cast<unsigned int>(sizeof(nvmlMemory_v2_t)) | (2u << 24);

typedef struct nvmlUtilization_st {
  unsigned int gpu;     // percent
  unsigned int memory;  // percent of time memory was read or written
} nvmlUtilization_t;

// The layout used by the _v2 and _v3 process queries.
typedef struct nvmlProcessInfo_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // bytes; NVML_VALUE_NOT_AVAILABLE when unknown
  unsigned int gpuInstanceId;        // 0xFFFFFFFF when not MIG
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

// nvmlDeviceGetProcessUtilization's samples (Maxwell and newer): one per process that ran
// during a sample period, utilisations in percent of that period. Layout from the NVML API
// reference (structnvmlProcessUtilizationSample__t) and NVIDIA's nvml.h: 32 bytes on LP64,
// timeStamp at offset 8.
typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp;  // CPU time, microseconds since the epoch
  unsigned int smUtil;           // SM (3D/compute)
  unsigned int memUtil;          // frame buffer memory
  unsigned int encUtil;          // video encoder
  unsigned int decUtil;          // video decoder
} nvmlProcessUtilizationSample_t;

typedef struct nvmlEventData_st {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID for XidCriticalError, 999 for an unknown XID
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

typedef union nvmlValue_st {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
} nvmlValue_t;

typedef struct nvmlFieldValue_st {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
} nvmlFieldValue_t;

// nvmlDeviceGetAttributes_v2: what a MIG device handle (or a whole GPU) has. For a MIG device,
// the slice counts and memory name its profile ("1g.18gb", "1c.2g.35gb").
typedef struct nvmlDeviceAttributes_st {
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  unsigned int gpuInstanceSliceCount;
  unsigned int computeInstanceSliceCount;
  unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

// nvmlDeviceSetMemoryLimits_v1 / nvmlDeviceGetMemoryLimits_v1 (drivers r615 and later, CUDA
// 13.4 NVML, with the kernel's dmem cgroup controller): the VRAM limits of the processes of
// one cgroup on one GPU, held by the driver itself. nameSpace is the cgroup's directory under
// the cgroup2 mount. No limit: softLimit 0 and hardLimit NVML_DEVICE_MEMORY_LIMIT_MAX. Layout
// from NVIDIA's nvml.h (CUDA 13.4) and the NVML API reference, structnvmlSetMemoryLimits__v1__t:
// 24 and 32 bytes on LP64.
typedef struct {
  const char* nameSpace;
  unsigned long long softLimit;
  unsigned long long hardLimit;
} nvmlSetMemoryLimits_v1_t;
typedef struct {
  const char* nameSpace;
  unsigned long long softLimit;
  unsigned long long hardLimit;
  unsigned long long currentUsed;
} nvmlGetMemoryLimits_v1_t;
#define NVML_DEVICE_MEMORY_LIMIT_MAX 0xFFFFFFFFFFFFFFFFULL

typedef struct nvmlGpmSample_st* nvmlGpmSample_t;  // opaque, from nvmlGpmSampleAlloc

typedef struct nvmlGpmMetric_st {
  unsigned int metricId;    // in: NVML_GPM_METRIC_*
  nvmlReturn_t nvmlReturn;  // out: this metric's status; value is valid on NVML_SUCCESS
  double value;             // out
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;  // out, may be null
} nvmlGpmMetric_t;

typedef struct nvmlGpmMetricsGet_st {
  unsigned int version;  // NVML_GPM_METRICS_GET_VERSION
  unsigned int numMetrics;
  nvmlGpmSample_t sample1;  // the earlier sample
  nvmlGpmSample_t sample2;  // the later sample
  nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

typedef struct nvmlGpmSupport_st {
  unsigned int version;  // NVML_GPM_SUPPORT_VERSION
  unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

}  // extern "C"

static_assert(sizeof(nvmlGpmMetric_t) == 40, "nvmlGpmMetric_t layout");
static_assert(offsetof(nvmlGpmMetricsGet_t, metrics) == 24, "nvmlGpmMetricsGet_t layout");
static_assert(sizeof(nvmlDeviceAttributes_t) == 40, "nvmlDeviceAttributes_t layout");
static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");
static_assert(nvmlMemory_v2 == 0x02000028u, "nvmlMemory_v2 version word");
static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t layout");
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32,
              "nvmlProcessUtilizationSample_t layout");
static_assert(offsetof(nvmlProcessUtilizationSample_t, timeStamp) == 8,
              "nvmlProcessUtilizationSample_t layout");
static_assert(offsetof(nvmlProcessUtilizationSample_t, smUtil) == 16,
              "nvmlProcessUtilizationSample_t layout");
static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t layout");
static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t layout");
static_assert(offsetof(nvmlFieldValue_t, value) == 32, "nvmlFieldValue_t layout");

// Function-pointer types, one per symbol gpulet resolves. The symbol names are in
// nvml_library.cc's table.
namespace gpulet::gpu {
using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using ErrorStringFn = const char* (*)(nvmlReturn_t);
using SystemGetStringFn = nvmlReturn_t (*)(char*, unsigned int);
using SystemGetIntFn = nvmlReturn_t (*)(int*);
using GetCountFn = nvmlReturn_t (*)(unsigned int*);
using GetHandleByIndexFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using GetHandleByStringFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
using DeviceGetStringFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using DeviceGetUintFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);
using DeviceGetUllFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*);
using DeviceGetIntFn = nvmlReturn_t (*)(nvmlDevice_t, int*);
using DeviceGetPciInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*);
using DeviceGetMemoryInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using DeviceGetMemoryInfoV2Fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*);
using DeviceGetUtilizationFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);
using DeviceGetTemperatureFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*);
using DeviceGetClockInfoFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*);
using DeviceGetCudaCapFn = nvmlReturn_t (*)(nvmlDevice_t, int*, int*);
using DeviceGetCodecUtilFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*);
using DeviceGetProcessesFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
// nvmlDeviceGetProcessUtilization(device, utilization, processSamplesCount, lastSeenTimeStamp):
// only samples newer than lastSeenTimeStamp (0: all the driver holds); a null buffer asks
// for the count (INSUFFICIENT_SIZE); NOT_FOUND: no sample since lastSeenTimeStamp.
using DeviceGetProcessUtilizationFn = nvmlReturn_t (*)(nvmlDevice_t,
                                                       nvmlProcessUtilizationSample_t*,
                                                       unsigned int*, unsigned long long);
using DeviceGetRemappedRowsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*,
                                                 unsigned int*, unsigned int*);
using DeviceGetEccErrorsFn = nvmlReturn_t (*)(nvmlDevice_t, int, int, unsigned long long*);
using DeviceGetFieldValuesFn = nvmlReturn_t (*)(nvmlDevice_t, int, nvmlFieldValue_t*);
using DeviceGetLinkUintFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, unsigned int*);
using DeviceGetLinkIntFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, int*);
using DeviceGetLinkErrorFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, int, unsigned long long*);
using DeviceGetMigModeFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*);
using DeviceSetMemoryLimitsFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlSetMemoryLimits_v1_t*);
using DeviceGetMemoryLimitsFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlGetMemoryLimits_v1_t*);
// MIG: nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetGpuInstanceId,
// nvmlDeviceGetComputeInstanceId and nvmlDeviceIsMigDeviceHandle are DeviceGetUintFn.
using DeviceGetMigDeviceHandleByIndexFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                           nvmlDevice_t*);
using DeviceGetAttributesFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlDeviceAttributes_t*);
using GpmMigSampleGetFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlGpmSample_t);
using GpmQueryDeviceSupportFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlGpmSupport_t*);
using GpmSampleAllocFn = nvmlReturn_t (*)(nvmlGpmSample_t*);
using GpmSampleFreeFn = nvmlReturn_t (*)(nvmlGpmSample_t);
using GpmSampleGetFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlGpmSample_t);
using GpmMetricsGetFn = nvmlReturn_t (*)(nvmlGpmMetricsGet_t*);
using EventSetCreateFn = nvmlReturn_t (*)(nvmlEventSet_t*);
using EventSetFreeFn = nvmlReturn_t (*)(nvmlEventSet_t);
using DeviceRegisterEventsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
using EventSetWaitFn = nvmlReturn_t (*)(nvmlEventSet_t, nvmlEventData_t*, unsigned int);
}  // namespace gpulet::gpu

#endif  // GPULET_GPU_NVML_API_H_
