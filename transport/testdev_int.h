/*
 * testdev_int.h - the test device's asynchronous copies, for the copy
 * engine (transport/copy_testdev.c).  Internal.  See xfer/testdev.h.
 */
#ifndef XFER_TESTDEV_INT_H
#define XFER_TESTDEV_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "xfer/testdev.h"

/* Called once per accepted copy on the copy thread: status 0 or
 * XFER_ERR_COPY.  Must not call into the test device. */
typedef void (*xfer_testdev_done_fn)(void *ud, int status);

/* Queue an asynchronous copy of len bytes between host and dev (inside
 * one live allocation), dir XFER_TESTDEV_D2H or _H2D; the copy rules
 * apply.  0: done will be called exactly once, later, on the copy
 * thread.  XFER_ERR_INVALID_ARG (range), XFER_ERR_NOMEM: never called. */
int xfer_testdev_copy_async(unsigned dir, void *host, void *dev, size_t len,
                            xfer_testdev_done_fn done, void *ud);

/* Whether [p, p+len) lies inside one live allocation (len 0: p inside). */
bool xfer_testdev_contains(const void *p, size_t len);

#endif /* XFER_TESTDEV_INT_H */
