/*
 * tests/hostile/test_host.c - issue 24, classes 4 and 5, against real
 * xferd processes: the metrics endpoint is as bounded as the shard port
 * (header and body sizes, methods, connections, idle time, the fd limit,
 * and transfers that go on while it is attacked), and the files xferd
 * touches on the host (the trace and the port file are never written
 * through a planted link and are created 0600, a secret file others may
 * read is refused, a /dev/shm name squatted by another user is named as
 * such, with its uid).
 *
 * `test_host shm` runs only the squatter's test, which needs root (a child
 * setuid()s to nobody to squat the name): 77 (skipped) otherwise.
 */
#define _GNU_SOURCE /* prlimit(2): the fd limit of the xferd child */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "mp.h"
#include "raw.h"
#include "testutil.h"
#include "xfer/errors.h"

static mp_proc d;
static char dir[64]; /* a private temporary directory per test */

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/xfer-host-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    mp_kill_all();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

static void sleep_ms(long ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL);
}

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

/* The fds process pid has open now. */
static int open_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *dd = opendir(path);
    if (!dd)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(dd)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(dd);
    return n;
}

/* Bytes of file path (its lines holding `what` when what != NULL). */
static int lines_with(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, what) != NULL;
    fclose(f);
    return n;
}

/* The first line of file path holding `what`, into out ("" if none). */
static void line_with(const char *path, const char *what, char *out,
                      size_t cap)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f))
        if (strstr(line, what)) {
            snprintf(out, cap, "%s", line);
            break;
        }
    fclose(f);
}

/* ---------------------------------------------------------------------- */
/* HTTP as an attacker speaks it                                           */
/* ---------------------------------------------------------------------- */

/* Send what (len bytes, or as much as the server takes) and read the
 * answer's first bytes into out; returns the bytes read (0: closed
 * without an answer, -1: nothing within the 5 s receive timeout). */
static ssize_t ask(uint16_t port, const void *what, size_t len, char *out,
                   size_t cap)
{
    int fd = mp_connect(port);
    ck_assert_int_ge(fd, 0);
    const char *p = what;
    for (size_t at = 0; at < len;) {
        ssize_t w = send(fd, p + at, len - at, MSG_NOSIGNAL);
        if (w <= 0)
            break; /* the server closed on us: the answer is read below */
        at += (size_t)w;
    }
    ssize_t r = recv(fd, out, cap - 1, 0);
    out[r > 0 ? r : 0] = '\0';
    close(fd);
    return r;
}

static void scrape_ok(uint16_t port)
{
    static const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                              "Connection: close\r\n\r\n";
    char resp[256];
    ck_assert_int_gt(ask(port, get, sizeof get - 1, resp, sizeof resp), 0);
    ck_assert_msg(strncmp(resp, "HTTP/1.1 200", 12) == 0, "%.60s", resp);
}

static const char *const mbounds[] = {"--metrics-max-conns", "8",
                                      "--metrics-idle-timeout", "1s",
                                      "--metrics-max-header", "4K",
                                      "--metrics-max-body", "1K"};

/* xferd with --metrics on a free port and the bounds above; returns the
 * metrics port. */
static uint16_t start_metrics(bool quiet)
{
    static char maddr[32];
    uint16_t mport = free_port();
    snprintf(maddr, sizeof maddr, "127.0.0.1:%u", (unsigned)mport);
    const char *args[16] = {"--pool", "1M", "--metrics", maddr};
    int n = 4;
    for (size_t i = 0; i < sizeof mbounds / sizeof *mbounds; i++)
        args[n++] = mbounds[i];
    if (quiet)
        args[n++] = "--quiet";
    args[n] = NULL;
    ck_assert_int_eq(mp_xferd(&d, 0, args), 0);
    return mport;
}

/* Class 4: a request line or headers longer than the bound, a body longer
 * than the bound, an unknown method and a silent connection are each
 * answered (or closed) at once or at the idle timeout, not buffered
 * without end; open connections stay at the cap; scrapes work after. */
