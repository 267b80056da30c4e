/* resched.c - re-scheduling decisions. */
#include "sched/resched.h"

#include <math.h>
#include <stdlib.h>

static const char *const reason_texts[RESCHED_CAUSE_COUNT] = {
    "needs more memory",
    "worker lost",
    "worker drained",
    "spot capacity taken back",
};

const char *resched_reason_text(enum resched_cause c)
{
    if ((int)c < 0 || c >= RESCHED_CAUSE_COUNT)
        return "";
    return reason_texts[c];
}

void resched_on_memory(int64_t peak_rss_bytes, int64_t planned_bytes,
                       const struct sched_worker *current, const struct sched_worker *workers,
                       size_t n_workers, const struct plan_job *job,
                       struct resched_decision *out)
{
    int64_t peak = peak_rss_bytes > 0 ? peak_rss_bytes : 0;
    int64_t extra = peak / 100 * RESCHED_MEMORY_HEADROOM_PCT +
                    (peak % 100 * RESCHED_MEMORY_HEADROOM_PCT + 99) / 100;
    int64_t with_headroom = peak > INT64_MAX - extra ? INT64_MAX : peak + extra;
    int64_t need = with_headroom > planned_bytes ? with_headroom : planned_bytes;
    *out = (struct resched_decision){.action = RESCHED_KEEP, .cause = RESCHED_MEMORY,
                                     .mem_bytes = need, .message = MSG_NONE};
    if (peak_rss_bytes <= current->mem_bytes)
        return;
    enum plan_fit fit = planner_fit_for_need(job, need, workers, n_workers);
    if (fit == PLAN_FITS) {
        out->action = RESCHED_MOVE;
        out->message = MSG_RESCHEDULING;
        out->stop = "move";
        out->reason = resched_reason_text(RESCHED_MEMORY);
        return;
    }
    out->action = RESCHED_FAIL;
    out->message = planner_fit_message(fit);
    out->reason = resched_reason_text(RESCHED_MEMORY);
    out->stop = "move";
}

void resched_on_worker(enum resched_cause cause, int64_t mem_bytes, struct resched_decision *out)
{
    *out = (struct resched_decision){.action = RESCHED_KEEP, .cause = cause,
                                     .mem_bytes = mem_bytes, .message = MSG_NONE};
    switch (cause) {
    case RESCHED_WORKER_LOST:
        /* Nobody is there to checkpoint: continue from the latest one. */
        out->action = RESCHED_MOVE;
        break;
    case RESCHED_DRAINED:
    case RESCHED_SPOT_TAKEN:
        out->action = RESCHED_CHECKPOINT_THEN_MOVE;
        out->stop = "move";
        break;
    default:
        return;
    }
    out->message = MSG_RESCHEDULING;
    out->reason = resched_reason_text(cause);
}

/* A job that will miss its deadline anyway moves only for a gain of at
 * least this share of its time left at the 90% level: a move costs a
 * checkpoint, a start-up and the steps since the checkpoint. */
#define DEADLINE_MISSED_GAIN 0.05

void resched_on_deadline(const struct sched_job *job, double current_high_s,
                         const struct sched_worker *workers, size_t n_workers,
                         const double *free_at, double now, struct resched_deadline *out)
{
    *out = (struct resched_deadline){.missed = false, .move_to = -1, .high_s = current_high_s};
    if (current_high_s <= job->finish_by_s)
        return;
    double *idle = malloc((n_workers ? n_workers : 1) * sizeof *idle);
    struct sched_choice c = {.worker = -1};
    if (idle) {
        for (size_t i = 0; i < n_workers; i++)
            idle[i] = free_at[i] <= now ? free_at[i] : INFINITY;
        struct sched_job j = *job;
        j.goal = SCHED_FINISH_BY;
        sched_choose(&j, workers, n_workers, idle, now, &c);
        free(idle);
    }
    if (c.worker >= 0 && c.high_s <= job->finish_by_s) {
        out->move_to = c.worker;
        out->high_s = c.high_s;
        return;
    }
    out->missed = true;
    if (c.worker >= 0 &&
        c.high_s < current_high_s - DEADLINE_MISSED_GAIN * (current_high_s - now)) {
        out->move_to = c.worker;
        out->high_s = c.high_s;
    }
}
