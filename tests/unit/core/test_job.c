/* test_job.c - statuses, messages and time texts against the help page. */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "core/job.h"

static void statuses_are_the_seven(void **state)
{
    (void)state;
    const char *want[] = {"queued", "running", "re-scheduling", "cancelling",
                          "cancelled", "succeeded", "failed"};
    for (int i = 0; i < JOB_STATUS_COUNT; i++) {
        assert_string_equal(job_status_name((enum job_status)i), want[i]);
        enum job_status s;
        assert_true(job_status_parse(want[i], &s));
        assert_int_equal(s, i);
    }
    enum job_status s;
    assert_false(job_status_parse("pending", &s));
    assert_null(job_status_name(JOB_STATUS_COUNT));
}

static void messages_word_for_word(void **state)
{
    (void)state;
    assert_string_equal(job_message_text(MSG_STARTING), "Starting");
    assert_string_equal(job_message_text(MSG_WAITING_FOR_CAPACITY), "Waiting for capacity");
    assert_string_equal(job_message_text(MSG_RESCHEDULING), "Re-scheduling");
    assert_string_equal(job_message_text(MSG_NOT_AVAILABLE), "Not available right now.");
    assert_string_equal(job_message_text(MSG_NOT_AVAILABLE_LOWER_PRECISION),
                        "Not available right now. Choose a lower precision.");
    assert_string_equal(job_message_text(MSG_STOPPED_BUDGET), "Stopped: the budget was reached");
    assert_string_equal(job_message_text(MSG_STOPPED_TIME_LIMIT),
                        "Stopped: the time limit was reached");
    assert_string_equal(job_message_text(MSG_FAILED_INTERNAL),
                        "Failed. We've been notified and are looking into it.");
    char buf[128];
    job_training_failed_message(buf, sizeof buf,
                                "line 3 of train.jsonl: missing field \"completion\"\nmore");
    assert_string_equal(buf, "Training failed: line 3 of train.jsonl: missing field \"completion\"");
    job_training_failed_message(buf, 20, "abcdefghijkl");
    assert_string_equal(buf, "Training failed: ab");
}

static void transitions(void **state)
{
    (void)state;
    assert_true(job_transition_allowed(JOB_QUEUED, JOB_RUNNING));
    assert_true(job_transition_allowed(JOB_RUNNING, JOB_RESCHEDULING));
    assert_true(job_transition_allowed(JOB_RESCHEDULING, JOB_RUNNING));
    assert_true(job_transition_allowed(JOB_RUNNING, JOB_CANCELLING));
    assert_true(job_transition_allowed(JOB_CANCELLING, JOB_CANCELLED));
    assert_false(job_transition_allowed(JOB_SUCCEEDED, JOB_RUNNING));
    assert_false(job_transition_allowed(JOB_CANCELLED, JOB_QUEUED));
    assert_false(job_transition_allowed(JOB_FAILED, JOB_QUEUED));
    assert_false(job_transition_allowed(JOB_CANCELLING, JOB_RUNNING));
    assert_true(job_message_allowed(JOB_QUEUED, MSG_WAITING_FOR_CAPACITY));
    assert_false(job_message_allowed(JOB_RUNNING, MSG_WAITING_FOR_CAPACITY));
    assert_true(job_message_allowed(JOB_FAILED, MSG_STOPPED_BUDGET));
    assert_true(job_outcome_is_free(JOB_FAILED, MSG_STOPPED_TIME_LIMIT));
    assert_false(job_outcome_is_free(JOB_SUCCEEDED, MSG_NONE));
}

/* The moves docs/lifecycle.md lists ("Allowed moves"), written out by
 * name; every other pair of statuses must be refused. */
static const char *const doc_moves[][2] = {
    {"queued", "queued"},
    {"queued", "running"},
    {"queued", "failed"},
    {"queued", "cancelling"},
    {"queued", "cancelled"},
    {"running", "running"},
    {"running", "succeeded"},
    {"running", "failed"},
    {"running", "re-scheduling"},
    {"running", "cancelling"},
    {"re-scheduling", "re-scheduling"},
    {"re-scheduling", "running"},
    {"re-scheduling", "succeeded"},
    {"re-scheduling", "failed"},
    {"re-scheduling", "cancelling"},
    {"re-scheduling", "cancelled"},
    {"cancelling", "cancelled"},
    {"cancelling", "succeeded"},
};

