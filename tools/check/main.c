/*
 * tools/check/main.c - xfer-check: the model checker of xfer's machines.
 * The command line (the flag table below, printed by --help):
 *
 *   xfer-check [--mode bfs|random|swarm] [--shards S] [--transfers T]
 *              [--faults LIST|all|none] [--budget N] [--seed N] [--runs N]
 *              [--depth N] [--max-faults N] [--cancels N] [--lates N]
 *              [--ccancels N] [--expiries N] [--cancel-attempts N]
 *              [--max-delay-ms N] [--liveness leaves|all] [--max-mem-mb N]
 *              [--no-symmetry] [--no-transfer-symmetry] [--paranoid]
 *              [--out PREFIX] [--replay FILE] [--threads N] [--bench]
 *              [--gone N] [--stale-ops N] [--refresh N] [--help]
 *
 * --budget N: disturbances per path in all.  Its default depends on S: 3,
 * or less where a space that large cannot finish (default_budget() below;
 * docs/check.md has the state counts).
 *
 * --max-mem-mb N (default 8192, 0: none) stops a BFS whose queued states
 * and visited set pass N MB; it then says the run was not exhaustive.
 * --paranoid checks, for every BFS transition, that the incremental save
 * and hashing match a full save and hashing from scratch.
 *
 * --threads N (default 1): the threads of a BFS.  The states,
 * transitions, depth, verdict and counterexample are the same for every N
 * (search.c); 1 by default because CI runs two checkers at a time on two
 * cores, and a run that wants more says so.
 *
 * --bench: the benchmark of the exhaustive mode (printed, not asserted):
 * BFS for S = 1, 2, 3 (bench_budget below), each next to a reference
 * measured in the same process, random walks over the same world (the
 * machines and monitors stepping with no saving, hashing or visited set);
 * each BFS three times: the plain BFS on one thread (what --threads 1
 * runs), the parallel BFS's shared set on one thread, and on N threads
 * (--threads N, 2 when not given), with states/s, states per CPU second
 * and the peak memory of each; then N plain BFSes side by side, one a
 * thread and nothing shared, for the rate a core gives while N cores
 * work (the parallel BFS can do no better per core).
 *
 * Exit status: 0 every invariant held (or --help), 1 a violation (printed
 * step by step, with a trace file and a choices file), 2 bad arguments
 * (one line on stderr saying what was wrong), 3 every invariant held but
 * a feature the arguments ask for was never reached (reach.h: a line
 * "UNREACHED --eager: no eager op was ever taken" for each).  XFER_SEED
 * overrides --seed.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "path.h"
#include "report.h"
#include "search.h"
#include "world.h"
#include "xfer/xfer.h"

static const char *const fault_names[] = {
#define N_(n, s, d) s,
    CK_FAULTS(N_)
#undef N_
};

typedef struct opts {
    ck_config cfg;
    int mode; /* 0 bfs, 1 random, 2 swarm */
    uint64_t seed, runs, delay_ms, mem_mb;
    unsigned threads;
    const char *out, *replay;
    bool bench;
} opts;

static int bad(const char *what, const char *arg)
{
    fprintf(stderr, "xfer-check: %s%s%s (xfer-check --help)\n", what,
            arg ? ": " : "", arg ? arg : "");
    return 2;
}


static int num(const char *s, unsigned long long lo, unsigned long long hi,
               unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || v < lo || v > hi || s[0] == '-')
        return -1;
    *out = v;
    return 0;
}

static int parse_faults(const char *s, uint32_t *out)
{
    if (!strcmp(s, "all")) {
        *out = CK_F_ALL;
        return 0;
    }
    *out = 0;
    if (!strcmp(s, "none"))
        return 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        unsigned b = 0;
        while (b < CK_FB_COUNT_ && strcmp(t, fault_names[b]))
            b++;
        if (b == CK_FB_COUNT_)
            return -1;
        *out |= 1u << b;
    }
    return 0;
}

/* Numeric options: name, bounds, where the value goes. */
typedef struct numopt {
    const char *name;
    unsigned long long lo, hi;
    size_t off;    /* into opts */
    uint8_t width; /* 4: unsigned, 8: uint64_t */
} numopt;

