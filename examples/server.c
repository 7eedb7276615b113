/*
 * examples/server.c - a tensor-parallel worker that serves its shard of
 * the cache over TCP, straight into its own buffer: the producer's bytes
 * land where the model will read them, with no copy and no daemon.
 *
 *   server SHARD [PORT]  serve shard SHARD of group 0 on 127.0.0.1, on
 *                        PORT (default 0: a free one), printed as
 *                        "shard SHARD listening on PORT"
 *
 * The order it keeps:
 *  1. own the memory (here 1 MiB from aligned_alloc; on a GPU worker,
 *     memory registered for RDMA); it must stay valid, and the worker must
 *     not write it, until xfer_server_del returns;
 *  2. start from xfer_server_config_default(), name the loop, the shard
 *     and its memory, and create the server;
 *  3. run the loop; on SIGTERM drain (no new reserves; the callback runs
 *     once nothing is being written into the buffer, and prints what is
 *     still held), then leave the loop;
 *  4. xfer_server_del(), then free the memory.
 * The consumer scheduler (examples/consumer.c) learns where each
 * transfer's bytes are: {shard, offset, length} in this buffer.
 * Exit status: 0 after a clean drain.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>
#include <xfer/server.h>

#define POOL (1u << 20)

typedef struct worker {
    struct event_base *base;
    xfer_server *srv;
    int clean;
} worker;

/* Nothing lands in the buffer any more: stop. */
static void drained(void *ud, bool clean)
{
    worker *w = ud;
    xfer_server_stats st;
    if (xfer_server_stats_get(w->srv, XFER_SHARD_NONE, &st) == 0)
        printf("drained: %llu bytes held, %llu live\n",
               (unsigned long long)st.bytes_in_use,
               (unsigned long long)st.live);
    w->clean = clean;
    event_base_loopbreak(w->base);
}

static void on_term(evutil_socket_t sig, short what, void *ud)
{
    (void)sig;
    (void)what;
    worker *w = ud;
    if (xfer_server_drain(w->srv, drained, w) != 0)
        event_base_loopbreak(w->base); /* a second signal: now */
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: server SHARD [PORT]\n");
        return 2;
    }
    worker w = {0};
    struct event *term = NULL;
    int rc = XFER_ERR_NOMEM;
    void *buf = aligned_alloc(4096, POOL); /* the worker's own memory */
    signal(SIGPIPE, SIG_IGN);
    w.base = event_base_new();
    if (!buf || !w.base)
        goto out;
    xfer_server_shard shard = {.index = (uint16_t)atoi(argv[1]),
                               .base = buf, .len = POOL};
    xfer_server_config cfg;
    xfer_server_config_default(&cfg);
    cfg.base = w.base;
    /* 0: a free one; xfer_server_port() says which */
    cfg.port = argc == 3 ? (uint16_t)atoi(argv[2]) : 0;
    cfg.nshards = 1;
    cfg.shards = &shard;
    rc = xfer_server_new(&cfg, &w.srv);
    if (rc)
        goto out;
    term = evsignal_new(w.base, SIGTERM, on_term, &w);
    if (!term || evsignal_add(term, NULL) != 0)
        goto out;
    printf("shard %u listening on %u\n", (unsigned)shard.index,
           (unsigned)xfer_server_port(w.srv));
    fflush(stdout);
    event_base_dispatch(w.base);
out:
    if (rc)
        fprintf(stderr, "server: %s\n", xfer_strerror(rc));
    if (term)
        event_free(term);
    xfer_server_del(w.srv); /* after this the buffer is ours again */
    if (w.base)
        event_base_free(w.base);
    free(buf);
    return rc || !w.clean ? 1 : 0;
}
