/*
 * tools/bench/bench_stream.c - xfer-bench-stream (`xfer-bench stream`):
 * what streaming a prefill's layers buys (issue 26).
 *
 * A simulated prefill produces L layers (default 32), each LAYER bytes
 * (256 KiB) per shard, one every T (1 ms), over TCP to S (4) xferd shard
 * processes; a consumer process (xfer_consumer, forked) reports the time
 * each id became available.  Measured in one run, rounds interleaved:
 *  (a) one-shot: one submit of every layer after the last was produced;
 *  (b) streamed: the stream opened before the first layer, one part per
 *      layer as it is produced, sealed after the last;
 *  (c) lone: a one-part transfer of one layer's size, submitted at once.
 * The tail latency of each is (available at the consumer) - (last layer
 * produced), both read from CLOCK_MONOTONIC on this machine; printed as
 * the median and the worst of the rounds, and the streamed median over
 * the lone one against the target (1.2x).
 *
 * Integrity (issue 27): each setting of --integrity (default off,shard)
 * gets a set of its own: S xferd started with that --integrity, a
 * consumer and a producer.  The sets' rounds alternate (round i runs the
 * sets in turn, the order reversed every other round), so a load that
 * comes and goes falls on both; each set's tails are printed with its
 * streamed / lone ratio (the lone transfer of the same setting), then
 * the ratios of every setting to the first's.
 *
 * Flags: --xferd PATH (default: next to this program, or the build
 * tree's), --rounds N (7), --layers L (32), --integrity LIST (off,shard),
 * --smoke (2 rounds of 4 small layers: every round must end available,
 * nothing else is checked).  Exit 0 when every round of every mode of
 * every set ended available.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "cli.h"
#include "xfer/consumer.h"
#include "xfer/stream.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

#define S 4
#define MAXR 64
#define MAXSETS 3

typedef struct opts {
    const char *xferd;
    unsigned rounds, layers;
    uint32_t layer;
    bool smoke;
    unsigned nsets;
    const char *integ[MAXSETS]; /* xferd --integrity of each set */
} opts;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static pid_t kids[MAXSETS * (S + 1)];
static int nkids;

static void kill_kids(void)
{
    for (int i = 0; i < nkids; i++) {
        kill(kids[i], SIGKILL);
        waitpid(kids[i], NULL, 0);
    }
    nkids = 0;
}

/* xferd for shard k on a free port (written to a port file), with
 * --integrity integ. */
static int start_shard(const opts *o, int k, const char *integ,
                       uint16_t *port)
{
    char pf[64], shard[8], pool[32];
    snprintf(pf, sizeof pf, "/tmp/xfer-bench-stream.%d.%d", (int)getpid(),
             nkids);
    snprintf(shard, sizeof shard, "%d", k);
    snprintf(pool, sizeof pool, "%uM",
             (unsigned)(((uint64_t)o->layers * o->layer * 3 >> 20) + 16));
    unlink(pf);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* one producer session may hold the whole pool (the default
         * quota is a share of it) */
        execl(o->xferd, o->xferd, "--port", "0", "--port-file", pf,
              "--shards", shard, "--pool", pool, "--session-max-bytes",
              pool, "--integrity", integ, "--quiet", (char *)NULL);
        _exit(127);
    }
    kids[nkids++] = pid;
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(pf, "r");
        unsigned p = 0;
        if (f && fscanf(f, "%u", &p) == 1 && p) {
            fclose(f);
            unlink(pf);
            *port = (uint16_t)p;
            return 0;
        }
        if (f)
            fclose(f);
        usleep(10000);
    }
    return -1;
}

/* ---------------------------------------------------------------------- */
/* The consumer process: "id t_ns" per available id, then release.        */
/* ---------------------------------------------------------------------- */

typedef struct cons {
    xfer_consumer *c;
    int fd;
} cons;

static void c_avail(void *ud, uint64_t id, uint32_t attempt,
                    const xfer_region *reg, uint16_t n)
{
    cons *c = ud;
    dprintf(c->fd, "%" PRIu64 " %" PRIu64 "\n", id, now_ns());
    xfer_consumer_release(c->c, id);
}

static void c_unavail(void *ud, uint64_t id, int32_t reason,
                      uint64_t shards)
{
    cons *c = ud;
    dprintf(c->fd, "%" PRIu64 " 0\n", id);
}

