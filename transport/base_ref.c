/*
 * transport/base_ref.c - the registry of engine-owned event bases and of
 * the references the objects on them hold (base_ref.h).
 *
 * A short list under one mutex: a process holds a handful of engines that
 * own their base, and the list is walked only at an object's _new and _del.
 * The entry is allocated with libc, not the engine's allocator: it outlives
 * the engine, and the user's allocator is not promised to.
 */
#include "base_ref.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include <event2/event.h>

#include "xfer/errors.h"

typedef struct base_ent {
    struct event_base *base;
    uint64_t refs;
    struct base_ent *next;
} base_ent;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static base_ent *reg_head;

static base_ent **find(struct event_base *base)
{
    base_ent **p = &reg_head;
    while (*p && (*p)->base != base)
        p = &(*p)->next;
    return p;
}

int xfer_base_adopt(struct event_base *base)
{
    base_ent *e = calloc(1, sizeof *e);
    if (!e)
        return XFER_ERR_NOMEM;
    e->base = base;
    e->refs = 1;
    pthread_mutex_lock(&reg_mu);
    e->next = reg_head;
    reg_head = e;
    pthread_mutex_unlock(&reg_mu);
    return 0;
}

void xfer_base_ref(struct event_base *base)
{
    if (!base)
        return;
    pthread_mutex_lock(&reg_mu);
    base_ent *e = *find(base);
    if (e)
        e->refs++;
    pthread_mutex_unlock(&reg_mu);
}

void xfer_base_unref(struct event_base *base)
{
    if (!base)
        return;
    base_ent *gone = NULL;
    pthread_mutex_lock(&reg_mu);
    base_ent **p = find(base);
    if (*p && --(*p)->refs == 0) {
        gone = *p;
        *p = gone->next;
    }
    pthread_mutex_unlock(&reg_mu);
    /* Freed outside the lock: event_base_free runs pending finalizers
     * (bufferevents closed by the last _del), which may call back into
     * us. */
    if (gone) {
        event_base_free(gone->base);
        free(gone);
    }
}
