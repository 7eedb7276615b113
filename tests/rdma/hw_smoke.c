/*
 * tests/rdma/hw_smoke.c - the hardware suite (rdma): the fabric's basic
 * scenarios against a real device, through the real libibverbs and
 * librdmacm (this program never links the fabric).
 *
 * Without a device it prints one line and exits 77, which meson reports
 * as SKIP.  With one it checks the device (port, PD, MR, whether type 2
 * memory windows exist); with XFER_RDMA_ADDR set to an address of an
 * RDMA-capable interface it also connects to itself through rdmacm,
 * writes 64 KiB and reads it back, and shows that a region's rkey lets
 * nothing through once it is gone (a type 2 window invalidated, or, on a
 * device without them, a registration deregistered).  Exit 0 on success,
 * 1 with a line naming the failed step.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rc.h"

#define LEN 65536

static int fail(const char *what)
{
    fprintf(stderr, "hw_smoke: %s failed (%s)\n", what, strerror(errno));
    return 1;
}

/* Device-level checks; *type2 says whether type 2 windows exist. */
static int check_device(struct ibv_device *dev, bool *type2)
{
    struct ibv_context *ctx = ibv_open_device(dev);
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    static char buf[4096];
    if (!ctx)
        return fail("ibv_open_device");
    if (ibv_query_device(ctx, &da) || ibv_query_port(ctx, 1, &pa))
        return fail("query");
    *type2 = (da.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A |
                                     IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf,
                                        IBV_ACCESS_LOCAL_WRITE |
                                            IBV_ACCESS_REMOTE_WRITE)
                           : NULL;
    if (!mr)
        return fail("ibv_reg_mr");
    printf("device %s: port state %s, max_msg_sz %u, type 2 memory "
           "windows: %s\n",
           ibv_get_device_name(dev), ibv_port_state_str(pa.state),
           pa.max_msg_sz, *type2 ? "yes" : "no");
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    return 0;
}

typedef struct target {
    uint64_t addr;
    uint32_t rkey;
    uint32_t len;
} target;

static int write_wait(rc_side *c, struct ibv_sge *sge, uint64_t raddr,
                      uint32_t rkey, enum ibv_wc_status *st)
{
    struct ibv_wc wc;
    if (rc_write(c, 1, sge, 1, raddr, rkey) || rc_cqe(c, &wc))
        return -1;
    *st = wc.status;
    return 0;
}

/* After the region is gone (window invalidated or MR deregistered), a
 * write through its rkey must fail and land nothing. */
static int late_write_refused(rc_side *c, rc_side *s, struct ibv_mr *dmr,
                              uint8_t *dst, struct ibv_sge *sge, bool type2)
{
    enum ibv_wc_status st;
    uint32_t rkey;
    struct ibv_wc wc;
    memset(dst, 0xEE, LEN);
    if (type2) {
        struct ibv_mw *mw = ibv_alloc_mw(s->pd, IBV_MW_TYPE_2);
        if (!mw)
            return fail("ibv_alloc_mw");
        rkey = ibv_inc_rkey(mw->rkey);
        struct ibv_send_wr wr = {
            .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED,
            .bind_mw = {.mw = mw, .rkey = rkey,
                        .bind_info = {.mr = dmr, .addr = (uintptr_t)dst,
                                      .length = 4096,
                                      .mw_access_flags =
                                          IBV_ACCESS_REMOTE_WRITE}}}, *bad;
        if (ibv_post_send(s->id->qp, &wr, &bad) || rc_cqe(s, &wc) ||
            wc.status != IBV_WC_SUCCESS)
            return fail("bind type 2 window");
        wr = (struct ibv_send_wr){.opcode = IBV_WR_LOCAL_INV,
                                  .send_flags = IBV_SEND_SIGNALED,
                                  .invalidate_rkey = rkey};
        if (ibv_post_send(s->id->qp, &wr, &bad) || rc_cqe(s, &wc) ||
            wc.status != IBV_WC_SUCCESS)
            return fail("local invalidate");
        ibv_dealloc_mw(mw);
    } else {
        struct ibv_mr *one = ibv_reg_mr(s->pd, dst, 4096,
                                        IBV_ACCESS_LOCAL_WRITE |
                                            IBV_ACCESS_REMOTE_WRITE);
        if (!one)
            return fail("per-region ibv_reg_mr");
        rkey = one->rkey;
        ibv_dereg_mr(one);
    }
    sge->length = 64;
    if (write_wait(c, sge, (uintptr_t)dst, rkey, &st) < 0)
        return fail("late write");
    for (int i = 0; i < 64; i++)
        if (dst[i] != 0xEE)
            return fail("late write landed");
    printf("late write refused: %s\n", ibv_wc_status_str(st));
    return st == IBV_WC_SUCCESS ? fail("late write completed") : 0;
}

static int check_connection(const char *addr, bool type2)
{
    rc_side c, s;
    rc_event rep;
    uint16_t port = 0;
    uint8_t *src = malloc(LEN), *dst = malloc(LEN);
    enum ibv_wc_status st;
    target t;
    for (int i = 0; i < LEN; i++)
        src[i] = (uint8_t)(i * 7 + 1);
    if (!src || !dst || rc_listen(&s, addr, &port) ||
        rc_connect(&c, addr, port, NULL, 0) || rc_request(&s, &s, NULL))
        return fail("connect");
    struct ibv_mr *dmr = ibv_reg_mr(s.pd, dst, LEN,
                                    IBV_ACCESS_LOCAL_WRITE |
                                        IBV_ACCESS_REMOTE_WRITE |
                                        IBV_ACCESS_MW_BIND);
    struct ibv_mr *smr = ibv_reg_mr(c.pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
    if (!dmr || !smr)
        return fail("ibv_reg_mr");
    t = (target){(uintptr_t)dst, dmr->rkey, LEN};
    if (rc_accept(&s, &t, sizeof t) ||
        rc_expect(c.ch, RDMA_CM_EVENT_ESTABLISHED, &rep) ||
        rc_expect(s.ch, RDMA_CM_EVENT_ESTABLISHED, NULL))
        return fail("accept");
    memcpy(&t, rep.pdata, sizeof t);
    struct ibv_sge sge = {(uintptr_t)src, LEN, smr->lkey};
    if (write_wait(&c, &sge, t.addr, t.rkey, &st) || st != IBV_WC_SUCCESS ||
        memcmp(src, dst, LEN) != 0)
        return fail("write and read back");
    if (late_write_refused(&c, &s, dmr, dst, &sge, type2))
        return 1;
    rdma_disconnect(c.id);
    rdma_disconnect(s.id);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    rc_close(&c);
    rc_close(&s);
    free(src);
    free(dst);
    return 0;
}

int main(void)
{
    int n = 0;
    bool type2 = false;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        printf("SKIP: no RDMA device (ibv_get_device_list: %s)\n",
               list ? "no devices" : strerror(errno));
        if (list)
            ibv_free_device_list(list);
        return 77;
    }
    int r = check_device(list[0], &type2);
    ibv_free_device_list(list);
    const char *addr = getenv("XFER_RDMA_ADDR");
    if (r == 0 && !addr)
        printf("set XFER_RDMA_ADDR to an RDMA interface's IPv4 address "
               "for the connection checks\n");
    else if (r == 0)
        r = check_connection(addr, type2);
    if (r == 0)
        printf("PASS\n");
    return r;
}
