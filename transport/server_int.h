/*
 * transport/server_int.h - what the files of the shard server share
 * (include/xfer/server.h is the API):
 *
 *   server.c         lifecycle: config, shards, listener, accept, del
 *   server_conn.c    one connection: framing, streamed writes, close
 *   server_req.c     requests: HELLO, STATUS, reserve/commit/cancel,
 *                    take/release, injected faults
 *   server_events.c  shard events to subscribers, the lease timer, the
 *                    per-reservation table (phase times, takers, grace)
 *   server_drain.c   drain
 *   server_stats.c   counters, the control socket
 *   server_sess.c    sessions: HELLO, HELLO2 and AUTH, owners, roles
 *
 * Per-connection state is one struct (xfer_server_conn); its session is
 * an owner number (1..max_sessions) of the hosted shards.
 */
#ifndef XFER_SERVER_INT_H
#define XFER_SERVER_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/util.h>

#include "fault.h" /* fsm_private_dep: the fault rules' one matcher */
#include "heap.h"  /* fsm_private_dep: the lease-ordered grace timers */
#include "idmap.h" /* fsm_private_dep: id -> reservation entry */
#include "list.h"  /* fsm_private_dep: the one intrusive list (connections) */
#include "timer.h" /* the deadline timer */
#include "auth.h"
#include "wire.h"
#include "xfer/hist.h"
#include "xfer/server.h"
#include "xfer/shard.h"

#define XFER_SERVER_OUT_HIGH (8u << 20)
#define XFER_SERVER_OUT_LOW (1u << 20)
#define XFER_SERVER_LOG_BURST 20 /* lines per log interval */

struct bufferevent;
struct evbuffer;
struct evbuffer_cb_entry;
struct evconnlistener;
struct event;

typedef struct xfer_server_conn xfer_server_conn;

struct xfer_server_conn {
    xfer_server *srv;
    struct bufferevent *bev; /* output and its write callback only */
    struct event *rev;       /* the socket's reads (server_conn.c) */
    struct evbuffer *in;     /* what was read and not yet consumed */
    xfer_list_node link; /* on srv->conns, newest first */
    uint64_t serial;   /* never 0 */
    int hosted;        /* index into srv->shards, -1 before HELLO */
    uint8_t role;      /* HELLO's role */
    bool subscribed, closing, paused;
    uint64_t t_accept;  /* when accepted */
    uint64_t t_active;  /* the last request, or byte of a streamed write */
    uint64_t t_partial; /* since when a frame is begun and unfinished;
                           0: none */
    struct evbuffer_cb_entry *out_cb; /* counts its output in out_bytes */
    /* Replies and events queued during this loop turn, written once at
     * its end (xfer_server_conn_flush); on srv->dirty while any. */
    uint8_t *obuf;
    uint32_t olen, ocap;
    xfer_list_node dlink;
    bool odirty;
    bool doomed;       /* closed by the reaper, outside its own callbacks */
    /* A WRITE being streamed in. */
    bool in_write;
    uint32_t wreq, wgot;
    uint64_t w_win_ns;  /* the rate floor's window began here ... */
    uint32_t w_win_got; /* ... with wgot bytes received */
    xfer_wire_msg wm;
    uint8_t *dst;      /* NULL: the data is skipped */
    uint8_t *wdev;     /* a device shard's: where in the pool the bounce
                          buffer at dst is copied once the data is in */
    int32_t wrc;       /* the error to answer after skipping, or a fault */
    uint8_t wfault;    /* XFER_SERVER_F_*: the write's injected fate */
    int32_t werr;      /* its status (FAIL, APPLIED_LOST) */
    uint64_t wdelay;   /* a DELAY rule's: its end is held this long */
    /* Integrity at landing (server_check.c): the CRC32C of the write's
     * bytes that landed in the pool so far (wcrc_len of them), taken
     * from the pool as each chunk arrives; wcrc_on: this write is one
     * the shard keeps a CRC of (host pool, TCP, checking on). */
    bool wcrc_on;
    uint32_t wcrc, wcrc_len;
    /* Requests a DELAY rule holds (xfer_server_held), oldest first. */
    xfer_list held;
    /* The session (server_sess.c): its owner number once HELLO is done
     * (0 before); while a HELLO2 waits for its AUTH, that HELLO2 and the
     * server nonce. */
    uint16_t owner;
    uint8_t peer[16];  /* the peer's address (IPv4 mapped into IPv6) */
    bool await_auth;
    uint32_t hello_req;
    xfer_wire_msg hello;
    uint8_t snonce[XFER_WIRE_NONCE];
};

