/*
 * transport/dir_int.h - the directory client's pieces shared between
 * dir.c (HTTP to etcd's v3 JSON gateway, endpoints, auth, registration)
 * and dir_watch.c (watched groups, entry validation).
 */
#ifndef XFER_TRANSPORT_DIR_INT_H
#define XFER_TRANSPORT_DIR_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backoff.h"
#include "xfer/dir.h"

struct event;
struct evhttp_connection;
struct evhttp_request;
struct json_object;
struct json_tokener;

#define DIR_MAX_EPS 8
#define DIR_MAX_REGS 64
#define DIR_MAX_WATCHES 16
#define DIR_MAX_SHARDS 64
#define DIR_PREFIX_MAX 129
#define DIR_KEY_MAX (DIR_PREFIX_MAX + XFER_DIR_GROUP_MAX + 8)
#define DIR_VALUE_MAX 1024      /* a member's JSON value, bytes */
#define DIR_MSG_MAX (1u << 20)  /* one watch message, bytes */
#define DIR_TOKEN_MAX 512
#define DIR_MAX_LOGGED 256      /* ignored entries remembered as logged */

typedef struct dir_ep {
    char host[256];
    uint16_t port;
    bool tls;
} dir_ep;

/* A unary request in flight: freed by its completion or by xfer_dir_del. */
typedef void (*dir_reply_fn)(struct xfer_dir *d, struct json_object *resp,
                             void *arg);
typedef struct dir_req {
    struct xfer_dir *d;
    dir_reply_fn fn; /* resp NULL: failed (network, HTTP status) */
    void *arg;
    struct dir_req *prev, *next;
} dir_req;

typedef struct dir_reg {
    char key[DIR_KEY_MAX];
    char value[DIR_VALUE_MAX];
    bool put;          /* put under the current lease */
    char group[XFER_DIR_GROUP_MAX]; /* for listings (ctl) */
    xfer_dir_entry e;
    uint64_t since_ns; /* when xfer_dir_register was called */
} dir_reg;

typedef struct dir_watch {
    struct xfer_dir *d;
    char group[XFER_DIR_GROUP_MAX];
    char prefix[DIR_KEY_MAX];   /* <prefix><group>/ */
    xfer_dir_member_fn fn;
    void *ud;
    xfer_dir_entry members[DIR_MAX_SHARDS];
    uint64_t since[DIR_MAX_SHARDS]; /* when members[k] was learned */
    uint64_t have;              /* bit k: members[k] valid */
    uint64_t epoch[DIR_MAX_SHARDS]; /* highest epoch seen per shard */
    struct evhttp_connection *conn; /* the stream's own connection */
    struct evhttp_request *req;
    struct json_tokener *tok;
    size_t msg_bytes;           /* bytes since the last whole message */
    struct event *retry_ev;
    struct event *idle_ev;      /* the stream's read timeout */
    xfer_backoff bo;
    bool streaming;             /* the watch was created */
    int64_t rev;                /* the group's last revision seen */
} dir_watch;

struct xfer_dir {
    struct event_base *base;
    xfer_dir_config cfg;        /* strings point into the copies below */
    char *endpoints, *prefix, *user, *password, *ca, *cert, *key;
    dir_ep eps[DIR_MAX_EPS];
    uint32_t neps, ep;
    struct evhttp_connection *conn[DIR_MAX_EPS]; /* unary requests */
    void *ssl_ctx;              /* SSL_CTX * for https endpoints */
    char token[DIR_TOKEN_MAX];  /* auth token; "" none yet */
    bool authing;
    dir_req *reqs;              /* in flight */
    xfer_backoff bo;
    /* Registration: one lease for every entry of this directory. */
    dir_reg regs[DIR_MAX_REGS];
    uint32_t nregs;
    int64_t lease;              /* 0: none granted */
    bool reg_busy;              /* a grant, put or keepalive in flight */
    struct event *reg_ev;       /* next keepalive or retry */
    bool unregistering;
    uint32_t unreg_left;
    bool unreg_ok;
    xfer_dir_done_fn unreg_done;
    void *unreg_ud;
    struct event *done_ev;      /* defers unreg_done onto the loop */
    dir_watch *watches[DIR_MAX_WATCHES];
    uint32_t nwatches;
    /* Ignored entries already logged (a hash of group, key and why): a
     * group read again after a lost or silent stream does not log them
     * again.  Full: one line says so, and later ones are only counted. */
    uint64_t logged[DIR_MAX_LOGGED];
    uint32_t nlogged;
    xfer_dir_state st;
};

/* dir.c, for dir_watch.c. */
int xfer_dir_post(struct xfer_dir *d, const char *path,
                  struct json_object *body, dir_reply_fn fn, void *arg);
/* In-flight requests whose argument is `arg` complete into nothing. */
void xfer_dir_forget_arg(struct xfer_dir *d, void *arg);
/* A fresh connection to the current endpoint (TLS when it says https). */
struct evhttp_connection *xfer_dir_connect(struct xfer_dir *d);
/* True while a token must first be fetched (then retry later). */
bool xfer_dir_need_auth(struct xfer_dir *d);
void xfer_dir_add_auth(struct xfer_dir *d, struct evhttp_request *req);
void xfer_dir_logf(struct xfer_dir *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The endpoint in use failed: the next one is tried from now on. */
void xfer_dir_failover(struct xfer_dir *d);
char *xfer_dir_b64(const void *src, size_t n);   /* malloc'd, NUL-ended */
int xfer_dir_unb64(const char *s, char *out, size_t cap, size_t *len);
bool xfer_dir_i64(struct json_object *o, const char *field, int64_t *v);
uint64_t xfer_dir_now(void);

/* dir_watch.c, for dir.c. */
void xfer_dir_watch_free(dir_watch *w);
int xfer_dir_group_ok(const char *group);
/* A member's JSON value; 0 or XFER_ERR_INVALID_ARG. */
int xfer_dir_entry_json(const xfer_dir_entry *e, char *out, size_t cap);

#endif
