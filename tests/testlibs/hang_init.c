/* A fake libnvidia-ml whose nvmlInit_v2 never returns, like an NVML stuck on a wedged GPU
 * or driver. gpulet must time the call out rather than hang its whole node agent. The
 * other entry points exist and behave, so the hang is the only thing wrong. */
#include <stddef.h>
#include <unistd.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1

int nvmlInit_v2(void) {
  /* pause() returns after each caught signal; loop so only a fatal signal ends the call. */
  for (;;) pause();
  return NVML_SUCCESS;
}

int nvmlInit(void) { return nvmlInit_v2(); }

int nvmlShutdown(void) { return NVML_SUCCESS; }

int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (count != NULL) *count = 0;
  return NVML_ERROR_UNINITIALIZED;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  (void)index;
  if (device != NULL) *device = NULL;
  return NVML_ERROR_UNINITIALIZED;
}

const char* nvmlErrorString(int result) {
  return result == NVML_SUCCESS ? "Success" : "Uninitialized";
}
