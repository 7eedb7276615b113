/*
 * tools/check/stream.h - the stream mode (--parts N, issue 26 item 5):
 * every transfer is opened (xfer_core_open) instead of submitted, and the
 * producer's scheduler adds its N parts (part j: slice j of N of every
 * shard's reservation, from its own staging) at any point between the
 * other moves (before the reserves answered, between writes, after a
 * failure, a cancel, a deadline or a shutdown), then seals it.  Each part
 * holds its own staging, given back by RELEASE_PART (or at once when the
 * core refuses the part).  The PARTS monitor asserts: a part's staging
 * is released only once its writes all ended (I3 per part), a commit
 * goes out only once every part accepted was written on every shard and
 * the stream was sealed, and no part is accepted after the transfer
 * failed or was stopped.  The hooks below are called from step.c,
 * engine.c, consumer.c and monitor.c; everything of the mode is here.
 */
#ifndef XFER_CHECK_STREAM_H
#define XFER_CHECK_STREAM_H

#include <stdbool.h>

#include "world.h"

/* A stream's WRITE message carries its part's number and its offset in
 * the reservation in ck_msg.part (the --writes field, which the mode does
 * not use): the number in the low 4 bits, the offset above. */
#define CK_STREAM_PART(seq, off) ((uint16_t)((seq) | (off) << 4))
#define CK_STREAM_SEQ(m) ((unsigned)((m)->part & 15u))
#define CK_STREAM_OFF(m) ((uint32_t)((m)->part >> 4))

/* Whether the scheduler may add transfer t's next part / seal it now. */
bool ck_stream_may_part(const ck_world *w, unsigned t);
bool ck_stream_may_seal(const ck_world *w, unsigned t);
/* MV_PART, MV_SEAL: the scheduler adds t's next part, or seals t. */
void ck_stream_part(ck_world *w, unsigned t);
void ck_stream_seal(ck_world *w, unsigned t);
/* An accepted open of transfer t: no part added, none held. */
void ck_stream_opened(ck_world *w, unsigned t);
/* The engine model performs RELEASE_PART a (after the monitors saw it). */
void ck_stream_release(ck_world *w, const xfer_action *a);
/* PARTS: the monitors' view of a WRITE, COMMIT or RELEASE_PART action. */
void ck_stream_action(ck_world *w, const xfer_action *a);
/* PARTS: a WRITE's result m reaches the core. */
void ck_stream_result_in(ck_world *w, const ck_msg *m);

#endif /* XFER_CHECK_STREAM_H */
