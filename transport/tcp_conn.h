/*
 * transport/tcp_conn.h - the TCP transport's records, shared by its two
 * files: tcp.c (ops, replies, connection life, the ops table) and
 * tcp_io.c (the hot path's bytes: each connection's queued output,
 * written once per turn, and its reads once HELLO is answered).
 *
 * Loop thread only.  Not API.
 */
#ifndef XFER_TCP_CONN_H
#define XFER_TCP_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <event2/util.h>

#include "auth.h"
#include "backoff.h"
#include "list.h" /* fsm/: the one intrusive list (fsm_private_dep) */
#include "ring.h" /* fsm/: the one ring buffer (fsm_private_dep) */
#include "tcp_int.h"
#include "wire.h"
#include "xfer/tcp.h"

struct bufferevent;
struct event;
struct event_base;
struct xfer_engine;

#define TCP_ADDR_MAX 64
#define TCP_DELIVER_BATCH 4096
#define TCP_FREE_MAX 1024 /* op records kept for reuse */
#define TCP_IOV 64        /* iovecs per writev */
#define TCP_IN_CAP (64u << 10) /* a connection's read buffer */

/* C_GATED: HELLO answered, ops held until the owner opens the connection
 * (only with hooks; see tcp_int.h). */
enum { C_DOWN, C_CONNECTING, C_HELLO, C_GATED, C_UP, C_GONE };
enum { L_NONE, L_WAIT, L_SENT };

typedef struct tcp_op tcp_op;
typedef struct tcp_conn tcp_conn;

/* A piece of a connection's queued output: `len` bytes at `off` of its
 * flat buffer (op NULL), or of op's staging bytes (a WRITE's data, by
 * reference: `off` is how far into them). */
typedef struct tcp_seg {
    tcp_op *op;
    uint32_t off, len;
} tcp_seg;

struct tcp_op {
    xfer_action a;
    tcp_op *next_free; /* on the transport's free list */
    const uint8_t *src;
    xfer_list_node link; /* on its connection's wait or sent list */
    uint32_t req;
    uint8_t list;      /* L_NONE / L_WAIT / L_SENT */
    bool done;         /* outcome known (res filled) */
    bool queued;       /* result handed to the delivery queue */
    bool ref_held;     /* libevent still references src */
    bool run_pending;  /* integrity: its run's CRC is taken when the
                          reference goes (tcp.c xfer_tcp_release_ref) */
    bool orphan;       /* the transport is gone: cleanup frees */
    bool crc_given;    /* a COMMIT/EAGER with the caller's CRC: crc */
    uint32_t crc;
    tcp_conn *conn;
    xfer_shard_result res;
    xfer_allocator orphan_alloc; /* the transport's, once it is gone */
};

/* Integrity for streams: the CRC32C of one run a stream WRITE sent (its
 * reservation offset and length), kept until the stream's COMMIT joins
 * them (tcp.c stream_crc) or a CANCEL of its id drops them. */
typedef struct tcp_run {
    uint64_t id, resv_id;
    uint32_t attempt, off, len, crc;
} tcp_run;
#define TCP_RUNS_MAX 1024u /* per connection; past it, streams go unchecked */
#define TCP_POOLS_MAX 64u  /* host staging pools known (xfer_tcp.pools) */

/* A lease refresh sent on a connection and not yet answered (tcp.c
 * t_refresh): its request id and what the engine is told of it. */
typedef struct tcp_refresh {
    uint64_t id;
    uint32_t req, attempt;
    uint8_t used;
} tcp_refresh;
#define TCP_REFRESH_MAX 256u /* per connection; past it: BUSY, retried */

struct tcp_conn {
    xfer_tcp *t;
    uint16_t shard;
    uint8_t state;
    struct sockaddr_storage sa;
    int salen;
    struct bufferevent *bev;
    struct event *retry_ev, *grace_ev;
    xfer_backoff bo;      /* reconnect delays (backoff.h) */
    bool dialled;         /* connected at least once: later dials count
                             as reconnects */
    uint32_t next_req, hello_req;
    bool told_up;         /* the owner heard it come up (hooks) */
    xfer_list wait, sent; /* of tcp_op, oldest first */
    xfer_wire_msg hello;  /* the HELLO2 sent on this connection */
    bool challenged;      /* the shard proved it knows the secret */
    bool eager;           /* its HELLO_ACK said the shard takes EAGER */
    bool crc;             /* its HELLO_ACK said the shard checks CRCs */
    bool refresh;         /* its HELLO_ACK said the shard grants REFRESH */
    tcp_refresh *rfs;     /* TCP_REFRESH_MAX, allocated at the first one */
    uint32_t nrfs;        /* of them used */
    tcp_run *runs;        /* TCP_RUNS_MAX, allocated at the first one */
    uint32_t nruns;
    /* Output queued during this loop turn, written once (flush_conn). */
    uint8_t *flat;        /* frame heads, back to back */
    uint32_t flat_len, flat_cap;
    tcp_seg *segs;        /* in stream order */
    uint32_t nsegs, segs_cap;
    uint64_t pending;     /* bytes in segs */
    bool dirty;           /* listed in t->dirty */
    /* Input once HELLO is answered: our own read event on the socket,
     * one recv into `in`, frames parsed in place (parse_in). */
    struct event *rd_ev;
    uint8_t *in;          /* TCP_IN_CAP bytes, from cfg.alloc */
    uint32_t in_len;      /* bytes of a frame not complete yet */
    bool own_read;        /* switch to rd_ev (set by on_hello_ack) */
};

