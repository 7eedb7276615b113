/*
 * transport/rdma_devmem.h - how an RDMA registration of device memory is
 * made (issue 25, item 5): a DMA-BUF (ibv_reg_dmabuf_mr over the fd of
 * cuMemGetHandleForAddressRange), else a plain ibv_reg_mr where
 * nvidia-peermem is loaded (it lets the HCA pin GPU pages behind an
 * ordinary registration), else refused.  Host memory takes ibv_reg_mr as
 * it always did.
 *
 * CUDA is never linked: libcuda.so.1 is loaded with dlopen on the first
 * registration that asks, so one libxfer starts on a machine without it.
 * The CUDA calls and the peermem probe are behind hooks a test replaces
 * (xfer_rdma_devmem_set_hooks), so the software fabric can make DMA-BUF fail or
 * succeed.
 *
 * Threads: xfer_rdma_devmem_open/reg/close on the transport's loop thread;
 * xfer_rdma_devmem_set_hooks before any transport exists (tests).
 */
#ifndef XFER_RDMA_DEVMEM_H
#define XFER_RDMA_DEVMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

typedef enum xfer_rdma_devmem_path {
    XFER_RDMA_DEVMEM_HOST = 0,    /* not device memory: ibv_reg_mr */
    XFER_RDMA_DEVMEM_DMABUF = 1,  /* ibv_reg_dmabuf_mr over d->fd */
    XFER_RDMA_DEVMEM_PEERMEM = 2, /* ibv_reg_mr, nvidia-peermem pins it */
} xfer_rdma_devmem_path;

typedef struct xfer_rdma_devmem_hooks {
    /* 1: ptr is device memory (its CUDA ordinal in *dev); 0: it is not
     * (or no driver).  Never fails otherwise. */
    int (*is_device)(void *ud, const void *ptr, int *dev);
    /* 0 with *fd, a DMA-BUF fd for [base, base + len) (base and len page
     * aligned) that the caller closes; else nonzero with one line in
     * why[cap] saying why. */
    int (*dmabuf_fd)(void *ud, void *base, size_t len, int *fd, char *why,
                     size_t cap);
    /* Is nvidia-peermem loaded (/sys/module/nvidia_peermem)? */
    bool (*peermem_loaded)(void *ud);
    void *ud;
} xfer_rdma_devmem_hooks;

/* Replace the CUDA calls (copied); NULL: the real ones again.  Tests. */
void xfer_rdma_devmem_set_hooks(const xfer_rdma_devmem_hooks *h);

typedef struct xfer_rdma_devmem {
    xfer_rdma_devmem_path path;
    int fd;          /* DMABUF: the range's fd, -1 otherwise */
    size_t fd_off;   /* DMABUF: the pool's base inside the fd's range */
    uint8_t *base;   /* the pool */
    size_t len;
} xfer_rdma_devmem;

/* The line sink of a diagnostic (the server's log callback). */
typedef void (*xfer_rdma_devmem_log_fn)(void *ud, const char *line);

/*
 * Decide how the pool [base, base + len) is registered.  Device memory
 * logs one line through log (NULL: none) naming the path taken, and when
 * DMA-BUF failed, why.  Returns 0 (d->path set) or XFER_ERR_NOT_SUPPORTED
 * (device memory, and neither DMA-BUF nor nvidia-peermem: the line says
 * both reasons; or test-device memory, xfer/testdev.h, which nothing but
 * its copy thread may touch); d is then closed.
 */
int xfer_rdma_devmem_open(xfer_rdma_devmem *d, void *base, size_t len,
                     xfer_rdma_devmem_log_fn log, void *log_ud);
/* Register [off, off + len) of the pool with iova and access, the way
 * d->path says.  NULL with errno as the verbs call left it. */
struct ibv_mr *xfer_rdma_devmem_reg(const xfer_rdma_devmem *d, struct ibv_pd *pd,
                               uint64_t off, size_t len, uint64_t iova,
                               int access);
/* Close the fd (after every registration through it was deregistered,
 * or before: the MR holds the dma-buf itself).  A zeroed (path HOST),
 * open or closed d is fine. */
void xfer_rdma_devmem_close(xfer_rdma_devmem *d);
/* "host", "dma-buf", "nvidia-peermem". */
const char *xfer_rdma_devmem_path_name(xfer_rdma_devmem_path p);

#endif /* XFER_RDMA_DEVMEM_H */
