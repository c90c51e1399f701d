/* A fake libnvidia-ml whose nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED (9), what
 * the real library returns when the kernel module is not loaded. Every entry point gpulet
 * requires exists, so the only failure is the init result, which gpulet must report with
 * its NVML error string. */
#include <stddef.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_DRIVER_NOT_LOADED 9

int nvmlInit_v2(void) { return NVML_ERROR_DRIVER_NOT_LOADED; }

int nvmlInit(void) { return NVML_ERROR_DRIVER_NOT_LOADED; }

int nvmlShutdown(void) { return NVML_ERROR_UNINITIALIZED; }

int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (count != NULL) *count = 0;
  return NVML_ERROR_UNINITIALIZED;
}

int nvmlDeviceGetCount(unsigned int* count) { return nvmlDeviceGetCount_v2(count); }

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  (void)index;
  if (device != NULL) *device = NULL;
  return NVML_ERROR_UNINITIALIZED;
}

int nvmlDeviceGetHandleByIndex(unsigned int index, void** device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (version != NULL && length > 0) version[0] = '\0';
  return NVML_ERROR_UNINITIALIZED;
}

const char* nvmlErrorString(int result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}
