/*
 * tests/hostile/test_hostile.c - issue 12's hostile peers against a real
 * xferd process (loopback): one test per class the issue lists, each
 * asserting the server's answer to the attack and that a well-behaved
 * producer session and consumer keep working with nothing lost (the pool
 * is whole again at the end).
 *
 * The peers speak raw frames (tests/multiproc/mp.h); a "session" here is a
 * HELLO2 with 16 bytes of our choosing, as xfer_tcp sends it.
 */
#define _GNU_SOURCE /* prlimit(2): the fd limit of the xferd child */
#include <check.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth.h" /* wire_private_dep: HELLO2's proofs, as a client */
#include "mp.h"
#include "raw.h"
#include "testutil.h"
#include "xfer/errors.h"

static mp_proc d;

/* A short lease, so what a hostile peer leaves reserved ends soon. */
static const char *const plain_args[] = {"--pool", "1M", "--quiet",
                                         "--lease-ttl", "1s", NULL};

/* A HELLO2 of session `tag` (its bytes all `tag`) with role `role`. */
static xfer_wire_msg hello2(uint8_t tag, uint8_t role)
{
    uint8_t session[XFER_WIRE_SESSION];
    memset(session, tag, sizeof session);
    xfer_wire_msg m;
    ck_assert_int_eq(xfer_auth_hello(&m, role, 0, 0, session), 0);
    return m;
}

/* The flags of the last HELLO_ACK join() got. */
static uint32_t last_hello_flags;

/* Connect and say HELLO2 as session `tag`; expect HELLO_ACK. */
static int join(uint16_t port, uint8_t tag, uint8_t role)
{
    int fd = mp_connect(port);
    ck_assert_int_ge(fd, 0);
    xfer_wire_msg m = hello2(tag, role), r;
    xfer_wire_hdr h;
    ck_assert_int_eq(tw_send_msg(fd, &m, 1, NULL), 0);
    ck_assert_int_eq(tw_recv_msg(fd, &h, &r), 0);
    last_hello_flags = r.hello_flags;
    ck_assert_msg(r.type == XFER_WIRE_T_HELLO_ACK, "HELLO answered %u code %d",
                  r.type, r.code);
    ck_assert_uint_eq(r.version, 2);
    return fd;
}

static int32_t write_all(int fd, uint64_t id, uint64_t resv, uint32_t len,
                         uint8_t fill)
{
    uint8_t *data = malloc(len);
    memset(data, fill, len);
    xfer_wire_msg w = {.type = XFER_WIRE_T_WRITE, .id = id, .attempt = 1,
                       .len = len, .resv_id = resv};
    xfer_wire_msg r = hr_call(fd, &w, data);
    free(data);
    return hr_code_of(&r);
}

/* The well-behaved pair: producer session 0x60 reserves, writes, commits
 * id; a consumer takes it (the bytes are the producer's) and releases. */
static void good_pair_works(uint64_t id)
{
    int p = join(d.port, 0x60, XFER_WIRE_ROLE_PRODUCER);
    int c = join(d.port, 0x61, XFER_WIRE_ROLE_CONSUMER);
    xfer_wire_msg r = hr_reserve(p, id, 4096);
    ck_assert_int_eq(hr_code_of(&r), 0);
    uint64_t resv = r.resv_id;
    ck_assert_int_eq(write_all(p, id, resv, 4096, 0x3c), 0);
    ck_assert_int_eq(hr_op(p, XFER_WIRE_T_COMMIT, id, 1, resv), 0);
    xfer_wire_msg t = {.type = XFER_WIRE_T_TAKE, .id = id, .attempt = 1,
                       .resv_id = resv};
    r = hr_call(c, &t, NULL);
    ck_assert_int_eq(r.type, XFER_WIRE_T_TAKE_OK);
    ck_assert_uint_eq(r.len, 4096);
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_RELEASE, id, 1, resv), 0);
    close(p);
    close(c);
}

static void pool_whole(void)
{
    xfer_wire_status st;
    ck_assert_int_eq(mp_wait_pool_free(d.port, 5000, &st), 0);
    ck_assert_uint_eq(st.bytes_in_use, 0);
}

static void start(const char *const *args)
{
    ck_assert_int_eq(mp_xferd(&d, 0, args), 0);
}

static void teardown(void)
{
    mp_kill_all();
}

/* Class 1: another session may not write, commit or cancel a victim's
 * reservation; a producer may not subscribe, take or release. */