START_TEST(test_hostile_metrics_bounds)
{
    uint16_t mport = start_metrics(true);
    scrape_ok(mport);
    char resp[256];
    size_t big = 1u << 20;
    char *junk = malloc(big + 64);
    ck_assert_ptr_nonnull(junk);
    /* a request line of 1 MiB without its end */
    memcpy(junk, "GET /", 5);
    memset(junk + 5, 'a', big - 5);
    ck_assert_int_gt(ask(mport, junk, big, resp, sizeof resp), 0);
    ck_assert_msg(strncmp(resp, "HTTP/1.1 4", 10) == 0, "%.60s", resp);
    /* 1 MiB of headers without the blank line */
    size_t n = (size_t)snprintf(junk, 64, "GET /metrics HTTP/1.1\r\n");
    while (n + 8 < big) {
        memcpy(junk + n, "X-a: b\r\n", 8);
        n += 8;
    }
    ck_assert_int_gt(ask(mport, junk, n, resp, sizeof resp), 0);
    ck_assert_msg(strncmp(resp, "HTTP/1.1 4", 10) == 0, "%.60s", resp);
    /* a body of 1 GB announced: 413 before a byte of it is sent */
    static const char post[] = "POST /metrics HTTP/1.1\r\nHost: x\r\n"
                               "Content-Length: 1000000000\r\n\r\n";
    ck_assert_int_gt(ask(mport, post, sizeof post - 1, resp, sizeof resp),
                     0);
    ck_assert_msg(strncmp(resp, "HTTP/1.1 413", 12) == 0, "%.60s", resp);
    /* a small POST is still 405 */
    static const char post2[] = "POST /metrics HTTP/1.1\r\nHost: x\r\n"
                                "Content-Length: 4\r\n\r\nabcd";
    ck_assert_int_gt(ask(mport, post2, sizeof post2 - 1, resp, sizeof resp),
                     0);
    ck_assert_msg(strncmp(resp, "HTTP/1.1 405", 12) == 0, "%.60s", resp);
    /* a method outside the allowed ones */
    static const char trace[] = "TRACE /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    ck_assert_int_gt(ask(mport, trace, sizeof trace - 1, resp, sizeof resp),
                     0);
    ck_assert_msg(strncmp(resp, "HTTP/1.1 501", 12) == 0, "%.60s", resp);
    /* a silent connection is closed at the idle timeout (1 s), well
     * within mp_connect's 5 s receive timeout */
    ck_assert_int_eq(ask(mport, "", 0, resp, sizeof resp), 0);
    /* 40 connections: xferd holds at most the cap (8) of them */
    sleep_ms(200);
    int fds0 = open_fds(d.pid);
    int c[40];
    for (int i = 0; i < 40; i++) {
        c[i] = mp_connect(mport); /* the rest wait in the backlog */
        ck_assert_int_ge(c[i], 0);
    }
    sleep_ms(300);
    int held = open_fds(d.pid) - fds0;
    printf("metrics: 40 connections, xferd holds %d\n", held);
    ck_assert_int_le(held, 8);
    ck_assert_int_ge(held, 1);
    for (int i = 0; i < 40; i++)
        close(c[i]);
    sleep_ms(300);
    /* every slot came back: more scrapes than the cap, one at a time */
    for (int i = 0; i < 20; i++)
        scrape_ok(mport);
    ck_assert_int_le(open_fds(d.pid), fds0 + 1);
    free(junk);
}
END_TEST

/* Class 4: at the fd limit the metrics listener pauses accepting instead
 * of spinning on the waiting connections: little CPU, no flood of log
 * lines, the shard port keeps serving, and scrapes work once fds are
 * back. */
