/*
 * tests/test_list.c - the intrusive list (fsm/list.h): FIFO order, removal
 * from the head, the middle and the tail, an item on two lists at once.
 * Randomised against an array of ids; prints its seed.
 */
#include <check.h>

#include "list.h"
#include "testutil.h"

typedef struct item {
    int id;
    xfer_list_node a, b; /* on two lists */
} item;

static int id_at(const xfer_list *l, uint32_t i, int which)
{
    xfer_list_node *n = l->head;
    while (i--)
        n = n->next;
    return which ? XFER_LIST_ITEM(n, item, b)->id
                 : XFER_LIST_ITEM(n, item, a)->id;
}

START_TEST(test_list_push_remove_pop)
{
    item it[4] = {{.id = 0}, {.id = 1}, {.id = 2}, {.id = 3}};
    xfer_list l = {0};
    ck_assert(xfer_list_empty(&l));
    for (int i = 0; i < 3; i++)
        xfer_list_push_back(&l, &it[i].a);
    xfer_list_push_front(&l, &it[3].a); /* 3 0 1 2 */
    ck_assert_uint_eq(l.n, 4);
    xfer_list_remove(&l, &it[1].a);     /* middle: 3 0 2 */
    ck_assert_ptr_null(it[1].a.prev);
    ck_assert_ptr_null(it[1].a.next);
    xfer_list_remove(&l, &it[2].a);     /* tail: 3 0 */
    ck_assert_ptr_eq(l.tail, &it[0].a);
    ck_assert_int_eq(XFER_LIST_ITEM(xfer_list_pop_front(&l), item, a)->id, 3);
    ck_assert_int_eq(XFER_LIST_ITEM(xfer_list_pop_front(&l), item, a)->id, 0);
    ck_assert_ptr_null(xfer_list_pop_front(&l));
    ck_assert(xfer_list_empty(&l));
    ck_assert_ptr_null(l.tail);
    ck_assert_uint_eq(l.n, 0);
}
END_TEST

/* One item on two lists through two nodes: leaving one keeps the other. */
START_TEST(test_list_item_on_two_lists)
{
    item it[3] = {{.id = 0}, {.id = 1}, {.id = 2}};
    xfer_list la = {0}, lb = {0};
    for (int i = 0; i < 3; i++) {
        xfer_list_push_back(&la, &it[i].a);
        xfer_list_push_front(&lb, &it[i].b);
    }
    xfer_list_remove(&la, &it[1].a);
    ck_assert_uint_eq(la.n, 2);
    ck_assert_uint_eq(lb.n, 3);
    ck_assert_int_eq(id_at(&la, 1, 0), 2);
    ck_assert_int_eq(id_at(&lb, 1, 1), 1);
}
END_TEST

START_TEST(test_list_random_against_array)
{
    uint64_t rng = tu_seed("test_list_random_against_array", 3);
    enum { N = 32, OPS = 20000 };
    item it[N];
    int want[N], nw = 0;
    bool on[N] = {false};
    xfer_list l = {0};
    for (int i = 0; i < N; i++)
        it[i].id = i;
    for (int op = 0; op < OPS; op++) {
        int k = (int)(tu_rand(&rng) % N);
        if (!on[k]) {
            xfer_list_push_back(&l, &it[k].a);
            want[nw++] = k;
        } else {
            xfer_list_remove(&l, &it[k].a);
            int j = 0;
            while (want[j] != k)
                j++;
            for (; j + 1 < nw; j++)
                want[j] = want[j + 1];
            nw--;
        }
        on[k] = !on[k];
        ck_assert_uint_eq(l.n, (uint32_t)nw);
        int i = 0;
        for (xfer_list_node *n = l.head; n; n = n->next, i++)
            ck_assert_int_eq(XFER_LIST_ITEM(n, item, a)->id, want[i]);
        ck_assert_int_eq(i, nw);
        ck_assert(nw == 0 ? l.tail == NULL
                          : XFER_LIST_ITEM(l.tail, item, a)->id == want[nw - 1]);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("list");
    TCase *tc = tcase_create("list");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_list_push_remove_pop);
    tcase_add_test(tc, test_list_item_on_two_lists);
    tcase_add_test(tc, test_list_random_against_array);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
