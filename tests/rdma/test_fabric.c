/*
 * tests/rdma/test_fabric.c - the software verbs fabric's own tests (suite
 * rdma-sim): code written for rdma-core, linked against the fabric, run
 * between two endpoints of one process, two threads, and two processes.
 *
 * Every test starts with xfer_fabric_reset() (which fails unless the
 * previous test left nothing alive) and ends by checking, from the
 * counters, that every object was destroyed and every event acked.
 * Memory is always read back: a refused write must leave the target's
 * bytes exactly as they were.  Nothing here asserts how long anything
 * took; waits are bounded only so that a hang fails.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rc.h"
#include "testutil.h"
#include "xfer_fabric.h"

#define ADDR "127.0.0.1"
#define MEM 65536
#define FILL 0xEE
#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

extern char **environ;

/* Where the server lets the client write (its accept's private data). */
typedef struct target {
    uint64_t addr;
    uint32_t rkey;
    uint32_t len;
} target;

/* A connected client and server in this process, with registered memory
 * on both sides. */
typedef struct pair {
    rc_side c, s;
    uint8_t *src, *dst;
    struct ibv_mr *smr, *dmr;
    target t;
} pair;

static void begin(void)
{
    ck_assert_int_eq(xfer_fabric_reset(), 0);
}

static xfer_fabric_counters counters(void)
{
    xfer_fabric_counters k;
    xfer_fabric_counters_get(&k);
    return k;
}

static void set_opts(const char *spec)
{
    xfer_fabric_opts o;
    xfer_fabric_default_opts(&o);
    ck_assert_int_eq(xfer_fabric_parse_opts(spec, &o, NULL, 0), 0);
    xfer_fabric_set_opts(&o);
}

/* Nothing alive, every event acked, `busy` refused destroys. */
static void assert_clean(uint64_t busy)
{
    xfer_fabric_counters k = counters();
    ck_assert_uint_eq(k.contexts_live, 0);
    ck_assert_uint_eq(k.pds_live, 0);
    ck_assert_uint_eq(k.mrs_live, 0);
    ck_assert_uint_eq(k.mrs_created, k.mrs_destroyed);
    ck_assert_uint_eq(k.mws_live, 0);
    ck_assert_uint_eq(k.channels_live, 0);
    ck_assert_uint_eq(k.cqs_live, 0);
    ck_assert_uint_eq(k.qps_live, 0);
    ck_assert_uint_eq(k.cm_channels_live, 0);
    ck_assert_uint_eq(k.cm_ids_live, 0);
    ck_assert_uint_eq(k.cm_events, k.cm_events_acked);
    ck_assert_uint_eq(k.cq_events, k.cq_events_acked);
    ck_assert_uint_eq(k.async_events, k.async_events_acked);
    ck_assert_uint_eq(k.wrs_dropped, 0);
    ck_assert_uint_eq(k.destroy_busy, busy);
}

/* Wait (bounded) until the counter at `off` reaches want. */
static void await_counter(size_t off, uint64_t want)
{
    for (int i = 0; i < 20000; i++) {
        xfer_fabric_counters k = counters();
        if (*(uint64_t *)(void *)((char *)&k + off) >= want)
            return;
        usleep(1000);
    }
    ck_abort_msg("counter never reached %llu", (unsigned long long)want);
}
#define AWAIT(field, want)                                                   \
    await_counter(offsetof(xfer_fabric_counters, field), want)

static void fill_random(uint8_t *p, size_t n, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)tu_rand(rng);
}

static bool all_fill(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != FILL)
            return false;
    return true;
}

static void pair_open(pair *p, int dst_access)
{
    rc_event req, rep;
    uint16_t port = 0;
    memset(p, 0, sizeof *p);
    p->src = calloc(1, MEM);
    p->dst = malloc(MEM);
    ck_assert(p->src && p->dst);
    memset(p->dst, FILL, MEM);
    ck_assert_int_eq(rc_listen(&p->s, ADDR, &port), 0);
    ck_assert_int_eq(rc_connect(&p->c, ADDR, port, "hello", 5), 0);
    ck_assert_int_eq(rc_request(&p->s, &p->s, &req), 0);
    /* IB CM pads a REQ's private data to 56 bytes */
    ck_assert_int_eq(req.pdlen, 56);
    ck_assert_mem_eq(req.pdata, "hello\0\0", 7);
    ck_assert_uint_eq(req.qp_num, p->c.id->qp->qp_num);
    p->dmr = ibv_reg_mr(p->s.pd, p->dst, MEM, dst_access);
    ck_assert_ptr_nonnull(p->dmr);
    target t = {(uintptr_t)p->dst, p->dmr->rkey, MEM};
    ck_assert_int_eq(rc_accept(&p->s, &t, sizeof t), 0);
    ck_assert_int_eq(rc_expect(p->c.ch, RDMA_CM_EVENT_ESTABLISHED, &rep), 0);
    ck_assert_int_eq(rep.pdlen, 196);
    ck_assert_uint_eq(rep.qp_num, p->s.id->qp->qp_num);
    memcpy(&p->t, rep.pdata, sizeof p->t);
    ck_assert_int_eq(rc_expect(p->s.ch, RDMA_CM_EVENT_ESTABLISHED, NULL), 0);
    p->smr = ibv_reg_mr(p->c.pd, p->src, MEM, IBV_ACCESS_LOCAL_WRITE);
    ck_assert_ptr_nonnull(p->smr);
}

static void pair_close(pair *p)
{
    ck_assert_int_eq(ibv_dereg_mr(p->smr), 0);
    ck_assert_int_eq(ibv_dereg_mr(p->dmr), 0);
    rc_close(&p->c);
    rc_close(&p->s);
    free(p->src);
    free(p->dst);
}

static struct ibv_sge sge_of(pair *p, size_t off, uint32_t len)
{
    return (struct ibv_sge){(uintptr_t)p->src + off, len, p->smr->lkey};
}

/* One signaled write of src[off, off+len) to raddr under rkey; its
 * completion status. */
static enum ibv_wc_status write_one(pair *p, size_t off, uint32_t len,
                                    uint64_t raddr, uint32_t rkey)
{
    struct ibv_sge sge = sge_of(p, off, len);
    struct ibv_wc wc;
    ck_assert_int_eq(rc_write(&p->c, 99, &sge, 1, raddr, rkey), 0);
    ck_assert_int_eq(rc_cqe(&p->c, &wc), 0);
    ck_assert_uint_eq(wc.wr_id, 99);
    return wc.status;
}

/* n signaled writes, the i-th of src[i*len, +len) to dst[i*len, +len),
 * wr_id i. */
static void post_writes(pair *p, uint64_t n, uint32_t len)
{
    for (uint64_t i = 0; i < n; i++) {
        struct ibv_sge sge = sge_of(p, i * len, len);
        ck_assert_int_eq(
            rc_write(&p->c, i, &sge, 1, p->t.addr + i * len, p->t.rkey), 0);
    }
}

/* The next n completions are wr_id 0..n-1, in order, with these statuses
 * (want may be NULL: all successful). */
static void expect_statuses(pair *p, const enum ibv_wc_status *want,
                            uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        struct ibv_wc wc;
        ck_assert_int_eq(rc_cqe(&p->c, &wc), 0);
        ck_assert_uint_eq(wc.wr_id, i);
        ck_assert_int_eq(wc.status, want ? want[i] : IBV_WC_SUCCESS);
    }
}

static void post_send(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
    struct ibv_send_wr *bad;
    ck_assert_int_eq(ibv_post_send(qp, wr, &bad), 0);
}

static void post_recv(rc_side *e, uint64_t wr_id, void *buf, uint32_t len,
                      uint32_t lkey)
{
    struct ibv_sge sge = {(uintptr_t)buf, len, lkey};
    struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad;
    ck_assert_int_eq(ibv_post_recv(e->id->qp, &wr, &bad), 0);
}

