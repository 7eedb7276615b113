/*
 * xfer/fsm.h - the three state machines of xfer, as tables.
 *
 * Each machine is one X-macro table of states x events with a verdict in
 * every cell.  The same tables generate the enums and name strings here, the
 * dispatch in fsm/, the Graphviz diagrams of xfer-trace and the transition
 * coverage matrix the tests check.  A cell is
 *
 *     X(STATE, EVENT, VERDICT, handler)
 *
 * where VERDICT is TRANSITION (the named handler runs), IGNORE (absorbed,
 * traced, counted), DEFER (remembered until the state allows it) or ILLEGAL
 * (a bug: assert in debug, an error trace in release).  `handler` is a token
 * naming the static handler h_<token> in fsm/<machine>.c that the machine's
 * dispatcher runs for the cell (`none` does nothing; ILLEGAL cells name it
 * and never run it; IGNORE and DEFER cells may still run a handler that
 * replies, counts or records).  Every cell of every machine goes through
 * its dispatcher, the transfer machine's NEW and TOMBSTONED rows included.
 *
 * Every (state, event) pair appears exactly once: fsm/tables.c does not
 * compile when a table has more or fewer cells than states x events, and
 * -Woverride-init (part of -Wextra) flags a pair listed twice.  The header
 * is pure C11, usable from C++.  The machines are described in
 * docs/design.md, section 2.
 */
#ifndef XFER_FSM_H
#define XFER_FSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/errors.h"
#include "xfer/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Injected services                                                         */
/* ------------------------------------------------------------------------ */

/*
 * An allocator.  alloc returns NULL on failure; free accepts NULL.  Both are
 * called only from the thread that drives the object they were given to.
 * A zeroed xfer_allocator means libc malloc/free.
 */
typedef struct xfer_allocator {
    void *(*alloc)(void *ud, size_t size);
    void (*free)(void *ud, void *ptr);
    void *ud;
} xfer_allocator;

/* A random source: returns 64 fresh bits.  Used for reservation ids. */
typedef struct xfer_rng {
    uint64_t (*next)(void *ud);
    void *ud;
} xfer_rng;

/* Reservation id meaning "not known" (the reserve reply never came). */
#define XFER_RESV_NONE 0u

/* Maximum shards in one consumer group (failed shards fit in a uint64_t). */
#define XFER_MAX_SHARDS 64

/* ------------------------------------------------------------------------ */
/* Transfer machine (producer side, one per transfer id)                    */
/* ------------------------------------------------------------------------ */

#define XFER_TRANSFER_STATES(X)                                               \
    X(NEW)          /* implicit start: the id is not known */                 \
    X(RESERVING)    /* a reserve RPC to every shard */                        \
    X(WRITING)      /* one write per shard */                                 \
    X(COMPLETING)   /* a commit to every shard */                             \
    X(CANCELLING)   /* a cancel to every shard ever sent a reserve */         \
    X(TOMBSTONED)   /* ended; only a tombstone remains */                 \
    X(EAGER)        /* one eager op (reserve + data + commit) per shard */

#define XFER_TRANSFER_EVENTS(X)                                               \
    X(SUBMIT)                                                                 \
    X(RESERVE_OK)                                                             \
    X(RESERVE_FAIL)  /* refused, lost, or aborted and confirmed */            \
    X(WRITE_OK)                                                               \
    X(WRITE_FAIL)    /* failed, or aborted and confirmed by the transport */  \
    X(COMMIT_OK)                                                              \
    X(COMMIT_FAIL)                                                            \
    X(CANCEL_OK)                                                              \
    X(CANCEL_FAIL)                                                            \
    X(USER_CANCEL)                                                            \
    X(DEADLINE)      /* transfer deadline, or cancel-op timeout */            \
    X(RETRY)         /* cancel retry backoff ran out */                       \
    X(SHUTDOWN)                                                               \
    X(EAGER_OK)      /* the shard applied the eager op whole */               \
    X(EAGER_FAIL)    /* refused whole, lost (may have been applied), or      \
                        aborted and confirmed */                             \
    X(PART)          /* a stream's part was added (xfer_core_part) */       \
    X(SEAL)          /* a stream was sealed: no part follows */

