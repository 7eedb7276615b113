/*
 * tools/bench.c - xfer-bench: figures for docs/design.md section 8,
 * printed next to a reference measured in the same process.  Asserts
 * nothing about time.
 *
 *   xfer-bench core|engine|memory|all    (no default: a name is needed)
 *   xfer-bench tcp [args]                 runs xfer-bench-tcp (TCP figures)
 *   xfer-bench scale [args]               runs xfer-bench-scale (cost as the
 *                                         cluster grows; docs/perf.md)
 *   xfer-bench rdma [args]                runs xfer-bench-rdma (RDMA figures
 *                                         next to ib_write_bw; says so and
 *                                         exits 77 without a device)
 *
 * core:   shard events per second through the pure transfer core with 1 k,
 *         64 k and 1 M transfers in flight (O(1) per event shows as a flat
 *         rate).  Reference: the same event stream through a bare id-map
 *         lookup and counter update, i.e. the floor any table-driven design
 *         pays.
 * engine: transfers per second through the engine and the loop transport
 *         (4 shards, 64 in flight, 4 KiB per shard).  Reference: the pure
 *         core answering the same ops in-line, so the figure shows what the
 *         loop, the transport and the shards add.
 * memory: bytes per transfer in flight and per tombstone.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "cli.h"
#include "idmap.h"
#include "ring.h" /* fsm/: the one ring buffer (fsm_private_dep) */
#include "xfer/core.h"
#include "xfer/loop.h"
#include "xfer/xfer.h"

#define NS 4

static double now_s(void)
{
    return (double)xfer_clock_monotonic(NULL) / 1e9;
}

/* CPU seconds this process used: on a shared machine the wall-clock rate
 * moves with everyone else's load, the CPU per transfer much less. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------------- */
/* Pure core                                                               */
/* ---------------------------------------------------------------------- */

/* The ops the core asked for, answered in FIFO order. */
typedef struct op_q {
    xfer_action *a; /* the ring's array */
    xfer_ring r;
} op_q;

static void q_push(op_q *q, const xfer_action *a)
{
    if (xfer_ring_full(&q->r)) {
        static const xfer_allocator libc = {0};
        uint32_t cap = q->r.cap ? q->r.cap * 2 : 4096;
        xfer_action *na = xfer_ring_grow(&q->r, q->a, sizeof *na, cap, &libc);
        if (!na) {
            fprintf(stderr, "xfer-bench: out of memory\n");
            exit(1);
        }
        q->a = na;
    }
    q->a[xfer_ring_push(&q->r)] = *a;
}

static xfer_action q_pop(op_q *q)
{
    return q->a[xfer_ring_pop(&q->r)];
}

/* Take the core's ops into the queue; count completions. */
static uint64_t harvest(xfer_core *c, op_q *q)
{
    size_t n;
    uint64_t done = 0;
    const xfer_action *acts = xfer_core_actions(c, &n);
    for (size_t i = 0; i < n; i++) {
        if (acts[i].kind <= XFER_ACT_CANCEL)
            q_push(q, &acts[i]);
        done += acts[i].kind == XFER_ACT_COMPLETE;
    }
    xfer_core_actions_clear(c);
    return done;
}

static const xfer_slice slices[NS] = {{0, 4096}, {4096, 4096},
                                      {8192, 4096}, {12288, 4096}};

static void core_submit(xfer_core *c, uint64_t id)
{
    xfer_submit_args a = {.id = id, .nshards = NS, .slices = slices,
                          .deadline_ns = UINT64_MAX / 2};
    if (xfer_core_submit(c, 1, &a) != 0) {
        fprintf(stderr, "xfer-bench: submit failed\n");
        exit(1);
    }
}

/* Keep `inflight` transfers going; return shard events per second (and,
 * when cpu_per is not NULL, CPU seconds per event). */
