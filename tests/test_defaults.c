/*
 * tests/test_defaults.c - the library defaults, by what they do (issue 14,
 * class 1), through the shared library.
 *
 * test_config.c checks what _default() writes; this file builds each
 * machine with NULL or a config whose timings and caps are all 0 (what
 * xferd runs with) and watches the defaults act: the caps bind where the
 * headers say, TTLs and deadlines end where they say (each probed just
 * before and just after), a failed cancel is retried the documented number
 * of times at the documented backoff.  It also checks that the configs
 * refuse the unsafe TTL combinations of DESIGN.md section 2: a shard
 * tombstone shorter than its lease, a producer tombstone shorter than the
 * consumer lease plus the network margin.
 */
#include <check.h>
#include <string.h>

#include "testutil.h"
#include "xfer/core.h"
#include "xfer/readiness.h"
#include "xfer/shard.h"

#define MS 1000000ull
#define SEC 1000000000ull

/* ---------------------------------------------------------------------- */
/* Unsafe combinations                                                     */
/* ---------------------------------------------------------------------- */

static int core_with(uint64_t tomb, uint64_t lease, uint64_t margin)
{
    xfer_core_config c;
    xfer_core_config_default(&c);
    c.tombstone_ttl_ns = tomb;
    c.consumer_lease_ns = lease;
    c.net_margin_ns = margin;
    xfer_core *core = NULL;
    int rc = xfer_core_new(&c, &core);
    xfer_core_del(core);
    return rc;
}

