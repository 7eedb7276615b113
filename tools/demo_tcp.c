/*
 * tools/demo_tcp.c - the consumer group of `xfer-demo --tcp`: one xferd
 * process per shard on a loopback ephemeral port (read back from a port
 * file), its pool in POSIX shared memory (xferd --shm), a tcp transport
 * connected to all of them, STATUS queries for their pools, a kill -9 and
 * restart of one, and their end.  See demo_tcp.h.
 *
 * What must stay true:
 *  - no child outlives the demo: each sets PR_SET_PDEATHSIG before exec
 *    (and exits if the demo already died before that), and every child
 *    started is SIGTERMed and reaped by demo_tcp_stop, also when
 *    demo_tcp_start fails half-way; a child that will not drain in time is
 *    SIGKILLed;
 *  - children are forked before the demo opens anything (trace file,
 *    sockets), so they inherit none of its descriptors;
 *  - a STATUS query blocks at most its socket timeouts; a child that does
 *    not answer is reported, never counted as holding 0 bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "demo_tcp.h"
#include "wire.h"
#include "xfer/errors.h"
#include "xfer/fsm.h"
#include "xfer/integrity.h"
#include "xfer/xfer.h"

/* How long an xferd may take to listen: eight of them (the bench's
 * integrity part) with 1 M tombstones each took over 10 s to start on a
 * 2-core machine at load 24. */
#define LISTEN_WAIT_MS 60000
#define STATUS_REQ 1u

struct demo_tcp {
    demo_tcp_config cfg;
    char shm[128], trace[4096];
    char xferd[4096]; /* for a restart */
    uint8_t restarted[XFER_MAX_SHARDS];
    uint16_t n; /* children forked */
    pid_t pid[XFER_MAX_SHARDS];     /* 0: reaped */
    uint16_t port[XFER_MAX_SHARDS]; /* 0: not listening yet */
    char addr[XFER_MAX_SHARDS][24];
    const char *addrs[XFER_MAX_SHARDS];
    char dir[256]; /* private temp folder: port files, logs; "" none */
    char etcd[1024]; /* --etcd of every child; "" none */
};

/* The argument vector of one child, with the storage it points into. */
typedef struct child_args {
    char shard[8], pool[24], resv[16], tombs[16], lease[32], faults[48];
    char drop[16], portfile[320], port[8], grace[32], trace[4200];
    const char *argv[48];
} child_args;

/* The library's monotonic clock, in ms. */
static uint64_t now_ms(void)
{
    return xfer_clock_monotonic(NULL) / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void file_path(const demo_tcp *t, uint16_t k, const char *ext,
                      char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/xferd-%u.%s", t->dir, (unsigned)k, ext);
}

static bool is_exe(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) &&
           access(path, X_OK) == 0;
}

int demo_tcp_find_xferd(const char *argv0, char *buf, size_t cap)
{
    char dir[4096], alt[4200];
    const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
    if (slash) {
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - argv0), argv0);
    } else {
        /* Started through PATH: the folder of the executable itself. */
        ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
        dir[n > 0 ? n : 0] = '\0';
        char *s = strrchr(dir, '/');
        if (s)
            *s = '\0';
        else
            snprintf(dir, sizeof dir, ".");
    }
    snprintf(buf, cap, "%s/xferd/xferd", dir); /* the build tree */
    snprintf(alt, sizeof alt, "%s/xferd", dir); /* an install */
    int rc = XFER_ERR_NOT_FOUND;
    if (is_exe(buf))
        rc = 0;
    else if (is_exe(alt)) {
        snprintf(buf, cap, "%s", alt);
        rc = 0;
    }
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Children                                                                */
/* ---------------------------------------------------------------------- */

