/*
 * tests/api/test_consumer_api.c - the consumer client (xfer/consumer.h)
 * used as a program that is not ours uses it (issue 23): real xferd
 * processes on loopback (mp.h), a producer and the consumer on one
 * caller-owned event base, and every consumer call made before the links
 * are up, during a reconnect (an xferd killed and started again on the
 * same port), and after close.
 *
 * Each test names the issue 23 item it reproduces; every one of them
 * fails on 84f8aad.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "multiproc/mp.h"
#include "testutil.h"
#include "xfer/consumer.h"
#include "xfer/xfer.h"

#define S2 2
#define SLICE 4096u
#define MAX_ID 64u

typedef struct outcome {
    unsigned n;
    bool available;
    int32_t reason;
} outcome;

typedef struct fx {
    mp_proc d[S2];
    uint16_t ports[S2];
    char addrbuf[S2][32];
    const char *addrs[S2];
    mp_producer p;
    xfer_consumer *c;
    outcome out[MAX_ID + 1];
    unsigned done_n[MAX_ID + 1];
    xfer_result res[MAX_ID + 1];
    bool auto_release;
    unsigned links_up;
    bool closed;
    int close_status;
    uint64_t close_shards;
} fx;

static void on_available(void *ud, uint64_t id, uint32_t attempt,
                         const xfer_region *regions, uint16_t n)
{
    fx *f = ud;
    (void)attempt, (void)regions, (void)n;
    if (id > MAX_ID)
        return;
    f->out[id].n++;
    f->out[id].available = true;
    if (f->auto_release)
        ck_assert_int_eq(xfer_consumer_release(f->c, id), 0);
}

static void on_unavailable(void *ud, uint64_t id, int32_t reason,
                           uint64_t shards)
{
    fx *f = ud;
    (void)shards;
    if (id > MAX_ID)
        return;
    f->out[id].n++;
    f->out[id].reason = reason;
}

static void on_link(void *ud, uint16_t shard, bool up)
{
    fx *f = ud;
    (void)shard;
    if (up)
        f->links_up++;
    else
        f->links_up--;
}

static void on_done(void *ud, const xfer_result *res)
{
    fx *f = ud;
    if (res->id <= MAX_ID) {
        f->done_n[res->id]++;
        f->res[res->id] = *res;
    }
}

static void start_xferd(fx *f, uint16_t k, uint16_t port)
{
    char shard[8];
    snprintf(shard, sizeof shard, "%u", (unsigned)k);
    const char *args[] = {"--shards", shard, "--pool", "16M", "--quiet",
                          NULL};
    ck_assert_int_eq(mp_xferd(&f->d[k], port, args), 0);
    f->ports[k] = f->d[k].port;
    snprintf(f->addrbuf[k], sizeof f->addrbuf[k], "127.0.0.1:%u",
             (unsigned)f->ports[k]);
    f->addrs[k] = f->addrbuf[k];
}

static void fx_start(fx *f)
{
    memset(f, 0, sizeof *f);
    signal(SIGPIPE, SIG_IGN);
    for (uint16_t k = 0; k < S2; k++)
        start_xferd(f, k, 0);
    ck_assert_int_eq(mp_producer_new_addrs(&f->p, f->addrs, S2,
                                           (size_t)MAX_ID * S2 * SLICE,
                                           30000000000ull),
                     0);
}

static void fx_consumer(fx *f)
{
    xfer_consumer_config cfg;
    xfer_consumer_config_default(&cfg);
    cfg.base = f->p.base;
    cfg.nshards = S2;
    cfg.addrs = f->addrs;
    cfg.available = on_available;
    cfg.unavailable = on_unavailable;
    cfg.link = on_link;
    cfg.ud = f;
    cfg.reconnect_max_ns = 100000000ull;
    ck_assert_int_eq(xfer_consumer_new(&cfg, &f->c), 0);
}

static bool links_all_up(void *ud)
{
    fx *f = ud;
    return f->links_up == S2;
}

static void fx_up(fx *f)
{
    ck_assert(mp_producer_wait_connected(&f->p, 10000));
    ck_assert(mp_run_while(f->p.base, links_all_up, f, 10000));
}

static void fx_stop(fx *f)
{
    xfer_consumer_del(f->c);
    f->c = NULL;
    mp_producer_del(&f->p, 10000);
    for (uint16_t k = 0; k < S2; k++)
        if (f->d[k].pid > 0)
            mp_kill(&f->d[k], SIGKILL);
}

static int submit(fx *f, uint64_t id)
{
    xfer_slice sl[S2];
    for (uint16_t k = 0; k < S2; k++)
        sl[k] = (xfer_slice){.off = ((id - 1) * S2 + k) * SLICE,
                             .len = SLICE};
    xfer_transfer_desc d = {.id = id, .group = f->p.group,
                            .pool = f->p.pool, .nslices = S2,
                            .slices = sl};
    return xfer_engine_submit(f->p.e, &d, on_done, f);
}

typedef struct wait_id {
    fx *f;
    uint64_t id;
} wait_id;

static bool has_outcome(void *ud)
{
    wait_id *w = ud;
    return w->f->out[w->id].n > 0;
}

static bool is_done(void *ud)
{
    wait_id *w = ud;
    return w->f->done_n[w->id] > 0;
}

typedef struct port_wait {
    uint16_t port;
} port_wait;

static bool port_empty(void *ud)
{
    xfer_wire_status st;
    return mp_status(((port_wait *)ud)->port, &st) == 0 &&
           st.bytes_in_use == 0 && st.live == 0;
}

/* The shard at port holds no data, the loop running meanwhile (what the
 * consumer sends is written from it). */
