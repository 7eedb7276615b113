/*
 * tests/rawwire.c - the raw-byte wire client of rawwire.h.
 */
#include "rawwire.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/types.h>

int tw_send_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int tw_recv_all(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = recv(fd, p, n, 0);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int tw_send_msg(int fd, const xfer_wire_msg *m, uint32_t req,
                const void *data)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t n = xfer_wire_encode(m, req, buf, sizeof buf);
    if (n == 0 || tw_send_all(fd, buf, n) != 0)
        return -1;
    if (xfer_wire_has_data(m->type) && m->len)
        return tw_send_all(fd, data, m->len);
    return 0;
}

int tw_recv_msg(int fd, xfer_wire_hdr *h, xfer_wire_msg *m)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    xfer_wire_reason why;
    if (tw_recv_all(fd, buf, XFER_WIRE_HDR) != 0 ||
        xfer_wire_decode_hdr(buf, XFER_WIRE_HDR, h, &why) != 0 ||
        h->type == XFER_WIRE_T_WRITE || h->len > sizeof buf ||
        tw_recv_all(fd, buf + XFER_WIRE_HDR, h->len - XFER_WIRE_HDR) != 0)
        return -1;
    return xfer_wire_decode_body(h, buf + XFER_WIRE_HDR,
                                 h->len - XFER_WIRE_HDR, m, &why) == 0
               ? 0
               : -1;
}
