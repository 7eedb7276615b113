/*
 * tests/multiproc/etcd.h - a real etcd (Debian's etcd-server) for the
 * directory tests: one member or a cluster of up to 3 on free loopback
 * ports, data in a temporary folder, killed with the test (the children
 * are tracked by mp.c's sweep and die with their parent).
 */
#ifndef XFER_TEST_ETCD_H
#define XFER_TEST_ETCD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define ETCD_MAX_MEMBERS 3

typedef struct etcd_member {
    pid_t pid;
    uint16_t client_port, peer_port;
    char name[16];
} etcd_member;

typedef struct etcd_cluster {
    int n;
    etcd_member m[ETCD_MAX_MEMBERS];
    char dir[128];        /* the temporary folder */
    char endpoints[256];  /* "http://127.0.0.1:P,..." */
    char tls_ca[160];     /* etcd_start_tls: the CA that signed etcd's
                             certificate; "" plain HTTP */
} etcd_cluster;

/* The etcd binary ($ETCD, else etcd on PATH), or NULL when there is none
 * (the tests then exit 77, skipped). */
const char *etcd_binary(void);
/* For a test program's main: 0 when there is an etcd binary; else one
 * line on stderr naming `prog`, and the exit status to leave with: 77
 * (skipped), or 1 where $CI is set (CI installs etcd-server). */
int etcd_required(const char *prog);
/* Start n members and wait until each answers.  Returns 0. */
int etcd_start(etcd_cluster *c, int n);
/* One member serving clients over TLS (https), with a CA and a server
 * certificate for 127.0.0.1 made by the openssl command in its folder
 * (c->tls_ca).  etcd_post does not speak TLS: only the library's client
 * is used against it.  Returns 0, or -1 (no openssl, no etcd). */
int etcd_start_tls(etcd_cluster *c);
/* Stop member i with `sig` (SIGKILL, SIGSTOP...) and reap when it died. */
void etcd_signal(etcd_cluster *c, int i, int sig);
/* Start member i again on its ports and data (after SIGKILL). */
int etcd_restart(etcd_cluster *c, int i);
/* Wait until member i answers /health (timeout_ms).  Returns 0. */
int etcd_wait_up(const etcd_cluster *c, int i, int timeout_ms);
/* Kill every member and remove the folder. */
void etcd_stop(etcd_cluster *c);
/* A blocking HTTP POST of `body` to `path` on member i; the response body
 * into out (cap).  Returns the HTTP status, or -1. */
int etcd_post(const etcd_cluster *c, int i, const char *path,
              const char *body, char *out, size_t cap);
/* Put key=value (plain strings, base64-encoded here) through member i. */
int etcd_put(const etcd_cluster *c, int i, const char *key,
             const char *value);

#endif
