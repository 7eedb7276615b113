/*
 * transport/consumer_int.h - what the files of the consumer client share
 * (include/xfer/consumer.h is the API):
 *
 *   consumer.c        lifecycle, the public calls, the mailbox, delivery
 *                     of outcomes from a deferred event
 *   consumer_link.c   one connection per shard: HELLO, SUBSCRIBE, events,
 *                     replies matched to requests, loss and reconnect
 *   consumer_ready.c  the readiness machine driven from events: its
 *                     actions performed, the per-id records, deadlines
 *   consumer_stats.c  counters, histograms, the control socket
 */
#ifndef XFER_CONSUMER_INT_H
#define XFER_CONSUMER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <event2/util.h>

#include "auth.h"   /* HELLO2: the session, the secret */
#include "backoff.h" /* reconnect delays */
#include "engine_int.h"
#include "timer.h" /* the deadline timer, xfer_timer_delay */
#include "heap.h"  /* fsm_private_dep: expect deadlines, by time */
#include "idmap.h" /* fsm_private_dep: id -> record */
#include "ring.h"  /* fsm_private_dep: the one ring buffer (requests) */
#include "xfer/consumer.h"
#include "xfer/hist.h"
#include "xfer/readiness.h"

struct bufferevent;
struct event;

/* A request sent on a link and not yet answered (replies come in order),
 * or accepted and not yet sent (the link is not up: req 0). */
typedef struct xfer_consumer_req {
    uint32_t req;
    uint8_t type;    /* the request's wire type */
    uint32_t attempt;
    uint64_t id;
    uint64_t resv_id;
    uint64_t sent_ns; /* in q: when it was sent (request_timeout_ns) */
} xfer_consumer_req;

enum { XFER_CLINK_DOWN, XFER_CLINK_CONNECTING, XFER_CLINK_HELLO,
       XFER_CLINK_UP };

typedef struct xfer_consumer_link {
    xfer_consumer *c;
    uint16_t shard;
    struct sockaddr_storage sa;
    int salen;
    struct bufferevent *bev;
    struct event *retry;
    struct event *req_timer; /* the oldest request's deadline */
    uint8_t state;
    bool broken;          /* a send failed: taken down from the loop */
    bool dialled;         /* dialled at least once: later dials count as
                             reconnects */
    xfer_backoff bo;      /* reconnect delays (backoff.h) */
    uint32_t next_req;
    xfer_consumer_req *q; /* outstanding requests, oldest first, */
    xfer_ring qr;         /* in a FIFO over this ring */
    /* Requests accepted while the link was not up, and the cancels and
     * releases that were outstanding when it went down: sent, oldest
     * first, as soon as it is up again (issue 23 item 2). */
    xfer_consumer_req *p;
    xfer_ring pr;
    uint32_t owed;        /* takes, cancels and releases in q */
    uint64_t pool_bytes;  /* from HELLO_ACK */
    xfer_wire_msg hello;  /* the HELLO2 sent on this connection */
    bool challenged;      /* the shard proved it knows the secret */
    bool gone;            /* no address (directory): not dialled */
} xfer_consumer_link;

/* Record states. */
enum { XFER_CREC_FREE, XFER_CREC_PENDING, XFER_CREC_QUEUED,
       XFER_CREC_HELD };

#define XFER_CREC_NONE UINT32_MAX

/* One id the consumer tracks, from its first ready (or expect) until its
 * unavailable outcome is delivered or its data is released. */
typedef struct xfer_consumer_rec {
    uint64_t id;
    uint32_t attempt;
    uint8_t state;
    bool expected;        /* an outcome is owed even without a ready */
    bool available;       /* QUEUED/HELD: the outcome is available */
    int32_t override;     /* reason that replaces the tracker's, or 0 */
    uint64_t extra;       /* shards added to `missing` (a lost link) */
    int32_t reason;       /* QUEUED unavailable: the outcome */
    uint64_t missing;
    uint64_t ready;       /* shards that reported ready */
    uint64_t taking;      /* takes outstanding */
    uint64_t crc_set;     /* shards whose READY carried a CRC (crcs) */
    uint64_t t_first;
    uint64_t t_take;      /* when the takes were sent */
    uint32_t next;        /* delivery FIFO */
} xfer_consumer_rec;

/* A cancel the application made, and where it stands per shard. */
typedef struct xfer_consumer_ccl {
    uint64_t id;
    uint64_t t;           /* when it was (last) made */
    uint64_t acked;       /* shards that answered CANCEL_ACK */
    uint64_t refused;     /* shards that answered an error */
} xfer_consumer_ccl;

