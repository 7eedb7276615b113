/*
 * tests/consumer/test_shm.c - shard pools in POSIX shared memory
 * (xfer/shm.h): a consumer maps what a server process writes, a live
 * creator's object is never replaced, a dead one's (killed, even before
 * it was reaped) is, a foreign object is refused by the consumer and
 * replaced by the server, and the creator unlinks at close.
 */
#define _DEFAULT_SOURCE
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "xfer/shm.h"

static char name[64];

static void setup(void)
{
    snprintf(name, sizeof name, "xfer-test-shm-%d", (int)getpid());
}

static void teardown(void)
{
    xfer_shm_unlink(name, 3);
}

/* A child creates shard 3's pool, writes into it, says so, and waits. */
static pid_t spawn_creator(uint8_t fill)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        xfer_shm *m;
        char ok = 'n';
        if (xfer_shm_create(name, 3, 8192, NULL, &m) == 0) {
            memset(xfer_shm_pool(m), fill, 8192);
            ok = 'y';
        }
        (void)!write(p[1], &ok, 1);
        pause();
        _exit(0);
    }
    char ok = 0;
    ck_assert_int_eq(read(p[0], &ok, 1), 1);
    ck_assert_int_eq(ok, 'y');
    close(p[0]);
    close(p[1]);
    return pid;
}

START_TEST(test_shm_consumer_reads_in_place)
{
    pid_t pid = spawn_creator(0x3c);
    xfer_shm *m;
    ck_assert_int_eq(xfer_shm_map(name, 3, NULL, &m), 0);
    ck_assert_uint_eq(xfer_shm_len(m), 8192);
    const uint8_t *pool = xfer_shm_pool(m);
    ck_assert_uint_eq(pool[0], 0x3c);
    ck_assert_uint_eq(pool[8191], 0x3c);
    /* A live creator's object is not replaced. */
    xfer_shm *other;
    ck_assert_int_eq(xfer_shm_create(name, 3, 4096, NULL, &other),
                     XFER_ERR_EXISTS);
    uint64_t gen = xfer_shm_generation(m);
    /* Killed (and not yet reaped: a zombie): stale, replaced. */
    kill(pid, SIGKILL);
    usleep(50000);
    xfer_shm *fresh;
    ck_assert_int_eq(xfer_shm_create(name, 3, 4096, NULL, &fresh), 0);
    ck_assert_uint_ne(xfer_shm_generation(fresh), gen);
    ck_assert_uint_eq(((uint8_t *)xfer_shm_pool(fresh))[0], 0);
    /* The old mapping still reads the old bytes. */
    ck_assert_uint_eq(pool[100], 0x3c);
    waitpid(pid, NULL, 0);
    xfer_shm_close(m);
    xfer_shm_close(fresh); /* the creator unlinks */
    ck_assert_int_eq(xfer_shm_map(name, 3, NULL, &m), XFER_ERR_NOT_FOUND);
}
END_TEST

START_TEST(test_shm_foreign_object_refused_then_replaced)
{
    char path[128];
    snprintf(path, sizeof path, "/%s.3", name);
    int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 8192), 0);
    ck_assert_int_eq(write(fd, "garbage!", 8), 8);
    close(fd);
    xfer_shm *m;
    ck_assert_int_eq(xfer_shm_map(name, 3, NULL, &m), XFER_ERR_FORMAT);
    ck_assert_int_eq(xfer_shm_create(name, 3, 4096, NULL, &m), 0);
    xfer_shm *r;
    ck_assert_int_eq(xfer_shm_map(name, 3, NULL, &r), 0);
    ck_assert_uint_eq(xfer_shm_len(r), 4096);
    xfer_shm_close(r);
    xfer_shm_close(m);
}
END_TEST

START_TEST(test_shm_names_checked)
{
    xfer_shm *m;
    ck_assert_int_eq(xfer_shm_create("a/b", 0, 4096, NULL, &m),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shm_create("", 0, 4096, NULL, &m),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shm_create(name, 64, 4096, NULL, &m),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shm_create(name, 0, 0, NULL, &m),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shm_unlink(name, 5), XFER_ERR_NOT_FOUND);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("shm");
    TCase *tc = tcase_create("shm");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_shm_consumer_reads_in_place);
    tcase_add_test(tc, test_shm_foreign_object_refused_then_replaced);
    tcase_add_test(tc, test_shm_names_checked);
    suite_add_tcase(su, tc);
    return tu_run(su);
}
