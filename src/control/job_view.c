/* job_view.c - the policy of a job's view: its message and numbers (job_view.h). */
#include "control/job_view.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "control/sched_link.h"
#include "core/job.h"
#include "sched/ledger.h"
#include "sched/time_left.h"

const char *control_job_message(const struct store_job *j, int64_t now_ms)
{
    /* "Starting" promised a worker at creation; if none has claimed the
     * job soon after, it is waiting for capacity. */
    if (j->status == JOB_QUEUED && !j->active_attempt[0] &&
        strcmp(j->message, job_message_text(MSG_STARTING)) == 0 &&
        now_ms - j->created_ms > CONTROL_STARTING_GRACE_MS)
        return job_message_text(MSG_WAITING_FOR_CAPACITY);
    return j->message;
}

/* Time left of job j at now_ms: a range and its basis. From the time-left
 * state of its current attempt (src/sched/time_left.h) while one runs;
 * from the estimate before the first start. False when it has ended. */
static bool time_left(const struct store_job *j, const struct sched_state *st, int64_t now_ms,
                      double *low, double *high, const char **basis)
{
    if (job_status_is_terminal(j->status) || j->max_steps <= 0)
        return false;
    double now = (double)now_ms / 1000.0;
    if (st->has_tl && j->active_attempt[0]) {
        struct tl_value v;
        tl_value_of_job(&st->tl, now, j->est_low_s, j->est_high_s,
                        now - (double)j->created_ms / 1000.0, &v);
        *low = v.low_s;
        *high = v.high_s;
        *basis = tl_basis_name(v.basis);
        return true;
    }
    *basis = "estimate";
    double frac = (double)(j->max_steps - j->steps_done) / (double)j->max_steps;
    if (frac < 0)
        frac = 0;
    if (j->steps_done == 0 && j->status == JOB_QUEUED) {
        /* Counting down from the estimate made at creation, never below
         * the training still to do. */
        double gone = (now_ms - j->created_ms) / 1000.0;
        tl_before_start(j->est_low_s, j->est_high_s, j->est_train_low_s, j->est_train_high_s,
                        gone, low, high);
    } else {
        *low = j->est_train_low_s * frac;
        *high = j->est_train_high_s * frac;
    }
    if (*high < *low)
        *high = *low;
    return *high > 0;
}

/* What cancelling job j now would cost (net): ledger_cancel_micros(), the
 * settle a cancel in this state ends with. The status it is cancelled from
 * is the one the server's cancel settles with (src/sched/outcome.c): a
 * running or cancelling job that has trained no step is billed as queued. */
static double cancel_now(const struct store_job *j, const struct sched_state *st, int64_t now_ms)
{
    if (job_status_is_terminal(j->status))
        return j->price_charged - j->price_refunded;
    enum job_status from = ledger_cancel_from(j->status, j->steps_done);
    return sched_link_money(ledger_cancel_micros(&st->ledger, from, (double)now_ms / 1000.0));
}

void control_job_view(const struct store_job *j, int64_t now_ms, struct job_view *out)
{
    memset(out, 0, sizeof *out);
    out->time_left_basis = "estimate";
    struct sched_state *st = malloc(sizeof *st); /* large: not on the stack */
    if (!st)
        return;
    sched_state_of_job(j, st);
    double low = 0, high = 0;
    const char *basis = "estimate";
    if (time_left(j, st, now_ms, &low, &high, &basis)) {
        out->has_time_left = true;
        out->time_left_low_s = job_range_low_s(low);
        out->time_left_high_s = job_range_high_s(high);
        job_time_left_range_text(out->time_left_text, sizeof out->time_left_text, low, high);
        out->time_left_basis = basis;
        out->estimated_finish_s = now_ms / 1000 + (int64_t)ceil(high);
    }
    out->cancel_now = cancel_now(j, st, now_ms);
    free(st);
}
