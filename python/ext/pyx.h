/*
 * python/ext/pyx.h - the private declarations shared by the files of the
 * extension module xfer._xfer (the Python binding: the producer, the
 * shard server and the consumer).
 *
 * How the pieces fit (docs/design.md, section 11):
 *  - pyx_core (core.c) is the C side of one xfer.Engine: the xfer_engine,
 *    the thread its libevent loop runs on, and the lock that orders every
 *    post into its mailbox against shutdown.  It holds no Python object,
 *    and the loop thread never touches one (except to call
 *    call_soon_threadsafe in the "call_soon" delivery mode, with the GIL).
 *  - a pyx_ticket is one completion owed to Python: the loop thread fills
 *    it and hands it to its channel (channel.c), or wakes a blocking
 *    waiter; the thread that consumes it holds the GIL.
 *  - channels deliver tickets to an asyncio loop (an eventfd the loop
 *    watches, or call_soon_threadsafe) or to the engine's callback thread.
 *  - every C config and stats struct the binding reads or fills is touched
 *    in configs.c only, so a change of those structs is one file's edit.
 *  - xfer.Server (server.c) and xfer.Consumer (consumer.c) each run on a
 *    pyx_core of their own, whose engine has no group: the engine's
 *    mailbox is their way into the loop, the core hosts their C object.
 *    A consumer's outcomes wait in a queue of its own (consumer.c) that
 *    Python pops; an available one is an xfer.Available (outcome.c) whose
 *    views are buffers over a pyx_mem, a shard's memory as it is mapped.
 *
 * Threads: functions marked "GIL" need the caller to hold it; "loop" run
 * on the engine's loop thread without it; "any" need nothing.
 */
#ifndef PYX_H
#define PYX_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "xfer/consumer.h"
#include "xfer/loop.h"
#include "xfer/server.h"
#include "xfer/shm.h"
#include "xfer/stream.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

/* ---------------------------------------------------------------------- */
/* module.c: exception classes, the Transfer class, shared helpers         */
/* ---------------------------------------------------------------------- */

/* Raise the xfer.Error subclass of code (GIL).  Returns NULL. */
PyObject *pyx_raise(int code);
/* A new exception instance for a failed result (GIL). */
PyObject *pyx_error_for(PyObject *result, int code);
/* A new xfer.Transfer (an asyncio.Future subclass) bound to the running
 * loop, or NULL with an exception (GIL). */
PyObject *pyx_new_transfer(void);
/* The running asyncio loop (new ref), or NULL with RuntimeError (GIL). */
PyObject *pyx_running_loop(void);
/* Seconds (float or int, None: 0) to nanoseconds; -1 with an error. */
int pyx_ns_of(PyObject *secs, uint64_t *ns);

/* ---------------------------------------------------------------------- */
/* result.c                                                                */
/* ---------------------------------------------------------------------- */

extern PyTypeObject pyx_result_type;
/* A new xfer.Result (GIL). */
PyObject *pyx_result_new(const xfer_result *r);
/* The shards of a mask as a tuple of ints, lowest first (GIL). */
PyObject *pyx_shard_tuple(uint64_t mask);
/* The name of a phase ("reserving", ...); "?" when unknown.  Any. */
const char *pyx_phase_name(unsigned phase);

/* ---------------------------------------------------------------------- */
/* Tickets and channels (channel.c)                                        */
/* ---------------------------------------------------------------------- */

typedef struct pyx_channel pyx_channel;
typedef struct pyx_core pyx_core;

enum {
    PYX_T_FUTURE = 0,   /* resolve target, an asyncio future */
    PYX_T_CALLBACK = 1, /* call target(result) on the callback thread */
    PYX_T_WAIT = 2,     /* wake a thread blocked in submit_wait */
    PYX_T_CLOSED = 3,   /* resolve target (a future) with None: the engine
                           stopped (Engine.aclose) */
    PYX_T_BOOL = 4,     /* resolve target (a future) with res.status == 0
                           (Server.adrain: drained in time) */
    PYX_T_PART = 5      /* resolve target (a future) with the part number
                           (res.user_data), or its error when res.status
                           is not 0, marked retrieved (Stream.write) */
};