#define CFG_(f) offsetof(opts, cfg) + offsetof(ck_config, f)
static const numopt numopts[] = {
    {"--shards", 1, CK_MAX_S, CFG_(S), 4},
    {"--transfers", 1, CK_MAX_T, CFG_(T), 4},
    {"--depth", 1, 60000, CFG_(depth), 4},
    {"--max-faults", 0, 50, CFG_(max_faults), 4},
    {"--cancels", 0, 50, CFG_(max_cancels), 4},
    {"--lates", 0, 50, CFG_(max_lates), 4},
    {"--ccancels", 0, 50, CFG_(max_ccancels), 4},
    {"--expiries", 0, 50, CFG_(max_expiries), 4},
    {"--budget", 0, 200, CFG_(budget), 4},
    {"--cancel-attempts", 1, 20, CFG_(cancel_max_attempts), 4},
    {"--caps", 0, CK_MAX_T, CFG_(caps), 4},
    {"--dups", 0, 50, CFG_(max_dups), 4},
    {"--writes", 1, CK_MAX_WRITES, CFG_(writes), 4},
    /* above 50 s the core's 60 s tombstone no longer outlives a lease plus
     * the delay, and xfer_core_new refuses the config */
    {"--max-delay-ms", 1, 50000, offsetof(opts, delay_ms), 8},
    {"--max-mem-mb", 0, 1u << 30, offsetof(opts, mem_mb), 8},
    {"--seed", 0, UINT64_MAX, offsetof(opts, seed), 8},
    {"--runs", 1, UINT64_MAX, offsetof(opts, runs), 8},
    {"--threads", 1, 64, offsetof(opts, threads), 4},
    {"--corrupt", 0, 50, CFG_(max_corrupt), 4},
    {"--parts", 0, CK_MAX_PARTS, CFG_(parts), 4},
    {"--gone", 0, 50, CFG_(gone), 4},
    {"--stale-ops", 0, 50, CFG_(stale_ops), 4},
    {"--refresh", 0, 50, CFG_(refresh), 4},
};

static int set_num(opts *o, const numopt *n, const char *v)
{
    unsigned long long x;
    if (!v || num(v, n->lo, n->hi, &x)) {
        char what[96];
        snprintf(what, sizeof what, "%s needs a number in %llu..%llu",
                 n->name, n->lo, n->hi);
        return bad(what, v);
    }
    if (n->width == 4) {
        unsigned u = (unsigned)x;
        memcpy((char *)o + n->off, &u, 4);
    } else {
        uint64_t u = x;
        memcpy((char *)o + n->off, &u, 8);
    }
    return 0;
}

static int set_word(opts *o, const char *k, const char *v)
{
    if (!v)
        return bad("missing value after", k);
    if (!strcmp(k, "--mode")) {
        o->mode = !strcmp(v, "bfs") ? 0 : !strcmp(v, "random") ? 1
                  : !strcmp(v, "swarm") ? 2 : -1;
        return o->mode < 0 ? bad("--mode is bfs, random or swarm", v) : 0;
    }
    if (!strcmp(k, "--faults"))
        return parse_faults(v, &o->cfg.faults)
                   ? bad("--faults takes all, none or a comma list of "
                         "fail,lost,abort,lease,deadline,cancel,late,"
                         "shutdown,consumer,drop,crash", v)
                   : 0;
    if (!strcmp(k, "--liveness")) {
        if (strcmp(v, "leaves") && strcmp(v, "all"))
            return bad("--liveness is leaves or all", v);
        o->cfg.liveness_all = !strcmp(v, "all");
        return 0;
    }
    if (!strcmp(k, "--out")) {
        o->out = v;
        return 0;
    }
    o->replay = v;
    return 0;
}

/* Default disturbance budget for S shards (T = 1, every fault class on).
 * Budget 3 finishes for S = 1 and 2 (S = 2: 10.6 M states, about 50 s in
 * a release build on one core).  At S = 3 one unit of budget multiplies the
 * space by more than a hundred: budget 2 is 62.6 M states (about 7.5 min,
 * 4.6 GB), budget 3 would be billions, so S = 3 defaults to 2.  From S = 4
 * one unit is the default; random and swarm walks cover larger budgets. */
static unsigned default_budget(unsigned S)
{
    return S <= 2 ? 3 : S == 3 ? 2 : 1;
}