START_TEST(test_hostile_ownership)
{
    start(plain_args);
    int v = join(d.port, 0x01, XFER_WIRE_ROLE_PRODUCER);
    int a = join(d.port, 0x02, XFER_WIRE_ROLE_PRODUCER);
    xfer_wire_msg r = hr_reserve(v, 7, 4096);
    ck_assert_int_eq(hr_code_of(&r), 0);
    uint64_t resv = r.resv_id;
    ck_assert_int_eq(write_all(a, 7, resv, 4096, 0xee), XFER_ERR_PERM);
    ck_assert_int_eq(hr_op(a, XFER_WIRE_T_COMMIT, 7, 1, resv), XFER_ERR_PERM);
    ck_assert_int_eq(hr_op(a, XFER_WIRE_T_CANCEL, 7, 1, resv), XFER_ERR_PERM);
    r = hr_reserve(a, 7, 4096); /* nor take the id over */
    ck_assert_int_eq(hr_code_of(&r), XFER_ERR_PERM);
    ck_assert_int_eq(hr_op(a, XFER_WIRE_T_TAKE, 7, 1, resv), XFER_ERR_PERM);
    ck_assert_int_eq(hr_op(a, XFER_WIRE_T_RELEASE, 7, 1, resv), XFER_ERR_PERM);
    xfer_wire_msg sub = {.type = XFER_WIRE_T_SUBSCRIBE};
    r = hr_call(a, &sub, NULL);
    ck_assert_int_eq(hr_code_of(&r), XFER_ERR_PERM);
    /* The same session from a second connection is the victim itself. */
    int v2 = join(d.port, 0x01, XFER_WIRE_ROLE_PRODUCER);
    ck_assert_int_eq(write_all(v2, 7, resv, 4096, 0x11), 0);
    /* ... but it may not come back as a consumer. */
    int fd = mp_connect(d.port);
    xfer_wire_msg m = hello2(0x01, XFER_WIRE_ROLE_CONSUMER);
    xfer_wire_hdr h;
    ck_assert_int_eq(tw_send_msg(fd, &m, 1, NULL), 0);
    ck_assert_int_eq(tw_recv_msg(fd, &h, &r), 0);
    ck_assert_int_eq(hr_code_of(&r), XFER_ERR_PERM);
    ck_assert(mp_closed(fd));
    close(fd);
    ck_assert_int_eq(hr_op(v, XFER_WIRE_T_COMMIT, 7, 1, resv), 0);
    int c = join(d.port, 0x03, XFER_WIRE_ROLE_CONSUMER);
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_TAKE, 7, 1, resv), 0);
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_RELEASE, 7, 1, resv), 0);
    close(v);
    close(v2);
    close(a);
    close(c);
    good_pair_works(8);
    pool_whole();
}
END_TEST

/* A REFRESH of (id, resv) from fd; the reply (REFRESH_OK or ERROR). */
static xfer_wire_msg refresh(int fd, uint64_t id, uint64_t resv,
                             uint64_t want_ns)
{
    xfer_wire_msg m = {.type = XFER_WIRE_T_REFRESH, .id = id, .attempt = 1,
                       .resv_id = resv, .hold_ns = want_ns};
    return hr_call(fd, &m, NULL);
}

/* Issue 26: the lease refresh.  The shard says it grants refreshes
 * (HELLO_ACK flag 4); another session's refresh of a victim's
 * reservation, or a consumer's, is refused PERM and the victim writes and
 * commits as before; a refresh never grants more than one lease; an owner
 * that keeps refreshing is refused BOUNDS at the hold cap (six leases)
 * and the reservation then ends with its lease, freeing the pool. */
START_TEST(test_hostile_refresh_only_the_owners_and_bounded)
{
    static const char *const args[] = {"--pool", "1M", "--quiet",
                                       "--lease-ttl", "100ms", NULL};
    start(args);
    int v = join(d.port, 0x01, XFER_WIRE_ROLE_PRODUCER);
    ck_assert_uint_eq(last_hello_flags & XFER_WIRE_HELLO_REFRESH,
                      XFER_WIRE_HELLO_REFRESH);
    int a = join(d.port, 0x02, XFER_WIRE_ROLE_PRODUCER);
    int c = join(d.port, 0x03, XFER_WIRE_ROLE_CONSUMER);
    xfer_wire_msg r = hr_reserve(v, 7, 4096);
    ck_assert_int_eq(hr_code_of(&r), 0);
    uint64_t resv = r.resv_id;
    r = refresh(a, 7, resv, 0);
    ck_assert_int_eq(hr_code_of(&r), XFER_ERR_PERM);
    r = refresh(c, 7, resv, 0);
    ck_assert_int_eq(hr_code_of(&r), XFER_ERR_PERM);
    r = refresh(v, 7, resv + 1, 0); /* a guessed reservation id */
    ck_assert_int_eq(hr_code_of(&r), XFER_ERR_STALE);
    r = refresh(v, 7, resv, 3600ull * 1000000000ull); /* asks for an hour */
    ck_assert_int_eq(r.type, XFER_WIRE_T_REFRESH_OK);
    ck_assert_uint_eq(r.id, 7);
    ck_assert_uint_gt(r.hold_ns, 0);
    ck_assert_uint_le(r.hold_ns, 100000000ull); /* one lease at most */
    ck_assert_int_eq(write_all(v, 7, resv, 4096, 0x5a), 0);
    ck_assert_int_eq(hr_op(v, XFER_WIRE_T_COMMIT, 7, 1, resv), 0);
    r = refresh(v, 7, resv, 0); /* committed: not the producer's to hold */
    ck_assert_int_eq(hr_code_of(&r), XFER_ERR_STATE);
    int ct = join(d.port, 0x04, XFER_WIRE_ROLE_CONSUMER);
    ck_assert_int_eq(hr_op(ct, XFER_WIRE_T_TAKE, 7, 1, resv), 0);
    ck_assert_int_eq(hr_op(ct, XFER_WIRE_T_RELEASE, 7, 1, resv), 0);
    /* an owner refreshing without end meets the cap */
    r = hr_reserve(v, 8, 4096);
    ck_assert_int_eq(hr_code_of(&r), 0);
    uint64_t resv8 = r.resv_id;
    int32_t code = 0;
    for (int i = 0; i < 400 && code == 0; i++) {
        r = refresh(v, 8, resv8, 0);
        code = hr_code_of(&r);
        usleep(10000);
    }
    ck_assert_int_eq(code, XFER_ERR_BOUNDS);
    close(v);
    close(a);
    close(c);
    close(ct);
    pool_whole(); /* id 8 ended with its lease */
}
END_TEST

/* Class 2: reservation ids are unguessable: two fresh daemons hand out
 * different first ids (they came from a fixed-seed generator before). */
