/* test_outcome.c - what becomes of a job when its attempt ends, it is
 * cancelled, its worker is lost or it passes a limit (docs/lifecycle.md,
 * docs/ledger.md). */
#include <stdlib.h>
#include <string.h>

#include "sched/outcome.h"
#include "sched_test.h"

static void end_of(enum job_status status, enum stop_reason stop, bool trained,
                   struct outcome_end end, struct outcome *o)
{
    struct outcome_job j = {.status = status, .stop = stop, .trained = trained};
    outcome_of_end(&j, &end, o);
}

static const struct outcome_end exit4 = {.exit_status = 4};

static void stop_names_round_trip(void **state)
{
    (void)state;
    for (int s = 0; s < STOP_REASON_COUNT; s++)
        assert_int_equal(stop_reason_of(stop_reason_name((enum stop_reason)s)), s);
    assert_string_equal(stop_reason_name(STOP_REASON_TIME_LIMIT), "time_limit");
    assert_int_equal(stop_reason_of(NULL), STOP_REASON_NONE);
    assert_int_equal(stop_reason_of("bogus"), STOP_REASON_NONE);
    assert_null(stop_reason_name(STOP_REASON_COUNT));
}

static void worker_is_told_cancel_or_move(void **state)
{
    (void)state;
    assert_int_equal(outcome_worker_stop(JOB_RUNNING, STOP_REASON_NONE), STOP_REASON_NONE);
    assert_int_equal(outcome_worker_stop(JOB_CANCELLING, STOP_REASON_NONE), STOP_REASON_CANCEL);
    assert_int_equal(outcome_worker_stop(JOB_RUNNING, STOP_REASON_MOVE), STOP_REASON_MOVE);
    assert_int_equal(outcome_worker_stop(JOB_CANCELLING, STOP_REASON_MOVE), STOP_REASON_CANCEL);
    assert_int_equal(outcome_worker_stop(JOB_RUNNING, STOP_REASON_BUDGET), STOP_REASON_CANCEL);
    assert_int_equal(outcome_worker_stop(JOB_RUNNING, STOP_REASON_TIME_LIMIT),
                     STOP_REASON_CANCEL);
    assert_int_equal(outcome_worker_stop(JOB_RUNNING, STOP_REASON_NOT_AVAILABLE),
                     STOP_REASON_CANCEL);
}

/* Cancelled while it trained: billed for the partial model, which is kept;
 * before it trained: billed as cancelled while queued, no partial model. */
static void cancel_ends_as_cancelled(void **state)
{
    (void)state;
    struct outcome o;
    end_of(JOB_CANCELLING, STOP_REASON_CANCEL, true, exit4, &o);
    assert_int_equal(o.kind, OUTCOME_CANCELLED);
    assert_int_equal(o.status, JOB_CANCELLED);
    assert_true(o.settle);
    assert_int_equal(o.ledger.status, JOB_CANCELLED);
    assert_int_equal(o.ledger.cancelled_from, JOB_RUNNING);
    assert_true(o.partial_model);
    assert_false(o.requeue);
    assert_string_equal(o.attempt_reason, "cancelled");

    end_of(JOB_QUEUED, STOP_REASON_CANCEL, false, (struct outcome_end){.signal = 9,
                                                                       .exit_status = -1},
           &o);
    assert_int_equal(o.kind, OUTCOME_CANCELLED);
    assert_int_equal(o.ledger.cancelled_from, JOB_QUEUED);
    assert_false(o.partial_model);

    /* A cancel outranks a user error or a crash. */
    end_of(JOB_CANCELLING, STOP_REASON_NONE, true, (struct outcome_end){.exit_status = 3}, &o);
    assert_int_equal(o.kind, OUTCOME_CANCELLED);
}