static void defaults(opts *o)
{
    memset(o, 0, sizeof *o);
    o->cfg = (ck_config){.S = 2, .T = 1, .faults = CK_F_ALL,
                         .max_faults = 2, .max_cancels = 1, .max_lates = 1,
                         .max_ccancels = 1, .max_expiries = 2, .budget = ~0u,
                         .cancel_max_attempts = 2, .depth = 400,
                         .max_delay = 15ull * 1000000000ull,
                         .symmetry = true, .transfer_symmetry = true};
    o->seed = 1;
    o->delay_ms = 15000;
    o->mem_mb = 8192;
    o->threads = 1;
    o->runs = 10000;
    o->out = "xfer-check-cex";
}

/* Every flag, its value and its help (with the defaults defaults()
 * sets): getopt_long's options and --help are both built from this table
 * (tools/cli.h).  A numeric flag's key is NUM_KEY + its row in numopts. */
#define NUM_KEY 1000
enum { F_MODE = 256, F_FAULTS, F_LIVENESS, F_OUT, F_REPLAY, F_NOSYM,
       F_NOTSYM, F_PARANOID, F_DEFAULTS, F_RDMA, F_EAGER, F_E2E, F_COPIES,
       F_STRICT_E2E, F_BENCH };
#define FAULT_LINE_(n, s, desc) "      " s ": " desc "\n"
static const cli_flag flags[] = {
    {"mode", 0, "bfs|random|swarm", "exhaustive BFS (bfs), seeded random "
     "walks, or swarm walks (each with a random set of faults)", F_MODE},
    {"shards", 0, "S", "consumer shards, 1..6 (2)", NUM_KEY + 0},
    {"transfers", 0, "T", "transfers, 1..4 (1)", NUM_KEY + 1},
    {"faults", 0, "LIST|all|none", "fault classes (all), or a comma list "
     "(below)", F_FAULTS},
    {"budget", 0, "N", "disturbances per path in all (3 for S <= 2, 2 for "
     "S = 3, 1 beyond)", NUM_KEY + 8},
    {"max-faults", 0, "N", "injected faults (fail/lost/drop) per path (2)",
     NUM_KEY + 3},
    {"cancels", 0, "N", "producer cancels per path (1)", NUM_KEY + 4},
    {"lates", 0, "N", "late submits per path (1)", NUM_KEY + 5},
    {"ccancels", 0, "N", "consumer cancels per path (1)", NUM_KEY + 6},
    {"expiries", 0, "N", "timer fires that jump time, per path (2)",
     NUM_KEY + 7},
    {"cancel-attempts", 0, "N", "cancel attempts per shard (2)",
     NUM_KEY + 9},
    {"max-delay-ms", 0, "N", "every message delivered within N ms, at most "
     "50000 (15000)", NUM_KEY + 13},
    {"caps", 0, "N", "every record and tombstone cap of the machines (0: "
     "the number of transfers, so no cap binds)", NUM_KEY + 10},
    {"writes", 0, "N", "each WRITE lands as N writes at different offsets, "
     "1..4 (1)", NUM_KEY + 12},
    {"dups", 0, "N", "per path, N duplicated messages (a retransmit) or "
     "replies of another attempt (0)", NUM_KEY + 11},
    {"defaults", 0, NULL, "the machines run the library defaults (every "
     "timing and the cancel bound left 0); the monitors hold them to the "
     "documented values", F_DEFAULTS},
    {"rdma", 0, NULL, "one-sided shards: a WRITE lands without the shard "
     "while its rkey is live (monitors RLAND, RREADY, RINVAL)", F_RDMA},
    {"copies", 0, NULL, "device shard pools: a WRITE's bytes land in a "
     "bounce buffer and a copy into the region completes late, in any "
     "order, or fails with --faults fail (monitors CREADY, CFREE)",
     F_COPIES},
    {"eager", 0, NULL, "the eager path: every submit sends one EAGER op "
     "(reserve + data + commit) per shard", F_EAGER},
    {"e2e", 0, NULL, "the E2E monitor: a producer success is available or "
     "flagged on the consumer", F_E2E},
    {"strict-e2e", 0, NULL, "the same as --e2e (finding F3, which --e2e "
     "exempted, is fixed)", F_STRICT_E2E},
    {"depth", 0, "N", "BFS depth bound / walk length (400)", NUM_KEY + 2},
    {"liveness", 0, "leaves|all", "the liveness phase at leaves (default) "
     "or from every state", F_LIVENESS},
    {"no-symmetry", 0, NULL, "no symmetry reduction over shards", F_NOSYM},
    {"no-transfer-symmetry", 0, NULL, "no symmetry reduction over "
     "transfers", F_NOTSYM},
    {"max-mem-mb", 0, "N", "stop a BFS that outgrows N MB, and say so "
     "(8192; 0: no bound)", NUM_KEY + 14},
    {"paranoid", 0, NULL, "check every incremental save against a full one",
     F_PARANOID},
    {"seed", 0, "N", "random and swarm walks' seed (1; XFER_SEED overrides "
     "it)", NUM_KEY + 15},
    {"runs", 0, "N", "random and swarm walks (10000)", NUM_KEY + 16},
    {"out", 0, "PREFIX", "counterexample files PREFIX.trace, PREFIX.choices "
     "(xfer-check-cex)", F_OUT},
    {"replay", 0, "FILE", "run a choices file again", F_REPLAY},
    {"threads", 0, "N", "BFS threads; the same result for every N (1)",
     NUM_KEY + 17},
    {"bench", 0, NULL, "benchmark BFS for S = 1, 2, 3 with a reference",
     F_BENCH},
    {"corrupt", 0, "N", "per path, N writes land corrupt; the shards check "
     "before commit (integrity on; monitor INTEG) (0)", NUM_KEY + 18},
    {"parts", 0, "N", "every transfer is a stream of N (2..3) parts added "
     "at any point, then sealed (monitor PARTS) (0: off)", NUM_KEY + 19},
    {"gone", 0, "N", "per path, N directory \"shard gone\" events: the "
     "producer fails its ops at that shard SHARD_GONE at once, until it "
     "registers again (monitor GONE) (0: off)", NUM_KEY + 20},
    {"stale-ops", 0, "N", "per path, N ops of another attempt reach a "
     "one-sided record waiting for its invalidation; the shard must refuse "
     "them STALE (I14; needs --rdma) (0)", NUM_KEY + 21},
    {"refresh", 0, "N", "per path, N lease refreshes of the open stream's "
     "reservations reach their shards in whatever state they are; the "
     "answer must be the documented one (monitor RFRESH; needs --parts) (0)",
     NUM_KEY + 22},
    CLI_HELP,
    CLI_VERSION,
    {NULL, 0, NULL, NULL, 0}};