typedef struct pyx_ticket {
    struct pyx_ticket *next;
    xfer_result res;
    uint8_t kind;       /* PYX_T_* */
    uint8_t done;       /* WAIT: the result is in; guarded by core lock */
    uint8_t abandoned;  /* WAIT: the waiter left; the loop frees it */
    pyx_channel *chan;  /* FUTURE, CALLBACK, CLOSED: a strong reference */
    PyObject *target;   /* FUTURE, CLOSED: the future; CALLBACK: callable;
                           a strong reference, dropped by the channel */
    pyx_core *core;     /* WAIT: whose lock and condition to use */
} pyx_ticket;

/* Delivery modes of an asyncio channel. */
enum { PYX_NOTIFY_FD = 0, PYX_NOTIFY_CALL_SOON = 1 };

extern PyTypeObject pyx_channel_type;
/* A channel for the asyncio loop `loop` (GIL): an eventfd watched by
 * loop.add_reader, or call_soon_threadsafe from the loop thread. */
pyx_channel *pyx_channel_for_loop(PyObject *loop, int notify);
/* A channel drained by a thread of its own that calls the callbacks of
 * PYX_T_CALLBACK tickets (GIL). */
pyx_channel *pyx_channel_thread(void);
/* Hand a filled ticket over (loop, or any thread).  The channel delivers
 * it with the GIL, in push order, exactly once. */
void pyx_channel_push(pyx_channel *c, pyx_ticket *t);
/* The engine is done with the channel (GIL): no ticket will be pushed any
 * more.  An asyncio channel stops watching its fd once every ticket it
 * was given is delivered; a thread channel lets its thread end after the
 * last one, and joins it unless called from that thread. */
void pyx_channel_retire(pyx_channel *c);
/* A ticket was made for c (+1), or was not posted after all (-1) (GIL):
 * retire waits until every expected ticket was delivered. */
void pyx_channel_expect(pyx_channel *c, int delta);
/* A future of the running loop and a ticket of `kind` (FUTURE, CLOSED or
 * BOOL) that resolves it, through a channel of its own that stops
 * watching its fd once the ticket was delivered (GIL).  Returns the
 * future (new reference) and *t, or NULL with an exception. */
PyObject *pyx_channel_oneshot(int kind, pyx_ticket **t);
/* Counters of a channel (GIL). */
void pyx_channel_counts(const pyx_channel *c, uint64_t *delivered,
                        uint64_t *unclaimed, uint64_t *errors);
/* True when the channel serves `loop` with delivery mode `notify` and
 * can still take tickets (GIL). */
bool pyx_channel_serves(const pyx_channel *c, PyObject *loop, int notify);

/* ---------------------------------------------------------------------- */
/* core.c: the engine's C side and its loop thread                         */
/* ---------------------------------------------------------------------- */

/* The engine config of Engine(...)'s keywords (ns, counts; 0: default). */
typedef struct pyx_engine_opts {
    uint32_t max_transfers, max_tombstones, max_pools, mailbox_cap;
    uint64_t default_timeout_ns, tombstone_ttl_ns;
    uint64_t cancel_op_timeout_ns, cancel_backoff_ns;
    uint32_t cancel_max_attempts;
    uint32_t eager_max_bytes; /* 0: no eager path */
    uint64_t shutdown_timeout_ns; /* 0: the library's; UINT64_MAX: none */
} pyx_engine_opts;

enum {
    PYX_OPEN = 0,     /* the loop runs; posts go through */
    PYX_CLOSING = 1,  /* shutdown posted; posts refused with SHUTDOWN */
    PYX_STOPPED = 2,  /* the loop returned: every completion handed over */
    PYX_FREED = 3     /* engine and transports freed */
};