static bool shard_holds_nothing(fx *f, uint16_t port)
{
    port_wait w = {port};
    return mp_run_while(f->p.base, port_empty, &w, 5000);
}

/* Run the loop until fn(f) holds (10 s at most). */
static bool run_until(fx *f, bool (*fn)(void *), void *ud)
{
    return mp_run_while(f->p.base, fn, ud, 10000);
}

typedef struct tomb_wait {
    uint16_t port;
    uint64_t at_least;
} tomb_wait;

static bool has_tombs(void *ud)
{
    tomb_wait *t = ud;
    xfer_wire_status st;
    return mp_status(t->port, &st) == 0 && st.tombstones >= t->at_least;
}

/* Every shard holds at least n tombstones (the consumer's cancels). */
static bool tombs_on_every_shard(fx *f, uint64_t n)
{
    for (uint16_t k = 0; k < S2; k++) {
        tomb_wait t = {f->ports[k], n};
        if (!run_until(f, has_tombs, &t))
            return false;
    }
    return true;
}

static bool never(void *ud)
{
    (void)ud;
    return false;
}

static void restart_xferd(fx *f, uint16_t k)
{
    uint16_t port = f->ports[k];
    mp_kill(&f->d[k], SIGKILL);
    /* The same port: the kernel may hold it a moment. */
    for (int i = 0; i < 100; i++) {
        char shard[8];
        snprintf(shard, sizeof shard, "%u", (unsigned)k);
        const char *args[] = {"--shards", shard, "--pool", "16M", "--quiet",
                              NULL};
        if (mp_xferd(&f->d[k], port, args) == 0)
            return;
        mp_run_while(f->p.base, never, NULL, 20);
    }
    ck_abort_msg("xferd %u did not come back on port %u", (unsigned)k,
                 (unsigned)port);
}

typedef struct acked_wait {
    fx *f;
    uint64_t id, mask;
} acked_wait;

/* The cancel of id is acknowledged by (at least) the shards of mask. */
static bool acked_by(void *ud)
{
    acked_wait *a = ud;
    uint64_t acked = 0;
    return xfer_consumer_cancel_shards(a->f->c, a->id, &acked, NULL) == 0 &&
           (acked & a->mask) == a->mask;
}

static bool link_down_k(void *ud)
{
    fx *f = ud;
    return f->links_up < S2;
}

/* ---------------------------------------------------------------------- */
/* Item 2: a cancel made before the links are up reaches every shard, so  */
/* the producer's transfer of that id fails: both sides agree.            */
/* ---------------------------------------------------------------------- */