static const cli check_cli = {
    .prog = "xfer-check",
    .summary = "the model checker of the xfer transfer core",
    .synopsis = "[flags]",
    .intro = "Explores every interleaving of the transfer core, S consumer "
             "shards and the\nreadiness tracker (or random walks through "
             "them) and checks I1-I14 after\nevery step and liveness at "
             "the end of every path.\n",
    .epilog = "fault classes (--faults):\n" CK_FAULTS(FAULT_LINE_)
              "exit: 0 every invariant held, 1 a violation (printed step by "
              "step,\nwith a trace file and a choices file), 2 bad "
              "arguments, 3 every invariant held\nbut a feature the "
              "arguments ask for was never reached (a line UNREACHED\nfor "
              "each).\n",
    .flags = flags};

/* The numopts row of a numeric flag's key, found by the flag's name. */
static const numopt *numopt_of(int key)
{
    const cli_flag *f = flags;
    while (f->name && f->key != key)
        f++;
    for (size_t j = 0; f->name && j < sizeof numopts / sizeof numopts[0];
         j++)
        if (!strcmp(numopts[j].name + 2, f->name))
            return &numopts[j];
    abort(); /* a table row without its numopts row: a bug here */
}

static int parse(opts *o, int argc, char **argv)
{
    const char *v;
    int k, rc = 0;
    cli_reset(); /* a replay parses its choices file's arguments too */
    while (rc == 0 && (k = cli_next(&check_cli, argc, argv, &v)) != CLI_END) {
        switch (k) {
        case CLI_ERR: return 2;
        case F_NOSYM: o->cfg.symmetry = false; break;
        case F_NOTSYM: o->cfg.transfer_symmetry = false; break;
        case F_PARANOID: o->cfg.paranoid = true; break;
        case F_DEFAULTS: o->cfg.defaults = true; break;
        case F_RDMA: o->cfg.rdma = true; break;
        case F_EAGER: o->cfg.eager = true; break;
        case F_COPIES: o->cfg.copies = true; break;
        case F_E2E: o->cfg.e2e = true; break;
        case F_STRICT_E2E:
            o->cfg.e2e = true; /* the F3 exemption it lifted is gone */
            break;
        case F_BENCH: o->bench = true; break;
        case F_MODE: rc = set_word(o, "--mode", v); break;
        case F_FAULTS: rc = set_word(o, "--faults", v); break;
        case F_LIVENESS: rc = set_word(o, "--liveness", v); break;
        case F_OUT: rc = set_word(o, "--out", v); break;
        case F_REPLAY: rc = set_word(o, "--replay", v); break;
        default: rc = set_num(o, numopt_of(k), v);
        }
    }
    if (rc)
        return rc;
    if (optind < argc)
        return bad("unexpected argument", argv[optind]);
    if (o->cfg.rdma && o->cfg.eager)
        return bad("--rdma shards are one-sided, which never allow the "
                   "eager path; --eager is not modelled with it", NULL);
    if (o->cfg.rdma && o->cfg.writes > 1)
        return bad("--rdma posts each WRITE as one write; --writes above 1 "
                   "is not modelled with it", NULL);
    if (o->cfg.max_corrupt && (o->cfg.rdma || o->cfg.writes > 1))
        return bad("--corrupt models two-sided shards with one write per "
                   "WRITE (the RDMA fabric tests cover one-sided ones); "
                   "not with --rdma or --writes above 1", NULL);
    if (o->cfg.copies && (o->cfg.rdma || o->cfg.eager || o->cfg.writes > 1))
        return bad("--copies models device shards over TCP, one write per "
                   "WRITE and no eager path (a device shard offers none); "
                   "--rdma, --eager and --writes above 1 are not modelled "
                   "with it", NULL);
    if (o->cfg.parts == 1)
        return bad("--parts needs 2 or 3 (0: off)", NULL);
    if (o->cfg.parts && (o->cfg.rdma || o->cfg.eager || o->cfg.writes > 1 ||
                         o->cfg.max_corrupt || o->cfg.copies ||
                         o->cfg.T > 1))
        return bad("--parts models one stream (--transfers 1) over two-sided "
                   "shards, one write per WRITE; not with --rdma, --eager, "
                   "--writes above 1, --corrupt or --copies", NULL);
    if (o->cfg.gone && (o->cfg.rdma || o->cfg.copies || o->cfg.writes > 1 ||
                        o->cfg.max_corrupt || o->cfg.parts))
        return bad("--gone models two-sided host shards over TCP, one write "
                   "per WRITE; not with --rdma, --copies, --writes above 1, "
                   "--corrupt or --parts", NULL);
    if (o->cfg.refresh && !o->cfg.parts)
        return bad("--refresh needs --parts: the engine refreshes the leases "
                   "of open streams only", NULL);
    if (o->cfg.stale_ops && !o->cfg.rdma)
        return bad("--stale-ops needs --rdma: only a one-sided shard's "
                   "record waits for an invalidation", NULL);
    o->cfg.max_delay = o->delay_ms * 1000000ull;
    o->cfg.max_mem = o->mem_mb << 20;
    if (o->cfg.budget == ~0u)
        o->cfg.budget = default_budget(o->cfg.S);
    return 0;
}