/* The next async event of ctx: its type, and the QP it names. */
static enum ibv_event_type async_event(struct ibv_context *ctx,
                                       struct ibv_qp **qp)
{
    struct ibv_async_event ev;
    struct pollfd pf = {.fd = ctx->async_fd, .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, RC_WAIT_MS), 1);
    ck_assert_int_eq(ibv_get_async_event(ctx, &ev), 0);
    *qp = ev.element.qp;
    ibv_ack_async_event(&ev);
    return ev.event_type;
}

/* ---- device ----------------------------------------------------------- */

START_TEST(test_fabric_device_caps)
{
    begin();
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(ibv_get_device_name(list[0]), "xfer_sim0");
    struct ibv_context *ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    ck_assert_ptr_nonnull(ctx);

    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    ck_assert_int_eq(ibv_query_device(ctx, &da), 0);
    ck_assert(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
    ck_assert_int_eq(ibv_query_port(ctx, 1, &pa), 0);
    ck_assert_int_eq(pa.state, IBV_PORT_ACTIVE);
    ck_assert_uint_eq(pa.max_msg_sz, 1u << 30);
    ck_assert_int_eq(ibv_query_port(ctx, 2, &pa), EINVAL);

    /* the knobs: a small message size, no type 2 windows */
    set_opts("max_msg_sz=4096,mw2=0");
    ck_assert_int_eq(ibv_query_port(ctx, 1, &pa), 0);
    ck_assert_uint_eq(pa.max_msg_sz, 4096);
    ck_assert_int_eq(ibv_query_device(ctx, &da), 0);
    ck_assert(!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B));
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    errno = 0;
    ck_assert_ptr_null(ibv_alloc_mw(pd, IBV_MW_TYPE_2));
    ck_assert_int_eq(errno, EOPNOTSUPP);
    struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
    ck_assert_ptr_nonnull(mw);
    ck_assert_int_eq(ibv_dealloc_mw(mw), 0);

    /* a PD with a registration on it cannot go first */
    char buf[64];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    ck_assert_ptr_nonnull(mr);
    ck_assert_int_eq(ibv_dealloc_pd(pd), EBUSY);
    /* REMOTE_WRITE needs LOCAL_WRITE, as in rdma-core */
    errno = 0;
    ck_assert_ptr_null(ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_REMOTE_WRITE));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(ibv_dereg_mr(mr), 0);
    ck_assert_int_eq(ibv_dealloc_pd(pd), 0);
    ck_assert_int_eq(ibv_close_device(ctx), 0);
    ck_assert_str_eq(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR),
                     "remote access error");
    ck_assert_str_eq(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT),
                     "RDMA_CM_EVENT_TIMEWAIT_EXIT");
    assert_clean(1);
}
END_TEST

START_TEST(test_fabric_options_parse)
{
    xfer_fabric_opts o;
    char err[128];
    xfer_fabric_default_opts(&o);
    ck_assert_int_eq(xfer_fabric_parse_opts(
                         "max_msg_sz=8192,mw2=0,write_access_err=3,seed=0x10",
                         &o, err, sizeof err),
                     0);
    ck_assert_uint_eq(o.max_msg_sz, 8192);
    ck_assert(!o.mw_type2);
    ck_assert_uint_eq(o.write_access_err, 3);
    ck_assert_uint_eq(o.seed, 16);
    /* a bad item changes nothing and names itself */
    const char *bad[] = {"nosuch=1", "mw2=2", "max_mr=0", "seed=-1",
                         "max_msg_sz", "reg_fail=x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        xfer_fabric_opts before = o;
        ck_assert_int_eq(xfer_fabric_parse_opts(bad[i], &o, err, sizeof err),
                         -1);
        ck_assert_mem_eq(&o, &before, sizeof o);
        ck_assert_ptr_nonnull(strstr(err, "max") ? err : strstr(err, "'"));
    }
}
END_TEST

/* ---- writes ----------------------------------------------------------- */

START_TEST(test_fabric_write_lands)
{
    uint64_t rng = tu_seed("test_fabric_write_lands", 11);
    pair p;
    begin();
    pair_open(&p, RW);
    fill_random(p.src, MEM, &rng);
    /* three SGEs gathered into one write at offset 100 */
    struct ibv_sge sge[3] = {sge_of(&p, 0, 1000), sge_of(&p, 5000, 3000),
                             sge_of(&p, 20000, 24)};
    struct ibv_wc wc;
    ck_assert_int_eq(rc_write(&p.c, 7, sge, 3, p.t.addr + 100, p.t.rkey), 0);
    ck_assert_int_eq(rc_cqe(&p.c, &wc), 0);
    ck_assert_int_eq(wc.status, IBV_WC_SUCCESS);
    ck_assert_uint_eq(wc.wr_id, 7);
    ck_assert_int_eq(wc.opcode, IBV_WC_RDMA_WRITE);
    ck_assert(all_fill(p.dst, 100));
    ck_assert_mem_eq(p.dst + 100, p.src, 1000);
    ck_assert_mem_eq(p.dst + 1100, p.src + 5000, 3000);
    ck_assert_mem_eq(p.dst + 4100, p.src + 20000, 24);
    ck_assert(all_fill(p.dst + 4124, MEM - 4124));
    xfer_fabric_counters k = counters();
    ck_assert_uint_eq(k.writes_landed, 1);
    ck_assert_uint_eq(k.bytes_landed, 4024);
    pair_close(&p);
    assert_clean(0);
}
END_TEST

/* Past max_msg_sz a WR fails whole (local length error, nothing lands);
 * split at the size, every piece lands.  Unsignaled pieces complete
 * silently; the last, signaled, reports for them all. */
START_TEST(test_fabric_write_split)
{
    uint64_t rng = tu_seed("test_fabric_write_split", 12);
    const uint32_t len = 10000, max = 4096;
    pair p;
    begin();
    set_opts("max_msg_sz=4096");
    pair_open(&p, RW);
    fill_random(p.src, MEM, &rng);
    ck_assert_int_eq(write_one(&p, 0, len, p.t.addr, p.t.rkey),
                     IBV_WC_LOC_LEN_ERR);
    ck_assert(all_fill(p.dst, MEM));
    /* the QP is in error now: the next WR is flushed */
    ck_assert_int_eq(write_one(&p, 0, 16, p.t.addr, p.t.rkey),
                     IBV_WC_WR_FLUSH_ERR);
    ck_assert_uint_eq(counters().writes_landed, 0);
    pair_close(&p);

    pair_open(&p, RW);
    fill_random(p.src, MEM, &rng);
    struct ibv_sge sge[3];
    struct ibv_send_wr wr[3];
    for (uint32_t i = 0, off = 0; i < 3; i++, off += max) {
        uint32_t n = len - off < max ? len - off : max;
        sge[i] = sge_of(&p, off, n);
        wr[i] = (struct ibv_send_wr){
            .wr_id = i,
            .next = i < 2 ? &wr[i + 1] : NULL,
            .sg_list = &sge[i],
            .num_sge = 1,
            .opcode = IBV_WR_RDMA_WRITE,
            .send_flags = i == 2 ? IBV_SEND_SIGNALED : 0,
            .wr.rdma = {p.t.addr + off, p.t.rkey},
        };
    }
    post_send(p.c.id->qp, wr);
    struct ibv_wc wc;
    ck_assert_int_eq(rc_cqe(&p.c, &wc), 0);
    ck_assert_int_eq(wc.status, IBV_WC_SUCCESS);
    ck_assert_uint_eq(wc.wr_id, 2);
    ck_assert_int_eq(ibv_poll_cq(p.c.cq, 1, &wc), 0); /* no other CQE */
    ck_assert_mem_eq(p.dst, p.src, len);
    ck_assert(all_fill(p.dst + len, MEM - len));
    xfer_fabric_counters k = counters();
    ck_assert_uint_eq(k.writes_landed, 3);
    ck_assert_uint_eq(k.wrs_completed, 3);
    pair_close(&p);
    assert_clean(0);
}
END_TEST