#define PYX_MAX_GROUPS 16

/* A transport the core deletes after the engine (transport.c fills it). */
typedef struct pyx_tp_slot {
    void *obj;
    void (*del)(void *obj);
} pyx_tp_slot;

struct pyx_core {
    unsigned refs;            /* GIL: Engine, pools and transports */
    pthread_mutex_t lock;     /* state, posts, waits, tickets' done */
    pthread_cond_t cond;
    int state;                /* PYX_*; written under lock */
    struct event_base *base;  /* the core's own; freed after the
                                 transports (TCP closes on it) */
    xfer_engine *e;
    pthread_t thread;
    bool thread_started;
    pyx_tp_slot tps[PYX_MAX_GROUPS];
    pyx_tp_slot hosted;       /* a Server's or Consumer's C side, deleted
                                 after the transports */
    uint16_t nshards[PYX_MAX_GROUPS];
    uint32_t ngroups;
    pyx_ticket *closers;      /* PYX_T_CLOSED tickets, under lock */
    xfer_engine_stats final;  /* the stats when shutdown completed */
    uint64_t posted, wait_abandoned;
};

/* The loop's work for pyx_core_call: runs on the loop, returns an rc. */
typedef int (*pyx_loop_fn)(pyx_core *c, void *arg);

/* Create the event base and the engine on it (config from configs.c),
 * not yet running.  Returns 0 or an xfer error. */
int pyx_core_new(const pyx_engine_opts *o, pyx_core **out);
/* Finish the engines dropped while their loop still ran (engine.c), once
 * their loop stopped; block: wait for each to stop (atexit).  GIL.
 * Returns 0, or -1 with an exception set. */
int pyx_engine_reap(bool block);
/* Host obj: del(obj) runs once the loop stopped, after the engine and the
 * transports were deleted (before the thread starts, or on the loop). */
void pyx_core_host(pyx_core *c, void *obj, void (*del)(void *obj));
void pyx_core_ref(pyx_core *c);   /* GIL */
void pyx_core_unref(pyx_core *c); /* GIL; frees at 0 (after close) */
/* Start the loop thread.  Returns 0 or XFER_ERR_IO. */
int pyx_core_start(pyx_core *c);
/* Run fn(c, arg) on the loop and wait for it (GIL held on entry; released
 * while waiting).  Returns fn's rc, or XFER_ERR_SHUTDOWN when the loop no
 * longer takes work. */
int pyx_core_call(pyx_core *c, pyx_loop_fn fn, void *arg);
/* Post fn(ud) to run on the loop, without waiting for it (GIL held on
 * entry; released around the post, which waits for room in a full
 * mailbox).  Returns 0 (fn will run, before the loop stops) or
 * XFER_ERR_SHUTDOWN (fn never runs). */
int pyx_core_post(pyx_core *c, xfer_call_fn fn, void *ud);
/* Hand a ticket its result: push it to its channel, or wake the thread
 * waiting on it (a PYX_T_WAIT ticket; freed here if the waiter left).
 * Loop, or any thread once the loop stopped. */
void pyx_ticket_complete(pyx_ticket *t, const xfer_result *res);
/* Post a submit whose completion fills t (GIL held on entry; released
 * around the post).  Returns 0 (t belongs to the loop until it is
 * completed) or an xfer error (t untouched). */
int pyx_core_submit(pyx_core *c, const xfer_transfer_desc *d,
                    const uint32_t *crcs, pyx_ticket *t);
/* Post a cancel (GIL held on entry, released around the post). */
int pyx_core_cancel(pyx_core *c, uint64_t id);
/* Streams (xfer/stream.h), posted like a submit (GIL held on entry,
 * released around the post): an open whose completion fills t, a part
 * with no callback (its ranges' pools stay registered while the engine
 * holds them), a seal (crcs: the caller's CRCs, ncrcs of them; NULL:
 * none, xfer_engine_post_stream_seal_crc).  submit's crcs: d->nslices of
 * them, or NULL (xfer_engine_post_submit_crc).  0 or an xfer error (t untouched then). */