static void fault_list(uint32_t f, char *b, size_t n)
{
    size_t at = 0;
    b[0] = 0;
    if (f == CK_F_ALL) {
        snprintf(b, n, "all");
        return;
    }
    for (unsigned i = 0; i < CK_FB_COUNT_; i++)
        if (f & (1u << i))
            at += (size_t)snprintf(b + at, at < n ? n - at : 0, "%s%s",
                                   at ? "," : "", fault_names[i]);
    if (!at)
        snprintf(b, n, "none");
}

/* The arguments that rebuild cfg (for the choices file). */
static void cfg_args(const ck_config *c, char *b, size_t n)
{
    char f[160];
    fault_list(c->faults, f, sizeof f);
    snprintf(b, n, "--shards %u --transfers %u --faults %s --max-faults %u "
             "--budget %u --cancels %u --lates %u --ccancels %u --expiries %u "
             "--cancel-attempts %u --depth %u --max-delay-ms %llu --caps %u "
             "--dups %u --writes %u --corrupt %u --parts %u --gone %u "
             "--stale-ops %u --refresh %u"
             "%s%s%s%s%s%s%s%s",
             c->S,
             c->T, f, c->max_faults, c->budget, c->max_cancels, c->max_lates,
             c->max_ccancels, c->max_expiries, c->cancel_max_attempts,
             c->depth, (unsigned long long)(c->max_delay / 1000000u),
             c->caps, c->max_dups, c->writes ? c->writes : 1u,
             c->max_corrupt, c->parts, c->gone, c->stale_ops, c->refresh,
             c->liveness_all ? " --liveness all" : "",
             c->symmetry ? "" : " --no-symmetry",
             c->transfer_symmetry ? "" : " --no-transfer-symmetry",
             c->defaults ? " --defaults" : "", c->rdma ? " --rdma" : "",
             c->eager ? " --eager" : "", c->e2e ? " --e2e" : "",
             c->copies ? " --copies" : "");
}