#define XFER_TRANSFER_TABLE(X)                                                \
    X(NEW, SUBMIT,             TRANSITION, submit)                            \
    X(NEW, RESERVE_OK,         IGNORE,     unknown_reply)                     \
    X(NEW, RESERVE_FAIL,       IGNORE,     unknown_reply)                     \
    X(NEW, WRITE_OK,           IGNORE,     unknown_reply)                     \
    X(NEW, WRITE_FAIL,         IGNORE,     unknown_reply)                     \
    X(NEW, COMMIT_OK,          IGNORE,     unknown_reply)                     \
    X(NEW, COMMIT_FAIL,        IGNORE,     unknown_reply)                     \
    X(NEW, CANCEL_OK,          IGNORE,     unknown_reply)                     \
    X(NEW, CANCEL_FAIL,        IGNORE,     unknown_reply)                     \
    X(NEW, USER_CANCEL,        TRANSITION, preempt)                           \
    X(NEW, DEADLINE,           ILLEGAL,    none)                              \
    X(NEW, RETRY,              ILLEGAL,    none)                              \
    X(NEW, SHUTDOWN,           ILLEGAL,    none)                              \
    X(NEW, EAGER_OK, IGNORE, unknown_reply)                                   \
    X(NEW, EAGER_FAIL, IGNORE, unknown_reply)                                 \
    X(NEW, PART, IGNORE, no_stream)                                           \
    X(NEW, SEAL, IGNORE, no_stream)                                           \
                                                                              \
    X(RESERVING, SUBMIT,       IGNORE,     live_submit)                       \
    X(RESERVING, RESERVE_OK,   TRANSITION, reserve_result)                    \
    X(RESERVING, RESERVE_FAIL, TRANSITION, reserve_result)                    \
    X(RESERVING, WRITE_OK,     ILLEGAL,    none)                              \
    X(RESERVING, WRITE_FAIL,   ILLEGAL,    none)                              \
    X(RESERVING, COMMIT_OK,    ILLEGAL,    none)                              \
    X(RESERVING, COMMIT_FAIL,  ILLEGAL,    none)                              \
    X(RESERVING, CANCEL_OK,    ILLEGAL,    none)                              \
    X(RESERVING, CANCEL_FAIL,  ILLEGAL,    none)                              \
    X(RESERVING, USER_CANCEL,  TRANSITION, stop)                              \
    X(RESERVING, DEADLINE,     TRANSITION, stop)                              \
    X(RESERVING, RETRY,        ILLEGAL,    none)                              \
    X(RESERVING, SHUTDOWN,     TRANSITION, stop)                              \
    X(RESERVING, EAGER_OK, ILLEGAL, none)                                     \
    X(RESERVING, EAGER_FAIL, ILLEGAL, none)                                   \
    X(RESERVING, PART, TRANSITION, part)                                      \
    X(RESERVING, SEAL, TRANSITION, seal)                                      \
                                                                              \
    X(WRITING, SUBMIT,         IGNORE,     live_submit)                       \
    X(WRITING, RESERVE_OK,     ILLEGAL,    none)                              \
    X(WRITING, RESERVE_FAIL,   ILLEGAL,    none)                              \
    X(WRITING, WRITE_OK,       TRANSITION, write_result)                      \
    X(WRITING, WRITE_FAIL,     TRANSITION, write_result)                      \
    X(WRITING, COMMIT_OK,      ILLEGAL,    none)                              \
    X(WRITING, COMMIT_FAIL,    ILLEGAL,    none)                              \
    X(WRITING, CANCEL_OK,      ILLEGAL,    none)                              \
    X(WRITING, CANCEL_FAIL,    ILLEGAL,    none)                              \
    X(WRITING, USER_CANCEL,    TRANSITION, stop)                              \
    X(WRITING, DEADLINE,       TRANSITION, stop)                              \
    X(WRITING, RETRY,          ILLEGAL,    none)                              \
    X(WRITING, SHUTDOWN,       TRANSITION, stop)                              \
    X(WRITING, EAGER_OK, ILLEGAL, none)                                       \
    X(WRITING, EAGER_FAIL, ILLEGAL, none)                                     \
    X(WRITING, PART, TRANSITION, part)                                        \
    X(WRITING, SEAL, TRANSITION, seal)                                        \
                                                                              \
    X(COMPLETING, SUBMIT,      IGNORE,     live_submit)                       \
    X(COMPLETING, RESERVE_OK,  ILLEGAL,    none)                              \
    X(COMPLETING, RESERVE_FAIL, ILLEGAL,   none)                              \
    X(COMPLETING, WRITE_OK,    ILLEGAL,    none)                              \
    X(COMPLETING, WRITE_FAIL,  ILLEGAL,    none)                              \
    X(COMPLETING, COMMIT_OK,   TRANSITION, commit_result)                     \
    X(COMPLETING, COMMIT_FAIL, TRANSITION, commit_result)                     \
    X(COMPLETING, CANCEL_OK,   ILLEGAL,    none)                              \
    X(COMPLETING, CANCEL_FAIL, ILLEGAL,    none)                              \
    X(COMPLETING, USER_CANCEL, DEFER,      defer_stop)                        \
    X(COMPLETING, DEADLINE,    TRANSITION, stop)                              \
    X(COMPLETING, RETRY,       ILLEGAL,    none)                              \
    X(COMPLETING, SHUTDOWN,    DEFER,      defer_stop)                        \
    X(COMPLETING, EAGER_OK, ILLEGAL, none)                                    \
    X(COMPLETING, EAGER_FAIL, ILLEGAL, none)                                  \
    X(COMPLETING, PART, IGNORE, part_refused)                                 \
    X(COMPLETING, SEAL, IGNORE, part_refused)                                 \
                                                                              \
    X(CANCELLING, SUBMIT,      IGNORE,     live_submit)                       \
    X(CANCELLING, RESERVE_OK,  ILLEGAL,    none)                              \
    X(CANCELLING, RESERVE_FAIL, ILLEGAL,   none)                              \
    X(CANCELLING, WRITE_OK,    ILLEGAL,    none)                              \
    X(CANCELLING, WRITE_FAIL,  ILLEGAL,    none)                              \
    X(CANCELLING, COMMIT_OK,   ILLEGAL,    none)                              \
    X(CANCELLING, COMMIT_FAIL, ILLEGAL,    none)                              \
    X(CANCELLING, CANCEL_OK,   TRANSITION, cancel_result)                     \
    X(CANCELLING, CANCEL_FAIL, TRANSITION, cancel_result)                     \
    X(CANCELLING, USER_CANCEL, IGNORE,     none)                              \
    X(CANCELLING, DEADLINE,    TRANSITION, cancel_timeout)                    \
    X(CANCELLING, RETRY,       TRANSITION, cancel_retry)                      \
    X(CANCELLING, SHUTDOWN,    IGNORE,     none)                              \
    X(CANCELLING, EAGER_OK, ILLEGAL, none)                                    \
    X(CANCELLING, EAGER_FAIL, ILLEGAL, none)                                  \
    X(CANCELLING, PART, IGNORE, part_refused)                                 \
    X(CANCELLING, SEAL, IGNORE, part_refused)                                 \
                                                                              \
    X(TOMBSTONED, SUBMIT,      IGNORE,     late_submit)                       \
    X(TOMBSTONED, RESERVE_OK,  IGNORE,     late_reply)                        \
    X(TOMBSTONED, RESERVE_FAIL, IGNORE,    late_reply)                        \
    X(TOMBSTONED, WRITE_OK,    ILLEGAL,    none)                              \
    X(TOMBSTONED, WRITE_FAIL,  ILLEGAL,    none)                              \
    X(TOMBSTONED, COMMIT_OK,   ILLEGAL,    none)                              \
    X(TOMBSTONED, COMMIT_FAIL, ILLEGAL,    none)                              \
    X(TOMBSTONED, CANCEL_OK,   IGNORE,     late_reply)                        \
    X(TOMBSTONED, CANCEL_FAIL, IGNORE,     late_reply)                        \
    X(TOMBSTONED, USER_CANCEL, IGNORE,     refresh)                           \
    X(TOMBSTONED, DEADLINE,    ILLEGAL,    none)                              \
    X(TOMBSTONED, RETRY,       ILLEGAL,    none)                              \
    X(TOMBSTONED, SHUTDOWN, ILLEGAL, none)                                    \
    X(TOMBSTONED, EAGER_OK, ILLEGAL, none)                                    \
    X(TOMBSTONED, EAGER_FAIL, ILLEGAL, none)                                  \
    X(TOMBSTONED, PART, IGNORE, part_ended)                                   \
    X(TOMBSTONED, SEAL, IGNORE, part_ended)                                   \
                                                                              \
    /* The eager path (docs/design.md 2.1): like COMPLETING, a stop           \
     * starts nothing (the op may be applied) and a deadline aborts. */       \
    X(EAGER, SUBMIT, IGNORE, live_submit)                                     \
    X(EAGER, RESERVE_OK, ILLEGAL, none)                                       \
    X(EAGER, RESERVE_FAIL, ILLEGAL, none)                                     \
    X(EAGER, WRITE_OK, ILLEGAL, none)                                         \
    X(EAGER, WRITE_FAIL, ILLEGAL, none)                                       \
    X(EAGER, COMMIT_OK, ILLEGAL, none)                                        \
    X(EAGER, COMMIT_FAIL, ILLEGAL, none)                                      \
    X(EAGER, CANCEL_OK, ILLEGAL, none)                                        \
    X(EAGER, CANCEL_FAIL, ILLEGAL, none)                                      \
    X(EAGER, USER_CANCEL, DEFER, defer_stop)                                  \
    X(EAGER, DEADLINE, TRANSITION, stop)                                      \
    X(EAGER, RETRY, ILLEGAL, none)                                            \
    X(EAGER, SHUTDOWN, DEFER, defer_stop)                                     \
    X(EAGER, EAGER_OK, TRANSITION, eager_result)                              \
    X(EAGER, EAGER_FAIL, TRANSITION, eager_result)                            \
    X(EAGER, PART, IGNORE, part_refused)                                      \
    X(EAGER, SEAL, IGNORE, part_refused)

