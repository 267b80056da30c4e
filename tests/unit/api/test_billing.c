/* test_billing.c - the provisional money rules: steps billed once at the
 * rate of the worker that did them, lost and repeated work free, failed
 * free, succeeded capped at the estimate, cancel charged unless late. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "api/billing_provisional.h"

static struct store_attempt att(const char *id, int64_t fence, long start, long end, int64_t run_ms,
                                double price)
{
    struct store_attempt a;
    memset(&a, 0, sizeof a);
    strcpy(a.id, id);
    a.fence = fence;
    a.start_step = start;
    a.end_step = end;
    a.run_ms = run_ms;
    a.price_per_hour = price;
    return a;
}

static void job(struct store_job *j, enum job_status s, long steps)
{
    memset(j, 0, sizeof *j);
    j->status = s;
    j->steps_done = steps;
    j->max_steps = 100;
}

static void moved_job_pays_each_step_once(void **state)
{
    (void)state;
    struct store_job j;
    job(&j, JOB_SUCCEEDED, 100);
    /* 50 steps at 1 s each on a 3.6/h worker, lost; the next attempt
     * resumed at step 40 and did 60 steps at 2 s each on a 1.8/h worker. */
    struct store_attempt a[2] = {att("a1", 1, 0, 50, 50000, 3.6), att("a2", 2, 40, 100, 120000, 1.8)};
    struct bill b;
    billing_settle_provisional(&j, a, 2, NULL, 0, &b);
    /* 40 kept steps × 1 s × 0.001/s + 60 steps × 2 s × 0.0005/s */
    assert_true(fabs(b.charge - (0.04 + 0.06)) < 1e-9);
    assert_int_equal(b.steps, 100);
    assert_true(b.refund == 0);

    /* Capped at the upper end of the estimated price. */
    j.est_price_high = 0.07;
    billing_settle_provisional(&j, a, 2, NULL, 0, &b);
    assert_true(fabs(b.refund - 0.03) < 1e-9);

    /* The current attempt passed in replaces its stored row. */
    struct store_attempt now = att("a2", 2, 40, 100, 60000, 1.8);
    j.est_price_high = 0;
    billing_settle_provisional(&j, a, 2, &now, 0, &b);
    assert_true(fabs(b.charge - (0.04 + 0.03)) < 1e-9);
}

static void failed_is_free_and_late_cancel_is_free(void **state)
{
    (void)state;
    struct store_job j;
    struct store_attempt a[1] = {att("a1", 1, 0, 30, 30000, 3.6)};
    struct bill b;
    job(&j, JOB_FAILED, 30);
    billing_settle_provisional(&j, a, 1, NULL, 0, &b);
    assert_true(b.charge == 0 && b.refund == 0);

    job(&j, JOB_CANCELLED, 30);
    j.est_high_s = 100;
    j.running_ms = 30000;
    billing_settle_provisional(&j, a, 1, NULL, 0, &b);
    assert_true(fabs(b.charge - 0.03) < 1e-9);
    j.running_ms = 101000; /* ran past the upper end of its estimate */
    billing_settle_provisional(&j, a, 1, NULL, 0, &b);
    assert_true(b.charge == 0);
}

static void attempts_that_never_ran_cost_nothing(void **state)
{
    (void)state;
    struct store_job j;
    job(&j, JOB_SUCCEEDED, 100);
    struct store_attempt a[3] = {att("a1", 1, 0, 0, 0, 9.0), att("a2", 2, 0, 100, 100000, 3.6),
                                 att("a3", 3, 100, 100, 0, 9.0)};
    struct bill b;
    billing_settle_provisional(&j, a, 3, NULL, 0, &b);
    assert_true(fabs(b.charge - 0.1) < 1e-9);
    /* Already charged earlier: only the difference is charged now. */
    j.price_charged = 0.04;
    billing_settle_provisional(&j, a, 3, NULL, 0, &b);
    assert_true(fabs(b.charge - 0.06) < 1e-9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(moved_job_pays_each_step_once),
        cmocka_unit_test(failed_is_free_and_late_cancel_is_free),
        cmocka_unit_test(attempts_that_never_ran_cost_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