static void banner(const opts *o)
{
    static const char *const modes[] = {"exhaustive BFS", "random walks",
                                        "swarm walks"};
    char a[640];
    cfg_args(&o->cfg, a, sizeof a);
    printf("xfer-check: %s, %s\n", modes[o->mode], a);
    printf("bounds: per path at most %u disturbances in all (faults, "
           "cancels, late submits, shutdown, crash, time jumps), of which "
           "at most %u injected faults (fail/lost/drop), %u producer cancel, "
           "%u late submit, %u consumer cancel, %u timer fires that jump "
           "time (deadline, lease, tombstone); cancel retried up to %u "
           "attempts; messages delivered within %llu ms; depth %u; symmetry "
           "over shards %s, over transfers %s\n", o->cfg.budget, o->cfg.max_faults,
           o->cfg.max_cancels, o->cfg.max_lates, o->cfg.max_ccancels,
           o->cfg.max_expiries, o->cfg.cancel_max_attempts,
           (unsigned long long)(o->cfg.max_delay / 1000000u), o->cfg.depth,
           o->cfg.symmetry && o->cfg.S > 1 ? "on" : "off",
           o->cfg.transfer_symmetry && o->cfg.T > 1 ? "on" : "off");
}

static int violation(const opts *o, ck_outcome *r, const ck_config *cfg)
{
    char a[640];
    cfg_args(cfg, a, sizeof a);
    ck_report_cex(cfg, r, o->out, a);
    return 1;
}

static int run_bfs(const opts *o)
{
    ck_outcome r;
    memset(&r, 0, sizeof r);
    int inv = ck_search_bfs(&o->cfg, o->threads, &r);
    double s = r.secs > 0 ? r.secs : 1e-9;
    printf("states %" PRIu64 " distinct, transitions %" PRIu64 ", depth %u, "
           "leaves %" PRIu64 "%s\n", r.states, r.transitions, r.depth,
           r.leaves, r.bounded ? " (depth bound reached: not exhaustive)" : "");
    if (r.out_of_memory)
        printf("STOPPED at the memory bound (--max-mem-mb %llu) in depth "
               "%u: NOT exhaustive\n",
               (unsigned long long)(o->cfg.max_mem >> 20), r.depth);
    double cs = r.cpu_secs > 0 ? r.cpu_secs : 1e-9;
    printf("time %.2f s: %.0f states/s, %.0f transitions/s (%u thread%s; "
           "CPU %.2f s, %.0f states per CPU second), %.0f MB\n", r.secs,
           r.states / s, r.transitions / s, o->threads,
           o->threads == 1 ? "" : "s", r.cpu_secs, r.states / cs,
           r.mem_bytes / 1048576.0);
    if (inv < 0) {
        printf("all invariants held (I1-I14%s after every step, liveness at "
               "every leaf%s)%s\n",
               o->cfg.rdma ? ", RLAND, RREADY, RINVAL"
               : o->cfg.copies ? ", CREADY, CFREE"
               : o->cfg.gone ? ", GONE"
               : o->cfg.refresh ? ", PARTS, RFRESH" : "",
               o->cfg.liveness_all ? " and state" : "",
               r.out_of_memory ? " in the part explored" : "");
        return ck_reach_report(&o->cfg, r.reach) ? 0 : 3;
    }
    int rc = violation(o, &r, &o->cfg);
    ck_path_free(&r.path);
    return rc;
}

