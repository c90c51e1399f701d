/* The source of a fake libnvidia-ml that needs a glibc no machine has. It is an ordinary,
 * well-behaved NVML-shaped library; what matters is that it calls into libc, so its
 * .gnu.version_r needs a GLIBC_2.x version from libc.so.6. After the build,
 * patch_glibc_need rewrites that need to GLIBC_9.x, which makes dlopen() fail with
 * "version `GLIBC_9...' not found" and gpulet's ELF check refuse it beforehand. */
#include <stdio.h>
#include <stdlib.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1

static int g_initialized;

int nvmlInit_v2(void) {
  /* getenv() is an external libc call the compiler cannot fold away. */
  if (getenv("GPULET_TESTLIB_FAIL_INIT") != NULL) return NVML_ERROR_UNINITIALIZED;
  g_initialized = 1;
  return NVML_SUCCESS;
}

int nvmlInit(void) { return nvmlInit_v2(); }

int nvmlShutdown(void) {
  if (!g_initialized) return NVML_ERROR_UNINITIALIZED;
  g_initialized = 0;
  return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!g_initialized) return NVML_ERROR_UNINITIALIZED;
  if (count != NULL) *count = 0;
  return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  (void)index;
  if (device != NULL) *device = NULL;
  return NVML_ERROR_UNINITIALIZED;
}

int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (!g_initialized) return NVML_ERROR_UNINITIALIZED;
  if (version == NULL || length == 0) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  snprintf(version, length, "%s", "999.99");
  return NVML_SUCCESS;
}

const char* nvmlErrorString(int result) {
  static const char* const kNames[] = {"Success", "Uninitialized", "Invalid Argument"};
  if (result >= 0 && (size_t)result < sizeof(kNames) / sizeof(kNames[0])) return kNames[result];
  return "Unknown Error";
}
