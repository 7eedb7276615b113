/*
 * tests/multiproc/mp.c - see mp.h.  Every child started here dies with the
 * test: it gets PR_SET_PDEATHSIG(SIGKILL) before exec, and an atexit
 * handler kills and reaps whatever is still registered.
 */
#include "mp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/util.h>

#include "xfer/xfer.h"

#define MP_MAX 64

static pid_t procs[MP_MAX];
static int nprocs;
static bool atexit_set;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

uint64_t mp_now_ms(void)
{
    return xfer_clock_monotonic(NULL) / 1000000;
}

void mp_kill_all(void)
{
    for (int i = 0; i < nprocs; i++) {
        if (procs[i] > 0) {
            kill(procs[i], SIGKILL);
            waitpid(procs[i], NULL, 0);
            procs[i] = 0;
        }
    }
    nprocs = 0;
}

void mp_track(pid_t pid)
{
    if (!atexit_set) {
        atexit(mp_kill_all);
        atexit_set = true;
    }
    for (int i = 0; i < nprocs; i++)
        if (procs[i] == 0) {
            procs[i] = pid;
            return;
        }
    if (nprocs < MP_MAX)
        procs[nprocs++] = pid;
}

static void untrack(pid_t pid)
{
    for (int i = 0; i < nprocs; i++)
        if (procs[i] == pid)
            procs[i] = 0;
}

static int read_port(const char *path, uint16_t *port)
{
    FILE *f = fopen(path, "r");
    unsigned v = 0;
    if (!f)
        return -1;
    int ok = fscanf(f, "%u", &v) == 1 && v > 0 && v < 65536;
    fclose(f);
    *port = (uint16_t)v;
    return ok ? 0 : -1;
}

static void exec_xferd(const char *portfile, const char *portstr,
                       const char *log, const char *const *args)
{
    const char *bin = getenv("XFERD");
    const char *argv[64];
    int n = 0;
    argv[n++] = bin ? bin : "xferd";
    argv[n++] = "--port";
    argv[n++] = portstr;
    argv[n++] = "--port-file";
    argv[n++] = portfile;
    for (int i = 0; args && args[i] && n < 62; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, 2);
        dup2(fd, 1);
        close(fd);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
}

int mp_xferd(mp_proc *p, uint16_t port, const char *const *args)
{
    char portfile[256], portstr[16];
    static unsigned seq;
    snprintf(portfile, sizeof portfile, "/tmp/xfer-mp-%d-%u.port", getpid(),
             seq);
    snprintf(p->log, sizeof p->log, "/tmp/xfer-mp-%d-%u.log", getpid(), seq++);
    snprintf(portstr, sizeof portstr, "%u", (unsigned)port);
    unlink(portfile);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0)
        exec_xferd(portfile, portstr, p->log, args);
    mp_track(pid);
    p->pid = pid;
    for (uint64_t end = mp_now_ms() + 10000; mp_now_ms() < end;) {
        if (read_port(portfile, &p->port) == 0) {
            unlink(portfile);
            return 0;
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            untrack(pid);
            return -1;
        }
        sleep_ms(5);
    }
    return -1;
}

int mp_kill(mp_proc *p, int sig)
{
    int status = 0;
    if (p->pid <= 0)
        return -1;
    kill(p->pid, sig);
    waitpid(p->pid, &status, 0);
    untrack(p->pid);
    p->pid = 0;
    return status;
}

/* ---------------------------------------------------------------------- */
/* Raw wire client                                                         */
/* ---------------------------------------------------------------------- */

int mp_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int mp_send(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int mp_send_msg(int fd, const xfer_wire_msg *m, uint32_t req,
                const void *data)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t n = xfer_wire_encode(m, req, buf, sizeof buf);
    if (n == 0 || mp_send(fd, buf, n) != 0)
        return -1;
    if (m->type == XFER_WIRE_T_WRITE && m->len)
        return mp_send(fd, data, m->len);
    return 0;
}

static int recv_all(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = recv(fd, p, n, 0);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int mp_recv_msg(int fd, xfer_wire_hdr *h, xfer_wire_msg *m)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    xfer_wire_reason why;
    if (recv_all(fd, buf, XFER_WIRE_HDR) != 0 ||
        xfer_wire_decode_hdr(buf, XFER_WIRE_HDR, h, &why) != 0 ||
        h->type == XFER_WIRE_T_WRITE)
        return -1;
    if (recv_all(fd, buf + XFER_WIRE_HDR, h->len - XFER_WIRE_HDR) != 0)
        return -1;
    return xfer_wire_decode_body(h, buf + XFER_WIRE_HDR,
                                 h->len - XFER_WIRE_HDR, m, &why) == 0
               ? 0
               : -1;
}

bool mp_closed(int fd)
{
    uint8_t b[4096];
    for (;;) {
        ssize_t r = recv(fd, b, sizeof b, 0);
        if (r == 0)
            return true;
        if (r < 0)
            return errno == ECONNRESET;
    }
}

int mp_hello(int fd, uint16_t shard)
{
    return mp_hello_role(fd, shard, XFER_WIRE_ROLE_PRODUCER);
}

int mp_hello_role(int fd, uint16_t shard, uint8_t role)
{
    xfer_wire_msg m = {.type = XFER_WIRE_T_HELLO, .version = 1,
                       .role = role, .shard = shard};
    xfer_wire_hdr h;
    xfer_wire_msg r;
    if (mp_send_msg(fd, &m, 1, NULL) != 0 || mp_recv_msg(fd, &h, &r) != 0)
        return -1;
    return r.type == XFER_WIRE_T_HELLO_ACK && h.req == 1 ? 0 : -1;
}