START_TEST(test_hostile_metrics_fd_limit_pauses)
{
    uint16_t mport = start_metrics(false); /* the log is checked */
    int p = mp_connect(d.port);
    ck_assert_int_ge(p, 0);
    ck_assert_int_eq(mp_hello_role(p, 0, XFER_WIRE_ROLE_PRODUCER), 0);
    struct rlimit old, low;
    ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, NULL, &old), 0);
    low.rlim_cur = (rlim_t)open_fds(d.pid);
    low.rlim_max = old.rlim_max;
    ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, &low, NULL), 0);
    int wait[6];
    for (int i = 0; i < 6; i++) {
        wait[i] = mp_connect(mport); /* connected in the backlog */
        ck_assert_int_ge(wait[i], 0);
    }
    sleep_ms(200);
    double cpu0 = hr_cpu_s(d.pid);
    struct stat st0, st1;
    ck_assert_int_eq(stat(d.log, &st0), 0);
    sleep_ms(1500);
    double cpu = hr_cpu_s(d.pid) - cpu0;
    ck_assert_int_eq(stat(d.log, &st1), 0);
    long logged = (long)(st1.st_size - st0.st_size);
    printf("metrics fd limit: %.3f CPU s in 1.5 s, %ld log bytes\n", cpu,
           logged);
    ck_assert_double_lt(cpu, 0.3); /* a spin takes about all of it */
    ck_assert_int_lt(logged, 4096);
    /* the shard port still answers the peer it has */
    xfer_wire_msg q = {.type = XFER_WIRE_T_STATUS,
                       .shard = XFER_WIRE_SHARD_ALL}, a;
    xfer_wire_hdr h;
    ck_assert_int_eq(tw_send_msg(p, &q, 7, NULL), 0);
    ck_assert_int_eq(tw_recv_msg(p, &h, &a), 0);
    ck_assert_int_eq(a.type, XFER_WIRE_T_STATUS_OK);
    /* fds back: the waiting connections are served */
    ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, &old, NULL), 0);
    static const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                              "Connection: close\r\n\r\n";
    for (int i = 0; i < 6; i++) {
        char resp[64];
        ck_assert_int_eq(tw_send_all(wait[i], get, sizeof get - 1), 0);
        ssize_t r = recv(wait[i], resp, sizeof resp - 1, 0);
        ck_assert_int_gt(r, 12);
        ck_assert(strncmp(resp, "HTTP/1.1 200", 12) == 0);
        close(wait[i]);
    }
    close(p);
    scrape_ok(mport);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Transfers while the metrics port is attacked                            */
/* ---------------------------------------------------------------------- */

enum { A_IDLE, A_LINE, A_HEADERS, A_BODY, A_SCRAPE, A_COUNT };
static const char *const a_name[A_COUNT] = {
    "idle connections", "endless request line", "endless headers",
    "huge body", "scrapes"};

typedef struct shared {
    volatile int stop;
    volatile uint64_t attacks[A_COUNT];
    volatile uint64_t answered_4xx; /* oversize requests answered 4xx */
    volatile uint64_t rounds;
} shared;

