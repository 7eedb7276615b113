/*
 * tests/multiproc/test_transfers.c - 10 000 transfers through the tcp
 * transport to 4 xferd processes with a seeded fault mix: xferd refuses,
 * applies-then-reports-failure, or drops the connection on a fraction of
 * ops; the producer cancels some transfers and drops some connections
 * itself.  Asserts: every accepted transfer completes exactly once (and a
 * failure names a shard of the group); at the end every shard pool is back
 * to full (asked through STATUS: no bytes in use, no live reservation) and
 * the producer staging is entirely free (engine accounting at 0, every
 * staging slot returned, the pool unregisters at shutdown).  Also: xferd's
 * control socket lists an open reservation under its real shard index.
 */
#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "mp.h"
#include "testutil.h"

#define NSHARDS 4
#define TOTAL 10000
#define INFLIGHT 256
#define SLICE_MAX (16u << 10)

typedef struct run {
    mp_producer p;
    uint64_t rng;
    uint8_t *seen;          /* completions per id */
    uint32_t slot_of[TOTAL + 1];
    uint32_t free_slots[INFLIGHT], nfree;
    uint64_t live_ids[INFLIGHT];
    uint32_t submitted, completed, succeeded, dup, bad_shard;
    uint32_t fail_conn, fail_other;
} run;

static void submit_next(run *r);

static void on_done(void *ud, const xfer_result *res)
{
    run *r = ud;
    uint64_t id = res->id;
    if (id == 0 || id > TOTAL || r->seen[id]++) {
        r->dup++;
        return;
    }
    r->completed++;
    if (res->status == 0) {
        r->succeeded++;
    } else {
        if (res->first_failed_shard >= NSHARDS && res->failed_shards == 0 &&
            res->status != XFER_ERR_CANCELLED)
            r->bad_shard++;
        if (res->status == XFER_ERR_CONN_LOST)
            r->fail_conn++;
        else
            r->fail_other++;
    }
    uint32_t slot = r->slot_of[id];
    r->live_ids[slot] = 0;
    r->free_slots[r->nfree++] = slot;
    if (r->submitted < TOTAL)
        submit_next(r);
}

static void submit_next(run *r)
{
    uint64_t id = ++r->submitted;
    uint32_t slot = r->free_slots[--r->nfree];
    xfer_slice sl[NSHARDS];
    for (int k = 0; k < NSHARDS; k++) {
        sl[k].off = ((uint64_t)slot * NSHARDS + (uint64_t)k) * SLICE_MAX;
        sl[k].len = 1 + (uint32_t)(tu_rand(&r->rng) % SLICE_MAX);
    }
    xfer_transfer_desc d = {.id = id, .group = r->p.group, .pool = r->p.pool,
                            .nslices = NSHARDS, .slices = sl};
    int rc = xfer_engine_submit(r->p.e, &d, on_done, r);
    ck_assert_int_eq(rc, 0);
    r->slot_of[id] = slot;
    r->live_ids[slot] = id;
    uint64_t dice = tu_rand(&r->rng) % 1000;
    if (dice < 15) { /* cancel a random live transfer */
        uint64_t victim = r->live_ids[tu_rand(&r->rng) % INFLIGHT];
        xfer_engine_cancel(r->p.e, victim ? victim : id);
    } else if (dice < 17)
        xfer_tcp_drop(r->p.tcp, (uint16_t)(tu_rand(&r->rng) % NSHARDS));
}

static bool all_done(void *ud)
{
    return ((run *)ud)->completed + ((run *)ud)->dup >= TOTAL;
}

