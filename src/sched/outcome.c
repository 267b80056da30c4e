/* outcome.c - the decisions of outcome.h. */
#include "sched/outcome.h"

#include <string.h>

#include "core/trainer_protocol.h"

enum stop_reason outcome_worker_stop(enum job_status status, enum stop_reason stop)
{
    if (status == JOB_CANCELLING || stop == STOP_REASON_CANCEL ||
        stop == STOP_REASON_TIME_LIMIT || stop == STOP_REASON_BUDGET ||
        stop == STOP_REASON_NOT_AVAILABLE || stop == STOP_REASON_NOT_AVAILABLE_LOWER)
        return STOP_REASON_CANCEL;
    if (stop == STOP_REASON_MOVE)
        return STOP_REASON_MOVE;
    return STOP_REASON_NONE;
}

bool outcome_stop_request(enum job_status status, bool has_attempt, enum stop_reason current,
                          enum stop_reason asked, enum stop_reason *stop,
                          enum job_status *status_after)
{
    *stop = current;
    *status_after = status;
    if (job_status_is_terminal(status) || status == JOB_CANCELLING || !has_attempt)
        return false;
    if (current == STOP_REASON_NONE)
        *stop = asked;
    if (*stop == STOP_REASON_MOVE && status == JOB_RUNNING)
        *status_after = JOB_RESCHEDULING;
    return true;
}

/* Nothing changes: the job keeps `status`. */
static void nothing(enum job_status status, struct outcome *out)
{
    *out = (struct outcome){.kind = OUTCOME_NONE, .status = status, .message = MSG_NONE};
}

/* A final outcome: `status` with message m, settled as final. */
static void final(struct outcome *out, enum outcome_kind kind, enum job_status status,
                  enum job_message m, enum job_status cancelled_from, const char *reason)
{
    *out = (struct outcome){.kind = kind, .status = status, .message = m, .settle = true,
                            .ledger = {.status = status, .message = m,
                                       .cancelled_from = cancelled_from},
                            .attempt_reason = reason};
}

/* Waits for a placement again as `status` (queued or re-scheduling);
 * `settle`: an interim settle of what its attempts keep. */
static void requeued(struct outcome *out, enum job_status status, bool settle, const char *reason)
{
    *out = (struct outcome){.kind = OUTCOME_REQUEUED, .status = status,
                            .message = status == JOB_QUEUED ? MSG_WAITING_FOR_CAPACITY
                                                            : MSG_RESCHEDULING,
                            .settle = settle,
                            .ledger = {.status = JOB_RUNNING, .message = MSG_NONE,
                                       .cancelled_from = JOB_RUNNING},
                            .requeue = true, .attempt_reason = reason};
}

static enum job_message stop_message(enum stop_reason s)
{
    switch (s) {
    case STOP_REASON_TIME_LIMIT: return MSG_STOPPED_TIME_LIMIT;
    case STOP_REASON_BUDGET: return MSG_STOPPED_BUDGET;
    case STOP_REASON_NOT_AVAILABLE: return MSG_NOT_AVAILABLE;
    case STOP_REASON_NOT_AVAILABLE_LOWER: return MSG_NOT_AVAILABLE_LOWER_PRECISION;
    default: return MSG_NONE;
    }
}

void outcome_of_end(const struct outcome_job *job, const struct outcome_end *end,
                    struct outcome *out)
{
    bool asked_move = end->acted_on == STOP_REASON_MOVE || job->stop == STOP_REASON_MOVE;
    /* Stopped on request: exit 4 after a checkpoint, or killed by the
     * worker after its grace period (then the latest checkpoint counts). */
    bool stopped = end->exit_status == TPROTO_EXIT_STOPPED ||
                   (asked_move && (end->signal == 9 || end->signal == 15));
    bool user_error = end->user_error || end->exit_status == TPROTO_EXIT_USER_ERROR;
    enum job_message m = stop_message(job->stop);

