/*
 * copy_testdev.c - the copy engine's test device backend (copy.h): each
 * copy is a job of the test device's copy thread (testdev.c), which ends
 * it late, out of order or failed by the rules a test set.  Bounce
 * buffers are ordinary heap memory (nothing to pin).
 */
#include <stdlib.h>

#include "copy.h"
#include "testdev_int.h"

static int td_open(xfer_mem mem, void **state)
{
    if (mem.device != 0)
        return XFER_ERR_NOT_SUPPORTED;
    *state = NULL;
    return 0;
}

/* Nothing of its own: xfer_copy_del already waited for every job. */
static void td_close(void *state)
{
    (void)state;
}

static int td_start(void *state, bool d2h, void *host, void *dev, size_t len,
                    void *req)
{
    (void)state;
    return xfer_testdev_copy_async(d2h ? XFER_TESTDEV_D2H : XFER_TESTDEV_H2D,
                                   host, dev, len, xfer_copy_backend_done,
                                   req);
}

static void *td_alloc(void *state, size_t len)
{
    (void)state;
    return malloc(len);
}

static void td_free(void *state, void *p)
{
    (void)state;
    free(p);
}

const xfer_copy_ops xfer_copy_testdev_ops = {
    .open = td_open, .close = td_close, .start = td_start,
    .host_alloc = td_alloc, .host_free = td_free,
};
