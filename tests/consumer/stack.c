/*
 * tests/consumer/stack.c - the in-process deployment of stack.h.
 *
 * Every piece runs on one event base, so a test drives time by running
 * the loop; nothing here sleeps.  Guard pages come from mmap + mprotect, so
 * a stray write into the servers' memory faults the test.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "stack.h"

#include "rawwire.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <poll.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <event2/event.h>

#include "wire.h"

#define PAGE 4096u

static uint64_t now_ms(void)
{
    return xfer_clock_monotonic(NULL) / 1000000;
}

int st_mem_new(st_mem *m, size_t len, uint8_t fill)
{
    size_t body = (len + PAGE - 1) / PAGE * PAGE;
    m->map_len = body + 2 * PAGE;
    void *p = mmap(NULL, m->map_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    m->map = p;
    /* The buffer ends exactly at the upper guard page. */
    m->buf = m->map + PAGE + (body - len);
    m->len = len;
    memset(m->map + PAGE, fill, body);
    if (mprotect(m->map, PAGE, PROT_NONE) != 0 ||
        mprotect(m->map + PAGE + body, PAGE, PROT_NONE) != 0)
        return -1;
    return 0;
}

void st_mem_del(st_mem *m)
{
    if (m->map)
        munmap(m->map, m->map_len);
    memset(m, 0, sizeof *m);
}

uint8_t st_pattern(uint64_t id, uint16_t k, uint32_t i)
{
    return (uint8_t)(id * 131u + k * 31u + i * 7u + 1u);
}

/* ---------------------------------------------------------------------- */
/* Servers                                                                 */
/* ---------------------------------------------------------------------- */

static int start_one(stack *s, uint16_t k, uint16_t port)
{
    xfer_server_shard sh = {.index = k, .base = s->mem[k].buf,
                            .len = s->mem[k].len};
    xfer_server_config c = s->scfg;
    c.base = s->base;
    c.port = port;
    c.nshards = 1;
    c.shards = &sh;
    int rc = xfer_server_new(&c, &s->srv[k]);
    if (rc)
        return rc;
    s->port[k] = xfer_server_port(s->srv[k]);
    snprintf(s->addr[k], sizeof s->addr[k], "127.0.0.1:%u",
             (unsigned)s->port[k]);
    s->addrs[k] = s->addr[k];
    return 0;
}

int st_start_servers(stack *s, uint16_t S, size_t pool, uint64_t max_id,
                     const xfer_server_config *tmpl)
{
    memset(s, 0, sizeof *s);
    signal(SIGPIPE, SIG_IGN);
    s->S = S;
    s->max_id = max_id;
    s->out = calloc(max_id + 1, sizeof *s->out);
    s->done = calloc(max_id + 1, sizeof *s->done);
    s->base = event_base_new();
    if (!s->out || !s->done || !s->base)
        return -1;
    if (tmpl)
        s->scfg = *tmpl;
    else
        xfer_server_config_default(&s->scfg);
    if (!tmpl) {
        /* One producer session may use every shard whole here (the
         * hostile suite, tests/hostile/, tests the quotas). */
        s->scfg.session_max_bytes = pool;
        s->scfg.session_max_reservations = s->scfg.max_reservations;
        s->scfg.session_max_tombstones = s->scfg.max_tombstones;
    }
    for (uint16_t k = 0; k < S; k++) {
        if (st_mem_new(&s->mem[k], pool, ST_CANARY) != 0)
            return -1;
        int rc = start_one(s, k, 0);
        if (rc)
            return rc;
    }
    return 0;
}

void st_stop_server(stack *s, uint16_t k)
{
    xfer_server_del(s->srv[k]);
    s->srv[k] = NULL;
}

int st_restart_server(stack *s, uint16_t k)
{
    return start_one(s, k, s->port[k]);
}

uint64_t st_bytes_in_use(const stack *s)
{
    uint64_t sum = 0;
    for (uint16_t k = 0; k < s->S; k++) {
        xfer_server_stats st;
        if (s->srv[k] &&
            xfer_server_stats_get(s->srv[k], XFER_SHARD_NONE, &st) == 0)
            sum += st.bytes_in_use;
    }
    return sum;
}

/* ---------------------------------------------------------------------- */
/* Producer                                                                */
/* ---------------------------------------------------------------------- */