static double bench_core_cpu(uint32_t inflight, uint64_t events_target,
                             double *cpu_per)
{
    xfer_core_config cfg;
    xfer_core_config_default(&cfg);
    cfg.max_transfers = inflight;
    cfg.max_tombstones = inflight * 2;
    cfg.tombstone_ttl_ns = 2; /* gone at once: no consumer behind it */
    cfg.consumer_lease_ns = 1;
    cfg.net_margin_ns = 1;
    xfer_core *c;
    if (xfer_core_new(&cfg, &c) != 0)
        return 0;
    op_q q = {0};
    uint64_t next_id = 1, events = 0;
    for (uint32_t i = 0; i < inflight; i++) {
        core_submit(c, next_id++);
        harvest(c, &q);
    }
    double t0 = now_s(), c0 = cpu_s();
    uint64_t t = 2;
    while (events < events_target) {
        xfer_action a = q_pop(&q);
        xfer_shard_result r = {.id = a.id, .attempt = a.attempt,
                               .shard = a.shard, .op = a.kind,
                               .resv_id = 1 + a.shard};
        xfer_core_on_result(c, t++, &r);
        events++;
        uint64_t done = harvest(c, &q);
        for (uint64_t k = 0; k < done; k++) {
            core_submit(c, next_id++);
            harvest(c, &q);
        }
    }
    double dt = now_s() - t0;
    if (cpu_per)
        *cpu_per = (cpu_s() - c0) / (double)events;
    xfer_core_del(c);
    free(q.a);
    return (double)events / dt;
}

static double bench_core(uint32_t inflight, uint64_t events_target)
{
    return bench_core_cpu(inflight, events_target, NULL);
}

/* The reference floor: the same number of events, each one id-map lookup
 * and a counter update on a record. */
static double bench_floor(uint32_t inflight, uint64_t events_target)
{
    xfer_allocator al = {0};
    xfer_idmap m;
    xfer_idmap_init(&m, inflight, &al);
    uint32_t *counter = calloc(inflight, sizeof *counter);
    for (uint32_t i = 0; i < inflight; i++)
        xfer_idmap_put(&m, i + 1, i);
    double t0 = now_s();
    uint64_t x = 88172645463325252ull;
    for (uint64_t e = 0; e < events_target; e++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint32_t slot;
        if (xfer_idmap_get(&m, 1 + x % inflight, &slot))
            counter[slot]++;
    }
    double dt = now_s() - t0;
    volatile uint32_t sink = counter[0];
    (void)sink;
    xfer_idmap_clear(&m, &al);
    free(counter);
    return (double)events_target / dt;
}

static void run_core(void)
{
    printf("pure core: shard events/s on one core (target >= 10 M/s, flat "
           "from 1 k to 1 M in flight)\n");
    uint32_t sizes[] = {1000, 65536, 1000000};
    for (size_t i = 0; i < 3; i++) {
        uint64_t n = 8000000;
        double rate = bench_core(sizes[i], n);
        double floor = bench_floor(sizes[i], n);
        printf("  %8u in flight: %7.2f M events/s   reference (id-map "
               "lookup + counter): %7.2f M/s\n",
               sizes[i], rate / 1e6, floor / 1e6);
    }
}

/* ---------------------------------------------------------------------- */
/* Engine + loop transport                                                 */
/* ---------------------------------------------------------------------- */

typedef struct eng_run {
    xfer_engine *e;
    uint32_t group, pool;
    uint64_t next_id, done, target;
    uint8_t *staging;
} eng_run;

static void eng_submit(eng_run *r);

static void eng_done(void *ud, const xfer_result *res)
{
    eng_run *r = ud;
    if (res->status != 0) {
        fprintf(stderr, "xfer-bench: transfer failed: %s\n",
                xfer_strerror(res->status));
        exit(1);
    }
    r->done++;
    if (r->next_id <= r->target)
        eng_submit(r);
    else if (r->done == r->target)
        event_base_loopbreak(xfer_engine_base(r->e));
}

static void eng_submit(eng_run *r)
{
    xfer_transfer_desc d = {.id = r->next_id++, .group = r->group,
                            .pool = r->pool, .nslices = NS,
                            .slices = slices};
    if (xfer_engine_submit(r->e, &d, eng_done, r) != 0) {
        fprintf(stderr, "xfer-bench: engine submit failed\n");
        exit(1);
    }
}

