/*
 * xfer/fault.h - fault rules: what a test asks a shard to do to the
 * producer's ops that match ("shard 2 fails its write", "delay shard 1's
 * commit by 200 ms").  The same rules, matched by the same code, drive the
 * in-process loop transport (xfer_loop_add_rule, xfer/loop.h) and the
 * shard server over real sockets (xfer_server_add_rule, xfer/server.h;
 * `xferd --fault`; xfer.Server(faults=...) in Python).
 *
 * How rules combine: when an op reaches the shard, the rules are tried in
 * the order they were added.  A matching DELAY rule adds its delay_ns to
 * the op and matching goes on, so several DELAY rules add up.  The first
 * matching rule of another kind (FAIL, APPLIED_LOST, DROP) decides the
 * op's fate and ends the matching: rules after it are not tried, and their
 * counts and probabilities are not used.  The op then meets that fate
 * after the summed delay (a delayed FAIL, say).  A rule that matches
 * counts a firing (`count`), DELAY rules included.  Probabilities draw
 * from a seeded xorshift generator, never from rand(), so a seeded run
 * fires the same rules on the same ops.
 *
 * Pure C11; usable from C++.
 */
#ifndef XFER_FAULT_H
#define XFER_FAULT_H

#include <stdint.h>

#include "xfer/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a matching fault rule does to an op. Never renumbered. */
typedef enum xfer_fault_kind {
    XFER_FAULT_FAIL = 0,    /* the shard refuses: not applied, error reply */
    XFER_FAULT_APPLIED_LOST = 1, /* applied on the shard, reply says failed */
    XFER_FAULT_DROP = 2,    /* not applied, never answered (until the
                               engine aborts it: its deadline) */
    XFER_FAULT_DELAY = 3,   /* applied (or meets a later rule's fate)
                               delay_ns later */
    XFER_FAULT_COUNT_
} xfer_fault_kind;

#define XFER_FAULT_ANY_OP 0xFFu
#define XFER_FAULT_ANY_SHARD (-1)
/* Rules one transport or server holds at most. */
#define XFER_FAULT_MAX_RULES 64

typedef struct xfer_fault_rule {
    uint8_t kind;      /* xfer_fault_kind */
    uint8_t op;        /* xfer_op_kind, or XFER_FAULT_ANY_OP */
    int16_t shard;     /* shard index, or XFER_FAULT_ANY_SHARD */
    uint64_t id;       /* transfer id, 0: any */
    uint32_t prob_ppm; /* chance in millionths; 0 means always */
    uint32_t count;    /* fire at most this many times; 0: unlimited */
    uint64_t delay_ns; /* DELAY */
    int32_t error;     /* FAIL/APPLIED_LOST status; 0: XFER_ERR_REMOTE */
} xfer_fault_rule;

/*
 * xfer_fault_rule_parse - read a rule from its text form, comma-separated
 * key=value pairs in any order (the form of `xferd --fault`):
 *
 *   action=fail|applied_lost|drop|delay   required
 *   op=reserve|write|commit|cancel|eager|any   default any
 *   shard=N|any        a shard index (0..XFER_MAX_SHARDS-1); default any
 *   id=N               a transfer id; default any
 *   count=N            fire at most N times; default unlimited
 *   ppm=N              chance per op in millionths (1..1000000);
 *                      default always
 *   ms=N               the delay in milliseconds (action=delay only,
 *                      required there, at most one hour)
 *   error=NAME         the status of fail/applied_lost, an error name
 *                      without prefix (NO_SPACE) or its negative number;
 *                      default REMOTE
 *
 * e.g. "op=write,shard=2,action=fail", "op=commit,shard=1,action=delay,
 * ms=200".  `text` is borrowed.  On success writes *out and returns 0.
 * On failure *out is untouched and, when `bad` is not NULL, *bad points
 * into `text` at the pair that was refused (at `text` for a rule without
 * an action).  Any thread.
 * Errors: XFER_ERR_INVALID_ARG (NULL text or out, an unknown key, a bad
 * or missing value, a key given twice, ms= on a rule that is not a delay,
 * error= on one that is neither fail nor applied_lost).
 */
XFER_API int xfer_fault_rule_parse(const char *text, xfer_fault_rule *out,
                                   const char **bad);

#ifdef __cplusplus
}
#endif
#endif /* XFER_FAULT_H */
