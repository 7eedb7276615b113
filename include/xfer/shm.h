/*
 * xfer/shm.h - shard pools in POSIX shared memory, so that a consumer
 * process on the same host reads taken data in place, with no copy.
 *
 * `xferd --shm NAME` puts the pool of each hosted shard k in the POSIX
 * shared-memory object "/NAME.k" (on Linux the file /dev/shm/NAME.k),
 * created mode 0600 by the serving process.  A consumer maps it read-only
 * with xfer_shm_map(NAME, k) and reads an available region (xfer/
 * consumer.h: shard, offset, length) at xfer_shm_pool() + offset.
 *
 * Layout: a 4096-byte header, then the pool (pool_bytes).  The header, in
 * host byte order (the object never leaves the host):
 *     0  magic       8 bytes "XFERSHM\0"
 *     8  version     u32 = 1
 *    12  header_size u32 = 4096
 *    16  pool_bytes  u64
 *    24  pid         u32  the process that created and serves it
 *    28  shard       u16
 *    30  rsv         u16
 *    32  created_ns  u64  CLOCK_REALTIME at creation
 *    40  generation  u64  differs between two creations of the name
 *
 * Who unlinks: the creator, in xfer_shm_close (xferd at exit, after its
 * drain).  A process killed with kill -9 leaves its objects behind; the
 * next xfer_shm_create of the same name finds the object, sees that the
 * pid in its header is not alive (or the header is not one of ours), and
 * unlinks it and creates a fresh one; an object whose creator still runs
 * is refused (XFER_ERR_EXISTS), and so is another user's (XFER_ERR_PERM).  xfer_shm_unlink removes one by hand.  A
 * consumer's mapping of an object that was unlinked stays readable until
 * it unmaps (the restarted server's pool is a new object: map it again,
 * e.g. when the consumer's connection to that shard comes back up).
 *
 * Names: 1 to 200 characters of [A-Za-z0-9_.-].  Any thread; a handle is
 * used by one thread at a time.
 */
#ifndef XFER_SHM_H
#define XFER_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "xfer/errors.h"
#include "xfer/fsm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define XFER_SHM_HEADER 4096u
#define XFER_SHM_NAME_MAX 200u

typedef struct xfer_shm xfer_shm;

/*
 * Create "/NAME.shard" holding a pool of pool_bytes (zero-filled, touched
 * once so that no write pays a first-touch fault), replacing a stale
 * object of a dead creator.  The handle maps it read-write.  `alloc`
 * (borrowed; NULL: libc) allocates the handle.  *out untouched on failure.
 * Errors: XFER_ERR_INVALID_ARG (bad name, pool_bytes 0, shard >= 64),
 * XFER_ERR_EXISTS (a live process serves that object), XFER_ERR_PERM (the
 * name holds an object of another user, or one this user may not open:
 * never used, replaced or unlinked; on Linux its owner is the owner of
 * /dev/shm/NAME.shard), XFER_ERR_IO (shm_open, ftruncate or mmap failed:
 * errno tells why), XFER_ERR_NOMEM.
 */
XFER_API int xfer_shm_create(const char *name, uint16_t shard,
                             uint64_t pool_bytes,
                             const xfer_allocator *alloc, xfer_shm **out);

/*
 * Map "/NAME.shard" read-only, for a consumer.  `alloc` as above.
 * Errors: XFER_ERR_INVALID_ARG (bad name), XFER_ERR_NOT_FOUND (no such
 * object), XFER_ERR_FORMAT (not an xfer pool: bad header or size),
 * XFER_ERR_IO, XFER_ERR_NOMEM.
 */
XFER_API int xfer_shm_map(const char *name, uint16_t shard,
                          const xfer_allocator *alloc, xfer_shm **out);

/* The pool (after the header), its size, and the object's generation. */
XFER_API void *xfer_shm_pool(const xfer_shm *m);
XFER_API uint64_t xfer_shm_len(const xfer_shm *m);
XFER_API uint64_t xfer_shm_generation(const xfer_shm *m);

/* Unmap and free the handle; a creator's handle also unlinks the object
 * (only if the name still holds the object it created).  NULL ok. */
XFER_API void xfer_shm_close(xfer_shm *m);

/* Remove "/NAME.shard" whoever made it.  Returns 0, XFER_ERR_NOT_FOUND,
 * XFER_ERR_INVALID_ARG or XFER_ERR_IO. */
XFER_API int xfer_shm_unlink(const char *name, uint16_t shard);

#ifdef __cplusplus
}
#endif
#endif /* XFER_SHM_H */