/*
 * The edges a TRANSITION handler may take to another state: X(FROM, EVENT,
 * TO).  Self-loops are not listed.  The dispatcher checks every state change
 * against this list (assert in debug, counted as illegal in release), and
 * the Graphviz diagram is drawn from it.
 */
#define XFER_TRANSFER_EDGES(X)                                                \
    X(NEW, SUBMIT, RESERVING)                                                 \
    X(NEW, USER_CANCEL, TOMBSTONED)                                           \
    X(RESERVING, RESERVE_OK, WRITING)                                         \
    X(RESERVING, RESERVE_OK, CANCELLING)                                      \
    X(RESERVING, RESERVE_FAIL, CANCELLING)                                    \
    X(RESERVING, USER_CANCEL, CANCELLING)                                     \
    X(RESERVING, DEADLINE, CANCELLING)                                        \
    X(RESERVING, SHUTDOWN, CANCELLING)                                        \
    X(WRITING, WRITE_OK, COMPLETING)                                          \
    X(WRITING, WRITE_OK, CANCELLING)                                          \
    X(WRITING, WRITE_FAIL, CANCELLING)                                        \
    X(WRITING, USER_CANCEL, CANCELLING)                                       \
    X(WRITING, DEADLINE, CANCELLING)                                          \
    X(WRITING, SHUTDOWN, CANCELLING)                                          \
    X(COMPLETING, COMMIT_OK, TOMBSTONED)                                      \
    X(COMPLETING, COMMIT_OK, CANCELLING)                                      \
    X(COMPLETING, COMMIT_FAIL, CANCELLING)                                    \
    X(COMPLETING, DEADLINE, CANCELLING)                                       \
    X(CANCELLING, CANCEL_OK, TOMBSTONED)                                      \
    X(CANCELLING, CANCEL_FAIL, TOMBSTONED)                                    \
    X(CANCELLING, RETRY, TOMBSTONED) /* abandoned (xfer_core_abandon) */      \
    X(NEW, SUBMIT, EAGER)                                                     \
    X(EAGER, EAGER_OK, TOMBSTONED)                                            \
    X(EAGER, EAGER_OK, CANCELLING)                                            \
    X(EAGER, EAGER_FAIL, CANCELLING)                                          \
    /* a stream: sealed with every part's writes done (docs/design.md 2.5) */ \
    X(WRITING, SEAL, COMPLETING)                                              \
    X(RESERVING, RESERVE_OK, COMPLETING) /* sealed with no part at all */

typedef enum xfer_transfer_state {
#define XFER_ENUM_(s) XFER_TRANSFER_STATE_##s,
    XFER_TRANSFER_STATES(XFER_ENUM_)
#undef XFER_ENUM_
    XFER_TRANSFER_STATE_COUNT_
} xfer_transfer_state;

