/*
 * tools/trace/members.c - `xfer-trace members --ctl SOCK` and
 * `xfer-trace members --etcd URLS --group G`: a group's members, either as
 * a running process's directory knows them (its control socket, xfer/ctl.h
 * "dir", "member" and "registered" lines: connected or not, the last etcd
 * revision, each member's shard, address, port, transports, epoch and how
 * long it has been known), or as etcd has them now (read through the
 * library's own directory client, xfer/dir.h, so exactly what a producer
 * created from the group name would use).
 *
 * Both are bounded by --timeout (5 s): a process or an etcd that does not
 * answer ends in one line on stderr and exit 3, as `stuck --live` does.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "cli.h"
#include "xfer/dir.h"
#include "xtrace.h"

/* "tcp", "rdma", "tcp+rdma" */
static const char *transports(uint64_t t)
{
    switch (t & (XFER_DIR_TCP | XFER_DIR_RDMA)) {
    case XFER_DIR_TCP:
        return "tcp";
    case XFER_DIR_RDMA:
        return "rdma";
    case XFER_DIR_TCP | XFER_DIR_RDMA:
        return "tcp+rdma";
    default:
        return "none";
    }
}

/* One member or registered line of a snapshot, printed; -1 if malformed. */
static int print_entry(const char *line, const char *what)
{
    char group[XFER_DIR_GROUP_MAX], addr[XFER_DIR_ADDR_MAX], age[32];
    uint64_t shard, port, epoch, tr, age_ns;
    if (!xt_json_str(line, "group", group, sizeof group) ||
        !xt_json_str(line, "addr", addr, sizeof addr) ||
        !xt_json_u64(line, "shard", &shard) ||
        !xt_json_u64(line, "port", &port) ||
        !xt_json_u64(line, "epoch", &epoch) ||
        !xt_json_u64(line, "transports", &tr) ||
        !xt_json_u64(line, "age_ns", &age_ns))
        return -1;
    xt_fmt_dur(age, sizeof age, age_ns);
    printf("%s %s shard %" PRIu64 " %s:%" PRIu64 " %s epoch %" PRIu64
           " for %s\n",
           what, group, shard, addr, port, transports(tr), epoch, age);
    return 0;
}

static int print_dir(const char *line)
{
    uint64_t conn, ep, members, regd, reqs, fails, recon, wto;
    int64_t rev;
    if (!xt_json_u64(line, "connected", &conn) ||
        !xt_json_u64(line, "endpoint", &ep) ||
        !xt_json_i64(line, "revision", &rev) ||
        !xt_json_u64(line, "members", &members) ||
        !xt_json_u64(line, "registered", &regd) ||
        !xt_json_u64(line, "requests", &reqs) ||
        !xt_json_u64(line, "failures", &fails) ||
        !xt_json_u64(line, "reconnects", &recon) ||
        !xt_json_u64(line, "watch_timeouts", &wto))
        return -1;
    printf("directory: %s (endpoint %" PRIu64 "), revision %" PRId64
           ", %" PRIu64 " member%s known, %" PRIu64 " registered\n",
           conn ? "connected to etcd"
                : "DISCONNECTED from etcd (the last known members stay "
                  "in force)",
           ep, rev, members, members == 1 ? "" : "s", regd);
    printf("directory: %" PRIu64 " requests, %" PRIu64 " failed, %" PRIu64
           " reconnects, %" PRIu64 " watch timeouts\n",
           reqs, fails, recon, wto);
    return 0;
}

static int members_ctl(const char *sock, uint64_t timeout)
{
    char *text = xt_read_socket(sock, timeout);
    if (!text)
        return XT_BADINPUT;
    bool header = false, end = false, dir = false;
    int rc = 0;
    for (char *line = strtok(text, "\n"); line && rc == 0;
         line = strtok(NULL, "\n")) {
        char kind[32];
        uint64_t v;
        if (xt_json_u64(line, "xfer_ctl", &v)) {
            header = v == 1;
            continue;
        }
        if (!xt_json_str(line, "kind", kind, sizeof kind))
            rc = -1;
        else if (strcmp(kind, "dir") == 0)
            rc = print_dir(line), dir = true;
        else if (strcmp(kind, "member") == 0)
            rc = print_entry(line, "group");
        else if (strcmp(kind, "registered") == 0)
            rc = print_entry(line, "registered");
        else if (strcmp(kind, "end") == 0)
            end = true;
    }
    free(text);
    if (rc || !header || !end) {
        fprintf(stderr, "xfer-trace: %s: malformed snapshot\n", sock);
        return XT_BADINPUT;
    }
    if (!dir) {
        fprintf(stderr, "xfer-trace: %s: this process has no directory "
                "(xfer_ctl_set_dir; xferd --etcd)\n", sock);
        return XT_BADINPUT;
    }
    return XT_OK;
}

static void on_member(void *ud, const char *group, uint16_t shard,
                      const xfer_dir_entry *e)
{
    (void)ud;
    (void)group;
    (void)shard;
    (void)e;
}

static void on_log(void *ud, const char *line)
{
    (void)ud;
    fprintf(stderr, "xfer-trace: %s\n", line);
}

typedef struct etcd_opts {
    const char *urls, *group, *prefix, *ca, *user, *password_file;
} etcd_opts;

/* The group as etcd has it now: one read (the watch's first range), then
 * exit.  Bounded by `timeout`. */