static int run_random(const opts *o)
{
    ck_outcome r;
    memset(&r, 0, sizeof r);
    printf("seed %" PRIu64 " (XFER_SEED overrides), %" PRIu64 " runs\n",
           o->seed, o->runs);
    int inv = ck_search_random(&o->cfg, o->seed, o->runs, o->mode == 2, &r);
    double s = r.secs > 0 ? r.secs : 1e-9;
    printf("runs %" PRIu64 ", steps %" PRIu64 ", time %.2f s: %.0f runs/s, "
           "%.0f steps/s\n", r.runs, r.steps, r.secs, r.runs / s,
           r.steps / s);
    if (inv < 0) {
        printf("all invariants held (I1-I14, I10 by replaying every walk, "
               "liveness at the end of every walk)\n");
        return ck_reach_report(&o->cfg, r.reach) ? 0 : 3;
    }
    ck_config c = o->cfg;
    c.faults = r.faults;
    char f[160];
    fault_list(r.faults, f, sizeof f);
    printf("failing run: seed %" PRIu64 ", faults %s, %zu steps; "
           "shrinking\n", r.seed, f, r.path.n);
    ck_search_shrink(&c, &r);
    int rc = violation(o, &r, &c);
    ck_path_free(&r.path);
    return rc;
}

/* The spaces the benchmark explores: S = 1 at budget 6 (3.9 M states), the
 * defaults for S = 2 and 3. */
static const unsigned bench_budget[] = {0, 6, 3, 2};

/* --bench: states/s of exhaustive runs for S = 1, 2, 3 next to
 * the rate of the machines alone (random walks over the same world; each
 * walk is run twice, the second time for I10, and both runs count). */
/* A row of the benchmark: `all` states (over every search of the row;
 * `states` each) in secs, with cpu seconds of CPU and mem bytes at peak. */
static void bench_row(const ck_config *c, unsigned threads, const char *set,
                      uint64_t states, uint64_t all, double secs, double cpu,
                      uint64_t mem, double ref)
{
    double bs = secs > 0 ? secs : 1e-9;
    double cs = cpu > 0 ? cpu : 1e-9;
    printf("%-3u %-6u %7u %-6s %12" PRIu64 " %12.0f %12.0f %12.0f %8.2f "
           "%7.0f | %18.0f\n", c->S, c->budget, threads, set, states,
           all / bs, all / bs / threads, all / cs, secs, mem / 1048576.0,
           ref);
}

/* One BFS row of the benchmark; 0, or 1 when the run did not finish. */
static int bench_bfs(const ck_config *c, unsigned threads, bool shared,
                     double ref)
{
    ck_outcome b;
    memset(&b, 0, sizeof b);
    int rc = (shared ? ck_search_bfs_shared(c, threads, &b)
                     : ck_search_bfs(c, threads, &b)) >= 0 ||
             b.out_of_memory;
    ck_path_free(&b.path);
    bench_row(c, threads, shared ? "shared" : "plain", b.states, b.states,
              b.secs, b.cpu_secs, b.mem_bytes, ref);
    return rc;
}

/* One of the plain BFSes side by side. */
typedef struct lone {
    const ck_config *c;
    ck_outcome o;
    pthread_t th;
} lone;

static void *lone_bfs(void *arg)
{
    lone *l = arg;
    ck_search_bfs(l->c, 1, &l->o);
    return NULL;
}

/* The row of n plain BFSes of c side by side (states: each one's). */
static int bench_side_by_side(const ck_config *c, unsigned n, double ref)
{
    lone *l = calloc(n, sizeof *l);
    if (!l)
        abort();
    double t0 = (double)xfer_clock_monotonic(NULL) / 1e9;
    clock_t c0 = clock();
    for (unsigned i = 0; i < n; i++) {
        l[i].c = c;
        if (pthread_create(&l[i].th, NULL, lone_bfs, &l[i]) != 0)
            abort();
    }
    int rc = 0;
    uint64_t all = 0, mem = 0;
    for (unsigned i = 0; i < n; i++) {
        pthread_join(l[i].th, NULL);
        rc |= l[i].o.inv >= 0 || l[i].o.out_of_memory;
        all += l[i].o.states;
        mem += l[i].o.mem_bytes;
        ck_path_free(&l[i].o.path);
    }
    bench_row(c, n, "apart", l[0].o.states, all,
              (double)xfer_clock_monotonic(NULL) / 1e9 - t0,
              (double)(clock() - c0) / CLOCKS_PER_SEC, mem, ref);
    free(l);
    return rc;
}

