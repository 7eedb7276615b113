/*
 * fsm/util.c - the injected allocator of the pure machines, and its libc
 * default: a zeroed xfer_allocator means malloc/free (xfer/fsm.h); and the
 * copy of versioned structs (util.h).
 *
 * What must stay true: this is the only object of fsm/ that refers to
 * malloc or free; every other one allocates through these three calls, so
 * an allocator a caller injects sees every allocation (the build's wall,
 * tools/wall.py, refuses a malloc or free anywhere else in fsm/).
 */
#include "util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void *xfer_util_alloc(const xfer_allocator *a, size_t size)
{
    return a->alloc ? a->alloc(a->ud, size) : malloc(size);
}

void *xfer_util_calloc(const xfer_allocator *a, size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    void *p = xfer_util_alloc(a, n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void xfer_util_free(const xfer_allocator *a, void *p)
{
    if (!p)
        return;
    if (a->free)
        a->free(a->ud, p);
    else
        free(p);
}

int xfer_util_versioned_copy(void *dst, const void *src, uint32_t version,
                             const size_t *lens, uint32_t nversions)
{
    if (version == 0 || version > nversions)
        return XFER_ERR_INVALID_ARG;
    memcpy(dst, src, lens[version - 1]);
    return 0;
}
