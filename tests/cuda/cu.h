/*
 * tests/cuda/cu.h - the few CUDA driver calls the suite `cuda` and
 * xfer-gpu-bench make, loaded from libcuda.so.1 with dlopen (CUDA is never
 * linked: the programs build and start on a machine without it, and say
 * so).  Tests and tools only.
 */
#ifndef XFER_TEST_CU_H
#define XFER_TEST_CU_H

#include <stddef.h>
#include <stdint.h>

typedef unsigned long long cu_ptr; /* CUdeviceptr */

typedef struct cu_api {
    int (*MemAlloc)(cu_ptr *p, size_t n);
    int (*MemFree)(cu_ptr p);
    int (*MemAllocHost)(void **p, size_t n);
    int (*MemFreeHost)(void *p);
    int (*MemcpyHtoD)(cu_ptr dst, const void *src, size_t n);
    int (*MemcpyDtoH)(void *dst, cu_ptr src, size_t n);
    int (*MemsetD8)(cu_ptr dst, unsigned char v, size_t n);
    int (*CtxSynchronize)(void);
    char name[128]; /* the device's name */
} cu_api;

/* Load the driver, take device 0's primary context and make it current on
 * the calling thread.  0, or 77 with one line in why[cap] saying what is
 * missing (no libcuda.so.1, no device, the driver refused). */
int cu_open(cu_api *api, char *why, size_t cap);
/* Make device 0's primary context current on the calling thread (any
 * other thread that calls CUDA).  0 or the CUresult. */
int cu_bind_thread(void);

#endif
