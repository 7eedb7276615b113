/*
 * tools/check/path.c - paths through the world: the move index chosen in
 * each state, and running one on a fresh world (to replay a choices file,
 * to print a counterexample with a tracer, to try a shrunk walk).
 *
 * What must stay true: a path names moves by their index among the moves
 * of the state (step.c orders them by the state alone), so running the
 * same path on the same configuration takes the same steps.
 */
#include "path.h"

#include <stdlib.h>
#include <string.h>

#include "describe.h"
#include "guard.h"
#include "step.h"

void ck_path_push(ck_path *p, uint16_t c)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->c = realloc(p->c, p->cap * sizeof *p->c);
        if (!p->c)
            abort();
    }
    p->c[p->n++] = c;
}

void ck_path_free(ck_path *p)
{
    free(p->c);
    memset(p, 0, sizeof *p);
}

int ck_path_run(const ck_config *cfg, const ck_path *p, const ck_tracer *tr,
                ck_violation *v, uint64_t *out_hash, bool modulo)
{
    static ck_world w;
    ck_guard_install();
    if (ck_world_init(&w, cfg, tr))
        return CK_ILLEGAL;
    ck_move mv[CK_MAX_MOVES];
    bool ended = false;
    for (size_t i = 0; i < p->n && w.v.inv < 0; i++) {
        unsigned n = ck_step_moves(&w, mv);
        unsigned c = p->c[i];
        if (n == 0 || (!modulo && c >= n)) {
            ended = true;
            break;
        }
        c %= n;
        if (tr && tr->action) {
            char buf[256];
            ck_describe_move(&w, mv[c], buf, sizeof buf);
            tr->action(tr->ud, buf);
        }
        ck_guard_apply(&w, mv[c]);
    }
    if (w.v.inv < 0 && (p->liveness || ended))
        ck_guard_liveness(&w);
    *v = w.v;
    *out_hash = w.out_hash;
    ck_world_free(&w);
    return v->inv;
}
