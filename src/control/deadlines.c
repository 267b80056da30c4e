/* deadlines.c - see deadlines.h. */
#include "control/deadlines.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "control/job_move.h"
#include "control/sched_link.h"
#include "core/job.h"
#include "core/job_hyper.h"
#include "core/log.h"
#include "core/stop_reason.h"
#include "core/text.h"
#include "sched/outcome.h"
#include "sched/resched.h"
#include "sched/time_left.h"

#define RUNNING_MAX 1000 /* running finish_by jobs looked at per check */

struct deadline_ctx {
    const char *attempt;            /* the attempt judged; the job must still be on it */
    struct resched_deadline d;
    const char *from, *to;          /* worker names; to NULL: stays */
    bool note_missed;               /* say that the deadline cannot be met */
    double by;                      /* the deadline */
    int64_t now;
};

static bool missed_said(const char *hyper)
{
    json_t *o = json_loads(hyper ? hyper : "", 0, NULL);
    bool said = json_is_true(json_object_get(o, DEADLINES_MISSED_KEY));
    json_decref(o);
    return said;
}

static enum alallo_err deadline_cb(struct store_job *j, struct store_attempt *unused,
                                   struct store_writes *w, void *vctx)
{
    struct deadline_ctx *c = vctx;
    (void)unused;
    if (j->status != JOB_RUNNING || strcmp(j->active_attempt, c->attempt) != 0 ||
        j->stop_reason[0])
        return ERR_CONFLICT; /* it changed meanwhile: judged again next time */
    double by = c->by;
    char by_text[40], high_text[40], line[STORE_MESSAGE_MAX];
    job_moment_text(by_text, sizeof by_text, by, false);
    /* An end by the deadline is written down, as the deadline is; a later
     * one up (never shown earlier than it is). */
    job_moment_text(high_text, sizeof high_text, c->d.high_s, c->d.missed);
    enum alallo_err e = ERR_OK;
    bool said = missed_said(j->hyper);
    if (c->note_missed && !said) {
        if (!job_hyper_set(j->hyper, sizeof j->hyper, DEADLINES_MISSED_KEY, json_true()))
            return ERR_INTERNAL;
        text_printf(line, sizeof line,
                    "No capacity can finish this job by %s any more; it goes on at the fastest "
                    "capacity, finishing by %s at the latest.",
                    by_text, high_text);
        e = store_writes_event(w, c->now, "warn", "message", line, NULL);
        if (!e)
            e = store_writes_log(w, c->attempt, line);
        if (!e)
            log_line("info", "job %s: %s", j->id, line);
    }
    if (!e && c->to) {
        enum stop_reason stop;
        enum job_status to;
        if (!outcome_stop_request(j->status, true, STOP_REASON_NONE, STOP_REASON_MOVE, &stop,
                                  &to))
            return ERR_CONFLICT;
        text_copy(j->stop_reason, sizeof j->stop_reason, stop_reason_name(stop));
        if (to != j->status)
            e = job_move_to(j, to, MSG_RESCHEDULING);
        if (!e) {
            if (c->d.missed)
                text_printf(line, sizeof line,
                            "Moving from worker %s to the faster worker %s, from a checkpoint: "
                            "the job finishes sooner there (by %s at the latest).",
                            c->from, c->to, high_text);
            else
                text_printf(line, sizeof line,
                            "Moving from worker %s to worker %s, from a checkpoint, to finish by "
                            "%s (by %s at the latest there).",
                            c->from, c->to, by_text, high_text);
            e = store_writes_event(w, c->now, "info", "message", line, NULL);
            if (!e)
                e = store_writes_log(w, c->attempt, line);
            if (!e)
                log_line("info", "job %s: %s", j->id, line);
        }
    }
    if (!e && !(c->note_missed && !said) && !c->to)
        return ERR_CONFLICT; /* nothing to write */
    return e;
}

/* The rest of running job j as a new attempt would run it: from its latest
 * checkpoint, with its plan's loading and GPU need. False without a plan. */
