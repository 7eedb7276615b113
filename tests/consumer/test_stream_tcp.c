/*
 * tests/consumer/test_stream_tcp.c - streamed transfers (xfer/stream.h)
 * over TCP to real xferd shard processes, with a consumer process that
 * reads every available transfer in place from the shards' shared memory
 * and checks every byte (roles.c): the producer process opens each id as
 * a stream of four layers, each a part gathering blocks that lie
 * scattered in its staging, two parts before the reserves answered and
 * two, out of order, once the first part came back, then seals.
 *
 * Asserted: every stream completes once and succeeds; the consumer saw
 * every id available, with the producer's bytes; no shard holds a byte
 * once both sides are done; then, with shard 1 killed mid-run, every
 * stream still completes once, none that failed while writing is
 * available anywhere, and the surviving shards free every byte.
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
#include "xfer/core.h"
#include "xfer/errors.h"
#include "xfer/shm.h"

#define S 4

static mp_proc d[S];
static uint16_t ports[S];
static char shm[64];

static void setup(void)
{
    snprintf(shm, sizeof shm, "xfer-stream-%d", (int)getpid());
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

START_TEST(test_stream_tcp_every_byte_at_the_consumer)
{
    uint64_t seed = tu_seed("test_stream_tcp_every_byte_at_the_consumer", 26);
    const uint64_t n = 200;
    role p, c;
    ck_assert_int_eq(role_consumer(&c, ports, S, shm, seed), 0);
    usleep(200000); /* subscribed before the first commit */
    ck_assert_int_eq(role_producer_stream(&p, ports, S, n, 16, seed), 0);
    wait_lines(&p, "END", 1, 60000);
    wait_lines(&c, "C ", n, 30000);
    pools_free(-1, 5000);
    role_kill(&c, SIGTERM);
    role_out *o = calloc(n + 1, sizeof *o);
    role_parse(&p, &c, o, n);
    for (uint64_t id = 1; id <= n; id++) {
        ck_assert_msg(o[id].pn == 1, "id %" PRIu64 ": %u completions", id,
                      o[id].pn);
        ck_assert_msg(o[id].pstatus == 0, "id %" PRIu64 " failed: %d", id,
                      o[id].pstatus);
        ck_assert_msg(o[id].cn == 1 && o[id].cavail && o[id].cver,
                      "id %" PRIu64 ": consumer %u outcomes, available %u, "
                      "verified %u", id, o[id].cn, o[id].cavail, o[id].cver);
    }
    free(o);
    role_kill(&p, SIGKILL);
    role_free(&p);
    role_free(&c);
}
END_TEST

START_TEST(test_stream_tcp_shard_killed_mid_stream)
{
    uint64_t seed = tu_seed("test_stream_tcp_shard_killed_mid_stream", 27);
    const uint64_t n = 400;
    role p, c;
    ck_assert_int_eq(role_consumer(&c, ports, S, shm, seed), 0);
    usleep(200000);
    ck_assert_int_eq(role_producer_stream(&p, ports, S, n, 16, seed), 0);
    wait_lines(&p, "P ", 50 + seed % 50, 30000);
    mp_kill(&d[1], SIGKILL);
    wait_lines(&p, "END", 1, 60000);
    pools_free(1, 7000);
    role_poll(&c, 300);
    role_kill(&c, SIGTERM);
    role_out *o = calloc(n + 1, sizeof *o);
    role_parse(&p, &c, o, n);
    uint64_t done = 0, failed = 0;
    for (uint64_t id = 1; id <= n; id++) {
        const role_out *x = &o[id];
        ck_assert_msg(x->pn == 1 && x->cn <= 1, "id %" PRIu64
                      ": %u producer, %u consumer outcomes", id, x->pn, x->cn);
        if (x->cavail)
            ck_assert_msg(x->cver, "id %" PRIu64 ": wrong bytes", id);
        if (x->pstatus != 0 && (x->pphase == XFER_PHASE_RESERVING ||
                                x->pphase == XFER_PHASE_WRITING ||
                                x->pphase == XFER_PHASE_SUBMIT))
            ck_assert_msg(!x->cavail, "id %" PRIu64 " failed in phase %u "
                          "yet is available", id, x->pphase);
        done += x->pstatus == 0;
        failed += x->pstatus != 0;
    }
    printf("stream_tcp_shard_killed: done %" PRIu64 ", failed %" PRIu64 "\n",
           done, failed);
    ck_assert_uint_gt(done, 0);
    ck_assert_uint_gt(failed, 0); /* the dead shard failed the rest */
    free(o);
    role_kill(&p, SIGKILL);
    role_free(&p);
    role_free(&c);
}
END_TEST

/* Shards whose lease is 200 ms, for the late streams below. */
static void setup_short_lease(void)
{
    snprintf(shm, sizeof shm, "xfer-stream-%d", (int)getpid());
    for (int k = 0; k < S; k++) {
        char shard[8];
        snprintf(shard, sizeof shard, "%d", k);
        const char *args[] = {"--shards", shard, "--pool", "32M",
                              "--lease-ttl", "200ms", "--take-grace", "1s",
                              "--shm", shm, "--quiet", NULL};
        ck_assert_int_eq(mp_xferd(&d[k], 0, args), 0);
        ports[k] = d[k].port;
    }
}

/* Issue 26: streams whose first part comes 700 ms (three and a half
 * leases) after the open: the producer refreshes each shard's reservation
 * (REFRESH, HELLO_ACK flag 4), so every stream still succeeds and the
 * consumer process sees every byte.  Without the refresh each would fail
 * EXPIRED (it did before it existed). */
START_TEST(test_stream_tcp_late_first_part_outlives_the_lease)
{
    uint64_t seed = tu_seed("test_stream_tcp_late_first_part_outlives_the_lease",
                            28);
    const uint64_t n = 8;
    role p, c;
    ck_assert_int_eq(role_consumer(&c, ports, S, shm, seed), 0);
    usleep(200000); /* subscribed before the first commit */
    ck_assert_int_eq(role_producer_stream_late(&p, ports, S, n, 8, seed, 700),
                     0);
    wait_lines(&p, "END", 1, 60000);
    wait_lines(&c, "C ", n, 30000);
    pools_free(-1, 5000);
    role_kill(&c, SIGTERM);
    role_out *o = calloc(n + 1, sizeof *o);
    role_parse(&p, &c, o, n);
    for (uint64_t id = 1; id <= n; id++) {
        ck_assert_msg(o[id].pn == 1 && o[id].pstatus == 0,
                      "id %" PRIu64 ": %u completions, status %d", id,
                      o[id].pn, o[id].pstatus);
        ck_assert_msg(o[id].cn == 1 && o[id].cavail && o[id].cver,
                      "id %" PRIu64 ": consumer %u outcomes, available %u, "
                      "verified %u", id, o[id].cn, o[id].cavail, o[id].cver);
    }
    free(o);
    role_kill(&p, SIGKILL);
    role_free(&p);
    role_free(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stream_tcp");
    TCase *tc = tcase_create("tcp");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 150);
    tcase_add_test(tc, test_stream_tcp_every_byte_at_the_consumer);
    tcase_add_test(tc, test_stream_tcp_shard_killed_mid_stream);
    suite_add_tcase(s, tc);
    TCase *late = tcase_create("lease");
    tcase_add_checked_fixture(late, setup_short_lease, teardown);
    tcase_set_timeout(late, 150);
    tcase_add_test(late, test_stream_tcp_late_first_part_outlives_the_lease);
    suite_add_tcase(s, late);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