int st_start_producer(stack *s, uint32_t slice, uint32_t inflight,
                      uint64_t deadline_ns)
{
    s->slice = slice;
    s->inflight = inflight;
    size_t len = (size_t)slice * s->S * inflight;
    s->staging = calloc(len ? len : 1, 1);
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = s->base;
    ec.core.default_deadline_ns = deadline_ns;
    ec.core.max_transfers = inflight * 2;
    ec.core.eager_max_bytes = s->eager_max_bytes;
    ec.core.max_tombstones = (uint32_t)(4 * s->max_id + 4 * inflight + 4096);
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = s->S;
    tc.addrs = s->addrs;
    tc.reconnect_min_ns = 5000000ull;
    tc.reconnect_max_ns = 100000000ull;
    tc.secret = s->scfg.secret; /* the servers' own, when they have one */
    tc.secret_len = s->scfg.secret_len;
    if (!s->staging)
        return -1;
    int rc = xfer_engine_new(&ec, &s->e);
    if (!rc)
        rc = xfer_tcp_new(s->base, &tc, &s->tcp);
    if (!rc)
        rc = xfer_engine_register_pool(s->e, s->staging, len ? len : 1,
                                       &s->pool);
    if (!rc)
        rc = xfer_engine_add_group(s->e, xfer_tcp_transport(s->tcp),
                                   &s->group);
    return rc;
}

static void on_done(void *ud, const xfer_result *r)
{
    stack *s = ud;
    s->completions++;
    if (r->id <= s->max_id) {
        s->done[r->id].n++;
        s->done[r->id].res = *r;
    }
}

xfer_complete_cb st_done_cb(void)
{
    return on_done;
}

int st_submit(stack *s, uint64_t id, uint32_t slot)
{
    return st_submit_crc(s, id, slot, NULL, false);
}

int st_submit_crc(stack *s, uint64_t id, uint32_t slot,
                  const uint32_t *crcs, bool posted)
{
    xfer_slice sl[ST_MAX_S];
    for (uint16_t k = 0; k < s->S; k++) {
        uint64_t off = ((uint64_t)slot * s->S + k) * s->slice;
        sl[k] = (xfer_slice){.off = off, .len = s->slice};
        for (uint32_t i = 0; i < s->slice; i++)
            s->staging[off + i] = st_pattern(id, k, i);
    }
    xfer_transfer_desc d = {.id = id, .group = s->group, .pool = s->pool,
                            .nslices = s->S, .slices = sl,
                            .user_data = slot};
    if (!crcs)
        return xfer_engine_submit(s->e, &d, on_done, s);
    return posted ? xfer_engine_post_submit_crc(s->e, &d, crcs, on_done, s)
                  : xfer_engine_submit_crc(s->e, &d, crcs, on_done, s);
}

/* ---------------------------------------------------------------------- */
/* Consumer                                                                */
/* ---------------------------------------------------------------------- */

static void on_available(void *ud, uint64_t id, uint32_t attempt,
                         const xfer_region *reg, uint16_t n)
{
    stack *s = ud;
    if (id > s->max_id)
        return;
    st_outcome *o = &s->out[id];
    o->n++;
    s->twice += o->n > 1;
    o->available = true;
    o->attempt = attempt;
    o->bytes_ok = n == s->S;
    s->available++;
    for (uint16_t k = 0; k < n && k < ST_MAX_S; k++) {
        o->reg[k] = reg[k];
        const st_mem *m = &s->mem[reg[k].shard];
        if (reg[k].shard != k || reg[k].offset > m->len ||
            reg[k].len > m->len - reg[k].offset ||
            (s->slice && reg[k].len != s->slice)) {
            o->bytes_ok = false;
            continue;
        }
        for (uint32_t i = 0; i < reg[k].len; i++)
            if (m->buf[reg[k].offset + i] != st_pattern(id, k, i)) {
                o->bytes_ok = false;
                break;
            }
    }
    s->corrupt += !o->bytes_ok;
    if (s->auto_release)
        xfer_consumer_release(s->cons, id);
}

static void on_unavailable(void *ud, uint64_t id, int32_t reason,
                           uint64_t missing)
{
    stack *s = ud;
    if (id > s->max_id)
        return;
    st_outcome *o = &s->out[id];
    o->n++;
    s->twice += o->n > 1;
    o->reason = reason;
    o->missing = missing;
    s->unavailable++;
}

static void on_link(void *ud, uint16_t k, bool up)
{
    stack *s = ud;
    if (up)
        s->links_up++;
    else
        s->links_up--;
}

int st_start_consumer(stack *s, const xfer_consumer_config *tmpl)
{
    if (tmpl)
        s->ccfg = *tmpl;
    else
        xfer_consumer_config_default(&s->ccfg);
    s->ccfg.base = s->base;
    s->ccfg.nshards = s->S;
    s->ccfg.addrs = s->addrs;
    s->ccfg.available = on_available;
    s->ccfg.unavailable = on_unavailable;
    s->ccfg.link = on_link;
    s->ccfg.ud = s;
    if (!s->ccfg.secret) { /* the servers' own, when they have one */
        s->ccfg.secret = s->scfg.secret;
        s->ccfg.secret_len = s->scfg.secret_len;
    }
    if (!s->ccfg.reconnect_min_ns)
        s->ccfg.reconnect_min_ns = 5000000ull;
    if (!s->ccfg.reconnect_max_ns || s->ccfg.reconnect_max_ns > 100000000ull)
        s->ccfg.reconnect_max_ns = 100000000ull;
    return xfer_consumer_new(&s->ccfg, &s->cons);
}

