/*
 * tests/rdma/fabric/fab.h - internals shared by the files of the software
 * verbs fabric (never included by code under test).
 *
 * One process holds one fabric: a global lock (fab_g.lock) guards every
 * object below, and one progress thread moves messages between processes
 * over per-connection Unix stream sockets, executes send queues, lands
 * incoming writes and delivers completions.  Application threads only
 * queue work and wake that thread, so every completion and CM event
 * arrives asynchronously, as on hardware.
 *
 * Ownership: verbs objects belong to the application (created and
 * destroyed by its calls); connections and listeners belong to the
 * progress thread, which alone frees them (an application call only
 * detaches or marks them), so a pointer the thread took before poll()
 * stays valid after it.
 */
#ifndef FAB_H
#define FAB_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "xfer_fabric.h"

/* The rdma-core entry points the fabric substitutes stay visible even
 * though the project builds with -fvisibility=hidden. */
#define FAB_API __attribute__((visibility("default")))

/* In an error completion only wr_id, status, qp_num and vendor_err are
 * valid (ibv_poll_cq(3)); the fabric puts this opcode there. */
#define FAB_WC_POISON ((enum ibv_wc_opcode)0xff)
#define FAB_VENDOR_ERR 0x5846

#define FAB_OF(ptr, type, member)                                            \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

enum {
    FAB_MAX_QP_WR = 16384,
    FAB_MAX_SGE = 32,
    FAB_MAX_CQE = 1 << 22,
    FAB_MAX_INLINE = 256,
    FAB_MAX_QP = 1 << 16,
    FAB_MAX_PD = 1 << 16,
    FAB_REQ_PDATA = 56,  /* private data of a CM REQ, REP, REJ on IB */
    FAB_REP_PDATA = 196,
    FAB_REJ_PDATA = 148,
    FAB_REJ_NO_SERVICE = 8,  /* IB_CM_REJ_INVALID_SERVICE_ID */
    FAB_REJ_CONSUMER = 28,   /* IB_CM_REJ_CONSUMER_DEFINED */
};

typedef struct fab_ctx fab_ctx;
typedef struct fab_pd fab_pd;
typedef struct fab_mr fab_mr;
typedef struct fab_mw fab_mw;
typedef struct fab_channel fab_channel;
typedef struct fab_cq fab_cq;
typedef struct fab_qp fab_qp;
typedef struct fab_conn fab_conn;
typedef struct fab_listener fab_listener;
typedef struct fab_cm_chan fab_cm_chan;
typedef struct fab_cm_id fab_cm_id;
typedef struct fab_pcqe fab_pcqe;

/* ---- core.c: an event queue readable through an eventfd ---------------- */

/* Events wait in a FIFO; the eventfd (semaphore mode) holds one unit per
 * queued event, so the fd polls readable exactly while one is queued and a
 * blocking read honours the O_NONBLOCK the application may set. */
typedef struct fab_evnode {
    struct fab_evnode *next;
} fab_evnode;

typedef struct fab_evq {
    int fd;
    fab_evnode *head, **tail;
} fab_evq;

int fab_evq_init(fab_evq *q);            /* -1 with errno */
void fab_evq_close(fab_evq *q);
void fab_evq_push(fab_evq *q, fab_evnode *n);
/* Unlocked: take one unit (blocks unless the fd is non-blocking). */
int fab_evq_wait(fab_evq *q);
fab_evnode *fab_evq_pop(fab_evq *q);
/* Unlink every node `match` accepts, handing each to `drop`. */
void fab_evq_purge(fab_evq *q, bool (*match)(fab_evnode *, const void *),
                   const void *arg, void (*drop)(fab_evnode *));

/* ---- core.c: the process-wide state ----------------------------------- */

typedef struct fab_key {
    uint8_t kind;  /* FAB_KEY_FREE / _MR / _MW */
    uint32_t gen;  /* bumped at every allocation of the slot */
    void *obj;
} fab_key;

enum { FAB_KEY_FREE, FAB_KEY_MR, FAB_KEY_MW };