    if (job->status == JOB_CANCELLING || job->stop == STOP_REASON_CANCEL) {
        final(out, OUTCOME_CANCELLED, JOB_CANCELLED, MSG_NONE,
              job->trained ? JOB_RUNNING : JOB_QUEUED, "cancelled");
        out->partial_model = job->trained;
    } else if (m != MSG_NONE) {
        final(out, OUTCOME_STOPPED, JOB_FAILED, m, JOB_RUNNING,
              m == MSG_STOPPED_TIME_LIMIT ? "time limit"
              : m == MSG_STOPPED_BUDGET   ? "budget"
                                          : "needs more memory than any worker offers");
    } else if (user_error) {
        final(out, OUTCOME_TRAINING_FAILED, JOB_FAILED, MSG_TRAINING_FAILED, JOB_RUNNING,
              "training failed");
    } else if (stopped && (asked_move || job->stop == STOP_REASON_NONE)) {
        /* Stopped on request after a checkpoint: continue elsewhere. */
        requeued(out, job->status == JOB_QUEUED ? JOB_QUEUED : JOB_RESCHEDULING, true,
                 job->stop == STOP_REASON_MOVE ? "moved" : "worker stopped");
    } else {
        final(out, OUTCOME_FAILED_INTERNAL, JOB_FAILED, MSG_FAILED_INTERNAL, JOB_RUNNING, NULL);
        out->internal = true;
    }
}

void outcome_of_done(enum job_status status, struct outcome *out)
{
    if (job_status_is_terminal(status)) {
        nothing(status, out);
        return;
    }
    final(out, OUTCOME_SUCCEEDED, JOB_SUCCEEDED, MSG_NONE, JOB_RUNNING,
          OUTCOME_REASON_SUCCEEDED);
}

void outcome_of_cancel(enum job_status status, bool has_attempt, struct outcome *out)
{
    if (status == JOB_CANCELLING || job_status_is_terminal(status)) {
        nothing(status, out);
        return;
    }
    if (has_attempt) {
        *out = (struct outcome){.kind = OUTCOME_CANCELLING, .status = JOB_CANCELLING,
                                .message = MSG_NONE, .stop = STOP_REASON_CANCEL};
        return;
    }
    /* Nothing runs it: cancelled at once. Steps it did in earlier attempts
     * (re-scheduling) are billed like a cancel while running, and kept as
     * its partial model. */
    final(out, OUTCOME_CANCELLED, JOB_CANCELLED, MSG_NONE, status, NULL);
    out->partial_model = status != JOB_QUEUED;
}

void outcome_of_worker_gone(enum job_status status, struct outcome *out)
{
    if (job_status_is_terminal(status))
        nothing(status, out);
    else if (status == JOB_CANCELLING) {
        /* Billed as a cancel while running: its latest checkpoint is what
         * it keeps, and what it is charged for. */
        final(out, OUTCOME_CANCELLED, JOB_CANCELLED, MSG_NONE, JOB_RUNNING, NULL);
        out->partial_model = true;
    } else if (status == JOB_QUEUED)
        requeued(out, JOB_QUEUED, false, NULL); /* lost before training started */
    else
        requeued(out, JOB_RESCHEDULING, true, NULL);
}

long outcome_partial_step(const struct outcome *o, const struct ledger_job *settled)
{
    if (o->kind != OUTCOME_CANCELLED || !o->partial_model)
        return 0;
    /* Attempts continue one another: the last step any of them keeps is
     * the step of the job's model. */
    long step = 0;
    for (int i = 0; i < settled->n_attempts; i++)
        if (settled->attempts[i].kept_step > step)
            step = settled->attempts[i].kept_step;
    return step;
}

enum stop_reason outcome_limit_stop(const struct ledger_job *ledger,
                                     const struct ledger_limits *limits, double now)
{
    enum job_message m = ledger_limit_reached(ledger, limits, now);
    if (m == MSG_STOPPED_TIME_LIMIT)
        return STOP_REASON_TIME_LIMIT;
    if (m == MSG_STOPPED_BUDGET)
        return STOP_REASON_BUDGET;
    return STOP_REASON_NONE;
}