static int attack_conn(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 &&
        errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The attacker, in rounds: 32 idle connections at once (4 times the
 * cap), held a moment and dropped; an endless request line, endless
 * headers and a huge body (each written as far as the server takes it,
 * the answer read); a plain scrape. */
static void attacker_main(uint16_t mport, shared *sh)
{
    enum { NIDLE = 32 };
    static char junk[65536];
    while (!sh->stop) {
        int idle[NIDLE];
        for (int i = 0; i < NIDLE; i++)
            if ((idle[i] = attack_conn(mport)) >= 0)
                sh->attacks[A_IDLE]++;
        sleep_ms(50);
        for (int i = 0; i < NIDLE; i++)
            if (idle[i] >= 0)
                close(idle[i]);
        static const char *const heads[3] = {
            "GET /", "GET /metrics HTTP/1.1\r\n",
            "POST /metrics HTTP/1.1\r\nHost: x\r\n"
            "Content-Length: 1000000000\r\n\r\n"};
        for (int k = 0; k < 3 && !sh->stop; k++) {
            int fd = mp_connect(mport);
            if (fd < 0)
                continue;
            struct timeval tv = {0, 500000};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            send(fd, heads[k], strlen(heads[k]), MSG_NOSIGNAL);
            for (size_t i = 0; i + 8 <= sizeof junk; i += 8)
                memcpy(junk + i, k == 1 ? "X-a: b\r\n" : "aaaaaaaa", 8);
            for (int i = 0; i < 16; i++) /* up to 1 MiB */
                if (send(fd, junk, sizeof junk, MSG_NOSIGNAL) <= 0)
                    break;
            char b[16];
            if (recv(fd, b, sizeof b, 0) >= 10 && b[9] == '4')
                sh->answered_4xx++;
            close(fd);
            sh->attacks[A_LINE + k]++;
        }
        int fd = attack_conn(mport);
        if (fd >= 0) {
            static const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                                      "Connection: close\r\n\r\n";
            sleep_ms(1);
            send(fd, get, sizeof get - 1, MSG_NOSIGNAL);
            close(fd);
            sh->attacks[A_SCRAPE]++;
        }
        sh->rounds++;
    }
    _exit(0);
}

enum { NTRANSFERS = 400, INFLIGHT = 8, SLICE = 4096 };

typedef struct run {
    mp_producer p;
    uint32_t submitted, completed, succeeded, dup;
    uint8_t seen[NTRANSFERS];
    uint64_t first_id;
    pid_t xferd;
    int fds_max;
    struct event *sample;
} run;

static void submit_next(run *r);

static void on_done(void *ud, const xfer_result *res)
{
    run *r = ud;
    uint64_t i = res->id - r->first_id;
    if (res->id < r->first_id || i >= NTRANSFERS || r->seen[i]++) {
        r->dup++;
        return;
    }
    r->completed++;
    r->succeeded += res->status == 0;
    if (r->submitted < NTRANSFERS)
        submit_next(r);
}

static void submit_next(run *r)
{
    uint32_t slot = r->submitted % INFLIGHT;
    xfer_slice sl = {.off = (uint64_t)slot * SLICE, .len = SLICE};
    xfer_transfer_desc dsc = {.id = r->first_id + r->submitted++,
                              .group = r->p.group, .pool = r->p.pool,
                              .nslices = 1, .slices = &sl};
    ck_assert_int_eq(xfer_engine_submit(r->p.e, &dsc, on_done, r), 0);
}

static bool all_done(void *ud)
{
    run *r = ud;
    return r->completed + r->dup >= NTRANSFERS;
}

static void on_sample(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    run *r = arg;
    int n = open_fds(r->xferd);
    if (n > r->fds_max)
        r->fds_max = n;
}

/* NTRANSFERS transfers (INFLIGHT at a time); returns the milliseconds
 * they took (printed, never asserted). */
static uint64_t transfers(run *r, uint64_t first_id)
{
    r->first_id = first_id;
    r->submitted = r->completed = r->succeeded = r->dup = 0;
    memset(r->seen, 0, sizeof r->seen);
    uint64_t t0 = mp_now_ms();
    for (int i = 0; i < INFLIGHT; i++)
        submit_next(r);
    ck_assert(mp_run_while(r->p.base, all_done, r, 120000));
    uint64_t ms = mp_now_ms() - t0;
    ck_assert_uint_eq(r->dup, 0);
    ck_assert_uint_eq(r->completed, NTRANSFERS);
    ck_assert_uint_eq(r->succeeded, NTRANSFERS);
    for (int i = 0; i < NTRANSFERS; i++)
        ck_assert_uint_eq(r->seen[i], 1);
    return ms;
}

/* (xferd's RSS is printed, not asserted: each oversize request is cut at
 * the bound, and under ASan the quarantine grows it anyway.) */

/* One phase: the attacker (a child) against the metrics port mport,
 * batches of transfers until it did 3 more rounds; the transfers' total
 * milliseconds and count into *ms and *n, the attack's counts into *sh. */
static void attack_phase(run *r, uint16_t mport, shared *sh, uint64_t *id,
                         uint64_t *ms, uint64_t *n)
{
    memset((void *)sh, 0, sizeof *sh);
    fflush(stdout);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0)
        attacker_main(mport, sh);
    mp_track(child);
    while (sh->rounds < 1) /* the attack is under way first */
        sleep_ms(10);
    r->sample = event_new(r->p.base, -1, EV_PERSIST, on_sample, r);
    struct timeval tv = {0, 20000};
    ck_assert_int_eq(event_add(r->sample, &tv), 0);
    *ms = *n = 0;
    uint64_t rounds0 = sh->rounds;
    while ((*n == 0 || sh->rounds < rounds0 + 3) && *n < 500 * NTRANSFERS) {
        *ms += transfers(r, *id);
        *id += NTRANSFERS;
        *n += NTRANSFERS;
    }
    event_free(r->sample);
    ck_assert_uint_ge(sh->rounds, rounds0 + 3);
    sh->stop = 1;
    int status;
    waitpid(child, &status, 0);
}

/* Class 4: a good producer's transfers all complete, once and well,
 * while the metrics port is attacked; what the attack makes xferd hold
 * stays bounded (connections at the cap, oversize requests answered 4xx
 * and dropped).  For reference, in the same run: the transfers alone, and
 * while the same attack hits a decoy xferd's metrics port (what the
 * attack costs the machine, not xferd's loop).  Times printed, never
 * asserted. */