/* A wrong rkey, an out-of-bounds write and a write into memory without
 * REMOTE_WRITE: each is refused by the responder, lands nothing, and
 * takes both QPs to error (the server's posted receive flushes, its
 * context reports a QP access error). */
START_TEST(test_fabric_bad_access_refused)
{
    begin();
    for (int c = 0; c < 3; c++) {
        pair p;
        pair_open(&p, c == 2 ? IBV_ACCESS_LOCAL_WRITE : RW);
        memset(p.src, 0x11, MEM);
        uint8_t rbuf[16];
        struct ibv_mr *rmr =
            ibv_reg_mr(p.s.pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
        post_recv(&p.s, 5, rbuf, sizeof rbuf, rmr->lkey);
        uint32_t rkey = c == 0 ? p.t.rkey + (1000u << 8) : p.t.rkey;
        uint64_t raddr = c == 1 ? p.t.addr + MEM - 10 : p.t.addr;
        ck_assert_int_eq(write_one(&p, 0, 20, raddr, rkey),
                         IBV_WC_REM_ACCESS_ERR);
        ck_assert(all_fill(p.dst, MEM));
        struct ibv_wc wc;
        ck_assert_int_eq(rc_cqe(&p.s, &wc), 0);
        ck_assert_int_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
        ck_assert_uint_eq(wc.wr_id, 5);
        struct ibv_qp *qp;
        ck_assert_int_eq(async_event(p.s.id->verbs, &qp),
                         IBV_EVENT_QP_ACCESS_ERR);
        ck_assert_ptr_eq(qp, p.s.id->qp);
        ibv_dereg_mr(rmr);
        pair_close(&p);
    }
    xfer_fabric_counters k = counters();
    ck_assert_uint_eq(k.rej_no_key, 1);
    ck_assert_uint_eq(k.rej_bounds, 1);
    ck_assert_uint_eq(k.rej_access, 1);
    ck_assert_uint_eq(k.writes_landed, 0);
    assert_clean(0);
}
END_TEST

/* ---- memory windows --------------------------------------------------- */

static void bind_mw(rc_side *s, struct ibv_mw *mw, uint32_t rkey,
                    struct ibv_mr *mr, void *addr, uint64_t len,
                    enum ibv_wc_status want)
{
    struct ibv_send_wr wr = {
        .wr_id = 1,
        .opcode = IBV_WR_BIND_MW,
        .send_flags = IBV_SEND_SIGNALED,
        .bind_mw = {.mw = mw,
                    .rkey = rkey,
                    .bind_info = {.mr = mr,
                                  .addr = (uintptr_t)addr,
                                  .length = len,
                                  .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}},
    };
    struct ibv_wc wc;
    post_send(s->id->qp, &wr);
    ck_assert_int_eq(rc_cqe(s, &wc), 0);
    ck_assert_int_eq(wc.status, want);
    if (want == IBV_WC_SUCCESS)
        ck_assert_int_eq(wc.opcode, IBV_WC_BIND_MW);
}

static void local_inv(rc_side *s, uint32_t rkey)
{
    struct ibv_send_wr wr = {
        .wr_id = 2,
        .opcode = IBV_WR_LOCAL_INV,
        .send_flags = IBV_SEND_SIGNALED,
        .invalidate_rkey = rkey,
    };
    struct ibv_wc wc;
    post_send(s->id->qp, &wr);
    ck_assert_int_eq(rc_cqe(s, &wc), 0);
    ck_assert_int_eq(wc.status, IBV_WC_SUCCESS);
    ck_assert_int_eq(wc.opcode, IBV_WC_LOCAL_INV);
}

/* A type 2 window bound to [4096, 12288) of the server's MR: a write into
 * it lands; its MR cannot be deregistered while it is bound; once the
 * invalidation has completed a write through it is refused and lands
 * nothing, and the bytes of the first write stay. */
START_TEST(test_fabric_mw_invalidate)
{
    uint64_t rng = tu_seed("test_fabric_mw_invalidate", 13);
    pair p;
    begin();
    pair_open(&p, RW | IBV_ACCESS_MW_BIND);
    fill_random(p.src, MEM, &rng);
    struct ibv_mw *mw = ibv_alloc_mw(p.s.pd, IBV_MW_TYPE_2);
    ck_assert_ptr_nonnull(mw);
    uint32_t rkey = ibv_inc_rkey(mw->rkey);
    bind_mw(&p.s, mw, rkey, p.dmr, p.dst + 4096, 8192, IBV_WC_SUCCESS);
    uint64_t base = p.t.addr + 4096;
    ck_assert_int_eq(write_one(&p, 0, 100, base + 10, rkey), IBV_WC_SUCCESS);
    ck_assert_mem_eq(p.dst + 4106, p.src, 100);
    ck_assert_int_eq(ibv_dereg_mr(p.dmr), EBUSY);

    local_inv(&p.s, rkey);
    uint8_t *before = malloc(MEM);
    memcpy(before, p.dst, MEM);
    ck_assert_int_eq(write_one(&p, 1000, 100, base + 10, rkey),
                     IBV_WC_REM_ACCESS_ERR);
    ck_assert_mem_eq(p.dst, before, MEM);
    ck_assert_mem_eq(p.dst + 4106, p.src, 100);
    xfer_fabric_counters k = counters();
    ck_assert_uint_eq(k.binds, 1);
    ck_assert_uint_eq(k.invalidations, 1);
    ck_assert_uint_eq(k.rej_stale_key, 1);
    ck_assert_uint_eq(k.writes_landed, 1);
    free(before);
    ck_assert_int_eq(ibv_dealloc_mw(mw), 0);
    pair_close(&p);
    assert_clean(1);
}
END_TEST

/* A type 2 window answers only through the QP it was bound on, only
 * inside its range, and refuses a second bind until invalidated. */
START_TEST(test_fabric_mw_scope)
{
    begin();
    rc_side s1, s2, c1, c2;
    uint16_t port = 0;
    uint8_t *dst = malloc(MEM), src[64];
    memset(dst, FILL, MEM);
    memset(src, 0x22, sizeof src);
    ck_assert_int_eq(rc_listen(&s1, ADDR, &port), 0);
    ck_assert_int_eq(rc_connect(&c1, ADDR, port, NULL, 0), 0);
    ck_assert_int_eq(rc_request(&s1, &s1, NULL), 0);
    ck_assert_int_eq(rc_accept(&s1, NULL, 0), 0);
    ck_assert_int_eq(rc_connect(&c2, ADDR, port, NULL, 0), 0);
    ck_assert_int_eq(rc_request(&s2, &s1, NULL), 0); /* same PD */
    ck_assert_int_eq(rc_accept(&s2, NULL, 0), 0);
    rc_side *cs[2] = {&c1, &c2};
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(rc_expect(cs[i]->ch, RDMA_CM_EVENT_ESTABLISHED, NULL),
                         0);
    ck_assert_int_eq(rc_expect(s1.ch, RDMA_CM_EVENT_ESTABLISHED, NULL), 0);
    ck_assert_int_eq(rc_expect(s1.ch, RDMA_CM_EVENT_ESTABLISHED, NULL), 0);

    struct ibv_mr *mr = ibv_reg_mr(s1.pd, dst, MEM, RW | IBV_ACCESS_MW_BIND);
    struct ibv_mw *mw = ibv_alloc_mw(s1.pd, IBV_MW_TYPE_2);
    uint32_t rkey = ibv_inc_rkey(mw->rkey);
    bind_mw(&s1, mw, rkey, mr, dst, 1024, IBV_WC_SUCCESS);
    /* bound already: a second bind fails, and takes s1's QP to error */
    bind_mw(&s1, mw, ibv_inc_rkey(rkey), mr, dst, 1024, IBV_WC_MW_BIND_ERR);

    struct ibv_mr *m1 = ibv_reg_mr(c1.pd, src, sizeof src, 1);
    struct ibv_mr *m2 = ibv_reg_mr(c2.pd, src, sizeof src, 1);
    struct ibv_sge g1 = {(uintptr_t)src, 64, m1->lkey};
    struct ibv_sge g2 = {(uintptr_t)src, 64, m2->lkey};
    struct ibv_wc wc;
    /* through the other connection (same PD, other QP): refused */
    ck_assert_int_eq(rc_write(&c2, 1, &g2, 1, (uintptr_t)dst, rkey), 0);
    ck_assert_int_eq(rc_cqe(&c2, &wc), 0);
    ck_assert_int_eq(wc.status, IBV_WC_REM_ACCESS_ERR);
    ck_assert(all_fill(dst, MEM));
    /* through c1, whose server QP is in error since the failed bind */
    ck_assert_int_eq(rc_write(&c1, 2, &g1, 1, (uintptr_t)dst, rkey), 0);
    ck_assert_int_eq(rc_cqe(&c1, &wc), 0);
    ck_assert_int_eq(wc.status, IBV_WC_RETRY_EXC_ERR);
    ck_assert(all_fill(dst, MEM));
    xfer_fabric_counters k = counters();
    ck_assert_uint_eq(k.rej_wrong_qp, 1);
    ck_assert_uint_eq(k.rej_qp_state, 1);
    ck_assert_uint_eq(k.bind_errors, 1);
    /* dealloc invalidates whatever is bound */
    ck_assert_int_eq(ibv_dealloc_mw(mw), 0);
    ck_assert_int_eq(ibv_dereg_mr(mr), 0);
    ibv_dereg_mr(m1);
    ibv_dereg_mr(m2);
    rc_close(&c1);
    rc_close(&c2);
    rc_close(&s2);
    rc_close(&s1);
    free(dst);
    assert_clean(0);
}
END_TEST

/* Without type 2 windows: type 1 windows (ibv_bind_mw) still work, and a
 * registration per region is the fallback; once it is deregistered its
 * rkey lands nothing. */
START_TEST(test_fabric_no_type2_fallback)
{
    pair p;
    begin();
    set_opts("mw2=0");
    pair_open(&p, RW | IBV_ACCESS_MW_BIND);
    memset(p.src, 0x33, MEM);
    errno = 0;
    ck_assert_ptr_null(ibv_alloc_mw(p.s.pd, IBV_MW_TYPE_2));
    ck_assert_int_eq(errno, EOPNOTSUPP);

    struct ibv_mw *mw = ibv_alloc_mw(p.s.pd, IBV_MW_TYPE_1);
    uint32_t old = mw->rkey;
    struct ibv_mw_bind b = {
        .wr_id = 4,
        .send_flags = IBV_SEND_SIGNALED,
        .bind_info = {.mr = p.dmr,
                      .addr = (uintptr_t)p.dst + 100,
                      .length = 200,
                      .mw_access_flags = IBV_ACCESS_REMOTE_WRITE},
    };
    struct ibv_wc wc;
    ck_assert_int_eq(ibv_bind_mw(p.s.id->qp, mw, &b), 0);
    ck_assert_uint_ne(mw->rkey, old);
    ck_assert_int_eq(rc_cqe(&p.s, &wc), 0);
    ck_assert_int_eq(wc.status, IBV_WC_SUCCESS);
    ck_assert_uint_eq(wc.wr_id, 4);
    ck_assert_int_eq(write_one(&p, 0, 50, p.t.addr + 150, mw->rkey),
                     IBV_WC_SUCCESS);
    ck_assert_mem_eq(p.dst + 150, p.src, 50);

    struct ibv_mr *one = ibv_reg_mr(p.s.pd, p.dst + 8192, 1024, RW);
    uint32_t one_rkey = one->rkey;
    ck_assert_int_eq(write_one(&p, 0, 1024, (uintptr_t)p.dst + 8192,
                               one_rkey),
                     IBV_WC_SUCCESS);
    ck_assert_mem_eq(p.dst + 8192, p.src, 1024);
    ck_assert_int_eq(ibv_dereg_mr(one), 0);
    memset(p.dst + 8192, FILL, 1024);
    memset(p.src, 0x44, MEM);
    ck_assert_int_eq(write_one(&p, 0, 1024, (uintptr_t)p.dst + 8192,
                               one_rkey),
                     IBV_WC_REM_ACCESS_ERR);
    ck_assert(all_fill(p.dst + 8192, 1024));
    ck_assert_uint_eq(counters().rej_no_key, 1);
    ck_assert_int_eq(ibv_dealloc_mw(mw), 0);
    pair_close(&p);
    assert_clean(0);
}
END_TEST

/* ---- errors and flushes ----------------------------------------------- */

/* Moving a QP to error completes every posted WR exactly once, in order,
 * with a flush for all not yet done, receives included; WRs posted after
 * are flushed too, signaled or not. */
START_TEST(test_fabric_qp_error_flushes_all)
{
    pair p;
    begin();
    set_opts("write_delay_us=500000");
    pair_open(&p, RW);
    uint8_t rbuf[8];
    struct ibv_mr *rmr = ibv_reg_mr(p.c.pd, rbuf, 8, IBV_ACCESS_LOCAL_WRITE);
    post_recv(&p.c, 100, rbuf, 8, rmr->lkey);
    struct ibv_sge sge = sge_of(&p, 0, 64);
    for (uint64_t i = 0; i < 8; i++)
        ck_assert_int_eq(rc_write(&p.c, i, &sge, 1, p.t.addr, p.t.rkey), 0);
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    ck_assert_int_eq(ibv_modify_qp(p.c.id->qp, &a, IBV_QP_STATE), 0);
    struct ibv_send_wr late = {
        .wr_id = 50,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE,
        .wr.rdma = {p.t.addr, p.t.rkey},
    };
    post_send(p.c.id->qp, &late); /* unsignaled, after the error */
    bool seen_recv = false, flushed = false;
    uint64_t next = 0;
    for (int i = 0; i < 10; i++) {
        struct ibv_wc wc;
        ck_assert_int_eq(rc_cqe(&p.c, &wc), 0);
        if (wc.wr_id == 100) {
            ck_assert_int_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
            seen_recv = true;
            continue;
        }
        if (wc.wr_id == 50) {
            ck_assert_uint_eq(next, 8);
            ck_assert_int_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
            ck_assert_int_eq(wc.opcode, 0xff); /* not valid on error */
            next = 51;
            continue;
        }
        ck_assert_uint_eq(wc.wr_id, next++); /* posting order */
        if (flushed || wc.status != IBV_WC_SUCCESS) {
            ck_assert_int_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
            flushed = true;
        }
    }
    ck_assert(seen_recv);
    ck_assert_uint_eq(next, 51);
    struct ibv_wc wc;
    ck_assert_int_eq(ibv_poll_cq(p.c.cq, 1, &wc), 0);
    ibv_dereg_mr(rmr);
    pair_close(&p);
    assert_clean(0);
}
END_TEST

/* write_qp_err: the 3rd write lands half, then the sender's QP goes to
 * error: every WR not yet done is flushed, none is lost, and the QP
 * reports IBV_EVENT_QP_FATAL. */
START_TEST(test_fabric_fault_qp_error_mid_write)
{
    uint64_t rng = tu_seed("test_fabric_fault_qp_error_mid_write", 14);
    pair p;
    begin();
    set_opts("write_qp_err=3");
    pair_open(&p, RW);
    fill_random(p.src, MEM, &rng);
    post_writes(&p, 5, 1000);
    for (uint64_t i = 0; i < 5; i++) {
        struct ibv_wc wc;
        ck_assert_int_eq(rc_cqe(&p.c, &wc), 0);
        ck_assert_uint_eq(wc.wr_id, i);
        if (i >= 2)
            ck_assert_int_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
        else
            ck_assert(wc.status == IBV_WC_SUCCESS ||
                      wc.status == IBV_WC_WR_FLUSH_ERR);
    }
    struct ibv_qp *qp;
    ck_assert_int_eq(async_event(p.c.id->verbs, &qp), IBV_EVENT_QP_FATAL);
    ck_assert_ptr_eq(qp, p.c.id->qp);
    AWAIT(writes_landed, 3); /* 1, 2 and the first half of 3 */
    ck_assert_mem_eq(p.dst, p.src, 2500);
    ck_assert(all_fill(p.dst + 2500, MEM - 2500));
    pair_close(&p);
    assert_clean(0);
}
END_TEST

/* write_access_err: the 2nd write is refused as a remote access error;
 * the 1st landed, the 3rd is flushed, nothing of the 2nd landed. */
START_TEST(test_fabric_fault_access_error)
{
    pair p;
    begin();
    set_opts("write_access_err=2");
    pair_open(&p, RW);
    memset(p.src, 0x55, MEM);
    post_writes(&p, 3, 100);
    enum ibv_wc_status want[3] = {IBV_WC_SUCCESS, IBV_WC_REM_ACCESS_ERR,
                                  IBV_WC_WR_FLUSH_ERR};
    expect_statuses(&p, want, 3);
    ck_assert_mem_eq(p.dst, p.src, 100);
    ck_assert(all_fill(p.dst + 100, MEM - 100));
    struct ibv_qp *qp;
    ck_assert_int_eq(async_event(p.s.id->verbs, &qp),
                     IBV_EVENT_QP_ACCESS_ERR);
    ck_assert_uint_eq(counters().rej_injected, 1);
    pair_close(&p);
    assert_clean(0);
}
END_TEST

/* Registration and bind failures are clean errors: NULL with ENOMEM, a
 * bind completion with IBV_WC_MW_BIND_ERR; the device's MR limit too. */
START_TEST(test_fabric_fault_registration)
{
    begin();
    set_opts("reg_fail=2,max_mr=3");
    struct ibv_device **l = ibv_get_device_list(NULL);
    struct ibv_context *ctx = ibv_open_device(l[0]);
    ibv_free_device_list(l);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    char buf[4][64];
    struct ibv_mr *mr[4];
    mr[0] = ibv_reg_mr(pd, buf[0], 64, IBV_ACCESS_LOCAL_WRITE);
    errno = 0;
    mr[1] = ibv_reg_mr(pd, buf[1], 64, IBV_ACCESS_LOCAL_WRITE);
    ck_assert_ptr_nonnull(mr[0]);
    ck_assert_ptr_null(mr[1]);
    ck_assert_int_eq(errno, ENOMEM);
    mr[1] = ibv_reg_mr(pd, buf[1], 64, IBV_ACCESS_LOCAL_WRITE);
    mr[2] = ibv_reg_mr(pd, buf[2], 64, IBV_ACCESS_LOCAL_WRITE);
    ck_assert_ptr_nonnull(mr[1]);
    ck_assert_ptr_nonnull(mr[2]);
    errno = 0;
    ck_assert_ptr_null(ibv_reg_mr(pd, buf[3], 64, IBV_ACCESS_LOCAL_WRITE));
    ck_assert_int_eq(errno, ENOMEM); /* max_mr */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ibv_dereg_mr(mr[i]), 0);
    ck_assert_uint_eq(counters().reg_failed, 2);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);

    pair p;
    set_opts("bind_fail=1");
    pair_open(&p, RW | IBV_ACCESS_MW_BIND);
    struct ibv_mw *mw = ibv_alloc_mw(p.s.pd, IBV_MW_TYPE_2);
    uint32_t rkey = ibv_inc_rkey(mw->rkey);
    bind_mw(&p.s, mw, rkey, p.dmr, p.dst, 64, IBV_WC_MW_BIND_ERR);
    memset(p.src, 1, 64);
    /* a window whose bind failed lets nothing through (the failed bind
     * also took the server's QP to error) */
    ck_assert_int_ne(write_one(&p, 0, 64, p.t.addr, rkey), IBV_WC_SUCCESS);
    ck_assert(all_fill(p.dst, MEM));
    ibv_dealloc_mw(mw);
    pair_close(&p);
    assert_clean(0);
}
END_TEST

