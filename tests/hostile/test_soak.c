/*
 * tests/hostile/test_soak.c - issue 12's soak: while 100 hostile
 * connections (a child process) run a seeded mix of the attacks of
 * test_hostile.c against 4 xferd processes, a well-behaved producer
 * (xfer_tcp, its own session) does XFER_SOAK_TRANSFERS (10 000) transfers
 * to the 4 shards, and a separate consumer process (an xfer_consumer,
 * tests/consumer/roles.c, not xferd's own sink) reads every available
 * transfer in place from the shards' shared memory (xferd --shm), checks
 * every byte and releases it (issue 24).  Asserts: each transfer ends
 * exactly once at the producer, succeeded, and was reported available
 * exactly once at the consumer with every byte the producer wrote; at
 * the end every pool is full again; and each xferd's anonymous memory
 * (RssAnon) grew by at most 32 MiB from the middle of the run to its end
 * (flat: the attacks hold nothing that accumulates; not asserted under
 * AddressSanitizer, whose quarantine grows by design).  Prints the seed
 * (XFER_SEED), the attacks by class, the producer's transfers and
 * failures, the consumer's outcomes, and each xferd's RSS at start,
 * middle and end.
 *
 * The daemons run with quotas that add up to at most their caps
 * (max-sessions x session quota <= cap), the condition under which no
 * session can make another's reserve fail (docs/operating.md,
 * "Bounds and quotas").
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS: the counters shared with the child */
#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth.h" /* wire_private_dep: HELLO2 as the hostile client */
#include "mp.h"
#include "roles.h" /* tests/consumer: the consumer process */
#include "xfer/shm.h"
#include "testutil.h"

#define NSHARDS 4
#define NHOSTILE 100
#define INFLIGHT 8
#define SLICE_MAX (16u << 10)

/* The attack classes (the numbering in the names). */
enum { A_OWN, A_GUESS, A_TOMB, A_PIN, A_SILENT, A_QUOTA, A_NOWRITE,
       A_ROLE, A_COUNT };
static const char *const a_name[A_COUNT] = {
    "1-foreign-write/commit/cancel", "2-guessed-resv-id",
    "3-tombstone-victim-id", "4-stalled-write", "5-silent/partial-conn",
    "6-quota-grab", "7-commit-without-write", "1-producer-subscribe"};

/* Shared with the hostile child. */
typedef struct shared {
    volatile int stop;
    volatile uint64_t attacks[A_COUNT];
    volatile uint64_t reconnects, max_good_id;
} shared;

typedef struct hconn {
    int fd;
    uint16_t shard;
    bool stalled;     /* left mid-frame or silent: the server will close */
    uint64_t since_ms, next_id;
    uint32_t sess;
} hconn;

static uint16_t ports[NSHARDS];

static int hostile_recv(int fd, xfer_wire_msg *r)
{
    xfer_wire_hdr h;
    return tw_recv_msg(fd, &h, r);
}

