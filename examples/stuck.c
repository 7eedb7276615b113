/*
 * examples/stuck.c - a producer with a stuck transfer, traced to a file
 * that `xfer-trace stuck` reads while the process still runs.
 *
 * The engine and its four in-process shards write one trace file (the
 * engine with tag 0, the shards with tag 1).  Shard 1 never answers the
 * write of transfer 8 (a DROP fault rule stands in for a hung worker),
 * and transfer 8 has a long deadline; transfers 100.. go on completing
 * every 100 ms.  After 15 of them the trace is flushed and the program
 * says so; then find the stuck transfer:
 *
 *     xfer-trace stuck --older-than 1s TRACE
 *
 * SIGTERM (or SIGINT) shuts the engine down: transfer 8 then ends with
 * XFER_ERR_SHUTDOWN, exactly once, like every other transfer.
 *
 *     stuck TRACE
 * Exit status: 0 when transfer 8 ended by the shutdown and every other
 * transfer succeeded.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <xfer/loop.h>
#include <xfer/tracefile.h>
#include <xfer/xfer.h>

#define NSHARDS 4
#define SLICE 4096
#define STUCK_ID 8
#define OTHERS 15

static uint8_t staging[NSHARDS * SLICE];
static xfer_slice slices[NSHARDS];

typedef struct app {
    xfer_engine *e;
    xfer_tracefile *tf;
    uint32_t group, pool;
    unsigned sent, ok, unexpected;
    int stuck_status; /* 1 until transfer 8 ends */
} app;

static void done(void *ud, const xfer_result *r)
{
    app *a = ud;
    if (r->id == STUCK_ID)
        a->stuck_status = r->status;
    else if (r->status == 0)
        a->ok++;
    else
        a->unexpected++;
    printf("transfer %llu: %s\n", (unsigned long long)r->id,
           r->status ? xfer_strerror(r->status) : "done");
}

static int submit(app *a, uint64_t id, uint64_t timeout_ns)
{
    xfer_transfer_desc d = {.id = id, .group = a->group, .pool = a->pool,
                            .nslices = NSHARDS, .slices = slices,
                            .timeout_ns = timeout_ns};
    return xfer_engine_submit(a->e, &d, done, a);
}

/* Every 100 ms one more transfer; after the last, flush the trace. */
static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    app *a = arg;
    if (a->sent < OTHERS && submit(a, 100 + a->sent++, 2000000000u) != 0)
        a->unexpected++;
    if (a->sent == OTHERS && a->ok == OTHERS) {
        xfer_tracefile_flush(a->tf);
        printf("trace flushed: transfer %d still waits\n", STUCK_ID);
        fflush(stdout);
        a->sent++; /* once */
    }
}

static void stopped(void *ud)
{
    event_base_loopbreak(ud);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig, (void)what;
    xfer_engine *e = arg;
    xfer_engine_shutdown(e, stopped, xfer_engine_base(e));
}

int main(int argc, char **argv)
{
    app a = {.stuck_status = 1};
    xfer_loop *shards = NULL;
    struct event *timer = NULL, *term = NULL, *intr = NULL;
    if (argc != 2) {
        fprintf(stderr, "usage: stuck TRACE\n");
        return 2;
    }
    xfer_tracefile_opts to;
    xfer_tracefile_opts_default(&to);
    to.max_bytes = 64u << 20; /* then TRACE.1 .. TRACE.4 */
    to.keep = 4;
    int rc = xfer_tracefile_open(argv[1], &to, &a.tf);
    if (rc)
        goto out;

    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.core.trace = xfer_tracefile_sink(a.tf);              /* engine */
    rc = xfer_engine_new(&ec, &a.e);
    if (rc)
        goto out;
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = NSHARDS;
    lc.shard.pool_bytes = 1 << 20;
    lc.shard.trace = xfer_tracefile_sink_tagged(a.tf, 1);   /* shards */
    rc = xfer_loop_new(xfer_engine_base(a.e), &lc, &shards);
    if (!rc)
        rc = xfer_engine_add_group(a.e, xfer_loop_transport(shards),
                                   &a.group);
    if (!rc)
        rc = xfer_engine_register_pool(a.e, staging, sizeof staging, &a.pool);
    xfer_fault_rule hung = {.kind = XFER_FAULT_DROP, .op = XFER_OP_WRITE,
                            .shard = 1, .id = STUCK_ID};
    if (!rc)
        rc = xfer_loop_add_rule(shards, &hung);
    if (rc)
        goto out;
    for (unsigned k = 0; k < NSHARDS; k++)
        slices[k] = (xfer_slice){.off = k * SLICE, .len = SLICE};
    rc = submit(&a, STUCK_ID, 600000000000u); /* a 10-minute deadline */
    if (rc)
        goto out;

    struct event_base *base = xfer_engine_base(a.e);
    struct timeval every = {0, 100000};
    timer = event_new(base, -1, EV_PERSIST, tick, &a);
    term = evsignal_new(base, SIGTERM, on_signal, a.e);
    intr = evsignal_new(base, SIGINT, on_signal, a.e);
    if (!timer || !term || !intr || event_add(timer, &every) ||
        event_add(term, NULL) || event_add(intr, NULL)) {
        rc = XFER_ERR_NOMEM;
        goto out;
    }
    if (event_base_dispatch(base) < 0)
        rc = XFER_ERR_IO;
out:
    if (rc)
        fprintf(stderr, "stuck: %s\n", xfer_strerror(rc));
    if (timer)
        event_free(timer);
    if (term)
        event_free(term);
    if (intr)
        event_free(intr);
    xfer_engine_del(a.e);
    xfer_loop_del(shards);
    xfer_tracefile_close(a.tf); /* after every emitter is gone */
    return rc || a.unexpected || a.ok != OTHERS ||
                   a.stuck_status != XFER_ERR_SHUTDOWN
               ? 1
               : 0;
}