START_TEST(test_hostile_ids_unpredictable)
{
    uint64_t first[2];
    for (int i = 0; i < 2; i++) {
        start(plain_args);
        int p = join(d.port, 0x05, XFER_WIRE_ROLE_PRODUCER);
        xfer_wire_msg r = hr_reserve(p, 1, 64);
        ck_assert_int_eq(hr_code_of(&r), 0);
        first[i] = r.resv_id;
        close(p);
        good_pair_works(2);
        pool_whole();
        mp_kill(&d, SIGKILL);
    }
    ck_assert_uint_ne(first[0], first[1]);
}
END_TEST

/* Class 2, the id source itself: batched CSPRNG draws are never 0, never
 * repeat, are wiped from the batch when handed out, and refill after
 * XFER_AUTH_RNG_BATCH draws (one RAND_bytes per batch, not per id). */
START_TEST(test_hostile_id_batches)
{
    enum { N = 3 * XFER_AUTH_RNG_BATCH + 7 };
    static uint64_t got[N];
    xfer_auth_rng r;
    memset(&r, 0, sizeof r);
    for (unsigned i = 0; i < N; i++) {
        got[i] = xfer_auth_rng_next(&r);
        ck_assert_uint_ne(got[i], 0);
        ck_assert_uint_eq(r.left, XFER_AUTH_RNG_BATCH - 1 -
                                      i % XFER_AUTH_RNG_BATCH);
        for (unsigned k = r.left; k < XFER_AUTH_RNG_BATCH; k++)
            ck_assert_uint_eq(r.v[k], 0); /* handed out: gone from here */
        for (unsigned j = 0; j < i; j++)
            ck_assert_uint_ne(got[i], got[j]);
    }
    uint64_t a = xfer_auth_rng_next(NULL), b = xfer_auth_rng_next(NULL);
    ck_assert(a != 0 && b != 0 && a != b);
}
END_TEST

static char secret_path[64];

static void write_secret(const char *text)
{
    snprintf(secret_path, sizeof secret_path, "/tmp/xfer-hostile-%d.key",
             getpid());
    FILE *f = fopen(secret_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    ck_assert_int_eq(chmod(secret_path, 0600), 0); /* xferd refuses more */
}

static const char KEY[] = "0123456789abcdef-hostile-test";

/* HELLO2 + AUTH with `secret`; returns the fd after the server's answer
 * to AUTH (HELLO_ACK: *ok true). */
static int auth_join(const char *secret, uint8_t tag, uint8_t role,
                     bool *ok)
{
    int fd = mp_connect(d.port);
    xfer_wire_msg m = hello2(tag, role), r, a;
    xfer_wire_hdr h;
    ck_assert_int_eq(tw_send_msg(fd, &m, 1, NULL), 0);
    ck_assert_int_eq(tw_recv_msg(fd, &h, &r), 0);
    ck_assert_int_eq(r.type, XFER_WIRE_T_CHALLENGE);
    /* The server proves it knows the secret (ours or not). */
    int rc = xfer_auth_answer((const uint8_t *)secret, strlen(secret), &m,
                              &r, &a);
    if (rc != 0) { /* a wrong key of ours: still send a (bad) proof */
        a = (xfer_wire_msg){.type = XFER_WIRE_T_AUTH};
        xfer_auth_proof((const uint8_t *)secret, strlen(secret), false, &m,
                        r.nonce, a.mac);
    }
    ck_assert_int_eq(tw_send_msg(fd, &a, 1, NULL), 0);
    ck_assert_int_eq(tw_recv_msg(fd, &h, &r), 0);
    *ok = r.type == XFER_WIRE_T_HELLO_ACK;
    if (!*ok)
        ck_assert_int_eq(hr_code_of(&r), XFER_ERR_AUTH);
    return fd;
}

/* Class 2 (and the auth rule): with --secret-file, STATUS needs an
 * authenticated HELLO, a v1 HELLO and a wrong proof are refused, and the
 * right proof is served. */
START_TEST(test_hostile_auth_required)
{
    write_secret(KEY);
    const char *args[] = {"--pool", "1M", "--quiet", "--secret-file",
                          secret_path, NULL};
    start(args);
    xfer_wire_status st;
    ck_assert_int_ne(mp_status(d.port, &st), 0); /* STATUS before HELLO */
    int fd = mp_connect(d.port);
    ck_assert_int_ne(mp_hello(fd, 0), 0); /* v1: ERROR AUTH, closed */
    ck_assert(mp_closed(fd));
    close(fd);
    bool ok;
    fd = auth_join("not-the-secret-at-all", 0x09, XFER_WIRE_ROLE_PRODUCER,
                   &ok);
    ck_assert(!ok);
    ck_assert(mp_closed(fd));
    close(fd);
    int p = auth_join(KEY, 0x0a, XFER_WIRE_ROLE_PRODUCER, &ok);
    ck_assert(ok);
    int c = auth_join(KEY, 0x0b, XFER_WIRE_ROLE_CONSUMER, &ok);
    ck_assert(ok);
    xfer_wire_msg r = hr_reserve(p, 5, 512);
    ck_assert_int_eq(hr_code_of(&r), 0);
    ck_assert_int_eq(write_all(p, 5, r.resv_id, 512, 1), 0);
    ck_assert_int_eq(hr_op(p, XFER_WIRE_T_COMMIT, 5, 1, r.resv_id), 0);
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_TAKE, 5, 1, r.resv_id), 0);
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_RELEASE, 5, 1, r.resv_id), 0);
    xfer_wire_msg q = {.type = XFER_WIRE_T_STATUS, .shard = 0xFFFF};
    r = hr_call(c, &q, NULL); /* after the HELLO: served */
    ck_assert_int_eq(r.type, XFER_WIRE_T_STATUS_OK);
    ck_assert_uint_eq(r.st.bytes_in_use, 0);
    close(p);
    close(c);
    unlink(secret_path);
}
END_TEST

