/*
 * tools/bench/proc.h - the bench's child processes (echo peers, the Python
 * reference) and the CPU that a set of processes spends, read from /proc.
 *
 * Every child dies with the bench (PR_SET_PDEATHSIG) and is killed and
 * reaped by bench_proc_kill_all, which the bench registers with atexit.
 * One thread.
 */
#ifndef XFER_BENCH_PROC_H
#define XFER_BENCH_PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* What one process (all its threads) has used so far. */
typedef struct bench_cpu {
    uint64_t run_ns;      /* on-CPU time, user + kernel, from
                             /proc/PID/task/TID/schedstat (ns exact) */
    uint64_t user_ticks;  /* /proc/PID/stat utime (clock ticks, sampled) */
    uint64_t sys_ticks;   /* /proc/PID/stat stime */
    uint64_t csw;         /* voluntary + involuntary context switches of
                             every thread, /proc/PID/task/TID/status */
    uint64_t rcalls, wcalls; /* read- and write-type syscalls (read, readv,
                                write, writev; not recv/send), /proc/PID/io
                                syscr and syscw */
} bench_cpu;

/* A driver process (the producer, the echo client) and its peers (the
 * shards, the echo processes), sampled together; plus the whole machine. */
typedef struct bench_sample {
    bench_cpu driver, peers;      /* peers: the sum over every peer */
    uint64_t machine_busy_ticks;  /* /proc/stat: every CPU, not idle */
    uint64_t wall_ns;
} bench_sample;

/*
 * Add what pid has used to *acc; pid 0 is the bench itself.  A process
 * that is gone adds nothing.
 */
void bench_proc_cpu(pid_t pid, bench_cpu *acc);

/* Sample driver (0: the bench) and the n peers into *s. */
void bench_proc_sample(pid_t driver, const pid_t *peers, int n,
                       bench_sample *s);

/*
 * Fork a child that runs fn(arg) and _exits with its return value.  The
 * child dies with the bench.  Returns its pid, or -1 (errno set).
 */
pid_t bench_proc_fork(int (*fn)(void *), void *arg);

/*
 * Start argv[0] (a path or a name searched in PATH; argv borrowed) with
 * its stdin and stdout on pipes: *to_child is written, *from_child read
 * (both owned by the caller).  stderr goes to the bench's stderr unless
 * quiet.  Returns the pid, or -1 (errno set; nothing left open).
 */
pid_t bench_proc_spawn(const char *const *argv, bool quiet, int *to_child,
                       int *from_child);

/* SIGKILL and reap one child started by this module (no-op for <= 0). */
void bench_proc_kill(pid_t pid);

/* SIGKILL and reap every child still alive (for atexit). */
void bench_proc_kill_all(void);

#endif /* XFER_BENCH_PROC_H */