struct xfer_consumer {
    xfer_consumer_config cfg;
    char dir_group[64];    /* cfg.dir_group's copy */
    bool watching;         /* dir_group is watched on cfg.dir */
    uint8_t session[XFER_WIRE_SESSION]; /* ours, for every HELLO2 */
    uint8_t secret[XFER_AUTH_SECRET_MAX];
    size_t secret_len;
    struct event_base *base;
    xfer_readiness *rd;
    xfer_consumer_link links[XFER_MAX_SHARDS];
    /* records */
    xfer_consumer_rec *recs;
    xfer_region *regions;  /* regions[slot * S + k] */
    uint32_t *crcs;        /* crcs[slot * S + k]: READY's CRC (crc_set) */
    bool check;            /* integrity CONSUMER with pools: check takes */
    uint8_t *pools[XFER_MAX_SHARDS];
    uint32_t *free_slots, nfree, cap;
    xfer_idmap ids;
    xfer_heap expects;     /* slot -> expect deadline */
    uint32_t dq_head, dq_tail; /* delivery FIFO of slots */
    xfer_timer timer;      /* the tracker's and the expects' deadline */
    struct event *deferred;
    xfer_mailbox *mailbox;
    int running;           /* inside run(): actions are being performed */
    xfer_ready_action *scratch; /* run()'s copy of the tracker's actions */
    size_t nscratch;
    xfer_consumer_stats st;
    xfer_hist h_outcome;   /* first ready -> outcome */
    xfer_hist h_take;      /* take sent -> answered */
    /* The application's cancels, oldest first (a ring of cap entries),
     * for xfer_consumer_cancel_shards and for replay to a shard that
     * comes back (it may have restarted and forgotten them). */
    xfer_consumer_ccl *ccl;
    xfer_ring cclr;
    xfer_idmap ccl_ids;    /* id -> index in ccl */
    uint64_t cancel_sent;  /* shards run() sent the current cancel to */
    uint64_t cancel_id;    /* the id do_cancel is cancelling, or 0 */
    /* Close (xfer_consumer_close). */
    bool closing, close_done;
    xfer_consumer_closed_fn closed;
    void *closed_ud;
    struct event *close_timer;
};

/* consumer.c */
void *xfer_consumer_calloc(const xfer_consumer *c, size_t n, size_t size);
void xfer_consumer_free(const xfer_consumer *c, void *p);
void xfer_consumer_kick(xfer_consumer *c);

/* consumer_link.c */
int xfer_consumer_link_init(xfer_consumer *c, uint16_t k, const char *addr);
void xfer_consumer_link_clear(xfer_consumer_link *l);
/* Send a request; false when the link is not up (nothing sent). */
bool xfer_consumer_link_send(xfer_consumer_link *l, uint8_t type,
                             uint64_t id, uint32_t attempt,
                             uint64_t resv_id);
/* A cancel or release: sent now if the link is up, else queued until it
 * is.  False only when it could be neither (no memory), counted. */
bool xfer_consumer_link_request(xfer_consumer_link *l, uint8_t type,
                                uint64_t id, uint32_t attempt,
                                uint64_t resv_id);
/* Requests queued on the link, not yet sent. */
uint32_t xfer_consumer_link_queued(const xfer_consumer_link *l);
/* True when the link owes nothing: no request queued, no cancel or
 * release unanswered. */
bool xfer_consumer_link_idle(const xfer_consumer_link *l);

/* consumer.c: the close's progress (a request answered, a link up). */
void xfer_consumer_close_check(xfer_consumer *c);

/* consumer_ready.c */
int xfer_consumer_ready_init(xfer_consumer *c);
void xfer_consumer_ready_clear(xfer_consumer *c);
xfer_consumer_rec *xfer_consumer_find(const xfer_consumer *c, uint64_t id,
                                      uint32_t *slot);
/* Inputs from the links. */
/* Shard k's READY for id carried crc (the CRC its shard checked the
 * region against before READY), kept for the check on take. */
void xfer_consumer_note_crc(xfer_consumer *c, uint16_t k, uint64_t id,
                            uint32_t attempt, uint32_t crc);
void xfer_consumer_on_ready(xfer_consumer *c, uint16_t k, uint64_t id,
                            uint32_t attempt, uint64_t resv_id);
void xfer_consumer_on_ended(xfer_consumer *c, uint16_t k, uint64_t id,
                            uint32_t attempt, int32_t reason);
void xfer_consumer_on_take(xfer_consumer *c, uint16_t k, uint64_t id,
                           int32_t status, uint64_t offset, uint32_t len);
void xfer_consumer_on_link_lost(xfer_consumer *c, uint16_t k);
/* Public calls (loop thread). */
int xfer_consumer_do_expect(xfer_consumer *c, uint64_t id, uint64_t dl);
int xfer_consumer_do_cancel(xfer_consumer *c, uint64_t id);
int xfer_consumer_do_release(xfer_consumer *c, uint64_t id);
void xfer_consumer_on_timer(evutil_socket_t fd, short what, void *arg);
/* Pop the next queued outcome into *out (its regions at *regions until
 * the next call); false when none. */
bool xfer_consumer_pop(xfer_consumer *c, xfer_consumer_rec *out,
                       const xfer_region **regions);
/* The application's cancels: an answer from shard k, and the cancels to
 * send again to a shard whose link came up. */
void xfer_consumer_cancel_answered(xfer_consumer *c, uint16_t k,
                                   uint64_t id, bool ok);
void xfer_consumer_cancels_replay(xfer_consumer *c, uint16_t k);
/* Close: stop every id waiting and release everything taken. */
void xfer_consumer_ready_close(xfer_consumer *c);
/* Closed: drop the outcomes queued, releasing what they took. */
void xfer_consumer_drop_queued(xfer_consumer *c);

/* consumer_link.c: the directory reports member `shard` (e NULL: gone). */
struct xfer_dir_entry;
void xfer_consumer_on_member(void *ud, const char *group, uint16_t shard,
                             const struct xfer_dir_entry *e);

#endif /* XFER_CONSUMER_INT_H */