/* A non-loopback address without a secret: xferd refuses to start (it
 * checks before it binds anything, so nothing is exposed here). */
START_TEST(test_hostile_network_bind_needs_secret)
{
    const char *args[] = {"--addr", "0.0.0.0", "--pool", "1M", NULL};
    mp_proc p;
    ck_assert_int_ne(mp_xferd(&p, 0, args), 0);
}
END_TEST

typedef struct one_transfer {
    bool done;
    int32_t status;
} one_transfer;

static void on_one(void *ud, const xfer_result *res)
{
    one_transfer *t = ud;
    t->done = true;
    t->status = res->status;
}

static bool one_done(void *ud)
{
    return ((one_transfer *)ud)->done;
}

/* The library producer (xfer_tcp) authenticates with the secret and its
 * transfer is consumed; with a wrong secret it never gets connected. */
START_TEST(test_hostile_auth_library_producer)
{
    write_secret(KEY);
    const char *args[] = {"--pool", "1M", "--quiet", "--consume",
                          "--secret-file", secret_path, NULL};
    start(args);
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)d.port);
    const char *addrs[] = {addr};
    mp_producer bad;
    ck_assert_int_eq(mp_producer_new_secret(&bad, addrs, 1, 4096,
                                            2000000000ull, "wrong-secret-"
                                            "0123456789", 22), 0);
    ck_assert(!mp_producer_wait_connected(&bad, 500));
    mp_producer_del(&bad, 2000);
    mp_producer p;
    ck_assert_int_eq(mp_producer_new_secret(&p, addrs, 1, 4096,
                                            5000000000ull, KEY,
                                            strlen(KEY)), 0);
    ck_assert(mp_producer_wait_connected(&p, 5000));
    one_transfer t = {0};
    xfer_slice sl = {.off = 0, .len = 4096};
    xfer_transfer_desc td = {.id = 1, .group = p.group, .pool = p.pool,
                             .nslices = 1, .slices = &sl};
    ck_assert_int_eq(xfer_engine_submit(p.e, &td, on_one, &t), 0);
    ck_assert(mp_run_while(p.base, one_done, &t, 5000));
    ck_assert_int_eq(t.status, 0);
    ck_assert(mp_producer_del(&p, 5000));
    unlink(secret_path);
}
END_TEST

/* Class 3: a tombstone blocks only what its maker may block.  An
 * attacker's CANCEL of the victim's next id does not stop the victim's
 * reserve of it; a flood of CANCELs of fresh ids hits the attacker's
 * tombstone quota (BUSY for it) and nobody else's reserves. */
START_TEST(test_hostile_tombstones)
{
    const char *args[] = {"--pool", "1M", "--quiet", "--lease-ttl", "1s",
                          "--max-resv", "64",
                          "--max-tombs", "256", NULL};
    start(args);
    int a = join(d.port, 0x21, XFER_WIRE_ROLE_PRODUCER);
    ck_assert_int_eq(hr_op(a, XFER_WIRE_T_CANCEL, 40, 1, 0), 0);
    xfer_wire_msg r = hr_reserve(a, 40, 256); /* it blocks its maker */
    ck_assert_int_eq(hr_code_of(&r), XFER_ERR_CANCELLED);
    int v = join(d.port, 0x22, XFER_WIRE_ROLE_PRODUCER);
    r = hr_reserve(v, 40, 256); /* and nobody else */
    ck_assert_int_eq(hr_code_of(&r), 0);
    ck_assert_int_eq(hr_op(v, XFER_WIRE_T_CANCEL, 40, 1, r.resv_id), 0);
    r = hr_reserve(v, 40, 256); /* the victim's own cancel blocks it */
    ck_assert_int_eq(hr_code_of(&r), XFER_ERR_CANCELLED);
    /* A second attacker's cancel of an id the first tombstoned does not
     * make it block a third session. */
    int a2 = join(d.port, 0x23, XFER_WIRE_ROLE_PRODUCER);
    ck_assert_int_eq(hr_op(a, XFER_WIRE_T_CANCEL, 41, 1, 0), 0);
    ck_assert_int_eq(hr_op(a2, XFER_WIRE_T_CANCEL, 41, 1, 0), 0);
    r = hr_reserve(v, 41, 256);
    ck_assert_int_eq(hr_code_of(&r), 0);
    ck_assert_int_eq(hr_op(v, XFER_WIRE_T_CANCEL, 41, 1, r.resv_id), 0);
    close(a2);
    int busy = 0;
    for (uint64_t id = 1000; id < 1400; id++) {
        int32_t rc = hr_op(a, XFER_WIRE_T_CANCEL, id, 1, 0);
        ck_assert(rc == 0 || rc == XFER_ERR_BUSY);
        busy += rc == XFER_ERR_BUSY;
    }
    ck_assert_int_gt(busy, 0); /* the quota (256 / 4) stopped it */
    close(a);
    for (uint64_t id = 50; id < 60; id++)
        good_pair_works(id);
    close(v);
    pool_whole();
}
END_TEST

/* Class 6: one session cannot take the whole pool or every slot: past its
 * quota it gets BUSY, and another session still reserves. */
START_TEST(test_hostile_quota)
{
    start(plain_args);
    int a = join(d.port, 0x31, XFER_WIRE_ROLE_PRODUCER);
    int held = 0;
    for (uint64_t id = 1; id < 200; id++) {
        xfer_wire_msg r = hr_reserve(a, id, 16 << 10);
        if (hr_code_of(&r) == XFER_ERR_BUSY)
            break;
        ck_assert_int_eq(hr_code_of(&r), 0);
        held++;
    }
    ck_assert_int_eq(held, 16); /* a quarter of 1 MiB in 16 KiB regions */
    good_pair_works(500);
    close(a);
    pool_whole();
}
END_TEST