static xfer_loop *bench_loop;

/* The consumer releases what became ready, so pools never fill. */
static void eng_event(void *ud, const xfer_shard_event *ev)
{
    xfer_loop *l = bench_loop;
    if (ev->kind != XFER_SHARD_EV_READY)
        return;
    xfer_shard *s = xfer_loop_shard(l, ev->shard);
    const uint8_t *data;
    uint32_t len;
    if (xfer_shard_take(s, 0, ev->id, ev->resv_id, &data, &len) == 0)
        xfer_shard_release(s, 0, ev->id, ev->resv_id);
}

static double bench_engine(uint32_t inflight, uint64_t target,
                           double *cpu_per)
{
    /* Tombstones live 100 ms: 64 k of them cover 640 k transfers/s. */
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.core.max_transfers = inflight * 2;
    ec.core.max_tombstones = 1u << 16;
    ec.core.tombstone_ttl_ns = 100000000;
    ec.core.consumer_lease_ns = 50000000; /* the loop's leases below */
    ec.core.net_margin_ns = 50000000;
    eng_run r = {.target = target, .next_id = 1};
    xfer_engine_new(&ec, &r.e);
    xfer_loop *l;
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = NS;
    lc.on_event = eng_event;
    lc.shard.pool_bytes = 64u << 20;
    lc.shard.max_reservations = 8192;
    lc.shard.max_tombstones = 1u << 16;
    lc.shard.lease_ttl_ns = 50000000; /* the consumer releases at once */
    lc.shard.tombstone_ttl_ns = 100000000;
    if (xfer_loop_new(xfer_engine_base(r.e), &lc, &l) != 0)
        return 0;
    bench_loop = l;
    r.staging = calloc(1, 16384);
    xfer_engine_register_pool(r.e, r.staging, 16384, &r.pool);
    xfer_engine_add_group(r.e, xfer_loop_transport(l), &r.group);
    double t0 = now_s(), c0 = cpu_s();
    for (uint32_t i = 0; i < inflight && r.next_id <= target; i++)
        eng_submit(&r);
    event_base_dispatch(xfer_engine_base(r.e));
    double dt = now_s() - t0;
    *cpu_per = (cpu_s() - c0) / (double)(r.done ? r.done : 1);
    xfer_engine_del(r.e);
    xfer_loop_del(l);
    free(r.staging);
    return (double)r.done / dt;
}

static void run_engine(void)
{
    printf("engine + loop transport, %d shards, 64 in flight, 4 KiB per "
           "shard (target >= 300 k transfers/s)\n", NS);
    double cpu_eng = 0, cpu_core = 0;
    double rate = bench_engine(64, 200000, &cpu_eng);
    /* Reference: the pure core alone; one transfer = 4 shards x 3 ops. */
    double core = bench_core_cpu(64, 2400000, &cpu_core) / (3.0 * NS);
    cpu_core *= 3.0 * NS;
    printf("  engine+loop: %8.0f transfers/s   reference (pure core, ops "
           "answered in-line): %8.0f transfers/s\n", rate, core);
    printf("  CPU per transfer: engine+loop %.2f us, reference %.2f us "
           "(%.2fx); 300 k/s needs <= 3.33 us\n", cpu_eng * 1e6,
           cpu_core * 1e6, cpu_eng / cpu_core);
}

static void run_memory(void)
{
    printf("memory (target <= 256 B per transfer + 48 B per shard; a "
           "tombstone <= 48 B)\n");
    for (unsigned n = 1; n <= 8; n *= 2)
        printf("  core, %u shards: %zu B per transfer in flight "
               "(= %zu + %zu per shard)\n",
               n, xfer_core_transfer_bytes(n), xfer_core_transfer_bytes(0),
               (xfer_core_transfer_bytes(n) - xfer_core_transfer_bytes(0)) /
                   n);
    printf("  tombstone: %zu B\n", xfer_core_tombstone_bytes());
}

