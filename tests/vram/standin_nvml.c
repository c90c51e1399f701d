/* STAND-IN, NOT THE DRIVER: an NVML library (libnvidia-ml.so.1) with the calls an
 * application makes to size itself (Ollama reads NVML before cudaMemGetInfo): init, the
 * device handle, and memory info in both struct versions, from the same simulated card as
 * standin_cuda.c. The real-driver check is tests/vram/device_check.sh on a GPU machine. */
#define _GNU_SOURCE
#include <stddef.h>

#include "standin_card.h"

#define EXPORT __attribute__((visibility("default")))

typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned int version;
  unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2 };
/* NVML_STRUCT_VERSION(Memory, 2): the struct's size with the version in the top byte. */
#define NVML_MEMORY_V2 ((unsigned)(sizeof(nvmlMemory_v2_t) | (2u << 24)))
enum { RESERVED_BYTES = 512u << 20 }; /* what the driver and firmware keep */

static int g_nvml_initialized;
static char g_device;

EXPORT int nvmlInit_v2(void) {
  g_nvml_initialized = 1;
  return NVML_SUCCESS;
}
EXPORT int nvmlShutdown(void) {
  g_nvml_initialized = 0;
  return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetCount_v2(unsigned int* n) {
  if (!g_nvml_initialized) return NVML_ERROR_UNINITIALIZED;
  if (n == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  *n = 1;
  return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void** device) {
  if (!g_nvml_initialized) return NVML_ERROR_UNINITIALIZED;
  if (i != 0 || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_device;
  return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetMemoryInfo(void* device, nvmlMemory_t* m) {
  if (!g_nvml_initialized) return NVML_ERROR_UNINITIALIZED;
  if (device != &g_device || m == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  uint64_t total = total_bytes(), used = card_used();
  m->total = total;
  m->used = used;
  m->free = used < total ? total - used : 0;
  return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetMemoryInfo_v2(void* device, nvmlMemory_v2_t* m) {
  if (!g_nvml_initialized) return NVML_ERROR_UNINITIALIZED;
  if (device != &g_device || m == NULL || m->version != NVML_MEMORY_V2) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  uint64_t total = total_bytes(), used = card_used() + RESERVED_BYTES;
  m->total = total;
  m->reserved = RESERVED_BYTES;
  m->used = used;
  m->free = used < total ? total - used : 0;
  return NVML_SUCCESS;
}
