/*
 * tools/trace/replay.c - `xfer-trace replay FILE`: feed the recorded inputs
 * through a fresh transfer core built from the recorded configuration, and
 * check that it takes the same steps and notes, bit for bit (I10).
 *
 * The core's records are picked out of the file by their emitter tag (the
 * tag of the CONFIG records) and their sequence numbers: one core numbers
 * every record it emits 0, 1, 2, ... with no gap, so a record of another
 * emitter sharing the file (a shard, a readiness tracker) never fits the
 * next expected number by accident of kind.  A CONFIG record with seq 0
 * starts a new run (a file may hold several).  The file's TRANSFER and
 * NOTE records are compared with the replay's, in order, every field but
 * the emitter tag; the first difference is reported with both records.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "xtrace.h"

typedef struct rbuf {
    xfer_trace_rec *v;
    size_t *at; /* file record index (want only) */
    size_t n, cap;
} rbuf;

typedef struct run {
    xfer_core *core;
    xfer_core_config cfg;
    bool have_cfg0, active;
    uint8_t src;
    uint64_t next_seq, inputs;
    rbuf got, want;
} run;

typedef struct replay {
    const xt_file *f;
    run cur;
    size_t runs, compared, foreign;
    int rc;
} replay;

static int rbuf_push(rbuf *b, const xfer_trace_rec *r, size_t at)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 1024;
        xfer_trace_rec *v = realloc(b->v, cap * sizeof *v);
        size_t *a = v ? realloc(b->at, cap * sizeof *a) : NULL;
        if (v)
            b->v = v;
        if (!a)
            return -1;
        b->at = a;
        b->cap = cap;
    }
    b->at[b->n] = at;
    b->v[b->n++] = *r;
    return 0;
}

static void capture(void *ud, const xfer_trace_rec *r)
{
    run *u = ud;
    if (r->machine == XFER_MACHINE_TRANSFER || r->machine == XFER_MACHINE_NOTE)
        if (rbuf_push(&u->got, r, 0))
            u->active = false;
}

static void fmt_rec(const xfer_trace_rec *r, char *buf, size_t len)
{
    unsigned m = r->machine;
    char t[32];
    xt_fmt_dur(t, sizeof t, r->time_ns);
    const char *ev = m == XFER_MACHINE_NOTE ? xfer_note_name(r->event)
                                      : xfer_fsm_event_name(m, r->event);
    snprintf(buf, len,
             "seq %" PRIu64 " t %s id %" PRIu64 " attempt %" PRIu32
             " shard %u %s %s -> %s on %s [%s] error %s args %" PRIu64
             " %" PRIu64 " %" PRIu64,
             r->seq, t, r->id, r->attempt, (unsigned)r->shard,
             xfer_machine_name(m),
             m == XFER_MACHINE_NOTE ? "-" : xfer_fsm_state_name(m, r->old_state),
             m == XFER_MACHINE_NOTE ? "-" : xfer_fsm_state_name(m, r->new_state),
             ev, m == XFER_MACHINE_NOTE ? "-" : xfer_verdict_name(r->verdict),
             xfer_err_name(r->error), r->arg0, r->arg1, r->arg2);
}

static bool same(const xfer_trace_rec *a, const xfer_trace_rec *b)
{
    xfer_trace_rec x = *a, y = *b;
    x.flags = y.flags = 0;
    return memcmp(&x, &y, sizeof x) == 0;
}

/* Compare the finished run; report the first divergence. */
static int compare(replay *rp, run *u)
{
    size_t n = u->got.n < u->want.n ? u->got.n : u->want.n;
    char a[512], b[512];
    for (size_t i = 0; i < n; i++) {
        if (same(&u->got.v[i], &u->want.v[i]))
            continue;
        fmt_rec(&u->want.v[i], a, sizeof a);
        fmt_rec(&u->got.v[i], b, sizeof b);
        printf("replay: divergence in run %zu at step/note %zu (file "
               "record %zu)\n  file:   %s\n  replay: %s\n",
               rp->runs, i, u->want.at[i], a, b);
        return XT_DIVERGED;
    }
    rp->compared += n;
    if (u->got.n == u->want.n)
        return XT_OK;
    if (u->got.n > u->want.n) {
        fmt_rec(&u->got.v[n], b, sizeof b);
        printf("replay: divergence in run %zu at step/note %zu: the file "
               "ends here\n  file:   (none)\n  replay: %s\n",
               rp->runs, n, b);
    } else {
        fmt_rec(&u->want.v[n], a, sizeof a);
        printf("replay: divergence in run %zu at step/note %zu (file "
               "record %zu)\n  file:   %s\n  replay: (none)\n",
               rp->runs, n, u->want.at[n], a);
    }
    return XT_DIVERGED;
}

static void end_run(replay *rp)
{
    run *u = &rp->cur;
    if (u->have_cfg0 && rp->rc == XT_OK)
        rp->rc = u->core ? compare(rp, u) : XT_BADINPUT;
    xfer_core_del(u->core);
    free(u->got.v);
    free(u->got.at);
    free(u->want.v);
    free(u->want.at);
    memset(u, 0, sizeof *u);
}

static void config0(run *u, const xfer_trace_rec *r)
{
    xfer_core_config_default(&u->cfg);
    u->cfg.max_shards = r->shard;
    u->cfg.max_transfers = (uint32_t)r->arg0;
    u->cfg.max_tombstones = (uint32_t)(r->arg0 >> 32);
    u->cfg.tombstone_ttl_ns = r->arg1;
    /* The recorded core passed its own lease check; replay accepts any
     * TTL such a core could have had. */
    u->cfg.consumer_lease_ns = 1;
    u->cfg.net_margin_ns = 1;
    u->cfg.default_deadline_ns = r->arg2;
}