static void run_consumer(const char *const *addrs, int fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct event_base *base = event_base_new();
    cons c = {.fd = fd};
    xfer_consumer_config cc;
    xfer_consumer_config_default(&cc);
    cc.base = base;
    cc.nshards = S;
    cc.addrs = addrs;
    cc.available = c_avail;
    cc.unavailable = c_unavail;
    cc.ud = &c;
    if (xfer_consumer_new(&cc, &c.c) != 0)
        _exit(2);
    event_base_dispatch(base);
    _exit(0);
}

/* ---------------------------------------------------------------------- */
/* The producer                                                            */
/* ---------------------------------------------------------------------- */

enum { M_ONESHOT, M_STREAM, M_LONE, M_COUNT };
static const char *const mode_name[M_COUNT] = {
    "one-shot after the last layer", "streamed, a part per layer",
    "lone one-layer transfer"};

typedef struct run {
    const opts *o;
    struct event_base *base;
    xfer_engine *e;
    xfer_tcp *tcp;
    uint32_t group, pool;
    uint8_t *staging;
    struct event *tick, *pipe_ev;
    int cfd;
    char cbuf[256];
    size_t cn;
    /* the round */
    unsigned mode, layer;
    uint64_t id, t_last, t_avail;
    int status;
    bool completed, available;
    bool active; /* this set's round is the one running */
} run;

static uint64_t off_of(const run *r, unsigned l, unsigned k)
{
    return ((uint64_t)l * S + k) * r->o->layer;
}

static void on_done(void *ud, const xfer_result *res)
{
    run *r = ud;
    if (res->status != 0)
        fprintf(stderr, "xfer-bench-stream: id %" PRIu64 " failed in %s on "
                "shard %u: %s\n", res->id, xfer_phase_name(res->phase),
                res->first_failed_shard, xfer_strerror(res->status));
    if (r->status == 0)
        r->status = res->status;
    r->completed = true;
}

static void on_part(void *ud, uint64_t id, uint32_t part, int status)
{
    (void)ud;
    (void)id;
    (void)part;
    (void)status;
}

/* Layer l of this round is "computed" now. */
static void produce(run *r, unsigned l)
{
    for (unsigned k = 0; k < S; k++)
        memset(r->staging + off_of(r, l, k), (int)(r->id + l + k),
               r->o->layer);
}

static int submit_layers(run *r, unsigned first, unsigned n)
{
    xfer_slice sl[S];
    (void)first;
    /* the layers of a shard are not contiguous in this staging layout:
     * the one-shot submit sends its own copy, laid out per shard */
    for (unsigned k = 0; k < S; k++)
        sl[k] = (xfer_slice){.off = (uint64_t)r->o->layers * S * r->o->layer +
                                    (uint64_t)k * n * r->o->layer,
                             .len = n * r->o->layer};
    xfer_transfer_desc d = {.id = r->id, .group = r->group, .pool = r->pool,
                            .nslices = S, .slices = sl,
                            .timeout_ns = 10000000000ull};
    return xfer_engine_submit(r->e, &d, on_done, r);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    run *r = arg;
    const opts *o = r->o;
    unsigned l = r->layer++;
    produce(r, l);
    if (r->mode == M_STREAM) {
        xfer_range rg[S];
        for (unsigned k = 0; k < S; k++)
            rg[k] = (xfer_range){.staging_off = off_of(r, l, k),
                                 .pool = r->pool, .len = o->layer,
                                 .resv_off = l * o->layer,
                                 .shard = (uint16_t)k};
        xfer_part_desc d = {.id = r->id, .ranges = rg, .nranges = S,
                            .cb = on_part};
        int rc = xfer_engine_stream_part(r->e, &d, NULL);
        if (rc != 0 && r->status == 0)
            r->status = rc;
    }
    unsigned last = r->mode == M_LONE ? 0 : o->layers - 1;
    if (l < last) {
        struct timeval ms = {0, 1000};
        evtimer_add(r->tick, &ms);
        return;
    }
    r->t_last = now_ns();
    if (r->mode == M_STREAM) {
        int rc = xfer_engine_stream_seal(r->e, r->id);
        if (rc != 0 && r->status == 0)
            r->status = rc;
    } else if (r->mode == M_ONESHOT) {
        /* the layers gathered into each shard's slice (a copy the
         * producer would make anyway for a contiguous one-shot send) */
        for (unsigned k = 0; k < S; k++)
            for (unsigned i = 0; i < o->layers; i++)
                memcpy(r->staging + (uint64_t)o->layers * S * o->layer +
                           ((uint64_t)k * o->layers + i) * o->layer,
                       r->staging + off_of(r, i, k), o->layer);
        r->t_last = now_ns(); /* the copy is not the transfer's */
        if (submit_layers(r, 0, o->layers) != 0)
            r->status = -1;
    } else if (submit_layers(r, 0, 1) != 0) {
        r->status = -1;
    }
}