/* Class 7 (data): a COMMIT with no WRITE, or with part of the region
 * written, is refused: no consumer can be handed stale bytes. */
START_TEST(test_hostile_commit_needs_every_byte)
{
    start(plain_args);
    int p = join(d.port, 0x41, XFER_WIRE_ROLE_PRODUCER);
    xfer_wire_msg r = hr_reserve(p, 3, 4096);
    ck_assert_int_eq(hr_code_of(&r), 0);
    uint64_t resv = r.resv_id;
    ck_assert_int_eq(hr_op(p, XFER_WIRE_T_COMMIT, 3, 1, resv),
                     XFER_ERR_INCOMPLETE);
    ck_assert_int_eq(write_all(p, 3, resv, 1024, 9), 0);
    ck_assert_int_eq(hr_op(p, XFER_WIRE_T_COMMIT, 3, 1, resv),
                     XFER_ERR_INCOMPLETE);
    ck_assert_int_eq(hr_op(p, XFER_WIRE_T_CANCEL, 3, 1, resv), 0);
    close(p);
    good_pair_works(4);
    pool_whole();
}
END_TEST

/* Class 4: a write whose head arrived and whose data never comes is
 * ended (not ok) by the write timeout and its connection closed; its
 * reservation then ends by its lease.  TAKEN data of a consumer that went
 * away is released after the take grace. */
START_TEST(test_hostile_pinned_memory_reclaimed)
{
    const char *args[] = {"--pool", "1M", "--quiet", "--lease-ttl", "1s",
                          "--write-timeout", "300ms", "--take-grace",
                          "300ms", NULL};
    start(args);
    int a = join(d.port, 0x51, XFER_WIRE_ROLE_PRODUCER);
    xfer_wire_msg r = hr_reserve(a, 9, 65536);
    ck_assert_int_eq(hr_code_of(&r), 0);
    xfer_wire_msg w = {.type = XFER_WIRE_T_WRITE, .id = 9, .attempt = 1,
                       .len = 65536, .resv_id = r.resv_id};
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t n = xfer_wire_encode(&w, hr_req++, buf, sizeof buf);
    ck_assert_int_eq(tw_send_all(a, buf, n), 0);
    ck_assert_int_eq(tw_send_all(a, buf, 100), 0); /* 100 bytes, then silence */
    ck_assert(mp_closed(a)); /* the write timeout closed it (mp_closed
                                fails at the socket's 5 s receive timeout) */
    close(a);
    /* A consumer takes committed data and vanishes. */
    int p = join(d.port, 0x52, XFER_WIRE_ROLE_PRODUCER);
    int c = join(d.port, 0x53, XFER_WIRE_ROLE_CONSUMER);
    r = hr_reserve(p, 10, 4096);
    ck_assert_int_eq(write_all(p, 10, r.resv_id, 4096, 2), 0);
    ck_assert_int_eq(hr_op(p, XFER_WIRE_T_COMMIT, 10, 1, r.resv_id), 0);
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_TAKE, 10, 1, r.resv_id), 0);
    close(c);
    close(p);
    good_pair_works(11);
    pool_whole(); /* lease for id 9, grace for id 10 */
}
END_TEST

/* A committed transfer of producer session 0x54 (4096 bytes): its resv. */
static uint64_t put_ready(int p, uint64_t id)
{
    xfer_wire_msg r = hr_reserve(p, id, 4096);
    ck_assert_int_eq(hr_code_of(&r), 0);
    ck_assert_int_eq(write_all(p, id, r.resv_id, 4096, 7), 0);
    ck_assert_int_eq(hr_op(p, XFER_WIRE_T_COMMIT, id, 1, r.resv_id), 0);
    return r.resv_id;
}

/* Class 4: the take grace is the taker's session's.  A consumer session
 * that reconnects within the grace keeps its TAKEN data past the grace
 * and releases it from the new connection; one gone longer than the
 * grace has its data freed, and coming back later gets nothing back. */
START_TEST(test_hostile_take_grace_follows_the_session)
{
    const char *args[] = {"--pool", "1M", "--quiet", "--lease-ttl", "5s",
                          "--take-grace", "300ms", NULL};
    start(args);
    int p = join(d.port, 0x54, XFER_WIRE_ROLE_PRODUCER);
    uint64_t r20 = put_ready(p, 20), r21 = put_ready(p, 21),
             r22 = put_ready(p, 22);
    /* Session 0x70 takes 20 and 21, drops its connection, comes back. */
    int c = join(d.port, 0x70, XFER_WIRE_ROLE_CONSUMER);
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_TAKE, 20, 1, r20), 0);
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_TAKE, 21, 1, r21), 0);
    close(c);
    nanosleep(&(struct timespec){0, 100000000}, NULL);
    c = join(d.port, 0x70, XFER_WIRE_ROLE_CONSUMER);
    /* Session 0x71 takes 22 and is gone for good (for now). */
    int g = join(d.port, 0x71, XFER_WIRE_ROLE_CONSUMER);
    ck_assert_int_eq(hr_op(g, XFER_WIRE_T_TAKE, 22, 1, r22), 0);
    close(g);
    nanosleep(&(struct timespec){0, 900000000}, NULL); /* three graces */
    /* 20 and 21 are still 0x70's: the new connection releases them. */
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_RELEASE, 20, 1, r20), 0);
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_RELEASE, 21, 1, r21), 0);
    /* 22 was freed by the server at the grace: 0x71 back finds it gone. */
    g = join(d.port, 0x71, XFER_WIRE_ROLE_CONSUMER);
    ck_assert_int_ne(hr_op(g, XFER_WIRE_T_RELEASE, 22, 1, r22), 0);
    close(g);
    close(c);
    close(p);
    good_pair_works(23);
    pool_whole();
}
END_TEST

