/*
 * tests/cudafake/fakecuda.c - a fake CUDA driver, built as libcuda.so.1,
 * so the library's CUDA paths (transport/cuda_drv.c, copy_cuda.c,
 * engine_gate.c, mem.c) run in CI without a GPU.  Test code only.
 *
 * It exports every cu* symbol the library looks up (cuda_drv.c and
 * rdma_devmem.c) with the driver's ABI, and the helpers of fakecuda.h.
 * Device memory is a PROT_NONE address range with a host buffer behind
 * it (fakecuda.h); pinned memory (cuMemHostAlloc) is ordinary malloc,
 * remembered so cuPointerGetAttribute can tell the two from other memory.
 * Each stream is a thread that runs its queue in order: an async copy is
 * a memcpy there, and a stream callback runs there after the work queued
 * before it, never inside cuStreamAddCallback (as the real driver).
 *
 * What must stay true: a call before a successful cuInit fails
 * NOT_INITIALIZED; copies, streams and pinned buffers need a current
 * context on the calling thread, and a stream's work needs the stream's
 * own (copy_cuda.c's invariant); a copy touches only ranges that lie
 * inside one allocation, else it is refused before anything is queued.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "fakecuda.h"

#define API __attribute__((visibility("default")))

/* The driver's entry points and the helpers have no header here (cuda.h
 * is not used, and fakecuda.h gives the helpers as pointer types for
 * dlsym), so no prototype precedes them. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

API void *fakecuda_alloc(int device, size_t len);
API void fakecuda_free(void *dev);

/* The driver's types and values (cuda.h), without its header. */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef void (*CUstreamCallback)(CUstream s, CUresult status, void *ud);

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
};

#define MAX_DEVS 64

/* ---------------------------------------------------------------------- */
/* State: knobs, statistics, the allocation registry                       */
/* ---------------------------------------------------------------------- */

typedef struct region {
    struct region *next;
    uint8_t *addr;  /* what the caller sees */
    uint8_t *bytes; /* where the bytes are (== addr for pinned memory) */
    size_t len;
    int device;     /* -1: pinned host memory */
} region;

