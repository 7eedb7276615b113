/*
 * tests/consumer/test_killall.c - kill -9 of each role under load, with
 * real processes: 4 xferd --shm shard servers, a producer process and a
 * consumer-scheduler process (roles.c) that reads available data in place
 * from the shards' shared memory.
 *
 * test_killall_shard: a shard dies; the survivors agree (a transfer the
 *   producer reports done is available to the consumer with right bytes,
 *   or unavailable because the dead shard's link was lost while it waited;
 *   one that failed before COMPLETING is never available; one outcome per
 *   id on each side), and every byte of every surviving pool is back once
 *   the leases (1 s) ran out.
 * test_killall_consumer: the consumer dies holding what it holds; the
 *   producer finishes every transfer; every byte of every pool is back
 *   once the leases and the take grace period (1 s each) ran out.
 * test_killall_producer: the producer dies mid-stream; everything it
 *   reported done is available to the consumer, and every pool is empty
 *   once the leases ran out.
 */
#define _DEFAULT_SOURCE /* usleep */
#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mp.h"
#include "roles.h"
#include "testutil.h"
#include "xfer/errors.h"
#include "xfer/core.h"
#include "xfer/shm.h"

#define S 4
#define LEASE_MS 1000
#define GRACE_MS 1000

static mp_proc d[S];
static uint16_t ports[S];
static char shm[64];

static void setup(void)
{
    snprintf(shm, sizeof shm, "xfer-killall-%d", (int)getpid());
    for (int k = 0; k < S; k++) {
        char shard[8];
        snprintf(shard, sizeof shard, "%d", k);
        const char *args[] = {"--shards", shard, "--pool", "32M",
                              "--lease-ttl", "1s", "--take-grace", "1s",
                              "--max-resv", "8192", "--shm", shm, "--quiet",
                              NULL};
        ck_assert_int_eq(mp_xferd(&d[k], 0, args), 0);
        ports[k] = d[k].port;
    }
}

static void teardown(void)
{
    mp_kill_all();
    for (uint16_t k = 0; k < S; k++)
        xfer_shm_unlink(shm, k);
}

static void wait_lines(role *r, const char *prefix, size_t n, int ms)
{
    uint64_t end = mp_now_ms() + (uint64_t)ms;
    while (role_count(r, prefix) < n && !r->eof && mp_now_ms() < end)
        role_poll(r, 50);
    ck_assert_msg(role_count(r, prefix) >= n, "only %zu '%s' lines",
                  role_count(r, prefix), prefix);
}

static void pools_free(int skip, int ms)
{
    for (int k = 0; k < S; k++) {
        if (k == skip)
            continue;
        xfer_wire_status st;
        ck_assert_msg(mp_wait_pool_free(ports[k], ms, &st) == 0,
                      "shard %d still holds %" PRIu64 " bytes, %" PRIu64
                      " reservations", k, st.bytes_in_use, st.live);
    }
}

typedef struct tally {
    uint64_t done, avail, lost;
} tally;

/* The rules both sides keep (see the file's comment); `lost_ok`: a shard
 * died, so a done transfer may be unavailable for its lost link. */
static tally check(const role_out *o, uint64_t n, bool producer_whole,
                   bool consumer_whole, bool lost_ok)
{
    tally t = {0};
    for (uint64_t id = 1; id <= n; id++) {
        const role_out *x = &o[id];
        ck_assert_msg(x->pn <= 1 && x->cn <= 1, "id %" PRIu64
                      ": %u producer, %u consumer outcomes", id, x->pn, x->cn);
        if (producer_whole)
            ck_assert_msg(x->pn == 1, "id %" PRIu64 " never completed", id);
        if (x->cavail)
            ck_assert_msg(x->cver, "id %" PRIu64 ": wrong bytes", id);
        t.avail += x->cavail;
        if (x->pn && x->pstatus != 0 &&
            (x->pphase == XFER_PHASE_RESERVING ||
             x->pphase == XFER_PHASE_WRITING || x->pphase == XFER_PHASE_SUBMIT))
            ck_assert_msg(!x->cavail, "id %" PRIu64 " failed in phase %u "
                          "yet is available", id, x->pphase);
        if (!x->pn || x->pstatus != 0)
            continue;
        t.done++;
        if (!consumer_whole)
            continue;
        if (lost_ok && x->cn && !x->cavail &&
            (x->creason == XFER_ERR_CONN_LOST ||
             x->creason == XFER_ERR_EXPIRED)) {
            t.lost++;
            continue;
        }
        ck_assert_msg(x->cn == 1 && x->cavail, "id %" PRIu64 " done but %s "
                      "(reason %d)", id, x->cn ? "unavailable" : "unreported",
                      x->creason);
    }
    return t;
}

