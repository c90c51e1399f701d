// The CUDA driver API and NVML types, values and signatures the enforcement library hooks,
// written from the public headers' documented ABI (cuda.h and nvml.h of CUDA 12.6, the
// driver API reference): no NVIDIA header is needed to build it. Names follow the headers;
// `_v1` marks the 32-bit ABI that the unsuffixed symbols still export.
//
// Thread-safety: declarations only.
#ifndef GPULET_VRAMLIB_CUDA_ABI_H_
#define GPULET_VRAMLIB_CUDA_ABI_H_

#include <stddef.h>
#include <stdint.h>

namespace gpulet::vramlib {

using CUresult = int;
inline constexpr CUresult kCudaSuccess = 0;
inline constexpr CUresult kCudaErrorInvalidValue = 1;
inline constexpr CUresult kCudaErrorOutOfMemory = 2;

using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUdeviceptr_v1 = unsigned int;
using CUstream = void*;
using CUmemoryPool = void*;
using CUarray = void*;
using CUmipmappedArray = void*;
using CUexternalMemory = void*;
using CUmemGenericAllocationHandle = unsigned long long;
using cuuint64_t = uint64_t;

// CUmemLocationType: only DEVICE memory is VRAM; HOST and HOST_NUMA (CUDA 12.2+) and the
// kinds CUDA 13 adds are not counted.
inline constexpr int kMemLocationDevice = 1;

struct CUmemLocation {
  int type;
  int id;
};
struct CUmemAllocationProp {
  int type;                  // CUmemAllocationType
  int requestedHandleTypes;  // CUmemAllocationHandleType
  CUmemLocation location;
  void* win32HandleMetaData;
  unsigned char allocFlags[8];
};
static_assert(offsetof(CUmemAllocationProp, location) == 8);

// CUarray_format; the element size of a format this table lacks is taken as 4 bytes per
// channel, the widest of the formats below, so that an array is never counted short.
struct CUDA_ARRAY_DESCRIPTOR {
  size_t Width;
  size_t Height;
  int Format;
  unsigned int NumChannels;
};
struct CUDA_ARRAY_DESCRIPTOR_v1 {
  unsigned int Width;
  unsigned int Height;
  int Format;
  unsigned int NumChannels;
};
struct CUDA_ARRAY3D_DESCRIPTOR {
  size_t Width;
  size_t Height;
  size_t Depth;
  int Format;
  unsigned int NumChannels;
  unsigned int Flags;
};
struct CUDA_ARRAY3D_DESCRIPTOR_v1 {
  unsigned int Width;
  unsigned int Height;
  unsigned int Depth;
  int Format;
  unsigned int NumChannels;
  unsigned int Flags;
};

struct CUDA_EXTERNAL_MEMORY_HANDLE_DESC {
  int type;
  union {
    int fd;
    struct {
      void* handle;
      const void* name;
    } win32;
    const void* nvSciBufObject;
  } handle;
  unsigned long long size;
  unsigned int flags;
  unsigned int reserved[16];
};
static_assert(offsetof(CUDA_EXTERNAL_MEMORY_HANDLE_DESC, size) == 24);

// Kernel launches (cuda.h): CUlaunchConfig's leading fields, as cuLaunchKernelEx (CUDA 12.0)
// takes them.
using CUfunction = void*;
using CUgraphExec = void*;
struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  void* attrs;
  unsigned int numAttrs;
};
static_assert(offsetof(CUlaunchConfig, hStream) == 32);

// cuGetProcAddress (CUDA 11.3-11.8: four arguments; 12.0+: cuGetProcAddress_v2, five).
using CUdriverProcAddressQueryResult = int;

// NVML.
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
inline constexpr nvmlReturn_t kNvmlSuccess = 0;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlMemory_v2_t {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};

}  // namespace gpulet::vramlib

#endif  // GPULET_VRAMLIB_CUDA_ABI_H_