START_TEST(test_hostile_metrics_attack_spares_transfers)
{
    static char maddr[32], daddr[32];
    uint16_t mport = free_port(), dport = free_port();
    snprintf(maddr, sizeof maddr, "127.0.0.1:%u", (unsigned)mport);
    snprintf(daddr, sizeof daddr, "127.0.0.1:%u", (unsigned)dport);
    const char *args[] = {"--pool", "4M", "--consume", "--quiet",
                          "--metrics", maddr, "--metrics-max-conns", "8",
                          "--metrics-idle-timeout", "1s", NULL};
    ck_assert_int_eq(mp_xferd(&d, 0, args), 0);
    mp_proc decoy;
    args[5] = daddr;
    ck_assert_int_eq(mp_xferd(&decoy, 0, args), 0);
    run *r = calloc(1, sizeof *r);
    ck_assert_ptr_nonnull(r);
    r->xferd = d.pid;
    ck_assert_int_eq(mp_producer_new(&r->p, &d.port, 1,
                                     (size_t)INFLIGHT * SLICE,
                                     10000000000ull), 0);
    ck_assert(mp_producer_wait_connected(&r->p, 10000));
    uint64_t id = 1;
    uint64_t quiet_ms = transfers(r, id);
    id += NTRANSFERS;
    int fds0 = open_fds(d.pid);
    long rss0 = hr_rss_kib(d.pid);
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(sh, MAP_FAILED);
    uint64_t decoy_ms, decoy_n, ms, n;
    attack_phase(r, dport, sh, &id, &decoy_ms, &decoy_n);
    int decoy_fds_max = r->fds_max;
    r->fds_max = 0;
    attack_phase(r, mport, sh, &id, &ms, &n);
    long rss1 = hr_rss_kib(d.pid);
    for (int i = 0; i < A_COUNT; i++)
        printf("metrics attack: %-22s %" PRIu64 "\n", a_name[i],
               sh->attacks[i]);
    printf("metrics attack: transfers of %d B, %d in flight: alone %d in %"
           PRIu64 " ms; decoy attacked %" PRIu64 " in %" PRIu64 " ms; "
           "xferd attacked %" PRIu64 " in %" PRIu64 " ms (%" PRIu64
           " rounds)\n", SLICE, INFLIGHT, NTRANSFERS, quiet_ms, decoy_n,
           decoy_ms, n, ms, sh->rounds);
    printf("metrics attack: xferd fds %d, at most %d (decoy attacked: %d); "
           "rss %ld -> %ld KiB; %" PRIu64 " oversize requests answered "
           "4xx\n", fds0, r->fds_max, decoy_fds_max, rss0, rss1,
           sh->answered_4xx);
    /* the connection cap (8) and one spare, whatever the attack */
    ck_assert_int_gt(r->fds_max, 0);
    ck_assert_int_le(r->fds_max, fds0 + 9);
    ck_assert_uint_gt(sh->answered_4xx, 0);
    for (int i = 0; i < A_COUNT; i++)
        ck_assert_uint_gt(sh->attacks[i], 0);
    ck_assert(mp_producer_del(&r->p, 30000));
    xfer_wire_status st;
    ck_assert_int_eq(mp_wait_pool_free(d.port, 10000, &st), 0);
    sleep_ms(1500); /* the idle attackers' connections time out */
    scrape_ok(mport);
    munmap((void *)sh, sizeof *sh);
    free(r);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Files on the host                                                       */
/* ---------------------------------------------------------------------- */

static const char PRECIOUS[] = "root-only data, not xferd's\n";

/* A file of ours with PRECIOUS in it, mode 0600, at dir/name. */
static void precious(const char *name, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, PRECIOUS, sizeof PRECIOUS - 1),
                     (ssize_t)(sizeof PRECIOUS - 1));
    close(fd);
}

static void unchanged(const char *path)
{
    char buf[256];
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    ck_assert_int_eq(n, (ssize_t)(sizeof PRECIOUS - 1));
    ck_assert(memcmp(buf, PRECIOUS, sizeof PRECIOUS - 1) == 0);
}

static unsigned mode_of(const char *path)
{
    struct stat st;
    ck_assert_int_eq(lstat(path, &st), 0);
    return (unsigned)(st.st_mode & 07777);
}