static int members_etcd(const etcd_opts *o, uint64_t timeout)
{
    char password[256] = "";
    if (o->password_file) {
        FILE *f = fopen(o->password_file, "r");
        bool ok = f && fgets(password, sizeof password, f);
        if (f)
            fclose(f);
        if (!ok)
            return xt_usage("cannot read --etcd-password-file '%s'",
                            o->password_file);
        password[strcspn(password, "\r\n")] = '\0';
    }
    struct event_base *base = event_base_new();
    xfer_dir_config dc;
    xfer_dir_config_default(&dc);
    dc.endpoints = o->urls;
    if (o->prefix)
        dc.prefix = o->prefix;
    dc.ca_file = o->ca;
    dc.user = o->user;
    dc.password = o->password_file ? password : NULL;
    /* Several endpoints are tried in turn within the timeout. */
    dc.request_timeout_ns = timeout / 2 ? timeout / 2 : 1;
    dc.log = on_log;
    xfer_dir *dir = NULL;
    int rc = base ? xfer_dir_new(base, &dc, &dir) : XFER_ERR_NOMEM;
    if (rc) {
        fprintf(stderr, "xfer-trace: --etcd %s: %s\n", o->urls,
                xfer_strerror(rc));
        if (base)
            event_base_free(base);
        return rc == XFER_ERR_INVALID_ARG ? XT_USAGE : XT_BADINPUT;
    }
    rc = xfer_dir_watch(dir, o->group, on_member, NULL);
    xfer_dir_state st = {0};
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t spent = 0;
    while (rc == 0 && st.revision == 0 && spent < timeout) {
        struct timeval tv = {0, 20000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
        xfer_dir_state_get(dir, &st);
        clock_gettime(CLOCK_MONOTONIC, &t);
        spent = (uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000ull +
                (uint64_t)t.tv_nsec - (uint64_t)t0.tv_nsec;
    }
    int status = XT_BADINPUT;
    if (rc) {
        fprintf(stderr, "xfer-trace: --group %s: %s\n", o->group,
                xfer_strerror(rc));
        status = XT_USAGE;
        goto out;
    }
    if (st.revision == 0) {
        char d[32];
        xt_fmt_dur(d, sizeof d, timeout);
        fprintf(stderr, "xfer-trace: etcd at %s did not answer within %s\n",
                o->urls, d);
        goto out;
    }
    printf("group %s (hello group %" PRIu32 ") at etcd revision %" PRId64
           ": %" PRIu32 " member%s\n",
           o->group, xfer_dir_group_id(o->group), st.revision, st.members,
           st.members == 1 ? "" : "s");
    for (uint16_t k = 0; k < 64; k++) {
        xfer_dir_entry e;
        if (xfer_dir_member(dir, o->group, k, &e) == 0)
            printf("group %s shard %u %s:%u %s epoch %" PRIu64 "\n", o->group,
                   (unsigned)k, e.addr, (unsigned)e.port,
                   transports(e.transports), e.epoch);
    }
    status = XT_OK;
out:
    xfer_dir_del(dir);
    event_base_free(base);
    return status;
}

static const cli_flag members_flags[] = {
    {"ctl", 0, "SOCK",
     "ask a running producer, consumer or xferd on its control socket", 1},
    {"etcd", 0, "URLS", "read etcd directly: http(s)://host:port,...", 2},
    {"group", 0, "G", "--etcd: the group to list", 3},
    {"prefix", 0, "P", "--etcd: the key prefix (/xfer/groups/)", 4},
    {"etcd-ca", 0, "PATH", "--etcd: CA file for https endpoints", 5},
    {"etcd-user", 0, "USER", "--etcd: etcd user", 6},
    {"etcd-password-file", 0, "PATH",
     "--etcd: etcd password (the file's first line)", 7},
    {"timeout", 0, "D", "give up after D without a whole answer (5s)", 8},
    CLI_HELP,
    {NULL, 0, NULL, NULL, 0}};
static const cli members_cli = {
    .prog = "xfer-trace members",
    .synopsis = "--ctl SOCK | --etcd URLS --group G [--timeout D]",
    .intro = "a group's members: as a running process's directory knows "
             "them (connected or\nnot, last revision, each member's shard, "
             "address, port, transports, epoch\nand age), or as etcd has "
             "them now\n",
    .flags = members_flags};

int xt_cmd_members(int argc, char **argv)
{
    const char *sock = NULL, *arg;
    etcd_opts o = {0};
    uint64_t timeout = 5000000000ull;
    int k;
    while ((k = cli_next(&members_cli, argc, argv, &arg)) != CLI_END) {
        if (k == CLI_ERR)
            return XT_USAGE;
        if (k == 1)
            sock = arg;
        else if (k == 2)
            o.urls = arg;
        else if (k == 3)
            o.group = arg;
        else if (k == 4)
            o.prefix = arg;
        else if (k == 5)
            o.ca = arg;
        else if (k == 6)
            o.user = arg;
        else if (k == 7)
            o.password_file = arg;
        else if (k == 8 && (!xt_parse_dur(arg, &timeout) || !timeout))
            return xt_usage("bad duration '%s' for --timeout", arg);
    }
    if (optind < argc)
        return xt_usage("unexpected operand '%s'", argv[optind]);
    if (!sock == !o.urls)
        return xt_usage("%s", "members takes --ctl SOCK or --etcd URLS");
    if (o.urls && !o.group)
        return xt_usage("%s", "members --etcd needs --group G");
    return sock ? members_ctl(sock, timeout) : members_etcd(&o, timeout);
}
