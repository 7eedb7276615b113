/*
 * tests/consumer/roles.c - the producer and consumer processes of
 * roles.h.  Each child builds its own event base after the fork (the
 * parent owns none), dies with the test (PR_SET_PDEATHSIG), and writes
 * whole lines to its pipe, so the parent's parse never sees half a line
 * of a finished record.
 */
#define _DEFAULT_SOURCE /* usleep */
#include "roles.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "mp.h"
#include "xfer/consumer.h"
#include "xfer/shm.h"
#include "xfer/stream.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

#define MAXS 8

uint8_t role_pattern(uint64_t seed, uint64_t id, uint16_t k, uint32_t i)
{
    return (uint8_t)(id * 131u + k * 31u + i * 7u + seed * 17u);
}

static void addrs_of(const uint16_t *ports, uint16_t S, char (*buf)[32],
                     const char **addrs)
{
    for (uint16_t k = 0; k < S; k++) {
        snprintf(buf[k], 32, "127.0.0.1:%u", (unsigned)ports[k]);
        addrs[k] = buf[k];
    }
}

static int spawn(role *r, void (*body)(void *ud, int fd), void *ud)
{
    int p[2];
    memset(r, 0, sizeof *r);
    if (pipe(p) != 0)
        return -1;
    pid_t parent = getpid();
    r->pid = fork();
    if (r->pid < 0)
        return -1;
    if (r->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        close(p[0]);
        signal(SIGPIPE, SIG_IGN);
        body(ud, p[1]);
        _exit(0);
    }
    mp_track(r->pid);
    close(p[1]);
    r->fd = p[0];
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Producer                                                                */
/* ---------------------------------------------------------------------- */

typedef struct prod {
    const uint16_t *ports;
    uint16_t S;
    uint64_t n, next, done;
    uint32_t inflight, slice;
    uint64_t seed;
    int fd;
    struct event_base *base;
    xfer_engine *e;
    uint32_t group, pool;
    uint8_t *staging;
    uint32_t *free_slots, nfree;
    bool stream;           /* role_producer_stream: each id a stream */
    uint64_t late_ms;      /* role_producer_stream_late: the first parts
                              wait this long after the open */
    struct sslot *sslots;  /* stream mode: one per slot */
} prod;

/* Stream mode: what one slot's stream needs in its part callbacks. */
typedef struct sslot {
    prod *p;
    uint64_t id;
    uint32_t slot;
    unsigned back; /* part callbacks so far */
} sslot;

#define SLAYERS 4 /* a stream's layers: one part each */
#define SBLOCKS 4 /* a layer's blocks per shard, gathered */

static void prod_submit(prod *p);

static void prod_done(void *ud, const xfer_result *r)
{
    prod *p = ud;
    dprintf(p->fd, "P %" PRIu64 " %d %u %u\n", r->id, (int)r->status,
            (unsigned)r->phase, (unsigned)r->consumer_may_hold);
    p->free_slots[p->nfree++] = (uint32_t)r->user_data;
    if (++p->done == p->n) {
        dprintf(p->fd, "END\n");
        event_base_loopbreak(p->base);
        return;
    }
    prod_submit(p);
}

/* Layer l of slot's stream on every shard as one part: per shard its
 * blocks, which lie in staging in reverse order (a gather). */
static int stream_layer(prod *p, sslot *ss, unsigned l);

static void stream_part_back(void *ud, uint64_t id, uint32_t part,
                             int status)
{
    sslot *ss = ud;
    prod *p = ss->p;
    if (part == 0 || ++ss->back != 1 || status != 0)
        return;
    /* the first part came back: the rest, out of order, then the seal */
    if (stream_layer(p, ss, 3) == 0 && stream_layer(p, ss, 1) == 0)
        (void)xfer_engine_stream_seal(p->e, id);
}

static int stream_layer(prod *p, sslot *ss, unsigned l)
{
    uint32_t layer = p->slice / SLAYERS, blk = layer / SBLOCKS;
    xfer_range rg[MAXS * SBLOCKS];
    uint32_t n = 0;
    for (uint16_t k = 0; k < p->S; k++) {
        uint64_t base = ((uint64_t)ss->slot * p->S + k) * p->slice;
        for (unsigned b = 0; b < SBLOCKS; b++) {
            uint32_t roff = l * layer + b * blk;
            uint64_t soff = base + l * layer + (SBLOCKS - 1 - b) * blk;
            for (uint32_t i = 0; i < blk; i++)
                p->staging[soff + i] = role_pattern(p->seed, ss->id, k,
                                                    roff + i);
            rg[n++] = (xfer_range){.staging_off = soff, .pool = p->pool,
                                   .len = blk, .resv_off = roff,
                                   .shard = k};
        }
    }
    xfer_part_desc d = {.id = ss->id, .ranges = rg, .nranges = n,
                        .cb = stream_part_back, .ud = ss};
    return xfer_engine_stream_part(p->e, &d, NULL);
}

/* The first two layers of a late stream, late_ms after its open. */
static void stream_late(evutil_socket_t fd, short what, void *arg)
{
    sslot *ss = arg;
    (void)stream_layer(ss->p, ss, 2); /* refusals: the completion says */
    (void)stream_layer(ss->p, ss, 0);
}

/* Open slot's stream for id, two layers now (before the reserves
 * answer), the other two when the first part is back. */
static int stream_open(prod *p, uint32_t slot, uint64_t id)
{
    sslot *ss = &p->sslots[slot];
    *ss = (sslot){.p = p, .id = id, .slot = slot};
    uint32_t lens[MAXS];
    for (uint16_t k = 0; k < p->S; k++)
        lens[k] = p->slice;
    xfer_stream_desc d = {.id = id, .group = p->group, .nshards = p->S,
                          .lens = lens,
                          .timeout_ns = 2000000000ull +
                                        p->late_ms * 1000000ull,
                          .user_data = slot};
    int rc = xfer_engine_stream_open(p->e, &d, prod_done, p);
    if (rc == 0 && p->late_ms) {
        struct timeval tv = {.tv_sec = (time_t)(p->late_ms / 1000),
                             .tv_usec = (suseconds_t)(p->late_ms % 1000 *
                                                      1000)};
        if (event_base_once(p->base, -1, EV_TIMEOUT, stream_late, ss,
                            &tv) != 0)
            _exit(2);
    } else if (rc == 0) {
        (void)stream_layer(p, ss, 2); /* refusals: the completion says */
        (void)stream_layer(p, ss, 0);
    }
    return rc;
}

static void prod_submit(prod *p)
{
    while (p->nfree && p->next < p->n && p->stream) {
        uint32_t slot = p->free_slots[--p->nfree];
        uint64_t id = ++p->next;
        if (stream_open(p, slot, id) != 0) {
            p->free_slots[p->nfree++] = slot;
            dprintf(p->fd, "P %" PRIu64 " %d 5 0\n", id, XFER_ERR_BUSY);
            p->done++;
        }
    }
    while (p->nfree && p->next < p->n) {
        uint32_t slot = p->free_slots[--p->nfree];
        uint64_t id = ++p->next;
        xfer_slice sl[MAXS];
        for (uint16_t k = 0; k < p->S; k++) {
            uint64_t off = ((uint64_t)slot * p->S + k) * p->slice;
            sl[k] = (xfer_slice){off, p->slice};
            for (uint32_t i = 0; i < p->slice; i++)
                p->staging[off + i] = role_pattern(p->seed, id, k, i);
        }
        xfer_transfer_desc d = {.id = id, .group = p->group, .pool = p->pool,
                                .nslices = p->S, .slices = sl,
                                .timeout_ns = 2000000000ull,
                                .user_data = slot};
        if (xfer_engine_submit(p->e, &d, prod_done, p) != 0) {
            p->free_slots[p->nfree++] = slot;
            dprintf(p->fd, "P %" PRIu64 " %d 5 0\n", id, XFER_ERR_BUSY);
            p->done++;
        }
    }
}

static void prod_body(void *ud, int fd)
{
    prod *p = ud;
    char ab[MAXS][32];
    const char *addrs[MAXS];
    addrs_of(p->ports, p->S, ab, addrs);
    p->fd = fd;
    p->slice = 4096;
    size_t len = (size_t)p->inflight * p->S * p->slice;
    p->staging = calloc(len, 1);
    p->free_slots = calloc(p->inflight, sizeof *p->free_slots);
    p->sslots = calloc(p->inflight, sizeof *p->sslots);
    for (uint32_t i = 0; i < p->inflight; i++)
        p->free_slots[p->nfree++] = i;
    p->base = event_base_new();
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = p->base;
    ec.core.max_transfers = 2 * p->inflight;
    ec.core.max_tombstones = (uint32_t)(2 * p->n + 4096);
    ec.core.tombstone_ttl_ns = 3000000000ull;
    /* What this producer assumes of its consumer (the check of
     * xfer_core_new); the roles end every transfer long before a lease. */
    ec.core.consumer_lease_ns = 2000000000ull;
    ec.core.net_margin_ns = 1000000000ull;
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = p->S;
    tc.addrs = addrs;
    tc.reconnect_max_ns = 100000000ull;
    xfer_tcp *tcp = NULL;
    if (xfer_engine_new(&ec, &p->e) || xfer_tcp_new(p->base, &tc, &tcp) ||
        xfer_engine_register_pool(p->e, p->staging, len, &p->pool) ||
        xfer_engine_add_group(p->e, xfer_tcp_transport(tcp), &p->group))
        _exit(2);
    for (int i = 0; i < 500; i++) { /* every shard connected: 5 s */
        uint16_t up = 0;
        for (uint16_t k = 0; k < p->S; k++)
            up += xfer_tcp_connected(tcp, k);
        if (up == p->S)
            break;
        event_base_loop(p->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        usleep(10000);
    }
    prod_submit(p);
    event_base_dispatch(p->base);
    _exit(0); /* the test checks the pools, not our teardown */
}

int role_producer(role *r, const uint16_t *ports, uint16_t S, uint64_t n,
                  uint32_t inflight, uint64_t seed)
{
    static prod p;
    p = (prod){.ports = ports, .S = S, .n = n, .inflight = inflight,
               .seed = seed};
    return spawn(r, prod_body, &p);
}

int role_producer_stream(role *r, const uint16_t *ports, uint16_t S,
                         uint64_t n, uint32_t inflight, uint64_t seed)
{
    static prod p;
    p = (prod){.ports = ports, .S = S, .n = n, .inflight = inflight,
               .seed = seed, .stream = true};
    return spawn(r, prod_body, &p);
}

int role_producer_stream_late(role *r, const uint16_t *ports, uint16_t S,
                              uint64_t n, uint32_t inflight, uint64_t seed,
                              uint64_t late_ms)
{
    static prod p;
    p = (prod){.ports = ports, .S = S, .n = n, .inflight = inflight,
               .seed = seed, .stream = true, .late_ms = late_ms};
    return spawn(r, prod_body, &p);
}

/* ---------------------------------------------------------------------- */
/* Consumer                                                                */
/* ---------------------------------------------------------------------- */

typedef struct cons {
    const uint16_t *ports;
    uint16_t S;
    const char *shm;
    uint64_t seed;
    int fd;
    xfer_consumer *c;
    xfer_shm *map[MAXS];
} cons;

static void c_available(void *ud, uint64_t id, uint32_t attempt,
                        const xfer_region *reg, uint16_t n)
{
    cons *c = ud;
    bool ok = n == c->S;
    for (uint16_t k = 0; k < n && ok; k++) {
        const uint8_t *pool = c->map[k] ? xfer_shm_pool(c->map[k]) : NULL;
        if (!pool || reg[k].offset + reg[k].len > xfer_shm_len(c->map[k])) {
            ok = false;
            break;
        }
        for (uint32_t i = 0; i < reg[k].len; i++)
            if (pool[reg[k].offset + i] != role_pattern(c->seed, id, k, i)) {
                ok = false;
                break;
            }
    }
    dprintf(c->fd, "C %" PRIu64 " A %d\n", id, ok ? 1 : 0);
    xfer_consumer_release(c->c, id);
}

static void c_unavailable(void *ud, uint64_t id, int32_t reason,
                          uint64_t shards)
{
    cons *c = ud;
    dprintf(c->fd, "C %" PRIu64 " U %d\n", id, (int)reason);
}

static void c_link(void *ud, uint16_t k, bool up)
{
    cons *c = ud;
    xfer_shm *m;
    if (up && xfer_shm_map(c->shm, k, NULL, &m) == 0) {
        xfer_shm_close(c->map[k]);
        c->map[k] = m;
    }
}

static void on_term(evutil_socket_t sig, short what, void *arg)
{
    event_base_loopbreak(arg);
}

static void cons_body(void *ud, int fd)
{
    cons *c = ud;
    char ab[MAXS][32];
    const char *addrs[MAXS];
    addrs_of(c->ports, c->S, ab, addrs);
    c->fd = fd;
    struct event_base *base = event_base_new();
    xfer_consumer_config cc;
    xfer_consumer_config_default(&cc);
    cc.base = base;
    cc.nshards = c->S;
    cc.addrs = addrs;
    cc.available = c_available;
    cc.unavailable = c_unavailable;
    cc.link = c_link;
    cc.ud = c;
    cc.reconnect_max_ns = 100000000ull;
    cc.ready_deadline_ns = 5000000000ull;
    if (!base || xfer_consumer_new(&cc, &c->c))
        _exit(2);
    struct event *term = evsignal_new(base, SIGTERM, on_term, base);
    evsignal_add(term, NULL);
    event_base_dispatch(base);
    _exit(0);
}

int role_consumer(role *r, const uint16_t *ports, uint16_t S,
                  const char *shm, uint64_t seed)
{
    static cons c;
    c = (cons){.ports = ports, .S = S, .shm = shm, .seed = seed};
    return spawn(r, cons_body, &c);
}

/* ---------------------------------------------------------------------- */
/* The test's side                                                         */
/* ---------------------------------------------------------------------- */

void role_poll(role *r, int ms)
{
    while (!r->eof) {
        struct pollfd p = {.fd = r->fd, .events = POLLIN};
        if (poll(&p, 1, ms) <= 0)
            return;
        if (r->n + 4097 > r->cap) {
            r->cap = r->cap ? 2 * r->cap : 65536;
            r->buf = realloc(r->buf, r->cap);
        }
        ssize_t got = read(r->fd, r->buf + r->n, 4096);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            r->eof = true;
            return;
        }
        r->n += (size_t)got;
        r->buf[r->n] = '\0';
        ms = 0;
    }
}

size_t role_count(const role *r, const char *prefix)
{
    size_t n = 0, len = strlen(prefix);
    for (const char *l = r->buf; l && *l;) {
        const char *nl = strchr(l, '\n');
        if (!nl)
            break;
        n += strncmp(l, prefix, len) == 0;
        l = nl + 1;
    }
    return n;
}

int role_kill(role *r, int sig)
{
    int status = 0;
    if (r->pid > 0) {
        kill(r->pid, sig);
        waitpid(r->pid, &status, 0);
        r->pid = 0;
    }
    role_poll(r, 200);
    return status;
}

static void parse_one(const role *r, role_out *out, uint64_t n)
{
    for (const char *l = r ? r->buf : NULL; l && *l;) {
        const char *nl = strchr(l, '\n');
        if (!nl)
            break; /* a line cut by a kill -9 */
        uint64_t id;
        int st;
        unsigned ph, hold;
        char k;
        if (sscanf(l, "P %" SCNu64 " %d %u %u", &id, &st, &ph, &hold) == 4 &&
            id >= 1 && id <= n) {
            out[id].pn++;
            out[id].pstatus = st;
            out[id].pphase = (uint8_t)ph;
            out[id].hold = (uint8_t)hold;
        } else if (sscanf(l, "C %" SCNu64 " %c %d", &id, &k, &st) == 3 &&
                   id >= 1 && id <= n) {
            out[id].cn++;
            out[id].cavail = k == 'A';
            out[id].cver = k == 'A' && st == 1;
            out[id].creason = k == 'A' ? 0 : st;
        }
        l = nl + 1;
    }
}

void role_parse(const role *p, const role *c, role_out *out, uint64_t n)
{
    memset(out, 0, (n + 1) * sizeof *out);
    parse_one(p, out, n);
    parse_one(c, out, n);
}

void role_free(role *r)
{
    if (r->fd > 0)
        close(r->fd);
    free(r->buf);
    memset(r, 0, sizeof *r);
}