START_TEST(test_consumer_api_cancel_before_links_up_reaches_shards)
{
    static fx f;
    fx_start(&f);
    ck_assert(mp_producer_wait_connected(&f.p, 10000));
    fx_consumer(&f);
    ck_assert_uint_eq(f.links_up, 0);
    ck_assert(!xfer_consumer_connected(f.c, 0));
    ck_assert_int_eq(xfer_consumer_cancel(f.c, 3), 0);
    ck_assert(run_until(&f, links_all_up, &f));
    /* The cancel's tombstone is on every shard ... */
    ck_assert(tombs_on_every_shard(&f, 1));
    /* ... so the producer's transfer of the id is refused. */
    ck_assert_int_eq(submit(&f, 3), 0);
    wait_id w = {&f, 3};
    ck_assert(run_until(&f, is_done, &w));
    ck_assert_int_ne(f.res[3].status, 0);
    ck_assert_uint_eq(f.out[3].n, 0); /* cancelled: no outcome owed */
    fx_stop(&f);
}
END_TEST

/* Item 2, the other calls before the links are up: an expect holds (the
 * transfer made later is available), a release of an id never held is
 * refused, and nothing is lost. */
START_TEST(test_consumer_api_expect_before_links_up)
{
    static fx f;
    fx_start(&f);
    ck_assert(mp_producer_wait_connected(&f.p, 10000));
    fx_consumer(&f);
    f.auto_release = true;
    uint64_t dl = xfer_consumer_now(f.c) + 30000000000ull;
    ck_assert_int_eq(xfer_consumer_expect(f.c, 4, dl), 0);
    ck_assert_int_eq(xfer_consumer_release(f.c, 4), XFER_ERR_NOT_FOUND);
    ck_assert_int_eq(xfer_consumer_post_expect(f.c, 5, dl), 0);
    ck_assert(run_until(&f, links_all_up, &f));
    ck_assert_int_eq(submit(&f, 4), 0);
    ck_assert_int_eq(submit(&f, 5), 0);
    wait_id w4 = {&f, 4}, w5 = {&f, 5};
    ck_assert(run_until(&f, has_outcome, &w4));
    ck_assert(run_until(&f, has_outcome, &w5));
    ck_assert(f.out[4].available);
    ck_assert(f.out[5].available);
    ck_assert(run_until(&f, is_done, &w4));
    ck_assert(run_until(&f, is_done, &w5));
    ck_assert_int_eq(f.res[4].status, 0);
    for (uint16_t k = 0; k < S2; k++)
        ck_assert(shard_holds_nothing(&f, f.ports[k]));
    fx_stop(&f);
}
END_TEST

/* Item 2 at the cap: with no shard reachable, cancels queue up to max_ids
 * per shard; the next one is refused BUSY and changes nothing. */
START_TEST(test_consumer_api_queue_cap_refuses_busy)
{
    static fx f;
    fx_start(&f);
    xfer_consumer_config cfg;
    xfer_consumer_config_default(&cfg);
    /* A port nothing listens on: shard 1's process is gone. */
    mp_kill(&f.d[1], SIGKILL);
    cfg.base = f.p.base;
    cfg.nshards = S2;
    cfg.addrs = f.addrs;
    cfg.available = on_available;
    cfg.unavailable = on_unavailable;
    cfg.ud = &f;
    cfg.max_ids = 4;
    ck_assert_int_eq(xfer_consumer_new(&cfg, &f.c), 0);
    for (uint64_t id = 1; id <= 4; id++)
        ck_assert_int_eq(xfer_consumer_cancel(f.c, id), 0);
    ck_assert_int_eq(xfer_consumer_cancel(f.c, 5), XFER_ERR_BUSY);
    xfer_consumer_stats cs;
    ck_assert_int_eq(xfer_consumer_stats_get(f.c, &cs), 0);
    ck_assert_uint_ge(cs.requests_queued, 4); /* at least shard 1's */
    /* A version 1 reader gets its fields only (docs/design.md 4.1). */
    xfer_consumer_stats v1;
    memset(&v1, 0xee, sizeof v1);
    ck_assert_int_eq(xfer_consumer_stats_get_versioned(f.c, 1, &v1), 0);
    ck_assert_uint_eq(v1.requests_queued, 0xeeeeeeeeeeeeeeeeull);
    ck_assert_uint_eq(v1.user_cancels, cs.user_cancels);
    /* Refused: no tombstone, so an expect of it is still accepted. */
    ck_assert_int_eq(xfer_consumer_expect(f.c, 5, 0), 0);
    fx_stop(&f);
}
END_TEST

