/*
 * transport/wire_frame.c - the next frame of a libevent input buffer
 * (wire_frame.h): the header is checked from a copy before anything is
 * removed, then the fixed part is removed and decoded (wire.c).
 *
 * What must stay true: nothing past the frame's fixed part is removed, so
 * a WRITE's data is left in order for its reader; a buffer of
 * XFER_WIRE_MAX_FIXED bytes holds any fixed part.
 */
#include "wire_frame.h"

#include <event2/buffer.h>

int xfer_wire_frame_cut(struct evbuffer *in, xfer_wire_hdr *h,
                        xfer_wire_msg *m, xfer_wire_reason *why)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t have = evbuffer_get_length(in);
    if (have < XFER_WIRE_HDR)
        return 0;
    evbuffer_copyout(in, buf, XFER_WIRE_HDR);
    if (xfer_wire_decode_hdr(buf, XFER_WIRE_HDR, h, why) != 0)
        return -1;
    size_t need = XFER_WIRE_HDR + xfer_wire_body_size(h->type);
    /* An EAGER is applied whole, so it is cut only once its data is in
     * too (at most XFER_WIRE_MAX_EAGER bytes, checked with the header):
     * its reader finds all of it right after the fixed part. */
    if (have < need || (xfer_wire_is_eager(h->type) && have < h->len))
        return 0;
    evbuffer_remove(in, buf, need);
    if (xfer_wire_decode_body(h, buf + XFER_WIRE_HDR, need - XFER_WIRE_HDR,
                              m, why) != 0)
        return -1;
    return 1;
}