static void limits_and_memory_fail_free(void **state)
{
    (void)state;
    static const struct {
        enum stop_reason stop;
        enum job_message m;
        const char *reason;
    } cases[] = {
        {STOP_REASON_TIME_LIMIT, MSG_STOPPED_TIME_LIMIT, "time limit"},
        {STOP_REASON_BUDGET, MSG_STOPPED_BUDGET, "budget"},
        {STOP_REASON_NOT_AVAILABLE, MSG_NOT_AVAILABLE, "needs more memory than any worker offers"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct outcome o;
        /* However the trainer ended: killed, crashed or a user error. */
        end_of(JOB_RUNNING, cases[i].stop, true, (struct outcome_end){.exit_status = 3}, &o);
        assert_int_equal(o.kind, OUTCOME_STOPPED);
        assert_int_equal(o.status, JOB_FAILED);
        assert_int_equal(o.message, cases[i].m);
        assert_true(o.settle);
        assert_int_equal(o.ledger.status, JOB_FAILED);
        assert_int_equal(o.ledger.message, cases[i].m);
        assert_false(o.internal);
        assert_false(o.requeue);
        assert_string_equal(o.attempt_reason, cases[i].reason);
    }
}

static void user_error_is_training_failed(void **state)
{
    (void)state;
    struct outcome o;
    end_of(JOB_RUNNING, STOP_REASON_NONE, true, (struct outcome_end){.exit_status = 3}, &o);
    assert_int_equal(o.kind, OUTCOME_TRAINING_FAILED);
    assert_int_equal(o.status, JOB_FAILED);
    assert_int_equal(o.message, MSG_TRAINING_FAILED);
    assert_int_equal(o.ledger.message, MSG_TRAINING_FAILED);
    assert_false(o.internal);
    end_of(JOB_RUNNING, STOP_REASON_NONE, true,
           (struct outcome_end){.exit_status = 1, .user_error = true}, &o);
    assert_int_equal(o.kind, OUTCOME_TRAINING_FAILED);
    /* A user error outranks a move. */
    end_of(JOB_RESCHEDULING, STOP_REASON_MOVE, true,
           (struct outcome_end){.exit_status = 3, .acted_on = STOP_REASON_MOVE}, &o);
    assert_int_equal(o.kind, OUTCOME_TRAINING_FAILED);
}

/* Exit 4 (asked to move, or the worker stopped it), or killed after a move
 * was asked: waits again, an interim settle; queued if it never ran. */
static void stopped_on_request_requeues(void **state)
{
    (void)state;
    struct outcome o;
    end_of(JOB_RESCHEDULING, STOP_REASON_MOVE, true, exit4, &o);
    assert_int_equal(o.kind, OUTCOME_REQUEUED);
    assert_int_equal(o.status, JOB_RESCHEDULING);
    assert_int_equal(o.message, MSG_RESCHEDULING);
    assert_true(o.requeue);
    assert_true(o.settle);
    assert_int_equal(o.ledger.status, JOB_RUNNING);
    assert_string_equal(o.attempt_reason, "moved");

    end_of(JOB_RUNNING, STOP_REASON_NONE, true, exit4, &o);
    assert_int_equal(o.kind, OUTCOME_REQUEUED);
    assert_int_equal(o.status, JOB_RESCHEDULING);
    assert_string_equal(o.attempt_reason, "worker stopped");

    end_of(JOB_QUEUED, STOP_REASON_MOVE, false, exit4, &o);
    assert_int_equal(o.status, JOB_QUEUED);
    assert_int_equal(o.message, MSG_WAITING_FOR_CAPACITY);

    for (int sig = 9; sig <= 15; sig += 6) {
        end_of(JOB_RUNNING, STOP_REASON_NONE, true,
               (struct outcome_end){.exit_status = -1, .signal = sig,
                                    .acted_on = STOP_REASON_MOVE},
               &o);
        assert_int_equal(o.kind, OUTCOME_REQUEUED);
        end_of(JOB_RESCHEDULING, STOP_REASON_MOVE, true,
               (struct outcome_end){.exit_status = -1, .signal = sig}, &o);
        assert_int_equal(o.kind, OUTCOME_REQUEUED);
    }
}

/* A crash, a kill nobody asked for, a trainer that never started: alallo's
 * failure, free, the operator told; the caller words the attempt's end. */
static void anything_else_is_internal(void **state)
{
    (void)state;
    const struct outcome_end ends[] = {
        {.exit_status = 1},
        {.exit_status = -1, .signal = 9},
        {.exit_status = -1, .signal = 11, .acted_on = STOP_REASON_MOVE},
        {.exit_status = -1, .not_started = true},
        {.exit_status = 0},
    };
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        struct outcome o;
        end_of(JOB_RUNNING, STOP_REASON_NONE, true, ends[i], &o);
        assert_int_equal(o.kind, OUTCOME_FAILED_INTERNAL);
        assert_int_equal(o.status, JOB_FAILED);
        assert_int_equal(o.message, MSG_FAILED_INTERNAL);
        assert_int_equal(o.ledger.message, MSG_FAILED_INTERNAL);
        assert_true(o.internal);
        assert_null(o.attempt_reason);
    }
}

static void done_succeeds_unless_ended(void **state)
{
    (void)state;
    struct outcome o;
    outcome_of_done(JOB_CANCELLING, &o);
    assert_int_equal(o.kind, OUTCOME_SUCCEEDED);
    assert_int_equal(o.status, JOB_SUCCEEDED);
    assert_true(o.settle);
    assert_int_equal(o.ledger.status, JOB_SUCCEEDED);
    assert_string_equal(o.attempt_reason, "succeeded");
    outcome_of_done(JOB_RUNNING, &o);
    assert_int_equal(o.kind, OUTCOME_SUCCEEDED);
    outcome_of_done(JOB_FAILED, &o);
    assert_int_equal(o.kind, OUTCOME_NONE);
    assert_false(o.settle);
}

