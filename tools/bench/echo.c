/*
 * tools/bench/echo.c - the fan-out echo that measures the machine's floor.
 * See echo.h.
 *
 * Echo frame: u32 slot, u32 round, u64 unit sequence number, zeros up to
 * BENCH_ECHO_FRAME bytes.  The peers never parse it; the client checks that
 * every echo belongs to the round its slot waits for.  Over the wire
 * protocol the same three numbers travel in the request id (tag(), below)
 * and each reply must be the ack of the op its round sent.
 *
 * What must stay true:
 *  - a slot has at most one frame outstanding per peer, so a connection
 *    never holds more than inflight frames each way (at most
 *    XFER_WIRE_MAX_FIXED bytes each) and the fixed buffers below always
 *    have room;
 *  - the client never blocks on a write: a short write keeps the rest for
 *    the next turn (EPOLLOUT armed meanwhile);
 *  - the echo processes hold nothing of the bench but their own socket.
 */
#include "echo.h"

#include <event2/util.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "le.h" /* fsm/: the one little-endian codec (fsm_private_dep) */
#include "wire.h"
#include "xfer/xfer.h"

#define BUF_CAP (BENCH_ECHO_MAX_INFLIGHT * XFER_WIRE_MAX_FIXED * 2)
#define WIRE_ID_BASE (1ull << 40)
#define LAT_CAP (1u << 21)
#define SILENCE_MS 2000

typedef struct peer {
    int fd;
    uint32_t out_n, in_n;
    bool want_out; /* EPOLLOUT armed */
    uint8_t out[BUF_CAP], in[BUF_CAP];
} peer;

typedef struct slot {
    uint32_t round, pending;
    uint64_t seq, t0;
    uint64_t resv[BENCH_ECHO_MAX_PEERS]; /* wire: each shard's RESERVE_OK */
} slot;

struct bench_echo {
    uint16_t n;
    bool wire;     /* peers are shard servers, not echo processes */
    bool forked;   /* the peers are ours to kill */
    int ep;
    pid_t pid[BENCH_ECHO_MAX_PEERS];
    peer p[BENCH_ECHO_MAX_PEERS];
    slot s[BENCH_ECHO_MAX_INFLIGHT];
    uint64_t *lat;
    size_t nlat;
    uint64_t seq; /* of the last unit started, across runs: a wire id is
                     never used twice (the shards tombstone it) */
};

/* ---------------------------------------------------------------------- */
/* The echo process                                                        */
/* ---------------------------------------------------------------------- */

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Accept one connection on the listening socket *arg and echo it until
 * it closes. */
static int echo_main(void *arg)
{
    int lis = *(int *)arg, one = 1;
    for (int fd = 3; fd < 1024; fd++)
        if (fd != lis)
            close(fd); /* what the bench had open: not ours */
    int fd = accept(lis, NULL, NULL);
    close(lis);
    if (fd < 0)
        return 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    static uint8_t buf[1 << 16];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || write_all(fd, buf, (size_t)r) != 0)
            return 0;
    }
}

/* ---------------------------------------------------------------------- */
/* Setup                                                                   */
/* ---------------------------------------------------------------------- */