typedef enum xfer_transfer_event {
#define XFER_ENUM_(e) XFER_TRANSFER_EVENT_##e,
    XFER_TRANSFER_EVENTS(XFER_ENUM_)
#undef XFER_ENUM_
    XFER_TRANSFER_EVENT_COUNT_
} xfer_transfer_event;

/* ------------------------------------------------------------------------ */
/* Reservation machine (consumer side, one per (transfer id, shard))        */
/* ------------------------------------------------------------------------ */

#define XFER_RESV_STATES(X)                                                   \
    X(NONE)            /* implicit start: the id is not held */              \
    X(RESERVED)        /* memory allocated, lease running, no write */       \
    X(WRITING)         /* a write in flight (or its copy, device pools) */   \
    X(READY)           /* committed; ready event emitted; lease running */   \
    X(TAKEN)           /* pinned by the consumer; no lease, no cancel */     \
    X(CANCEL_PENDING)  /* cancelled during a write: freed when it ends */    \
    X(EXPIRE_PENDING)  /* lease ran out during a write: same */              \
    X(CANCELLED)       /* tombstone: freed by cancel */                      \
    X(EXPIRED)         /* tombstone: freed by lease expiry */                \
    X(DONE)            /* tombstone: taken, then released by the consumer */ \
    /* One-sided shards only (xfer_shard_config.one_sided, RDMA): the       \
     * region's rkey is being invalidated; nothing is freed, and no READY   \
     * goes out, before INVALIDATED says no write can land any more. */    \
    X(COMMIT_INVAL)    /* committed: READY once invalidated */             \
    X(CANCEL_INVAL)    /* cancelled: freed once invalidated */             \
    X(EXPIRE_INVAL)    /* lease ran out: freed once invalidated */

#define XFER_RESV_EVENTS(X)                                                   \
    X(RESERVE)                                                                \
    X(WRITE_BEGIN)                                                            \
    X(WRITE_END_OK)                                                           \
    X(WRITE_END_FAIL)                                                         \
    X(COMMIT)                                                                 \
    X(CANCEL)                                                                 \
    X(LEASE_EXPIRE)                                                           \
    X(TAKE)                                                                   \
    X(RELEASE)                                                                \
    X(TOMB_EXPIRE)                                                            \
    X(INVALIDATED)     /* one-sided: the rkey's invalidation completed */   \
    X(EAGER)           /* reserve + data + commit, applied whole or refused */ \
    X(REFRESH)         /* the owner extends a held reservation's lease */

