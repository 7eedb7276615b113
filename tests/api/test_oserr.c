/*
 * tests/api/test_oserr.c - an error from the OS keeps its reason (issue
 * 23, item 8): where a public call fails on a system call with
 * XFER_ERR_IO, errno holds the OS's reason when the call returns, and the
 * shard server also names the call, the address and the reason through
 * its log callback, so a tool can say "bind 127.0.0.1:PORT: Address
 * already in use" instead of "transport i/o error".
 *
 * Public API only (libxfer.so), one event_base per test.
 */
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "xfer/ctl.h"
#include "xfer/errors.h"
#include "xfer/server.h"
#include "xfer/tracefile.h"

/* Every line the server logged, joined by newlines. */
typedef struct logbuf {
    char text[4096];
    size_t n;
} logbuf;

static void on_log(void *ud, const char *line)
{
    logbuf *b = ud;
    int w = snprintf(b->text + b->n, sizeof b->text - b->n, "%s\n", line);
    if (w > 0 && (size_t)w < sizeof b->text - b->n)
        b->n += (size_t)w;
}

/* A TCP listener of our own on 127.0.0.1, its port in *port. */
static int listen_somewhere(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(fd, 4), 0);
    socklen_t len = sizeof sa;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

START_TEST(test_oserr_server_bind_in_use_names_the_reason)
{
    uint16_t port;
    int fd = listen_somewhere(&port);
    struct event_base *base = event_base_new();
    ck_assert_ptr_nonnull(base);
    static uint8_t pool[1 << 16];
    xfer_server_shard sh = {.index = 0, .base = pool, .len = sizeof pool};
    logbuf lb = {0};
    xfer_server_config sc;
    xfer_server_config_default(&sc);
    sc.base = base;
    sc.addr = "127.0.0.1";
    sc.port = port;
    sc.nshards = 1;
    sc.shards = &sh;
    sc.log = on_log;
    sc.log_ud = &lb;
    xfer_server *srv = (xfer_server *)&lb; /* untouched on failure */
    errno = 0;
    int rc = xfer_server_new(&sc, &srv);
    int e = errno;
    ck_assert_int_eq(rc, XFER_ERR_IO);
    ck_assert_int_eq(e, EADDRINUSE);
    ck_assert_ptr_eq(srv, (xfer_server *)&lb);
    char want[128];
    snprintf(want, sizeof want, "bind 127.0.0.1:%u: %s\n", (unsigned)port,
             strerror(EADDRINUSE));
    ck_assert_msg(strstr(lb.text, want) != NULL, "log '%s' lacks '%s'",
                  lb.text, want);
    event_base_free(base);
    close(fd);
}
END_TEST

static void snap(void *ud, xfer_ctl_reply *rep)
{
    (void)ud;
    (void)rep;
}

START_TEST(test_oserr_ctl_and_tracefile_keep_errno)
{
    struct event_base *base = event_base_new();
    ck_assert_ptr_nonnull(base);
    xfer_ctl *ctl = NULL;
    errno = 0;
    ck_assert_int_eq(xfer_ctl_open(base, "/nonexistent-xfer-dir/ctl.sock",
                                   snap, NULL, &ctl),
                     XFER_ERR_IO);
    ck_assert_int_eq(errno, ENOENT);
    ck_assert_ptr_null(ctl);
    xfer_tracefile *tf = NULL;
    errno = 0;
    ck_assert_int_eq(xfer_tracefile_open("/nonexistent-xfer-dir/t.trace",
                                         NULL, &tf),
                     XFER_ERR_IO);
    ck_assert_int_eq(errno, ENOENT);
    ck_assert_ptr_null(tf);
    event_base_free(base);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("oserr");
    TCase *tc = tcase_create("oserr");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_oserr_server_bind_in_use_names_the_reason);
    tcase_add_test(tc, test_oserr_ctl_and_tracefile_keep_errno);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
