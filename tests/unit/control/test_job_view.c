/* test_job_view.c - the policy of a job's view (job_view.h): a "Starting"
 * job that no worker claimed within the grace reads "Waiting for
 * capacity"; the time left from the estimate before and after the first steps, none for an
 * ended job or one without steps, and cancel_now of an ended job as what it
 * was charged less what was refunded. How they are written as JSON is in
 * tests/unit/api/test_jsonw.c and test_jobs_api.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "control/job_view.h"
#include "core/job.h"

#define NOW_MS 1700000100000LL

static void job(struct store_job *j, enum job_status s)
{
    memset(j, 0, sizeof *j);
    strcpy(j->id, "ftjob-view");
    j->status = s;
    j->max_steps = 100;
    j->created_ms = NOW_MS - 30000;
    j->est_low_s = 160;
    j->est_high_s = 260;
    j->est_train_low_s = 100;
    j->est_train_high_s = 200;
}

static void an_ended_job_has_no_time_left_and_costs_what_it_was_charged(void **state)
{
    (void)state;
    struct store_job j;
    job(&j, JOB_CANCELLED);
    j.price_charged = 0.75;
    j.price_refunded = 0.25;
    struct job_view v;
    control_job_view(&j, NOW_MS, &v);
    assert_false(v.has_time_left);
    assert_string_equal(v.time_left_basis, "estimate");
    assert_true(v.cancel_now == 0.5);
}

static void a_started_job_without_an_attempt_counts_down_the_training_left(void **state)
{
    (void)state;
    struct store_job j;
    job(&j, JOB_RESCHEDULING);
    j.steps_done = 50;
    struct job_view v;
    control_job_view(&j, NOW_MS, &v);
    assert_true(v.has_time_left);
    assert_float_equal(v.time_left_low_s, 50, 1e-12);
    assert_float_equal(v.time_left_high_s, 100, 1e-12);
    assert_string_equal(v.time_left_basis, "estimate");
    assert_int_equal(v.estimated_finish_s, NOW_MS / 1000 + 100);
    assert_true(v.time_left_text[0] != '\0');
    /* to a tenth, rounded outward: 50.185..100.165 s reads 50.1..100.2 */
    j.est_train_low_s = 100.37;
    j.est_train_high_s = 200.33;
    control_job_view(&j, NOW_MS, &v);
    assert_float_equal(v.time_left_low_s, 50.1, 1e-12);
    assert_float_equal(v.time_left_high_s, 100.2, 1e-12);
    assert_int_equal(v.estimated_finish_s, NOW_MS / 1000 + 101);
}

static void a_queued_job_counts_down_from_its_estimate(void **state)
{
    (void)state;
    struct store_job j;
    job(&j, JOB_QUEUED);
    struct job_view v;
    control_job_view(&j, NOW_MS, &v);
    assert_true(v.has_time_left);
    assert_true(v.time_left_low_s <= v.time_left_high_s);
    assert_true(v.time_left_low_s >= 100); /* never below the training to do */
    assert_int_equal(v.estimated_finish_s, NOW_MS / 1000 + (int64_t)ceil(v.time_left_high_s));
}

static void a_job_without_steps_has_no_time_left(void **state)
{
    (void)state;
    struct store_job j;
    job(&j, JOB_RUNNING);
    j.max_steps = 0;
    struct job_view v;
    control_job_view(&j, NOW_MS, &v);
    assert_false(v.has_time_left);
    assert_int_equal(v.estimated_finish_s, 0);
}

static void starting_turns_into_waiting_after_the_grace(void **state)
{
    (void)state;
    struct store_job j;
    memset(&j, 0, sizeof j);
    j.status = JOB_QUEUED;
    strcpy(j.message, "Starting");
    j.created_ms = 1000000;
    assert_string_equal(control_job_message(&j, 1000000 + 5000), "Starting");
    assert_string_equal(control_job_message(&j, 1000000 + CONTROL_STARTING_GRACE_MS), "Starting");
    assert_string_equal(control_job_message(&j, 1000000 + CONTROL_STARTING_GRACE_MS + 1),
                        "Waiting for capacity");
    assert_string_equal(control_job_message(&j, 1000000 + 11000), "Waiting for capacity");
    strcpy(j.active_attempt, "att-1"); /* claimed: it is starting */
    assert_string_equal(control_job_message(&j, 1000000 + 60000), "Starting");
    j.active_attempt[0] = '\0';
    strcpy(j.message, "Re-scheduling"); /* another message stays as it is */
    assert_string_equal(control_job_message(&j, 1000000 + 60000), "Re-scheduling");
    j.status = JOB_RUNNING;
    j.message[0] = '\0';
    assert_string_equal(control_job_message(&j, 0), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_ended_job_has_no_time_left_and_costs_what_it_was_charged),
        cmocka_unit_test(a_started_job_without_an_attempt_counts_down_the_training_left),
        cmocka_unit_test(a_queued_job_counts_down_from_its_estimate),
        cmocka_unit_test(a_job_without_steps_has_no_time_left),
        cmocka_unit_test(starting_turns_into_waiting_after_the_grace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
