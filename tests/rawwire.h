/*
 * tests/rawwire.h - a raw-byte wire client for tests: send and receive
 * whole frames over a blocking socket, the way a hand-written peer (or a
 * hostile one) speaks to a shard server without the library's transport.
 * One copy for the multi-process, consumer-stack and RDMA tests.
 */
#ifndef XFER_TEST_RAWWIRE_H
#define XFER_TEST_RAWWIRE_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* Send all n bytes (retrying short sends and EINTR; no SIGPIPE).
 * Returns 0, -1 when the socket failed or closed. */
int tw_send_all(int fd, const void *buf, size_t n);
/* Receive exactly n bytes.  Returns 0, -1 on EOF, timeout or error. */
int tw_recv_all(int fd, void *buf, size_t n);
/* Encode m with request number req and send it; a WRITE or an EAGER is
 * followed by its m->len bytes of `data`.  Returns 0, -1 when it could not. */
int tw_send_msg(int fd, const xfer_wire_msg *m, uint32_t req,
                const void *data);
/* Receive one frame of fixed size (every reply a shard sends: no WRITE
 * payload) into *h and *m.  Returns 0, -1 on EOF, timeout, a header or
 * body that does not decode, or a frame larger than XFER_WIRE_MAX_FIXED. */
int tw_recv_msg(int fd, xfer_wire_hdr *h, xfer_wire_msg *m);

#endif /* XFER_TEST_RAWWIRE_H */
