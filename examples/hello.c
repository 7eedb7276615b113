/*
 * examples/hello.c - the first program: one transfer from a staging buffer
 * to a consumer of four shards, which here live in this process (the loop
 * transport), on the engine's own libevent loop.
 *
 * docs/api.md shows this file.  The test suite builds it, runs it, and
 * builds it once more against the installed library with nothing but
 * `cc hello.c $(pkg-config --cflags --libs xfer)`.
 *
 * The order every program keeps:
 *  1. create the engine, the transport of a consumer group (here four
 *     in-process shards on the engine's event base), add the group and
 *     register the staging memory as a pool;
 *  2. submit, then run the loop: each accepted submit completes exactly
 *     once, from the loop;
 *  3. when the engine is idle (nothing live, nothing queued), shut it
 *     down; the shutdown callback breaks the loop, because the engine's
 *     own events keep event_base_dispatch() from ever returning by itself;
 *  4. xfer_engine_del(), then xfer_loop_del().
 * Exit status: 0 when every transfer succeeded.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <xfer/loop.h>
#include <xfer/xfer.h>

#define NSHARDS 4
#define SLICE 4096

static uint8_t staging[NSHARDS * SLICE];
static int failures;

/* Exactly once per accepted submit, from the loop. */
static void done(void *ud, const xfer_result *r)
{
    (void)ud;
    if (r->status == 0) {
        printf("transfer %llu done: %d shards hold the data\n",
               (unsigned long long)r->id, NSHARDS);
        return;
    }
    failures++;
    printf("transfer %llu failed in phase %s, first shard %u: %s\n",
           (unsigned long long)r->id, xfer_phase_name(r->phase),
           r->first_failed_shard, xfer_strerror(r->status));
}

/* Every completion reported, every pool unregistered: leave the loop. */
static void stopped(void *ud)
{
    event_base_loopbreak(ud);
}

/* Nothing live and nothing queued: shut down. */
static void idle(void *ud)
{
    xfer_engine *e = ud;
    xfer_engine_shutdown(e, stopped, xfer_engine_base(e));
}

int main(void)
{
    xfer_engine *e = NULL;
    xfer_loop *shards = NULL;
    uint32_t group, pool;
    int rc = xfer_engine_new(NULL, &e); /* with its own event_base */
    if (rc)
        goto out;
    xfer_loop_config lc;
    xfer_loop_config_default(&lc); /* then set what differs */
    lc.nshards = NSHARDS;
    lc.shard.pool_bytes = 1 << 20;
    rc = xfer_loop_new(xfer_engine_base(e), &lc, &shards);
    if (rc)
        goto out;
    rc = xfer_engine_add_group(e, xfer_loop_transport(shards), &group);
    if (rc)
        goto out;
    memset(staging, 'x', sizeof staging);
    rc = xfer_engine_register_pool(e, staging, sizeof staging, &pool);
    if (rc)
        goto out;

    xfer_slice slices[NSHARDS]; /* one slice of the pool per shard */
    for (unsigned k = 0; k < NSHARDS; k++)
        slices[k] = (xfer_slice){.off = k * SLICE, .len = SLICE};
    xfer_transfer_desc d = {.id = 42, .group = group, .pool = pool,
                            .nslices = NSHARDS, .slices = slices,
                            .timeout_ns = 2000000000u};
    rc = xfer_engine_submit(e, &d, done, NULL); /* or _post_submit from
                                                    another thread */
    if (rc)
        goto out;
    rc = xfer_engine_on_idle(e, idle, e);
    if (rc)
        goto out;
    if (event_base_dispatch(xfer_engine_base(e)) < 0)
        rc = XFER_ERR_IO;
out:
    if (rc)
        fprintf(stderr, "hello: %s\n", xfer_strerror(rc));
    xfer_engine_del(e);
    xfer_loop_del(shards);
    return rc || failures ? 1 : 0;
}
