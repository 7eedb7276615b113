/*
 * fsm/fault.h - the one matcher of fault rules (xfer/fault.h), shared by
 * the loop transport (transport/loop.c) and the shard server
 * (transport/server_req.c), so a rule means the same thing in process and
 * over TCP.  Pure: the caller says which op reached which shard; the
 * matcher says what befalls it.  Randomness is the set's own seeded
 * xorshift (I10).  Not API (fsm_private_dep).
 */
#ifndef XFER_FSM_FAULT_H
#define XFER_FSM_FAULT_H

#include <stdbool.h>
#include <stdint.h>

#include "xfer/fault.h"

/* No rule decided the op's fate (it may still be delayed). */
#define XFER_FAULT_NONE 0xFFu

typedef struct xfer_faults {
    xfer_fault_rule rules[XFER_FAULT_MAX_RULES];
    uint32_t fired[XFER_FAULT_MAX_RULES];
    uint32_t n;
    uint64_t rng;
} xfer_faults;

/* What the rules decided for one op: its fate (a xfer_fault_kind other
 * than DELAY, or XFER_FAULT_NONE), the status of a FAIL/APPLIED_LOST,
 * and the summed delay of every matching DELAY rule. */
typedef struct xfer_fault_fate {
    uint8_t kind;
    int32_t error;
    uint64_t delay_ns;
} xfer_fault_fate;

/* An empty set drawing from `seed` (0: a fixed seed). */
void xfer_faults_init(xfer_faults *f, uint64_t seed);
/* True when r is a rule a set takes (kind, op, probability, error). */
bool xfer_fault_rule_valid(const xfer_fault_rule *r);
/* Append a copy of r.  Errors: XFER_ERR_INVALID_ARG (!valid),
 * XFER_ERR_BUSY (XFER_FAULT_MAX_RULES held). */
int xfer_faults_add(xfer_faults *f, const xfer_fault_rule *r);
/* Drop every rule (the generator goes on where it was). */
void xfer_faults_clear(xfer_faults *f);
/* Decide the fate of op `op` (xfer_op_kind) of transfer `id` on shard
 * `shard` (header comment of xfer/fault.h), into *out.  Returns how many
 * rules fired. */
uint32_t xfer_faults_decide(xfer_faults *f, unsigned op, uint16_t shard,
                            uint64_t id, xfer_fault_fate *out);

#endif /* XFER_FSM_FAULT_H */