static int listen_any(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(fd, 1) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

static int connect_to(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* Fork echo process k and connect to it. */
static int add_peer(bench_echo *e, uint16_t k)
{
    uint16_t port;
    int lis = listen_any(&port);
    if (lis < 0)
        return -1;
    e->pid[k] = bench_proc_fork(echo_main, &lis);
    int fd = e->pid[k] > 0 ? connect_to(port) : -1;
    close(lis);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = k};
    if (fd < 0 || epoll_ctl(e->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    e->p[k].fd = fd;
    e->n = (uint16_t)(k + 1);
    return 0;
}

static bench_echo *echo_new(uint16_t npeers)
{
    bench_echo *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->ep = -1;
    e->lat = malloc(LAT_CAP * sizeof *e->lat);
    e->ep = epoll_create1(EPOLL_CLOEXEC);
    if (!e->lat || e->ep < 0 || npeers == 0 ||
        npeers > BENCH_ECHO_MAX_PEERS) {
        bench_echo_stop(e);
        return NULL;
    }
    return e;
}

int bench_echo_start(uint16_t npeers, bench_echo **out, char *err,
                     size_t cap)
{
    bench_echo *e = echo_new(npeers);
    if (!e) {
        snprintf(err, cap, "echo: bad peer count or out of memory");
        return -1;
    }
    e->forked = true;
    int rc = 0;
    for (uint16_t k = 0; k < npeers && rc == 0; k++)
        rc = add_peer(e, k);
    if (rc) {
        snprintf(err, cap, "echo: cannot start echo process %u: %s",
                 (unsigned)e->n, strerror(errno));
        bench_echo_stop(e);
        return -1;
    }
    *out = e;
    return 0;
}

/* Blocking HELLO for shard k on fd; 0 when HELLO_ACK names it. */
static int say_hello(int fd, uint16_t k)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    xfer_wire_msg m = {.type = XFER_WIRE_T_HELLO,
                       .version = XFER_WIRE_VERSION,
                       .role = XFER_WIRE_ROLE_PRODUCER, .shard = k};
    size_t n = xfer_wire_encode(&m, 0, buf, sizeof buf);
    size_t want = XFER_WIRE_HDR + xfer_wire_body_size(XFER_WIRE_T_HELLO_ACK);
    size_t got = 0;
    if (n == 0 || write_all(fd, buf, n) != 0)
        return -1;
    while (got < want) {
        ssize_t r = read(fd, buf + got, want - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    xfer_wire_hdr h;
    xfer_wire_reason why;
    return xfer_wire_decode(buf, got, &h, &m, &why) == 0 &&
                   m.type == XFER_WIRE_T_HELLO_ACK && m.shard == k
               ? 0
               : -1;
}

static int connect_wire(bench_echo *e, uint16_t k, const char *addr)
{
    struct sockaddr_storage ss;
    int sl = sizeof ss, one = 1;
    if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss, &sl) != 0)
        return -1;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = k};
    if (connect(fd, (struct sockaddr *)&ss, (socklen_t)sl) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0 ||
        say_hello(fd, k) != 0 ||
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0 ||
        epoll_ctl(e->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        return -1;
    }
    e->p[k].fd = fd;
    e->n = (uint16_t)(k + 1);
    return 0;
}

int bench_echo_connect_wire(uint16_t npeers, const char *const *addrs,
                            const pid_t *pids, bench_echo **out, char *err,
                            size_t cap)
{
    bench_echo *e = echo_new(npeers);
    if (!e) {
        snprintf(err, cap, "wire client: bad peer count or out of memory");
        return -1;
    }
    e->wire = true;
    for (uint16_t k = 0; k < npeers; k++) {
        e->pid[k] = pids[k];
        if (connect_wire(e, k, addrs[k]) != 0) {
            snprintf(err, cap, "wire client: cannot connect to shard %u at "
                     "%s", (unsigned)k, addrs[k]);
            bench_echo_stop(e);
            return -1;
        }
    }
    *out = e;
    return 0;
}

const pid_t *bench_echo_pids(const bench_echo *e, int *n)
{
    *n = e->n;
    return e->pid;
}

void bench_echo_stop(bench_echo *e)
{
    if (!e)
        return;
    for (uint16_t k = 0; k < e->n; k++) {
        close(e->p[k].fd);
        if (e->forked)
            bench_proc_kill(e->pid[k]);
    }
    if (e->ep >= 0)
        close(e->ep);
    free(e->lat);
    free(e);
}

/* ---------------------------------------------------------------------- */
/* The client                                                              */
/* ---------------------------------------------------------------------- */

typedef struct run_state {
    bench_echo *e;
    const bench_echo_params *p;
    bench_echo_counts *c;
    uint64_t stop_at;
    uint32_t active;
    bool bad;
} run_state;

/* The request id of slot k's round: 22 bits of its unit's sequence
 * number, 8 of the slot, 2 of the round. */
static uint32_t tag(uint64_t seq, uint32_t k, uint32_t round)
{
    return (uint32_t)(seq & 0x3FFFFFu) << 10 | k << 2 | round;
}

/* Slot k's op of this round for shard i, encoded at out. */
static uint32_t wire_op(const slot *s, uint32_t k, uint16_t i, uint8_t *out)
{
    static const uint8_t type[3] = {XFER_WIRE_T_RESERVE, XFER_WIRE_T_WRITE,
                                    XFER_WIRE_T_COMMIT};
    xfer_wire_msg m = {.type = type[s->round], .id = WIRE_ID_BASE + s->seq,
                       .attempt = 1, .resv_id = s->resv[i]};
    return (uint32_t)xfer_wire_encode(&m, tag(s->seq, k, s->round), out,
                                      XFER_WIRE_MAX_FIXED);
}

static void queue_round(run_state *r, uint32_t k)
{
    bench_echo *e = r->e;
    const slot *s = &e->s[k];
    uint8_t f[BENCH_ECHO_FRAME] = {0};
    xfer_le_put32(f, k);
    xfer_le_put32(f + 4, s->round);
    xfer_le_put64(f + 8, s->seq);
    for (uint16_t i = 0; i < e->n; i++) {
        peer *pp = &e->p[i];
        if (e->wire) {
            pp->out_n += wire_op(s, k, i, pp->out + pp->out_n);
        } else {
            memcpy(pp->out + pp->out_n, f, sizeof f);
            pp->out_n += BENCH_ECHO_FRAME;
        }
    }
    e->s[k].pending = e->n;
    r->c->frames_sent += e->n;
}

/* Start a unit on slot k, or retire the slot when the run is over. */
static void start_unit(run_state *r, uint32_t k, uint64_t now)
{
    if (now >= r->stop_at ||
        (r->p->max_units && r->c->started >= r->p->max_units)) {
        r->active--;
        return;
    }
    r->e->s[k] = (slot){.seq = ++r->e->seq, .t0 = now};
    r->c->started++;
    queue_round(r, k);
}

/* A reply for slot k's round: the next round, or the unit is done. */
static void on_reply(run_state *r, uint32_t k)
{
    bench_echo *e = r->e;
    if (--e->s[k].pending)
        return;
    if (++e->s[k].round < r->p->rounds) {
        queue_round(r, k);
        return;
    }
    uint64_t now = xfer_clock_monotonic(NULL);
    r->c->done++;
    if (e->nlat < LAT_CAP)
        e->lat[e->nlat++] = now - e->s[k].t0;
    start_unit(r, k, now);
}

/* Does the reply of peer i name (slot k, round, seq) of a round that
 * waits for it? */
static bool expected(const run_state *r, uint32_t k, uint32_t round,
                     uint64_t seq)
{
    const slot *s = &r->e->s[k];
    return k < r->p->inflight && s->seq == seq && s->round == round &&
           s->pending;
}

static void on_echo(run_state *r, const uint8_t *f)
{
    uint32_t k = xfer_le_get32(f), round = xfer_le_get32(f + 4);
    uint64_t seq = xfer_le_get64(f + 8);
    r->c->frames_received++;
    if (!expected(r, k, round, seq)) {
        r->bad = true;
        return;
    }
    on_reply(r, k);
}

/* One whole wire frame of n bytes from shard i. */
static void on_wire(run_state *r, uint16_t i, const uint8_t *f, uint32_t n)
{
    static const uint8_t ack[3] = {XFER_WIRE_T_RESERVE_OK,
                                   XFER_WIRE_T_WRITE_ACK,
                                   XFER_WIRE_T_COMMIT_ACK};
    xfer_wire_hdr h;
    xfer_wire_msg m;
    xfer_wire_reason why;
    r->c->frames_received++;
    if (xfer_wire_decode(f, n, &h, &m, &why) != 0) {
        r->bad = true;
        return;
    }
    uint32_t k = h.req >> 2 & 0xFFu;
    uint32_t round = h.req & 3u;
    slot *s = &r->e->s[k < BENCH_ECHO_MAX_INFLIGHT ? k : 0];
    if (round > 2 || !expected(r, k, round, s->seq) ||
        tag(s->seq, k, round) != h.req || m.type != ack[round] ||
        m.id != WIRE_ID_BASE + s->seq) {
        r->bad = true;
        return;
    }
    if (round == 0)
        s->resv[i] = m.resv_id;
    on_reply(r, k);
}

#define BAD_FRAME UINT32_MAX

/* Length of the whole frame at the start of buf (n bytes): 0 when more is
 * needed, BAD_FRAME for a wire header we refuse.  Echo frames are fixed; a
 * wire frame says its length. */
static uint32_t frame_len(const run_state *r, const uint8_t *buf, uint32_t n)
{
    if (!r->e->wire)
        return n >= BENCH_ECHO_FRAME ? BENCH_ECHO_FRAME : 0;
    xfer_wire_hdr h;
    xfer_wire_reason why;
    int rc = xfer_wire_decode_hdr(buf, n, &h, &why);
    if (rc == XFER_WIRE_NEED_MORE)
        return 0;
    if (rc != 0 || h.len > XFER_WIRE_MAX_FIXED)
        return BAD_FRAME;
    return h.len <= n ? h.len : 0;
}

/* One read on peer i; handle every whole frame it completed. */
static int drain_peer(run_state *r, peer *pp)
{
    ssize_t n = read(pp->fd, pp->in + pp->in_n, sizeof pp->in - pp->in_n);
    r->c->reads++;
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0)
        return -1;
    pp->in_n += (uint32_t)n;
    uint32_t off = 0, len;
    uint16_t i = (uint16_t)(pp - r->e->p);
    while ((len = frame_len(r, pp->in + off, pp->in_n - off)) != 0) {
        if (len == BAD_FRAME) {
            r->bad = true;
            off = pp->in_n;
            break;
        }
        if (r->e->wire)
            on_wire(r, i, pp->in + off, len);
        else
            on_echo(r, pp->in + off);
        off += len;
    }
    memmove(pp->in, pp->in + off, pp->in_n - off);
    pp->in_n -= off;
    return 0;
}

/* One write with everything queued for peer i; arm EPOLLOUT for a rest. */
static int flush_peer(run_state *r, uint16_t i)
{
    peer *pp = &r->e->p[i];
    if (!pp->out_n)
        return 0;
    ssize_t w = write(pp->fd, pp->out, pp->out_n);
    r->c->writes++;
    if (w < 0 && errno != EAGAIN && errno != EINTR)
        return -1;
    if (w > 0) {
        memmove(pp->out, pp->out + w, pp->out_n - (uint32_t)w);
        pp->out_n -= (uint32_t)w;
    }
    bool want = pp->out_n != 0;
    if (want != pp->want_out) {
        struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0),
                                 .data.u32 = i};
        epoll_ctl(r->e->ep, EPOLL_CTL_MOD, pp->fd, &ev);
        pp->want_out = want;
    }
    return 0;
}