static bool doc_allows(enum job_status from, enum job_status to)
{
    for (size_t i = 0; i < sizeof doc_moves / sizeof doc_moves[0]; i++)
        if (strcmp(doc_moves[i][0], job_status_name(from)) == 0 &&
            strcmp(doc_moves[i][1], job_status_name(to)) == 0)
            return true;
    return false;
}

static void transition_table_matches_doc(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof doc_moves / sizeof doc_moves[0]; i++) {
        enum job_status a, b;
        assert_true(job_status_parse(doc_moves[i][0], &a));
        assert_true(job_status_parse(doc_moves[i][1], &b));
    }
    int allowed = 0;
    for (int f = 0; f < JOB_STATUS_COUNT; f++) {
        for (int t = 0; t < JOB_STATUS_COUNT; t++) {
            bool want = doc_allows((enum job_status)f, (enum job_status)t);
            bool got = job_transition_allowed((enum job_status)f, (enum job_status)t);
            if (want != got)
                fail_msg("%s -> %s: table says %d, docs/lifecycle.md says %d",
                         job_status_name((enum job_status)f), job_status_name((enum job_status)t),
                         got, want);
            allowed += got;
        }
        if (job_status_is_terminal((enum job_status)f))
            for (int t = 0; t < JOB_STATUS_COUNT; t++)
                assert_false(job_transition_allowed((enum job_status)f, (enum job_status)t));
    }
    assert_int_equal(allowed, (int)(sizeof doc_moves / sizeof doc_moves[0]));
    assert_false(job_transition_allowed(JOB_STATUS_COUNT, JOB_QUEUED));
    assert_false(job_transition_allowed(JOB_QUEUED, JOB_STATUS_COUNT));
}

static void time_texts(void **state)
{
    (void)state;
    char b[64];
    /* time left: minutes under 1.5 h */
    assert_string_equal(job_time_left_text(b, sizeof b, 40 * 60), "40 min");
    assert_string_equal(job_time_left_text(b, sizeof b, 89 * 60 + 29), "89 min");
    assert_string_equal(job_time_left_text(b, sizeof b, 89 * 60 + 30), "90 min"); /* half up */
    assert_string_equal(job_time_left_text(b, sizeof b, 5400), "1.5 h");
    assert_string_equal(job_time_left_text(b, sizeof b, 2.4 * 3600), "2.4 h");
    assert_string_equal(job_time_left_text(b, sizeof b, 3), "1 min"); /* at least 1 */
    assert_string_equal(job_time_left_text(b, sizeof b, 0), "1 min");
    /* estimate: minutes under 1 h */
    assert_string_equal(job_estimate_end_text(b, sizeof b, 59 * 60), "59 min");
    assert_string_equal(job_estimate_end_text(b, sizeof b, 3600), "1.0 h");
    assert_string_equal(job_estimate_range_text(b, sizeof b, 40 * 60, 1.3 * 3600),
                        "40 min to 1.3 h");
    assert_string_equal(job_estimate_range_text(b, sizeof b, 40 * 60, 40 * 60 + 10), "40 min");
    assert_string_equal(job_time_left_range_text(b, sizeof b, 40 * 60, 80 * 60),
                        "40 min to 80 min");
    assert_string_equal(job_estimate_range_text(b, sizeof b, 40 * 60, 80 * 60),
                        "40 min to 1.3 h");
    char tiny[4];
    assert_string_equal(job_estimate_range_text(tiny, sizeof tiny, 60, 7200), "");
}

/* A short range stays a range: outward rounding, "under" below a minute
 * (issue 12: 15..54 s read "1 min", a point). */