/* One session: a peer identity and the owner number of its records. */
typedef struct xfer_server_sess {
    uint8_t token[XFER_WIRE_SESSION];
    uint32_t conns;    /* connections bound to it now */
    uint64_t gone_ns;  /* when the last one went (conns 0) */
    uint8_t role;
    bool used;         /* bound, or kept for its grace period */
    bool own;          /* a v1 HELLO's: ends with its one connection */
    uint8_t peer[16];  /* the address of the connection that made it; kept
                          after the slot is free, while its records and
                          tombstones still count against that peer */
    uint16_t ring_next, ring_prev; /* slots of the same peer, a ring (a
                          slot alone is its own ring) */
} xfer_server_sess;

/* Injected faults (server_req.c): refused, applied but reported failed,
 * the connection dropped (the seeded mix), the request lost (not applied,
 * never answered: a DROP rule). */
enum { XFER_SERVER_F_NONE, XFER_SERVER_F_FAIL, XFER_SERVER_F_APPLIED_LOST,
       XFER_SERVER_F_DROP, XFER_SERVER_F_LOST };

/* A request of a producer connection that a DELAY rule holds: a control
 * op or an EAGER (with a copy of its data), run as if it arrived only
 * now when its timer fires; or the end of a WRITE whose data landed
 * already (its write stays in flight on the shard until then, so nothing
 * frees the region under it).  Freed with its connection; a held write
 * end then ends failed. */
typedef struct xfer_server_held {
    xfer_server_conn *c;
    struct event *ev;
    xfer_list_node link; /* on c->held */
    uint64_t due;        /* by the server's clock */
    uint32_t req;
    xfer_wire_msg m;
    uint8_t fault;       /* XFER_SERVER_F_*: its fate when it runs */
    int32_t err;
    bool write_end;
    bool began;          /* write end: the write began on the shard */
    bool wcrc_on;        /* write end: its landed bytes' CRC, wcrc */
    uint32_t wcrc;
    int32_t wrc;         /* write end: the answer decided so far */
    uint8_t *data;       /* EAGER: m.len bytes */
} xfer_server_held;

/* Integrity at landing (server_check.c): the writes into a region that
 * ended ok, as disjoint runs [off, off + len) with the CRC32C of their
 * bytes as they landed; adjacent runs are joined (xfer_crc32c_combine)
 * as they meet, so writes in order, or filling gaps, keep one run. */
#define XFER_SERVER_RUNS 4u
typedef struct xfer_server_run {
    uint32_t off, len, crc;
} xfer_server_run;

/* One live reservation of a hosted shard, from its reserve until it ends:
 * when its phases happened, and who took it. */
typedef struct xfer_server_resv {
    uint64_t id, resv_id;
    uint32_t attempt, len;
    uint64_t off;      /* the region's offset in the pool */
    uint64_t t_reserved, t_ready, t_taken;
    uint32_t crc;      /* integrity: the CRC32C the region was checked
                          against before READY (crc_set) */
    bool crc_set;
    uint16_t owner;    /* the reserving session's owner number */
    uint16_t taker;    /* owner number of the taking consumer session;
                          0: none, or that session was forgotten */
    bool orphaned;     /* TAKEN and its taker's session has no connection */
    /* Integrity at landing: the runs of the writes that ended ok;
     * runs_bad once they cannot stand for the region (two writes
     * overlapped, a write began and failed, more than XFER_SERVER_RUNS
     * runs): its COMMIT then reads the region whole.  One slot spare:
     * a run goes in before it joins its neighbours. */
    uint8_t nruns;
    bool runs_bad;
    xfer_server_run runs[XFER_SERVER_RUNS + 1];
} xfer_server_resv;

typedef struct xfer_server_track {
    xfer_idmap map;       /* id -> slot */
    xfer_heap grace;      /* slot -> when an orphan is released */
    xfer_server_resv *e;  /* cap entries */
    uint32_t *free_slots, nfree, cap;
    uint64_t taken, orphaned, grace_released;
} xfer_server_track;

typedef struct xfer_server_hosted {
    xfer_shard *sh;
    uint16_t index;
    uint64_t write_bytes, events_sent;
    xfer_server_track track;
    uint64_t rules_fired, ops_delayed, delayed_now; /* fault rules */
    uint64_t crc_checked, corrupt; /* integrity (server_check.c) */
    xfer_hist h_ready;    /* reserve -> READY */
    xfer_hist h_taken;    /* READY -> TAKEN */
    xfer_hist h_released; /* TAKEN -> released */
    /* A device pool (server_copy.c): its kind, and the copy engine that
     * moves writes into it (NULL: host memory). */
    xfer_mem mem;
    struct xfer_copy *cp;
    uint64_t copies, copies_failed;
} xfer_server_hosted;

