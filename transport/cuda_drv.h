/*
 * cuda_drv.h - the CUDA driver API as the library uses it, loaded with
 * dlopen("libcuda.so.1") at the first use (docs/design.md "Device memory:
 * why the driver is loaded, not linked").  Internal.
 *
 * The few driver types are declared here (ABI-stable since CUDA 4: opaque
 * handles, int results, a 64-bit device pointer), so nothing of the CUDA
 * toolkit is needed to build the library; a build without the `cuda`
 * feature compiles xfer_cuda_get() to NULL.
 *
 * What must stay true: xfer_cuda_get() never blocks after the first call
 * returned and answers the same for the life of the process; a stream
 * callback (cb of stream_add_callback) runs on a driver thread and may not
 * call into CUDA.
 */
#ifndef XFER_CUDA_DRV_H
#define XFER_CUDA_DRV_H

#include <stddef.h>
#include <stdint.h>

typedef int xfer_cu_result;                 /* CUresult: 0 is success */
typedef int xfer_cu_device;                 /* CUdevice */
typedef struct xfer_cu_ctx_st *xfer_cu_ctx; /* CUcontext */
typedef struct xfer_cu_stream_st *xfer_cu_stream; /* CUstream */
typedef struct xfer_cu_event_st *xfer_cu_event;   /* CUevent */
typedef unsigned long long xfer_cu_ptr;     /* CUdeviceptr */
typedef void (*xfer_cu_stream_cb)(xfer_cu_stream s, xfer_cu_result status,
                                  void *ud);

#define XFER_CU_ERROR_NOT_READY 600
#define XFER_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define XFER_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define XFER_CU_MEMORYTYPE_DEVICE 2
#define XFER_CU_MEMHOSTALLOC_PORTABLE 1u
#define XFER_CU_STREAM_NON_BLOCKING 1u

typedef struct xfer_cuda_api {
    int ndevices;
    xfer_cu_result (*DeviceGet)(xfer_cu_device *d, int ordinal);
    xfer_cu_result (*DevicePrimaryCtxRetain)(xfer_cu_ctx *c, xfer_cu_device d);
    xfer_cu_result (*DevicePrimaryCtxRelease)(xfer_cu_device d);
    xfer_cu_result (*CtxSetCurrent)(xfer_cu_ctx c);
    xfer_cu_result (*PointerGetAttribute)(void *data, int attr, xfer_cu_ptr p);
    xfer_cu_result (*MemcpyDtoHAsync)(void *dst, xfer_cu_ptr src, size_t n,
                                      xfer_cu_stream s);
    xfer_cu_result (*MemcpyHtoDAsync)(xfer_cu_ptr dst, const void *src,
                                      size_t n, xfer_cu_stream s);
    xfer_cu_result (*StreamCreate)(xfer_cu_stream *s, unsigned flags);
    xfer_cu_result (*StreamDestroy)(xfer_cu_stream s);
    xfer_cu_result (*StreamSynchronize)(xfer_cu_stream s);
    xfer_cu_result (*StreamAddCallback)(xfer_cu_stream s, xfer_cu_stream_cb cb,
                                        void *ud, unsigned flags);
    xfer_cu_result (*StreamWaitEvent)(xfer_cu_stream s, xfer_cu_event ev,
                                      unsigned flags);
    xfer_cu_result (*EventQuery)(xfer_cu_event ev);
    xfer_cu_result (*MemHostAlloc)(void **p, size_t n, unsigned flags);
    xfer_cu_result (*MemFreeHost)(void *p);
} xfer_cuda_api;

/* The loaded driver, or NULL: a build without CUDA, no libcuda.so.1, a
 * symbol missing, cuInit failed, or no device.  Loaded once per process
 * (thread-safe); never unloaded.  Any thread. */
const xfer_cuda_api *xfer_cuda_get(void);

/* Make ordinal's primary context current on the calling thread (retained
 * once per ordinal for the life of the process).  0 or
 * XFER_ERR_NOT_SUPPORTED. */
int xfer_cuda_use(int ordinal);

#endif /* XFER_CUDA_DRV_H */