#define XFER_RESV_TABLE(X)                                                    \
    X(NONE, RESERVE,              TRANSITION, reserve)                        \
    X(NONE, WRITE_BEGIN,          IGNORE,     refuse)                         \
    X(NONE, WRITE_END_OK,         ILLEGAL,    none)                           \
    X(NONE, WRITE_END_FAIL,       ILLEGAL,    none)                           \
    X(NONE, COMMIT,               IGNORE,     refuse)                         \
    X(NONE, CANCEL,               TRANSITION, preempt)                        \
    X(NONE, LEASE_EXPIRE,         ILLEGAL,    none)                           \
    X(NONE, TAKE,                 IGNORE,     refuse)                         \
    X(NONE, RELEASE,              IGNORE,     refuse)                         \
    X(NONE, TOMB_EXPIRE,          ILLEGAL,    none)                           \
    X(NONE, INVALIDATED,          ILLEGAL,    none)                           \
    X(NONE, EAGER, TRANSITION, eager)                                         \
    X(NONE, REFRESH, IGNORE, refuse)                                          \
                                                                              \
    X(RESERVED, RESERVE,          IGNORE,     reserve_again)                  \
    X(RESERVED, WRITE_BEGIN,      TRANSITION, write_begin)                    \
    X(RESERVED, WRITE_END_OK,     ILLEGAL,    none)                           \
    X(RESERVED, WRITE_END_FAIL,   ILLEGAL,    none)                           \
    X(RESERVED, COMMIT,           TRANSITION, commit)                         \
    X(RESERVED, CANCEL,           TRANSITION, free_cancelled)                 \
    X(RESERVED, LEASE_EXPIRE,     TRANSITION, free_expired)                   \
    X(RESERVED, TAKE,             IGNORE,     refuse)                         \
    X(RESERVED, RELEASE,          IGNORE,     refuse)                         \
    X(RESERVED, TOMB_EXPIRE,      ILLEGAL,    none)                           \
    X(RESERVED, INVALIDATED,      ILLEGAL,    none)                           \
    X(RESERVED, EAGER, IGNORE, refuse)                                        \
    X(RESERVED, REFRESH, IGNORE, refresh)                                     \
                                                                              \
    X(WRITING, RESERVE,           IGNORE,     reserve_again)                  \
    X(WRITING, WRITE_BEGIN,       TRANSITION, write_begin)                    \
    X(WRITING, WRITE_END_OK,      TRANSITION, write_end)                      \
    X(WRITING, WRITE_END_FAIL,    TRANSITION, write_end)                      \
    X(WRITING, COMMIT,            IGNORE,     refuse)                         \
    X(WRITING, CANCEL,            DEFER,      defer_cancel)                   \
    X(WRITING, LEASE_EXPIRE,      DEFER,      defer_expire)                   \
    X(WRITING, TAKE,              IGNORE,     refuse)                         \
    X(WRITING, RELEASE,           IGNORE,     refuse)                         \
    X(WRITING, TOMB_EXPIRE,       ILLEGAL,    none)                           \
    X(WRITING, INVALIDATED,       ILLEGAL,    none)                           \
    X(WRITING, EAGER, IGNORE, refuse)                                         \
    X(WRITING, REFRESH, IGNORE, refresh)                                      \
                                                                              \
    X(READY, RESERVE,             IGNORE,     refuse)                         \
    X(READY, WRITE_BEGIN,         IGNORE,     refuse)                         \
    X(READY, WRITE_END_OK,        ILLEGAL,    none)                           \
    X(READY, WRITE_END_FAIL,      ILLEGAL,    none)                           \
    X(READY, COMMIT,              IGNORE,     ack)                            \
    X(READY, CANCEL,              TRANSITION, free_cancelled)                 \
    X(READY, LEASE_EXPIRE,        TRANSITION, free_expired)                   \
    X(READY, TAKE,                TRANSITION, take)                           \
    X(READY, RELEASE,             IGNORE,     refuse)                         \
    X(READY, TOMB_EXPIRE,         ILLEGAL,    none)                           \
    X(READY, INVALIDATED,         ILLEGAL,    none)                           \
    X(READY, EAGER, IGNORE, refuse)                                           \
    X(READY, REFRESH, IGNORE, refuse)                                         \
                                                                              \
    X(TAKEN, RESERVE,             IGNORE,     refuse)                         \
    X(TAKEN, WRITE_BEGIN,         IGNORE,     refuse)                         \
    X(TAKEN, WRITE_END_OK,        ILLEGAL,    none)                           \
    X(TAKEN, WRITE_END_FAIL,      ILLEGAL,    none)                           \
    X(TAKEN, COMMIT,              IGNORE,     ack)                            \
    X(TAKEN, CANCEL,              IGNORE,     refuse)                         \
    X(TAKEN, LEASE_EXPIRE,        ILLEGAL,    none)                           \
    X(TAKEN, TAKE,                IGNORE,     refuse)                         \
    X(TAKEN, RELEASE,             TRANSITION, release)                        \
    X(TAKEN, TOMB_EXPIRE,         ILLEGAL,    none)                           \
    X(TAKEN, INVALIDATED,         ILLEGAL,    none)                           \
    X(TAKEN, EAGER, IGNORE, refuse)                                           \
    X(TAKEN, REFRESH, IGNORE, refuse)                                         \
                                                                              \
    X(CANCEL_PENDING, RESERVE,        IGNORE,     refuse)                     \
    X(CANCEL_PENDING, WRITE_BEGIN,    IGNORE,     refuse)                     \
    X(CANCEL_PENDING, WRITE_END_OK,   TRANSITION, write_end_pending)          \
    X(CANCEL_PENDING, WRITE_END_FAIL, TRANSITION, write_end_pending)          \
    X(CANCEL_PENDING, COMMIT,         IGNORE,     refuse)                     \
    X(CANCEL_PENDING, CANCEL,         IGNORE,     ack)                        \
    X(CANCEL_PENDING, LEASE_EXPIRE,   IGNORE,     none)                       \
    X(CANCEL_PENDING, TAKE,           IGNORE,     refuse)                     \
    X(CANCEL_PENDING, RELEASE,        IGNORE,     refuse)                     \
    X(CANCEL_PENDING, TOMB_EXPIRE,    ILLEGAL,    none)                       \
    X(CANCEL_PENDING, INVALIDATED,ILLEGAL,    none)                           \
    X(CANCEL_PENDING, EAGER, IGNORE, refuse)                                  \
    X(CANCEL_PENDING, REFRESH, IGNORE, refuse)                                \
                                                                              \
    X(EXPIRE_PENDING, RESERVE,        IGNORE,     refuse)                     \
    X(EXPIRE_PENDING, WRITE_BEGIN,    IGNORE,     refuse)                     \
    X(EXPIRE_PENDING, WRITE_END_OK,   TRANSITION, write_end_pending)          \
    X(EXPIRE_PENDING, WRITE_END_FAIL, TRANSITION, write_end_pending)          \
    X(EXPIRE_PENDING, COMMIT,         IGNORE,     refuse)                     \
    X(EXPIRE_PENDING, CANCEL,         IGNORE,     ack)                        \
    X(EXPIRE_PENDING, LEASE_EXPIRE,   ILLEGAL,    none)                       \
    X(EXPIRE_PENDING, TAKE,           IGNORE,     refuse)                     \
    X(EXPIRE_PENDING, RELEASE,        IGNORE,     refuse)                     \
    X(EXPIRE_PENDING, TOMB_EXPIRE,    ILLEGAL,    none)                       \
    X(EXPIRE_PENDING, INVALIDATED,ILLEGAL,    none)                           \
    X(EXPIRE_PENDING, EAGER, IGNORE, refuse)                                  \
    X(EXPIRE_PENDING, REFRESH, IGNORE, refuse)                                \
                                                                              \
    X(CANCELLED, RESERVE,         IGNORE,     refuse)                         \
    X(CANCELLED, WRITE_BEGIN,     IGNORE,     refuse)                         \
    X(CANCELLED, WRITE_END_OK,    ILLEGAL,    none)                           \
    X(CANCELLED, WRITE_END_FAIL,  ILLEGAL,    none)                           \
    X(CANCELLED, COMMIT,          IGNORE,     refuse)                         \
    X(CANCELLED, CANCEL,          IGNORE,     tomb_cancel)                    \
    X(CANCELLED, LEASE_EXPIRE,    ILLEGAL,    none)                           \
    X(CANCELLED, TAKE,            IGNORE,     refuse)                         \
    X(CANCELLED, RELEASE,         IGNORE,     refuse)                         \
    X(CANCELLED, TOMB_EXPIRE,     TRANSITION, drop)                           \
    X(CANCELLED, INVALIDATED,     ILLEGAL,    none)                           \
    X(CANCELLED, EAGER, IGNORE, refuse)                                       \
    X(CANCELLED, REFRESH, IGNORE, refuse)                                     \
                                                                              \
    X(EXPIRED, RESERVE,           IGNORE,     refuse)                         \
    X(EXPIRED, WRITE_BEGIN,       IGNORE,     refuse)                         \
    X(EXPIRED, WRITE_END_OK,      ILLEGAL,    none)                           \
    X(EXPIRED, WRITE_END_FAIL,    ILLEGAL,    none)                           \
    X(EXPIRED, COMMIT,            IGNORE,     refuse)                         \
    X(EXPIRED, CANCEL,            IGNORE,     tomb_cancel)                    \
    X(EXPIRED, LEASE_EXPIRE,      ILLEGAL,    none)                           \
    X(EXPIRED, TAKE,              IGNORE,     refuse)                         \
    X(EXPIRED, RELEASE,           IGNORE,     refuse)                         \
    X(EXPIRED, TOMB_EXPIRE,       TRANSITION, drop)                           \
    X(EXPIRED, INVALIDATED,       ILLEGAL,    none)                           \
    X(EXPIRED, EAGER, IGNORE, refuse)                                         \
    X(EXPIRED, REFRESH, IGNORE, refuse)                                       \
                                                                              \
    X(DONE, RESERVE,              IGNORE,     refuse)                         \
    X(DONE, WRITE_BEGIN,          IGNORE,     refuse)                         \
    X(DONE, WRITE_END_OK,         ILLEGAL,    none)                           \
    X(DONE, WRITE_END_FAIL,       ILLEGAL,    none)                           \
    X(DONE, COMMIT,               IGNORE,     refuse)                         \
    X(DONE, CANCEL,               IGNORE,     refuse)                         \
    X(DONE, LEASE_EXPIRE,         ILLEGAL,    none)                           \
    X(DONE, TAKE,                 IGNORE,     refuse)                         \
    X(DONE, RELEASE,              IGNORE,     refuse)                         \
    X(DONE, TOMB_EXPIRE,          TRANSITION, drop)                           \
    X(DONE, INVALIDATED,          ILLEGAL,    none)                           \
    X(DONE, EAGER, IGNORE, refuse)                                            \
    X(DONE, REFRESH, IGNORE, refuse)                                          \
                                                                              \
    X(COMMIT_INVAL, RESERVE,      IGNORE,     refuse)                         \
    X(COMMIT_INVAL, WRITE_BEGIN,  IGNORE,     refuse)                         \
    X(COMMIT_INVAL, WRITE_END_OK, ILLEGAL,    none)                           \
    X(COMMIT_INVAL, WRITE_END_FAIL, ILLEGAL,   none)                          \
    X(COMMIT_INVAL, COMMIT,       IGNORE,     ack)                            \
    X(COMMIT_INVAL, CANCEL,       DEFER,      defer_cancel_inval)             \
    X(COMMIT_INVAL, LEASE_EXPIRE, DEFER,      defer_expire_inval)             \
    X(COMMIT_INVAL, TAKE,         IGNORE,     refuse)                         \
    X(COMMIT_INVAL, RELEASE,      IGNORE,     refuse)                         \
    X(COMMIT_INVAL, TOMB_EXPIRE,  ILLEGAL,    none)                           \
    X(COMMIT_INVAL, INVALIDATED,  TRANSITION, invalidated)                    \
    X(COMMIT_INVAL, EAGER, IGNORE, refuse)                                    \
    X(COMMIT_INVAL, REFRESH, IGNORE, refuse)                                  \
                                                                              \
    X(CANCEL_INVAL, RESERVE,      IGNORE,     refuse)                         \
    X(CANCEL_INVAL, WRITE_BEGIN,  IGNORE,     refuse)                         \
    X(CANCEL_INVAL, WRITE_END_OK, ILLEGAL,    none)                           \
    X(CANCEL_INVAL, WRITE_END_FAIL, ILLEGAL,   none)                          \
    X(CANCEL_INVAL, COMMIT,       IGNORE,     refuse)                         \
    X(CANCEL_INVAL, CANCEL,       IGNORE,     ack)                            \
    X(CANCEL_INVAL, LEASE_EXPIRE, IGNORE,     none)                           \
    X(CANCEL_INVAL, TAKE,         IGNORE,     refuse)                         \
    X(CANCEL_INVAL, RELEASE,      IGNORE,     refuse)                         \
    X(CANCEL_INVAL, TOMB_EXPIRE,  ILLEGAL,    none)                           \
    X(CANCEL_INVAL, INVALIDATED,  TRANSITION, invalidated)                    \
    X(CANCEL_INVAL, EAGER, IGNORE, refuse)                                    \
    X(CANCEL_INVAL, REFRESH, IGNORE, refuse)                                  \
                                                                              \
    X(EXPIRE_INVAL, RESERVE,      IGNORE,     refuse)                         \
    X(EXPIRE_INVAL, WRITE_BEGIN,  IGNORE,     refuse)                         \
    X(EXPIRE_INVAL, WRITE_END_OK, ILLEGAL,    none)                           \
    X(EXPIRE_INVAL, WRITE_END_FAIL, ILLEGAL,   none)                          \
    X(EXPIRE_INVAL, COMMIT,       IGNORE,     refuse)                         \
    X(EXPIRE_INVAL, CANCEL,       IGNORE,     ack)                            \
    X(EXPIRE_INVAL, LEASE_EXPIRE, ILLEGAL,    none)                           \
    X(EXPIRE_INVAL, TAKE,         IGNORE,     refuse)                         \
    X(EXPIRE_INVAL, RELEASE,      IGNORE,     refuse)                         \
    X(EXPIRE_INVAL, TOMB_EXPIRE,  ILLEGAL,    none)                           \
    X(EXPIRE_INVAL, INVALIDATED,  TRANSITION, invalidated)                    \
    X(EXPIRE_INVAL, EAGER, IGNORE, refuse)                                    \
    X(EXPIRE_INVAL, REFRESH, IGNORE, refuse)