/* ---- completions ------------------------------------------------------ */

/* Slow, jittered completions still come in posting order. */
START_TEST(test_fabric_slow_completions_in_order)
{
    uint64_t seed = tu_seed("test_fabric_slow_completions_in_order", 15);
    char spec[96];
    snprintf(spec, sizeof spec, "cq_delay_us=2000,cq_jitter_us=5000,seed=%llu",
             (unsigned long long)seed);
    pair p;
    begin();
    set_opts(spec);
    pair_open(&p, RW);
    post_writes(&p, 20, 32);
    expect_statuses(&p, NULL, 20);
    ck_assert_uint_eq(counters().writes_landed, 20);
    pair_close(&p);
    assert_clean(0);
}
END_TEST

static bool fd_ready(int fd)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    return poll(&pf, 1, 0) == 1;
}

/* ibv_req_notify_cq arms for the next completion only: one already queued
 * never fires, an unarmed CQ never fires, an armed one fires once. */
START_TEST(test_fabric_notify_only_new)
{
    pair p;
    begin();
    pair_open(&p, RW);
    struct ibv_sge sge = sge_of(&p, 0, 8);
    uint64_t cqes = counters().cqes;
    ck_assert_int_eq(rc_write(&p.c, 1, &sge, 1, p.t.addr, p.t.rkey), 0);
    AWAIT(cqes, cqes + 1); /* queued, nobody armed */
    ck_assert_int_eq(ibv_req_notify_cq(p.c.cq, 0), 0);
    usleep(20000);
    ck_assert(!fd_ready(p.c.cc->fd));
    struct ibv_wc wc;
    ck_assert_int_eq(ibv_poll_cq(p.c.cq, 1, &wc), 1);
    ck_assert_uint_eq(wc.wr_id, 1);
    /* armed (above), then a new completion: one event */
    ck_assert_int_eq(rc_write(&p.c, 2, &sge, 1, p.t.addr, p.t.rkey), 0);
    struct pollfd pf = {.fd = p.c.cc->fd, .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, RC_WAIT_MS), 1);
    struct ibv_cq *cq;
    void *ctx;
    ck_assert_int_eq(ibv_get_cq_event(p.c.cc, &cq, &ctx), 0);
    ck_assert_ptr_eq(cq, p.c.cq);
    ck_assert_ptr_eq(ctx, &p.c);
    ibv_ack_cq_events(cq, 1);
    /* not re-armed: the next completion is silent */
    cqes = counters().cqes;
    ck_assert_int_eq(rc_write(&p.c, 3, &sge, 1, p.t.addr, p.t.rkey), 0);
    AWAIT(cqes, cqes + 1);
    ck_assert(!fd_ready(p.c.cc->fd));
    errno = 0;
    ck_assert_int_eq(ibv_get_cq_event(p.c.cc, &cq, &ctx), -1);
    ck_assert_int_eq(errno, EAGAIN); /* rc made the fd non-blocking */
    ck_assert_int_eq(ibv_poll_cq(p.c.cq, 2, (struct ibv_wc[2]){0}), 2);
    pair_close(&p);
    assert_clean(0);
}
END_TEST