struct xfer_server {
    xfer_server_config cfg;
    char addr[64];
    xfer_server_shard shard_cfg[XFER_MAX_SHARDS];
    struct event_base *base;
    struct evconnlistener *lis;
    xfer_timer timer;     /* leases, tombstones and grace periods */
    struct event *drain_ev, *reap_ev;
    struct event *accept_ev; /* re-enables accepting after the fd limit */
    struct event *sweep_ev;  /* the connection timeouts */
    xfer_server_hosted shards[XFER_MAX_SHARDS];
    xfer_list conns;      /* of xfer_server_conn; conns.n counts them */
    uint64_t serial, rng, drain_deadline;
    xfer_faults rules;       /* xfer_server_add_rule's (fault_seed) */
    xfer_auth_rng idrng;     /* reservation ids, drawn in batches */
    bool draining;
    xfer_server_drain_cb drain_cb;
    void *drain_ud;
    /* xfer_server_register (server_dir.c): the directory client, and a
     * drain that waits for etcd to delete the entries first. */
    xfer_dir *dir;
    bool leaving;
    uint16_t port;
    uint64_t bad_frames, bad_by_reason[XFER_WIRE_R_COUNT_];
    uint64_t errors_sent, subs_dropped, faults, logged;
    uint64_t sends;          /* send() calls on connections */
    uint8_t secret[XFER_AUTH_SECRET_MAX]; /* cfg.secret points here */
    xfer_server_sess *sess; /* [max_sessions]; owner i + 1 is sess[i] */
    uint64_t auth_failed, sess_refused;
    uint64_t conns_refused, timeouts, writes_stalled;
    uint64_t out_bytes;      /* queued output of every connection */
    xfer_list dirty;         /* connections with output queued this turn */
    xfer_list landing;       /* copies into device pools (server_copy.c) */
    struct event *flush_ev;  /* writes it, for output queued outside a
                                read callback */
    bool flush_armed;
    /* One reading of the library's own clock per read callback (and per
     * timer tick): xfer_server_now returns batch_now while batch_depth;
     * the lease timer is re-armed once, at the batch's end. */
    bool own_clock;
    uint32_t batch_depth;
    uint64_t batch_now;
    bool timer_due;
    uint64_t log_window, log_dropped;
    uint64_t accept_pauses, accept_log_ns; /* at the fd limit */
    bool accept_logged;
    /* RDMA (server_rdma.h): one-sided shards, and their rkeys; NULL and
     * false on a TCP-only server */
    bool one_sided;
    struct xfer_server_rdma *rdma;
};

/* The connection of a node of srv->conns; NULL for NULL. */
static inline xfer_server_conn *xfer_server_conn_of(xfer_list_node *n)
{
    return n ? XFER_LIST_ITEM(n, xfer_server_conn, link) : NULL;
}

/* server.c */
uint64_t xfer_server_now(const xfer_server *s);
/* Bracket one callback's work (pairs nest): with the library's own clock,
 * one clock reading for all of it and the timer armed once at the end;
 * with an injected clock the clock is read where it always was.  The end
 * also writes every connection's queued output (one write each). */
void xfer_server_batch_begin(xfer_server *s);
void xfer_server_batch_end(xfer_server *s);
void xfer_server_log(xfer_server *s, uint64_t serial, const char *what);

/* server_drain.c: close the listener, refuse reserves, start the ticks. */
void xfer_server_drain_begin(xfer_server *s);
/* server_dir.c: delete the registered entries, then drain_begin (from
 * the directory's callback).  XFER_ERR_STATE: nothing registered (the
 * caller begins the drain itself). */
int xfer_server_dir_leave(xfer_server *s);
void *xfer_server_calloc(const xfer_server *s, size_t n, size_t size);
void xfer_server_free(const xfer_server *s, void *p);

/* server_conn.c */
void xfer_server_conn_accept(xfer_server *s, evutil_socket_t fd);
void xfer_server_conn_close(xfer_server_conn *c);
void xfer_server_conn_send(xfer_server_conn *c, const xfer_wire_msg *m,
                           uint32_t req);
/* Mark c to be closed by the reaper (from inside a callback of c's). */
void xfer_server_conn_doom(xfer_server_conn *c);
/* Stop reading c's socket (a refused HELLO: only its ERROR goes out). */
void xfer_server_conn_stop_reading(xfer_server_conn *c);
/* Write the output every connection queued this turn (one write each;
 * what the socket does not take goes to the bufferevent). */