/* Items 2 and 4: a cancel made while one shard's xferd is down (killed)
 * is acknowledged by the other at once and by that one when it is back
 * on its port; the per-shard view says which. */
START_TEST(test_consumer_api_cancel_during_reconnect)
{
    static fx f;
    fx_start(&f);
    fx_consumer(&f);
    fx_up(&f);
    mp_kill(&f.d[0], SIGKILL);
    ck_assert(run_until(&f, link_down_k, &f));
    ck_assert_int_eq(xfer_consumer_cancel(f.c, 9), 0);
    ck_assert(!xfer_consumer_connected(f.c, 0));
    tomb_wait t1 = {f.ports[1], 1};
    ck_assert(run_until(&f, has_tombs, &t1));
    acked_wait a1 = {&f, 9, 2};
    ck_assert(run_until(&f, acked_by, &a1));
    uint64_t acked = 0, refused = 0;
    ck_assert_int_eq(xfer_consumer_cancel_shards(f.c, 9, &acked, &refused),
                     0);
    ck_assert_uint_eq(acked, 2);  /* shard 1 only */
    ck_assert_uint_eq(refused, 0);
    /* Shard 0 back, a new process on the same port. */
    char shard[8] = "0";
    const char *args[] = {"--shards", shard, "--pool", "16M", "--quiet",
                          NULL};
    ck_assert_int_eq(mp_xferd(&f.d[0], f.ports[0], args), 0);
    ck_assert(run_until(&f, links_all_up, &f));
    tomb_wait t0 = {f.ports[0], 1};
    ck_assert(run_until(&f, has_tombs, &t0));
    acked_wait a2 = {&f, 9, 3};
    ck_assert(run_until(&f, acked_by, &a2));
    ck_assert_int_eq(xfer_consumer_cancel_shards(f.c, 9, &acked, NULL), 0);
    ck_assert_uint_eq(acked, 3);
    ck_assert_int_eq(xfer_consumer_cancel_shards(f.c, 10, &acked, NULL),
                     XFER_ERR_NOT_FOUND);
    fx_stop(&f);
}
END_TEST

/* Item 2, a shard restart: a cancel every shard acknowledged reaches a
 * shard that restarted (and forgot it) when its link comes back. */