static int config1(run *u, const xfer_trace_rec *r)
{
    if (!u->cfg.version) /* no first config record: the defaults */
        xfer_core_config_default(&u->cfg);
    u->cfg.cancel_op_timeout_ns = r->arg0;
    u->cfg.cancel_backoff_ns = r->arg1;
    u->cfg.cancel_max_attempts = (uint32_t)r->arg2;
    u->cfg.attempt_base = (uint32_t)(r->arg2 >> 32);
    u->cfg.trace = (xfer_trace_sink){capture, u};
    if (xfer_core_new(&u->cfg, &u->core))
        return -1;
    u->active = true;
    return 0;
}

static void feed(run *u, const xfer_trace_rec *r)
{
    static const xfer_slice slices[XFER_MAX_SHARDS];
    u->inputs++;
    if (r->event == XFER_TRANSFER_EVENT_SUBMIT) {
        xfer_submit_args a = {
            .id = r->id, .group = (uint32_t)(r->arg1 >> 32),
            .nshards = r->shard, .pool = (uint32_t)r->arg1,
            .slices = slices, .deadline_ns = r->arg0, .user_data = r->arg2,
            .eager_ok = r->old_state != 0};
        (void)xfer_core_submit(u->core, r->time_ns, &a);
    } else if (r->event == XFER_TRANSFER_EVENT_USER_CANCEL) {
        (void)xfer_core_cancel(u->core, r->time_ns, r->id);
    } else if (r->event == XFER_TRANSFER_EVENT_DEADLINE && r->id == 0) {
        xfer_core_on_timer(u->core, r->time_ns);
    } else if (r->event == XFER_TRANSFER_EVENT_SHUTDOWN && r->id == 0) {
        xfer_core_shutdown(u->core, r->time_ns);
    } else if (xt_result_event(r->event)) {
        xfer_shard_result s = {
            .id = r->id, .attempt = r->attempt, .shard = r->shard,
            .op = r->old_state, .status = r->error, .resv_id = r->arg0,
            .remote_addr = r->arg1, .rkey = (uint32_t)r->arg2};
        (void)xfer_core_on_result(u->core, r->time_ns, &s);
    }
    xfer_core_actions_clear(u->core);
}

static bool is_core_machine(unsigned m)
{
    return m == XFER_MACHINE_CONFIG || m == XFER_MACHINE_INPUT ||
           m == XFER_MACHINE_TRANSFER || m == XFER_MACHINE_ACTION || m == XFER_MACHINE_NOTE;
}

static int step(replay *rp, const xfer_trace_rec *r, size_t at)
{
    run *u = &rp->cur;
    if (r->machine == XFER_MACHINE_CONFIG && r->event == 0 && r->seq == 0) {
        end_run(rp);
        rp->runs++;
        config0(u, r);
        u->have_cfg0 = true;
        u->src = r->flags;
        u->next_seq = 1;
        return 0;
    }
    if (!u->have_cfg0 || r->flags != u->src ||
        !is_core_machine(r->machine) || r->seq != u->next_seq) {
        rp->foreign++;
        return 0;
    }
    u->next_seq++;
    if (r->machine == XFER_MACHINE_CONFIG && r->event == 1 && !u->core)
        return config1(u, r);
    if (r->machine == XFER_MACHINE_CONFIG && r->event == 2 && !u->core) {
        u->cfg.eager_max_bytes = (uint32_t)r->arg0; /* the eager path */
        return 0;
    }
    if (!u->core)
        return 0;
    if (r->machine == XFER_MACHINE_INPUT)
        feed(u, r);
    else if (r->machine == XFER_MACHINE_TRANSFER || r->machine == XFER_MACHINE_NOTE)
        return rbuf_push(&u->want, r, at);
    return 0;
}

static const cli_flag xt_cmd_replay_flags[] = {CLI_HELP, {NULL, 0, NULL, NULL, 0}};
static const cli xt_cmd_replay_cli = {.prog = "xfer-trace replay", .synopsis = "FILE",
                           .intro = "re-run the recorded inputs through the core; exit 1 when it diverges\n",
                           .flags = xt_cmd_replay_flags};

int xt_cmd_replay(int argc, char **argv)
{
    if (xt_args(&xt_cmd_replay_cli, &argc, &argv))
        return XT_USAGE;
    if (argc != 1)
        return xt_usage("%s", "replay takes one FILE");
    if (argv[0][0] == '-')
        return xt_usage("unknown flag '%s'", argv[0]);
    xt_file f;
    if (xt_load(argv[0], &f))
        return XT_BADINPUT;
    replay rp = {.f = &f};
    for (size_t i = 0; i < f.n && rp.rc == XT_OK; i++)
        if (step(&rp, &f.recs[i], i)) {
            fprintf(stderr, "xfer-trace: %s: cannot build a core from "
                    "record %zu (bad CONFIG or out of memory)\n", f.path, i);
            rp.rc = XT_BADINPUT;
        }
    end_run(&rp);
    if (rp.rc == XT_OK && rp.runs == 0) {
        fprintf(stderr, "xfer-trace: %s: no CONFIG record at seq 0 (a "
                "rotated continuation, or no transfer core wrote it): "
                "nothing to replay\n", f.path);
        rp.rc = XT_BADINPUT;
    }
    if (rp.rc == XT_OK)
        printf("replay: same: %zu run(s), %zu steps and notes match; "
               "%zu records of other emitters skipped\n",
               rp.runs, rp.compared, rp.foreign);
    xt_file_free(&f);
    return rp.rc;
}