/* The fds process pid has open now. */
static int open_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *dir = opendir(path);
    ck_assert_ptr_nonnull(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

/* Lines of file path holding `what`. */
static int lines_with(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, what) != NULL;
    fclose(f);
    return n;
}

/* Class 5: at the fd limit (the child's RLIMIT_NOFILE lowered under it)
 * xferd pauses accepting instead of spinning: it burns little CPU, logs
 * one line per interval, keeps serving the peers it has, and accepts the
 * waiting peers once the limit is raised again. */
START_TEST(test_hostile_fd_limit_pauses_accepting)
{
    const char *args[] = {"--pool", "1M", "--lease-ttl", "5s", NULL};
    start(args); /* not --quiet: the log is what is checked */
    int p = join(d.port, 0x55, XFER_WIRE_ROLE_PRODUCER);
    int c = join(d.port, 0x56, XFER_WIRE_ROLE_CONSUMER);
    struct rlimit old, low;
    ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, NULL, &old), 0);
    low.rlim_cur = (rlim_t)open_fds(d.pid) + 2; /* the soft limit: a
                                                  * lowered hard one stays */
    low.rlim_max = old.rlim_max;
    ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, &low, NULL), 0);
    int wait[8];
    for (int i = 0; i < 8; i++) { /* 2 accepted, 6 wait in the backlog */
        wait[i] = mp_connect(d.port);
        ck_assert_int_ge(wait[i], 0);
    }
    nanosleep(&(struct timespec){0, 200000000}, NULL);
    double cpu0 = hr_cpu_s(d.pid);
    int log0 = lines_with(d.log, "accept failed");
    nanosleep(&(struct timespec){1, 500000000}, NULL);
    double cpu = hr_cpu_s(d.pid) - cpu0;
    int logged = lines_with(d.log, "accept failed") - log0;
    printf("fd limit: %.3f CPU s in 1.5 s paused, %d log lines\n", cpu,
           logged);
    /* a spinning accept loop would use about the whole 1.5 s */
    ck_assert_double_lt(cpu, 0.3);
    ck_assert_int_ge(lines_with(d.log, "accept failed"), 1);
    ck_assert_int_le(logged, 2); /* one per 1 s interval */
    /* the peers it has are served: a whole transfer */
    uint64_t resv = put_ready(p, 30);
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_TAKE, 30, 1, resv), 0);
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_RELEASE, 30, 1, resv), 0);
    /* fds back: the waiting peers are accepted and answered */
    ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, &old, NULL), 0);
    for (int i = 0; i < 8; i++) {
        xfer_wire_msg m = hello2((uint8_t)(0x80 + i),
                                 XFER_WIRE_ROLE_PRODUCER), r;
        xfer_wire_hdr h;
        ck_assert_int_eq(tw_send_msg(wait[i], &m, 1, NULL), 0);
        ck_assert_int_eq(tw_recv_msg(wait[i], &h, &r), 0);
        ck_assert_int_eq(r.type, XFER_WIRE_T_HELLO_ACK);
        close(wait[i]);
    }
    close(p);
    close(c);
    good_pair_works(31);
    pool_whole();
}
END_TEST

/* A subscriber that never reads: a 4 KiB receive buffer, HELLO2 and
 * SUBSCRIBE answered, then silence. */
static int deaf_subscriber(uint16_t port, uint8_t tag)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    xfer_wire_msg m = hello2(tag, XFER_WIRE_ROLE_CONSUMER), r;
    xfer_wire_hdr h;
    ck_assert_int_eq(tw_send_msg(fd, &m, 1, NULL), 0);
    ck_assert_int_eq(tw_recv_msg(fd, &h, &r), 0);
    ck_assert_int_eq(r.type, XFER_WIRE_T_HELLO_ACK);
    xfer_wire_msg sub = {.type = XFER_WIRE_T_SUBSCRIBE};
    r = hr_call(fd, &sub, NULL);
    ck_assert_int_eq(r.type, XFER_WIRE_T_SUBSCRIBE_ACK);
    return fd;
}

/* `n` transfers of 64 bytes from p, pipelined: every RESERVE, then every
 * WRITE, then every COMMIT, each batch's replies read after it. */
static void put_batch(int p, uint64_t first, unsigned n)
{
    static uint64_t resv[256];
    static const uint8_t data[64];
    ck_assert_uint_le(n, 256);
    for (int phase = 0; phase < 3; phase++) {
        for (unsigned i = 0; i < n; i++) {
            xfer_wire_msg m = {.type = phase == 0 ? XFER_WIRE_T_RESERVE
                                       : phase == 1 ? XFER_WIRE_T_WRITE
                                                    : XFER_WIRE_T_COMMIT,
                               .id = first + i, .attempt = 1, .len = 64,
                               .resv_id = phase ? resv[i] : 0};
            ck_assert_int_eq(tw_send_msg(p, &m, (uint32_t)i + 1,
                                         phase == 1 ? data : NULL), 0);
        }
        for (unsigned i = 0; i < n; i++) {
            xfer_wire_hdr h;
            xfer_wire_msg r;
            ck_assert_int_eq(tw_recv_msg(p, &h, &r), 0);
            ck_assert_int_eq(hr_code_of(&r), 0);
            if (phase == 0)
                resv[h.req - 1] = r.resv_id;
        }
    }
}

/* Class 5: subscribers that never read.  With the global output cap the
 * slow subscribers are dropped (STATUS_BAD's subs_dropped) once they hold
 * 1 MiB each, not at the 8 MiB per-connection limit, so xferd grows by a
 * few MiB, not by 8 MiB per subscriber; the producer is never refused. */
