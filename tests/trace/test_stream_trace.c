/*
 * tests/trace/test_stream_trace.c - xfer-trace on streams (issue 26 item
 * 6): `show` prints each run's part number and each part's release, and
 * `stuck` tells a stream waiting for its next part (nothing at any shard,
 * the producer owes a part) from one waiting on a shard (a write held by
 * a fault rule), from the producer's trace file.
 *
 * argv[1]: the xfer-trace program.
 */
#define _DEFAULT_SOURCE /* usleep, mkdtemp */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "xfer/loop.h"
#include "xfer/stream.h"
#include "xfer/tracefile.h"
#include "xfer/xfer.h"

#define S 4
#define LEN 512

static const char *xtrace;
static unsigned parts_back;

static void on_part(void *ud, uint64_t id, uint32_t part, int status)
{
    parts_back++;
}

static void on_done(void *ud, const xfer_result *r)
{
}

static bool shut;
static void on_shut(void *ud)
{
    shut = true;
}

static int add_part(xfer_engine *e, uint64_t id, uint32_t pool, uint32_t off)
{
    xfer_range r[S];
    for (unsigned k = 0; k < S; k++)
        r[k] = (xfer_range){.staging_off = k * LEN, .pool = pool, .len = 64,
                            .resv_off = off, .shard = (uint16_t)k};
    xfer_part_desc d = {.id = id, .ranges = r, .nranges = S, .cb = on_part};
    return xfer_engine_stream_part(e, &d, NULL);
}

static void spin(struct event_base *b, int ms)
{
    for (int i = 0; i < ms; i++) {
        event_base_loop(b, EVLOOP_NONBLOCK);
        usleep(1000);
    }
}

/* The output of `xfer-trace ARGS`, malloc'ed. */
static char *run_xtrace(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s", xtrace, args);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t cap = 1 << 20, n = 0;
    char *out = calloc(cap, 1);
    size_t got;
    while ((got = fread(out + n, 1, cap - 1 - n, f)) > 0)
        n += got;
    pclose(f);
    return out;
}

START_TEST(test_stream_trace_stuck_tells_part_from_shard)
{
    char dir[] = "/tmp/xfer-stream-trace-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/p.xtr", dir);
    xfer_tracefile *tf;
    ck_assert_int_eq(xfer_tracefile_open(path, NULL, &tf), 0);
    struct event_base *base = event_base_new();
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = base;
    ec.core.trace = xfer_tracefile_sink(tf);
    xfer_engine *e;
    ck_assert_int_eq(xfer_engine_new(&ec, &e), 0);
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = S;
    lc.shard.pool_bytes = 1 << 20;
    xfer_loop *l;
    ck_assert_int_eq(xfer_loop_new(base, &lc, &l), 0);
    /* shard 2 never answers stream 32's writes */
    xfer_fault_rule rule = {.kind = XFER_FAULT_DROP, .op = XFER_OP_WRITE,
                            .shard = 2, .id = 32};
    ck_assert_int_eq(xfer_loop_add_rule(l, &rule), 0);
    uint32_t group, pool;
    static uint8_t mem[S * LEN];
    ck_assert_int_eq(xfer_engine_add_group(e, xfer_loop_transport(l), &group),
                     0);
    ck_assert_int_eq(xfer_engine_register_pool(e, mem, sizeof mem, &pool), 0);
    uint32_t lens[S] = {LEN, LEN, LEN, LEN};
    for (uint64_t id = 31; id <= 32; id++) {
        xfer_stream_desc d = {.id = id, .group = group, .nshards = S,
                              .lens = lens, .timeout_ns = 60000000000ull};
        ck_assert_int_eq(xfer_engine_stream_open(e, &d, on_done, NULL), 0);
        ck_assert_int_eq(add_part(e, id, pool, 0), 0);
    }
    spin(base, 200);
    ck_assert_uint_eq(parts_back, 1); /* 31's part; 32's waits on shard 2 */
    ck_assert_int_eq(xfer_tracefile_flush(tf), 0);
    char args[512];
    snprintf(args, sizeof args, "stuck %s", path);
    char *out = run_xtrace(args);
    printf("%s", out);
    const char *a = strstr(out, "transfer 31 ");
    const char *b = strstr(out, "transfer 32 ");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert(strstr(a, "a stream waiting for its next part from the "
                        "producer (1 parts added, 1 back") != NULL);
    ck_assert(strstr(b, "waits on 1 of 4 shards: 2 (stream: 1 parts added, "
                        "0 back)") != NULL);
    free(out);
    snprintf(args, sizeof args, "show 31 %s", path);
    out = run_xtrace(args);
    ck_assert(strstr(out, "send write, part 1, len 64") != NULL);
    ck_assert(strstr(out, "release part 1") != NULL);
    free(out);
    xfer_engine_cancel(e, 31);
    xfer_engine_cancel(e, 32);
    spin(base, 100);
    ck_assert_uint_eq(parts_back, 2);
    xfer_loop_clear_rules(l);
    ck_assert_int_eq(xfer_engine_shutdown(e, on_shut, NULL), 0);
    for (int i = 0; i < 5000 && !shut; i++)
        spin(base, 1);
    ck_assert(shut);
    xfer_engine_del(e);
    xfer_loop_del(l);
    event_base_free(base);
    xfer_tracefile_close(tf);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_stream_trace XFER-TRACE\n");
        return 2;
    }
    xtrace = argv[1];
    Suite *s = suite_create("stream_trace");
    TCase *tc = tcase_create("stuck");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_stream_trace_stuck_tells_part_from_shard);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
