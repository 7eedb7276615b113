/*
 * tools/bench/etcd_run.h - one etcd member (Debian's etcd-server, `etcd`
 * on PATH) for the benchmarks that run through the directory: on free
 * loopback ports, its data in a temporary folder, killed and removed at
 * exit (atexit) or when we die (PR_SET_PDEATHSIG).  One per process.
 */
#ifndef XFER_BENCH_ETCD_RUN_H
#define XFER_BENCH_ETCD_RUN_H

#include <stddef.h>

/*
 * Start it and wait (at most 10 s) until its client port accepts; its
 * client URL ("http://127.0.0.1:P") into url (cap bytes).  Returns 0, or
 * -1 with one line in err (errcap bytes): no etcd on PATH, no temporary
 * folder, a fork that failed, or an etcd that never listened.
 */
int bench_etcd_start(char *url, size_t cap, char *err, size_t errcap);

#endif
