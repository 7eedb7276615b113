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
 * shim answers DUMP_SIG by exit(), which writes its counters, and its own
 * destructor then raises SIGKILL on itself, so the parent still sees a
 * death by SIGKILL.  Only the harness's coverage runs use it; the mutants
 * run without it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define DUMP_SIG (SIGRTMIN + 5)

static volatile sig_atomic_t dumping;

static void on_dump(int sig)
{
    (void)sig;
    dumping = 1;
    exit(0); /* runs the gcov destructors; ours (below) then dies */
}

__attribute__((constructor)) static void covshim_init(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_dump;
    sigaction(DUMP_SIG, &sa, NULL);
}

/* The last destructor to run (the preloaded object is finalised after the
 * program and libxfer): a dump-requested exit ends as a SIGKILL death. */
__attribute__((destructor)) static void covshim_fini(void)
{
    if (dumping) {
        signal(SIGKILL, SIG_DFL);
        raise(SIGKILL);
    }
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

int kill(pid_t pid, int sig)
{
    static int (*real)(pid_t, int);
    if (!real)
        real = (int (*)(pid_t, int))dlsym(RTLD_NEXT, "kill");
    if (sig == SIGKILL && pid > 0 && pid != getpid() &&
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
