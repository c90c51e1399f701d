/* A fake libnvidia-ml whose nvmlInit_v2 crashes with SIGSEGV, as a real NVML did when the
 * host's libraries were bind-mounted into a container with an older glibc. gpulet must
 * survive it (probe in a child process) and report it. The other entry points exist and
 * behave, so the crash is the only thing wrong with this library. */
#include <signal.h>
#include <stddef.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1

/* A null pointer the compiler cannot see through: a literal NULL dereference may be
 * turned into a trap instruction (SIGILL) instead of the SIGSEGV this library promises. */
static int* volatile g_null_pointer = NULL;

int nvmlInit_v2(void) {
  *g_null_pointer = 1;
  raise(SIGSEGV); /* only reached if address 0 was somehow mapped */
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
