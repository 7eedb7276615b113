/*
 * transport/wire_frame.h - frames cut from a libevent input buffer: the
 * one place where the wire protocol (wire.h) meets an evbuffer, shared by
 * the producer's transport (tcp.c), the shard server (server_conn.c) and
 * the consumer's links (consumer_link.c).
 *
 * Loop thread of the buffer's bufferevent.  Not API.
 */
#ifndef XFER_TRANSPORT_WIRE_FRAME_H
#define XFER_TRANSPORT_WIRE_FRAME_H

#include "wire.h"

struct evbuffer;

/*
 * Take the next frame out of `in` (borrowed).  Returns 1 with *h and *m
 * written when a frame was removed: a whole frame, or for a WRITE its
 * 16-byte header and 32-byte fixed part (its data stays in `in`, first in
 * line); 0 when `in` does not hold that much yet (nothing removed); -1
 * when the bytes are not an acceptable frame (*why says why; the header
 * was refused before anything was removed, a body after the frame was
 * removed).  A frame's length is known from its header alone, so nothing
 * is buffered for a frame the decoder refuses.
 */
int xfer_wire_frame_cut(struct evbuffer *in, xfer_wire_hdr *h,
                        xfer_wire_msg *m, xfer_wire_reason *why);

#endif /* XFER_TRANSPORT_WIRE_FRAME_H */
