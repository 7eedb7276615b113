/*
 * transport/rdma_devmem.c - RDMA registrations of device memory: DMA-BUF
 * first, nvidia-peermem second (rdma_devmem.h says why and how).
 *
 * Why DMA-BUF first: it is the upstream kernel path (no out-of-tree
 * module), the MR holds a reference on the dma-buf so the GPU pages cannot
 * move under it, and it works with the open GPU kernel modules.
 * nvidia-peermem is the older path: an ordinary ibv_reg_mr that the module
 * resolves to GPU pages; taken only where DMA-BUF failed and the module is
 * loaded, and the log line says so, so an operator sees why.
 */
#include "rdma_devmem.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "xfer/errors.h"
#include "xfer/mem.h"

/* ---------------------------------------------------------------------- */
/* The real hooks: libcuda.so.1 through dlopen                             */
/* ---------------------------------------------------------------------- */

/* cuda.h's values (CUDA 12/13 driver API), without its header. */
enum {
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1,
};

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_ptr_attr_fn)(void *, int, unsigned long long);
typedef int (*cu_handle_fn)(void *, unsigned long long, size_t, int,
                            unsigned long long);
typedef int (*cu_errstr_fn)(int, const char **);

static struct {
    pthread_once_t once;
    void *lib;
    cu_ptr_attr_fn ptr_attr;
    cu_handle_fn handle;
    cu_errstr_fn errstr;
    char why[128]; /* why lib is NULL */
} cu = {.once = PTHREAD_ONCE_INIT};

/* dlsym's object pointer into a function pointer: copied, as POSIX
 * guarantees the representation, without ISO C's forbidden cast. */
static void load_sym(void *fn, size_t size, const char *name)
{
    void *p = dlsym(cu.lib, name);
    memcpy(fn, &p, size);
}

static void cu_load(void)
{
    cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu.lib) {
        snprintf(cu.why, sizeof cu.why, "libcuda.so.1 not loadable");
        return;
    }
    cu_init_fn init;
    load_sym(&init, sizeof init, "cuInit");
    load_sym(&cu.ptr_attr, sizeof cu.ptr_attr, "cuPointerGetAttribute");
    load_sym(&cu.handle, sizeof cu.handle, "cuMemGetHandleForAddressRange");
    load_sym(&cu.errstr, sizeof cu.errstr, "cuGetErrorString");
    if (!init || !cu.ptr_attr || init(0) != 0) {
        snprintf(cu.why, sizeof cu.why, "the CUDA driver did not start");
        cu.ptr_attr = NULL;
    }
}

static int real_is_device(void *ud, const void *ptr, int *dev)
{
    (void)ud;
    pthread_once(&cu.once, cu_load);
    unsigned type = 0;
    int ord = 0;
    bool device = cu.ptr_attr &&
                  cu.ptr_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                              (unsigned long long)(uintptr_t)ptr) == 0 &&
                  type == CU_MEMORYTYPE_DEVICE;
    if (device && cu.ptr_attr(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                              (unsigned long long)(uintptr_t)ptr) != 0)
        ord = 0;
    if (device)
        *dev = ord;
    return device ? 1 : 0;
}

