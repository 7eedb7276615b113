/*
 * tests/consumer/test_metrics.c - the metrics endpoint (xfer/metrics.h)
 * of a shard server, an engine and a consumer in this process: scraped
 * over HTTP from evhttp, the text must parse as Prometheus exposition
 * (prom.c, strict), and its counters must be the ones the wire STATUS and
 * the stats calls report.  A parser that accepts anything would pass the
 * first half, so the parser itself is shown bad text too.
 */
#include <check.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/http.h>

#include "prom.h"
#include "stack.h"
#include "testutil.h"
#include "wire.h"
#include "xfer/metrics.h"

#define N 20

typedef struct http_get {
    int fd;
    char *buf;
    size_t n, cap;
    bool eof;
} http_get;

static bool read_some(void *ud)
{
    http_get *g = ud;
    for (;;) {
        if (g->n + 4096 > g->cap) {
            g->cap = g->cap ? 2 * g->cap : 65536;
            g->buf = realloc(g->buf, g->cap);
        }
        ssize_t r = recv(g->fd, g->buf + g->n, g->cap - g->n - 1,
                         MSG_DONTWAIT);
        if (r > 0) {
            g->n += (size_t)r;
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            g->eof = true;
        return g->eof;
    }
}

/* Send one request and return the whole response (status line on). */
static char *http(stack *s, uint16_t port, const char *method)
{
    http_get g = {.fd = socket(AF_INET, SOCK_STREAM, 0)};
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(g.fd, (struct sockaddr *)&sa, sizeof sa), 0);
    char req[128];
    int n = snprintf(req, sizeof req,
                     "%s /metrics HTTP/1.1\r\nHost: x\r\nConnection: close"
                     "\r\nContent-Length: 0\r\n\r\n", method);
    ck_assert_int_eq(send(g.fd, req, (size_t)n, 0), n);
    ck_assert(st_run(s, read_some, &g, 5000));
    close(g.fd);
    g.buf[g.n] = '\0';
    return g.buf;
}

static bool settled(void *ud)
{
    stack *s = ud;
    return s->completions >= N && s->available >= N;
}

static double need(const prom *p, const char *name, const char *labels)
{
    bool found;
    double v = prom_get(p, name, labels, &found);
    if (!found)
        ck_abort_msg("no series %s{%s}", name, labels);
    return v;
}