void xfer_server_conn_flush_all(xfer_server *s);
void xfer_server_conn_on_flush(evutil_socket_t fd, short what, void *arg);
/* send() calls made on connections so far (for the tests that pin the
 * one-write-per-read batching). */
uint64_t xfer_server_sends(const xfer_server *s);
void xfer_server_conn_reap(xfer_server *s);
/* The timeouts of every connection (a persistent timer's callback), and
 * its period: a quarter of the shortest timeout, 1 ms to 250 ms. */
void xfer_server_conn_sweep(evutil_socket_t fd, short what, void *arg);
struct timeval xfer_server_sweep_tick(const xfer_server *s);

/* server_req.c: one decoded frame of c; false when c closed (or is
 * closing).  Streamed writes: start (false when c closed) and finish. */
bool xfer_server_req_handle(xfer_server_conn *c, const xfer_wire_hdr *h,
                            const xfer_wire_msg *m);
void xfer_server_req_finish_write(xfer_server_conn *c);
/* Send c an ERROR for request (req, type, m) with `code`. */
void xfer_server_req_error(xfer_server_conn *c, uint32_t req, uint8_t type,
                           const xfer_wire_msg *m, int32_t code);
/* The slot of hosted shard `index`, or -1. */
int xfer_server_find_shard(const xfer_server *s, uint16_t index);
void xfer_server_req_end_write(xfer_server_conn *c, bool ok);
/* c is closing: drop what a DELAY rule holds for it (a held write end
 * ends failed on the shard). */
void xfer_server_req_drop_held(xfer_server_conn *c);
/* Answer request `req` (an ack of type `ack`, or an error when rc). */
void xfer_server_req_answer(xfer_server_conn *c, uint32_t req,
                            const xfer_wire_msg *m, uint8_t ack, int32_t rc);

/* Device shard pools (server_copy.c). */
/* Copy engines for the shards whose mem[i] is a device kind (mem NULL:
 * every shard host).  XFER_ERR_INVALID_ARG, XFER_ERR_NOT_SUPPORTED, ... */
int xfer_server_copy_init(xfer_server *s, const xfer_mem *mem);
/* Teardown: wait for every copy, free what they held. */
void xfer_server_copy_clear(xfer_server *s);
bool xfer_server_copy_device(const xfer_server *s, int hosted);
/* A WRITE into a device shard begun at pool address dev: its data goes to
 * a bounce buffer (c->dst).  XFER_ERR_NOMEM: none to be had. */
int xfer_server_copy_begin(xfer_server_conn *c, uint8_t *dev);
/* Its data is all in: start the copy into the pool; the write's end and
 * answer follow the copy.  False: c's write is not a device one. */
bool xfer_server_copy_land(xfer_server_conn *c);
/* The write ended without its copy (its connection went mid-data). */
void xfer_server_copy_abandon(xfer_server_conn *c);
/* A COMMIT m (req, its fate's fault and err) to c's device shard that
 * integrity checks: the region is read back device-to-host into a bounce
 * buffer, and when that copy ended it is checksummed, judged, committed
 * and answered (xfer_server_req_commit_end).  False: m is not such a
 * commit (apply it as usual). */
bool xfer_server_copy_readback(xfer_server_conn *c, uint32_t req,
                               const xfer_wire_msg *m, uint8_t fault,
                               int32_t err);
/* c closes: copies of its writes end unanswered. */
void xfer_server_copy_conn_gone(xfer_server_conn *c);

/* server_req.c: a COMMIT whose check ended with rc (0: passed) is
 * committed (rc 0) and answered as its fate (fault, err) says. */
void xfer_server_req_commit_end(xfer_server_conn *c, uint32_t req,
                                const xfer_wire_msg *m, uint8_t fault,
                                int32_t err, int32_t rc);

/* server_events.c */
int xfer_server_track_init(xfer_server *s, xfer_server_hosted *hs);
void xfer_server_track_clear(xfer_server *s, xfer_server_hosted *hs);
/* A reserve of (id, resv_id) succeeded / a take by connection `serial`
 * succeeded / a release of id succeeded. */
void xfer_server_track_reserved(xfer_server *s, xfer_server_hosted *hs,
                                uint64_t id, uint32_t attempt,
                                uint64_t resv_id, uint32_t len,
                                uint64_t off, uint16_t owner);
/* The live record of id, or NULL. */
xfer_server_resv *xfer_server_track_find(xfer_server_hosted *hs,
                                         uint64_t id);
void xfer_server_track_taken(xfer_server *s, xfer_server_hosted *hs,
                             uint64_t id, uint16_t taker);
void xfer_server_track_released(xfer_server *s, xfer_server_hosted *hs,
                                uint64_t id);