/* SEND and WRITE_WITH_IMM consume receives; a SEND that finds none waits
 * (RNR) until one is posted; an inline SEND; a receive too small fails
 * both sides. */
START_TEST(test_fabric_send_recv)
{
    pair p;
    begin();
    pair_open(&p, RW);
    uint8_t rbuf[64];
    struct ibv_mr *rmr = ibv_reg_mr(p.s.pd, rbuf, sizeof rbuf,
                                    IBV_ACCESS_LOCAL_WRITE);
    memcpy(p.src, "ping", 4);
    struct ibv_sge sge = sge_of(&p, 0, 4);
    struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED};
    post_send(p.c.id->qp, &wr);
    post_recv(&p.s, 10, rbuf, sizeof rbuf, rmr->lkey);
    struct ibv_wc wc;
    ck_assert_int_eq(rc_cqe(&p.s, &wc), 0);
    ck_assert_int_eq(wc.status, IBV_WC_SUCCESS);
    ck_assert_int_eq(wc.opcode, IBV_WC_RECV);
    ck_assert_uint_eq(wc.byte_len, 4);
    ck_assert_mem_eq(rbuf, "ping", 4);
    ck_assert_int_eq(rc_cqe(&p.c, &wc), 0);
    ck_assert_int_eq(wc.opcode, IBV_WC_SEND);

    post_recv(&p.s, 11, rbuf, sizeof rbuf, rmr->lkey);
    memcpy(p.src, "data", 4);
    wr = (struct ibv_send_wr){.wr_id = 2, .sg_list = &sge, .num_sge = 1,
                              .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                              .send_flags = IBV_SEND_SIGNALED,
                              .imm_data = htonl(42),
                              .wr.rdma = {p.t.addr + 8, p.t.rkey}};
    post_send(p.c.id->qp, &wr);
    ck_assert_int_eq(rc_cqe(&p.s, &wc), 0);
    ck_assert_int_eq(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    ck_assert(wc.wc_flags & IBV_WC_WITH_IMM);
    ck_assert_uint_eq(ntohl(wc.imm_data), 42);
    ck_assert_mem_eq(p.dst + 8, "data", 4);
    ck_assert_int_eq(rc_cqe(&p.c, &wc), 0);
    ck_assert_int_eq(wc.status, IBV_WC_SUCCESS);

    char inl[] = "inline";
    struct ibv_sge isge = {(uintptr_t)inl, 6, 0};
    post_recv(&p.s, 12, rbuf, sizeof rbuf, rmr->lkey);
    wr = (struct ibv_send_wr){.wr_id = 3, .sg_list = &isge, .num_sge = 1,
                              .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_INLINE};
    post_send(p.c.id->qp, &wr);
    memset(inl, 0, sizeof inl); /* inline: the buffer is free at once */
    ck_assert_int_eq(rc_cqe(&p.s, &wc), 0);
    ck_assert_mem_eq(rbuf, "inline", 6);

    post_recv(&p.s, 13, rbuf, 2, rmr->lkey);
    wr = (struct ibv_send_wr){.wr_id = 4, .sg_list = &sge, .num_sge = 1,
                              .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_SIGNALED};
    post_send(p.c.id->qp, &wr);
    ck_assert_int_eq(rc_cqe(&p.s, &wc), 0);
    ck_assert_int_eq(wc.status, IBV_WC_LOC_LEN_ERR);
    ck_assert_int_eq(rc_cqe(&p.c, &wc), 0);
    ck_assert_int_eq(wc.status, IBV_WC_REM_INV_REQ_ERR);
    ck_assert_uint_eq(counters().sends_landed, 3);
    ibv_dereg_mr(rmr);
    pair_close(&p);
    assert_clean(0);
}
END_TEST