static void cancel_at_once_or_after_the_stop(void **state)
{
    (void)state;
    struct outcome o;
    outcome_of_cancel(JOB_RESCHEDULING, false, &o);
    assert_int_equal(o.kind, OUTCOME_CANCELLED);
    assert_int_equal(o.status, JOB_CANCELLED);
    assert_true(o.settle);
    assert_int_equal(o.ledger.cancelled_from, JOB_RESCHEDULING);
    outcome_of_cancel(JOB_QUEUED, false, &o);
    assert_int_equal(o.ledger.cancelled_from, JOB_QUEUED);

    outcome_of_cancel(JOB_RUNNING, true, &o);
    assert_int_equal(o.kind, OUTCOME_CANCELLING);
    assert_int_equal(o.status, JOB_CANCELLING);
    assert_int_equal(o.stop, STOP_REASON_CANCEL);
    assert_false(o.settle);

    outcome_of_cancel(JOB_CANCELLING, true, &o);
    assert_int_equal(o.kind, OUTCOME_NONE);
    outcome_of_cancel(JOB_SUCCEEDED, false, &o);
    assert_int_equal(o.kind, OUTCOME_NONE);
    assert_false(o.settle);
}

static void worker_gone(void **state)
{
    (void)state;
    struct outcome o;
    outcome_of_worker_gone(JOB_RUNNING, &o);
    assert_int_equal(o.kind, OUTCOME_REQUEUED);
    assert_int_equal(o.status, JOB_RESCHEDULING);
    assert_int_equal(o.message, MSG_RESCHEDULING);
    assert_true(o.settle);
    assert_true(o.requeue);
    assert_int_equal(o.ledger.status, JOB_RUNNING);

    outcome_of_worker_gone(JOB_QUEUED, &o);
    assert_int_equal(o.kind, OUTCOME_REQUEUED);
    assert_int_equal(o.status, JOB_QUEUED);
    assert_int_equal(o.message, MSG_WAITING_FOR_CAPACITY);
    assert_false(o.settle);
    assert_true(o.requeue);

    outcome_of_worker_gone(JOB_CANCELLING, &o);
    assert_int_equal(o.kind, OUTCOME_CANCELLED);
    assert_int_equal(o.ledger.cancelled_from, JOB_RUNNING);
    assert_false(o.requeue);
}

static void stop_requests(void **state)
{
    (void)state;
    enum stop_reason stop;
    enum job_status to;
    assert_true(outcome_stop_request(JOB_RUNNING, true, STOP_REASON_NONE, STOP_REASON_MOVE,
                                     &stop, &to));
    assert_int_equal(stop, STOP_REASON_MOVE);
    assert_int_equal(to, JOB_RESCHEDULING);
    /* Not yet running: the move is recorded, the status stays. */
    assert_true(outcome_stop_request(JOB_QUEUED, true, STOP_REASON_NONE, STOP_REASON_MOVE,
                                     &stop, &to));
    assert_int_equal(stop, STOP_REASON_MOVE);
    assert_int_equal(to, JOB_QUEUED);
    /* The first stop asked stays. */
    assert_true(outcome_stop_request(JOB_RUNNING, true, STOP_REASON_BUDGET, STOP_REASON_MOVE,
                                     &stop, &to));
    assert_int_equal(stop, STOP_REASON_BUDGET);
    assert_int_equal(to, JOB_RUNNING);
    assert_true(outcome_stop_request(JOB_RUNNING, true, STOP_REASON_NONE,
                                     STOP_REASON_TIME_LIMIT, &stop, &to));
    assert_int_equal(stop, STOP_REASON_TIME_LIMIT);
    assert_int_equal(to, JOB_RUNNING);
    /* Refused: nothing runs it, it is cancelling, or it has ended. */
    assert_false(outcome_stop_request(JOB_RESCHEDULING, false, STOP_REASON_NONE,
                                      STOP_REASON_MOVE, &stop, &to));
    assert_false(outcome_stop_request(JOB_CANCELLING, true, STOP_REASON_CANCEL,
                                      STOP_REASON_MOVE, &stop, &to));
    assert_false(outcome_stop_request(JOB_FAILED, true, STOP_REASON_NONE, STOP_REASON_MOVE,
                                      &stop, &to));
}

