/* tools/mutate/covshim.c - LD_PRELOAD shim for the coverage map's test runs.
 *
 * gcov writes a process's counters when it exits normally; a process that
 * dies by SIGKILL writes nothing.  The tests kill xferd and other children
 * with SIGKILL (mp_kill, mp_kill_all, the python fixtures), so without help
 * the map would miss every line only a killed daemon ran, and selection
 * would skip tests that can see a mutant.  This shim, preloaded into every
 * process of a test run (the environment is inherited), turns
 * kill(pid, SIGKILL) into: send DUMP_SIG, wait (at most 3 s) until the
 * target is gone or a zombie, then send the SIGKILL.  A process with the
 * shim answers DUMP_SIG by running every loaded object's destructors
 * (gcov's dump is one; exit() would run the shim's own destructor before
 * libxfer.so's) and raising SIGKILL on itself, so the parent still sees a
 * death by SIGKILL.  Only the harness's coverage runs use it; the mutants
 * run without it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define DUMP_SIG (SIGRTMIN + 5)

typedef void (*fini_fn)(void);

/* Run the .fini_array of one loaded object (the program, libxfer.so, the
 * python extension...): gcov's dump of that object's counters is one of
 * them.  libc, the loader and this shim are left alone. */
static int fini_one(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    if (strstr(name, "libc.so") || strstr(name, "ld-linux") ||
        strstr(name, "linux-vdso") || strstr(name, "covshim"))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
            continue;
        const ElfW(Dyn) *d =
            (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        ElfW(Addr) arr = 0;
        size_t bytes = 0;
        for (; d->d_tag != DT_NULL; d++) {
            if (d->d_tag == DT_FINI_ARRAY)
                arr = d->d_un.d_ptr;
            else if (d->d_tag == DT_FINI_ARRAYSZ)
                bytes = d->d_un.d_val;
        }
        if (!arr)
            continue;
        fini_fn *f = (fini_fn *)(info->dlpi_addr + arr);
        for (size_t k = bytes / sizeof *f; k > 0; k--)
            if (f[k - 1] && f[k - 1] != (fini_fn)-1)
                f[k - 1]();
    }
    return 0;
}

/* Write every object's counters, then die as the SIGKILL would have (the
 * parent sees the same wait status). */
static pid_t image_pid; /* the pid that loaded this image (exec) */

/* A child forked without exec (a copy of a test process, killed or ending
 * in _exit) writes no counters: running a copy's destructors from a signal
 * handler broke tests (test_kill, killall).  Say so in $COVSHIM_LOG, and
 * the harness always runs that test (its map may miss lines). */
static void note_lost(const char *why)
{
    const char *log = getenv("COVSHIM_LOG");
    if (!log)
        return;
    FILE *f = fopen(log, "a");
    if (f) {
        fprintf(f, "%s %d\n", why, (int)getpid());
        fclose(f);
    }
}

static void on_dump(int sig)
{
    (void)sig;
    if (getpid() == image_pid)
        dl_iterate_phdr(fini_one, NULL);
    else
        note_lost("killed-fork-child");
    signal(SIGKILL, SIG_DFL);
    raise(SIGKILL);
}

void _exit(int status)
{
    static void (*real)(int);
    if (!real)
        real = (void (*)(int))dlsym(RTLD_NEXT, "_exit");
    note_lost("_exit");
    real(status);
    for (;;)
        ;
}

__attribute__((constructor)) static void covshim_init(void)
{
    image_pid = getpid();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_dump;
    sigaction(DUMP_SIG, &sa, NULL);
}

/* 'Z', 'X', 0 (gone) or the state letter of /proc/PID/stat. */
static char state_of(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return (p && p[1] == ' ') ? p[2] : 0;
}

/* Whether pid maps an object of the coverage build (other than this
 * shim): only such a process has counters to write, and answers DUMP_SIG
 * by writing them.  Another one, etcd (a Go binary the tests start and
 * SIGKILL, which loads the shim too but whose runtime takes DUMP_SIG
 * over), would ignore it, and the kill would wait out its 3 s: with the
 * test's loop stopped that long, a directory lease ran out while etcd
 * still lived (test_dir_etcd_down failed), or a test ran past its
 * timeout (tests/api's directory tests).  The build is the directory
 * above $COVSHIM_LOG's (BUILD/mutate-covshim/lost.log). */
static bool instrumented(pid_t pid)
{
    const char *log = getenv("COVSHIM_LOG");
    const char *cut = log ? strstr(log, "/mutate-covshim/") : NULL;
    if (!cut)
        return true; /* no build named: as before, ask every process */
    char build[512], path[64], line[1024];
    size_t n = (size_t)(cut - log) + 1; /* with its '/' */
    if (n >= sizeof build)
        return true;
    memcpy(build, log, n);
    build[n] = '\0';
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, build) != NULL && !strstr(line, "covshim");
    fclose(f);
    return found;
}

int kill(pid_t pid, int sig)
{
    static int (*real)(pid_t, int);
    if (!real)
        real = (int (*)(pid_t, int))dlsym(RTLD_NEXT, "kill");
    if (sig == SIGKILL && pid > 0 && pid != getpid() && instrumented(pid) &&
        real(pid, DUMP_SIG) == 0) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        for (int i = 0; i < 300; i++) {
            char s = state_of(pid);
            if (s == 0 || s == 'Z' || s == 'X')
                break;
            nanosleep(&ts, NULL);
        }
    }
    return real(pid, sig);
}
