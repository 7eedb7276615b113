/*
 * xfer/mem.h - memory kinds: where the bytes of a registration live.
 *
 * Every registration (a producer staging pool, a pool a shard server
 * serves) has a kind: ordinary host memory, CUDA device memory with its
 * device ordinal, or the test-only device kind (xfer/testdev.h).  The
 * library never dereferences memory of a device kind: it moves it through
 * copies it owns (device to pinned host bounce buffers and back, on
 * streams of its own) whose completions reach the loop as events
 * (docs/gpu.md, docs/design.md "Device memory").
 *
 * CUDA is not linked: the driver (libcuda.so.1) is loaded at the first
 * use, so one libxfer starts on a machine without it; there, and in a
 * build configured with -Dcuda=disabled, a CUDA registration fails
 * XFER_ERR_NOT_SUPPORTED and everything else works.
 *
 * The engine's calls that take a kind (xfer_engine_register_pool_mem,
 * xfer_engine_submit_gated) are declared in xfer/xfer.h next to the engine
 * they act on (they need xfer_transfer_desc), not here as DEVICE_API.md
 * sketched: this header then compiles alone.
 *
 * Pure C11; usable from C++.
 */
#ifndef XFER_MEM_H
#define XFER_MEM_H

#include <stdint.h>

#include "xfer/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A memory kind.  Never renumbered. */
typedef enum xfer_mem_kind {
    XFER_MEM_HOST = 0,    /* ordinary host memory (the default) */
    XFER_MEM_CUDA = 1,    /* CUDA device memory; device = CUDA ordinal */
    XFER_MEM_TESTDEV = 2, /* the test-only device kind (xfer/testdev.h) */
} xfer_mem_kind;

/* Where a registration's bytes live. */
typedef struct xfer_mem {
    xfer_mem_kind kind;
    int32_t device; /* ordinal; 0 for host and testdev */
} xfer_mem;

/*
 * xfer_mem_available - XFER_OK when memory of this kind and device can be
 * registered in this process (HOST and TESTDEV: always; CUDA: the build
 * has CUDA, the driver loads, initialises, and the ordinal exists), else
 * XFER_ERR_NOT_SUPPORTED; XFER_ERR_INVALID_ARG for an unknown kind or a
 * negative ordinal, or a device other than 0 for HOST and TESTDEV.  The
 * first CUDA call loads the driver (once per process).  Any thread.
 */
XFER_API int xfer_mem_available(xfer_mem m);

/*
 * xfer_mem_of - what kind of memory `ptr` is, as far as the library can
 * tell: a pointer inside a live testdev allocation is TESTDEV; a pointer
 * the CUDA driver knows as device memory (cuPointerGetAttribute) is CUDA
 * with its ordinal (only asked where the driver is already loaded or
 * loads); anything else (NULL included) is HOST.  `ptr` is never read.
 * Any thread.
 */
XFER_API xfer_mem xfer_mem_of(const void *ptr);

/* "host", "cuda", "testdev", or "unknown".  Never NULL.  Any thread. */
XFER_API const char *xfer_mem_kind_name(xfer_mem_kind k);

/*
 * xfer_mem_parse - read the text form `xferd --pool-mem` takes: "host",
 * "testdev", or "cuda:N" (N a decimal ordinal, 0..1023); "cuda" alone is
 * cuda:0.  `text` borrowed; *out written on 0.  XFER_ERR_INVALID_ARG for
 * anything else (out untouched).  Whether the kind is available is not
 * asked (xfer_mem_available).  Any thread.
 */
XFER_API int xfer_mem_parse(const char *text, xfer_mem *out);

#ifdef __cplusplus
}
#endif
#endif /* XFER_MEM_H */