START_TEST(test_metrics_endpoint_matches_status)
{
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 2, 256 << 10, N + 4, NULL), 0);
    ck_assert_int_eq(st_start_producer(&s, 1000, 32, 5000000000ull), 0);
    ck_assert_int_eq(st_start_consumer(&s, NULL), 0);
    s.auto_release = true;
    ck_assert(st_run(&s, st_all_up, &s, 5000));
    for (uint64_t id = 1; id <= N; id++)
        ck_assert_int_eq(st_submit(&s, id, (uint32_t)id), 0);
    ck_assert(st_run(&s, settled, &s, 10000));
    /* One bad frame on shard 0, so a reason is counted. */
    int bad = st_raw_connect(&s, 0);
    ck_assert_int_eq(send(bad, "garbage garbage!", 16, 0), 16);
    st_spin(&s, 50);
    close(bad);

    xfer_metrics_config mc;
    xfer_metrics_config_default(&mc);
    mc.base = s.base;
    xfer_metrics *m;
    ck_assert_int_eq(xfer_metrics_new(&mc, &m), 0);
    ck_assert_int_eq(xfer_metrics_add_server(m, s.srv[0]), 0);
    ck_assert_int_eq(xfer_metrics_add_server(m, s.srv[1]), XFER_ERR_EXISTS);
    ck_assert_int_eq(xfer_metrics_add_engine(m, s.e), 0);
    ck_assert_int_eq(xfer_metrics_add_consumer(m, s.cons), 0);
    ck_assert_int_eq(xfer_metrics_listen(m, "127.0.0.1", 0), 0);
    uint16_t port = xfer_metrics_port(m);
    ck_assert_uint_gt(port, 0);

    char *resp = http(&s, port, "GET");
    ck_assert_msg(strncmp(resp, "HTTP/1.1 200", 12) == 0, "%.60s", resp);
    ck_assert_ptr_nonnull(strstr(resp, "text/plain; version=0.0.4"));
    const char *body = strstr(resp, "\r\n\r\n");
    ck_assert_ptr_nonnull(body);
    prom p;
    ck_assert_msg(prom_parse(body + 4, &p) == 0, "%s", p.err);

    /* The wire STATUS of shard 0, asked for before any HELLO. */
    int fd = st_raw_connect(&s, 0);
    xfer_wire_msg q = {.type = XFER_WIRE_T_STATUS, .shard = 0}, r;
    ck_assert_int_eq(st_raw_call(&s, fd, &q, NULL, &r), 0);
    ck_assert_int_eq(r.type, XFER_WIRE_T_STATUS_OK);
    close(fd);
    ck_assert_double_eq(need(&p, "xfer_server_ops_total",
                             "shard=\"0\",op=\"reserve\""), r.st.reserves);
    ck_assert_double_eq(need(&p, "xfer_server_ops_total",
                             "shard=\"0\",op=\"commit\""), r.st.commits);
    ck_assert_double_eq(need(&p, "xfer_server_ops_total",
                             "shard=\"0\",op=\"write\""), r.st.writes);
    ck_assert_double_eq(need(&p, "xfer_server_pool_bytes",
                             "shard=\"0\""), r.st.pool_bytes);
    ck_assert_double_eq(need(&p, "xfer_server_pool_bytes_in_use",
                             "shard=\"0\""), r.st.bytes_in_use);
    ck_assert_double_eq(need(&p, "xfer_server_events_sent_total",
                             "shard=\"0\""), r.st.events_sent);
    ck_assert_double_eq(need(&p, "xfer_server_write_bytes_total",
                             "shard=\"0\""), r.st.write_bytes);
    ck_assert_double_eq(prom_sum(&p, "xfer_server_bad_frames_total", ""),
                        r.st.bad_frames);
    ck_assert_double_eq(need(&p, "xfer_server_bad_frames_total",
                             "reason=\"BAD_MAGIC\""), 1);
    ck_assert_uint_eq(r.st.reserves, N);
    ck_assert_double_eq(need(&p, "xfer_server_phase_seconds_count",
                             "shard=\"0\",phase=\"reserved_to_ready\""), N);
    ck_assert_double_eq(need(&p, "xfer_server_phase_seconds_count",
                             "shard=\"0\",phase=\"taken_to_released\""), N);

    xfer_engine_stats es;
    xfer_engine_stats_get(s.e, &es);
    ck_assert_double_eq(need(&p, "xfer_engine_transfers_total",
                             "outcome=\"ok\""), es.core.succeeded);
    ck_assert_double_eq(need(&p, "xfer_engine_transfer_seconds_count",
                             "outcome=\"ok\""), N);
    ck_assert_double_eq(need(&p, "xfer_engine_cancels_refused_total", ""),
                        es.cancels_refused);
    ck_assert_double_eq(need(&p, "xfer_engine_transfers_abandoned_total",
                             ""), es.abandoned);
    xfer_consumer_stats cs;
    ck_assert_int_eq(xfer_consumer_stats_get(s.cons, &cs), 0);
    ck_assert_double_eq(need(&p, "xfer_consumer_available_total", ""),
                        cs.available);
    ck_assert_double_eq(need(&p, "xfer_consumer_available_total", ""), N);
    ck_assert_double_eq(need(&p, "xfer_consumer_links_up", ""), 2);
    prom_free(&p);
    free(resp);

    resp = http(&s, port, "POST");
    ck_assert_msg(strncmp(resp, "HTTP/1.1 405", 12) == 0, "%.60s", resp);
    free(resp);

    /* The render call alone gives the same families. */
    size_t need_len = xfer_server_metrics(s.srv[1], NULL, 0);
    char *text = malloc(need_len + 1);
    ck_assert_uint_eq(xfer_server_metrics(s.srv[1], text, need_len + 1),
                      need_len);
    ck_assert_msg(prom_parse(text, &p) == 0, "%s", p.err);
    ck_assert_double_eq(need(&p, "xfer_server_ops_total",
                             "shard=\"1\",op=\"reserve\""), N);
    prom_free(&p);
    free(text);
    xfer_metrics_del(m);
    st_stop(&s);
}
END_TEST