struct CUctx_st {
    int device;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* all below */
static bool inited;
static int ndevs = 1, count_rc, init_rc;
static uint64_t copy_fail, copies, start_fail, starts, copy_delay_ms;
static fakecuda_stats stats;
static region *regions;
static struct CUctx_st ctxs[MAX_DEVS];
static _Thread_local CUcontext current;

static long knob(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

static void stat_add(uint64_t *field, int64_t d)
{
    pthread_mutex_lock(&mu);
    *field += (uint64_t)d;
    pthread_mutex_unlock(&mu);
}

static bool ready(void)
{
    pthread_mutex_lock(&mu);
    bool r = inited;
    pthread_mutex_unlock(&mu);
    return r;
}

/* The region holding [p, p+len) whole, or NULL.  Caller holds mu. */
static region *find(const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    for (region *r = regions; r; r = r->next) {
        uintptr_t b = (uintptr_t)r->addr;
        if (a >= b && a - b < r->len && len <= r->len - (a - b))
            return r;
    }
    return NULL;
}

/* Where the bytes of [p, p+len) are, if it lies in one region of the
 * wanted kind (device: true for device memory), else NULL. */
static uint8_t *bytes_of(const void *p, size_t len, bool device)
{
    pthread_mutex_lock(&mu);
    region *r = find(p, len ? len : 1);
    uint8_t *out = NULL;
    if (r && (r->device >= 0) == device)
        out = r->bytes + ((const uint8_t *)p - r->addr);
    pthread_mutex_unlock(&mu);
    return out;
}

static void add_region(region *r)
{
    pthread_mutex_lock(&mu);
    r->next = regions;
    regions = r;
    pthread_mutex_unlock(&mu);
}

/* Unlink the region starting at p of the wanted kind; NULL if none. */
static region *take_region(const void *p, bool device)
{
    pthread_mutex_lock(&mu);
    region **pp = &regions;
    while (*pp && ((*pp)->addr != p || ((*pp)->device >= 0) != device))
        pp = &(*pp)->next;
    region *r = *pp;
    if (r)
        *pp = r->next;
    pthread_mutex_unlock(&mu);
    return r;
}

/* ---------------------------------------------------------------------- */
/* Initialisation, devices, contexts                                       */
/* ---------------------------------------------------------------------- */

API CUresult cuInit(unsigned flags)
{
    pthread_mutex_lock(&mu);
    stats.inits++;
    ndevs = (int)knob("FAKECUDA_COUNT", 1);
    count_rc = (int)knob("FAKECUDA_COUNT_RC", 0);
    init_rc = (int)knob("FAKECUDA_INIT_RC", 0);
    copy_fail = (uint64_t)knob("FAKECUDA_COPY_FAIL", 0);
    start_fail = (uint64_t)knob("FAKECUDA_START_FAIL", 0);
    copy_delay_ms = (uint64_t)knob("FAKECUDA_COPY_DELAY_MS", 0);
    inited = flags == 0 && init_rc == 0;
    CUresult rc = flags != 0 ? CUDA_ERROR_INVALID_VALUE : init_rc;
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuDeviceGetCount(int *n)
{
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&mu);
    stats.counts++;
    *n = ndevs; /* written even when count_rc says it failed */
    CUresult rc = count_rc;
    pthread_mutex_unlock(&mu);
    return rc;
}

static bool valid_device(int d)
{
    pthread_mutex_lock(&mu);
    bool ok = d >= 0 && d < ndevs && d < MAX_DEVS;
    pthread_mutex_unlock(&mu);
    return ok;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(d))
        return CUDA_ERROR_INVALID_DEVICE;
    ctxs[d].device = d;
    *c = &ctxs[d];
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    return valid_device(d) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

API CUresult cuCtxSetCurrent(CUcontext c)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (c && (c < ctxs || c >= ctxs + MAX_DEVS))
        return CUDA_ERROR_INVALID_CONTEXT;
    current = c;
    return CUDA_SUCCESS;
}

API CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    region *r = find((const void *)(uintptr_t)p, 1);
    int device = r ? r->device : 0;
    pthread_mutex_unlock(&mu);
    if (!r) /* memory the driver does not know, as for malloc'ed memory */
        return CUDA_ERROR_INVALID_VALUE;
    if (attr == CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
        *(unsigned *)data = device >= 0 ? CU_MEMORYTYPE_DEVICE
                                        : CU_MEMORYTYPE_HOST;
    else if (attr == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
        *(int *)data = device >= 0 ? device : 0;
    else
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------- */
/* Streams: one thread each, running its queue in order                    */
/* ---------------------------------------------------------------------- */

typedef enum { OP_COPY, OP_CALLBACK, OP_WAIT } op_kind;

typedef struct op {
    struct op *next;
    op_kind kind;
    uint8_t *dst;
    const uint8_t *src;
    size_t n;
    bool fail;           /* OP_COPY: FAKECUDA_COPY_FAIL chose this one */
    CUstreamCallback cb; /* OP_CALLBACK */
    void *ud;
    CUevent ev;          /* OP_WAIT */
} op;

struct CUevent_st {
    atomic_int state; /* 0 pending, 1 complete, 2 failed */
};

struct CUstream_st {
    CUcontext ctx;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    op *head, *tail;
    bool busy, stop;
    CUresult status; /* a failed copy's, for the next callback (thread) */
};

static void run_op(CUstream s, op *o)
{
    switch (o->kind) {
    case OP_COPY:
        if (o->fail) {
            s->status = CUDA_ERROR_UNKNOWN;
            stat_add(&stats.failed, 1);
        } else {
            memcpy(o->dst, o->src, o->n);
        }
        if (copy_delay_ms) /* a slow copy: still in flight a while */
            nanosleep(&(struct timespec){(time_t)(copy_delay_ms / 1000),
                                         (long)(copy_delay_ms % 1000) *
                                             1000000L},
                      NULL);
        stat_add(&stats.done, 1);
        break;
    case OP_CALLBACK: {
        CUresult st = s->status;
        s->status = CUDA_SUCCESS;
        stat_add(&stats.callbacks, 1);
        o->cb(s, st, o->ud);
        break;
    }
    case OP_WAIT:
        while (atomic_load(&o->ev->state) == 0)
            nanosleep(&(struct timespec){0, 100000}, NULL);
        break;
    }
}

static void *stream_main(void *arg)
{
    CUstream s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head)
            break;
        op *o = s->head;
        s->head = o->next;
        if (!s->head)
            s->tail = NULL;
        s->busy = true;
        pthread_mutex_unlock(&s->mu);
        run_op(s, o);
        free(o);
        pthread_mutex_lock(&s->mu);
        s->busy = false;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* A stream's work needs its context current on the calling thread. */
static CUresult check_stream(CUstream s)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    return current == s->ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult enqueue(CUstream s, const op *tmpl)
{
    op *o = malloc(sizeof *o);
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *o = *tmpl;
    o->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return CUDA_SUCCESS;
}

API CUresult cuStreamCreate(CUstream *out, unsigned flags)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUstream s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->ctx = current;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->th, NULL, stream_main, s) != 0) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    stat_add(&stats.streams, 1);
    *out = s;
    return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize(CUstream s)
{
    CUresult rc = check_stream(s);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->mu);
    while (s->head || s->busy)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return CUDA_SUCCESS;
}

/* The real driver lets queued work finish after a destroy; so does this
 * one, by waiting for it before the thread ends. */
API CUresult cuStreamDestroy_v2(CUstream s)
{
    CUresult rc = check_stream(s);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    stat_add(&stats.streams, -1);
    return CUDA_SUCCESS;
}

static CUresult copy_async(uint8_t *dst, const uint8_t *src, size_t n,
                           CUstream s, uint64_t *counter)
{
    CUresult rc = check_stream(s);
    if (rc)
        return rc;
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (++starts == start_fail) { /* refused at the call, nothing queued */
        pthread_mutex_unlock(&mu);
        stat_add(&stats.start_failed, 1);
        return CUDA_ERROR_UNKNOWN;
    }
    bool fail = ++copies == copy_fail;
    (*counter)++;
    pthread_mutex_unlock(&mu);
    return enqueue(s, &(op){.kind = OP_COPY, .dst = dst, .src = src,
                            .n = n, .fail = fail});
}

