/*
 * tests/trace/test_ctl_shard.c - the shard snapshot helper of the control
 * socket (what xferd serves): open reservations of every shard, with state,
 * age and what each waits for; tombstones left out.
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
#include "xfer/ctl.h"

static uint64_t fake_now;
static uint64_t fake_clock(void *ud)
{
    return fake_now;
}

static char *fetch(struct event_base *base, const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    size_t n = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    for (int spins = 0; spins < 100000; spins++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got == 0)
            break;
        if (got > 0)
            n += (size_t)got;
        ck_assert_uint_lt(n, cap - 1);
    }
    close(fd);
    buf[n] = '\0';
    return buf;
}

START_TEST(test_ctl_shard_snapshot)
{
    xfer_shard *sh[2];
    for (uint16_t k = 0; k < 2; k++) {
        xfer_shard_config c = {.pool_bytes = 1 << 16, .shard_index = k};
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
    char *r = fetch(base, path);
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

int main(void)
{
    Suite *s = suite_create("ctl_shard");
    TCase *tc = tcase_create("ctl_shard");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_ctl_shard_snapshot);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