typedef struct fab_global {
    pthread_mutex_t lock;
    pthread_cond_t turned; /* broadcast each time the thread left poll() */
    bool loaded, started, stop, in_poll;
    uint64_t turns;
    pthread_t thread;
    int wake_fd;
    xfer_fabric_opts opts;
    uint64_t nth_write, nth_reg, nth_bind; /* since the options were set */
    uint64_t rng;
    xfer_fabric_counters ctr;
    fab_key *keys;   /* index 0 unused; key = index << 8 | tag */
    uint32_t nkeys, capkeys, keys_used;
    uint32_t *free_keys; /* FIFO of released indices */
    uint32_t free_head, free_n;
    uint32_t next_qpn;
    uint16_t next_port;
    fab_ctx *cm_ctx;     /* the context rdmacm hands out (id->verbs) */
    fab_qp *qps;
    fab_conn *conns;
    fab_listener *listeners;
    fab_cm_id *ids;
    fab_pcqe *delayed;   /* completions waiting for their time, by time */
} fab_global;

extern fab_global fab_g;

/* Take the lock (first call: read XFER_FABRIC_FAULTS, start the thread). */
void fab_enter(void);
void fab_exit(void);
/* Ask the progress thread for another turn. */
void fab_wake(void);
/* Wait until the thread is out of the poll() it may be in (the kernel
 * keeps every polled file alive until then). */
void fab_await_turn(void);
uint64_t fab_now_ns(void);
uint64_t fab_rand(void);
/* An event of a fault's kind happened: true when it is the Nth. */
bool fab_fault_fires(uint64_t *count, uint64_t nth);
/* True when no fabric object is alive in this process. */
bool fab_idle(void);

/* ---- opts.c ----------------------------------------------------------- */

/* Apply XFER_FABRIC_FAULTS over the defaults (a bad value: one line on
 * stderr, exit 2). */
void fab_opts_load(void);
/* At exit: write the counters where XFER_FABRIC_COUNTERS says. */
void fab_opts_at_exit(void);

/* ---- device.c --------------------------------------------------------- */

struct fab_ctx {
    struct verbs_context vctx; /* callers see vctx.context */
    int refs;                  /* open + objects made on it */
    bool open;                 /* not yet ibv_close_device'd */
    bool cm_owned;
    fab_evq async;             /* vctx.context.async_fd */
};

struct fab_pd {
    struct ibv_pd pd;
    fab_ctx *ctx;
    uint32_t users; /* MRs, MWs, QPs */
};

typedef struct fab_async {
    fab_evnode node;
    struct ibv_async_event ev;
    fab_ctx *ctx;
} fab_async;

fab_ctx *fab_ctx_of(struct ibv_context *c);
fab_ctx *fab_ctx_new(bool cm_owned); /* NULL with errno */
void fab_ctx_ref(fab_ctx *c);
void fab_ctx_unref(fab_ctx *c);
fab_pd *fab_pd_of(struct ibv_pd *pd);
/* Queue an asynchronous event about a QP on its context; drop the ones
 * still queued for a QP being destroyed. */
void fab_async_qp(fab_qp *qp, enum ibv_event_type type);
void fab_async_purge(fab_qp *qp);
/* The port's max_msg_sz in force. */
uint32_t fab_max_msg(void);

/* ---- mr.c ------------------------------------------------------------- */

struct fab_mr {
    struct ibv_mr mr;
    fab_pd *pd;
    uint64_t iova;
    unsigned access;
    uint32_t windows; /* MWs bound to it: dereg is refused while > 0 */
    void *map;        /* a dma-buf MR's mapping of its fd, unmapped at
                         dereg (NULL: an address MR) */
    size_t maplen;
};

struct fab_mw {
    struct ibv_mw mw;
    fab_pd *pd;
    uint32_t index, gen; /* its key slot */
    bool bound;
    uint32_t key;        /* the rkey bound (valid while bound) */
    fab_mr *mr;
    uint64_t addr, len;
    unsigned access;
    uint32_t qpn;        /* type 2: the QP it was bound through */
};

/* What a bind WR carries (resolved again when it executes). */
typedef struct fab_bind {
    uint32_t mw_index, mw_gen;
    enum ibv_mw_type type;
    uint32_t new_rkey;
    uint32_t mr_lkey;    /* 0 with len 0: unbind (type 1) */
    uint64_t addr, len;
    unsigned access;
} fab_bind;

/* Why a responder refuses a remote access (0: allowed). */
enum {
    FAB_REJ_OK,
    FAB_REJ_NO_KEY,
    FAB_REJ_STALE_KEY,
    FAB_REJ_WRONG_QP,
    FAB_REJ_PD,
    FAB_REJ_ACCESS,
    FAB_REJ_BOUNDS,
};

