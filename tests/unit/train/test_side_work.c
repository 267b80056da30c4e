/* test_side_work.c - work beside the caller (train/run/side_work.h): every
 * item handed is done, in the order handed, by another thread when beside
 * and by the caller when not, and finish waits for all of them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "train/run/side_work.h"

#define N 200

struct log {
    int order[N], n;
    bool other_thread;
    pthread_t caller;
};

static void record(void *ctx, int item)
{
    struct log *l = ctx;
    if (item % 50 == 0)
        usleep(2000); /* slower than the hand-over: items queue up */
    if (!pthread_equal(pthread_self(), l->caller))
        l->other_thread = true;
    l->order[l->n++] = item;
}

static void run(bool beside, struct log *l)
{
    memset(l, 0, sizeof *l);
    l->caller = pthread_self();
    struct side_work *w = side_work_start(record, l, N, beside);
    assert_non_null(w);
    for (int i = 0; i < N; i++)
        side_work_push(w, (i * 7) % N); /* an order that is not 0, 1, 2... */
    double waited = -1;
    side_work_finish(w, &waited);
    assert_true(waited >= 0);
    assert_int_equal(l->n, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(l->order[i], (i * 7) % N);
}

static void beside_does_every_item_in_order_on_another_thread(void **state)
{
    (void)state;
    struct log l;
    run(true, &l);
    assert_true(l.other_thread);
}

static void inline_does_the_same_on_the_callers_thread(void **state)
{
    (void)state;
    struct log l;
    run(false, &l);
    assert_false(l.other_thread);
}

/* Nothing handed: finish returns at once. */
static void nothing_handed(void **state)
{
    (void)state;
    struct log l;
    memset(&l, 0, sizeof l);
    struct side_work *w = side_work_start(record, &l, 0, true);
    assert_non_null(w);
    side_work_finish(w, NULL);
    assert_int_equal(l.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(beside_does_every_item_in_order_on_another_thread),
        cmocka_unit_test(inline_does_the_same_on_the_callers_thread),
        cmocka_unit_test(nothing_handed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