/* Start xferd (not through mp_xferd: these tests choose the port file)
 * with stdout and stderr to dir/log; wait until it says it listens or
 * exits.  Returns its pid, or 0 when it exited (*status set). */
static pid_t run_xferd(const char *const *args, int *status)
{
    char log[128];
    snprintf(log, sizeof log, "%s/log", dir);
    unlink(log); /* not the last run's "listening" */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        const char *argv[32];
        int n = 0;
        const char *bin = getenv("XFERD");
        argv[n++] = bin ? bin : "xferd";
        argv[n++] = "--port";
        argv[n++] = "0";
        argv[n++] = "--pool";
        argv[n++] = "1M";
        for (int i = 0; args[i] && n < 30; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    mp_track(pid);
    for (uint64_t end = mp_now_ms() + 10000; mp_now_ms() < end;) {
        if (waitpid(pid, status, WNOHANG) == pid)
            return 0;
        if (lines_with(log, "listening on") > 0)
            return pid;
        sleep_ms(10);
    }
    ck_abort_msg("xferd neither listened nor exited");
    return 0;
}

static void stop(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Class 5: a symlink planted where --trace will write is not followed:
 * xferd refuses the trace with one line and the link's target (a file
 * the victim owns) is unchanged. */
START_TEST(test_hostile_trace_symlink_not_followed)
{
    char target[128], link[128], log[128];
    precious("victim", target, sizeof target);
    snprintf(link, sizeof link, "%s/xferd.xtr", dir);
    ck_assert_int_eq(symlink(target, link), 0);
    const char *args[] = {"--trace", link, NULL};
    int status = 0;
    pid_t pid = run_xferd(args, &status);
    if (pid)
        stop(pid);
    unchanged(target);
    ck_assert_uint_eq(mode_of(target), 0600);
    ck_assert_int_eq(pid, 0); /* it did not run with a trace it cannot write */
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0);
    snprintf(log, sizeof log, "%s/log", dir);
    ck_assert_int_eq(lines_with(log, "cannot open trace"), 1);
    /* the link itself is left where it was */
    struct stat st;
    ck_assert_int_eq(lstat(link, &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
}
END_TEST

/* Class 5: links planted at the port file's name and at the temporary
 * name it used to be written through (PATH.tmp) are not followed: their
 * targets are unchanged, and the port file's link is left alone. */
START_TEST(test_hostile_port_file_symlink_not_followed)
{
    char t1[128], t2[128], pf[128], tmp[160], log[128];
    precious("victim1", t1, sizeof t1);
    precious("victim2", t2, sizeof t2);
    snprintf(pf, sizeof pf, "%s/xferd.port", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", pf);
    ck_assert_int_eq(symlink(t1, tmp), 0);
    ck_assert_int_eq(symlink(t2, pf), 0);
    const char *args[] = {"--port-file", pf, "--quiet", NULL};
    int status = 0;
    pid_t pid = run_xferd(args, &status);
    ck_assert_int_ne(pid, 0);
    sleep_ms(100); /* the port file is written right after "listening" */
    stop(pid);
    unchanged(t1);
    unchanged(t2);
    struct stat st;
    ck_assert_int_eq(lstat(pf, &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    snprintf(log, sizeof log, "%s/log", dir);
    ck_assert_int_eq(lines_with(log, "cannot write"), 1);
}
END_TEST

/* Class 5: what xferd creates (the trace, the port file) is 0600 whatever
 * the umask, and a regular file of ours already at the trace's name is
 * replaced by a fresh 0600 one (its old contents gone). */
START_TEST(test_hostile_created_files_private)
{
    char trace[128], pf[128], old[128];
    snprintf(trace, sizeof trace, "%s/xferd.xtr", dir);
    snprintf(pf, sizeof pf, "%s/xferd.port", dir);
    mode_t um = umask(022);
    const char *args[] = {"--trace", trace, "--port-file", pf, "--quiet",
                          NULL};
    int status = 0;
    pid_t pid = run_xferd(args, &status);
    ck_assert_int_ne(pid, 0);
    sleep_ms(100);
    stop(pid);
    ck_assert_uint_eq(mode_of(trace), 0600);
    ck_assert_uint_eq(mode_of(pf), 0600);
    /* again over an old, world-readable trace of ours */
    precious("old.xtr", old, sizeof old);
    ck_assert_int_eq(chmod(old, 0644), 0);
    const char *args2[] = {"--trace", old, "--quiet", NULL};
    pid = run_xferd(args2, &status);
    ck_assert_int_ne(pid, 0);
    stop(pid);
    umask(um);
    ck_assert_uint_eq(mode_of(old), 0600);
    char buf[8];
    int fd = open(old, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(read(fd, buf, 7), 7);
    close(fd);
    ck_assert(memcmp(buf, "XFERTRC", 7) == 0); /* a trace now */
}
END_TEST

/* Class 5: a secret file group or others may read is refused, as ssh
 * refuses such a key, with one line naming the file and its mode; the
 * same file at 0600 is taken. */
START_TEST(test_hostile_secret_file_mode)
{
    char key[128], log[128], line[1024];
    snprintf(key, sizeof key, "%s/secret.key", dir);
    int fd = open(key, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "0123456789abcdef-host\n", 22), 22);
    close(fd);
    ck_assert_int_eq(chmod(key, 0644), 0);
    const char *args[] = {"--secret-file", key, "--quiet", NULL};
    int status = 0;
    pid_t pid = run_xferd(args, &status);
    if (pid)
        stop(pid);
    ck_assert_int_eq(pid, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 2);
    snprintf(log, sizeof log, "%s/log", dir);
    line_with(log, "secret", line, sizeof line);
    ck_assert_msg(strstr(line, key) && strstr(line, "0644"), "%s", line);
    ck_assert_int_eq(lines_with(log, "xferd"), 1); /* one line */
    ck_assert_int_eq(chmod(key, 0660), 0); /* group writable: refused */
    pid = run_xferd(args, &status);
    if (pid)
        stop(pid);
    ck_assert_int_eq(pid, 0);
    ck_assert_int_eq(chmod(key, 0600), 0);
    pid = run_xferd(args, &status);
    ck_assert_int_ne(pid, 0);
    stop(pid);
}
END_TEST

/* Class 5: a /dev/shm name squatted by another user (nobody, created by a
 * child that drops root) stops xferd with a line that names that uid, not
 * "another live xferd"; the squatter's object is left alone. */
START_TEST(test_hostile_shm_squatter_named)
{
    char name[64], path[80], log[128], line[1024];
    snprintf(name, sizeof name, "xfer-host-squat-%d", (int)getpid());
    snprintf(path, sizeof path, "/%s.0", name);
    shm_unlink(path);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(3);
        int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
        if (fd < 0 || ftruncate(fd, 8192) != 0)
            _exit(4);
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(kid, &st, 0), kid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    const char *args[] = {"--shm", name, "--quiet", NULL};
    int status = 0;
    pid_t pid = run_xferd(args, &status);
    if (pid)
        stop(pid);
    struct stat sst;
    char dev[96];
    snprintf(dev, sizeof dev, "/dev/shm%s", path);
    int still = stat(dev, &sst);
    shm_unlink(path);
    ck_assert_int_eq(pid, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0);
    snprintf(log, sizeof log, "%s/log", dir);
    line_with(log, "shared memory", line, sizeof line);
    ck_assert_msg(strstr(line, "uid 65534") != NULL, "%s", line);
    ck_assert_msg(strstr(line, "live xferd") == NULL, "%s", line);
    ck_assert_int_eq(still, 0);
    ck_assert_uint_eq(sst.st_uid, 65534);
}
END_TEST

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    bool shm = argc > 1 && strcmp(argv[1], "shm") == 0;
    if (shm && geteuid() != 0) {
        printf("test_host shm: needs root (a child squats as nobody): "
               "skipped\n");
        return 77;
    }
    Suite *s = suite_create("host");
    TCase *tc = tcase_create("host");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    if (shm) {
        tcase_add_test(tc, test_hostile_shm_squatter_named);
    } else {
        tcase_add_test(tc, test_hostile_metrics_bounds);
        tcase_add_test(tc, test_hostile_metrics_fd_limit_pauses);
        tcase_add_test(tc, test_hostile_metrics_attack_spares_transfers);
        tcase_add_test(tc, test_hostile_trace_symlink_not_followed);
        tcase_add_test(tc, test_hostile_port_file_symlink_not_followed);
        tcase_add_test(tc, test_hostile_created_files_private);
        tcase_add_test(tc, test_hostile_secret_file_mode);
    }
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