static int status_on(int fd, xfer_wire_status *st);

int mp_status_addr(const char *addr, xfer_wire_status *st)
{
    struct sockaddr_storage ss;
    int sl = sizeof ss;
    if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss, &sl) != 0)
        return -1;
    int fd = socket(ss.ss_family, SOCK_STREAM, 0);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (fd < 0 || connect(fd, (struct sockaddr *)&ss, (socklen_t)sl) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return status_on(fd, st);
}

int mp_status(uint16_t port, xfer_wire_status *st)
{
    return status_on(mp_connect(port), st);
}

static int status_on(int fd, xfer_wire_status *st)
{
    if (fd < 0)
        return -1;
    xfer_wire_msg m = {.type = XFER_WIRE_T_STATUS,
                       .shard = XFER_WIRE_SHARD_ALL};
    xfer_wire_hdr h;
    xfer_wire_msg r;
    int rc = -1;
    if (mp_send_msg(fd, &m, 7, NULL) == 0 && mp_recv_msg(fd, &h, &r) == 0 &&
        r.type == XFER_WIRE_T_STATUS_OK && h.req == 7) {
        *st = r.st;
        rc = 0;
    }
    close(fd);
    return rc;
}

int mp_wait_pool_free(uint16_t port, int timeout_ms, xfer_wire_status *st)
{
    uint64_t end = mp_now_ms() + (uint64_t)timeout_ms;
    do {
        if (mp_status(port, st) == 0 && st->bytes_in_use == 0 &&
            st->live == 0)
            return 0;
        sleep_ms(20);
    } while (mp_now_ms() < end);
    return -1;
}

/* ---------------------------------------------------------------------- */
/* Driving a loop                                                          */
/* ---------------------------------------------------------------------- */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
}

bool mp_run_while(struct event_base *base, bool (*fn)(void *ud), void *ud,
                  int timeout_ms)
{
    struct event *tick = event_new(base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval tv = {0, 10000};
    event_add(tick, &tv);
    uint64_t end = mp_now_ms() + (uint64_t)timeout_ms;
    bool ok;
    while (!(ok = fn(ud)) && mp_now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(tick);
    return ok;
}

static bool flag_set(void *ud)
{
    return *(const volatile bool *)ud;
}

bool mp_run_until(struct event_base *base, const volatile bool *flag,
                  int timeout_ms)
{
    return mp_run_while(base, flag_set, (void *)flag, timeout_ms);
}

/* ---------------------------------------------------------------------- */
/* Producer                                                                */
/* ---------------------------------------------------------------------- */

int mp_producer_new(mp_producer *p, const uint16_t *ports, uint16_t n,
                    size_t staging_len, uint64_t deadline_ns)
{
    static char addrbuf[XFER_MAX_SHARDS][32];
    const char *addrs[XFER_MAX_SHARDS];
    for (uint16_t k = 0; k < n; k++) {
        snprintf(addrbuf[k], sizeof addrbuf[k], "127.0.0.1:%u",
                 (unsigned)ports[k]);
        addrs[k] = addrbuf[k];
    }
    return mp_producer_new_addrs(p, addrs, n, staging_len, deadline_ns);
}

int mp_producer_new_addrs(mp_producer *p, const char *const *addrs,
                          uint16_t n, size_t staging_len,
                          uint64_t deadline_ns)
{
    return mp_producer_new_secret(p, addrs, n, staging_len, deadline_ns,
                                  NULL, 0);
}

int mp_producer_new_secret(mp_producer *p, const char *const *addrs,
                           uint16_t n, size_t staging_len,
                           uint64_t deadline_ns, const void *secret,
                           size_t secret_len)
{
    memset(p, 0, sizeof *p);
    signal(SIGPIPE, SIG_IGN);
    p->nshards = n;
    p->base = event_base_new();
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = p->base;
    ec.core.default_deadline_ns = deadline_ns;
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = n;
    tc.addrs = addrs;
    tc.reconnect_max_ns = 200000000ull;
    tc.secret = secret;
    tc.secret_len = secret_len;
    p->staging_len = staging_len;
    p->staging = calloc(1, staging_len);
    if (!p->base || !p->staging || xfer_engine_new(&ec, &p->e) != 0 ||
        xfer_tcp_new(p->base, &tc, &p->tcp) != 0 ||
        xfer_engine_register_pool(p->e, p->staging, staging_len,
                                  &p->pool) != 0 ||
        xfer_engine_add_group(p->e, xfer_tcp_transport(p->tcp),
                              &p->group) != 0)
        return -1;
    return 0;
}

static bool all_connected(void *ud)
{
    mp_producer *p = ud;
    for (uint16_t k = 0; k < p->nshards; k++)
        if (!xfer_tcp_connected(p->tcp, k))
            return false;
    return true;
}

bool mp_producer_wait_connected(mp_producer *p, int timeout_ms)
{
    return mp_run_while(p->base, all_connected, p, timeout_ms);
}

static void on_shut(void *ud)
{
    ((mp_producer *)ud)->shut = true;
}

bool mp_producer_del(mp_producer *p, int timeout_ms)
{
    bool ok = false;
    if (p->e && xfer_engine_shutdown(p->e, on_shut, p) == 0)
        ok = mp_run_until(p->base, &p->shut, timeout_ms);
    xfer_engine_del(p->e);
    xfer_tcp_del(p->tcp);
    if (p->base) {
        /* Let libevent finish closing connections (staging references). */
        event_base_loop(p->base, EVLOOP_NONBLOCK);
        event_base_free(p->base);
    }
    free(p->staging);
    memset(p, 0, sizeof *p);
    return ok;
}