/* The context ops (ibv_alloc_mw, ibv_dealloc_mw, ibv_bind_mw). */
struct ibv_mw *fab_mw_alloc(struct ibv_pd *pd, enum ibv_mw_type type);
int fab_mw_dealloc(struct ibv_mw *mw);
int fab_mw_bind(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b);
fab_mw *fab_mw_lookup(uint32_t index, uint32_t gen);
enum ibv_wc_status fab_mr_exec_bind(fab_qp *qp, const fab_bind *b);
enum ibv_wc_status fab_mr_exec_inval(fab_qp *qp, uint32_t rkey);
/* Check a remote write of len bytes at raddr under rkey into qp's PD. */
int fab_mr_remote(const fab_qp *qp, uint64_t raddr, uint32_t rkey,
                  uint64_t len, uint8_t **host);
/* Resolve local SGEs: host addresses in host[], total length in *total.
 * need_write: the SGEs are written (a receive). */
enum ibv_wc_status fab_mr_local(const fab_pd *pd, const struct ibv_sge *sge,
                                uint32_t n, bool need_write, uint8_t **host,
                                uint64_t *total);

/* ---- cq.c ------------------------------------------------------------- */

struct fab_channel {
    struct ibv_comp_channel ch;
    fab_ctx *ctx;
    fab_evq q;
    uint32_t cqs;
};

struct fab_cq {
    struct ibv_cq cq;
    fab_ctx *ctx;
    fab_channel *chan;
    struct ibv_wc *ring;
    uint32_t cap, head, n;
    bool armed, armed_solicited;
    uint32_t users;   /* QPs */
    uint32_t unacked; /* events taken, not yet acked */
};

struct fab_pcqe {
    fab_pcqe *next;
    fab_cq *cq;
    uint64_t due;
    bool solicited;
    struct ibv_wc wc;
};

fab_cq *fab_cq_of(struct ibv_cq *cq);
/* Queue a completion of qp on cq, after the configured delay, keeping the
 * QP's completions in order. */
void fab_cq_add(fab_qp *qp, fab_cq *cq, const struct ibv_wc *wc,
                bool solicited);
/* Move due delayed completions; lowers *next_due to the next one. */
void fab_cq_progress(uint64_t now, uint64_t *next_due);
int fab_cq_poll(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int fab_cq_notify(struct ibv_cq *cq, int solicited_only);

/* ---- qp.c ------------------------------------------------------------- */

enum { FAB_W_QUEUED, FAB_W_SENT, FAB_W_DONE };

typedef struct fab_swr {
    uint64_t wr_id, seq, due;
    enum ibv_wr_opcode op;
    bool signaled, solicited;
    uint8_t state;
    enum ibv_wc_status status;
    uint32_t nsge;
    struct ibv_sge *sge;
    uint8_t *inl;        /* IBV_SEND_INLINE copy */
    uint32_t inl_len;
    uint64_t raddr;
    uint32_t rkey, imm, inv_rkey;
    uint64_t len;        /* bytes, once resolved */
    fab_bind bind;
} fab_swr;

typedef struct fab_rwr {
    uint64_t wr_id;
    uint32_t nsge;
    struct ibv_sge *sge;
} fab_rwr;

struct fab_qp {
    struct ibv_qp qp;
    fab_pd *pd;
    fab_cq *scq, *rcq;
    struct ibv_qp_cap cap;
    bool sig_all;
    fab_swr *sq;
    struct ibv_sge *sq_sge;
    uint64_t sq_head, sq_exec, sq_tail; /* retired / executed / posted */
    fab_rwr *rq;
    struct ibv_sge *rq_sge;
    uint64_t rq_head, rq_tail;
    uint64_t next_seq, last_due, last_cq_due;
    bool flush;          /* in error: flush everything posted */
    bool sq_blocked;     /* a WR failed or the link is going: execute no
                            more until the QP is flushed */
    enum ibv_wc_status lost_status; /* for the first WR in flight */
    uint32_t dest_qpn;
    fab_conn *conn;      /* the link its data travels on */
    fab_qp *prev, *next;
};

fab_qp *fab_qp_of(struct ibv_qp *qp);
/* The context ops (ibv_post_send, ibv_post_recv). */
int fab_qp_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                     struct ibv_send_wr **bad);
int fab_qp_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                     struct ibv_recv_wr **bad);
/* ibv_create_qp / ibv_destroy_qp with the lock held (rdmacm uses them);
 * create returns NULL with *err set. */