/* ---------------------------------------------------------------------- */
/* The raw producer                                                        */
/* ---------------------------------------------------------------------- */

static bool readable(void *ud)
{
    struct pollfd p = {.fd = *(int *)ud, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

int st_raw_call(stack *s, int fd, const xfer_wire_msg *m, const void *data,
                xfer_wire_msg *reply)
{
    static uint32_t req;
    xfer_wire_hdr h;
    if (tw_send_msg(fd, m, ++req, data) != 0 ||
        !st_run(s, readable, &fd, 5000))
        return -1;
    return tw_recv_msg(fd, &h, reply);
}

int st_raw_connect(stack *s, uint16_t k)
{
    return st_raw_connect_role(s, k, XFER_WIRE_ROLE_PRODUCER);
}

int st_raw_connect_role(stack *s, uint16_t k, uint8_t role)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(s->port[k])};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        return -1;
    xfer_wire_msg m = {.type = XFER_WIRE_T_HELLO,
                       .version = XFER_WIRE_VERSION,
                       .role = role, .group = s->scfg.group, .shard = k};
    xfer_wire_msg r;
    if (st_raw_call(s, fd, &m, NULL, &r) != 0 ||
        r.type != XFER_WIRE_T_HELLO_ACK) {
        close(fd);
        return -1;
    }
    return fd;
}

int st_raw_put(stack *s, int fd, uint16_t k, uint64_t id, uint32_t attempt,
               bool commit, uint64_t *resv)
{
    uint8_t data[4096];
    uint32_t len = s->slice ? s->slice : 1024;
    if (len > sizeof data)
        len = sizeof data;
    for (uint32_t i = 0; i < len; i++)
        data[i] = st_pattern(id, k, i);
    xfer_wire_msg m = {.type = XFER_WIRE_T_RESERVE, .id = id,
                       .attempt = attempt, .len = len};
    xfer_wire_msg r;
    if (st_raw_call(s, fd, &m, NULL, &r) != 0)
        return -1;
    if (r.type == XFER_WIRE_T_ERROR)
        return r.code;
    *resv = r.resv_id;
    m = (xfer_wire_msg){.type = XFER_WIRE_T_WRITE, .id = id,
                        .attempt = attempt, .len = len, .resv_id = *resv};
    if (st_raw_call(s, fd, &m, data, &r) != 0)
        return -1;
    if (r.type == XFER_WIRE_T_ERROR)
        return r.code;
    if (!commit)
        return 0;
    m = (xfer_wire_msg){.type = XFER_WIRE_T_COMMIT, .id = id,
                        .attempt = attempt, .resv_id = *resv};
    if (st_raw_call(s, fd, &m, NULL, &r) != 0)
        return -1;
    return r.type == XFER_WIRE_T_ERROR ? r.code : 0;
}

/* ---------------------------------------------------------------------- */
/* Running                                                                 */
/* ---------------------------------------------------------------------- */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
}

bool st_run(stack *s, bool (*fn)(void *ud), void *ud, int timeout_ms)
{
    struct event *tick = event_new(s->base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval tv = {0, 5000};
    event_add(tick, &tv);
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    bool ok;
    while (!(ok = fn(ud)) && now_ms() < end)
        event_base_loop(s->base, EVLOOP_ONCE);
    event_free(tick);
    return ok;
}

static bool never(void *ud)
{
    return false;
}

void st_spin(stack *s, int ms)
{
    st_run(s, never, NULL, ms);
}

bool st_all_up(void *ud)
{
    stack *s = ud;
    for (uint16_t k = 0; k < s->S; k++)
        if ((s->cons && !xfer_consumer_connected(s->cons, k)) ||
            (s->tcp && !xfer_tcp_connected(s->tcp, k)))
            return false;
    return true;
}

static bool shut_flag;

static void on_shut(void *ud)
{
    shut_flag = true;
}

static bool is_shut(void *ud)
{
    return shut_flag;
}

void st_stop(stack *s)
{
    if (s->e) {
        shut_flag = false;
        xfer_engine_shutdown(s->e, on_shut, NULL);
        st_run(s, is_shut, NULL, 10000);
    }
    xfer_engine_del(s->e);
    xfer_tcp_del(s->tcp);
    xfer_consumer_del(s->cons);
    for (uint16_t k = 0; k < s->S; k++)
        xfer_server_del(s->srv[k]);
    if (s->base) {
        event_base_loop(s->base, EVLOOP_NONBLOCK);
        event_base_free(s->base);
    }
    for (uint16_t k = 0; k < s->S; k++)
        st_mem_del(&s->mem[k]);
    free(s->staging);
    free(s->out);
    free(s->done);
}
