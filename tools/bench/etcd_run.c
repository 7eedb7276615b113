/*
 * tools/bench/etcd_run.c - one etcd member for the benchmarks.  See
 * etcd_run.h.
 */
#include "etcd_run.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pid_t etcd_pid;
static char etcd_dir[64];

static void etcd_end(void)
{
    if (etcd_pid > 0) {
        kill(etcd_pid, SIGKILL);
        waitpid(etcd_pid, NULL, 0);
        etcd_pid = 0;
    }
    if (etcd_dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", etcd_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", etcd_dir);
        etcd_dir[0] = '\0';
    }
}

/* A loopback port nobody listens on now (the kernel's pick). */
static unsigned free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    unsigned port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static int accepts(unsigned port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

int bench_etcd_start(char *url, size_t cap, char *err, size_t errcap)
{
    unsigned cport = free_port(), pport = free_port();
    if (etcd_pid > 0 || system("command -v etcd >/dev/null 2>&1") != 0) {
        snprintf(err, errcap, "no etcd on PATH (apt-get install "
                 "etcd-server)");
        return -1;
    }
    snprintf(etcd_dir, sizeof etcd_dir, "/tmp/xfer-bench-etcd-XXXXXX");
    if (!cport || !pport || cport == pport || !mkdtemp(etcd_dir)) {
        etcd_dir[0] = '\0';
        snprintf(err, errcap, "etcd: no free ports or temporary folder");
        return -1;
    }
    char data[128], cl[64], pl[64], ic[96];
    snprintf(data, sizeof data, "%s/data", etcd_dir);
    snprintf(cl, sizeof cl, "http://127.0.0.1:%u", cport);
    snprintf(pl, sizeof pl, "http://127.0.0.1:%u", pport);
    snprintf(ic, sizeof ic, "s=%s", pl);
    snprintf(url, cap, "%s", cl);
    atexit(etcd_end);
    etcd_pid = fork();
    if (etcd_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execlp("etcd", "etcd", "--name", "s", "--data-dir", data,
               "--listen-client-urls", cl, "--advertise-client-urls", cl,
               "--listen-peer-urls", pl, "--initial-advertise-peer-urls", pl,
               "--initial-cluster", ic, (char *)NULL);
        _exit(127);
    }
    if (etcd_pid < 0) {
        snprintf(err, errcap, "etcd: fork failed");
        return -1;
    }
    struct timespec ts = {0, 20000000L};
    for (int i = 0; i < 500; i++) {
        if (accepts(cport))
            return 0;
        if (waitpid(etcd_pid, NULL, WNOHANG) == etcd_pid) {
            etcd_pid = 0;
            break;
        }
        nanosleep(&ts, NULL);
    }
    snprintf(err, errcap, "etcd never listened on %s", cl);
    return -1;
}