START_TEST(test_defaults_core_tombstone_below_lease_refused)
{
    /* The defaults (60 s >= 10 s + 20 s) are safe. */
    xfer_core_config d;
    xfer_core_config_default(&d);
    ck_assert_uint_eq(d.consumer_lease_ns, 10 * SEC);
    ck_assert_uint_eq(d.net_margin_ns, 20 * SEC);
    ck_assert_int_eq(core_with(0, 0, 0), 0);
    ck_assert_int_eq(core_with(30 * SEC, 0, 0), 0);
    /* One nanosecond short of lease + margin, given or defaulted. */
    ck_assert_int_eq(core_with(30 * SEC - 1, 0, 0), XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(core_with(5 * SEC, 2 * SEC, 3 * SEC), 0);
    ck_assert_int_eq(core_with(5 * SEC - 1, 2 * SEC, 3 * SEC),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(core_with(0, 40 * SEC, 0), 0);
    ck_assert_int_eq(core_with(0, 40 * SEC + 1, 0), XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(core_with(0, 0, 50 * SEC + 1), XFER_ERR_INVALID_ARG);
    /* lease + margin overflowing is refused, not wrapped. */
    ck_assert_int_eq(core_with(UINT64_MAX, UINT64_MAX, 2),
                     XFER_ERR_INVALID_ARG);
    xfer_core *core = (xfer_core *)&d;
    d.tombstone_ttl_ns = 1;
    ck_assert_int_eq(xfer_core_new(&d, &core), XFER_ERR_INVALID_ARG);
    ck_assert_ptr_eq(core, (xfer_core *)&d); /* untouched */
}
END_TEST

static int shard_with(uint64_t lease, uint64_t tomb)
{
    xfer_shard_config c;
    xfer_shard_config_default(&c);
    c.pool_bytes = 4096;
    c.lease_ttl_ns = lease;
    c.tombstone_ttl_ns = tomb;
    xfer_shard *s = NULL;
    int rc = xfer_shard_new(&c, &s);
    xfer_shard_del(s);
    return rc;
}

START_TEST(test_defaults_shard_tombstone_below_lease_refused)
{
    ck_assert_int_eq(shard_with(0, 0), 0);
    ck_assert_int_eq(shard_with(0, 10 * SEC), 0);
    ck_assert_int_eq(shard_with(0, 10 * SEC - 1), XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(shard_with(3 * SEC, 3 * SEC), 0);
    ck_assert_int_eq(shard_with(3 * SEC, 3 * SEC - 1), XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(shard_with(30 * SEC, 0), 0); /* 0: twice the lease */
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The producer core                                                       */
/* ---------------------------------------------------------------------- */

static xfer_submit_args one_shard(uint64_t id, const xfer_slice *sl)
{
    return (xfer_submit_args){.id = id, .group = 1, .nshards = 1, .pool = 1,
                              .slices = sl};
}

START_TEST(test_defaults_core_caps_bind)
{
    xfer_core *c;
    ck_assert_int_eq(xfer_core_new(NULL, &c), 0);
    xfer_slice sl = {.off = 0, .len = 64};
    for (uint64_t id = 1; id <= 65536; id++) {
        xfer_submit_args a = one_shard(id, &sl);
        ck_assert_int_eq(xfer_core_submit(c, 0, &a), 0);
        xfer_core_actions_clear(c);
    }
    xfer_submit_args a = one_shard(65537, &sl);
    ck_assert_int_eq(xfer_core_submit(c, 0, &a), XFER_ERR_BUSY);
    /* 4 x 65536 tombstone slots: the live ones hold 65536, pre-emptive
     * cancels of unknown ids take the rest, and then the cap binds. */
    for (uint64_t id = 1000000; id < 1000000 + 3 * 65536; id++) {
        ck_assert_int_eq(xfer_core_cancel(c, 0, id), 0);
        xfer_core_actions_clear(c);
    }
    ck_assert_int_eq(xfer_core_cancel(c, 0, 5000000), XFER_ERR_BUSY);
    xfer_core_del(c);
}
END_TEST

START_TEST(test_defaults_core_deadline_and_tombstone_ttl)
{
    xfer_core_config z = {.version = XFER_CORE_CONFIG_VERSION};
    xfer_core *c;
    ck_assert_int_eq(xfer_core_new(&z, &c), 0);
    xfer_slice sl = {.off = 0, .len = 64};
    xfer_submit_args a = one_shard(1, &sl);
    ck_assert_int_eq(xfer_core_submit(c, 0, &a), 0);
    xfer_core_actions_clear(c);
    ck_assert_uint_eq(xfer_core_next_deadline(c), 30 * SEC);

    /* A tombstone made at t = 1 s refuses the id until 61 s. */
    ck_assert_int_eq(xfer_core_cancel(c, 1 * SEC, 7), 0);
    xfer_core_actions_clear(c);
    xfer_core_on_timer(c, 60 * SEC);
    xfer_core_actions_clear(c);
    a = one_shard(7, &sl);
    ck_assert_int_eq(xfer_core_submit(c, 60 * SEC, &a), XFER_ERR_CANCELLED);
    xfer_core_on_timer(c, 62 * SEC);
    xfer_core_actions_clear(c);
    ck_assert_int_eq(xfer_core_submit(c, 62 * SEC, &a), 0);
    xfer_core_del(c);
}
END_TEST

START_TEST(test_defaults_core_cancel_retries)
{
    xfer_core *c;
    ck_assert_int_eq(xfer_core_new(NULL, &c), 0);
    xfer_slice sl = {.off = 0, .len = 64};
    xfer_submit_args a = one_shard(1, &sl);
    ck_assert_int_eq(xfer_core_submit(c, 0, &a), 0);
    size_t n;
    const xfer_action *acts = xfer_core_actions(c, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(acts[0].kind, XFER_ACT_RESERVE);
    uint32_t attempt = acts[0].attempt;
    xfer_core_actions_clear(c);
    /* The reserve fails: the rollback cancels shard 0, and every cancel
     * fails; retries come after 10 ms, 20 ms, ... until 5 attempts. */
    xfer_shard_result r = {.id = 1, .attempt = attempt, .shard = 0,
                           .op = XFER_OP_RESERVE,
                           .status = XFER_ERR_NO_SPACE};
    uint64_t now = 1 * MS, backoff = 10 * MS;
    unsigned cancels = 0;
    bool completed = false;
    ck_assert_int_eq(xfer_core_on_result(c, now, &r), 0);
    for (unsigned round = 0; round < 20 && !completed; round++) {
        acts = xfer_core_actions(c, &n);
        bool sent = false;
        for (size_t i = 0; i < n; i++) {
            if (acts[i].kind == XFER_ACT_CANCEL)
                sent = true;
            if (acts[i].kind == XFER_ACT_COMPLETE) {
                completed = true;
                ck_assert_uint_eq(acts[i].result.rollback_failed, 1);
            }
        }
        xfer_core_actions_clear(c);
        if (completed)
            break;
        if (sent) {
            cancels++;
            r.op = XFER_OP_CANCEL;
            r.status = XFER_ERR_BUSY;
            ck_assert_int_eq(xfer_core_on_result(c, now, &r), 0);
            continue;
        }
        /* waiting for the retry: due exactly one backoff after the
         * failure, doubled every round */
        ck_assert_uint_eq(xfer_core_next_deadline(c), now + backoff);
        xfer_core_on_timer(c, now + backoff - 1);
        xfer_core_actions(c, &n);
        ck_assert_uint_eq(n, 0); /* not one nanosecond early */
        now += backoff;
        backoff *= 2;
        xfer_core_on_timer(c, now);
    }
    ck_assert(completed);
    ck_assert_uint_eq(cancels, 5);
    xfer_core_del(c);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The consumer shard                                                      */
/* ---------------------------------------------------------------------- */

static xfer_shard *default_shard(void)
{
    xfer_shard_config c;
    memset(&c, 0, sizeof c);
    c.version = XFER_SHARD_CONFIG_VERSION;
    c.pool_bytes = 4097 * 64;
    xfer_shard *s;
    ck_assert_int_eq(xfer_shard_new(&c, &s), 0);
    return s;
}

START_TEST(test_defaults_shard_caps_bind)
{
    xfer_shard *s = default_shard();
    xfer_resv_info info;
    for (uint64_t id = 1; id <= 4096; id++) {
        ck_assert_int_eq(xfer_shard_reserve(s, 0, id, 1, 1, &info), 0);
        xfer_shard_events_clear(s);
    }
    ck_assert_int_eq(xfer_shard_reserve(s, 0, 4097, 1, 1, &info),
                     XFER_ERR_BUSY);
    /* 4 x 4096 tombstone slots: the live reservations hold 4096, and
     * consumer cancels of unknown ids fill the rest. */
    unsigned ok = 0;
    for (uint64_t id = 100000; id < 100000 + 5 * 4096; id++) {
        int rc = xfer_shard_cancel(s, 0, id, 0, XFER_RESV_NONE);
        xfer_shard_events_clear(s);
        if (rc) {
            ck_assert_int_eq(rc, XFER_ERR_BUSY);
            break;
        }
        ok++;
    }
    ck_assert_uint_eq(ok, 3 * 4096);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_defaults_shard_lease_and_tombstone_ttl)
{
    xfer_shard *s = default_shard();
    xfer_resv_info info;
    ck_assert_int_eq(xfer_shard_reserve(s, 0, 1, 1, 64, &info), 0);
    xfer_shard_events_clear(s);
    xfer_shard_on_timer(s, 10 * SEC - 1);
    xfer_shard_events_clear(s);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_RESERVED);
    xfer_shard_on_timer(s, 10 * SEC);
    xfer_shard_events_clear(s);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_EXPIRED);
    /* The tombstone lives twice the lease, then the id is free again. */
    xfer_shard_on_timer(s, 30 * SEC - 1);
    xfer_shard_events_clear(s);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_EXPIRED);
    xfer_shard_on_timer(s, 30 * SEC + 1 * SEC);
    xfer_shard_events_clear(s);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_NONE);
    xfer_shard_del(s);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The consumer readiness tracker                                          */
/* ---------------------------------------------------------------------- */

static xfer_readiness *default_tracker(void)
{
    xfer_readiness_config c;
    memset(&c, 0, sizeof c);
    c.version = XFER_READINESS_CONFIG_VERSION;
    c.nshards = 2;
    xfer_readiness *r;
    ck_assert_int_eq(xfer_readiness_new(&c, &r), 0);
    return r;
}

START_TEST(test_defaults_readiness_caps_bind)
{
    xfer_readiness *r = default_tracker();
    for (uint64_t id = 1; id <= 65536; id++) {
        ck_assert_int_eq(xfer_readiness_on_ready(r, 0, id, 1, 0, 1), 0);
        xfer_readiness_actions_clear(r);
    }
    ck_assert_int_eq(xfer_readiness_on_ready(r, 0, 65537, 1, 0, 1),
                     XFER_ERR_BUSY);
    xfer_readiness_del(r);
}
END_TEST

static bool unavailable(xfer_readiness *r, uint64_t id)
{
    size_t n;
    const xfer_ready_action *a = xfer_readiness_actions(r, &n);
    bool seen = false;
    for (size_t i = 0; i < n; i++)
        seen = seen || (a[i].id == id &&
                        a[i].kind == XFER_READY_ACT_UNAVAILABLE);
    xfer_readiness_actions_clear(r);
    return seen;
}

START_TEST(test_defaults_readiness_deadline_and_tombstone_ttl)
{
    xfer_readiness *r = default_tracker();
    ck_assert_int_eq(xfer_readiness_on_ready(r, 0, 1, 1, 0, 1), 0);
    xfer_readiness_actions_clear(r);
    xfer_readiness_on_timer(r, 30 * SEC - 1);
    ck_assert(!unavailable(r, 1));
    xfer_readiness_on_timer(r, 30 * SEC);
    ck_assert(unavailable(r, 1));
    /* Its tombstone absorbs a late ready for 60 s. */
    xfer_readiness_stats st;
    xfer_readiness_on_timer(r, 90 * SEC - 1);
    xfer_readiness_actions_clear(r);
    ck_assert_int_eq(xfer_readiness_on_ready(r, 90 * SEC - 1, 1, 1, 1, 2), 0);
    xfer_readiness_actions_clear(r);
    ck_assert_int_eq(xfer_readiness_stats_get(r, &st), 0);
    ck_assert_uint_eq(st.late_ready, 1);
    ck_assert_uint_eq(st.live, 0);
    xfer_readiness_on_timer(r, 91 * SEC);
    xfer_readiness_actions_clear(r);
    ck_assert_int_eq(xfer_readiness_on_ready(r, 91 * SEC, 1, 1, 1, 2), 0);
    xfer_readiness_actions_clear(r);
    ck_assert_int_eq(xfer_readiness_stats_get(r, &st), 0);
    ck_assert_uint_eq(st.late_ready, 1);
    ck_assert_uint_eq(st.live, 1);
    xfer_readiness_del(r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("defaults");
    TCase *tc = tcase_create("defaults");
    tcase_add_test(tc, test_defaults_core_tombstone_below_lease_refused);
    tcase_add_test(tc, test_defaults_shard_tombstone_below_lease_refused);
    tcase_add_test(tc, test_defaults_core_caps_bind);
    tcase_add_test(tc, test_defaults_core_deadline_and_tombstone_ttl);
    tcase_add_test(tc, test_defaults_core_cancel_retries);
    tcase_add_test(tc, test_defaults_shard_caps_bind);
    tcase_add_test(tc, test_defaults_shard_lease_and_tombstone_ttl);
    tcase_add_test(tc, test_defaults_readiness_caps_bind);
    tcase_add_test(tc, test_defaults_readiness_deadline_and_tombstone_ttl);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