/* The benchmarks that live in their own programs: tcp (xfer-bench-tcp),
 * rdma (xfer-bench-rdma) and check (xfer-check --bench), found next to
 * this program when installed, in the build tree's folders otherwise
 * (cli_find_program).  `rest` are the arguments after the name. */
static int run_tool(const char *what, char **rest)
{
    const bool tcp = !strcmp(what, "tcp"), rdma = !strcmp(what, "rdma");
    const bool stream = !strcmp(what, "stream");
    const bool scale = !strcmp(what, "scale");
    const char *tool = tcp ? "xfer-bench-tcp"
                       : rdma ? "xfer-bench-rdma"
                       : stream ? "xfer-bench-stream"
                       : scale ? "xfer-bench-scale" : "xfer-check";
    const char *sub = tcp || rdma || stream || scale ? "bench/" : "check/";
    char path[4096];
    if (cli_find_program(tool, sub, path, sizeof path) != 0) {
        fprintf(stderr, "xfer-bench: cannot find %s (looked next to "
                "xfer-bench, in its build tree and in %s)\n", tool,
                path);
        return 1;
    }
    char *av[64];
    size_t n = 0;
    av[n++] = path;
    if (!tcp && !rdma && !stream && !scale)
        av[n++] = "--bench";
    for (; *rest && n < 63; rest++)
        av[n++] = *rest;
    av[n] = NULL;
    execv(path, av);
    fprintf(stderr, "xfer-bench: cannot run %s: %s\n", path,
            strerror(errno));
    return 1;
}

static const cli_flag flags[] = {CLI_HELP, CLI_VERSION,
                                 {NULL, 0, NULL, NULL, 0}};

static const cli bench_cli = {
    .prog = "xfer-bench",
    .summary = "xfer benchmarks, each beside a reference measured in the same run",
    .synopsis = "BENCHMARK [args]",
    .intro = "benchmarks, each next to a reference measured in the same "
             "run:\n"
             "  core      shard events/s through the pure core (1k, 64k, 1M "
             "in flight)\n"
             "  engine    transfers/s through the engine and the loop "
             "transport\n"
             "  memory    bytes per transfer in flight and per tombstone\n"
             "  all       core, engine and memory\n"
             "  tcp ...   xfer-bench-tcp (TCP figures; its own --help)\n"
             "  rdma ...  xfer-bench-rdma (RDMA figures; its own --help)\n"
             "  stream .. xfer-bench-stream (a streamed prefill's tail "
             "latency)\n"
             "  scale ... xfer-bench-scale (cost vs shards, producers, in "
             "flight, live ids,\n            groups in etcd; --plots DIR)\n"
             "  check ... xfer-check --bench (the model checker's rates)\n",
    .flags = flags,
    .stop_at_operand = 1};

int main(int argc, char **argv)
{
    const char *arg;
    for (int k; (k = cli_next(&bench_cli, argc, argv, &arg)) != CLI_END;)
        if (k == CLI_ERR)
            return 2;
    if (optind >= argc) { /* no default that runs everything */
        fprintf(stderr, "usage: xfer-bench core|engine|memory|all|tcp|rdma|"
                "stream|check|scale [args] (try xfer-bench --help)\n");
        return 2;
    }
    const char *what = argv[optind];
    if (!strcmp(what, "tcp") || !strcmp(what, "rdma") ||
        !strcmp(what, "stream") || !strcmp(what, "check") ||
        !strcmp(what, "scale"))
        return run_tool(what, argv + optind + 1);
    int all = !strcmp(what, "all");
    if (!all && strcmp(what, "core") && strcmp(what, "engine") &&
        strcmp(what, "memory"))
        return cli_bad(&bench_cli, "benchmark", what);
    if (optind + 1 < argc)
        return cli_bad(&bench_cli, "argument", argv[optind + 1]);
    if (all || !strcmp(what, "memory"))
        run_memory();
    if (all || !strcmp(what, "core"))
        run_core();
    if (all || !strcmp(what, "engine"))
        run_engine();
    return 0;
}