int pyx_core_stream_open(pyx_core *c, const xfer_stream_desc *d,
                         pyx_ticket *t);
/* Post part d; on 0, t (a PYX_T_PART ticket) is pushed once, when the
 * loop released the part's staging (or refused the part). */
int pyx_core_stream_part(pyx_core *c, const xfer_part_desc *d,
                         pyx_ticket *t);
int pyx_core_stream_seal(pyx_core *c, uint64_t id, const uint32_t *crcs,
                         uint16_t ncrcs);
/* Wait for a PYX_T_WAIT ticket (GIL held on entry; released while it
 * waits; signals are checked every 100 ms).  Returns 0 with the result in
 * t->res (t is then the caller's to free), or -1 with a Python exception
 * (t then belongs to the loop, which frees it). */
int pyx_core_wait(pyx_core *c, pyx_ticket *t);
/* Begin shutdown if not begun (GIL held; released inside).  closer, when
 * given, is a PYX_T_CLOSED ticket pushed once the loop stopped (or at
 * once if it has).  Returns 0 or an xfer error. */
int pyx_core_begin_close(pyx_core *c, pyx_ticket *closer);
/* Wait until the loop stopped (GIL held; released while waiting). */
void pyx_core_wait_stopped(pyx_core *c);
/* Join the loop thread and free the engine and transports (GIL held;
 * released while joining).  Only once, after the loop stopped. */
void pyx_core_free_engine(pyx_core *c);
/* Close once: begin, wait for the loop to stop, free the engine.  The
 * caller's *closed (GIL) says whether some thread did it already; true
 * when this call freed it (then let go of the memory the loop used). */
bool pyx_core_close(pyx_core *c, bool *closed);
/* The state now (any). */
int pyx_core_state(pyx_core *c);
/* *ts = CLOCK_MONOTONIC now + secs (>= 0): a deadline for the
 * pthread_cond_timedwait of a condition variable on that clock. */
void pyx_deadline_in(struct timespec *ts, double secs);

/* ---------------------------------------------------------------------- */
/* configs.c: every C config and stats struct, in one place                */
/* ---------------------------------------------------------------------- */

/* The secret= and session= keywords of Tcp, Server and Consumer (docs/
 * operating.md, "Running xferd on a network"), copied out of the Python objects: the
 * shared secret of HELLO2's challenge-response (secret_len 0: none) and
 * the 16-byte session name (all zero: drawn from the OS CSPRNG). */
typedef struct pyx_auth {
    uint8_t session[16];
    uint8_t secret[256];
    size_t secret_len;
} pyx_auth;

/* Read secret (NULL, None, or a bytes-like object of 16..256 bytes) and
 * session (NULL, None, or bytes-like of exactly 16) into *a; 0, or -1
 * with TypeError / ValueError set (GIL). */
int pyx_auth_parse(PyObject *secret, PyObject *session, pyx_auth *a);

/* Server(...)'s keywords (ns, counts; 0: the library's default). */
typedef struct pyx_server_opts {
    const char *addr;  /* borrowed; NULL: 127.0.0.1 */
    uint16_t port;
    uint32_t group, max_reservations, max_tombstones;
    uint64_t lease_ttl_ns, tombstone_ttl_ns, take_grace_ns;
    uint64_t drain_timeout_ns;
    bool consume;
    uint32_t fault_ppm, drop_ppm;
    uint64_t fault_seed;
    bool insecure;
    pyx_auth auth; /* its session is unused: a server names none */
    /* etcd=URLS: xfer_server_register in group etcd_group (default "0"),
     * a lease of etcd_ttl s (0: 10), advertising `advertise` (NULL: the
     * bound address).  Borrowed; NULL etcd: not registered. */
    const char *etcd, *etcd_group, *advertise;
    uint32_t etcd_ttl;
} pyx_server_opts;