/* The take grace is the taker's session's (server_sess.c calls these):
 * its last connection went, so its takes start their grace period /
 * a connection of it came back, so they are its own again / it is
 * forgotten, so no later session of its number may claim them. */
void xfer_server_track_orphan(xfer_server *s, uint16_t taker);
void xfer_server_track_adopt(xfer_server *s, uint16_t taker);
void xfer_server_track_disown(xfer_server *s, uint16_t taker);
/* A new subscriber of hs: a READY event for every reservation already
 * READY there, so one that (re)subscribes misses none. */
void xfer_server_replay_ready(xfer_server_conn *c, xfer_server_hosted *hs);
/* The shard's producer-ended ids it still tombstones, as CANCELLED or
 * EXPIRED events, to a new subscriber. */
void xfer_server_replay_ended(xfer_server_conn *c, xfer_server_hosted *hs);
/* Publish every pending shard event, then re-arm the lease timer. */
void xfer_server_flush_all(xfer_server *s);
void xfer_server_on_timer(evutil_socket_t fd, short what, void *arg);

/* server_check.c (integrity).  Before a COMMIT / an EAGER of c's session
 * is applied: 0 to apply it, or the error to answer (XFER_ERR_CORRUPT:
 * the bytes differ from the CRC it carries; XFER_ERR_REMOTE: an rkey
 * could not be killed).  A message without a CRC, or a server with
 * integrity off, is not checked. */
int32_t xfer_server_check_commit(xfer_server_conn *c, xfer_server_hosted *hs,
                                 const xfer_wire_msg *m);
int32_t xfer_server_check_eager(xfer_server_conn *c, xfer_server_hosted *hs,
                                const xfer_wire_msg *m, const uint8_t *data);
/* The record a COMMIT m of c's session would commit and check (checking
 * on, m carries a CRC, the region c reserved, of m's attempt and
 * reservation, still RESERVED), or NULL. */
xfer_server_resv *xfer_server_check_region(xfer_server_conn *c,
                                           xfer_server_hosted *hs,
                                           const xfer_wire_msg *m);
/* A device region's read-back (len bytes at bytes, host memory) judged
 * against m's CRC, as xfer_server_check_commit judges a host region. */
int32_t xfer_server_check_device(xfer_server_conn *c, xfer_server_hosted *hs,
                                 const xfer_wire_msg *m, const uint8_t *bytes,
                                 uint32_t len);
/* Integrity at landing.  A WRITE of c began on the shard (c->dst set):
 * decide whether its CRC is kept (c->wcrc_on). */
void xfer_server_check_write_begin(xfer_server_conn *c);
/* Bytes of c's write landed in the pool up to c->wgot: CRC them now,
 * while they are in cache. */
void xfer_server_check_crc_more(xfer_server_conn *c);
static inline void xfer_server_check_landed(xfer_server_conn *c)
{
    if (c->wcrc_on && c->wgot > c->wcrc_len)
        xfer_server_check_crc_more(c);
}
/* A write of a kept CRC (wcrc_on) into (m->id, m->resv_id) at m->off,
 * m->len ended: ok, its run joins the record's; else (failed, or not all
 * its bytes were checksummed) the record's runs go bad. */
void xfer_server_check_write_end(xfer_server_hosted *hs,
                                 const xfer_wire_msg *m, uint32_t crc,
                                 bool ok);
/* An EAGER m that passed was applied: its record keeps the CRC. */
void xfer_server_check_keep(xfer_server_hosted *hs, const xfer_wire_msg *m);
/* An EVENT about to go out: a READY of a record that passed carries its
 * CRC. */
void xfer_server_check_event(xfer_server_hosted *hs, xfer_wire_msg *ev);

/* server_sess.c */
int xfer_server_sess_init(xfer_server *s);
void xfer_server_sess_clear(xfer_server *s);
/* HELLO, HELLO2, AUTH of c; false when c is closing. */
bool xfer_server_sess_hello(xfer_server_conn *c, const xfer_wire_hdr *h,
                            const xfer_wire_msg *m);
/* c is closing: its session loses a connection. */
void xfer_server_sess_unbind(xfer_server_conn *c);
/* 0 when c's peer (its sessions together) may hold one more record of
 * len bytes on hs (record) or one more tombstone (!record); else
 * XFER_ERR_BUSY. */
int32_t xfer_server_peer_room(xfer_server_conn *c, xfer_server_hosted *hs,
                              uint32_t len, bool record);

/* server_drain.c */
void xfer_server_on_drain_tick(evutil_socket_t fd, short what,
                               void *arg);

#endif /* XFER_SERVER_INT_H */
