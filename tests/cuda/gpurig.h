/*
 * tests/cuda/gpurig.h - S shard servers (each on a thread and event base
 * of its own, serving one pool of host or CUDA memory) and a producer (an
 * engine over TCP with one staging pool of host or CUDA memory) in one
 * process: the suite `cuda` and xfer-gpu-bench (tools/gpu) run on it.
 * Device memory is registered with helper device's memory kinds
 * (include/xfer/mem.h); a tree without them has GPURIG_HAVE_MEM 0 and
 * gpurig_start refuses device memory with XFER_ERR_NOT_SUPPORTED.
 */
#ifndef XFER_GPURIG_H
#define XFER_GPURIG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cu.h"
#include "xfer/server.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

#if defined(__has_include)
#if __has_include("xfer/mem.h")
#include "xfer/mem.h"
#define GPURIG_HAVE_MEM 1
#endif
#endif
#ifndef GPURIG_HAVE_MEM
#define GPURIG_HAVE_MEM 0
#endif

#define GPURIG_MAX_S 4

typedef struct gpurig {
    /* set by the caller */
    cu_api *cu;
    uint16_t S;
    bool dev_pools, dev_staging;
    size_t pool_len;      /* per shard */
    size_t staging_len;
    bool consume;         /* servers take and release every READY */
    /* the rest is the rig's */
    struct event_base *sbase[GPURIG_MAX_S];
    pthread_t th[GPURIG_MAX_S];
    bool started[GPURIG_MAX_S];
    xfer_server *srv[GPURIG_MAX_S];
    void *pool[GPURIG_MAX_S]; /* host pointer or CUDA device pointer */
    char addr[GPURIG_MAX_S][32];
    const char *addrs[GPURIG_MAX_S];
    atomic_bool stop;
    struct event_base *base;
    xfer_engine *e;
    xfer_tcp *tcp;
    uint32_t group, poolid;
    void *staging;
    uint64_t done, failed;
    int first_status;
} gpurig;

/* Allocate, start the servers and the producer, wait for the
 * connections.  0 or an xfer error (what failed in why). */
int gpurig_start(gpurig *g, char *why, size_t cap);
/* Copy len bytes from src into the staging at off (HtoD for device). */
int gpurig_fill(gpurig *g, size_t off, const void *src, size_t len);
/* count transfers of S * slice bytes, at most inflight at once, the i-th
 * from staging offset (i % slots) * S * slice; ids from *next_id.  0 when
 * every one succeeded, else the first failure's status. */
int gpurig_run(gpurig *g, uint64_t *next_id, uint32_t slice, uint32_t count,
               uint32_t inflight);
/* Does shard k's pool hold want[len] somewhere (read back with DtoH for
 * device memory)? */
bool gpurig_holds(gpurig *g, uint16_t k, const uint8_t *want, size_t len);
/* Stop and free everything (safe after a failed start). */
void gpurig_stop(gpurig *g);

#endif