static bool rest_of(struct control *ctl, const struct store_job *j, const struct sched_state *st,
                    struct sched_job *out)
{
    struct sched_plan p;
    if (!sched_plan_read(j->plan, &p) || j->max_steps <= 0 || !(p.finish_by_s > 0))
        return false; /* the deadline the passes keep to is the plan's */
    long from = st->ledger.latest_checkpoint;
    double left = (double)(j->max_steps - (from > 0 ? from : 0)) / (double)j->max_steps;
    *out = (struct sched_job){.goal = SCHED_FINISH_BY,
                              .mem_bytes = j->memory_bytes,
                              .gpu_mem_bytes = p.gpu_need,
                              .params = p.params,
                              .work_flops = (left > 0 ? left : 0) * sched_link_train_tokens(j) *
                                            p.flops_per_token *
                                            sched_link_model_factor(ctl->sched, j->model),
                              .startup_s = p.startup_s,
                              .finish_by_s = p.finish_by_s};
    sched_link_finish_by_factors(ctl->sched, p.method, out->finish_hi);
    return out->work_flops > 0;
}

/* Judges one running job against the workers w[n], free at free_at[n];
 * a worker it moves to is taken (free_at +inf) for the jobs after it. */
static void check_one(struct control *ctl, const char *id, const struct sched_worker *w, int n,
                      double *free_at, double now)
{
    struct store_job *j = calloc(1, sizeof *j);
    struct sched_state *st = calloc(1, sizeof *st);
    struct store_attempt a;
    if (!j || !st || store_job_get(ctl->store, NULL, id, j) != ERR_OK ||
        strcmp(j->goal, "finish_by") != 0 || !j->active_attempt[0] || j->stop_reason[0] ||
        store_attempt_get(ctl->store, j->active_attempt, &a) != ERR_OK)
        goto out;
    sched_state_of_job(j, st);
    struct sched_job rest;
    if (!st->has_tl || !rest_of(ctl, j, st, &rest))
        goto out;
    struct tl_value v;
    tl_value(&st->tl, now, &v);
    /* Judged on the attempt's own pace, never on the estimate it started
     * with (the figures that placed it, calibrated apart from the
     * placement's): no move and no verdict before then. */
    if (v.basis != TL_PACE)
        goto out;
    struct resched_deadline d;
    resched_on_deadline(&rest, now + v.high_s, w, (size_t)n, free_at, now, &d);
    struct deadline_ctx c = {.attempt = j->active_attempt, .d = d, .from = a.worker,
                             .note_missed = d.missed, .by = rest.finish_by_s,
                             .now = (int64_t)(now * 1000.0)};
    if (d.move_to >= 0)
        c.to = w[d.move_to].name;
    if ((c.note_missed || c.to) && store_job_update(ctl->store, id, NULL, deadline_cb, &c) ==
                                           ERR_OK &&
        c.to)
        free_at[d.move_to] = INFINITY;
out:
    free(j);
    free(st);
}

struct running_ids {
    char (*ids)[IDS_MAX];
    int n;
};

/* Collects the running finish_by jobs (by their plan's goal), so that the
 * others are never read. */
static void collect(const struct store_waiting *row, void *vctx)
{
    struct running_ids *r = vctx;
    struct sched_plan p;
    if (row->running && r->n < RUNNING_MAX && sched_plan_read(row->plan, &p) &&
        p.goal == SCHED_FINISH_BY)
        text_copy(r->ids[r->n++], IDS_MAX, row->id);
}

void control_deadlines_check(struct control *ctl, int64_t now_ms)
{
    struct running_ids r = {.ids = calloc(RUNNING_MAX, IDS_MAX)};
    struct sched_worker *w = calloc(SCHED_LINK_WORKERS, sizeof *w);
    double *free_at = calloc(SCHED_LINK_WORKERS, sizeof *free_at);
    double now = (double)now_ms / 1000.0;
    if (!r.ids || !w || !free_at ||
        store_waiting_each(ctl->store, SCHED_LINK_QUEUE + SCHED_LINK_WORKERS, collect, &r) !=
            ERR_OK ||
        r.n == 0)
        goto out;
    int n = sched_link_workers(ctl, now, w, SCHED_LINK_WORKERS);
    sched_free_at(w, (size_t)n, now, free_at);
    for (int i = 0; i < r.n; i++)
        check_one(ctl, r.ids[i], w, n, free_at, now);
out:
    free(r.ids);
    free(w);
    free(free_at);
}