/* Consumer(...)'s keywords (ns, counts; 0: the library's default). */
typedef struct pyx_consumer_opts {
    uint32_t group, max_ids, max_tombstones, mailbox_cap;
    uint64_t ready_deadline_ns, tombstone_ttl_ns, connect_timeout_ns;
    uint64_t reconnect_min_ns, reconnect_max_ns, request_timeout_ns;
    pyx_auth auth;
} pyx_consumer_opts;

void pyx_config_engine(const pyx_engine_opts *o, struct event_base *base,
                       xfer_engine_config *cfg);
/* The loop transport's config (shard template included). */
void pyx_config_loop(uint16_t nshards, uint64_t pool_bytes,
                     uint32_t max_reservations, uint64_t lease_ttl_ns,
                     uint64_t seed, uint64_t write_ns, xfer_loop_event_cb ev,
                     void *ev_ud, xfer_loop_config *cfg);
/* auth is borrowed until the C object was made from cfg. */
void pyx_config_tcp(uint16_t nshards, const char *const *addrs,
                    uint32_t group, uint64_t connect_timeout_ns,
                    const pyx_auth *auth, xfer_tcp_config *cfg);
/* shards (nshards entries) and addrs are borrowed until the C object was
 * made from cfg. */
void pyx_config_server(const pyx_server_opts *o, struct event_base *base,
                       const xfer_server_shard *shards, uint16_t nshards,
                       xfer_server_config *cfg);
void pyx_config_consumer(const pyx_consumer_opts *o, struct event_base *base,
                         uint16_t nshards, const char *const *addrs,
                         xfer_consumer_config *cfg);
/* Stats as dicts (GIL). */
PyObject *pyx_stats_engine(const xfer_engine_stats *st);
PyObject *pyx_stats_loop(const xfer_loop_stats *st, uint32_t outstanding,
                         uint64_t shard_bytes, uint64_t shard_resv);
/* Bytes in use and reservations summed over the loop's shards (loop). */
void pyx_loop_shard_totals(xfer_loop *l, uint16_t nshards, uint64_t *bytes,
                           uint64_t *resv);
PyObject *pyx_stats_tcp(const xfer_tcp_stats *st);
PyObject *pyx_stats_server(const xfer_server_stats *st);
PyObject *pyx_stats_consumer(const xfer_consumer_stats *st);
/* One shard object's counters (Loop.stats(shard)). */
PyObject *pyx_stats_shard(const xfer_shard_stats *st);
/* A transfer's view (Engine.view): its state, times, ops in flight, and
 * per shard the sub-state word of each op and the cancels sent. */
PyObject *pyx_transfer_view(const xfer_transfer_view *v);
/* A fault rule from add_fault's arguments (kind, op=, shard=, id=,
 * prob=, count=, delay=, error=; shard below nshards).  0, or -1 with
 * ValueError or TypeError set (GIL). */
int pyx_fault_rule_of(PyObject *args, PyObject *kw, int nshards,
                      xfer_fault_rule *rule);
/* Ask for the stats of this header's version (loop). */
int pyx_server_stats_get(const xfer_server *s, uint16_t index,
                         xfer_server_stats *st);
int pyx_consumer_stats_get(const xfer_consumer *c, xfer_consumer_stats *st);

/* ---------------------------------------------------------------------- */
/* tensor.c: memory handed over in place (buffer, array interface, DLPack, */
/* a raw tuple), and device memory handed back                             */
/* ---------------------------------------------------------------------- */

/* Helper device's memory kinds (include/xfer/mem.h, testdev.h) where the
 * tree has them; without, only host memory registers. */
#if defined(__has_include)
#if __has_include("xfer/mem.h")
#include "xfer/mem.h"
#define PYX_HAVE_MEM 1
#endif
#if __has_include("xfer/testdev.h")
#include "xfer/testdev.h"
#define PYX_HAVE_TESTDEV 1
#endif
#endif
#ifndef PYX_HAVE_MEM
#define PYX_HAVE_MEM 0
#endif
#ifndef PYX_HAVE_TESTDEV
#define PYX_HAVE_TESTDEV 0
#endif