fab_qp *fab_qp_create(fab_pd *pd, struct ibv_qp_init_attr *attr, int *err);
void fab_qp_destroy(fab_qp *qp);
/* Move to the error state (flushing on the thread); inflight: status of
 * the oldest WR on the wire, IBV_WC_WR_FLUSH_ERR for a plain flush. */
void fab_qp_error(fab_qp *qp, enum ibv_wc_status inflight);
/* The CM moves a QP along RESET-INIT-RTR-RTS. */
void fab_qp_set_state(fab_qp *qp, enum ibv_qp_state s);
int fab_qp_post_bind(fab_qp *qp, uint64_t wr_id, unsigned flags,
                     const fab_bind *b);
void fab_qp_progress(uint64_t now, uint64_t *next_due);
/* The responder answered the WR with this sequence number. */
void fab_qp_on_resp(fab_qp *qp, uint64_t seq, uint32_t status);
/* Take the oldest posted receive (false: none). */
bool fab_qp_take_recv(fab_qp *qp, fab_rwr *out);
uint32_t fab_qp_recvs(const fab_qp *qp);

/* ---- responder.c ------------------------------------------------------ */

/* Responses to a data message, carried back in M_RESP. */
enum {
    FAB_RESP_OK,
    FAB_RESP_REM_ACCESS,
    FAB_RESP_REM_INV_REQ,
    FAB_RESP_REM_OP,
    FAB_RESP_DROPPED, /* QP in error or gone: the sender retries, fails */
};

enum ibv_wc_status fab_resp_status(uint32_t resp);
/* Handle a WRITE/SEND arriving on conn.  Returns false when it must wait
 * (QP not yet RTR, or no receive posted: RC's RNR retry). */
bool fab_resp_data(fab_conn *c, uint64_t seq, const uint8_t *body,
                   size_t len);

/* ---- wire.c ----------------------------------------------------------- */

enum {
    FAB_M_REQ = 1,
    FAB_M_REP,
    FAB_M_REJ,
    FAB_M_RTU,
    FAB_M_DREQ,
    FAB_M_DREP,
    FAB_M_DATA,
    FAB_M_RESP,
};

enum { FAB_D_WRITE, FAB_D_WRITE_IMM, FAB_D_SEND, FAB_D_SEND_IMM };

/* Head of a data message; the payload follows. */
/* fab_data_hdr.mangle: a write the responder lands wrong and still
 * acknowledges (write_corrupt, write_phantom). */
enum { FAB_MANGLE_NONE = 0, FAB_MANGLE_FLIP = 1, FAB_MANGLE_DROP = 2 };

typedef struct fab_data_hdr {
    uint64_t raddr;
    uint64_t len;
    uint32_t rkey;
    uint32_t imm;
    uint8_t kind;      /* FAB_D_* */
    uint8_t inject;    /* refuse it (write_access_err) */
    uint8_t solicited;
    uint8_t mangle;    /* FAB_MANGLE_*: land it wrong, answer success */
    uint8_t pad[4];
} fab_data_hdr;

typedef struct fab_buf {
    uint8_t *p;
    size_t off, len, cap;
} fab_buf;

typedef struct fab_parked {
    struct fab_parked *next;
    uint64_t seq;
    size_t len;
    uint8_t body[];
} fab_parked;

struct fab_conn {
    int fd;
    fab_cm_id *id;     /* NULL once the id let go of it */
    fab_qp *qp;        /* local QP of this link (after connect/accept) */
    fab_listener *lis; /* passive side until its REQ arrived */
    fab_buf in, out;
    fab_parked *parked, **parked_tail; /* data waiting, in order */
    bool closing;      /* close once `out` is written */
    bool cut;          /* xfer_fabric_cut asked for it */
    bool lost;         /* link gone; freed at the next sweep */
    fab_conn *prev, *next;
};

struct fab_listener {
    int fd;
    bool listening;
    fab_cm_id *id;     /* NULL once dead (fd closed) */
    fab_listener *prev, *next;
};