/* ---- connection management -------------------------------------------- */

/* rdma_disconnect: the QP goes to error (a posted receive flushes), both
 * sides see DISCONNECTED once, then TIMEWAIT_EXIT. */
START_TEST(test_fabric_disconnect_both_sides)
{
    pair p;
    begin();
    pair_open(&p, RW);
    uint8_t rbuf[8];
    struct ibv_mr *rmr = ibv_reg_mr(p.c.pd, rbuf, 8, IBV_ACCESS_LOCAL_WRITE);
    post_recv(&p.c, 9, rbuf, 8, rmr->lkey);
    ck_assert_int_eq(rdma_disconnect(p.c.id), 0);
    struct ibv_wc wc;
    ck_assert_int_eq(rc_cqe(&p.c, &wc), 0);
    ck_assert_int_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    ck_assert_int_eq(ibv_query_qp(p.c.id->qp, &a, IBV_QP_STATE, &ia), 0);
    ck_assert_int_eq(a.qp_state, IBV_QPS_ERR);
    ck_assert_int_eq(rc_expect(p.s.ch, RDMA_CM_EVENT_DISCONNECTED, NULL), 0);
    ck_assert_int_eq(rdma_disconnect(p.s.id), 0);
    ck_assert_int_eq(rc_expect(p.s.ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, NULL), 0);
    ck_assert_int_eq(rc_expect(p.c.ch, RDMA_CM_EVENT_DISCONNECTED, NULL), 0);
    ck_assert_int_eq(rc_expect(p.c.ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, NULL), 0);
    ck_assert_int_eq(rdma_disconnect(p.c.id), 0); /* again: harmless */
    usleep(20000);
    ck_assert(!fd_ready(p.c.ch->fd)); /* no second DISCONNECTED */
    ck_assert(!fd_ready(p.s.ch->fd));
    ck_assert_uint_eq(counters().disconnects, 2);
    ibv_dereg_mr(rmr);
    pair_close(&p);
    assert_clean(0);
}
END_TEST

/* A cut link (write_cut, then xfer_fabric_cut): both sides see
 * DISCONNECTED; the write on the wire fails with a retry error although
 * it landed (its ack was lost); the rest is flushed. */
START_TEST(test_fabric_cut_link)
{
    pair p;
    begin();
    set_opts("write_cut=1");
    pair_open(&p, RW);
    memset(p.src, 0x66, MEM);
    post_writes(&p, 3, 1000);
    enum ibv_wc_status want[3] = {IBV_WC_RETRY_EXC_ERR, IBV_WC_WR_FLUSH_ERR,
                                  IBV_WC_WR_FLUSH_ERR};
    expect_statuses(&p, want, 3);
    ck_assert_int_eq(rc_expect(p.c.ch, RDMA_CM_EVENT_DISCONNECTED, NULL), 0);
    ck_assert_int_eq(rc_expect(p.s.ch, RDMA_CM_EVENT_DISCONNECTED, NULL), 0);
    AWAIT(writes_landed, 1);
    ck_assert_mem_eq(p.dst, p.src, 1000);
    ck_assert(all_fill(p.dst + 1000, MEM - 1000));
    pair_close(&p);

    set_opts("");
    pair_open(&p, RW);
    ck_assert_int_eq(xfer_fabric_cut(p.c.id), 1);
    ck_assert_int_eq(rc_expect(p.c.ch, RDMA_CM_EVENT_DISCONNECTED, NULL), 0);
    ck_assert_int_eq(rc_expect(p.s.ch, RDMA_CM_EVENT_DISCONNECTED, NULL), 0);
    ck_assert_int_eq(rc_expect(p.c.ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, NULL), 0);
    struct ibv_sge sge = sge_of(&p, 0, 8);
    ck_assert_int_eq(rc_write(&p.c, 5, &sge, 1, p.t.addr, p.t.rkey), 0);
    struct ibv_wc wc;
    ck_assert_int_eq(rc_cqe(&p.c, &wc), 0);
    ck_assert_int_eq(wc.status, IBV_WC_WR_FLUSH_ERR);
    ck_assert_uint_eq(counters().links_cut, 2);
    pair_close(&p);
    assert_clean(0);
}
END_TEST

/* rdma_reject reaches the client as REJECTED, reason 28, with its private
 * data padded to 148 bytes; a port nobody listens on rejects with 8. */
