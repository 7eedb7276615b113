/*
 * xfer/trace.h - the fixed-size trace record every machine emits.
 *
 * One record per step: an input fed into a machine (machine XFER_MACHINE_INPUT), a
 * transition it took (verdict TRANSITION/IGNORE/DEFER/ILLEGAL), an action it
 * produced, or a note (counters such as a late event rejected).  Records are
 * 64 bytes, plain old data, little-endian on disk (see xfer-trace's file
 * format in docs/trace.md).  The inputs recorded are enough to replay the pure
 * transfer core and compare the transitions it takes.
 */
#ifndef XFER_TRACE_H
#define XFER_TRACE_H

#include <stdint.h>

#include "xfer/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The lists below are X-macros with their values written out; the enums
 * and the name functions at the end of this header come from them.  Values
 * are in trace files: never renumbered, a new entry takes the next value.
 */

/* X(NAME, value, name): which machine (or record kind) a record belongs
 * to, and the name tools print for it. */
#define XFER_MACHINES(X)                                                      \
    X(TRANSFER, 0, "transfer")       /* producer transfer machine: a step */ \
    X(RESERVATION, 1, "reservation") /* consumer reservation machine */      \
    X(READINESS, 2, "readiness")     /* consumer readiness machine */        \
    X(INPUT, 3, "input")   /* an input to the transfer core (for replay) */  \
    X(ACTION, 4, "action") /* an action the transfer core produced */        \
    X(NOTE, 5, "note")     /* a counted note: late event, eviction, ... */   \
    X(CONFIG, 6, "config") /* the transfer core's configuration */

typedef enum xfer_machine {
#define XFER_MACHINE_ENUM_(name, value, str) XFER_MACHINE_##name = (value),
    XFER_MACHINES(XFER_MACHINE_ENUM_)
#undef XFER_MACHINE_ENUM_
    XFER_MACHINE_COUNT_
} xfer_machine;

/* X(NAME, value): the verdict of a table cell. */
#define XFER_VERDICTS(X)                                                      \
    X(TRANSITION, 0) /* a handler ran; the state may have changed */         \
    X(IGNORE, 1)     /* absorbed: traced and counted, nothing else */        \
    X(DEFER, 2)      /* remembered, acted on when the state allows */        \
    X(ILLEGAL, 3)    /* a bug: asserted in debug, traced in release */

typedef enum xfer_verdict {
#define XFER_VERDICT_ENUM_(name, value) XFER_VERDICT_##name = (value),
    XFER_VERDICTS(XFER_VERDICT_ENUM_)
#undef XFER_VERDICT_ENUM_
    XFER_VERDICT_COUNT_
} xfer_verdict;

/* Sentinel for "no shard" in xfer_trace_rec.shard. */
#define XFER_SHARD_NONE 0xFFFFu

/*
 * Emitter tags (xfer_trace_rec.flags, the trace file's `src` byte), so the
 * files of every process of a deployment can be merged into one timeline
 * (`xfer-trace show ID FILE...`, `stuck FILE...`):
 *   XFER_TRACE_SRC_PRODUCER      the engine / transfer core (untagged sinks)
 *   XFER_TRACE_SRC_SHARD(k)      shard k's reservation machine (1 + k, so
 *                                1..64): xfer_server, xferd --trace
 *   XFER_TRACE_SRC_CONSUMER      the consumer scheduler's readiness tracker
 *                                (xfer_consumer)
 * The machine byte stays what says which machine a record is from; the tag
 * says which process wrote it.  xfer-check's files use 1..S for its shards
 * and 7 for its readiness tracker.
 */
#define XFER_TRACE_SRC_PRODUCER 0u
#define XFER_TRACE_SRC_SHARD(k) (1u + (unsigned)(k))
#define XFER_TRACE_SRC_CONSUMER 0xFEu

/*
 * One trace record, 64 bytes.  The meaning of arg0..arg2 depends on the
 * machine and event; xfer-trace documents each.  `event` indexes the event
 * enum of `machine` (for XFER_MACHINE_INPUT: the transfer event; for
 * XFER_MACHINE_ACTION: enum xfer_action_kind; for XFER_MACHINE_NOTE: enum xfer_note).
 */
typedef struct xfer_trace_rec {
    uint64_t seq;     /* per-emitter sequence number, from 0 */
    uint64_t time_ns; /* the `now` the step was given */
    uint64_t id;      /* transfer id */
    uint64_t arg0;
    uint64_t arg1;
    uint64_t arg2;
    uint32_t attempt; /* attempt number, 0 if none */
    int32_t error;    /* xfer_err, 0 if none */
    uint16_t shard;   /* shard index or XFER_SHARD_NONE */
    uint8_t machine;  /* xfer_machine */
    uint8_t old_state;
    uint8_t event;
    uint8_t new_state;
    uint8_t verdict; /* xfer_verdict (steps only) */
    uint8_t flags;   /* the emitter tag: 0 from the machines; a tagged
                        file sink (xfer_tracefile_sink_tagged) writes its
                        tag here, so records of several emitters in one
                        file can be told apart (the file's `src` byte) */
} xfer_trace_rec;

/* X(NAME, value): notes (XFER_MACHINE_NOTE records), counted things that
 * are not transitions. */
#define XFER_NOTES(X)                                                         \
    X(LATE_SUBMIT, 0)    /* submit for a tombstoned id rejected */           \
    X(LATE_REPLY, 1)     /* reply for a tombstoned id absorbed */            \
    X(TOMB_EXPIRED, 2)   /* a tombstone outlived its TTL, dropped */         \
    X(TOMB_FULL, 3)      /* tombstone table at cap: BUSY returned */         \
    X(CANCEL_GAVE_UP, 4) /* cancel retries exhausted on a shard */           \
    X(PREEMPTIVE, 5)     /* cancel of an unknown id tombstoned it */         \
    X(UNKNOWN_REPLY, 6)  /* reply for an id never seen: absorbed */         \
    X(CORRUPT, 7)        /* a shard's region failed its checksum */

typedef enum xfer_note {
#define XFER_NOTE_ENUM_(name, value) XFER_NOTE_##name = (value),
    XFER_NOTES(XFER_NOTE_ENUM_)
#undef XFER_NOTE_ENUM_
    XFER_NOTE_COUNT_
} xfer_note;

/*
 * A trace sink.  The emitter calls fn(ud, rec) synchronously for each record;
 * `rec` is borrowed until fn returns.  fn must not call back into the emitter.
 */
typedef void (*xfer_trace_fn)(void *ud, const xfer_trace_rec *rec);

typedef struct xfer_trace_sink {
    xfer_trace_fn fn; /* NULL: tracing off */
    void *ud;
} xfer_trace_sink;

/* Names for the enums above, from their lists ("transfer", "IGNORE",
 * "LATE_REPLY"); never NULL ("?" when out of range).  Any thread. */
XFER_API const char *xfer_machine_name(unsigned machine);
XFER_API const char *xfer_verdict_name(unsigned verdict);
XFER_API const char *xfer_note_name(unsigned note);

#ifdef __cplusplus
}
#endif
#endif /* XFER_TRACE_H */