static void short_ranges_stay_ranges(void **state)
{
    (void)state;
    char b[64];
    assert_string_equal(job_time_left_range_text(b, sizeof b, 15, 54), "under 1 min");
    assert_string_equal(job_estimate_range_text(b, sizeof b, 15, 54), "under 1 min");
    assert_string_equal(job_time_left_range_text(b, sizeof b, 0, 0), "under 1 min");
    assert_string_equal(job_time_left_range_text(b, sizeof b, 30, 100), "under 2 min");
    assert_string_equal(job_time_left_range_text(b, sizeof b, 61, 119), "1 min to 2 min");
    assert_string_equal(job_time_left_range_text(b, sizeof b, 60, 120), "1 min to 2 min");
    assert_string_equal(job_time_left_range_text(b, sizeof b, 60, 60), "1 min");
    assert_string_equal(job_time_left_range_text(b, sizeof b, 150, 170), "2 min to 3 min");
    assert_string_equal(job_estimate_range_text(b, sizeof b, 245, 539), "4 min to 9 min");
    /* Whenever the seconds differ, the text is a range, never a point. */
    for (int lo = 1; lo < 590; lo += 7)
        for (int hi = lo; hi < 600; hi += 11) {
            job_time_left_range_text(b, sizeof b, lo, hi);
            if (hi > lo)
                assert_true(strstr(b, " to ") || strstr(b, "under "));
        }
    /* From 10 minutes up, the page's rule as before. */
    assert_string_equal(job_time_left_range_text(b, sizeof b, 600, 660), "10 min to 11 min");
    assert_string_equal(job_time_left_range_text(b, sizeof b, 40 * 60, 40 * 60 + 10), "40 min");
}

static void range_ends_to_a_tenth(void **state)
{
    (void)state;
    /* rounded outward, an exact tenth kept as it is */
    assert_float_equal(job_range_low_s(4.31), 4.3, 1e-12);
    assert_float_equal(job_range_high_s(5.22), 5.3, 1e-12);
    assert_float_equal(job_range_low_s(4.3), 4.3, 1e-12);
    assert_float_equal(job_range_high_s(4.3), 4.3, 1e-12);
    assert_float_equal(job_range_high_s(0.7), 0.7, 1e-12);
    assert_float_equal(job_range_low_s(12.999), 12.9, 1e-12);
    assert_float_equal(job_range_high_s(12.001), 12.1, 1e-12);
    assert_float_equal(job_range_high_s(7200), 7200, 1e-12);
    /* never negative, nothing from a non-finite end */
    assert_float_equal(job_range_low_s(-3), 0, 0);
    assert_float_equal(job_range_high_s(-3), 0, 0);
    assert_float_equal(job_range_low_s(NAN), 0, 0);
    assert_float_equal(job_range_high_s(INFINITY), 0, 0);
}

static void progress(void **state)
{
    (void)state;
    assert_int_equal(job_max_steps(10, 3, 4), 8);
    assert_int_equal(job_max_steps(0, 3, 4), 0);
    assert_int_equal(job_progress_percent(5, 10, JOB_RUNNING), 50);
    assert_int_equal(job_progress_percent(9, 10, JOB_SUCCEEDED), 100);
    assert_int_equal(job_progress_percent(3, 0, JOB_RUNNING), 0);
}

/* The steps that end an epoch match the trainer's (test_train.c
 * a_checkpoint_each_epoch: 30 examples, batch 4: steps 8 and 15). */
static void epoch_ends(void **state)
{
    (void)state;
    int ends[16] = {0}, n = 0;
    for (long s = 1; s <= job_max_steps(30, 2, 4); s++)
        if (job_step_ends_epoch(30, 4, s) && n < 16)
            ends[n++] = (int)s;
    assert_int_equal(n, 2);
    assert_int_equal(ends[0], 8);
    assert_int_equal(ends[1], 15);
    for (long s = 1; s <= 6; s++) /* batch = examples: every step */
        assert_true(job_step_ends_epoch(5, 5, s));
    assert_true(job_step_ends_epoch(40, 4, 10));
    assert_false(job_step_ends_epoch(40, 4, 9));
    assert_false(job_step_ends_epoch(0, 4, 1));
    assert_false(job_step_ends_epoch(40, 0, 1));
    assert_false(job_step_ends_epoch(40, 4, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(statuses_are_the_seven),
        cmocka_unit_test(messages_word_for_word),
        cmocka_unit_test(transitions),
        cmocka_unit_test(transition_table_matches_doc),
        cmocka_unit_test(time_texts),
        cmocka_unit_test(short_ranges_stay_ranges),
        cmocka_unit_test(range_ends_to_a_tenth),
        cmocka_unit_test(progress),
        cmocka_unit_test(epoch_ends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