START_TEST(test_fabric_reject)
{
    rc_side c, s;
    rc_event ev;
    uint16_t port = 0;
    begin();
    ck_assert_int_eq(rc_listen(&s, ADDR, &port), 0);
    ck_assert_int_eq(rc_connect(&c, ADDR, port, "x", 1), 0);
    ck_assert_int_eq(rc_request(&s, &s, NULL), 0);
    ck_assert_int_eq(rdma_reject(s.id, "no", 2), 0);
    ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_REJECTED, &ev), 0);
    ck_assert_int_eq(ev.status, 28);
    ck_assert_int_eq(ev.pdlen, 148);
    ck_assert_mem_eq(ev.pdata, "no\0", 3);
    rc_close(&c);
    rc_close(&s);

    ck_assert_int_eq(rc_listen(&s, ADDR, &port), 0);
    port = ntohs(rdma_get_src_port(s.listen));
    rc_close(&s); /* the port is free again */
    ck_assert_int_eq(rc_connect(&c, ADDR, port, NULL, 0), 0);
    ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_REJECTED, &ev), 0);
    ck_assert_int_eq(ev.status, 8);
    rc_close(&c);
    ck_assert_uint_eq(counters().rejects, 2);
    assert_clean(0);
}
END_TEST

/* An id with an event taken but not acked, and a CQ with a completion
 * event not acked, are not destroyed (rdma-core would wait forever). */
START_TEST(test_fabric_destroy_refused_while_unacked)
{
    pair p;
    begin();
    pair_open(&p, RW);
    ck_assert_int_eq(rdma_disconnect(p.c.id), 0);
    struct rdma_cm_event *ev;
    struct pollfd pf = {.fd = p.s.ch->fd, .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, RC_WAIT_MS), 1);
    ck_assert_int_eq(rdma_get_cm_event(p.s.ch, &ev), 0);
    ck_assert_int_eq(ev->event, RDMA_CM_EVENT_DISCONNECTED);
    rdma_destroy_qp(p.s.id);
    errno = 0;
    ck_assert_int_eq(rdma_destroy_id(p.s.id), -1);
    ck_assert_int_eq(errno, EBUSY);
    rdma_ack_cm_event(ev);

    struct ibv_sge sge = sge_of(&p, 0, 8);
    ck_assert_int_eq(ibv_req_notify_cq(p.c.cq, 0), 0);
    ck_assert_int_eq(rc_write(&p.c, 1, &sge, 1, p.t.addr, p.t.rkey), 0);
    struct ibv_cq *cq;
    void *ctx;
    pf.fd = p.c.cc->fd;
    ck_assert_int_eq(poll(&pf, 1, RC_WAIT_MS), 1);
    ck_assert_int_eq(ibv_get_cq_event(p.c.cc, &cq, &ctx), 0);
    rdma_destroy_qp(p.c.id);
    ck_assert_int_eq(ibv_destroy_cq(p.c.cq), EBUSY);
    ibv_ack_cq_events(cq, 1);
    pair_close(&p);
    assert_clean(2);
}
END_TEST

/* ---- threads and processes -------------------------------------------- */

typedef struct server_arg {
    int port_pipe;
    uint8_t *mem;
    int status;
} server_arg;

/* A server on its own thread, blocking on its channel like a daemon. */
static void *server_main(void *a_)
{
    server_arg *a = a_;
    rc_side s;
    uint16_t port = 0;
    a->status = 1;
    if (rc_listen(&s, ADDR, &port) < 0)
        return NULL;
    if (write(a->port_pipe, &port, sizeof port) != sizeof port)
        return NULL;
    struct ibv_mr *mr = NULL;
    if (rc_request(&s, &s, NULL) == 0 &&
        (mr = ibv_reg_mr(s.pd, a->mem, MEM, RW))) {
        target t = {(uintptr_t)a->mem, mr->rkey, MEM};
        if (rc_accept(&s, &t, sizeof t) == 0 &&
            rc_expect(s.ch, RDMA_CM_EVENT_ESTABLISHED, NULL) == 0 &&
            rc_expect(s.ch, RDMA_CM_EVENT_DISCONNECTED, NULL) == 0 &&
            rdma_disconnect(s.id) == 0 &&
            rc_expect(s.ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, NULL) == 0)
            a->status = 0;
    }
    if (mr)
        ibv_dereg_mr(mr);
    rc_close(&s);
    return NULL;
}

/* Client on this thread, server on another; N writes, read back. */
START_TEST(test_fabric_threads)
{
    uint64_t rng = tu_seed("test_fabric_threads", 16);
    begin();
    int pp[2];
    ck_assert_int_eq(pipe(pp), 0);
    server_arg a = {.port_pipe = pp[1], .mem = malloc(MEM)};
    memset(a.mem, FILL, MEM);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, server_main, &a), 0);
    uint16_t port;
    ck_assert_int_eq(read(pp[0], &port, sizeof port), sizeof port);

    rc_side c;
    rc_event rep;
    target t;
    ck_assert_int_eq(rc_connect(&c, ADDR, port, NULL, 0), 0);
    ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_ESTABLISHED, &rep), 0);
    memcpy(&t, rep.pdata, sizeof t);
    uint8_t *src = malloc(MEM);
    fill_random(src, MEM, &rng);
    struct ibv_mr *mr = ibv_reg_mr(c.pd, src, MEM, IBV_ACCESS_LOCAL_WRITE);
    for (uint64_t i = 0; i < 16; i++) {
        struct ibv_sge sge = {(uintptr_t)src + i * 4096, 4096, mr->lkey};
        struct ibv_wc wc;
        ck_assert_int_eq(rc_write(&c, i, &sge, 1, t.addr + i * 4096, t.rkey),
                         0);
        ck_assert_int_eq(rc_cqe(&c, &wc), 0);
        ck_assert_int_eq(wc.status, IBV_WC_SUCCESS);
    }
    ck_assert_mem_eq(a.mem, src, MEM);
    ck_assert_int_eq(rdma_disconnect(c.id), 0);
    ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_DISCONNECTED, NULL), 0);
    ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, NULL), 0);
    pthread_join(th, NULL);
    ck_assert_int_eq(a.status, 0);
    ibv_dereg_mr(mr);
    rc_close(&c);
    free(src);
    free(a.mem);
    close(pp[0]);
    close(pp[1]);
    assert_clean(0);
}
END_TEST

typedef struct peer {
    pid_t pid;
    int out;
    uint16_t port;
    uint8_t *mem;
    size_t len;
    char counters[96];
} peer;

/* Start fabric_peer over a fresh memfd of len bytes; faults go in its
 * XFER_FABRIC_FAULTS.  Returns 0 once it printed its port. */
static int peer_start(peer *p, size_t len, const char *faults)
{
    static int seq;
    const char *exe = getenv("FABRIC_PEER");
    int fd = memfd_create("fabric-peer", 0), pp[2];
    ck_assert_ptr_nonnull(exe);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)len), 0);
    p->len = len;
    p->mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert(p->mem != MAP_FAILED);
    memset(p->mem, FILL, len);
    snprintf(p->counters, sizeof p->counters, "fabric-peer-%d-%d.counters",
             (int)getpid(), seq++);
    unlink(p->counters);
    /* the child's environment, built before fork (threads are running) */
    char fdarg[16], lenarg[24], cvar[128], fvar[160];
    snprintf(fdarg, sizeof fdarg, "%d", fd);
    snprintf(lenarg, sizeof lenarg, "%zu", len);
    snprintf(cvar, sizeof cvar, "XFER_FABRIC_COUNTERS=%s", p->counters);
    snprintf(fvar, sizeof fvar, "XFER_FABRIC_FAULTS=%s", faults);
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 3, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "XFER_FABRIC_FAULTS=", 19) &&
            strncmp(environ[i], "XFER_FABRIC_COUNTERS=", 21))
            env[k++] = environ[i];
    env[k++] = cvar;
    env[k++] = fvar;
    char *argv[] = {(char *)"fabric_peer", fdarg, lenarg, NULL};
    ck_assert_int_eq(pipe(pp), 0);
    p->pid = fork();
    ck_assert_int_ge(p->pid, 0);
    if (p->pid == 0) {
        dup2(pp[1], 1);
        execve(exe, argv, env);
        _exit(127);
    }
    free(env);
    close(pp[1]);
    close(fd);
    p->out = pp[0];
    char line[16] = {0};
    struct pollfd pf = {.fd = p->out, .events = POLLIN};
    if (poll(&pf, 1, RC_WAIT_MS) != 1 || read(p->out, line, 15) <= 0)
        return -1;
    p->port = (uint16_t)atoi(line);
    return 0;
}

