/*
 * tools/check/net.c - the messages in flight, kept as a sorted multiset.
 *
 * Sorting (bytewise, every padding byte zero) makes the order of messages,
 * and so the numbering of the moves that deliver them, a function of the
 * state alone: the same state always offers the same moves in the same
 * order, which replay and counterexample reconstruction rely on.  The
 * --rdma mode's live rkeys (MK_RKEY) are entries here too, with no
 * delivery deadline; they sort last.
 */
#include <string.h>

#include "net.h"

#include "monitor.h"

void ck_net_push(ck_world *w, const ck_msg *m)
{
    if (w->env.nmsg >= CK_MAX_MSG) {
        ck_monitor_fail(w, CK_I11, "more than %u messages in flight",
                        (unsigned)CK_MAX_MSG);
        return;
    }
    w->msg[w->env.nmsg] = *m;
    w->msg[w->env.nmsg].rsv = 0; /* *m may be a local whose hole is junk */
    if (m->kind == MK_RKEY)
        w->msg[w->env.nmsg].sent_at = 0; /* not a message: no deadline */
    else if (!(m->flags & MF_BEGUN))
        w->msg[w->env.nmsg].sent_at = w->env.now;
    w->env.nmsg++;
}

/* The latest time the clock may reach: every message in flight must be
 * delivered within max_delay of being sent (the deployment assumption that
 * tombstones outlive every message still in flight). */
uint64_t ck_net_horizon(const ck_world *w)
{
    uint64_t h = UINT64_MAX;
    for (unsigned i = 0; i < w->env.nmsg; i++)
        if (w->msg[i].kind != MK_RKEY &&
            w->msg[i].sent_at + w->cfg->max_delay < h)
            h = w->msg[i].sent_at + w->cfg->max_delay;
    return h;
}

unsigned ck_net_pending(const ck_world *w)
{
    unsigned n = w->env.nmsg;
    while (n > 0 && w->msg[n - 1].kind == MK_RKEY)
        n--; /* they sort last (kind is the first byte) */
    return n;
}

void ck_net_remove(ck_world *w, unsigned i)
{
    if (i >= w->env.nmsg)
        return;
    memmove(&w->msg[i], &w->msg[i + 1],
            (w->env.nmsg - i - 1) * sizeof w->msg[0]);
    w->env.nmsg--;
}

void ck_net_sort(ck_world *w)
{
    for (unsigned i = 1; i < w->env.nmsg; i++) {
        ck_msg m = w->msg[i];
        unsigned j = i;
        while (j > 0 && memcmp(&w->msg[j - 1], &m, sizeof m) > 0) {
            w->msg[j] = w->msg[j - 1];
            j--;
        }
        w->msg[j] = m;
    }
}