static void hconn_open(hconn *c, uint32_t sess, bool hello)
{
    c->fd = mp_connect(ports[c->shard]);
    c->stalled = false;
    c->sess = sess;
    if (c->fd < 0 || !hello)
        return;
    struct timeval tv = {1, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    uint8_t session[XFER_WIRE_SESSION] = {0};
    memcpy(session, &sess, sizeof sess);
    session[15] = 0xbd;
    xfer_wire_msg m, r;
    if (xfer_auth_hello(&m, XFER_WIRE_ROLE_PRODUCER, 0, c->shard,
                        session) != 0 ||
        tw_send_msg(c->fd, &m, 1, NULL) != 0 || hostile_recv(c->fd, &r) ||
        r.type != XFER_WIRE_T_HELLO_ACK) {
        close(c->fd);
        c->fd = -1;
    }
}

/* One request; false when the connection is gone. */
static bool hcall(hconn *c, const xfer_wire_msg *m, const void *data,
                  xfer_wire_msg *r)
{
    return tw_send_msg(c->fd, m, 7, data) == 0 && hostile_recv(c->fd, r) == 0;
}

static void attack(hconn *c, int cls, uint64_t *rng, shared *sh)
{
    static uint8_t junk[65536];
    uint64_t good = 1 + tu_rand(rng) % (sh->max_good_id + 64);
    xfer_wire_msg m = {0}, r;
    bool ok = true;
    switch (cls) {
    case A_OWN:
        m = (xfer_wire_msg){.type = XFER_WIRE_T_WRITE, .id = good,
                            .attempt = 1, .len = 64,
                            .resv_id = tu_rand(rng)};
        ok = hcall(c, &m, junk, &r);
        m.type = tu_rand(rng) % 2 ? XFER_WIRE_T_COMMIT : XFER_WIRE_T_CANCEL;
        ok = ok && hcall(c, &m, NULL, &r);
        break;
    case A_GUESS:
        m = (xfer_wire_msg){.type = XFER_WIRE_T_COMMIT, .id = good,
                            .attempt = 1, .resv_id = tu_rand(rng)};
        ok = hcall(c, &m, NULL, &r);
        break;
    case A_TOMB: /* tombstone ids the producer will use soon */
        m = (xfer_wire_msg){.type = XFER_WIRE_T_CANCEL,
                            .id = sh->max_good_id + 1 + tu_rand(rng) % 64,
                            .attempt = 1};
        ok = hcall(c, &m, NULL, &r);
        break;
    case A_PIN: {
        m = (xfer_wire_msg){.type = XFER_WIRE_T_RESERVE, .id = c->next_id++,
                            .attempt = 1, .len = 8192};
        ok = hcall(c, &m, NULL, &r);
        if (ok && r.type == XFER_WIRE_T_RESERVE_OK) {
            xfer_wire_msg w = {.type = XFER_WIRE_T_WRITE, .id = m.id,
                               .attempt = 1, .len = 8192,
                               .resv_id = r.resv_id};
            uint8_t buf[XFER_WIRE_MAX_FIXED];
            size_t n = xfer_wire_encode(&w, 8, buf, sizeof buf);
            tw_send_all(c->fd, buf, n);
            tw_send_all(c->fd, junk, 100); /* and then nothing */
            c->stalled = true;
        }
        break;
    }
    case A_SILENT:
        close(c->fd);
        hconn_open(c, c->sess + 7919, false);
        if (c->fd >= 0 && tu_rand(rng) % 2)
            tw_send_all(c->fd, "XFRW\x01", 5);
        c->stalled = true;
        break;
    case A_QUOTA:
        m = (xfer_wire_msg){.type = XFER_WIRE_T_RESERVE, .id = c->next_id++,
                            .attempt = 1, .len = 65536};
        ok = hcall(c, &m, NULL, &r);
        break;
    case A_NOWRITE:
        m = (xfer_wire_msg){.type = XFER_WIRE_T_RESERVE, .id = c->next_id++,
                            .attempt = 1, .len = 512};
        ok = hcall(c, &m, NULL, &r);
        if (ok && r.type == XFER_WIRE_T_RESERVE_OK) {
            m = (xfer_wire_msg){.type = XFER_WIRE_T_COMMIT, .id = m.id,
                                .attempt = 1, .resv_id = r.resv_id};
            ok = hcall(c, &m, NULL, &r);
        }
        break;
    default:
        m = (xfer_wire_msg){.type = XFER_WIRE_T_SUBSCRIBE};
        ok = hcall(c, &m, NULL, &r);
        break;
    }
    sh->attacks[cls]++;
    if (!ok && !c->stalled) {
        close(c->fd);
        c->fd = -1;
    }
}

static void hostile_main(uint64_t seed, shared *sh)
{
    static hconn cs[NHOSTILE];
    uint64_t rng = seed ^ 0x40571e;
    uint32_t sess = (uint32_t)seed * 1000;
    for (int i = 0; i < NHOSTILE; i++) {
        cs[i].shard = (uint16_t)(i % NSHARDS);
        cs[i].next_id = (1ull << 40) + (uint64_t)i * 1000000000ull;
        hconn_open(&cs[i], ++sess, true);
    }
    while (!sh->stop) {
        hconn *c = &cs[tu_rand(&rng) % NHOSTILE];
        uint64_t now = mp_now_ms();
        if (c->stalled && now < c->since_ms) {
            nanosleep(&(struct timespec){0, 100000}, NULL);
            continue;
        }
        if (c->fd < 0 || c->stalled) {
            if (c->fd >= 0)
                close(c->fd);
            sh->reconnects++;
            hconn_open(c, ++sess, true);
            if (c->fd < 0) {
                nanosleep(&(struct timespec){0, 1000000}, NULL);
                continue;
            }
        }
        attack(c, (int)(tu_rand(&rng) % A_COUNT), &rng, sh);
        /* a stalled one is left for a while: some past the server's
         * timeouts (300 ms: the server closes it), some not (we do) */
        if (c->stalled)
            c->since_ms = now + 20 + tu_rand(&rng) % 400;
    }
    _exit(0);
}

/* ---------------------------------------------------------------------- */
/* The good producer                                                       */
/* ---------------------------------------------------------------------- */

typedef struct run {
    mp_producer p;
    role cons;        /* the consumer process */
    uint64_t seed;
    long mid_anon[NSHARDS]; /* RssAnon halfway, kB */
    pid_t pids[NSHARDS];
    uint64_t rng;
    uint8_t *seen;
    uint32_t total, submitted, completed, succeeded, dup;
    uint32_t reported; /* outcomes the consumer process reported */
    uint32_t *slot_of, free_slots[INFLIGHT], nfree;
    int32_t first_err;
    shared *sh;
} run;

static void submit_next(run *r);

/* Transfers completed at the producer that the consumer process has not
 * reported yet: their regions are READY, or taken and not yet released,
 * and count against the producer's session quota until released. */
#define LAG_MAX 16

static void top_up(run *r)
{
    while (r->nfree && r->submitted < r->total &&
           r->completed < r->reported + LAG_MAX)
        submit_next(r);
}

static void on_done(void *ud, const xfer_result *res)
{
    run *r = ud;
    if (res->id == 0 || res->id > r->total || r->seen[res->id]++) {
        r->dup++;
        return;
    }
    r->completed++;
    if (res->status == 0)
        r->succeeded++;
    else if (!r->first_err)
        r->first_err = res->status;
    r->free_slots[r->nfree++] = r->slot_of[res->id];
    top_up(r);
}

static void submit_next(run *r)
{
    uint64_t id = ++r->submitted;
    uint32_t slot = r->free_slots[--r->nfree];
    xfer_slice sl[NSHARDS];
    for (int k = 0; k < NSHARDS; k++) {
        sl[k].off = ((uint64_t)slot * NSHARDS + (uint64_t)k) * SLICE_MAX;
        sl[k].len = 1 + (uint32_t)(tu_rand(&r->rng) % SLICE_MAX);
        for (uint32_t i = 0; i < sl[k].len; i++)
            r->p.staging[sl[k].off + i] =
                role_pattern(r->seed, id, (uint16_t)k, i);
    }
    xfer_transfer_desc d = {.id = id, .group = r->p.group, .pool = r->p.pool,
                            .nslices = NSHARDS, .slices = sl};
    ck_assert_int_eq(xfer_engine_submit(r->p.e, &d, on_done, r), 0);
    r->slot_of[id] = slot;
    r->sh->max_good_id = id;
}

/* One field of /proc/PID/status, in kB ("VmRSS", "RssAnon"). */
static long status_kb(pid_t pid, const char *field)
{
    char path[64], line[256], fmt[48];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    snprintf(fmt, sizeof fmt, "%s: %%ld kB", field);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, fmt, &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static long rss_kb(pid_t pid)
{
    return status_kb(pid, "VmRSS");
}

static bool all_done(void *ud)
{
    run *r = ud;
    /* keep the consumer's pipe drained, so it never blocks on it, and
     * hold the producer within LAG_MAX of it (flow control: a real
     * deployment's scheduler would not run ahead of its consumer) */
    role_poll(&r->cons, 0);
    r->reported = (uint32_t)role_count(&r->cons, "C ");
    top_up(r);
    if (!r->mid_anon[0] && r->completed >= r->total / 2)
        for (int k = 0; k < NSHARDS; k++)
            r->mid_anon[k] = status_kb(r->pids[k], "RssAnon");
    return r->completed + r->dup >= r->total;
}

START_TEST(test_soak_hostile_mix)
{
    uint64_t seed = tu_seed("test_soak_hostile_mix", 0x50a1c0de);
    const char *env = getenv("XFER_SOAK_TRANSFERS");
    static run r;
    memset(&r, 0, sizeof r);
    r.total = env ? (uint32_t)strtoul(env, NULL, 10) : 10000;
    ck_assert_uint_gt(r.total, 0);
    r.rng = seed;
    r.seed = seed;
    char shm[64];
    snprintf(shm, sizeof shm, "xfer-soak-%d", (int)getpid());
    r.seen = calloc(r.total + 1, 1);
    r.slot_of = calloc(r.total + 1, sizeof *r.slot_of);
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(sh, MAP_FAILED);
    memset((void *)sh, 0, sizeof *sh);
    r.sh = sh;
    mp_proc d[NSHARDS];
    long rss0[NSHARDS];
    for (int k = 0; k < NSHARDS; k++) {
        char shard[8];
        snprintf(shard, sizeof shard, "%d", k);
        /* 200 sessions x (40 reservations, 640 KiB, 64 tombstones) stay
         * within 8192 reservations, 128 MiB and 16384 tombstones.  The
         * good producer's 8 transfers in flight (at most 128 KiB a
         * shard) leave room for regions READY until the consumer process
         * has taken them (they count against the producer's session
         * until then, and the consumer is a process of its own on a
         * loaded machine). */
        const char *args[] = {
            "--shards", shard, "--pool", "128M", "--lease-ttl", "2s",
            "--shm", shm, "--take-grace", "2s",
            "--quiet", "--max-sessions", "200",
            "--session-max-resv", "40", "--session-max-bytes", "640K",
            "--max-resv", "8192",
            "--session-max-tombs", "64", "--write-timeout", "300ms",
            "--header-timeout", "300ms", "--hello-timeout", "300ms",
            /* every peer here is 127.0.0.1: the bounds per peer address
             * would count the attacker and the good producer as one, so
             * they are lifted to the caps (the sessions' quotas still
             * add up to them) */
            "--max-peer-sessions", "200", "--peer-max-resv", "8192",
            "--peer-max-bytes", "128M", "--peer-max-tombs", "16384", NULL};
        ck_assert_int_eq(mp_xferd(&d[k], 0, args), 0);
        ports[k] = d[k].port;
        rss0[k] = rss_kb(d[k].pid);
        r.pids[k] = d[k].pid;
    }
    ck_assert_int_eq(role_consumer(&r.cons, ports, NSHARDS, shm, seed), 0);
    fflush(stdout);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0)
        hostile_main(seed, sh);
    mp_track(child);
    /* the attacks run a second before the producer starts, and on */
    nanosleep(&(struct timespec){1, 0}, NULL);
    ck_assert_int_eq(mp_producer_new(&r.p, ports, NSHARDS,
                                     (size_t)INFLIGHT * NSHARDS * SLICE_MAX,
                                     10000000000ull), 0);
    ck_assert(mp_producer_wait_connected(&r.p, 10000));
    for (uint32_t i = 0; i < INFLIGHT; i++)
        r.free_slots[r.nfree++] = INFLIGHT - 1 - i;
    for (uint32_t i = 0; i < INFLIGHT && r.submitted < r.total; i++)
        submit_next(&r);
    bool done = mp_run_while(r.p.base, all_done, &r, 240000);
    sh->stop = 1;
    int status;
    waitpid(child, &status, 0);
    printf("soak: seed %" PRIu64 ", %d hostile connections, %" PRIu64
           " reconnects\n", seed, NHOSTILE, sh->reconnects);
    uint64_t total_attacks = 0;
    for (int i = 0; i < A_COUNT; i++) {
        printf("soak: attacks %-30s %" PRIu64 "\n", a_name[i],
               sh->attacks[i]);
        total_attacks += sh->attacks[i];
    }
    printf("soak: good producer %u transfers, %u ok, %u failed (first %s), "
           "%u duplicate\n", r.total, r.succeeded, r.completed - r.succeeded,
           r.first_err ? xfer_strerror(r.first_err) : "-", r.dup);
    ck_assert(done);
    ck_assert(mp_producer_del(&r.p, 30000));
    /* the consumer reports every id, then goes */
    uint64_t end = mp_now_ms() + 30000;
    while (role_count(&r.cons, "C ") < r.total && !r.cons.eof &&
           mp_now_ms() < end)
        role_poll(&r.cons, 50);
    role_kill(&r.cons, SIGTERM);
    role_out *out = calloc(r.total + 1, sizeof *out);
    role_parse(NULL, &r.cons, out, r.total);
    uint32_t avail = 0, verified = 0, twice = 0;
    for (uint32_t id = 1; id <= r.total; id++) {
        avail += out[id].cavail;
        verified += out[id].cver;
        twice += out[id].cn > 1;
    }
    printf("soak: consumer process %u available, %u verified, %u reported "
           "twice\n", avail, verified, twice);
    bool flat = true;
    for (int k = 0; k < NSHARDS; k++) {
        xfer_wire_status st;
        int rc = mp_wait_pool_free(ports[k], 20000, &st);
        long anon = status_kb(d[k].pid, "RssAnon");
        printf("soak: shard %d rss %ld kB -> %ld kB, anon %ld kB halfway "
               "-> %ld kB, pool %" PRIu64 " in use %" PRIu64 " live %" PRIu64
               "\n", k, rss0[k], rss_kb(d[k].pid), r.mid_anon[k], anon,
               st.pool_bytes, st.bytes_in_use, st.live);
        ck_assert_int_eq(rc, 0);
        flat &= anon <= r.mid_anon[k] + 32 * 1024;
        xfer_shm_unlink(shm, (uint16_t)k);
    }
#if !defined(__SANITIZE_ADDRESS__)
    ck_assert_msg(flat, "a shard's anonymous memory kept growing");
#endif
    for (uint32_t id = 1; id <= r.total; id++) {
        ck_assert_uint_eq(out[id].cn, 1);
        ck_assert(out[id].cavail);
        ck_assert(out[id].cver);
    }
    free(out);
    role_free(&r.cons);
    ck_assert_uint_eq(r.dup, 0);
    ck_assert_uint_eq(r.completed, r.total);
    ck_assert_uint_eq(r.succeeded, r.total); /* none failed for a peer */
    for (uint32_t id = 1; id <= r.total; id++)
        ck_assert_uint_eq(r.seen[id], 1);
    ck_assert_uint_gt(total_attacks, 0);
    for (int i = 0; i < A_COUNT; i++)
        ck_assert_uint_gt(sh->attacks[i], 0);
    free(r.seen);
    free(r.slot_of);
    mp_kill_all();
}
END_TEST

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    Suite *s = suite_create("soak");
    TCase *tc = tcase_create("soak");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_soak_hostile_mix);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
