/*
 * transport/tcp_int.h - the TCP transport as the control channel of
 * another transport: the RDMA transport (transport/rdma.c) keeps the
 * reserve, commit and cancel of every shard on the TCP connection and the
 * wire protocol, and moves the data itself.  Composing with tcp.c through
 * these few calls keeps one implementation of connections, reconnects,
 * watermarks and replies.
 *
 * With hooks:
 *  - every op result goes to hooks.deliver (from the tcp transport's own
 *    deferred event, on the loop) instead of xfer_engine_deliver, so the
 *    owner sees reserve replies (address, rkey) and forwards everything;
 *  - hooks.link(ud, shard, true, fd) says shard's connection is up (HELLO
 *    answered; fd is its socket, borrowed); its ops then wait until the
 *    owner calls xfer_tcp_open() (its data path is up too).  link(ud,
 *    shard, false, -1) says it went down (it was told up before); ops it
 *    carried fail with XFER_ERR_CONN_LOST as on a plain TCP transport.
 *    The hook may not call back into the transport for that shard (no
 *    xfer_tcp_drop from inside it);
 *  - xfer_tcp_drop() takes the connection down when the data path broke
 *    (it reconnects as after a loss).
 * Loop thread only, like the rest of the transport.
 */
#ifndef XFER_TCP_INT_H
#define XFER_TCP_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "xfer/tcp.h"

typedef struct xfer_tcp_hooks {
    void *ud;
    void (*deliver)(void *ud, const xfer_shard_result *r);
    void (*link)(void *ud, uint16_t shard, bool up, int fd);
    /* Created from a group (cfg.dir): the XFER_DIR_* transports an entry
     * must list for its shard to be used (0: XFER_DIR_TCP); an entry
     * without them counts as gone.  The RDMA transport asks for
     * XFER_DIR_RDMA: its data path is the server's rdmacm listener. */
    uint32_t dir_transports;
    /* The answer to a refresh sent through xfer_tcp_refresh (NULL: to
     * the attached engine, xfer_engine_refreshed). */
    void (*refreshed)(void *ud, uint64_t id, uint16_t shard,
                      uint32_t attempt, int status, uint64_t granted_ns);
} xfer_tcp_hooks;

/* xfer_tcp_new with hooks (copied; NULL: a plain transport). */
int xfer_tcp_new_hooked(struct event_base *base, const xfer_tcp_config *cfg,
                        const xfer_tcp_hooks *hooks, xfer_tcp **out);
/* A shard the directory reported gone is C_GONE before the link-down
 * hook runs, so the owner can tell a gone shard (xfer_tcp_gone: fail its
 * own ops with XFER_ERR_SHARD_GONE) from a lost connection. */

/* The HELLO group the transport names: cfg.group, or the number of
 * cfg.dir_group (xfer_dir_group_id) when that was 0. */
uint32_t xfer_tcp_group(const xfer_tcp *t);

/* Let shard's held ops go out (its connection is up; no-op otherwise). */
void xfer_tcp_open(xfer_tcp *t, uint16_t shard);
/* Start / abort a RESERVE, COMMIT or CANCEL as the ops table would (a
 * WRITE is refused: XFER_ERR_INVALID_ARG).  `a` borrowed. */
int xfer_tcp_start_op(xfer_tcp *t, const xfer_action *a);
/* The same with the op's staging bytes (a COMMIT's slice: its CRC32C goes
 * with it to a shard that checks, docs/integrity.md; retained until the
 * result); NULL: none. */
int xfer_tcp_start_op_src(xfer_tcp *t, const xfer_action *a, const void *src);
/* A COMMIT or EAGER with the caller's CRC32C (the ops table's start_crc;
 * anything else: XFER_ERR_INVALID_ARG). */
int xfer_tcp_start_op_crc(xfer_tcp *t, const xfer_action *a,
                          const void *src, uint32_t crc);
void xfer_tcp_abort_op(xfer_tcp *t, const xfer_action *a);
/* A lease refresh as the ops table's refresh (xfer/transport.h), its
 * answer through hooks.refreshed. */
int xfer_tcp_refresh(xfer_tcp *t, uint16_t shard, uint64_t id,
                     uint32_t attempt, uint64_t resv_id, uint64_t want_ns);

/* A stream WRITE another transport carried (rdma.c: one-sided, posted
 * after the gate): its run's CRC32C, read from src (a->len bytes,
 * borrowed for the call), is kept on shard a->shard's connection as a
 * stream WRITE sent there would be, so that the stream's COMMIT on it
 * carries the runs joined (stream_crc, docs/integrity.md).  Nothing when
 * that shard does not check CRCs, or a is not a stream's WRITE. */
void xfer_tcp_stream_run(xfer_tcp *t, const xfer_action *a, const void *src);

/* What the hot path did, for the tests that pin its batching (not API,
 * not in xfer_tcp_stats): read callbacks run, write(v) calls made on
 * the sockets, activations of the deferred deliver event, op records
 * allocated (the rest came from the free list). */
typedef struct xfer_tcp_io {
    uint64_t reads, writes, deliver_wakeups, op_allocs;
} xfer_tcp_io;
/* Copy the counters into *out (borrowed). */
void xfer_tcp_io_get(const xfer_tcp *t, xfer_tcp_io *out);

#endif /* XFER_TCP_INT_H */