START_TEST(test_hostile_output_cap_drops_deaf_subscribers)
{
    enum { NSUB = 8 };
    const char *args[] = {"--pool", "16M", "--quiet", "--lease-ttl", "2s",
                          "--consume", "--out-max", "2M", "--max-tombs",
                          "400000", NULL};
    start(args);
    int p = join(d.port, 0x57, XFER_WIRE_ROLE_PRODUCER);
    int q = join(d.port, 0xab, XFER_WIRE_ROLE_ADMIN);
    int subs[NSUB];
    for (int i = 0; i < NSUB; i++)
        subs[i] = deaf_subscriber(d.port, (uint8_t)(0x90 + i));
    long rss0 = hr_rss_kib(d.pid), peak = rss0;
    uint64_t id = 1000, dropped = 0;
    while (id < 1000 + 300000 && dropped < NSUB) {
        put_batch(p, id, 256);
        id += 256;
        long now = hr_rss_kib(d.pid);
        peak = now > peak ? now : peak;
        xfer_wire_msg m = {.type = XFER_WIRE_T_STATUS_BAD};
        xfer_wire_msg r = hr_call(q, &m, NULL);
        ck_assert_int_eq(r.type, XFER_WIRE_T_STATUS_BAD_OK);
        dropped = r.bad.subs_dropped;
    }
    printf("output cap: %llu transfers, %llu of %d deaf subscribers "
           "dropped, xferd RSS %ld KiB at start, %ld KiB at peak\n",
           (unsigned long long)(id - 1000), (unsigned long long)dropped,
           NSUB, rss0, peak);
    fflush(stdout);
    ck_assert_uint_eq(dropped, NSUB);
    for (int i = 0; i < NSUB; i++)
        close(subs[i]);
    /* 8 subscribers at the 8 MiB per-connection limit alone would be
     * 64 MiB; the global cap (2 MiB, then 1 MiB each) keeps it far under */
#ifndef __SANITIZE_ADDRESS__ /* ASan's quarantine holds freed memory */
    ck_assert_int_lt(peak - rss0, 32 * 1024);
#endif
    put_batch(p, id, 16); /* still served (the sink takes them) */
    close(q);
    close(p);
    pool_whole();
}
END_TEST

/* Class 5: connections that say nothing, or begin a frame and stop, are
 * closed by the HELLO and header timeouts; past the connection cap a new
 * one is closed at once; the good pair is served throughout. */
START_TEST(test_hostile_timeouts_and_caps)
{
    const char *args[] = {"--pool", "1M", "--quiet", "--hello-timeout",
                          "300ms", "--header-timeout", "300ms",
                          "--max-conns", "40", NULL};
    start(args);
    /* A session between frames has begun none: the header timeout is
     * not for it (issue 30's server_conn.c:364 mutant started the clock
     * on an empty buffer and closed every quiet session). */
    int calm = join(d.port, 0x6f, XFER_WIRE_ROLE_ADMIN);
    xfer_wire_msg st = {.type = XFER_WIRE_T_STATUS, .shard = 0xFFFF};
    ck_assert_int_eq(hr_call(calm, &st, NULL).type, XFER_WIRE_T_STATUS_OK);
    int fds[30];
    for (int i = 0; i < 30; i++) {
        fds[i] = mp_connect(d.port);
        ck_assert_int_ge(fds[i], 0);
        if (i % 2) { /* a HELLO, then half a frame head */
            int p = fds[i];
            xfer_wire_msg m = hello2((uint8_t)(0x70 + i),
                                     XFER_WIRE_ROLE_PRODUCER), r;
            xfer_wire_hdr h;
            ck_assert_int_eq(tw_send_msg(p, &m, 1, NULL), 0);
            ck_assert_int_eq(tw_recv_msg(p, &h, &r), 0);
            ck_assert_int_eq(tw_send_all(p, "XFRW\x01", 5), 0);
        }
    }
    /* calm, 30 + these 9 fill the cap: the 41st is closed at once */
    int more[9];
    for (int i = 0; i < 9; i++)
        more[i] = mp_connect(d.port);
    int over = mp_connect(d.port);
    ck_assert(mp_closed(over));
    close(over);
    for (int i = 0; i < 9; i++)
        close(more[i]);
    for (int i = 0; i < 30; i++) {
        ck_assert(mp_closed(fds[i]));
        close(fds[i]);
    }
    /* Bad input, then the refusals by reason (STATUS_BAD). */
    int b = mp_connect(d.port);
    ck_assert_int_eq(tw_send_all(b, "NOPE-NOT-A-FRAME", 16), 0);
    ck_assert(mp_closed(b));
    close(b);
    int q = join(d.port, 0xaa, XFER_WIRE_ROLE_ADMIN);
    xfer_wire_msg m = {.type = XFER_WIRE_T_STATUS_BAD};
    xfer_wire_msg r = hr_call(q, &m, NULL);
    ck_assert_int_eq(r.type, XFER_WIRE_T_STATUS_BAD_OK);
    ck_assert_uint_eq(r.bad.n, XFER_WIRE_R_COUNT_);
    ck_assert_uint_eq(r.bad.by_reason[XFER_WIRE_R_BAD_MAGIC], 1);
    ck_assert_uint_ge(r.bad.timeouts, 30); /* HELLO, header, and the 9 */
    ck_assert_uint_eq(r.bad.conns_refused, 1);
    ck_assert_int_eq(hr_op(q, XFER_WIRE_T_RESERVE, 1, 1, 0), XFER_ERR_PERM);
    close(q);
    nanosleep(&(struct timespec){0, 700000000}, NULL); /* > 2 periods */
    ck_assert_int_eq(hr_call(calm, &st, NULL).type, XFER_WIRE_T_STATUS_OK);
    close(calm);
    good_pair_works(12);
    pool_whole();
}
END_TEST