API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n,
                                  CUstream s)
{
    const uint8_t *from = bytes_of((const void *)(uintptr_t)src, n, true);
    if (!from)
        return CUDA_ERROR_INVALID_VALUE;
    return copy_async(dst, from, n, s, &stats.d2h);
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n,
                                  CUstream s)
{
    uint8_t *to = bytes_of((const void *)(uintptr_t)dst, n, true);
    if (!to)
        return CUDA_ERROR_INVALID_VALUE;
    return copy_async(to, src, n, s, &stats.h2d);
}

API CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *ud,
                                 unsigned flags)
{
    CUresult rc = check_stream(s);
    if (rc)
        return rc;
    if (!cb || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return enqueue(s, &(op){.kind = OP_CALLBACK, .cb = cb, .ud = ud});
}

API CUresult cuStreamWaitEvent(CUstream s, CUevent ev, unsigned flags)
{
    CUresult rc = check_stream(s);
    if (rc)
        return rc;
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    return enqueue(s, &(op){.kind = OP_WAIT, .ev = ev});
}

API CUresult cuEventQuery(CUevent ev)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    int st = atomic_load(&ev->state);
    return st == 1 ? CUDA_SUCCESS
                   : st == 0 ? CUDA_ERROR_NOT_READY : CUDA_ERROR_UNKNOWN;
}

/* ---------------------------------------------------------------------- */
/* Pinned host memory, and what rdma_devmem.c looks up                     */
/* ---------------------------------------------------------------------- */

API CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    region *r = calloc(1, sizeof *r);
    uint8_t *b = malloc(n);
    if (!r || !b) {
        free(r);
        free(b);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *r = (region){.addr = b, .bytes = b, .len = n, .device = -1};
    add_region(r);
    stat_add(&stats.pinned, 1);
    *p = b;
    return CUDA_SUCCESS;
}

API CUresult cuMemFreeHost(void *p)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    region *r = take_region(p, false);
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    free(r->bytes);
    free(r);
    stat_add(&stats.pinned, -1);
    return CUDA_SUCCESS;
}

/* Device memory as xferd allocates it (--pool-mem cuda:N). */
API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    void *a = fakecuda_alloc(current->device, n);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (CUdeviceptr)(uintptr_t)a;
    return CUDA_SUCCESS;
}

API CUresult cuMemFree_v2(CUdeviceptr p)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!bytes_of((const void *)(uintptr_t)p, 1, true))
        return CUDA_ERROR_INVALID_VALUE;
    fakecuda_free((void *)(uintptr_t)p);
    return CUDA_SUCCESS;
}

API CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p,
                                           size_t n, int type,
                                           unsigned long long flags)
{
    return CUDA_ERROR_NOT_SUPPORTED; /* no DMA-BUF without a GPU */
}

API CUresult cuGetErrorString(CUresult rc, const char **s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    *s = rc == CUDA_SUCCESS ? "no error" : "fake CUDA error";
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------- */
/* The test's helpers (fakecuda.h)                                         */
/* ---------------------------------------------------------------------- */

API void *fakecuda_alloc(int device, size_t len)
{
    if (len == 0)
        return NULL;
    region *r = calloc(1, sizeof *r);
    uint8_t *b = calloc(1, len);
    void *a = mmap(NULL, len, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!r || !b || a == MAP_FAILED) {
        free(r);
        free(b);
        if (a != MAP_FAILED)
            munmap(a, len);
        return NULL;
    }
    *r = (region){.addr = a, .bytes = b, .len = len, .device = device};
    add_region(r);
    return a;
}

API void fakecuda_free(void *dev)
{
    region *r = dev ? take_region(dev, true) : NULL;
    if (!r)
        return;
    munmap(r->addr, r->len);
    free(r->bytes);
    free(r);
}

API int fakecuda_read(void *dst, const void *dev, size_t len)
{
    const uint8_t *b = bytes_of(dev, len, true);
    if (!b)
        return -1;
    memcpy(dst, b, len);
    return 0;
}

API int fakecuda_write(void *dev, const void *src, size_t len)
{
    uint8_t *b = bytes_of(dev, len, true);
    if (!b)
        return -1;
    memcpy(b, src, len);
    return 0;
}

API void fakecuda_stats_get(fakecuda_stats *out)
{
    pthread_mutex_lock(&mu);
    *out = stats;
    pthread_mutex_unlock(&mu);
}

API void *fakecuda_event_new(void)
{
    struct CUevent_st *ev = calloc(1, sizeof *ev);
    if (ev)
        atomic_init(&ev->state, 0);
    return ev;
}

API void fakecuda_event_signal(void *ev)
{
    atomic_store(&((struct CUevent_st *)ev)->state, 1);
}

API void fakecuda_event_fail(void *ev)
{
    atomic_store(&((struct CUevent_st *)ev)->state, 2);
}

API void fakecuda_event_free(void *ev)
{
    free(ev);
}
