/*
 * tools/bench/proc.c - child processes of the bench and the CPU they use.
 * See proc.h.
 *
 * CPU comes from /proc, read between two points of a run: schedstat gives
 * each thread's time on a CPU in ns (user and kernel together, including
 * the softirq work of loopback TCP that runs in the process's context:
 * this kernel has no separate IRQ time accounting), stat gives the
 * user/kernel split in clock ticks, status the context switches, io the
 * read and write syscalls.
 *
 * What must stay true: no child outlives the bench (PR_SET_PDEATHSIG, set
 * before exec, and a check that the parent did not die before it), and
 * every child forked here is reaped by bench_proc_kill_all.
 */
#define _GNU_SOURCE /* pipe2 */
#include "proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "xfer/xfer.h"

#define MAX_KIDS 32

static pid_t kids[MAX_KIDS];

/* ---------------------------------------------------------------------- */
/* /proc                                                                   */
/* ---------------------------------------------------------------------- */

static size_t read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, cap - 1) : -1;
    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return n > 0 ? (size_t)n : 0;
}

static uint64_t field_after(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

/* One thread: its run time and context switches. */
static void add_task(const char *dir, bench_cpu *acc)
{
    char path[400], buf[2048];
    snprintf(path, sizeof path, "%s/schedstat", dir);
    if (read_small(path, buf, sizeof buf))
        acc->run_ns += strtoull(buf, NULL, 10);
    snprintf(path, sizeof path, "%s/status", dir);
    if (read_small(path, buf, sizeof buf))
        acc->csw += field_after(buf, "\nvoluntary_ctxt_switches:") +
                    field_after(buf, "\nnonvoluntary_ctxt_switches:");
}

/* utime and stime of the whole process: fields 14 and 15 of stat, counted
 * after the command name (which may hold spaces and parentheses). */
static void add_ticks(const char *dir, bench_cpu *acc)
{
    char path[300], buf[2048];
    snprintf(path, sizeof path, "%s/stat", dir);
    if (!read_small(path, buf, sizeof buf))
        return;
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 14; field++)
        p = strchr(p + 1, ' ');
    if (!p)
        return;
    char *end;
    acc->user_ticks += strtoull(p + 1, &end, 10);
    acc->sys_ticks += strtoull(end, NULL, 10);
}

/* Read and write syscalls of the whole process. */
static void add_io(const char *dir, bench_cpu *acc)
{
    char path[300], buf[1024];
    snprintf(path, sizeof path, "%s/io", dir);
    if (!read_small(path, buf, sizeof buf))
        return;
    acc->rcalls += field_after(buf, "syscr:");
    acc->wcalls += field_after(buf, "syscw:");
}

void bench_proc_cpu(pid_t pid, bench_cpu *acc)
{
    char dir[64], tdir[340];
    if (pid > 0)
        snprintf(dir, sizeof dir, "/proc/%d", (int)pid);
    else
        snprintf(dir, sizeof dir, "/proc/self");
    add_ticks(dir, acc);
    add_io(dir, acc);
    snprintf(tdir, sizeof tdir, "%s/task", dir);
    DIR *d = opendir(tdir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(tdir, sizeof tdir, "%s/task/%s", dir, e->d_name);
        add_task(tdir, acc);
    }
    closedir(d);
}

/* Every CPU's busy ticks: user, nice, system, irq, softirq, steal. */
static uint64_t machine_busy(void)
{
    char buf[512];
    unsigned long long v[8] = {0};
    if (!read_small("/proc/stat", buf, sizeof buf) ||
        sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
               &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
        return 0;
    return v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
}

void bench_proc_sample(pid_t driver, const pid_t *peers, int n,
                       bench_sample *s)
{
    *s = (bench_sample){0};
    bench_proc_cpu(driver, &s->driver);
    for (int i = 0; i < n; i++)
        bench_proc_cpu(peers[i], &s->peers);
    s->machine_busy_ticks = machine_busy();
    s->wall_ns = xfer_clock_monotonic(NULL);
}

/* ---------------------------------------------------------------------- */
/* Children                                                                */
/* ---------------------------------------------------------------------- */

static void remember(pid_t pid)
{
    for (int i = 0; i < MAX_KIDS; i++)
        if (kids[i] <= 0) {
            kids[i] = pid;
            return;
        }
}

/* In a fresh child: die with the parent (or now, if it already died). */
static void tie_to(pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
}

pid_t bench_proc_fork(int (*fn)(void *), void *arg)
{
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        tie_to(parent);
        _exit(fn(arg));
    }
    if (pid > 0)
        remember(pid);
    return pid;
}

pid_t bench_proc_spawn(const char *const *argv, bool quiet, int *to_child,
                       int *from_child)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        tie_to(parent);
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        int null = quiet ? open("/dev/null", O_WRONLY) : -1;
        if (null >= 0)
            dup2(null, STDERR_FILENO);
        execvp(argv[0], (char *const *)argv);
        dprintf(STDERR_FILENO, "cannot run %s: %s\n", argv[0],
                strerror(errno));
        _exit(127);
    }
    int saved = errno;
    close(in[0]);
    close(out[1]);
    if (pid < 0) {
        close(in[1]);
        close(out[0]);
        errno = saved;
        return -1;
    }
    remember(pid);
    *to_child = in[1];
    *from_child = out[0];
    return pid;
}

void bench_proc_kill(pid_t pid)
{
    if (pid <= 0)
        return;
    for (int i = 0; i < MAX_KIDS; i++)
        if (kids[i] == pid) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            kids[i] = 0;
        }
}

void bench_proc_kill_all(void)
{
    for (int i = 0; i < MAX_KIDS; i++)
        bench_proc_kill(kids[i]);
}
