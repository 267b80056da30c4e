/* test_job_move.c - the one guarded change of a job's status
 * (control/job_move.h): every pair of statuses and every message is tried
 * against core/job.c's table; an allowed move is made, a forbidden one
 * answers ERR_INTERNAL and leaves the job exactly as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/job_move.h"

static void a_job_at(struct store_job *j, enum job_status s, enum job_message m)
{
    memset(j, 0xA5, sizeof *j); /* fields job_move_to() must not touch */
    strcpy(j->id, "ftjob-move");
    j->status = s;
    strcpy(j->message, job_message_text(m));
}

/* Any allowed message of status s (MSG_NONE when s takes none). */
static enum job_message a_message_of(enum job_status s)
{
    for (int m = 0; m < JOB_MESSAGE_COUNT; m++)
        if (job_message_allowed(s, (enum job_message)m))
            return (enum job_message)m;
    return MSG_NONE;
}

/* Each refused move logs an error line; the few hundred of the walk below
 * go to /dev/null, the rest of the test's output stays. */
static int quiet_stderr(void)
{
    fflush(stderr);
    int saved = dup(2);
    int null = open("/dev/null", O_WRONLY);
    assert_true(saved >= 0 && null >= 0);
    assert_true(dup2(null, 2) == 2);
    close(null);
    return saved;
}

static void loud_stderr(int saved)
{
    fflush(stderr);
    assert_true(dup2(saved, 2) == 2);
    close(saved);
}

static void every_pair_follows_the_table(void **state)
{
    (void)state;
    int allowed = 0, refused = 0;
    int saved = quiet_stderr();
    for (int from = 0; from < JOB_STATUS_COUNT; from++) {
        for (int to = 0; to < JOB_STATUS_COUNT; to++) {
            for (int m = 0; m < JOB_MESSAGE_COUNT; m++) {
                struct store_job *j = malloc(sizeof *j);
                struct store_job *before = malloc(sizeof *before);
                assert_non_null(j);
                assert_non_null(before);
                a_job_at(j, (enum job_status)from, a_message_of((enum job_status)from));
                memcpy(before, j, sizeof *j);
                bool ok = job_transition_allowed((enum job_status)from, (enum job_status)to) &&
                          job_message_allowed((enum job_status)to, (enum job_message)m);
                enum alallo_err e = job_move_to(j, (enum job_status)to, (enum job_message)m);
                if (ok) {
                    assert_int_equal(e, ERR_OK);
                    assert_int_equal(j->status, to);
                    assert_string_equal(j->message, job_message_text((enum job_message)m));
                    /* Only the status and the message change. */
                    before->status = j->status;
                    memcpy(before->message, j->message, sizeof j->message);
                    assert_memory_equal(before, j, sizeof *j);
                    allowed++;
                } else {
                    assert_int_equal(e, ERR_INTERNAL);
                    assert_memory_equal(before, j, sizeof *j);
                    refused++;
                }
                free(before);
                free(j);
            }
        }
    }
    loud_stderr(saved);
    /* The table is neither empty nor everything. */
    assert_true(allowed > 0);
    assert_true(refused > 0);
}

/* Moves the lifecycle relies on, and ones it must never make: an ended job
 * stays ended, and a job never goes back to queued from running. */
static void named_moves(void **state)
{
    (void)state;
    struct store_job j;
    a_job_at(&j, JOB_QUEUED, MSG_STARTING);
    assert_int_equal(job_move_to(&j, JOB_RUNNING, MSG_NONE), ERR_OK);
    assert_int_equal(job_move_to(&j, JOB_SUCCEEDED, MSG_NONE), ERR_OK);
    assert_int_equal(job_move_to(&j, JOB_RUNNING, MSG_NONE), ERR_INTERNAL);
    assert_int_equal(job_move_to(&j, JOB_CANCELLED, MSG_NONE), ERR_INTERNAL);
    assert_int_equal(j.status, JOB_SUCCEEDED);

    a_job_at(&j, JOB_CANCELLED, MSG_NONE);
    assert_int_equal(job_move_to(&j, JOB_QUEUED, MSG_STARTING), ERR_INTERNAL);
    assert_int_equal(j.status, JOB_CANCELLED);

    /* A status with a message it never carries is refused too. */
    a_job_at(&j, JOB_QUEUED, MSG_STARTING);
    assert_int_equal(job_move_to(&j, JOB_FAILED, MSG_STARTING), ERR_INTERNAL);
    assert_int_equal(j.status, JOB_QUEUED);
    assert_string_equal(j.message, job_message_text(MSG_STARTING));
}

static void the_first_status(void **state)
{
    (void)state;
    struct store_job j;
    a_job_at(&j, JOB_STATUS_COUNT, MSG_NONE);
    assert_int_equal(job_move_initial(&j, JOB_QUEUED, MSG_WAITING_FOR_CAPACITY), ERR_OK);
    assert_int_equal(j.status, JOB_QUEUED);
    a_job_at(&j, JOB_STATUS_COUNT, MSG_NONE);
    assert_int_equal(job_move_initial(&j, JOB_FAILED, MSG_NOT_AVAILABLE_LOWER_PRECISION),
                     ERR_OK);
    assert_int_equal(j.status, JOB_FAILED);
    /* A job is never created running, or failed for another reason. */
    a_job_at(&j, JOB_STATUS_COUNT, MSG_NONE);
    assert_int_equal(job_move_initial(&j, JOB_RUNNING, MSG_NONE), ERR_INTERNAL);
    assert_int_equal(job_move_initial(&j, JOB_FAILED, MSG_NONE), ERR_INTERNAL);
    assert_int_equal(job_move_initial(&j, JOB_QUEUED, MSG_NOT_AVAILABLE), ERR_INTERNAL);
    assert_int_equal(j.status, JOB_STATUS_COUNT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_pair_follows_the_table),
        cmocka_unit_test(named_moves),
        cmocka_unit_test(the_first_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