static int flush_all(run_state *r)
{
    for (uint16_t i = 0; i < r->e->n; i++)
        if (flush_peer(r, i) != 0)
            return -1;
    return 0;
}

static int turn(run_state *r, char *err, size_t cap)
{
    struct epoll_event ev[BENCH_ECHO_MAX_PEERS];
    int n = epoll_wait(r->e->ep, ev, BENCH_ECHO_MAX_PEERS, SILENCE_MS);
    r->c->turns++;
    if (n < 0 && errno == EINTR)
        return 0;
    if (n <= 0) {
        snprintf(err, cap, "echo: no echo for %d ms", SILENCE_MS);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        peer *pp = &r->e->p[ev[i].data.u32];
        if ((ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) &&
            drain_peer(r, pp) != 0) {
            snprintf(err, cap, "echo: echo process %u went away",
                     ev[i].data.u32);
            return -1;
        }
    }
    if (r->bad) {
        snprintf(err, cap, "echo: a reply matches no outstanding round%s",
                 r->e->wire ? ", or the shard refused an op" : "");
        return -1;
    }
    if (flush_all(r) != 0) {
        snprintf(err, cap, "echo: write failed: %s", strerror(errno));
        return -1;
    }
    return 0;
}

int bench_echo_run(bench_echo *e, const bench_echo_params *p, bench_fig *f,
                   bench_echo_counts *c, char *err, size_t cap)
{
    if (p->rounds == 0 || p->inflight == 0 ||
        p->inflight > BENCH_ECHO_MAX_INFLIGHT ||
        (e->wire && p->rounds != 3)) {
        snprintf(err, cap, "echo: bad rounds or in-flight count");
        return -1;
    }
    int npids;
    const pid_t *pids = bench_echo_pids(e, &npids);
    *c = (bench_echo_counts){0};
    run_state r = {.e = e, .p = p, .c = c, .active = p->inflight};
    e->nlat = 0;
    bench_sample a, b;
    bench_proc_sample(0, pids, npids, &a);
    r.stop_at = a.wall_ns + p->ns;
    for (uint32_t k = 0; k < p->inflight; k++)
        start_unit(&r, k, a.wall_ns);
    int rc = flush_all(&r);
    while (rc == 0 && r.active)
        rc = turn(&r, err, cap);
    bench_proc_sample(0, pids, npids, &b);
    bench_fig_make(f, &a, &b, c->done, 0, 0, e->lat, e->nlat);
    if (c->done)
        f->calls = (double)(c->turns + c->reads + c->writes) /
                   (double)c->done;
    return rc;
}
