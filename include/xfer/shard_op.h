/*
 * xfer/shard_op.h - the ops a producer runs on the shards of a consumer
 * group (reserve, write, commit, cancel): their kinds, the result a shard
 * sends back for one, and how each op stands per shard of a transfer.
 *
 * These are the producer's side of the conversation with a shard: the
 * transfer core takes results (xfer/core.h), transports deliver them
 * (xfer/transport.h), and tools read the per-shard view of a transfer.  The
 * consumer's shard object itself is xfer/shard.h, which none of this needs.
 *
 * Every list is an X-macro with the values written out: values are in
 * trace files and on the wire and are never renumbered; a new entry takes
 * the next value.  Names come from the same lists (xfer_op_name,
 * xfer_sub_name).  Pure C11, usable from C++.
 */
#ifndef XFER_SHARD_OP_H
#define XFER_SHARD_OP_H

#include <stdint.h>

#include "xfer/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, value): the op kinds a shard result refers to (also an ABORT
 * action's `op`). */
#define XFER_OP_KINDS(X)                                                      \
    X(RESERVE, 0)                                                             \
    X(WRITE, 1)                                                               \
    X(COMMIT, 2)                                                              \
    X(CANCEL, 3)                                                              \
    X(EAGER, 4)  /* reserve + data + commit in one op, applied whole or   \
                    refused whole (docs/design.md 2.1, the eager path) */

typedef enum xfer_op_kind {
#define XFER_OP_ENUM_(name, value) XFER_OP_##name = (value),
    XFER_OP_KINDS(XFER_OP_ENUM_)
#undef XFER_OP_ENUM_
    XFER_OP_COUNT_
} xfer_op_kind;

/* The op's name ("RESERVE"), or "?" out of range.  Never NULL; any
 * thread. */
XFER_API const char *xfer_op_name(unsigned op);

/* A shard's answer to one op, fed by the transport through the driver. */
typedef struct xfer_shard_result {
    uint64_t id;
    uint32_t attempt;
    uint16_t shard;
    uint8_t op;      /* xfer_op_kind */
    int32_t status;  /* 0 or a negative xfer_err */
    uint64_t resv_id;     /* RESERVE ok: consumer-issued reservation id */
    uint64_t remote_addr; /* RESERVE ok: region address/offset on shard */
    uint32_t rkey;        /* RESERVE ok: rdma rkey, 0 otherwise */
} xfer_shard_result;

/*
 * X(NAME, value, reserve, write, commit, cancel, eager): how one op of a
 * transfer stands on one shard (the fields of xfer_shard_view), and the
 * word each op's column reads for it (NULL: not a state of that op; only a
 * cancel gives up).  An eager op that succeeded was APPLIED: the shard
 * holds the data, committed.
 */
#define XFER_SUB_STATES(X)                                                    \
    X(NONE, 0, "NONE", "NONE", "NONE", "NONE", "NONE")     /* not sent */   \
    X(PENDING, 1, "PENDING", "PENDING", "PENDING", "PENDING", "PENDING")     \
                                                         /* in flight */   \
    X(OK, 2, "OK", "DONE", "ACKED", "OK", "APPLIED")       /* succeeded */  \
    X(FAILED, 3, "FAILED", "FAILED", "FAILED", "FAILED", "FAILED")          \
                                                         /* failed */      \
    X(GAVE_UP, 4, NULL, NULL, NULL, "GAVE_UP", NULL) /* retries ran out */

typedef enum xfer_sub_state {
#define XFER_SUB_ENUM_(name, value, r, w, c, x, g) XFER_SUB_##name = (value),
    XFER_SUB_STATES(XFER_SUB_ENUM_)
#undef XFER_SUB_ENUM_
    XFER_SUB_COUNT_
} xfer_sub_state;

/* The word sub-state `sub` reads in the column of op `op` (xfer_op_kind):
 * "PENDING", a write's OK is "DONE", a commit's "ACKED", an eager op's
 * "APPLIED"; "?" when `sub`
 * is no state of that op or either is out of range.  Never NULL; any
 * thread. */
XFER_API const char *xfer_sub_name(unsigned op, unsigned sub);

/* One shard of a live transfer, as xfer_core_view() reports it: the
 * xfer_sub_state of each op, and how many cancels were sent. */
typedef struct xfer_shard_view {
    uint8_t resv;   /* the reserve */
    uint8_t write;  /* the write */
    uint8_t commit; /* the commit */
    uint8_t cancel; /* the cancel (GAVE_UP once its retries ran out) */
    uint8_t cancel_attempts;
    uint8_t eager;  /* the eager op (eager path only; NONE otherwise) */
} xfer_shard_view;

#ifdef __cplusplus
}
#endif
#endif /* XFER_SHARD_OP_H */
