/*
 * cuda_drv.c - loading the CUDA driver at run time (cuda_drv.h).
 *
 * The library is not linked against CUDA, so one libxfer starts on a
 * machine with neither the toolkit nor a driver; device registrations
 * there answer XFER_ERR_NOT_SUPPORTED.  The driver API (libcuda.so.1, the
 * library the NVIDIA driver installs) is used rather than the runtime
 * (libcudart): it is the one library present wherever a GPU is usable,
 * its ABI is stable across toolkit versions, and it needs no toolkit of
 * the same version as the application's.
 *
 * What must stay true: the load happens once (pthread_once); the table is
 * immutable afterwards, so any thread may read it without a lock.
 */
#include "cuda_drv.h"

#include <pthread.h>
#include <stdbool.h>

#include "xfer/errors.h"

#if XFER_HAVE_CUDA
#include <dlfcn.h>

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static xfer_cuda_api api;
static bool loaded;

/* Retained primary contexts, one per ordinal (at most 64 devices). */
#define MAX_DEVS 64
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static xfer_cu_ctx ctxs[MAX_DEVS];

/* dlsym into a function pointer: POSIX guarantees the conversion works. */
static bool sym(void *h, const char *name, void *slot)
{
    void *f = dlsym(h, name);
    if (!f)
        return false;
    *(void **)slot = f;
    return true;
}

static void load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    xfer_cu_result (*init)(unsigned) = NULL;
    xfer_cu_result (*count)(int *) = NULL;
    bool ok = sym(h, "cuInit", &init) &&
              sym(h, "cuDeviceGetCount", &count) &&
              sym(h, "cuDeviceGet", &api.DeviceGet) &&
              sym(h, "cuDevicePrimaryCtxRetain", &api.DevicePrimaryCtxRetain) &&
              sym(h, "cuDevicePrimaryCtxRelease_v2",
                  &api.DevicePrimaryCtxRelease) &&
              sym(h, "cuCtxSetCurrent", &api.CtxSetCurrent) &&
              sym(h, "cuPointerGetAttribute", &api.PointerGetAttribute) &&
              sym(h, "cuMemcpyDtoHAsync_v2", &api.MemcpyDtoHAsync) &&
              sym(h, "cuMemcpyHtoDAsync_v2", &api.MemcpyHtoDAsync) &&
              sym(h, "cuStreamCreate", &api.StreamCreate) &&
              sym(h, "cuStreamDestroy_v2", &api.StreamDestroy) &&
              sym(h, "cuStreamSynchronize", &api.StreamSynchronize) &&
              sym(h, "cuStreamAddCallback", &api.StreamAddCallback) &&
              sym(h, "cuStreamWaitEvent", &api.StreamWaitEvent) &&
              sym(h, "cuEventQuery", &api.EventQuery) &&
              sym(h, "cuMemHostAlloc", &api.MemHostAlloc) &&
              sym(h, "cuMemFreeHost", &api.MemFreeHost);
    int n = 0;
    if (!ok || init(0) != 0 || count(&n) != 0 || n <= 0) {
        /* a driver without a usable device: as if there were none (the
         * handle stays open; unloading a driver is never safe) */
        return;
    }
    api.ndevices = n;
    loaded = true;
}

const xfer_cuda_api *xfer_cuda_get(void)
{
    pthread_once(&load_once, load);
    return loaded ? &api : NULL;
}

int xfer_cuda_use(int ordinal)
{
    const xfer_cuda_api *a = xfer_cuda_get();
    int rc = XFER_ERR_NOT_SUPPORTED;
    if (!a || ordinal < 0 || ordinal >= a->ndevices || ordinal >= MAX_DEVS)
        return rc;
    pthread_mutex_lock(&ctx_mu);
    if (!ctxs[ordinal]) {
        xfer_cu_device d;
        xfer_cu_ctx c = NULL;
        if (a->DeviceGet(&d, ordinal) == 0 &&
            a->DevicePrimaryCtxRetain(&c, d) == 0)
            ctxs[ordinal] = c;
    }
    xfer_cu_ctx c = ctxs[ordinal];
    pthread_mutex_unlock(&ctx_mu);
    if (c && a->CtxSetCurrent(c) == 0)
        rc = 0;
    return rc;
}

#else /* a build without the cuda feature */

const xfer_cuda_api *xfer_cuda_get(void)
{
    return NULL;
}

int xfer_cuda_use(int ordinal)
{
    (void)ordinal;
    return XFER_ERR_NOT_SUPPORTED;
}

#endif