/* xfer_mem_kind's values. */
enum { PYX_MEM_HOST = 0, PYX_MEM_CUDA = 1, PYX_MEM_TESTDEV = 2 };

struct dl_managed;

/* Memory taken from a Python object, held until pyx_tensor_release. */
typedef struct pyx_tensor {
    void *ptr;
    size_t nbytes;
    int kind;             /* PYX_MEM_* */
    int32_t device;       /* CUDA ordinal; 0 otherwise */
    bool readonly;
    const char *form;     /* "buffer", "dlpack", "cuda_array_interface",
                             "raw" (static) */
    PyObject *obj;        /* a reference to the object (NULL: raw) */
    Py_buffer view;       /* the buffer form's; view.obj NULL otherwise */
    struct dl_managed *dl;/* DLPack's; its deleter runs at release */
} pyx_tensor;

/* Take obj's memory in place (GIL): a (pointer, nbytes, device) tuple, an
 * object with __cuda_array_interface__, with __dlpack__, or a buffer.
 * writable: refuse read-only memory.  0, or -1 with an exception
 * (BufferError for non-contiguous or read-only memory; *t then holds
 * nothing). */
int pyx_tensor_get(PyObject *obj, bool writable, pyx_tensor *t);
/* Let go of it (GIL); a released or zeroed t is fine. */
void pyx_tensor_release(pyx_tensor *t);
/* 0 when memory of t's kind can be registered here, else
 * XFER_ERR_NOT_SUPPORTED.  Any. */
int pyx_tensor_check_kind(const pyx_tensor *t);
/* xfer_mem_of (HOST in a tree without mem.h).  Any. */
int pyx_mem_kind_of(const void *ptr, int32_t *device);
const char *pyx_mem_kind_name(int kind);

/* xfer.DeviceView: device memory handed back with
 * __cuda_array_interface__; owner (referenced) keeps it; valid(owner),
 * when given, says whether it may still be used (Py_True). */
extern PyTypeObject pyx_devview_type;
PyObject *pyx_devview_new(void *ptr, size_t nbytes, int kind, int32_t device,
                          bool readonly, PyObject *owner,
                          PyObject *(*valid)(PyObject *owner));
/* It may not be used any more (the region was released).  GIL. */
void pyx_devview_invalidate(PyObject *v);
extern PyMethodDef pyx_tensor_methods[];
int pyx_tensor_init(PyObject *m);

/* ---------------------------------------------------------------------- */
/* pool.c, transport.c, engine.c                                           */
/* ---------------------------------------------------------------------- */

typedef struct pyx_pool {
    PyObject_HEAD
    pyx_core *core;     /* a reference; NULL once released */
    pyx_tensor mem;     /* held from register until unregister succeeded
                           or the engine stopped (I3) */
    uint32_t id;
    bool registered;
} pyx_pool;

extern PyTypeObject pyx_pool_type;
/* Register obj's buffer on c (GIL).  New reference, or NULL. */
pyx_pool *pyx_pool_register(pyx_core *c, PyObject *obj);
/* The engine stopped and unregistered every pool: let go of the buffer
 * (GIL). */
void pyx_pool_released(pyx_pool *p);

extern PyTypeObject pyx_loop_type;
extern PyTypeObject pyx_tcp_type;
/* Create the C transport of a Loop or Tcp object on c's base and add its
 * group.  Before the loop thread starts (on_loop false) this runs on the
 * calling thread; after, inside a pyx_core_call.  Returns 0 or an xfer
 * error; *group is the group index (GIL held, for the config). */
int pyx_transport_attach(PyObject *tp, pyx_core *c, uint32_t *group,
                         bool on_loop);
/* True when tp is a Loop or a Tcp object. */
bool pyx_transport_check(PyObject *tp);