/* Edges of the reservation machine (see XFER_TRANSFER_EDGES). */
#define XFER_RESV_EDGES(X)                                                    \
    X(NONE, RESERVE, RESERVED)                                                \
    X(NONE, CANCEL, CANCELLED)                                                \
    X(RESERVED, WRITE_BEGIN, WRITING)                                         \
    X(RESERVED, COMMIT, READY)                                                \
    X(RESERVED, CANCEL, CANCELLED)                                            \
    X(RESERVED, LEASE_EXPIRE, EXPIRED)                                        \
    X(WRITING, WRITE_END_OK, RESERVED)                                        \
    X(WRITING, WRITE_END_FAIL, RESERVED)                                      \
    X(WRITING, CANCEL, CANCEL_PENDING)                                        \
    X(WRITING, LEASE_EXPIRE, EXPIRE_PENDING)                                  \
    X(READY, CANCEL, CANCELLED)                                               \
    X(READY, LEASE_EXPIRE, EXPIRED)                                           \
    X(READY, TAKE, TAKEN)                                                     \
    X(TAKEN, RELEASE, DONE)                                                   \
    X(CANCEL_PENDING, WRITE_END_OK, CANCELLED)                                \
    X(CANCEL_PENDING, WRITE_END_FAIL, CANCELLED)                              \
    X(EXPIRE_PENDING, WRITE_END_OK, EXPIRED)                                  \
    X(EXPIRE_PENDING, WRITE_END_FAIL, EXPIRED)                                \
    X(CANCELLED, TOMB_EXPIRE, NONE)                                           \
    X(EXPIRED, TOMB_EXPIRE, NONE)                                             \
    X(DONE, TOMB_EXPIRE, NONE)                                                \
    /* one-sided shards: the rkey's invalidation comes first */             \
    X(RESERVED, COMMIT, COMMIT_INVAL)                                         \
    X(RESERVED, CANCEL, CANCEL_INVAL)                                         \
    X(RESERVED, LEASE_EXPIRE, EXPIRE_INVAL)                                   \
    X(CANCEL_PENDING, WRITE_END_OK, CANCEL_INVAL)                             \
    X(CANCEL_PENDING, WRITE_END_FAIL, CANCEL_INVAL)                           \
    X(EXPIRE_PENDING, WRITE_END_OK, EXPIRE_INVAL)                             \
    X(EXPIRE_PENDING, WRITE_END_FAIL, EXPIRE_INVAL)                           \
    X(COMMIT_INVAL, CANCEL, CANCEL_INVAL)                                     \
    X(COMMIT_INVAL, LEASE_EXPIRE, EXPIRE_INVAL)                               \
    X(COMMIT_INVAL, INVALIDATED, READY)                                       \
    X(CANCEL_INVAL, INVALIDATED, CANCELLED)                                   \
    X(EXPIRE_INVAL, INVALIDATED, EXPIRED)                                     \
    /* the eager path: reserved, written and committed in one step */       \
    X(NONE, EAGER, READY)

