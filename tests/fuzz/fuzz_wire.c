/*
 * tests/fuzz/fuzz_wire.c - libFuzzer target for the wire decoder.
 *
 * The input is treated as a byte stream of frames, the way xferd and the
 * tcp transport consume one: decode a header, then the fixed body, skip a
 * WRITE's data, repeat.  What must hold for every input: no read outside
 * the buffer (ASan checks), no crash, no assert; an accepted frame
 * re-encodes to bytes that decode to the same message (round trip).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"
#include "xfer/errors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roundtrip(const xfer_wire_hdr *h, const xfer_wire_msg *m)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t n = xfer_wire_encode(m, h->req, buf, sizeof buf);
    if (n == 0)
        abort();
    xfer_wire_hdr h2;
    xfer_wire_msg m2;
    xfer_wire_reason why;
    if (xfer_wire_decode_hdr(buf, n, &h2, &why) != 0)
        abort();
    if (h2.type != h->type || h2.req != h->req || h2.len != h->len)
        abort();
    if (xfer_wire_decode_body(&h2, buf + XFER_WIRE_HDR, n - XFER_WIRE_HDR,
                              &m2, &why) != 0)
        abort();
    uint8_t buf2[XFER_WIRE_MAX_FIXED];
    if (xfer_wire_encode(&m2, h2.req, buf2, sizeof buf2) != n ||
        memcmp(buf, buf2, n) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;
    while (pos < size) {
        xfer_wire_hdr h;
        xfer_wire_msg m;
        xfer_wire_reason why;
        int rc = xfer_wire_decode_hdr(data + pos, size - pos, &h, &why);
        if (rc != 0)
            break;
        size_t body = xfer_wire_body_size(h.type);
        if (size - pos - XFER_WIRE_HDR < body)
            break;
        rc = xfer_wire_decode_body(&h, data + pos + XFER_WIRE_HDR,
                                   size - pos - XFER_WIRE_HDR, &m, &why);
        if (rc != 0)
            break;
        roundtrip(&h, &m);
        if (h.len > size - pos)
            break; /* a WRITE's data is not all here */
        pos += h.len;
    }
    return 0;
}