START_TEST(test_consumer_api_cancel_survives_shard_restart)
{
    static fx f;
    fx_start(&f);
    fx_consumer(&f);
    fx_up(&f);
    ck_assert_int_eq(xfer_consumer_cancel(f.c, 11), 0);
    ck_assert(tombs_on_every_shard(&f, 1));
    restart_xferd(&f, 0);
    xfer_wire_status st;
    ck_assert_int_eq(mp_status(f.ports[0], &st), 0);
    ck_assert(run_until(&f, link_down_k, &f));
    ck_assert(run_until(&f, links_all_up, &f));
    tomb_wait t0 = {f.ports[0], 1};
    ck_assert(run_until(&f, has_tombs, &t0));
    xfer_consumer_stats cs;
    ck_assert_int_eq(xfer_consumer_stats_get(f.c, &cs), 0);
    ck_assert_uint_ge(cs.cancels_replayed, 1);
    /* The producer's transfer of 11 is refused by both shards. */
    ck_assert(mp_producer_wait_connected(&f.p, 10000));
    ck_assert_int_eq(submit(&f, 11), 0);
    wait_id w = {&f, 11};
    ck_assert(run_until(&f, is_done, &w));
    ck_assert_int_ne(f.res[11].status, 0);
    fx_stop(&f);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Item 3: release then close delivers the releases; every shard empty.   */
/* ---------------------------------------------------------------------- */

static void on_closed(void *ud, int status, uint64_t shards)
{
    fx *f = ud;
    f->closed = true;
    f->close_status = status;
    f->close_shards = shards;
}

static bool is_closed(void *ud)
{
    return ((fx *)ud)->closed;
}

/* The available callback releases; the application closes in the same
 * turn it saw the last outcome, and deletes once closed. */
START_TEST(test_consumer_api_release_then_close_empties_shards)
{
    static fx f;
    fx_start(&f);
    fx_consumer(&f);
    fx_up(&f);
    f.auto_release = true;
    uint64_t dl = xfer_consumer_now(f.c) + 30000000000ull;
    for (uint64_t id = 1; id <= 8; id++) {
        ck_assert_int_eq(xfer_consumer_expect(f.c, id, dl), 0);
        ck_assert_int_eq(submit(&f, id), 0);
    }
    for (uint64_t id = 1; id <= 8; id++) {
        wait_id w = {&f, id};
        ck_assert(run_until(&f, has_outcome, &w));
        ck_assert(f.out[id].available);
    }
    ck_assert_int_eq(xfer_consumer_close(f.c, 10000000000ull, on_closed, &f),
                     0);
    ck_assert(!f.closed); /* never from inside the call */
    ck_assert_int_eq(xfer_consumer_close(f.c, 0, on_closed, &f),
                     XFER_ERR_SHUTDOWN);
    ck_assert(run_until(&f, is_closed, &f));
    ck_assert_int_eq(f.close_status, 0);
    ck_assert_uint_eq(f.close_shards, 0);
    xfer_consumer_del(f.c);
    f.c = NULL;
    for (uint16_t k = 0; k < S2; k++)
        ck_assert(shard_holds_nothing(&f, f.ports[k]));
    fx_stop(&f);
}
END_TEST

/* Item 3: the close releases what the application still holds and what a
 * take in flight pins; calls after close are refused SHUTDOWN. */
static void note_closed(void *ud, int status, uint64_t shards)
{
    int *out = ud;
    out[0] = 1;
    out[1] = status;
    out[2] = shards != 0;
}

static bool note_seen(void *ud)
{
    return ((int *)ud)[0] != 0;
}

static void ignore_avail(void *ud, uint64_t id, uint32_t attempt,
                         const xfer_region *regions, uint16_t n)
{
    (void)ud, (void)id, (void)attempt, (void)regions, (void)n;
}

static void ignore_unavail(void *ud, uint64_t id, int32_t reason,
                           uint64_t shards)
{
    (void)ud, (void)id, (void)reason, (void)shards;
}

/* A consumer of the most shards a group may have (XFER_MAX_SHARDS), none
 * of them reachable, that was asked nothing: a close owes no shard
 * anything, so it completes at once (status 0, no shard named) even with
 * no timeout, and every link is looked at, none past the last. */
START_TEST(test_consumer_api_close_max_shards_owing_nothing)
{
    struct event_base *base = event_base_new();
    ck_assert_ptr_nonnull(base);
    const char *addrs[XFER_MAX_SHARDS];
    for (unsigned k = 0; k < XFER_MAX_SHARDS; k++)
        addrs[k] = "127.0.0.1:9"; /* discard: nothing listens */
    xfer_consumer_config cfg;
    xfer_consumer_config_default(&cfg);
    cfg.base = base;
    cfg.nshards = XFER_MAX_SHARDS;
    cfg.addrs = addrs;
    cfg.available = ignore_avail;
    cfg.unavailable = ignore_unavail;
    xfer_consumer *c = NULL;
    ck_assert_int_eq(xfer_consumer_new(&cfg, &c), 0);
    int closed[3] = {0, 0, 0};
    ck_assert_int_eq(xfer_consumer_close(c, 0, note_closed, closed), 0);
    ck_assert(mp_run_while(base, note_seen, closed, 5000));
    ck_assert_int_eq(closed[1], 0);
    ck_assert_int_eq(closed[2], 0);
    xfer_consumer_del(c);
    event_base_free(base);
}
END_TEST

START_TEST(test_consumer_api_close_releases_held_and_refuses_after)
{
    static fx f;
    fx_start(&f);
    fx_consumer(&f);
    fx_up(&f);
    uint64_t dl = xfer_consumer_now(f.c) + 30000000000ull;
    ck_assert_int_eq(xfer_consumer_expect(f.c, 1, dl), 0);
    ck_assert_int_eq(submit(&f, 1), 0);
    wait_id w = {&f, 1};
    ck_assert(run_until(&f, has_outcome, &w));
    ck_assert(f.out[1].available); /* held: not released */
    ck_assert_int_eq(xfer_consumer_expect(f.c, 2, dl), 0);
    ck_assert_int_eq(xfer_consumer_close(f.c, 10000000000ull, on_closed, &f),
                     0);
    ck_assert_int_eq(xfer_consumer_expect(f.c, 3, dl), XFER_ERR_SHUTDOWN);
    ck_assert_int_eq(xfer_consumer_cancel(f.c, 3), XFER_ERR_SHUTDOWN);
    ck_assert_int_eq(xfer_consumer_release(f.c, 1), XFER_ERR_SHUTDOWN);
    ck_assert_int_eq(xfer_consumer_post_cancel(f.c, 3), 0); /* refused later */
    ck_assert(run_until(&f, is_closed, &f));
    ck_assert_int_eq(f.close_status, 0);
    ck_assert_uint_eq(f.out[2].n, 0); /* no outcome after close */
    xfer_consumer_stats cs;
    ck_assert_int_eq(xfer_consumer_stats_get(f.c, &cs), 0);
    ck_assert_uint_eq(cs.held, 0);
    ck_assert_uint_eq(cs.mail_refused, 1);
    for (uint16_t k = 0; k < S2; k++)
        ck_assert(shard_holds_nothing(&f, f.ports[k]));
    /* The producer's transfer of 2, made now, is refused: cancelled. */
    ck_assert_int_eq(submit(&f, 2), 0);
    wait_id w2 = {&f, 2};
    ck_assert(run_until(&f, is_done, &w2));
    ck_assert_int_ne(f.res[2].status, 0);
    fx_stop(&f);
}
END_TEST

/* Item 3 with a shard down for good: the close ends at its timeout and
 * names that shard. */
START_TEST(test_consumer_api_close_times_out_naming_shard)
{
    static fx f;
    fx_start(&f);
    fx_consumer(&f);
    fx_up(&f);
    mp_kill(&f.d[1], SIGKILL);
    ck_assert(run_until(&f, link_down_k, &f));
    ck_assert_int_eq(xfer_consumer_cancel(f.c, 6), 0);
    ck_assert_int_eq(xfer_consumer_close(f.c, 300000000ull, on_closed, &f),
                     0);
    ck_assert(run_until(&f, is_closed, &f));
    ck_assert_int_eq(f.close_status, XFER_ERR_TIMEOUT);
    ck_assert_uint_eq(f.close_shards, 2);
    fx_stop(&f);
}
END_TEST

/* Item 2, the other calls during a reconnect: a release made while one
 * shard's link is down frees the other shard's region at once and is
 * sent to that shard when it is back (a restarted process answers that
 * it holds nothing); an expect made meanwhile holds. */
START_TEST(test_consumer_api_release_and_expect_during_reconnect)
{
    static fx f;
    fx_start(&f);
    fx_consumer(&f);
    fx_up(&f);
    uint64_t dl = xfer_consumer_now(f.c) + 30000000000ull;
    ck_assert_int_eq(xfer_consumer_expect(f.c, 1, dl), 0);
    ck_assert_int_eq(submit(&f, 1), 0);
    wait_id w1 = {&f, 1};
    ck_assert(run_until(&f, has_outcome, &w1));
    ck_assert(f.out[1].available); /* held on both shards */
    mp_kill(&f.d[1], SIGKILL);
    ck_assert(run_until(&f, link_down_k, &f));
    ck_assert_int_eq(xfer_consumer_release(f.c, 1), 0);
    ck_assert_int_eq(xfer_consumer_release(f.c, 1), XFER_ERR_NOT_FOUND);
    ck_assert_int_eq(xfer_consumer_expect(f.c, 2, dl), 0);
    ck_assert(shard_holds_nothing(&f, f.ports[0]));
    restart_xferd(&f, 1);
    ck_assert(run_until(&f, links_all_up, &f));
    ck_assert(mp_producer_wait_connected(&f.p, 10000));
    f.auto_release = true;
    ck_assert_int_eq(submit(&f, 2), 0);
    wait_id w2 = {&f, 2};
    ck_assert(run_until(&f, has_outcome, &w2));
    ck_assert(f.out[2].available);
    ck_assert_int_eq(xfer_consumer_close(f.c, 10000000000ull, on_closed, &f),
                     0);
    ck_assert(run_until(&f, is_closed, &f));
    ck_assert_int_eq(f.close_status, 0);
    for (uint16_t k = 0; k < S2; k++)
        ck_assert(shard_holds_nothing(&f, f.ports[k]));
    fx_stop(&f);
}
END_TEST

/* Items 2 and 3 together: a cancel and a close both made before any link
 * is up; the close ends once every shard acknowledged the cancel. */
START_TEST(test_consumer_api_close_before_links_up_delivers_cancel)
{
    static fx f;
    fx_start(&f);
    fx_consumer(&f);
    ck_assert_uint_eq(f.links_up, 0);
    ck_assert_int_eq(xfer_consumer_cancel(f.c, 7), 0);
    ck_assert_int_eq(xfer_consumer_close(f.c, 10000000000ull, on_closed, &f),
                     0);
    ck_assert(run_until(&f, is_closed, &f));
    ck_assert_int_eq(f.close_status, 0);
    uint64_t acked = 0;
    ck_assert_int_eq(xfer_consumer_cancel_shards(f.c, 7, &acked, NULL), 0);
    ck_assert_uint_eq(acked, 3);
    xfer_wire_status st;
    for (uint16_t k = 0; k < S2; k++) {
        ck_assert_int_eq(mp_status(f.ports[k], &st), 0);
        ck_assert_uint_ge(st.tombstones, 1);
    }
    fx_stop(&f);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Item 7: a producer's cancel just after submit reaches a waiting         */
/* consumer promptly, as the producer's cancel.                            */
/* ---------------------------------------------------------------------- */

static void producer_cancel_case(bool consumer_up_first)
{
    static fx f;
    fx_start(&f);
    ck_assert(mp_producer_wait_connected(&f.p, 10000));
    fx_consumer(&f);
    if (consumer_up_first)
        fx_up(&f);
    uint64_t far = xfer_consumer_now(f.c) + 60000000000ull; /* 60 s */
    ck_assert_int_eq(xfer_consumer_expect(f.c, 1, far), 0);
    ck_assert_int_eq(submit(&f, 1), 0);
    ck_assert_int_eq(xfer_engine_cancel(f.p.e, 1), 0);
    wait_id w = {&f, 1};
    ck_assert(run_until(&f, is_done, &w));
    ck_assert_int_eq(f.res[1].status, XFER_ERR_CANCELLED);
    /* Far less than the expect's own deadline. */
    ck_assert(run_until(&f, has_outcome, &w));
    ck_assert_uint_eq(f.out[1].n, 1);
    ck_assert(!f.out[1].available);
    ck_assert_int_eq(f.out[1].reason, XFER_ERR_CANCELLED);
    fx_stop(&f);
}

START_TEST(test_consumer_api_producer_cancel_reaches_expect)
{
    producer_cancel_case(true);
}
END_TEST

/* The producer cancelled before the consumer's links were up: the shard's
 * event was published to nobody. */
START_TEST(test_consumer_api_producer_cancel_before_subscribe)
{
    producer_cancel_case(false);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("consumer_api");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_consumer_api_cancel_before_links_up_reaches_shards);
    tcase_add_test(tc, test_consumer_api_close_max_shards_owing_nothing);
    tcase_add_test(tc, test_consumer_api_expect_before_links_up);
    tcase_add_test(tc, test_consumer_api_queue_cap_refuses_busy);
    tcase_add_test(tc, test_consumer_api_cancel_during_reconnect);
    tcase_add_test(tc, test_consumer_api_cancel_survives_shard_restart);
    tcase_add_test(tc, test_consumer_api_release_and_expect_during_reconnect);
    tcase_add_test(tc, test_consumer_api_release_then_close_empties_shards);
    tcase_add_test(tc, test_consumer_api_close_releases_held_and_refuses_after);
    tcase_add_test(tc, test_consumer_api_close_times_out_naming_shard);
    tcase_add_test(tc, test_consumer_api_close_before_links_up_delivers_cancel);
    tcase_add_test(tc, test_consumer_api_producer_cancel_reaches_expect);
    tcase_add_test(tc, test_consumer_api_producer_cancel_before_subscribe);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    int rc = tu_run(make_suite());
    mp_kill_all();
    return rc;
}