struct xfer_tcp {
    struct event_base *base;
    xfer_tcp_config cfg;
    struct xfer_engine *engine;
    bool del_pending;       /* xfer_tcp_del came while attached: the
                               engine's detach frees the transport */
    struct event *deliver_ev;
    xfer_shard_result *q;   /* results to deliver, */
    xfer_ring qring;        /* in a FIFO over this ring */
    tcp_conn conns[XFER_MAX_SHARDS];
    uint32_t outstanding;
    xfer_tcp_stats st;
    uint8_t session[XFER_WIRE_SESSION];   /* ours, for every HELLO2 */
    uint8_t secret[XFER_AUTH_SECRET_MAX];
    size_t secret_len;
    xfer_tcp_hooks hooks;   /* deliver NULL: plain TCP transport */
    tcp_op *free_ops;       /* records kept for reuse (at most */
    uint32_t nfree;         /* TCP_FREE_MAX), freed at del */
    uint32_t in_read;       /* inside a read callback: its end delivers */
    bool deliver_armed;     /* deliver_ev is active */
    struct event *flush_ev; /* writes what ops queued outside a read */
    bool flush_armed;       /* flush_ev is active */
    uint16_t dirty[XFER_MAX_SHARDS]; /* connections with queued output */
    uint16_t ndirty;
    xfer_tcp_io io;         /* the hot path's counters (tcp_int.h) */
    char dir_group[64];     /* watched on cfg.dir (""  none) */
    /* The engine's host staging pools (pool_added), by handle: a one-shot
     * WRITE out of one keeps its CRC for its COMMIT (tcp.c stream_run).
     * A device pool is never added: its COMMIT's CRC is of a D2H copy of
     * its own.  Handles past TCP_POOLS_MAX are not kept (their COMMITs
     * read the slice again). */
    struct {
        const uint8_t *base;
        size_t len;
    } pools[TCP_POOLS_MAX];
};


/* tcp.c, for tcp_io.c. */
/* A WRITE's staging bytes are no longer referenced (written, or dropped
 * unsent with their connection): its result may leave. */
void xfer_tcp_release_ref(tcp_op *op);
/* libevent's cleanup of a staging reference (evbuffer_add_reference). */
void xfer_tcp_ref_done(const void *data, size_t len, void *extra);
/* The connection broke or its peer misbehaved (bad_peer: count it). */
void xfer_tcp_conn_lost(tcp_conn *c, bool bad_peer);
/* Send waiting ops while the connection is up and below the watermark. */
void xfer_tcp_flush_wait(tcp_conn *c);
/* One decoded frame from the shard; false: not acceptable (drop). */
bool xfer_tcp_on_frame(tcp_conn *c, const xfer_wire_hdr *h,
                       const xfer_wire_msg *m);
/* Deliver the queued results as one engine batch, then write. */
void xfer_tcp_deliver_queued(xfer_tcp *t);

/* tcp_io.c, for tcp.c. */
/* Queue n bytes (copied) for this turn's write.  False: out of memory. */
bool xfer_tcp_io_queue(tcp_conn *c, const uint8_t *b, size_t n);
/* Queue len bytes of op's staging from `off` (by reference; op->ref_held
 * is the caller's).  False: out of memory. */
bool xfer_tcp_io_queue_ref(tcp_conn *c, tcp_op *op, uint32_t off,
                           uint32_t len);
/* Forget the queued output; staging bytes in it are released. */
void xfer_tcp_io_drop(tcp_conn *c);
/* Write every connection's queued output (one write each). */
void xfer_tcp_io_flush_dirty(xfer_tcp *t);
/* The deferred flush event's callback (arg: the transport). */
void xfer_tcp_io_on_flush(evutil_socket_t fd, short what, void *arg);
/* HELLO is answered: read the socket ourselves from now on.  False: the
 * caller drops the connection. */
bool xfer_tcp_io_take_reads(tcp_conn *c, struct bufferevent *bev);

#endif /* XFER_TCP_CONN_H */
