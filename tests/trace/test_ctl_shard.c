/*
 * tests/trace/test_ctl_shard.c - the shard snapshot helper of the control
 * socket (what xferd serves): open reservations of every shard, with state,
 * age and what each waits for; tombstones left out.  And both sides live at
 * once: an engine on the loop transport whose shard 1 never answers a
 * write (XFER_FAULT_DROP), seen from the engine's socket and the shards'.
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "testutil.h"
#include "ctlclient.h"
#include "xfer/ctl.h"
#include "xfer/loop.h"

static uint64_t fake_now;
static uint64_t fake_clock(void *ud)
{
    return fake_now;
}

START_TEST(test_ctl_shard_snapshot)
{
    xfer_shard *sh[2];
    for (uint16_t k = 0; k < 2; k++) {
        xfer_shard_config c;
        xfer_shard_config_default(&c);
        c.pool_bytes = 1 << 16;
        c.shard_index = k;
        ck_assert_int_eq(xfer_shard_new(&c, &sh[k]), 0);
    }
    xfer_resv_info a, b, c;
    ck_assert_int_eq(xfer_shard_reserve(sh[0], 1000, 5, 1, 128, &a), 0);
    ck_assert_int_eq(xfer_shard_reserve(sh[1], 1000, 5, 1, 128, &b), 0);
    ck_assert_int_eq(xfer_shard_reserve(sh[1], 2000, 6, 2, 128, &c), 0);
    uint8_t *dst;
    ck_assert_int_eq(xfer_shard_write_begin(sh[1], 3000, 5, 1, b.resv_id, 0,
                                            64, &dst),
                     0);
    static const uint8_t bytes[128];
    ck_assert_int_eq(xfer_shard_write(sh[1], 3000, 6, 2, c.resv_id, 0, bytes,
                                      128),
                     0); /* a commit needs the region written */
    ck_assert_int_eq(xfer_shard_commit(sh[1], 3000, 6, 2, c.resv_id), 0);
    ck_assert_int_eq(xfer_shard_reserve(sh[0], 3000, 8, 3, 128, &c), 0);
    ck_assert_int_eq(xfer_shard_cancel(sh[0], 3500, 8, 3, c.resv_id), 0);
    fake_now = 11000;
    xfer_ctl_shards cs = {sh, 2, fake_clock, NULL};
    struct event_base *base = event_base_new();
    char path[64];
    snprintf(path, sizeof path, "/tmp/xfer-ctls-%ld.sock", (long)getpid());
    xfer_ctl *ctl;
    ck_assert_int_eq(
        xfer_ctl_open(base, path, xfer_ctl_shards_snapshot, &cs, &ctl), 0);
    char *r = ctl_fetch(base, path);
    ck_assert_ptr_nonnull(strstr(
        r, "{\"kind\":\"reservation\",\"shard\":0,\"id\":5,\"attempt\":1,"
           "\"state\":\"RESERVED\",\"age_ns\":10000,\"waits\":\"write or "
           "commit\"}"));
    ck_assert_ptr_nonnull(strstr(
        r, "{\"kind\":\"reservation\",\"shard\":1,\"id\":5,\"attempt\":1,"
           "\"state\":\"WRITING\",\"age_ns\":10000,\"waits\":\"write "
           "end\"}"));
    ck_assert_ptr_nonnull(strstr(
        r, "\"shard\":1,\"id\":6,\"attempt\":2,\"state\":\"READY\","
           "\"age_ns\":9000,\"waits\":\"take\"}"));
    ck_assert_ptr_null(strstr(r, "\"id\":8,"));
    ck_assert_ptr_nonnull(
        strstr(r, "{\"kind\":\"end\",\"transfers\":0,\"reservations\":3}"));
    free(r);
    xfer_ctl_close(ctl);
    event_base_free(base);
    ck_assert_int_eq(xfer_shard_write_end(sh[1], 12000, 5, b.resv_id, true),
                     0);
    xfer_shard_del(sh[0]);
    xfer_shard_del(sh[1]);
}
END_TEST

