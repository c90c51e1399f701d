/* A library that is not (a usable) libnvidia-ml: it exports nvmlInit_v2, which succeeds,
 * but none of the other entry points gpulet requires (no nvmlShutdown, nvmlErrorString,
 * nvmlDeviceGetCount[_v2] or nvmlDeviceGetHandleByIndex[_v2]). gpulet must refuse it
 * with a message naming a missing symbol instead of calling through a null pointer. */

int nvmlInit_v2(void) { return 0; }

/* Something unrelated, so the library exports more than the one NVML name. */
int gpuletTestUnrelatedFunction(int x) { return x + 1; }