/* The parser refuses what a scraper refuses. */
/* Whether a blocking TCP connect to addr:port (numeric, v4 or v6)
 * succeeds: on loopback a port nobody listens on is refused at once. */
static bool connects(int family, const char *addr, uint16_t port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        ck_assert_int_eq(inet_pton(AF_INET, addr, &a->sin_addr), 1);
        len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        ck_assert_int_eq(inet_pton(AF_INET6, addr, &a->sin6_addr), 1);
        len = sizeof *a;
    }
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0)
        return false; /* no such family here: nothing can connect */
    bool ok = connect(fd, (struct sockaddr *)&ss, len) == 0;
    close(fd);
    return ok;
}

/* Issue 30 (tools/mutate survivor transport/metrics.c:456:neg:0): the
 * endpoint listens only on the address it was given.  A listener asked
 * for 127.0.0.1 must not answer on ::1 (a parse that fell through to
 * IPv6 binds "::", every interface, and still answers on 127.0.0.1),
 * and one asked for ::1 must not answer on 127.0.0.1. */
START_TEST(test_metrics_listens_only_where_asked)
{
    struct event_base *base = event_base_new();
    ck_assert_ptr_nonnull(base);
    xfer_metrics_config mc;
    xfer_metrics_config_default(&mc);
    mc.base = base;
    xfer_metrics *m;
    ck_assert_int_eq(xfer_metrics_new(&mc, &m), 0);
    ck_assert_int_eq(xfer_metrics_listen(m, "127.0.0.1", 0), 0);
    uint16_t port = xfer_metrics_port(m);
    ck_assert_uint_ne(port, 0);
    ck_assert(connects(AF_INET, "127.0.0.1", port));
    ck_assert(!connects(AF_INET6, "::1", port));
    xfer_metrics_del(m);

    ck_assert_int_eq(xfer_metrics_new(&mc, &m), 0);
    if (xfer_metrics_listen(m, "::1", 0) == 0) { /* a host with IPv6 */
        port = xfer_metrics_port(m);
        ck_assert(connects(AF_INET6, "::1", port));
        ck_assert(!connects(AF_INET, "127.0.0.1", port));
    }
    xfer_metrics_del(m);
    event_base_free(base);
}
END_TEST

START_TEST(test_metrics_parser_refuses_bad_text)
{
    static const char *const bad[] = {
        "x_total 1\n", /* no HELP/TYPE */
        "# HELP a_total h\n# TYPE a_total counter\na_total -1\n",
        "# HELP a h\n# TYPE a counter\na 1\n", /* counter without _total */
        "# HELP a h\n# TYPE a gauge\na 1\na 2\n", /* duplicate series */
        "# HELP a h\n# TYPE a gauge\n# HELP b h\n# TYPE b gauge\nb 1\na 1\n",
        "# HELP a h\n# TYPE a gauge\na{1x=\"v\"} 1\n",
        "# HELP a h\n# TYPE a gauge\na{k=\"v} 1\n",
        "# HELP a h\n# TYPE a gauge\na one\n",
        "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 5\n"
        "h_bucket{le=\"+Inf\"} 4\nh_sum 1\nh_count 4\n", /* not cumulative */
        "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 4\n"
        "h_bucket{le=\"+Inf\"} 4\nh_count 4\n", /* no _sum */
        "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 4\n"
        "h_bucket{le=\"+Inf\"} 5\nh_sum 1\nh_count 4\n", /* +Inf != count */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        prom p;
        ck_assert_msg(prom_parse(bad[i], &p) != 0, "accepted case %zu", i);
        prom_free(&p);
    }
    prom p;
    ck_assert_int_eq(prom_parse("# HELP h h\n# TYPE h histogram\n"
                                "h_bucket{le=\"1\"} 4\nh_bucket{le=\"+Inf\"} 4"
                                "\nh_sum 1.5\nh_count 4\n", &p), 0);
    prom_free(&p);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("metrics");
    TCase *tc = tcase_create("metrics");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_metrics_endpoint_matches_status);
    tcase_add_test(tc, test_metrics_parser_refuses_bad_text);
    tcase_add_test(tc, test_metrics_listens_only_where_asked);
    suite_add_tcase(su, tc);
    return tu_run(su);
}