/* Time limit 10 h, budget 2 x 3 h of training: the budget comes first. */
static void limits_call_for_a_stop(void **state)
{
    (void)state;
    struct ledger_job j;
    ledger_job_init(&j, 0, 4 * 3600.0, 3 * 3600.0, -1);
    struct ledger_limits l = {.time_limit_s = 10 * 3600.0, .budget_multiple = 2};
    uint64_t f;
    assert_int_equal(ledger_attempt_begin(&j, 1, 1.0, 0, 0, &f), ERR_OK);
    assert_int_equal(outcome_limit_stop(&j, &l, 5 * 3600.0), STOP_REASON_NONE);
    assert_int_equal(outcome_limit_stop(&j, &l, 6 * 3600.0), STOP_REASON_BUDGET);
    l.time_limit_s = 5 * 3600.0;
    assert_int_equal(outcome_limit_stop(&j, &l, 4 * 3600.0), STOP_REASON_NONE);
    assert_int_equal(outcome_limit_stop(&j, &l, 5 * 3600.0), STOP_REASON_TIME_LIMIT);
}

/* Every cancel that charges steps has a partial model, at the last step
 * charged: after an attempt's end, while re-scheduling, and when the
 * worker of a cancelling job is lost. */
static void a_charged_cancel_has_its_partial_model(void **state)
{
    (void)state;
    struct ledger_job *lj = calloc(1, sizeof *lj);
    assert_non_null(lj);
    ledger_job_init(lj, 0, 1e6, 1e6, -1);
    uint64_t f;
    /* A first attempt checkpoints 7 of 9 steps and is moved; a second one
     * takes it to 12, checkpointed at 10, and is then cancelled. */
    assert_int_equal(ledger_attempt_begin(lj, 1, 3600, 0, 0, &f), ERR_OK);
    assert_int_equal(ledger_attempt_progress(lj, f, 9, 9), ERR_OK);
    assert_int_equal(ledger_attempt_checkpoint(lj, f, 7), ERR_OK);
    assert_int_equal(ledger_attempt_end(lj, f, 10, 7), ERR_OK);

    /* Cancelled while re-scheduling: the move's checkpoint. */
    struct outcome o;
    outcome_of_cancel(JOB_RESCHEDULING, false, &o);
    assert_int_equal(o.kind, OUTCOME_CANCELLED);
    assert_true(o.partial_model);
    struct ledger_row rows[LEDGER_MAX_ROWS];
    size_t n;
    struct ledger_job *copy = malloc(sizeof *copy);
    assert_non_null(copy);
    *copy = *lj;
    assert_int_equal(ledger_settle(copy, &o.ledger, 20, rows, LEDGER_MAX_ROWS, &n), ERR_OK);
    assert_true(ledger_net_micros(copy) > 0);
    assert_int_equal(outcome_partial_step(&o, copy), 7);
    /* Queued, it never trained: none. */
    outcome_of_cancel(JOB_QUEUED, false, &o);
    assert_false(o.partial_model);
    assert_int_equal(outcome_partial_step(&o, copy), 0);

    /* The worker of the cancelling second attempt is lost: its latest
     * checkpoint (10) is charged, and is the partial model. */
    assert_int_equal(ledger_attempt_begin(lj, 2, 3600, 7, 30, &f), ERR_OK);
    assert_int_equal(ledger_attempt_progress(lj, f, 12, 5), ERR_OK);
    assert_int_equal(ledger_attempt_checkpoint(lj, f, 10), ERR_OK);
    assert_int_equal(ledger_attempt_end(lj, f, 40, lj->latest_checkpoint), ERR_OK);
    outcome_of_worker_gone(JOB_CANCELLING, &o);
    assert_int_equal(o.kind, OUTCOME_CANCELLED);
    assert_true(o.partial_model);
    assert_int_equal(ledger_settle(lj, &o.ledger, 50, rows, LEDGER_MAX_ROWS, &n), ERR_OK);
    long billed = 0;
    for (int i = 0; i < lj->n_attempts; i++)
        if (lj->attempts[i].billed_to > billed)
            billed = lj->attempts[i].billed_to;
    assert_int_equal(billed, 10);
    assert_int_equal(outcome_partial_step(&o, lj), 10);
    /* Other outcomes never make one. */
    outcome_of_done(JOB_RUNNING, &o);
    assert_int_equal(outcome_partial_step(&o, lj), 0);
    free(copy);
    free(lj);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stop_names_round_trip),
        cmocka_unit_test(worker_is_told_cancel_or_move),
        cmocka_unit_test(cancel_ends_as_cancelled),
        cmocka_unit_test(limits_and_memory_fail_free),
        cmocka_unit_test(user_error_is_training_failed),
        cmocka_unit_test(stopped_on_request_requeues),
        cmocka_unit_test(anything_else_is_internal),
        cmocka_unit_test(done_succeeds_unless_ended),
        cmocka_unit_test(cancel_at_once_or_after_the_stop),
        cmocka_unit_test(worker_gone),
        cmocka_unit_test(stop_requests),
        cmocka_unit_test(limits_call_for_a_stop),
        cmocka_unit_test(a_charged_cancel_has_its_partial_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
