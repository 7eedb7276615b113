/*
 * fsm/list.h - the one intrusive list of xfer: a doubly linked FIFO whose
 * links live inside the items (an xfer_list_node member), so putting an
 * item on a list or taking it off never allocates and never fails, and an
 * item can leave from the middle in O(1).
 *
 * An item may sit on several lists at once through several nodes;
 * XFER_LIST_ITEM turns a node back into its item.  Header only (static
 * inline, libc only): transport/ and the tools reach it through
 * fsm_private_dep.
 *
 * What must stay true: head and tail are NULL exactly when n is 0; a node
 * is on at most one list at a time (its owner knows which), and
 * xfer_list_remove clears its links.
 */
#ifndef XFER_FSM_LIST_H
#define XFER_FSM_LIST_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct xfer_list_node {
    struct xfer_list_node *prev, *next;
} xfer_list_node;

/* A zeroed xfer_list is an empty list. */
typedef struct xfer_list {
    xfer_list_node *head, *tail; /* oldest, newest */
    uint32_t n;
} xfer_list;

/* The item of type `type` whose member `member` is the node `node` (which
 * must not be NULL). */
#define XFER_LIST_ITEM(node, type, member)                                    \
    ((type *)(void *)((char *)(node) - offsetof(type, member)))

/* Append e (on no list) as the newest node. */
static inline void xfer_list_push_back(xfer_list *l, xfer_list_node *e)
{
    e->prev = l->tail;
    e->next = NULL;
    if (l->tail)
        l->tail->next = e;
    else
        l->head = e;
    l->tail = e;
    l->n++;
}

/* Prepend e (on no list) as the oldest node. */
static inline void xfer_list_push_front(xfer_list *l, xfer_list_node *e)
{
    e->prev = NULL;
    e->next = l->head;
    if (l->head)
        l->head->prev = e;
    else
        l->tail = e;
    l->head = e;
    l->n++;
}

/* Take e, which is on l, off it. */
static inline void xfer_list_remove(xfer_list *l, xfer_list_node *e)
{
    assert(l->n > 0);
    if (e->prev)
        e->prev->next = e->next;
    else
        l->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        l->tail = e->prev;
    e->prev = e->next = NULL;
    l->n--;
}

/* Take the oldest node off l and return it; NULL when l is empty. */
static inline xfer_list_node *xfer_list_pop_front(xfer_list *l)
{
    xfer_list_node *e = l->head;
    if (e)
        xfer_list_remove(l, e);
    return e;
}

static inline bool xfer_list_empty(const xfer_list *l)
{
    return l->head == NULL;
}

#endif /* XFER_FSM_LIST_H */
