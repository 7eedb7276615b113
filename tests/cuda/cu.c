/*
 * tests/cuda/cu.c - the driver calls of cu.h, through dlopen.
 */
#include "cu.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*init_fn)(unsigned);
typedef int (*count_fn)(int *);
typedef int (*get_fn)(int *, int);
typedef int (*name_fn)(char *, int, int);
typedef int (*retain_fn)(void **, int);
typedef int (*setcur_fn)(void *);

static void *lib;
static void *ctx;
static setcur_fn set_current;

static int sym(void *fn, size_t size, const char *name)
{
    void *p = dlsym(lib, name);
    memcpy(fn, &p, size);
    return p ? 0 : -1;
}
#define SYM(f, name) sym(&(f), sizeof(f), name)

int cu_open(cu_api *api, char *why, size_t cap)
{
    memset(api, 0, sizeof *api);
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, cap, "no CUDA driver (libcuda.so.1 not loadable)");
        return 77;
    }
    init_fn init;
    count_fn count;
    get_fn get;
    name_fn name;
    retain_fn retain;
    if (SYM(init, "cuInit") || SYM(count, "cuDeviceGetCount") ||
        SYM(get, "cuDeviceGet") || SYM(name, "cuDeviceGetName") ||
        SYM(retain, "cuDevicePrimaryCtxRetain") ||
        SYM(set_current, "cuCtxSetCurrent") ||
        SYM(api->MemAlloc, "cuMemAlloc_v2") ||
        SYM(api->MemFree, "cuMemFree_v2") ||
        SYM(api->MemAllocHost, "cuMemAllocHost_v2") ||
        SYM(api->MemFreeHost, "cuMemFreeHost") ||
        SYM(api->MemcpyHtoD, "cuMemcpyHtoD_v2") ||
        SYM(api->MemcpyDtoH, "cuMemcpyDtoH_v2") ||
        SYM(api->MemsetD8, "cuMemsetD8_v2") ||
        SYM(api->CtxSynchronize, "cuCtxSynchronize")) {
        snprintf(why, cap, "libcuda.so.1 lacks a driver API call");
        return 77;
    }
    int n = 0, dev = 0, rc = init(0);
    if (rc == 0)
        rc = count(&n);
    if (rc != 0 || n < 1) {
        snprintf(why, cap, "no CUDA device (cuInit/cuDeviceGetCount: %d, "
                 "%d devices)", rc, n);
        return 77;
    }
    if ((rc = get(&dev, 0)) != 0 || (rc = retain(&ctx, dev)) != 0 ||
        (rc = set_current(ctx)) != 0) {
        snprintf(why, cap, "CUDA device 0 unusable (CUresult %d)", rc);
        return 77;
    }
    name(api->name, (int)sizeof api->name, dev);
    return 0;
}

int cu_bind_thread(void)
{
    return set_current ? set_current(ctx) : -1;
}
