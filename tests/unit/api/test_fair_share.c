/* test_fair_share.c - the shared slot pool: one account alone may hold
 * every slot; a freed slot goes to the waiting account that holds fewest,
 * never back to the one that holds most; waits end in time; one account
 * cannot fill the waiting room. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "api/fair_share.h"
#include "core/clock.h"

static void refuses_bad_arguments(void **state)
{
    (void)state;
    assert_null(fair_share_new(0, 4));
    assert_null(fair_share_new(2, -1));
    fair_share_free(NULL);
    struct fair_share *fs = fair_share_new(1, 1);
    assert_false(fair_share_take(fs, "", 0));
    assert_false(fair_share_take(fs, NULL, 0));
    fair_share_free(fs);
}

static void one_account_alone_holds_every_slot(void **state)
{
    (void)state;
    struct fair_share *fs = fair_share_new(2, 8);
    assert_true(fair_share_take(fs, "acct-a", 0));
    assert_true(fair_share_take(fs, "acct-a", 0));
    assert_false(fair_share_take(fs, "acct-a", 0)); /* full, no wait */
    int held, waiting;
    fair_share_count(fs, "acct-a", &held, &waiting);
    assert_int_equal(held, 2);
    assert_int_equal(waiting, 0);
    fair_share_give(fs, "acct-a");
    assert_true(fair_share_take(fs, "acct-a", 0));
    fair_share_give(fs, "acct-a");
    fair_share_give(fs, "acct-a");
    fair_share_give(fs, "acct-a"); /* one too many is ignored */
    fair_share_count(fs, "acct-a", &held, NULL);
    assert_int_equal(held, 0);
    assert_true(fair_share_take(fs, "acct-b", 0));
    assert_true(fair_share_take(fs, "acct-b", 0));
    fair_share_give(fs, "acct-b");
    fair_share_give(fs, "acct-b");
    fair_share_free(fs);
}

static void a_wait_ends_when_its_time_runs_out(void **state)
{
    (void)state;
    struct fair_share *fs = fair_share_new(1, 4);
    assert_true(fair_share_take(fs, "acct-a", 0));
    int64_t t0 = clock_mono_ms();
    assert_false(fair_share_take(fs, "acct-b", 150));
    assert_true(clock_mono_ms() - t0 >= 150);
    int waiting;
    fair_share_count(fs, "acct-b", NULL, &waiting);
    assert_int_equal(waiting, 0);
    fair_share_give(fs, "acct-a");
    fair_share_free(fs);
}

struct taker {
    struct fair_share *fs;
    const char *account;
    atomic_int done; /* 1: took, 2: refused */
    pthread_t th;
};

static void *take_main(void *arg)
{
    struct taker *t = arg;
    bool ok = fair_share_take(t->fs, t->account, 60000);
    atomic_store(&t->done, ok ? 1 : 2);
    return NULL;
}

static void start(struct taker *t, struct fair_share *fs, const char *account)
{
    t->fs = fs;
    t->account = account;
    atomic_store(&t->done, 0);
    assert_int_equal(pthread_create(&t->th, NULL, take_main, t), 0);
}

/* Waits (60 s at most) until `account` has `n` callers waiting. */
static void await_waiting(struct fair_share *fs, const char *account, int n)
{
    int64_t until = clock_mono_ms() + 60000;
    int waiting = -1;
    while (clock_mono_ms() < until) {
        fair_share_count(fs, account, NULL, &waiting);
        if (waiting == n)
            return;
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
    fail_msg("%s: %d waiting, not %d", account, waiting, n);
}

static void await_done(struct taker *t, int want)
{
    int64_t until = clock_mono_ms() + 60000;
    while (atomic_load(&t->done) == 0 && clock_mono_ms() < until)
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    assert_int_equal(atomic_load(&t->done), want);
    pthread_join(t->th, NULL);
}

/* Account A holds both slots and has a caller waiting, older than B's;
 * each slot A frees goes to B first, A's own waiter next. */
static void a_freed_slot_goes_to_the_account_that_holds_fewest(void **state)
{
    (void)state;
    struct fair_share *fs = fair_share_new(2, 8);
    assert_true(fair_share_take(fs, "acct-a", 0));
    assert_true(fair_share_take(fs, "acct-a", 0));
    struct taker a3, b1;
    start(&a3, fs, "acct-a");
    await_waiting(fs, "acct-a", 1);
    start(&b1, fs, "acct-b");
    await_waiting(fs, "acct-b", 1);

    fair_share_give(fs, "acct-a");
    await_done(&b1, 1);
    assert_int_equal(atomic_load(&a3.done), 0); /* no slot is free */
    fair_share_give(fs, "acct-a");
    await_done(&a3, 1);
    int held;
    fair_share_count(fs, "acct-a", &held, NULL);
    assert_int_equal(held, 1);
    fair_share_count(fs, "acct-b", &held, NULL);
    assert_int_equal(held, 1);
    fair_share_give(fs, "acct-a");
    fair_share_give(fs, "acct-b");
    fair_share_free(fs);
}

/* One account waits at most `slots` times at once, so others find room. */
static void one_account_cannot_fill_the_waiting_room(void **state)
{
    (void)state;
    struct fair_share *fs = fair_share_new(1, 3);
    assert_true(fair_share_take(fs, "acct-a", 0));
    struct taker a2, b1, c1;
    start(&a2, fs, "acct-a");
    await_waiting(fs, "acct-a", 1);
    int64_t t0 = clock_mono_ms();
    assert_false(fair_share_take(fs, "acct-a", 60000)); /* refused at once */
    assert_true(clock_mono_ms() - t0 < 30000);
    start(&b1, fs, "acct-b");
    await_waiting(fs, "acct-b", 1);
    start(&c1, fs, "acct-c");
    await_waiting(fs, "acct-c", 1);
    assert_false(fair_share_take(fs, "acct-d", 60000)); /* the room (3) is full */
    /* A now holds none and its waiter is the oldest: it goes first; then
     * B and C (holding none, B older) before A's next. */
    fair_share_give(fs, "acct-a");
    await_done(&a2, 1);
    fair_share_give(fs, "acct-a");
    await_done(&b1, 1);
    fair_share_give(fs, "acct-b");
    await_done(&c1, 1);
    fair_share_give(fs, "acct-c");
    fair_share_free(fs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(refuses_bad_arguments),
        cmocka_unit_test(one_account_alone_holds_every_slot),
        cmocka_unit_test(a_wait_ends_when_its_time_runs_out),
        cmocka_unit_test(a_freed_slot_goes_to_the_account_that_holds_fewest),
        cmocka_unit_test(one_account_cannot_fill_the_waiting_room),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
