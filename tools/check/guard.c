/*
 * tools/check/guard.c - moves that survive a machine's assertion: a
 * SIGABRT raised inside a move or the liveness phase jumps back here and
 * becomes an ILLEGAL violation of the world, so the search reports it
 * like any other instead of dying.
 *
 * What must stay true: the jump is armed only around one call into the
 * world; an abort anywhere else (the checker's own) still kills the
 * process with SIGABRT.
 */
#include "guard.h"

#include <setjmp.h>
#include <signal.h>
#include <string.h>

#include "monitor.h"
#include "step.h"

/* Per thread: the BFS runs moves on several (abort() signals the
 * thread that called it). */
static _Thread_local sigjmp_buf g_jmp;
static _Thread_local volatile sig_atomic_t g_armed;

static void on_abort(int sig)
{
    (void)sig;
    if (g_armed)
        siglongjmp(g_jmp, 1);
    signal(SIGABRT, SIG_DFL);
    raise(SIGABRT);
}

void ck_guard_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_abort;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_NODEFER;
    sigaction(SIGABRT, &sa, NULL);
}

/* Apply a move; a machine assertion becomes an ILLEGAL violation. */
void ck_guard_apply(ck_world *w, ck_move mv)
{
    if (sigsetjmp(g_jmp, 0) == 0) {
        g_armed = 1;
        ck_step_apply(w, mv);
    } else {
        ck_monitor_fail(w, CK_ILLEGAL, "a machine assertion failed (see the "
                        "message above)");
    }
    g_armed = 0;
}

bool ck_guard_liveness(ck_world *w)
{
    bool ok = false;
    if (sigsetjmp(g_jmp, 0) == 0) {
        g_armed = 1;
        ok = ck_step_liveness(w);
    } else {
        ck_monitor_fail(w, CK_ILLEGAL, "a machine assertion failed in the "
                        "liveness phase (see the message above)");
    }
    g_armed = 0;
    return ok;
}
