/* test_serve_admission.c - the inference engine's admission: accounts are
 * served in turn (one account's many requests never keep another's
 * waiting more than a turn), the running and token limits hold, a request
 * too big for the token limit runs alone, full queues are refused, and a
 * request whose client left is taken out of its queue. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "train/serve/admission.h"

static void accounts_take_turns(void **state)
{
    (void)state;
    struct admission_limits lim = {.max_running = 100, .max_tokens_in_flight = 1000000,
                                   .max_queued = 50};
    struct admission *a = admission_new(&lim);
    assert_non_null(a);
    int items[40];
    /* a floods 30 requests, then b sends 2 and c 1 */
    for (int i = 0; i < 30; i++)
        assert_int_equal(admission_push(a, "acct-a", &items[i], 10), 0);
    assert_int_equal(admission_push(a, "acct-b", &items[30], 10), 0);
    assert_int_equal(admission_push(a, "acct-b", &items[31], 10), 0);
    assert_int_equal(admission_push(a, "acct-c", &items[32], 10), 0);
    assert_int_equal(admission_waiting(a), 33);
    /* the first six admitted: a, b, c, a, b, a */
    int *order[6];
    for (int i = 0; i < 6; i++)
        order[i] = admission_next(a);
    assert_ptr_equal(order[0], &items[0]);
    assert_ptr_equal(order[1], &items[30]);
    assert_ptr_equal(order[2], &items[32]);
    assert_ptr_equal(order[3], &items[1]);
    assert_ptr_equal(order[4], &items[31]);
    assert_ptr_equal(order[5], &items[2]);
    assert_int_equal(admission_running(a), 6);
    assert_int_equal(admission_tokens(a), 60);
    admission_free(a);
}

static void limits_hold(void **state)
{
    (void)state;
    struct admission_limits lim = {.max_running = 2, .max_tokens_in_flight = 100,
                                   .max_queued = 3};
    struct admission *a = admission_new(&lim);
    int x[8];
    assert_int_equal(admission_push(a, "a", &x[0], 30), 0);
    assert_int_equal(admission_push(a, "a", &x[1], 30), 0);
    assert_int_equal(admission_push(a, "a", &x[2], 30), 0);
    assert_int_equal(admission_push(a, "a", &x[3], 30), -1); /* its queue is full */
    assert_ptr_equal(admission_next(a), &x[0]);
    assert_ptr_equal(admission_next(a), &x[1]);
    assert_null(admission_next(a)); /* two run: max_running */
    admission_done(a, 30);
    assert_ptr_equal(admission_next(a), &x[2]);
    admission_done(a, 30);
    admission_done(a, 30);
    assert_int_equal(admission_running(a), 0);
    assert_int_equal(admission_tokens(a), 0);
    /* tokens in flight: 80 runs, 30 more would pass 100 and waits */
    assert_int_equal(admission_push(a, "b", &x[4], 80), 0);
    assert_int_equal(admission_push(a, "c", &x[5], 30), 0);
    assert_ptr_equal(admission_next(a), &x[4]);
    assert_null(admission_next(a));
    admission_done(a, 80);
    assert_ptr_equal(admission_next(a), &x[5]);
    admission_done(a, 30);
    /* one bigger than the limit runs alone */
    assert_int_equal(admission_push(a, "b", &x[6], 500), 0);
    assert_ptr_equal(admission_next(a), &x[6]);
    assert_int_equal(admission_push(a, "c", &x[7], 1), 0);
    assert_null(admission_next(a));
    admission_done(a, 500);
    assert_ptr_equal(admission_next(a), &x[7]);
    admission_free(a);
    /* bad limits are refused */
    struct admission_limits bad = {.max_running = 0, .max_tokens_in_flight = 1, .max_queued = 1};
    assert_null(admission_new(&bad));
}

static void all_queues_are_bounded_and_leavers_leave(void **state)
{
    (void)state;
    struct admission_limits lim = {.max_running = 1, .max_tokens_in_flight = 1000,
                                   .max_queued = 2};
    struct admission *a = admission_new(&lim);
    int x[16];
    char name[8];
    int pushed = 0;
    for (int i = 0; i < 8; i++) {
        name[0] = (char)('a' + i);
        name[1] = '\0';
        pushed += admission_push(a, name, &x[i], 1) == 0;
    }
    assert_int_equal(pushed, 8);
    name[0] = 'z';
    assert_int_equal(admission_push(a, name, &x[8], 1), -1); /* 2 * 4 wait in all */
    assert_true(admission_drop(a, &x[1]));
    assert_false(admission_drop(a, &x[1]));
    assert_int_equal(admission_waiting(a), 7);
    assert_ptr_equal(admission_next(a), &x[0]);
    admission_done(a, 1);
    assert_ptr_equal(admission_next(a), &x[2]); /* b left: c is next */
    admission_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(accounts_take_turns),
        cmocka_unit_test(limits_hold),
        cmocka_unit_test(all_queues_are_bounded_and_leavers_leave),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