START_TEST(test_killall_shard)
{
    uint64_t seed = tu_seed("test_killall_shard", 11);
    const uint64_t n = 800;
    role p, c;
    ck_assert_int_eq(role_consumer(&c, ports, S, shm, seed), 0);
    usleep(200000); /* subscribed before the first commit */
    ck_assert_int_eq(role_producer(&p, ports, S, n, 32, seed), 0);
    wait_lines(&p, "P ", 200 + seed % 100, 30000);
    mp_kill(&d[1], SIGKILL);
    wait_lines(&p, "END", 1, 60000);
    pools_free(1, LEASE_MS + GRACE_MS + 5000);
    role_poll(&c, 300);
    role_kill(&c, SIGTERM);
    role_out *o = calloc(n + 1, sizeof *o);
    role_parse(&p, &c, o, n);
    tally t = check(o, n, true, true, true);
    printf("killall_shard: done %" PRIu64 ", available %" PRIu64
           ", lost to the dead shard %" PRIu64 "\n", t.done, t.avail, t.lost);
    ck_assert_uint_gt(t.done, 0);
    ck_assert_uint_lt(t.done, n); /* the dead shard failed the rest */
    free(o);
    role_kill(&p, SIGKILL);
    role_free(&p);
    role_free(&c);
}
END_TEST

START_TEST(test_killall_consumer)
{
    uint64_t seed = tu_seed("test_killall_consumer", 12);
    const uint64_t n = 800;
    role p, c;
    ck_assert_int_eq(role_consumer(&c, ports, S, shm, seed), 0);
    usleep(200000);
    ck_assert_int_eq(role_producer(&p, ports, S, n, 32, seed), 0);
    wait_lines(&c, "C ", 200 + seed % 100, 30000);
    role_kill(&c, SIGKILL);
    wait_lines(&p, "END", 1, 60000);
    pools_free(-1, LEASE_MS + GRACE_MS + 5000);
    role_out *o = calloc(n + 1, sizeof *o);
    role_parse(&p, &c, o, n);
    tally t = check(o, n, true, false, false);
    printf("killall_consumer: done %" PRIu64 ", available before the kill "
           "%" PRIu64 "\n", t.done, t.avail);
    ck_assert_uint_eq(t.done, n); /* the producer never needed it */
    free(o);
    role_kill(&p, SIGKILL);
    role_free(&p);
    role_free(&c);
}
END_TEST

START_TEST(test_killall_producer)
{
    uint64_t seed = tu_seed("test_killall_producer", 13);
    const uint64_t n = 1000000;
    role p, c;
    ck_assert_int_eq(role_consumer(&c, ports, S, shm, seed), 0);
    usleep(200000);
    ck_assert_int_eq(role_producer(&p, ports, S, n, 32, seed), 0);
    wait_lines(&p, "P ", 300 + seed % 100, 30000);
    role_kill(&p, SIGKILL);
    pools_free(-1, LEASE_MS + 5000);
    role_poll(&c, 300);
    role_kill(&c, SIGTERM);
    const uint64_t seen = 4000;
    role_out *o = calloc(seen + 1, sizeof *o);
    role_parse(&p, &c, o, seen);
    tally t = check(o, seen, false, true, false);
    printf("killall_producer: done before the kill %" PRIu64
           ", available %" PRIu64 "\n", t.done, t.avail);
    ck_assert_uint_gt(t.done, 0);
    free(o);
    role_free(&p);
    role_free(&c);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("killall");
    TCase *tc = tcase_create("killall");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_killall_shard);
    tcase_add_test(tc, test_killall_consumer);
    tcase_add_test(tc, test_killall_producer);
    suite_add_tcase(su, tc);
    int rc = tu_run(su);
    mp_kill_all();
    return rc;
}
