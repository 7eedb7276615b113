/*
 * copy_cuda.c - the copy engine's CUDA backend (copy.h), on the driver API
 * that cuda_drv.c loads at run time.
 *
 * Each xfer_copy owns one non-blocking stream on its device's primary
 * context.  A copy is cuMemcpy{DtoH,HtoD}Async on that stream followed by
 * cuStreamAddCallback, whose callback (a driver thread; it may not call
 * CUDA) receives the stream's status and hands the request to the loop
 * through copy.c's eventfd.  cuStreamAddCallback rather than
 * cuLaunchHostFunc: it passes the status, so a failed copy is reported as
 * failed instead of as a callback that never comes.  Bounce buffers are
 * pinned (cuMemHostAlloc, portable), so the async copies really are
 * asynchronous and run at the copy engine's rate.
 *
 * What must stay true: the context is made current on the calling thread
 * before every driver call (the loop thread may serve several devices).
 */
#include <stdint.h>
#include <stdlib.h>

#include "copy.h"
#include "cuda_drv.h"

typedef struct cu_state {
    const xfer_cuda_api *a;
    int ord;
    xfer_cu_stream stream;
} cu_state;

static int cu_open(xfer_mem mem, void **state)
{
    const xfer_cuda_api *a = xfer_cuda_get();
    if (!a || xfer_cuda_use(mem.device) != 0)
        return XFER_ERR_NOT_SUPPORTED;
    cu_state *s = calloc(1, sizeof *s);
    if (!s)
        return XFER_ERR_NOMEM;
    s->a = a;
    s->ord = mem.device;
    if (a->StreamCreate(&s->stream, XFER_CU_STREAM_NON_BLOCKING) != 0) {
        free(s);
        return XFER_ERR_COPY;
    }
    *state = s;
    return 0;
}

static void cu_close(void *state)
{
    cu_state *s = state;
    if (xfer_cuda_use(s->ord) == 0) {
        s->a->StreamSynchronize(s->stream);
        s->a->StreamDestroy(s->stream);
    }
    free(s);
}

static void on_stream(xfer_cu_stream st, xfer_cu_result status, void *req)
{
    (void)st;
    xfer_copy_backend_done(req, status == 0 ? 0 : XFER_ERR_COPY);
}

static int cu_start(void *state, bool d2h, void *host, void *dev, size_t len,
                    void *req)
{
    cu_state *s = state;
    if (xfer_cuda_use(s->ord) != 0)
        return XFER_ERR_COPY;
    xfer_cu_ptr d = (xfer_cu_ptr)(uintptr_t)dev;
    xfer_cu_result r = 0;
    if (len)
        r = d2h ? s->a->MemcpyDtoHAsync(host, d, len, s->stream)
                : s->a->MemcpyHtoDAsync(d, host, len, s->stream);
    if (r == 0)
        r = s->a->StreamAddCallback(s->stream, on_stream, req, 0);
    /* a copy queued whose callback could not be: wait for it here, so
     * nothing still writes the host side when the caller reuses it */
    if (r != 0 && len)
        s->a->StreamSynchronize(s->stream);
    return r == 0 ? 0 : XFER_ERR_COPY;
}

static void *cu_alloc(void *state, size_t len)
{
    cu_state *s = state;
    void *p = NULL;
    if (xfer_cuda_use(s->ord) != 0 ||
        s->a->MemHostAlloc(&p, len, XFER_CU_MEMHOSTALLOC_PORTABLE) != 0)
        return NULL;
    return p;
}

static void cu_free(void *state, void *p)
{
    cu_state *s = state;
    if (xfer_cuda_use(s->ord) == 0)
        s->a->MemFreeHost(p);
}

const xfer_copy_ops xfer_copy_cuda_ops = {
    .open = cu_open, .close = cu_close, .start = cu_start,
    .host_alloc = cu_alloc, .host_free = cu_free,
};
