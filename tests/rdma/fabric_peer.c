/*
 * tests/rdma/fabric_peer.c - the far end of the fabric's two-process
 * tests: a server in its own process that accepts one RC connection into
 * memory it shares with the test (a memfd), so the test reads the bytes
 * that landed without any protocol of its own.
 *
 *   fabric_peer FD LEN    map memfd FD (LEN bytes), print the port, serve
 *
 * It prints its RDMA port on stdout, registers the mapping (LOCAL_WRITE |
 * REMOTE_WRITE), accepts with {addr, rkey, len} as private data, waits for
 * the client's disconnect, answers it and tears everything down.  If the
 * registration fails it rejects the connection with "reg" instead.  Faults
 * and counters come from XFER_FABRIC_FAULTS / XFER_FABRIC_COUNTERS.
 * Exit: 0 served, 1 the connection went wrong, 2 usage (or a bad
 * XFER_FABRIC_FAULTS, from the fabric), 3 registration refused.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#include "rc.h"

typedef struct peer_target {
    uint64_t addr;
    uint32_t rkey;
    uint32_t len;
} peer_target;

static int serve(rc_side *s, void *mem, size_t len)
{
    struct ibv_mr *mr = NULL;
    int r = 1;
    if (rc_request(s, s, NULL) < 0)
        return 1;
    mr = ibv_reg_mr(s->pd, mem, len,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr) {
        rdma_reject(s->id, "reg", 3);
        return 3;
    }
    peer_target t = {(uintptr_t)mem, mr->rkey, (uint32_t)len};
    if (rc_accept(s, &t, sizeof t) < 0 ||
        rc_expect(s->ch, RDMA_CM_EVENT_ESTABLISHED, NULL) < 0 ||
        rc_expect(s->ch, RDMA_CM_EVENT_DISCONNECTED, NULL) < 0 ||
        rdma_disconnect(s->id) < 0 ||
        rc_expect(s->ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, NULL) < 0)
        goto out;
    r = 0;
out:
    rdma_destroy_qp(s->id);
    ibv_dereg_mr(mr);
    return r;
}

int main(int argc, char **argv)
{
    rc_side s;
    uint16_t port = 0;
    char *end;
    if (argc != 3) {
        fprintf(stderr, "usage: fabric_peer FD LEN\n");
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = (int)strtol(argv[1], &end, 10);
    size_t len = strtoull(argv[2], &end, 10);
    void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) {
        perror("fabric_peer: mmap");
        return 2;
    }
    if (rc_listen(&s, "127.0.0.1", &port) < 0)
        return 1;
    printf("%u\n", port);
    fflush(stdout);
    int r = serve(&s, mem, len);
    rc_close(&s);
    munmap(mem, len);
    return r;
}
