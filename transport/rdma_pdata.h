/*
 * transport/rdma_pdata.h - the private data of the RDMA transport's CM
 * connect (written by rdma.c, read by server_rdma.c): which group the
 * producer belongs to, and which TCP control connection the RC connection
 * goes with, so the server can bind a reservation's type 2 memory window
 * through the QP whose writes will use it.
 *
 * Layout (little-endian):
 *   [0, 4)   magic "XFER" (0x58464552)
 *   [4, 8)   group
 *   [8, 10)  the TCP control connection's local port (the producer's
 *            getsockname; the server's getpeername of it)
 *   [10, 12) zero
 *   [12, 28) its local address, IPv4 as ::ffff:a.b.c.d
 * An 8-byte request (magic and group only) is still accepted: it has no
 * control connection, so a server using windows refuses reserves that
 * would need its QP (registrations need none).
 */
#ifndef XFER_RDMA_PDATA_H
#define XFER_RDMA_PDATA_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#define XFER_RDMA_PDATA_MAGIC 0x58464552u
#define XFER_RDMA_PDATA_SHORT 8
#define XFER_RDMA_PDATA_LEN 28

typedef struct xfer_rdma_pdata {
    uint32_t magic, group;
    bool has_tcp;          /* the request carried the next two */
    uint16_t tcp_port;
    uint8_t tcp_addr[16];
} xfer_rdma_pdata;

/* A socket address as (port, 16-byte address); false if neither family. */
static inline bool xfer_rdma_pdata_addr(const struct sockaddr_storage *ss,
                                        uint16_t *port, uint8_t addr[16])
{
    memset(addr, 0, 16);
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)ss;
        addr[10] = addr[11] = 0xff;
        memcpy(addr + 12, &v4->sin_addr, 4);
        *port = ntohs(v4->sin_port);
        return true;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)ss;
        memcpy(addr, &v6->sin6_addr, 16);
        *port = ntohs(v6->sin6_port);
        return true;
    }
    return false;
}

static inline void xfer_rdma_pdata_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t xfer_rdma_pdata_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* out gets XFER_RDMA_PDATA_LEN bytes. */
static inline void xfer_rdma_pdata_encode(const xfer_rdma_pdata *d,
                                          uint8_t *out)
{
    memset(out, 0, XFER_RDMA_PDATA_LEN);
    xfer_rdma_pdata_put32(out, d->magic);
    xfer_rdma_pdata_put32(out + 4, d->group);
    out[8] = (uint8_t)(d->tcp_port & 0xff);
    out[9] = (uint8_t)(d->tcp_port >> 8);
    memcpy(out + 12, d->tcp_addr, 16);
}

/* p[0, n) (hostile: any length) into *d; a short request has no magic. */
static inline void xfer_rdma_pdata_decode(const uint8_t *p, size_t n,
                                          xfer_rdma_pdata *d)
{
    memset(d, 0, sizeof *d);
    if (!p || n < XFER_RDMA_PDATA_SHORT)
        return;
    d->magic = xfer_rdma_pdata_get32(p);
    d->group = xfer_rdma_pdata_get32(p + 4);
    if (n >= XFER_RDMA_PDATA_LEN) {
        d->has_tcp = true;
        d->tcp_port = (uint16_t)(p[8] | p[9] << 8);
        memcpy(d->tcp_addr, p + 12, 16);
    }
}

#endif /* XFER_RDMA_PDATA_H */
