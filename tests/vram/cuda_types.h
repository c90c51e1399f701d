/* The CUDA driver API's types and structures the driver stand-in (standin_cuda.c) and the
 * test applications (vram_app.c) share, written from cuda.h 12.6's documented layout (no
 * NVIDIA header is needed): two sides of one ABI, so declared once. */
#ifndef GPULET_TESTS_VRAM_CUDA_TYPES_H_
#define GPULET_TESTS_VRAM_CUDA_TYPES_H_

#include <stddef.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned int CUdeviceptr_v1;
typedef unsigned long long CUmemGenericAllocationHandle;

/* CUmemAllocationProp: type, requested handle types, location {type, id}, ... */
struct mem_prop {
  int type;
  int handle_types;
  struct {
    int type; /* 1 device, 2 host, 3 host NUMA */
    int id;
  } location;
  void* win32;
  unsigned char flags[8];
};

/* CUDA_ARRAY_DESCRIPTOR and CUDA_ARRAY3D_DESCRIPTOR (the _v2, size_t forms). */
struct desc2 {
  size_t w, h;
  int format;
  unsigned ch;
};
struct desc3 {
  size_t w, h, d;
  int format;
  unsigned ch, flags;
};

/* CUDA_EXTERNAL_MEMORY_HANDLE_DESC: the size is at offset 24. */
struct ext_desc {
  int type;
  union {
    int fd;
    struct {
      void* h;
      const void* n;
    } w;
    const void* sci;
  } handle;
  unsigned long long size;
  unsigned flags;
  unsigned reserved[16];
};

#endif /* GPULET_TESTS_VRAM_CUDA_TYPES_H_ */