/* Class 5: a session that connected and does nothing is closed by the
 * idle timeout; a subscriber waiting for events is not, and still gets
 * the READY of a later commit. */
START_TEST(test_hostile_idle_timeout_spares_subscribers)
{
    const char *args[] = {"--pool", "1M", "--quiet", "--idle-timeout",
                          "300ms", NULL};
    start(args);
    int idle = join(d.port, 0x91, XFER_WIRE_ROLE_PRODUCER);
    int sub = join(d.port, 0x92, XFER_WIRE_ROLE_CONSUMER);
    xfer_wire_msg m = {.type = XFER_WIRE_T_SUBSCRIBE};
    xfer_wire_msg r = hr_call(sub, &m, NULL);
    ck_assert_int_eq(r.type, XFER_WIRE_T_SUBSCRIBE_ACK);
    ck_assert(mp_closed(idle));
    close(idle);
    nanosleep(&(struct timespec){0, 600000000}, NULL); /* 2 idle periods */
    int p = join(d.port, 0x93, XFER_WIRE_ROLE_PRODUCER);
    r = hr_reserve(p, 60, 256);
    ck_assert_int_eq(write_all(p, 60, r.resv_id, 256, 5), 0);
    ck_assert_int_eq(hr_op(p, XFER_WIRE_T_COMMIT, 60, 1, r.resv_id), 0);
    xfer_wire_hdr h;
    ck_assert_int_eq(tw_recv_msg(sub, &h, &r), 0);
    ck_assert_int_eq(r.type, XFER_WIRE_T_EVENT);
    ck_assert_uint_eq(r.id, 60);
    ck_assert_int_eq(hr_op(sub, XFER_WIRE_T_TAKE, 60, 1, r.resv_id), 0);
    ck_assert_int_eq(hr_op(sub, XFER_WIRE_T_RELEASE, 60, 1, r.resv_id), 0);
    close(p);
    close(sub);
    pool_whole();
}
END_TEST

/* Class 7 (drain, half-close): replies queued when a peer half-closes
 * still reach it; SIGTERM closes the listener (a new peer is refused, not
 * left hanging), keeps READY data for its consumer, and xferd exits once
 * nothing is left. */
START_TEST(test_hostile_drain_and_half_close)
{
    start(plain_args);
    int h = join(d.port, 0x81, XFER_WIRE_ROLE_PRODUCER);
    for (uint32_t i = 0; i < 3; i++) {
        xfer_wire_msg m = {.type = XFER_WIRE_T_RESERVE, .id = 30 + i,
                           .attempt = 1, .len = 128};
        ck_assert_int_eq(tw_send_msg(h, &m, 900 + i, NULL), 0);
    }
    shutdown(h, SHUT_WR);
    for (uint32_t i = 0; i < 3; i++) {
        xfer_wire_hdr hd;
        xfer_wire_msg r;
        ck_assert_int_eq(tw_recv_msg(h, &hd, &r), 0);
        ck_assert_uint_eq(hd.req, 900 + i);
        ck_assert_int_eq(r.type, XFER_WIRE_T_RESERVE_OK);
    }
    ck_assert(mp_closed(h));
    close(h);
    int p = join(d.port, 0x82, XFER_WIRE_ROLE_PRODUCER);
    int c = join(d.port, 0x83, XFER_WIRE_ROLE_CONSUMER);
    xfer_wire_msg r = hr_reserve(p, 20, 4096);
    ck_assert_int_eq(write_all(p, 20, r.resv_id, 4096, 7), 0);
    ck_assert_int_eq(hr_op(p, XFER_WIRE_T_COMMIT, 20, 1, r.resv_id), 0);
    uint64_t resv = r.resv_id;
    kill(d.pid, SIGTERM);
    int tries = 0;
    int fd;
    while ((fd = mp_connect(d.port)) >= 0 && tries++ < 100) {
        close(fd); /* until the drain closed the listener */
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    ck_assert_int_lt(fd, 0);
    r = hr_reserve(p, 21, 64);
    ck_assert_int_eq(hr_code_of(&r), XFER_ERR_SHUTDOWN);
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_TAKE, 20, 1, resv), 0);
    ck_assert_int_eq(hr_op(c, XFER_WIRE_T_RELEASE, 20, 1, resv), 0);
    close(p);
    close(c);
    int st = mp_kill(&d, 0); /* reap: it exits by itself */
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("hostile");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_hostile_ownership);
    tcase_add_test(tc, test_hostile_refresh_only_the_owners_and_bounded);
    tcase_add_test(tc, test_hostile_ids_unpredictable);
    tcase_add_test(tc, test_hostile_id_batches);
    tcase_add_test(tc, test_hostile_auth_required);
    tcase_add_test(tc, test_hostile_auth_library_producer);
    tcase_add_test(tc, test_hostile_network_bind_needs_secret);
    tcase_add_test(tc, test_hostile_tombstones);
    tcase_add_test(tc, test_hostile_quota);
    tcase_add_test(tc, test_hostile_commit_needs_every_byte);
    tcase_add_test(tc, test_hostile_pinned_memory_reclaimed);
    tcase_add_test(tc, test_hostile_take_grace_follows_the_session);
    tcase_add_test(tc, test_hostile_timeouts_and_caps);
    tcase_add_test(tc, test_hostile_fd_limit_pauses_accepting);
    tcase_add_test(tc, test_hostile_output_cap_drops_deaf_subscribers);
    tcase_add_test(tc, test_hostile_idle_timeout_spares_subscribers);
    tcase_add_test(tc, test_hostile_drain_and_half_close);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
