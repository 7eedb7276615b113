/*
 * fsm/shard_check.c - the shard's integrity verdict (xfer_shard_check in
 * xfer/shard.h).  The checksum itself is computed by the driver (it owns
 * the library that computes it, and the memory); the decision, its trace
 * and the rule it serves (a region that does not match is never
 * committed) are the machine's, so the model checker runs the same code
 * (tools/check: the corruption mode) and a mutant of it is caught there.
 *
 * What must stay true: a mismatch is never answered 0; the record is not
 * touched either way.
 */
#include "shard_priv.h"

#include "step.h"

int xfer_shard_check(xfer_shard *s, uint64_t now_ns, uint64_t id,
                     uint32_t attempt, uint32_t expected, uint32_t got)
{
    if (!s)
        return XFER_ERR_INVALID_ARG;
    if (expected == got)
        return 0;
    xfer_step_note(&s->cfg.trace, &s->seq, now_ns, XFER_NOTE_CORRUPT, id,
                   attempt, s->cfg.shard_index, XFER_ERR_CORRUPT);
    return XFER_ERR_CORRUPT;
}