static int real_dmabuf_fd(void *ud, void *base, size_t len, int *fd,
                          char *why, size_t cap)
{
    (void)ud;
    pthread_once(&cu.once, cu_load);
    int out = -1, rc = -1;
    if (!cu.handle) {
        snprintf(why, cap, "%s", cu.lib ? "the driver has no "
                 "cuMemGetHandleForAddressRange (older than CUDA 11.7)"
                 : cu.why);
        goto out;
    }
    rc = cu.handle(&out, (unsigned long long)(uintptr_t)base, len,
                   CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (rc != 0) {
        const char *s = NULL;
        if (!cu.errstr || cu.errstr(rc, &s) != 0 || !s)
            s = "?";
        snprintf(why, cap, "cuMemGetHandleForAddressRange: %s (%d)", s, rc);
        goto out;
    }
    *fd = out;
out:
    return rc;
}

static bool real_peermem(void *ud)
{
    (void)ud;
    return access("/sys/module/nvidia_peermem", F_OK) == 0;
}

static const xfer_rdma_devmem_hooks real_hooks = {
    .is_device = real_is_device,
    .dmabuf_fd = real_dmabuf_fd,
    .peermem_loaded = real_peermem,
};

static xfer_rdma_devmem_hooks hooks = {
    .is_device = real_is_device,
    .dmabuf_fd = real_dmabuf_fd,
    .peermem_loaded = real_peermem,
};

void xfer_rdma_devmem_set_hooks(const xfer_rdma_devmem_hooks *h)
{
    hooks = h ? *h : real_hooks;
}

/* ---------------------------------------------------------------------- */
/* Registration                                                            */
/* ---------------------------------------------------------------------- */

const char *xfer_rdma_devmem_path_name(xfer_rdma_devmem_path p)
{
    switch (p) {
    case XFER_RDMA_DEVMEM_HOST: return "host";
    case XFER_RDMA_DEVMEM_DMABUF: return "dma-buf";
    case XFER_RDMA_DEVMEM_PEERMEM: return "nvidia-peermem";
    }
    return "?";
}

int xfer_rdma_devmem_open(xfer_rdma_devmem *d, void *base, size_t len,
                     xfer_rdma_devmem_log_fn log, void *log_ud)
{
    *d = (xfer_rdma_devmem){.path = XFER_RDMA_DEVMEM_HOST, .fd = -1, .base = base,
                       .len = len};
    int dev = 0;
    char line[384], why[256] = "";
    int rc = 0;
    if (xfer_mem_of(base).kind == XFER_MEM_TESTDEV) {
        /* PROT_NONE to everyone but its copy thread: no NIC (nor the
         * fabric's responder) may write it, so it is never registered. */
        snprintf(line, sizeof line, "rdma: testdev pool of %zu bytes not "
                 "registrable: the test device has no RDMA path (use TCP)",
                 len);
        rc = XFER_ERR_NOT_SUPPORTED;
        goto out_log;
    }
    if (!hooks.is_device || !hooks.is_device(hooks.ud, base, &dev))
        return 0;
    /* The fd's range is page aligned (the driver's rule); the pool's
     * base sits fd_off into it. */
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    uintptr_t lo = (uintptr_t)base & ~(uintptr_t)(page - 1);
    uintptr_t hi = ((uintptr_t)base + len + page - 1) & ~(uintptr_t)(page - 1);
    int fd = -1;
    if (hooks.dmabuf_fd &&
        hooks.dmabuf_fd(hooks.ud, (void *)lo, hi - lo, &fd, why,
                        sizeof why) == 0) {
        d->path = XFER_RDMA_DEVMEM_DMABUF;
        d->fd = fd;
        d->fd_off = (uintptr_t)base - lo;
        snprintf(line, sizeof line, "rdma: cuda:%d pool of %zu bytes "
                 "registered via dma-buf", dev, len);
    } else if (hooks.peermem_loaded && hooks.peermem_loaded(hooks.ud)) {
        d->path = XFER_RDMA_DEVMEM_PEERMEM;
        snprintf(line, sizeof line, "rdma: cuda:%d pool of %zu bytes "
                 "registered via nvidia-peermem (dma-buf failed: %s)", dev,
                 len, why[0] ? why : "no hook");
    } else {
        snprintf(line, sizeof line, "rdma: cuda:%d pool of %zu bytes not "
                 "registrable: dma-buf failed (%s) and nvidia-peermem is "
                 "not loaded", dev, len, why[0] ? why : "no hook");
        rc = XFER_ERR_NOT_SUPPORTED;
    }
out_log:
    if (log)
        log(log_ud, line);
    return rc;
}

struct ibv_mr *xfer_rdma_devmem_reg(const xfer_rdma_devmem *d, struct ibv_pd *pd,
                               uint64_t off, size_t len, uint64_t iova,
                               int access)
{
    if (d->path == XFER_RDMA_DEVMEM_DMABUF)
        return ibv_reg_dmabuf_mr(pd, d->fd_off + off, len, iova, d->fd,
                                 access);
    return ibv_reg_mr_iova(pd, d->base + off, len, iova, (unsigned)access);
}

void xfer_rdma_devmem_close(xfer_rdma_devmem *d)
{
    if (d->path == XFER_RDMA_DEVMEM_DMABUF && d->fd >= 0)
        close(d->fd);
    d->fd = -1;
    d->path = XFER_RDMA_DEVMEM_HOST;
}