extern PyTypeObject pyx_engine_type;
extern PyTypeObject pyx_server_type;
extern PyTypeObject pyx_consumer_type;

/* ---------------------------------------------------------------------- */
/* outcome.c: a consumer's outcomes, and the memory their views show       */
/* ---------------------------------------------------------------------- */

/* A shard's memory as this process sees it: a mapped shared-memory pool
 * (xfer_shm_map) or a buffer the Consumer was given.  Refcounted
 * atomically: the consumer's loop takes a reference for every region of
 * an available outcome, Python drops them.  A shm mapping is unmapped
 * with its last reference, from any thread; a buffer's last reference is
 * the Consumer's own, dropped with the GIL. */
typedef struct pyx_mem pyx_mem;
/* Takes m (closed here on failure).  NULL: out of memory.  Any. */
pyx_mem *pyx_mem_of_shm(xfer_shm *m);
/* Holds obj's buffer (any contiguous one; read only).  NULL with an
 * exception (GIL). */
pyx_mem *pyx_mem_of_buffer(PyObject *obj);
/* A shm mapping's object generation (xfer_shm_generation); 0: a buffer. */
uint64_t pyx_mem_generation(const pyx_mem *m);
void pyx_mem_ref(pyx_mem *m);   /* any */
void pyx_mem_unref(pyx_mem *m); /* any; GIL for a buffer's */

typedef struct pyx_cside pyx_cside;

typedef struct pyx_oregion {
    xfer_region r;
    pyx_mem *mem;   /* a reference, or NULL: not readable here */
} pyx_oregion;

/* One outcome: made by the consumer's loop, queued, popped by Python.  An
 * available one then lives as long as its Available and every buffer
 * export of its regions, and its data goes back to the shards once it was
 * released and no export is left. */
typedef struct pyx_outcome {
    struct pyx_outcome *next;          /* the queue (consumer.c) */
    struct pyx_outcome *hprev, *hnext; /* held, not yet given back (GIL) */
    unsigned refs;      /* GIL: the Available and every live export */
    unsigned exports;   /* GIL: buffer exports of its regions alive */
    pyx_cside *cs;      /* a reference, once Python has it */
    PyObject *avail;    /* borrowed: its Available while it lives */
    uint64_t id, shards;
    uint32_t attempt;
    int32_t reason;     /* 0: available */
    bool release_asked; /* release() called, or the Available went */
    bool release_sent;  /* given back (or the consumer closed) */
    uint16_t n;
    pyx_oregion reg[];
} pyx_outcome;

/* n regions, zeroed.  NULL: out of memory.  Any (no Python). */
pyx_outcome *pyx_outcome_alloc(uint16_t n);
/* Drop its memory references and free it.  Any thread while the Consumer
 * holds its buffers; GIL otherwise. */
void pyx_outcome_free(pyx_outcome *o);
/* Take o: an xfer.Available holding `consumer` (its data held until
 * released), or an xfer.Unavailable (o freed).  NULL with an exception
 * (then an available o was given back).  GIL. */
PyObject *pyx_outcome_wrap(pyx_outcome *o, pyx_cside *cs, PyObject *consumer);
/* The consumer closes: an Available's views are released now (GIL). */
void pyx_available_drop_views(PyObject *avail);

/* consumer.c, for outcome.c (GIL): reference the C side; track a held
 * outcome and stop tracking it; give an id's data back to its shards
 * (nothing once the consumer closed: its close gave everything back). */
void pyx_cside_ref(pyx_cside *cs);
void pyx_cside_unref(pyx_cside *cs);
void pyx_cside_hold(pyx_cside *cs, pyx_outcome *o);
void pyx_cside_unhold(pyx_cside *cs, pyx_outcome *o);
void pyx_cside_release(pyx_cside *cs, uint64_t id);

extern PyTypeObject pyx_available_type;
extern PyTypeObject pyx_unavailable_type;

#endif /* PYX_H */
