/*
 * tests/trace/ctlclient.c - see ctlclient.h.  The loop is pumped with
 * EVLOOP_NONBLOCK between reads, so the server and the client share one
 * thread and no wall-clock wait is needed.
 */
#include "ctlclient.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

int ctl_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

char *ctl_fetch(struct event_base *base, const char *path)
{
    int fd = ctl_connect(path);
    size_t n = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    for (int spins = 0; spins < 100000; spins++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got == 0)
            break;
        if (got > 0)
            n += (size_t)got;
        else
            ck_assert_int_eq(errno, EAGAIN);
        if (n + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            ck_assert_ptr_nonnull(buf);
        }
    }
    close(fd);
    buf[n] = '\0';
    return buf;
}