static int peer_wait(peer *p)
{
    int st;
    ck_assert_int_eq(waitpid(p->pid, &st, 0), p->pid);
    close(p->out);
    munmap(p->mem, p->len);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The server in another process: writes land in its memory (read back
 * through the shared mapping), split at a small max_msg_sz; its counters
 * file shows every MR deregistered and every event acked. */
START_TEST(test_fabric_two_processes)
{
    uint64_t rng = tu_seed("test_fabric_two_processes", 17);
    const size_t len = 1 << 20;
    peer pr;
    begin();
    set_opts("max_msg_sz=65536");
    ck_assert_int_eq(peer_start(&pr, len, ""), 0);
    rc_side c;
    rc_event rep;
    target t;
    ck_assert_int_eq(rc_connect(&c, ADDR, pr.port, NULL, 0), 0);
    ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_ESTABLISHED, &rep), 0);
    memcpy(&t, rep.pdata, sizeof t);
    ck_assert_uint_eq(t.len, len);
    uint8_t *src = malloc(len);
    fill_random(src, len, &rng);
    struct ibv_mr *mr = ibv_reg_mr(c.pd, src, len, IBV_ACCESS_LOCAL_WRITE);
    /* 16 pieces of 64 KiB, only the last signaled */
    struct ibv_send_wr wr[16];
    struct ibv_sge sge[16];
    for (int i = 0; i < 16; i++) {
        sge[i] = (struct ibv_sge){(uintptr_t)src + i * 65536u, 65536,
                                  mr->lkey};
        wr[i] = (struct ibv_send_wr){
            .wr_id = (uint64_t)i,
            .next = i < 15 ? &wr[i + 1] : NULL,
            .sg_list = &sge[i],
            .num_sge = 1,
            .opcode = IBV_WR_RDMA_WRITE,
            .send_flags = i == 15 ? IBV_SEND_SIGNALED : 0,
            .wr.rdma = {t.addr + i * 65536u, t.rkey},
        };
    }
    post_send(c.id->qp, wr);
    struct ibv_wc wc;
    ck_assert_int_eq(rc_cqe(&c, &wc), 0);
    ck_assert_int_eq(wc.status, IBV_WC_SUCCESS);
    ck_assert_uint_eq(wc.wr_id, 15);
    ck_assert_mem_eq(pr.mem, src, len);
    ck_assert_int_eq(rdma_disconnect(c.id), 0);
    ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_DISCONNECTED, NULL), 0);
    ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, NULL), 0);
    ck_assert_int_eq(peer_wait(&pr), 0);

    xfer_fabric_counters k;
    ck_assert_int_eq(xfer_fabric_counters_load(pr.counters, &k), 0);
    ck_assert_uint_eq(k.writes_landed, 16);
    ck_assert_uint_eq(k.bytes_landed, len);
    ck_assert_uint_eq(k.mrs_created, 1);
    ck_assert_uint_eq(k.mrs_live, 0);
    ck_assert_uint_eq(k.qps_live, 0);
    ck_assert_uint_eq(k.cm_ids_live, 0);
    ck_assert_uint_eq(k.contexts_live, 0);
    ck_assert_uint_eq(k.cm_events, k.cm_events_acked);
    unlink(pr.counters);
    ibv_dereg_mr(mr);
    rc_close(&c);
    free(src);
    assert_clean(0);
}
END_TEST

/* Faults reach a child through XFER_FABRIC_FAULTS: its registration fails
 * (it rejects the connection); a bad value stops it with exit 2; a child
 * killed mid-connection shows up as DISCONNECTED and failed writes. */
START_TEST(test_fabric_child_faults_and_death)
{
    peer pr;
    rc_side c;
    rc_event ev;
    begin();
    ck_assert_int_eq(peer_start(&pr, 4096, "reg_fail=1"), 0);
    ck_assert_int_eq(rc_connect(&c, ADDR, pr.port, NULL, 0), 0);
    ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_REJECTED, &ev), 0);
    ck_assert_int_eq(ev.status, 28);
    ck_assert_mem_eq(ev.pdata, "reg", 3);
    ck_assert_int_eq(peer_wait(&pr), 3);
    xfer_fabric_counters k;
    ck_assert_int_eq(xfer_fabric_counters_load(pr.counters, &k), 0);
    ck_assert_uint_eq(k.reg_failed, 1);
    ck_assert_uint_eq(k.mrs_live, 0);
    unlink(pr.counters);
    rc_close(&c);

    ck_assert_int_ne(peer_start(&pr, 4096, "no_such_fault=1"), 0);
    ck_assert_int_eq(peer_wait(&pr), 2);
    unlink(pr.counters);

    ck_assert_int_eq(peer_start(&pr, 4096, ""), 0);
    ck_assert_int_eq(rc_connect(&c, ADDR, pr.port, NULL, 0), 0);
    ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_ESTABLISHED, &ev), 0);
    kill(pr.pid, SIGKILL);
    ck_assert_int_eq(peer_wait(&pr), 128 + SIGKILL);
    ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_DISCONNECTED, NULL), 0);
    uint8_t b[8] = {0};
    struct ibv_mr *mr = ibv_reg_mr(c.pd, b, 8, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_sge sge = {(uintptr_t)b, 8, mr->lkey};
    struct ibv_wc wc;
    target t;
    memcpy(&t, ev.pdata, sizeof t);
    ck_assert_int_eq(rc_write(&c, 1, &sge, 1, t.addr, t.rkey), 0);
    ck_assert_int_eq(rc_cqe(&c, &wc), 0);
    ck_assert_int_ne(wc.status, IBV_WC_SUCCESS);
    unlink(pr.counters);
    ibv_dereg_mr(mr);
    rc_close(&c);
    assert_clean(0);
}
END_TEST

int main(void)
{
    /* This process's own RDMA port space: parallel test programs never
     * meet, and fabric_peer children inherit it. */
    char ns[32];
    snprintf(ns, sizeof ns, "test_fabric.%d", (int)getpid());
    setenv("XFER_FABRIC_NS", ns, 1);
    Suite *s = suite_create("fabric");
    TCase *tc = tcase_create("fabric");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fabric_device_caps);
    tcase_add_test(tc, test_fabric_options_parse);
    tcase_add_test(tc, test_fabric_write_lands);
    tcase_add_test(tc, test_fabric_write_split);
    tcase_add_test(tc, test_fabric_bad_access_refused);
    tcase_add_test(tc, test_fabric_mw_invalidate);
    tcase_add_test(tc, test_fabric_mw_scope);
    tcase_add_test(tc, test_fabric_no_type2_fallback);
    tcase_add_test(tc, test_fabric_qp_error_flushes_all);
    tcase_add_test(tc, test_fabric_fault_qp_error_mid_write);
    tcase_add_test(tc, test_fabric_fault_access_error);
    tcase_add_test(tc, test_fabric_fault_registration);
    tcase_add_test(tc, test_fabric_slow_completions_in_order);
    tcase_add_test(tc, test_fabric_notify_only_new);
    tcase_add_test(tc, test_fabric_send_recv);
    tcase_add_test(tc, test_fabric_disconnect_both_sides);
    tcase_add_test(tc, test_fabric_cut_link);
    tcase_add_test(tc, test_fabric_reject);
    tcase_add_test(tc, test_fabric_destroy_refused_while_unacked);
    tcase_add_test(tc, test_fabric_threads);
    tcase_add_test(tc, test_fabric_two_processes);
    tcase_add_test(tc, test_fabric_child_faults_and_death);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