/* Bind the port's socket (0: pick one); returns the listener or NULL with
 * errno (EADDRINUSE).  *port receives the port. */
fab_listener *fab_wire_bind(uint16_t *port);
int fab_wire_listen(fab_listener *l, int backlog);
void fab_wire_unbind(fab_listener *l);
/* Connect to a port; NULL with errno (ECONNREFUSED: nobody listens). */
fab_conn *fab_wire_connect(uint16_t port);
/* Append a message; data (may be NULL) is dlen bytes after the body.
 * Returns a pointer to the reserved data bytes when data is NULL and
 * dlen > 0 (to fill in place), else NULL; on failure the link is lost. */
uint8_t *fab_wire_send(fab_conn *c, uint32_t type, uint64_t seq,
                       const void *body, size_t blen, const void *data,
                       size_t dlen);
/* Close after the output drains. */
void fab_wire_close(fab_conn *c);
/* The link is gone now (nothing more is read or written). */
void fab_wire_lose(fab_conn *c);
/* Retry the data messages parked on every link. */
void fab_wire_unpark(void);
/* One turn of the progress thread's I/O: build the poll set, wait at most
 * until `due` (0: no timer), dispatch.  Called with the lock held. */
void fab_wire_turn(uint64_t due);
void fab_wire_shutdown(void);

/* ---- cm.c / cm_conn.c ------------------------------------------------- */

struct fab_cm_chan {
    struct rdma_event_channel ch;
    fab_evq q;
    uint32_t ids;
};

typedef struct fab_cmev {
    fab_evnode node;
    struct rdma_cm_event ev;
    fab_cm_id *owner; /* the id the event counts against */
    uint8_t pdata[FAB_REP_PDATA];
} fab_cmev;

enum fab_cm_state {
    FAB_CM_IDLE,
    FAB_CM_BOUND,
    FAB_CM_LISTEN,
    FAB_CM_ADDR_QUERY,
    FAB_CM_ADDR_RESOLVED,
    FAB_CM_ROUTE_QUERY,
    FAB_CM_ROUTE_RESOLVED,
    FAB_CM_CONNECT,     /* REQ sent */
    FAB_CM_REP_RCVD,    /* ESTABLISHED queued, not yet taken */
    FAB_CM_REQ_RCVD,    /* passive: CONNECT_REQUEST, not answered */
    FAB_CM_ACCEPTED,    /* REP sent, waiting for RTU */
    FAB_CM_ESTABLISHED,
    FAB_CM_DISCONNECT,  /* DREQ sent or received */
    FAB_CM_DONE,        /* disconnected, rejected or unreachable */
};

struct fab_cm_id {
    struct rdma_cm_id id;
    fab_cm_chan *chan;
    enum fab_cm_state state;
    fab_listener *lis;
    fab_conn *conn;
    fab_ctx *ctx;       /* reference behind id.verbs */
    uint32_t unacked;   /* events taken and counted against it */
    bool dreq_sent, dreq_rcvd, disc_queued, lost;
    uint32_t peer_qpn;
    struct ibv_sa_path_rec path;
    fab_cm_id *prev, *next;
};

/* Queue an event on id's channel, counted against owner; pdata (pdlen
 * bytes, may be NULL) is padded with zeroes to pdmax, as IB CM does.
 * Returns the event so the caller may fill param.conn (NULL: no memory). */
fab_cmev *fab_cm_event(fab_cm_id *id, fab_cm_id *owner,
                  enum rdma_cm_event_type type, int status,
                  const void *pdata, size_t pdlen, size_t pdmax);
/* Give id the rdmacm context (id->verbs). */
int fab_cm_attach_verbs(fab_cm_id *id);
fab_cm_id *fab_cm_new_child(fab_cm_id *listen_id);
void fab_cm_free(fab_cm_id *id);

/* A CM message arrived on c. */
void fab_cmconn_msg(fab_conn *c, uint32_t type, const uint8_t *body,
                    size_t len);
/* c's link was lost (peer died, socket error, or a cut). */
void fab_cmconn_lost(fab_conn *c);
/* Called when the application takes an event from its channel. */
void fab_cmconn_taken(fab_cmev *e);
/* Send whatever the id's teardown owes its peer, and let go of the link. */
void fab_cmconn_release(fab_cm_id *id);

#endif /* FAB_H */