static uint64_t tick_clock(void *ud)
{
    return fake_now += 1000;
}

static int ndone;
static void on_done(void *ud, const xfer_result *r)
{
    ndone++;
}

START_TEST(test_ctl_shard_engine_with_dropped_write)
{
    fake_now = 1000000000ull;
    struct event_base *base = event_base_new();
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = base;
    ec.clock = tick_clock;
    xfer_engine *e;
    ck_assert_int_eq(xfer_engine_new(&ec, &e), 0);
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = 2;
    lc.clock = tick_clock;
    lc.shard.pool_bytes = 1 << 16;
    xfer_loop *l;
    ck_assert_int_eq(xfer_loop_new(base, &lc, &l), 0);
    xfer_fault_rule drop = {.kind = XFER_FAULT_DROP, .op = XFER_OP_WRITE,
                            .shard = 1, .id = 77};
    ck_assert_int_eq(xfer_loop_add_rule(l, &drop), 0);
    uint32_t group, pool;
    static uint8_t mem[4096];
    ck_assert_int_eq(xfer_engine_add_group(e, xfer_loop_transport(l), &group),
                     0);
    ck_assert_int_eq(xfer_engine_register_pool(e, mem, sizeof mem, &pool), 0);
    xfer_slice sl[2] = {{0, 256}, {1024, 256}};
    xfer_transfer_desc d = {.id = 77, .group = group, .pool = pool,
                            .nslices = 2, .slices = sl};
    ck_assert_int_eq(xfer_engine_submit(e, &d, on_done, NULL), 0);
    for (int i = 0; i < 1000; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    char pe[64], ps[64];
    snprintf(pe, sizeof pe, "/tmp/xfer-ctle-%ld.sock", (long)getpid());
    snprintf(ps, sizeof ps, "/tmp/xfer-ctlp-%ld.sock", (long)getpid());
    xfer_ctl *ce, *cs;
    ck_assert_int_eq(xfer_engine_ctl_open(e, pe, &ce), 0);
    xfer_shard *sh[2] = {xfer_loop_shard(l, 0), xfer_loop_shard(l, 1)};
    xfer_ctl_shards cfg = {sh, 2, tick_clock, NULL};
    ck_assert_int_eq(
        xfer_ctl_open(base, ps, xfer_ctl_shards_snapshot, &cfg, &cs), 0);
    char *r = ctl_fetch(base, pe);
    ck_assert_ptr_nonnull(strstr(r, "\"id\":77,"));
    ck_assert_ptr_nonnull(strstr(r, "\"state\":\"WRITING\""));
    ck_assert_ptr_nonnull(strstr(r, "\"waiting\":\"1\""));
    ck_assert_ptr_nonnull(strstr(
        r, "{\"shard\":1,\"resv\":\"ok\",\"write\":\"pending\""));
    free(r);
    r = ctl_fetch(base, ps);
    /* shard 0 finished its write; shard 1 never received the dropped one */
    ck_assert_ptr_nonnull(strstr(
        r, "\"shard\":0,\"id\":77,\"attempt\":1,\"state\":\"RESERVED\""));
    ck_assert_ptr_nonnull(strstr(
        r, "\"shard\":1,\"id\":77,\"attempt\":1,\"state\":\"RESERVED\""));
    free(r);
    ck_assert_int_eq(ndone, 0);
    xfer_ctl_close(ce);
    xfer_ctl_close(cs);
    ck_assert_int_eq(xfer_engine_cancel(e, 77), 0);
    for (int i = 0; i < 10000 && ndone == 0; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    ck_assert_int_eq(ndone, 1);
    xfer_engine_del(e);
    xfer_loop_del(l);
    event_base_free(base);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ctl_shard");
    TCase *tc = tcase_create("ctl_shard");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_ctl_shard_snapshot);
    tcase_add_test(tc, test_ctl_shard_engine_with_dropped_write);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