static void on_pipe(evutil_socket_t fd, short what, void *arg)
{
    run *r = arg;
    ssize_t n = read(fd, r->cbuf + r->cn, sizeof r->cbuf - 1 - r->cn);
    if (n <= 0)
        return;
    r->cn += (size_t)n;
    r->cbuf[r->cn] = 0;
    char *nl;
    while ((nl = strchr(r->cbuf, '\n')) != NULL) {
        uint64_t id = 0, t = 0;
        if (sscanf(r->cbuf, "%" SCNu64 " %" SCNu64, &id, &t) == 2 &&
            id == r->id) {
            r->t_avail = t;
            r->available = t != 0;
            if (!t)
                r->status = -2;
            r->completed = r->completed; /* the engine's says it */
        }
        size_t used = (size_t)(nl + 1 - r->cbuf);
        memmove(r->cbuf, nl + 1, r->cn - used + 1);
        r->cn -= used;
    }
    if (r->active && r->available && r->completed)
        event_base_loopbreak(r->base);
}

/* One round of one mode; the tail in ns, or 0 when it failed. */
static uint64_t round_of(run *r, unsigned mode, uint64_t id)
{
    r->mode = mode;
    r->id = id;
    r->layer = 0;
    r->status = 0;
    r->completed = r->available = false;
    r->t_avail = 0;
    r->active = true;
    if (mode == M_STREAM) {
        uint32_t lens[S];
        for (unsigned k = 0; k < S; k++)
            lens[k] = r->o->layers * r->o->layer;
        xfer_stream_desc d = {.id = id, .group = r->group, .nshards = S,
                              .lens = lens, .timeout_ns = 10000000000ull};
        if (xfer_engine_stream_open(r->e, &d, on_done, r) != 0)
            return 0;
    }
    struct timeval ms = {0, 1000};
    evtimer_add(r->tick, &ms);
    for (int i = 0; i < 200 && !(r->completed && (r->available ||
                                                   r->status)); i++) {
        struct timeval t = {0, 50000};
        event_base_loopexit(r->base, &t);
        event_base_dispatch(r->base);
    }
    r->active = false;
    if (r->status != 0 || !r->available || r->t_avail < r->t_last) {
        fprintf(stderr, "xfer-bench-stream: %s round (id %" PRIu64 ") did "
                "not end available: status %d (%s), completed %d\n",
                mode_name[mode], id, r->status,
                r->status < 0 ? xfer_strerror(r->status) : "", r->completed);
        return 0;
    }
    return r->t_avail - r->t_last;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

enum { F_XFERD = 1, F_ROUNDS, F_LAYERS, F_INTEG, F_SMOKE };

static const cli_flag flags[] = {
    {"xferd", 0, "PATH", "the xferd to run (default: next to this program, "
     "or the build tree's)", F_XFERD},
    {"rounds", 0, "N", "rounds of each mode, 1..64 (7)", F_ROUNDS},
    {"layers", 0, "L", "layers of the prefill, 1..64 (32)", F_LAYERS},
    {"integrity", 0, "LIST", "xferd --integrity settings to compare, comma "
     "separated, each on xferd of its own, rounds alternating: off, shard, "
     "consumer (off,shard)", F_INTEG},
    {"smoke", 0, NULL, "2 rounds of 4 small layers; exit 1 unless every "
     "round ends available", F_SMOKE},
    CLI_HELP, CLI_VERSION, {NULL, 0, NULL, NULL, 0}};

static const cli stream_cli = {
    .prog = "xfer-bench-stream",
    .summary = "the xfer streamed-transfer benchmark (run by xfer-bench "
               "stream)",
    .synopsis = "[flags]",
    .intro = "a simulated prefill (256 KiB per layer and shard, a layer per "
             "1 ms, 4 xferd shards over TCP): the tail latency of a "
             "one-shot submit after the last layer, of a stream with a "
             "part per layer, and of a lone one-layer transfer, measured "
             "at a consumer process\n",
    .flags = flags};

/* --integrity's list into o->integ (v is kept: argv's). */
static int parse_integ(opts *o, char *v)
{
    o->nsets = 0;
    for (char *save = NULL, *t = strtok_r(v, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        if (o->nsets == MAXSETS || (strcmp(t, "off") != 0 &&
                                    strcmp(t, "shard") != 0 &&
                                    strcmp(t, "consumer") != 0))
            return -1;
        o->integ[o->nsets++] = t;
    }
    return o->nsets ? 0 : -1;
}

static int parse(int argc, char **argv, opts *o, char *xferd, size_t cap)
{
    *o = (opts){.rounds = 7, .layers = 32, .layer = 256u << 10,
                .nsets = 2, .integ = {"off", "shard"}};
    const char *v;
    char *end;
    for (int k; (k = cli_next(&stream_cli, argc, argv, &v)) != CLI_END;) {
        switch (k) {
        case F_XFERD: o->xferd = v; break;
        case F_ROUNDS:
            o->rounds = (unsigned)strtoul(v, &end, 10);
            if (!*v || *end || o->rounds == 0 || o->rounds > MAXR)
                return cli_bad(&stream_cli, "round count (1..64)", v);
            break;
        case F_LAYERS:
            o->layers = (unsigned)strtoul(v, &end, 10);
            if (!*v || *end || o->layers == 0 || o->layers > 64)
                return cli_bad(&stream_cli, "layer count (1..64)", v);
            break;
        case F_INTEG:
            if (parse_integ(o, (char *)v) != 0)
                return cli_bad(&stream_cli, "integrity list (up to 3 of "
                               "off, shard, consumer)", v);
            break;
        case F_SMOKE: o->smoke = true; break;
        default: return 2; /* CLI_ERR: the line is printed */
        }
    }
    if (optind < argc)
        return cli_bad(&stream_cli, "argument", argv[optind]);
    if (o->smoke) {
        o->rounds = 2;
        o->layers = 4;
        o->layer = 16u << 10;
    }
    if (!o->xferd) {
        /* next to this program, then the build tree's tools/xferd */
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        self[n > 0 ? n : 0] = 0;
        char *slash = strrchr(self, '/');
        if (slash)
            *slash = 0;
        snprintf(xferd, cap, "%s/xferd", self);
        if (access(xferd, X_OK) != 0)
            snprintf(xferd, cap, "%s/../xferd/xferd", self);
        o->xferd = xferd;
    }
    return 0;
}

static void stream_shut(void *ud)
{
    *(bool *)ud = true;
}

/* One integrity setting's deployment: S xferd, a consumer process, the
 * producer (on the shared base). */
typedef struct set {
    const char *integ;
    char ab[S][32];
    const char *addrs[S];
    int pipe;
    run r;
    uint64_t tail[M_COUNT][MAXR];
    double med[M_COUNT];
} set;

static int set_start(const opts *o, set *st, struct event_base *base)
{
    for (int k = 0; k < S; k++) {
        uint16_t port;
        if (start_shard(o, k, st->integ, &port) != 0) {
            fprintf(stderr, "xfer-bench-stream: cannot start %s\n", o->xferd);
            return -1;
        }
        snprintf(st->ab[k], sizeof st->ab[k], "127.0.0.1:%u",
                 (unsigned)port);
        st->addrs[k] = st->ab[k];
    }
    int p[2];
    if (pipe(p) != 0)
        return -1;
    pid_t cpid = fork();
    if (cpid < 0)
        return -1;
    if (cpid == 0) {
        close(p[0]);
        run_consumer(st->addrs, p[1]);
    }
    kids[nkids++] = cpid;
    close(p[1]);
    st->pipe = p[0];

    run *r = &st->r;
    *r = (run){.o = o, .cfd = p[0], .base = base};
    size_t len = (size_t)o->layers * S * o->layer * 2;
    r->staging = calloc(len, 1);
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = base;
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = S;
    tc.addrs = st->addrs;
    if (!r->staging || xfer_engine_new(&ec, &r->e) ||
        xfer_tcp_new(base, &tc, &r->tcp) ||
        xfer_engine_register_pool(r->e, r->staging, len, &r->pool) ||
        xfer_engine_add_group(r->e, xfer_tcp_transport(r->tcp), &r->group)) {
        fprintf(stderr, "xfer-bench-stream: cannot make the producer\n");
        return -1;
    }
    r->tick = evtimer_new(base, on_tick, r);
    r->pipe_ev = event_new(base, p[0], EV_READ | EV_PERSIST, on_pipe, r);
    event_add(r->pipe_ev, NULL);
    for (int i = 0; i < 500; i++) {
        int up = 0;
        for (uint16_t k = 0; k < S; k++)
            up += xfer_tcp_connected(r->tcp, k);
        if (up == S)
            break;
        struct timeval t = {0, 10000};
        event_base_loopexit(base, &t);
        event_base_dispatch(base);
    }
    return 0;
}

/* Shut the producer down and free it, so a sanitizer build sees no
 * leak. */
static void set_stop(set *st)
{
    run *r = &st->r;
    if (r->tick)
        event_free(r->tick);
    if (r->pipe_ev)
        event_free(r->pipe_ev);
    bool shut = false;
    if (r->e && xfer_engine_shutdown(r->e, stream_shut, &shut) == 0)
        for (int i = 0; i < 500 && !shut; i++) {
            struct timeval t = {0, 10000};
            event_base_loopexit(r->base, &t);
            event_base_dispatch(r->base);
        }
    if (r->e)
        xfer_engine_del(r->e);
    if (r->tcp)
        xfer_tcp_del(r->tcp);
    event_base_loop(r->base, EVLOOP_NONBLOCK);
    free(r->staging);
    close(st->pipe);
}

int main(int argc, char **argv)
{
    opts o;
    char xferd[4200];
    int rc = parse(argc, argv, &o, xferd, sizeof xferd);
    if (rc)
        return rc;
    signal(SIGPIPE, SIG_IGN);
    atexit(kill_kids);
    struct event_base *base = event_base_new();
    static set sets[MAXSETS];
    for (unsigned j = 0; j < o.nsets; j++) {
        sets[j].integ = o.integ[j];
        if (!base || set_start(&o, &sets[j], base) != 0)
            return 1;
    }
    usleep(300000); /* the consumers subscribed */

    unsigned bad = 0;
    uint64_t id = 1;
    for (unsigned i = 0; i < o.rounds; i++)
        for (unsigned n = 0; n < o.nsets; n++) {
            /* the sets in turn, the order reversed every other round */
            set *st = &sets[i % 2 ? o.nsets - 1 - n : n];
            for (unsigned m = 0; m < M_COUNT; m++) {
                st->tail[m][i] = round_of(&st->r, m, id++);
                bad += st->tail[m][i] == 0;
            }
        }
    printf("xfer-bench stream: %u layers of %u KiB per shard, one per 1 ms, "
           "%d shards over TCP (xferd), %u rounds; tail = available at the "
           "consumer process - last layer produced\n",
           o.layers, o.layer >> 10, S, o.rounds);
    for (unsigned j = 0; j < o.nsets; j++) {
        set *st = &sets[j];
        printf(" integrity %s (xferd of its own):\n", st->integ);
        for (unsigned m = 0; m < M_COUNT; m++) {
            qsort(st->tail[m], o.rounds, sizeof st->tail[m][0], cmp_u64);
            st->med[m] = (double)st->tail[m][o.rounds / 2] / 1e6;
            printf("  %-32s median %8.3f ms   worst %8.3f ms\n",
                   mode_name[m], st->med[m],
                   (double)st->tail[m][o.rounds - 1] / 1e6);
        }
        if (st->med[M_LONE] > 0)
            printf("  streamed / lone: %.2fx (target <= 1.2x); one-shot / "
                   "lone: %.2fx\n", st->med[M_STREAM] / st->med[M_LONE],
                   st->med[M_ONESHOT] / st->med[M_LONE]);
    }
    for (unsigned j = 1; j < o.nsets; j++)
        for (unsigned m = 0; m < M_COUNT; m++)
            if (sets[0].med[m] > 0)
                printf(" %s / %s, %s: %.2fx\n", sets[j].integ, sets[0].integ,
                       mode_name[m], sets[j].med[m] / sets[0].med[m]);
    if (bad)
        printf("  %u rounds did not end available\n", bad);
    /* every round ended */
    for (unsigned j = 0; j < o.nsets; j++)
        set_stop(&sets[j]);
    event_base_free(base);
    kill_kids();
    return bad ? 1 : 0;
}
