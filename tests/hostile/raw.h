/*
 * tests/hostile/raw.h - what the hostile tests (test_hostile.c,
 * test_quotas.c, test_host.c) share: one request at a time over a raw
 * socket to xferd, and a daemon's CPU time and memory from /proc.
 */
#ifndef XFER_TEST_HOSTILE_RAW_H
#define XFER_TEST_HOSTILE_RAW_H

#include <stdint.h>
#include <sys/types.h>

#include "wire.h" /* wire_private_dep: xfer_wire_msg */

/* The next request id of hr_call (a test that frames requests itself
 * takes its ids from here too, so they never repeat). */
extern uint32_t hr_req;

/* Send m (and data), read the reply; the reply must answer it. */
xfer_wire_msg hr_call(int fd, const xfer_wire_msg *m, const void *data);
/* An ERROR's code, else 0. */
int32_t hr_code_of(const xfer_wire_msg *r);
/* RESERVE id (attempt 1) of len bytes; the reply. */
xfer_wire_msg hr_reserve(int fd, uint64_t id, uint32_t len);
/* A request of `type` naming (id, attempt, resv); its code. */
int32_t hr_op(int fd, uint8_t type, uint64_t id, uint32_t attempt,
              uint64_t resv);
/* The process's user + system CPU seconds, and its VmRSS in KiB. */
double hr_cpu_s(pid_t pid);
long hr_rss_kib(pid_t pid);

#endif