typedef enum xfer_resv_state {
#define XFER_ENUM_(s) XFER_RESV_STATE_##s,
    XFER_RESV_STATES(XFER_ENUM_)
#undef XFER_ENUM_
    XFER_RESV_STATE_COUNT_
} xfer_resv_state;

typedef enum xfer_resv_event {
#define XFER_ENUM_(e) XFER_RESV_EVENT_##e,
    XFER_RESV_EVENTS(XFER_ENUM_)
#undef XFER_ENUM_
    XFER_RESV_EVENT_COUNT_
} xfer_resv_event;

/* ------------------------------------------------------------------------ */
/* Readiness machine (consumer scheduler, one per transfer id)              */
/* ------------------------------------------------------------------------ */

#define XFER_READY_STATES(X)                                                  \
    X(NONE)         /* implicit start */                                     \
    X(WAITING)      /* some shards reported ready */                         \
    X(TAKING)       /* every shard ready; take (pin) sent to every shard */  \
    X(AVAILABLE)    /* tombstone: reported available, every shard taken */   \
    X(UNAVAILABLE)  /* tombstone: reported unavailable, or pre-emptive */

#define XFER_READY_EVENTS(X)                                                  \
    X(READY)           /* ready(id, attempt, rid) from shard k */            \
    X(TAKE_OK)                                                               \
    X(TAKE_FAIL)                                                             \
    X(CANCEL)          /* the consumer scheduler's own cancel */             \
    X(SHARD_ENDED)     /* cancelled(id) or expired(id) from a shard */       \
    X(DEADLINE)                                                              \
    X(TOMB_EXPIRE)

/* A ready or a shard's end of an attempt newer than an UNAVAILABLE
 * tombstone's is a new transfer of the id (xfer-check finding F3): it
 * leaves the tombstone and runs as from NONE (tomb_ready, tomb_ended).  A
 * tombstone of attempt 0 (the consumer's own cancel) covers every attempt.
 * AVAILABLE keeps every other attempt's ready out (stale_ready). */