static void make_args(const demo_tcp *t, uint16_t k, child_args *a)
{
    const demo_tcp_config *c = &t->cfg;
    snprintf(a->shard, sizeof a->shard, "%u", (unsigned)k);
    snprintf(a->pool, sizeof a->pool, "%" PRIu64, c->pool_bytes);
    snprintf(a->resv, sizeof a->resv, "%" PRIu32, c->max_resv);
    snprintf(a->tombs, sizeof a->tombs, "%" PRIu32, c->max_tombs);
    snprintf(a->lease, sizeof a->lease, "%" PRIu64 "ms", c->lease_ttl_ms);
    snprintf(a->faults, sizeof a->faults, "%" PRIu32 ":%" PRIu64,
             c->fault_ppm, c->seed + k);
    snprintf(a->drop, sizeof a->drop, "%" PRIu32, c->drop_ppm);
    file_path(t, k, "port", a->portfile, sizeof a->portfile);
    snprintf(a->port, sizeof a->port, "%u", (unsigned)t->port[k]);
    snprintf(a->grace, sizeof a->grace, "%" PRIu64 "ms",
             c->take_grace_ms ? c->take_grace_ms : 1000);
    snprintf(a->trace, sizeof a->trace, "%s.shard%u%s", t->trace,
             (unsigned)k, t->restarted[k] ? "-restart" : "");
    const char *v[] = {t->xferd, "--addr", "127.0.0.1", "--port", a->port,
                       "--port-file", a->portfile, "--shards", a->shard,
                       "--pool", a->pool, "--max-resv", a->resv,
                       "--max-tombs", a->tombs, "--lease-ttl", a->lease,
                       "--faults", a->faults,
                       "--drop", a->drop, "--quiet", NULL};
    size_t n = sizeof v / sizeof v[0] - 1;
    _Static_assert(sizeof v + 10 * sizeof v[0] <= sizeof a->argv,
                   "child_args.argv too small");
    memcpy(a->argv, v, sizeof v);
    if (t->shm[0]) { /* a consumer process reads the pools */
        a->argv[n++] = "--shm";
        a->argv[n++] = t->shm;
        a->argv[n++] = "--take-grace";
        a->argv[n++] = a->grace;
    } else { /* a sink for benchmarks */
        a->argv[n++] = "--consume";
    }
    if (t->trace[0]) {
        a->argv[n++] = "--trace";
        a->argv[n++] = a->trace;
    }
    if (t->cfg.rdma)
        a->argv[n++] = "--rdma";
    if (t->cfg.integrity) {
        a->argv[n++] = "--integrity";
        a->argv[n++] = xfer_integrity_name(t->cfg.integrity);
    }
    if (t->etcd[0]) { /* group "0": HELLO group 0, as the consumer's */
        a->argv[n++] = "--etcd";
        a->argv[n++] = t->etcd;
        a->argv[n++] = "--etcd-ttl";
        a->argv[n++] = "2";
        a->argv[n++] = "--group";
        a->argv[n++] = "0";
    }
    a->argv[n] = NULL;
}

/* In the child: die with the parent, stdout to /dev/null, stderr to the
 * log (its first line explains an early death), then become xferd. */