START_TEST(test_transfers_10k_faults)
{
    uint64_t seed = tu_seed("test_transfers_10k_faults", 0x5eed1234);
    static run r;
    memset(&r, 0, sizeof r);
    r.rng = seed;
    r.seen = calloc(TOTAL + 1, 1);
    mp_proc d[NSHARDS];
    uint16_t ports[NSHARDS];
    for (int k = 0; k < NSHARDS; k++) {
        char shard[8], faults[48];
        snprintf(shard, sizeof shard, "%d", k);
        snprintf(faults, sizeof faults, "20000:%" PRIu64, seed + (uint64_t)k);
        const char *args[] = {"--shards", shard, "--pool", "64M",
                              "--lease-ttl", "2s", "--consume", "--faults",
                              faults, "--drop", "100", "--quiet", NULL};
        ck_assert_int_eq(mp_xferd(&d[k], 0, args), 0);
        ports[k] = d[k].port;
    }
    ck_assert_int_eq(mp_producer_new(&r.p, ports, NSHARDS,
                                     (size_t)INFLIGHT * NSHARDS * SLICE_MAX,
                                     5000000000ull), 0);
    ck_assert(mp_producer_wait_connected(&r.p, 10000));
    for (uint32_t i = 0; i < INFLIGHT; i++)
        r.free_slots[r.nfree++] = INFLIGHT - 1 - i;
    for (uint32_t i = 0; i < INFLIGHT; i++)
        submit_next(&r);
    ck_assert(mp_run_while(r.p.base, all_done, &r, 240000));
    printf("transfers: %u completed, %u ok, %u conn-lost, %u other\n",
           r.completed, r.succeeded, r.fail_conn, r.fail_other);
    ck_assert_uint_eq(r.dup, 0);
    ck_assert_uint_eq(r.completed, TOTAL);
    ck_assert_uint_eq(r.bad_shard, 0);
    ck_assert_uint_gt(r.succeeded, 0);
    ck_assert_uint_gt(r.fail_conn + r.fail_other, 0); /* faults fired */
    for (uint64_t id = 1; id <= TOTAL; id++)
        ck_assert_uint_eq(r.seen[id], 1);
    ck_assert_uint_eq(r.nfree, INFLIGHT);
    xfer_engine_stats es;
    xfer_engine_stats_get(r.p.e, &es);
    ck_assert_uint_eq(es.staging_bytes_in_use, 0);
    ck_assert_uint_eq(xfer_tcp_outstanding(r.p.tcp), 0);
    /* The pool is unregistered by shutdown; a live user would refuse it. */
    ck_assert(mp_producer_del(&r.p, 30000));
    for (int k = 0; k < NSHARDS; k++) {
        xfer_wire_status st;
        int rc = mp_wait_pool_free(ports[k], 20000, &st);
        printf("shard %d: pool %" PRIu64 " in use %" PRIu64 " live %" PRIu64
               " reserves %" PRIu64 " expiries %" PRIu64 "\n",
               k, st.pool_bytes, st.bytes_in_use, st.live, st.reserves,
               st.expiries);
        ck_assert_int_eq(rc, 0);
    }
    free(r.seen);
    mp_kill_all();
}
END_TEST

/* The whole reply of the control socket at path (malloc'ed), read with a
 * blocking client until the server closes. */
static char *ctl_read(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t n = 0, cap = 4096;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    for (;;) {
        if (cap - n < 1024) {
            cap *= 2;
            buf = realloc(buf, cap);
            ck_assert_ptr_nonnull(buf);
        }
        ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
        ck_assert_int_ge(r, 0); /* no timeout: the server closes */
        if (r == 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    close(fd);
    return buf;
}

/* xferd hosting shard 3 alone: its --ctl snapshot names an open
 * reservation by the real shard index, with its state. */
START_TEST(test_transfers_ctl_lists_open_reservation)
{
    char path[96];
    snprintf(path, sizeof path, "/tmp/xfer-test-ctl-%d.sock", (int)getpid());
    unlink(path);
    const char *args[] = {"--shards", "3", "--pool", "1M", "--ctl", path,
                          "--quiet", NULL};
    mp_proc d;
    ck_assert_int_eq(mp_xferd(&d, 0, args), 0);
    int fd = mp_connect(d.port);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(mp_hello(fd, 3), 0);
    xfer_wire_msg m = {.type = XFER_WIRE_T_RESERVE, .id = 4242, .attempt = 1,
                       .len = 4096};
    ck_assert_int_eq(tw_send_msg(fd, &m, 7, NULL), 0);
    xfer_wire_hdr h;
    xfer_wire_msg ok;
    ck_assert_int_eq(tw_recv_msg(fd, &h, &ok), 0);
    ck_assert_uint_eq(h.type, XFER_WIRE_T_RESERVE_OK);
    char *reply = ctl_read(path);
    printf("ctl reply:\n%s", reply);
    ck_assert_ptr_nonnull(strstr(reply, "\"kind\":\"reservation\",\"shard\":3,"
                                        "\"id\":4242,\"attempt\":1,"
                                        "\"state\":\"RESERVED\""));
    free(reply);
    close(fd);
    mp_kill(&d, SIGKILL); /* SIGTERM would drain: wait out the lease */
    unlink(path);
    mp_kill_all();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("transfers");
    TCase *tc = tcase_create("tcp");
    tcase_set_timeout(tc, 280);
    tcase_add_test(tc, test_transfers_10k_faults);
    tcase_add_test(tc, test_transfers_ctl_lists_open_reservation);
    suite_add_tcase(s, tc);
    int rc = tu_run(s);
    mp_kill_all();
    return rc;
}