#define XFER_READY_TABLE(X)                                                   \
    X(NONE, READY,              TRANSITION, first_ready)                      \
    X(NONE, TAKE_OK,            ILLEGAL,    none)                             \
    X(NONE, TAKE_FAIL,          ILLEGAL,    none)                             \
    X(NONE, CANCEL,             TRANSITION, preempt)                          \
    X(NONE, SHARD_ENDED,        TRANSITION, preempt)                          \
    X(NONE, DEADLINE,           ILLEGAL,    none)                             \
    X(NONE, TOMB_EXPIRE,        ILLEGAL,    none)                             \
                                                                              \
    X(WAITING, READY,           TRANSITION, ready)                            \
    X(WAITING, TAKE_OK,         ILLEGAL,    none)                             \
    X(WAITING, TAKE_FAIL,       ILLEGAL,    none)                             \
    X(WAITING, CANCEL,          TRANSITION, give_up)                          \
    X(WAITING, SHARD_ENDED,     TRANSITION, give_up)                          \
    X(WAITING, DEADLINE,        TRANSITION, give_up)                          \
    X(WAITING, TOMB_EXPIRE,     ILLEGAL,    none)                             \
                                                                              \
    X(TAKING, READY,            IGNORE,     stale_ready)                      \
    X(TAKING, TAKE_OK,          TRANSITION, take_result)                      \
    X(TAKING, TAKE_FAIL,        TRANSITION, take_result)                      \
    X(TAKING, CANCEL,           DEFER,      defer_give_up)                    \
    X(TAKING, SHARD_ENDED,      DEFER,      defer_give_up)                    \
    X(TAKING, DEADLINE,         DEFER,      defer_give_up)                    \
    X(TAKING, TOMB_EXPIRE,      ILLEGAL,    none)                             \
                                                                              \
    X(AVAILABLE, READY,         IGNORE,     stale_ready)                      \
    X(AVAILABLE, TAKE_OK,       ILLEGAL,    none)                             \
    X(AVAILABLE, TAKE_FAIL,     ILLEGAL,    none)                             \
    X(AVAILABLE, CANCEL,        IGNORE,     none)                             \
    X(AVAILABLE, SHARD_ENDED,   IGNORE,     none)                             \
    X(AVAILABLE, DEADLINE,      ILLEGAL,    none)                             \
    X(AVAILABLE, TOMB_EXPIRE,   TRANSITION, drop)                             \
                                                                              \
    X(UNAVAILABLE, READY,       TRANSITION, tomb_ready)                       \
    X(UNAVAILABLE, TAKE_OK,     ILLEGAL,    none)                             \
    X(UNAVAILABLE, TAKE_FAIL,   ILLEGAL,    none)                             \
    X(UNAVAILABLE, CANCEL,      IGNORE,     refresh)                          \
    X(UNAVAILABLE, SHARD_ENDED, TRANSITION, tomb_ended)                       \
    X(UNAVAILABLE, DEADLINE,    ILLEGAL,    none)                             \
    X(UNAVAILABLE, TOMB_EXPIRE, TRANSITION, drop)

/* Edges of the readiness machine (see XFER_TRANSFER_EDGES). */
#define XFER_READY_EDGES(X)                                                   \
    X(NONE, READY, WAITING)                                                   \
    X(NONE, READY, TAKING)                                                    \
    X(NONE, CANCEL, UNAVAILABLE)                                              \
    X(NONE, SHARD_ENDED, UNAVAILABLE)                                         \
    X(WAITING, READY, TAKING)                                                 \
    X(WAITING, CANCEL, UNAVAILABLE)                                           \
    X(WAITING, SHARD_ENDED, UNAVAILABLE)                                      \
    X(WAITING, DEADLINE, UNAVAILABLE)                                         \
    X(TAKING, TAKE_OK, AVAILABLE)                                             \
    X(TAKING, TAKE_OK, UNAVAILABLE)                                           \
    X(TAKING, TAKE_FAIL, UNAVAILABLE)                                         \
    X(AVAILABLE, TOMB_EXPIRE, NONE)                                           \
    X(UNAVAILABLE, READY, WAITING)                                            \
    X(UNAVAILABLE, READY, TAKING)                                             \
    X(UNAVAILABLE, TOMB_EXPIRE, NONE)

typedef enum xfer_ready_state {
#define XFER_ENUM_(s) XFER_READY_STATE_##s,
    XFER_READY_STATES(XFER_ENUM_)
#undef XFER_ENUM_
    XFER_READY_STATE_COUNT_
} xfer_ready_state;

typedef enum xfer_ready_event {
#define XFER_ENUM_(e) XFER_READY_EVENT_##e,
    XFER_READY_EVENTS(XFER_ENUM_)
#undef XFER_ENUM_
    XFER_READY_EVENT_COUNT_
} xfer_ready_event;

/* ------------------------------------------------------------------------ */
/* Table queries (for tools and tests)                                       */
/* ------------------------------------------------------------------------ */

/* Number of states / events of a machine (XFER_MACHINE_TRANSFER, _RESERVATION,
 * _READINESS); 0 for any other value. */
XFER_API unsigned xfer_fsm_nstates(unsigned machine);
XFER_API unsigned xfer_fsm_nevents(unsigned machine);

/* Names; never NULL ("?" when out of range). */
XFER_API const char *xfer_fsm_state_name(unsigned machine, unsigned state);
XFER_API const char *xfer_fsm_event_name(unsigned machine, unsigned event);

/* The verdict of a cell (xfer_verdict), or XFER_VERDICT_ILLEGAL when out of
 * range. */
XFER_API unsigned xfer_fsm_verdict(unsigned machine, unsigned state, unsigned event);

/* True when FROM --EVENT--> TO (TO != FROM) is a declared edge. */
XFER_API bool xfer_fsm_edge_ok(unsigned machine, unsigned from, unsigned event,
                               unsigned to);

/* The handler token of a cell as a string ("none" where none runs). */
XFER_API const char *xfer_fsm_handler_name(unsigned machine, unsigned state,
                                  unsigned event);

/*
 * The state diagram of a machine in Graphviz dot, written into buf (at most
 * len bytes, NUL-terminated).  Returns the length the full text needs
 * (excluding the NUL), like snprintf; a negative xfer_err for a bad machine.
 */
XFER_API int xfer_fsm_dot(unsigned machine, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* XFER_FSM_H */