static void exec_child(const char *const *argv, const char *log,
                       pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127); /* the parent died before the prctl */
    int out = open("/dev/null", O_WRONLY);
    int err = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out >= 0)
        dup2(out, STDOUT_FILENO);
    if (err >= 0)
        dup2(err, STDERR_FILENO);
    if (out > STDERR_FILENO)
        close(out);
    if (err > STDERR_FILENO)
        close(err);
    execv(argv[0], (char *const *)argv);
    dprintf(STDERR_FILENO, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

static int spawn_one(demo_tcp *t, uint16_t k)
{
    child_args a;
    char log[320];
    make_args(t, k, &a);
    file_path(t, k, "log", log, sizeof log);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return XFER_ERR_IO;
    if (pid == 0)
        exec_child(a.argv, log, parent);
    t->pid[k] = pid;
    if (t->n < k + 1)
        t->n = (uint16_t)(k + 1);
    return 0;
}

int demo_tcp_read_port(const char *path, uint16_t *port)
{
    FILE *f = fopen(path, "r");
    unsigned v = 0;
    if (!f)
        return -1;
    int ok = fscanf(f, "%u", &v) == 1 && v > 0 && v < 65536;
    fclose(f);
    if (ok)
        *port = (uint16_t)v;
    return ok ? 0 : -1;
}

/* The first line of a child's log, for a one-line error message. */
static void log_line(const demo_tcp *t, uint16_t k, char *buf, size_t cap)
{
    char path[320];
    file_path(t, k, "log", path, sizeof path);
    FILE *f = fopen(path, "r");
    buf[0] = '\0';
    if (f) {
        if (!fgets(buf, (int)cap, f))
            buf[0] = '\0';
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = '\0';
    if (!buf[0])
        snprintf(buf, cap, "no message");
}

/* 1: child k listens (port and address set); 0: not yet; an error when it
 * died first (err says why). */
static int poll_child(demo_tcp *t, uint16_t k, char *err, size_t cap)
{
    char path[320], why[200];
    int status;
    file_path(t, k, "port", path, sizeof path);
    if (demo_tcp_read_port(path, &t->port[k]) == 0) {
        unlink(path);
        snprintf(t->addr[k], sizeof t->addr[k], "127.0.0.1:%u",
                 (unsigned)t->port[k]);
        t->addrs[k] = t->addr[k];
        return 1;
    }
    if (waitpid(t->pid[k], &status, WNOHANG) != t->pid[k])
        return 0;
    t->pid[k] = 0;
    log_line(t, k, why, sizeof why);
    if (WIFSIGNALED(status))
        snprintf(err, cap, "xferd for shard %u was killed by signal %d "
                 "before listening: %s", (unsigned)k, WTERMSIG(status), why);
    else
        snprintf(err, cap, "xferd for shard %u exited with status %d before "
                 "listening: %s", (unsigned)k, WEXITSTATUS(status), why);
    return XFER_ERR_IO;
}

static void remove_files(const demo_tcp *t);

static int wait_listening(demo_tcp *t, char *err, size_t cap)
{
    uint64_t end = now_ms() + LISTEN_WAIT_MS;
    int rc = 0;
    for (;;) {
        uint16_t ready = 0, late = 0;
        for (uint16_t k = 0; k < t->n && rc >= 0; k++) {
            rc = t->port[k] ? 1 : poll_child(t, k, err, cap);
            if (rc == 1)
                ready++;
            else
                late = k;
        }
        if (rc < 0 || ready == t->n)
            break;
        if (now_ms() > end) {
            snprintf(err, cap, "xferd for shard %u did not listen within "
                     "%d ms", (unsigned)late, LISTEN_WAIT_MS);
            rc = XFER_ERR_IO;
            break;
        }
        sleep_ms(5);
    }
    return rc < 0 ? rc : 0;
}

/* A private temp folder for port files and logs. */
static int make_dir(demo_tcp *t, char *err, size_t cap)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(t->dir, sizeof t->dir, "%s/xfer-demo-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(t->dir))
        return 0;
    snprintf(err, cap, "cannot make a temp folder %s: %s", t->dir,
             strerror(errno));
    t->dir[0] = '\0';
    return XFER_ERR_IO;
}

int demo_tcp_kill_restart(demo_tcp *t, uint16_t k, char *err, size_t cap)
{
    int rc = demo_tcp_kill(t, k, err, cap);
    return rc ? rc : demo_tcp_restart(t, k, err, cap);
}

int demo_tcp_kill(demo_tcp *t, uint16_t k, char *err, size_t cap)
{
    if (k >= t->n || t->pid[k] <= 0) {
        snprintf(err, cap, "no xferd for shard %u to kill", (unsigned)k);
        return XFER_ERR_IO;
    }
    kill(t->pid[k], SIGKILL);
    waitpid(t->pid[k], NULL, 0); /* reaped: its shm objects are stale now */
    t->pid[k] = 0;
    return 0;
}

int demo_tcp_restart(demo_tcp *t, uint16_t k, char *err, size_t cap)
{
    uint16_t port = t->port[k];
    t->restarted[k] = 1;
    int rc = make_dir(t, err, cap);
    if (rc)
        return rc;
    rc = spawn_one(t, k);
    if (rc) {
        snprintf(err, cap, "cannot fork xferd: %s", strerror(errno));
        remove_files(t);
        return rc;
    }
    t->port[k] = 0;
    rc = wait_listening(t, err, cap);
    remove_files(t);
    t->dir[0] = '\0';
    if (!rc && t->port[k] != port) {
        snprintf(err, cap, "restarted xferd for shard %u listens on %u, "
                 "not %u", (unsigned)k, (unsigned)t->port[k], (unsigned)port);
        rc = XFER_ERR_IO;
    }
    return rc;
}

int demo_tcp_start(const demo_tcp_config *cfg, demo_tcp **out, char *err,
                   size_t cap)
{
    int rc = XFER_ERR_INVALID_ARG;
    demo_tcp *t = NULL;
    if (!cfg || !out || !cfg->xferd || cfg->nshards == 0 ||
        cfg->nshards > XFER_MAX_SHARDS) {
        snprintf(err, cap, "bad xferd group configuration");
        goto out;
    }
    rc = XFER_ERR_NOT_FOUND;
    if (!is_exe(cfg->xferd)) {
        snprintf(err, cap, "no xferd executable at %s (use --xferd PATH)",
                 cfg->xferd);
        goto out;
    }
    rc = XFER_ERR_NOMEM;
    if (!(t = calloc(1, sizeof *t))) {
        snprintf(err, cap, "out of memory");
        goto out;
    }
    t->cfg = *cfg;
    snprintf(t->shm, sizeof t->shm, "%s", cfg->shm ? cfg->shm : "");
    snprintf(t->trace, sizeof t->trace, "%s", cfg->trace ? cfg->trace : "");
    snprintf(t->xferd, sizeof t->xferd, "%s", cfg->xferd);
    snprintf(t->etcd, sizeof t->etcd, "%s", cfg->etcd ? cfg->etcd : "");
    t->cfg.etcd = NULL; /* copied */
    t->cfg.shm = t->shm;
    t->cfg.trace = t->trace;
    rc = make_dir(t, err, cap);
    if (rc)
        goto out_stop;
    for (uint16_t k = 0; k < cfg->nshards && !rc; k++)
        if ((rc = spawn_one(t, k)) != 0)
            snprintf(err, cap, "cannot fork xferd: %s", strerror(errno));
    if (!rc)
        rc = wait_listening(t, err, cap);
    if (rc)
        goto out_stop;
    /* Every child listens: its log is no longer read (it keeps writing to
     * the unlinked file), so nothing is left behind even on a SIGKILL. */
    remove_files(t);
    t->dir[0] = '\0';
    t->cfg.xferd = NULL; /* borrowed only until here */
    *out = t;
    goto out;
out_stop:
    demo_tcp_stop(t);
out:
    return rc;
}

/* ---------------------------------------------------------------------- */
/* The tcp transport to the children                                       */
/* ---------------------------------------------------------------------- */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
}

/* Is shard k's transport connected (tcp or rdma)? */
typedef bool (*link_up_fn)(const void *tp, uint16_t k);

static bool tcp_up(const void *tp, uint16_t k)
{
    return xfer_tcp_connected(tp, k);
}

static bool rdma_up(const void *tp, uint16_t k)
{
    return xfer_rdma_connected(tp, k);
}

static int first_down(const demo_tcp *t, link_up_fn up, const void *tp)
{
    for (uint16_t k = 0; k < t->n; k++)
        if (!up(tp, k))
            return k;
    return -1;
}

/* Run base until every shard of tp is up or timeout_ms passed. */
static int wait_up(const demo_tcp *t, struct event_base *base,
                   uint64_t timeout_ms, link_up_fn up, const void *tp,
                   char *err, size_t cap)
{
    /* A tick so EVLOOP_ONCE returns even while nothing happens. */
    struct event *tick = event_new(base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval tv = {0, 10000};
    int rc = XFER_ERR_NOMEM;
    if (!tick || event_add(tick, &tv) != 0) {
        snprintf(err, cap, "cannot make a timer event");
        goto out_tick;
    }
    uint64_t end = now_ms() + timeout_ms;
    int down;
    while ((down = first_down(t, up, tp)) >= 0 && now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
    rc = XFER_ERR_CONN_LOST;
    if (down >= 0) {
        snprintf(err, cap, "cannot connect to xferd for shard %d at %s "
                 "within %" PRIu64 " ms", down, t->addrs[down], timeout_ms);
        goto out_tick;
    }
    rc = 0;
out_tick:
    if (tick)
        event_free(tick);
    return rc;
}

static void tcp_config(const demo_tcp *t, xfer_tcp_config *tc)
{
    xfer_tcp_config_default(tc);
    tc->nshards = t->n;
    tc->addrs = t->addrs;
    tc->reconnect_max_ns = 200000000ull;
}

/* The transport to every shard, by address or (dir) through the
 * directory's group "0", once every link is up. */
static int connect_with(const demo_tcp *t, struct event_base *base,
                        struct xfer_dir *dir, uint64_t timeout_ms,
                        xfer_tcp **out, char *err, size_t cap)
{
    xfer_tcp_config tc;
    tcp_config(t, &tc);
    if (dir) {
        tc.addrs = NULL;
        tc.dir = dir;
        tc.dir_group = "0";
    }
    xfer_tcp *tcp = NULL;
    int rc = xfer_tcp_new(base, &tc, &tcp);
    if (rc) {
        snprintf(err, cap, "cannot make the tcp transport: %s",
                 xfer_strerror(rc));
        return rc;
    }
    rc = wait_up(t, base, timeout_ms, tcp_up, tcp, err, cap);
    if (rc) {
        xfer_tcp_del(tcp);
        return rc;
    }
    *out = tcp;
    return 0;
}

int demo_tcp_connect(const demo_tcp *t, struct event_base *base,
                     uint64_t timeout_ms, xfer_tcp **out, char *err,
                     size_t cap)
{
    return connect_with(t, base, NULL, timeout_ms, out, err, cap);
}

int demo_tcp_connect_dir(const demo_tcp *t, struct event_base *base,
                         struct xfer_dir *dir, uint64_t timeout_ms,
                         xfer_tcp **out, char *err, size_t cap)
{
    return connect_with(t, base, dir, timeout_ms, out, err, cap);
}

int demo_tcp_connect_rdma(const demo_tcp *t, struct event_base *base,
                          uint64_t timeout_ms, xfer_rdma **out, char *err,
                          size_t cap)
{
    xfer_rdma_config rc_;
    xfer_rdma_config_default(&rc_);
    tcp_config(t, &rc_.tcp);
    xfer_rdma *r = NULL;
    int rc = xfer_rdma_new(base, &rc_, &r);
    if (rc) {
        snprintf(err, cap, "cannot make the rdma transport: %s",
                 xfer_strerror(rc));
        return rc;
    }
    rc = wait_up(t, base, timeout_ms, rdma_up, r, err, cap);
    if (rc) {
        xfer_rdma_del(r);
        return rc;
    }
    *out = r;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* STATUS                                                                  */
/* ---------------------------------------------------------------------- */

static int send_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int recv_all(int fd, uint8_t *p, size_t n)
{
    while (n) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Read one STATUS_OK answering STATUS_REQ; anything else is a failure. */
static int recv_status(int fd, xfer_wire_status *st)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    xfer_wire_hdr h;
    xfer_wire_msg m;
    xfer_wire_reason why;
    if (recv_all(fd, buf, XFER_WIRE_HDR) != 0 ||
        xfer_wire_decode_hdr(buf, XFER_WIRE_HDR, &h, &why) != 0 ||
        h.type != XFER_WIRE_T_STATUS_OK || h.req != STATUS_REQ ||
        h.len > sizeof buf ||
        recv_all(fd, buf + XFER_WIRE_HDR, h.len - XFER_WIRE_HDR) != 0 ||
        xfer_wire_decode_body(&h, buf + XFER_WIRE_HDR, h.len - XFER_WIRE_HDR,
                              &m, &why) != 0)
        return -1;
    *st = m.st;
    return 0;
}

static int status_one(uint16_t port, xfer_wire_status *st)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    xfer_wire_msg m = {.type = XFER_WIRE_T_STATUS,
                       .shard = XFER_WIRE_SHARD_ALL};
    size_t n = xfer_wire_encode(&m, STATUS_REQ, buf, sizeof buf);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int rc = XFER_ERR_IO;
    if (fd < 0 || n == 0)
        goto out;
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        send_all(fd, buf, n) == 0 && recv_status(fd, st) == 0)
        rc = 0;
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

int demo_tcp_status(const demo_tcp *t, uint16_t k, xfer_wire_status *st)
{
    return k < t->n ? status_one(t->port[k], st) : XFER_ERR_IO;
}

pid_t demo_tcp_pid(const demo_tcp *t, uint16_t k)
{
    return k < t->n ? t->pid[k] : 0;
}

const char *demo_tcp_addr(const demo_tcp *t, uint16_t k)
{
    return k < t->n ? t->addrs[k] : NULL;
}

int demo_tcp_bytes_in_use(const demo_tcp *t, uint64_t *bytes)
{
    int rc = 0;
    *bytes = 0;
    for (uint16_t k = 0; k < t->n; k++) {
        xfer_wire_status st;
        if (demo_tcp_status(t, k, &st) == 0)
            *bytes += st.bytes_in_use;
        else
            rc = XFER_ERR_IO;
    }
    return rc;
}

/* ---------------------------------------------------------------------- */
/* The end                                                                 */
/* ---------------------------------------------------------------------- */

/* Reap until every child exited or `end` (ms) passed; then SIGKILL the
 * rest.  Returns how many did not exit 0 on their own. */
static int reap_all(demo_tcp *t, uint64_t end)
{
    int bad = 0, left;
    do {
        left = 0;
        for (uint16_t k = 0; k < t->n; k++) {
            int status = 0;
            if (t->pid[k] <= 0)
                continue;
            pid_t r = waitpid(t->pid[k], &status, WNOHANG);
            if (r == t->pid[k] || (r < 0 && errno == ECHILD)) {
                bad += r < 0 || !WIFEXITED(status) || WEXITSTATUS(status);
                t->pid[k] = 0;
            }
            left += t->pid[k] > 0;
        }
        if (left)
            sleep_ms(5);
    } while (left && now_ms() < end);
    for (uint16_t k = 0; k < t->n; k++)
        if (t->pid[k] > 0) {
            kill(t->pid[k], SIGKILL);
            waitpid(t->pid[k], NULL, 0);
            t->pid[k] = 0;
            bad++;
        }
    return bad;
}

static void remove_files(const demo_tcp *t)
{
    static const char *const ext[] = {"port", "port.tmp", "log"};
    char path[320];
    if (!t->dir[0])
        return;
    for (uint16_t k = 0; k < t->n; k++)
        for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
            file_path(t, k, ext[i], path, sizeof path);
            unlink(path);
        }
    rmdir(t->dir);
}

int demo_tcp_stop(demo_tcp *t)
{
    if (!t)
        return 0;
    for (uint16_t k = 0; k < t->n; k++)
        if (t->pid[k] > 0)
            kill(t->pid[k], SIGTERM);
    int bad = reap_all(t, now_ms() + t->cfg.lease_ttl_ms + 2000);
    remove_files(t);
    free(t);
    return bad;
}