static int run_bench(const opts *o)
{
    printf("xfer-check benchmark: exhaustive BFS (T = 1, every fault "
           "class, other bounds at their defaults)\n");
    printf("%-3s %-6s %7s %-6s %12s %12s %12s %12s %8s %7s | %18s\n", "S",
           "budget", "threads", "set", "states", "states/s", "per thread",
           "per CPU-s", "secs", "MB", "reference: steps/s");
    int rc = 0;
    for (unsigned S = 1; S <= 3 && rc == 0; S++) {
        ck_config c = o->cfg;
        c.S = S;
        c.budget = bench_budget[S];
        ck_outcome r;
        memset(&r, 0, sizeof r);
        if (ck_search_random(&c, o->seed, 20000, false, &r) >= 0)
            rc = 1;
        ck_path_free(&r.path);
        double rs = r.secs > 0 ? r.secs : 1e-9;
        double ref = 2.0 * (double)r.steps / rs;
        unsigned n = o->threads > 1 ? o->threads : 2;
        rc |= bench_bfs(&c, 1, false, ref);
        if (rc == 0)
            rc |= bench_bfs(&c, 1, true, ref);
        if (rc == 0)
            rc |= bench_bfs(&c, n, true, ref);
        if (rc == 0)
            rc |= bench_side_by_side(&c, n, ref);
    }
    if (rc)
        printf("a run found a violation or stopped early: run it alone "
               "for the counterexample\n");
    printf("target: 1000000 states/s; states/s counts distinct states, "
           "each of which costs its transitions (a save, a hash and a "
           "visited-set probe each); per thread: states/s over threads; "
           "per CPU-s: over the CPU time the run used (the rate per core "
           "on a machine other work shares); set plain: --threads 1, the "
           "BFS written for one thread (the base); shared: the parallel "
           "BFS's set of entries, on one thread (what sharing costs) and "
           "on --threads N (default 2); set apart: N plain BFSes side by "
           "side, nothing shared (the rate per core of N busy cores, the "
           "most the shared set can reach); MB: peak of the search "
           "structures; "
           "the reference runs on one thread\n");
    return rc;
}

/* --replay FILE: the configuration comes from the file. */
static int run_replay(opts *o)
{
    char args[1024], why[256];
    ck_path p = {0};
    if (ck_report_read_choices(o->replay, args, sizeof args, &p, why, sizeof why))
        return bad(why, NULL);
    char *argv[64] = {"xfer-check"};
    int argc = 1;
    for (char *t = strtok(args, " "); t && argc < 63; t = strtok(NULL, " "))
        argv[argc++] = t;
    opts f;
    defaults(&f);
    if (parse(&f, argc, argv))
        return 2;
    f.out = o->out;
    f.mode = 0;
    banner(&f);
    ck_outcome r;
    memset(&r, 0, sizeof r);
    ck_violation v;
    uint64_t h;
    r.path = p;
    r.inv = ck_path_run(&f.cfg, &p, NULL, &v, &h, false);
    if (r.inv < 0) {
        printf("replay of %zu steps: every invariant held\n", p.n);
        ck_path_free(&p);
        return 0;
    }
    memcpy(r.what, v.what, sizeof r.what);
    int rc = violation(&f, &r, &f.cfg);
    ck_path_free(&p);
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    defaults(&o);
    int rc = parse(&o, argc, argv);
    if (rc)
        return rc;
    const char *env = getenv("XFER_SEED");
    unsigned long long s;
    if (env && *env) {
        if (num(env, 0, UINT64_MAX, &s))
            return bad("XFER_SEED is not a number", env);
        o.seed = s;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (o.replay)
        return run_replay(&o);
    if (o.bench)
        return run_bench(&o);
    banner(&o);
    return o.mode == 0 ? run_bfs(&o) : run_random(&o);
}
