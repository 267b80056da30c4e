/* lifecycle_internal.c - see lifecycle_internal.h. */
#include "control/lifecycle_internal.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/jobs.h"
#include "core/text.h"

enum alallo_err lifecycle__note(struct store_writes *w, int64_t now, const char *level,
                                const char *fmt, ...)
{
    char msg[STORE_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return store_writes_event(w, now, level, "message", msg, NULL);
}

enum stop_reason lifecycle__stop_of(const struct store_job *j)
{
    enum stop_reason r;
    return stop_reason_parse(j->stop_reason, &r) ? r : STOP_REASON_NONE;
}

void lifecycle__set_stop(struct store_job *j, enum stop_reason r)
{
    text_copy(j->stop_reason, sizeof j->stop_reason, stop_reason_name(r));
}

bool lifecycle__attempt_owns(const struct store_job *j, const struct store_attempt *a)
{
    return a && a->fence == j->fence && attempt_status_of(a->status) != ATTEMPT_ENDED &&
           strcmp(j->active_attempt, a->id) == 0;
}

struct sched_state *lifecycle__state_load(const struct store_job *j)
{
    struct sched_state *st = malloc(sizeof *st);
    if (st)
        sched_state_of_job(j, st);
    return st;
}

enum alallo_err lifecycle__state_save(struct store_job *j, const struct sched_state *st)
{
    return sched_state_write(st, j->ledger_state, sizeof j->ledger_state) ? ERR_OK
                                                                           : ERR_TOO_LARGE;
}

enum alallo_err lifecycle__training_log(struct store_writes *w, const char *attempt,
                                              const char *fmt, ...)
{
    char line[STORE_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    return store_writes_log(w, attempt, line);
}

void lifecycle__events_ctx_rerun(struct events_ctx *c)
{
    free(c->st);
    c->st = NULL;
    c->n_cal = 0;
    c->broken = false;
    c->stop = TPROTO_STOP_NONE;
    c->partial_step = 0;
}

/* The store's id of the job's attempt whose fence is `fence`. */
static const char *attempt_of_fence(const struct events_ctx *c, const struct store_attempt *cur,
                                    int64_t fence)
{
    if (cur && cur->fence == fence)
        return cur->id;
    for (int i = 0; i < c->n_history; i++)
        if (c->history[i].fence == fence)
            return c->history[i].id;
    return "";
}

enum alallo_err lifecycle__settle(struct events_ctx *c, struct store_job *j,
                                  const struct store_attempt *current,
                                  const struct ledger_outcome *outcome, struct store_writes *w)
{
    struct sched_state *st = c->st;
    if (!st || st->ledger.closed)
        return ERR_OK;
    struct ledger_row rows[LEDGER_MAX_ROWS];
    size_t n = 0;
    enum alallo_err e =
        ledger_settle(&st->ledger, outcome, (double)c->now / 1000.0, rows, LEDGER_MAX_ROWS, &n);
    if (e) {
        log_line("error", "job %s: the ledger refused to settle (%s)", j->id, err_message(e));
        return ERR_OK;
    }
    for (size_t i = 0; !e && i < n; i++) {
        struct store_ledger_row r = {.created_ms = c->now};
        text_copy(r.account, sizeof r.account, j->account);
        text_copy(r.job, sizeof r.job, j->id);
        text_copy(r.attempt, sizeof r.attempt, attempt_of_fence(c, current, rows[i].attempt_id));
        text_copy(r.kind, sizeof r.kind, ledger_kind_name(rows[i].kind));
        text_copy(r.reason, sizeof r.reason, ledger_reason_text(rows[i].reason));
        r.amount = sched_link_money(rows[i].amount_micros);
        r.from_step = rows[i].from_step;
        r.to_step = rows[i].to_step;
        r.steps = rows[i].to_step - rows[i].from_step;
        e = store_writes_ledger(w, &r);
    }
    j->price_charged = sched_link_money(st->ledger.charged_micros);
    j->price_refunded = sched_link_money(st->ledger.refunded_micros);
    return e;
}

enum alallo_err lifecycle__settle_as(struct events_ctx *c, struct store_job *j,
                                     const struct store_attempt *current, enum job_status status,
                                     enum job_message m, enum job_status from, struct store_writes *w)
{
    struct ledger_outcome o = {.status = status, .message = m, .cancelled_from = from};
    return lifecycle__settle(c, j, current, &o, w);
}

/* A success writes the most rows: seven of its last attempt
 * (lifecycle__ledger_end, its worker's own speed among them), the job's,
 * its time spread, its price's two spreads, and two a time-left cell.
 * (At 8, a success's time-left rows were dropped unsaid.) */
_Static_assert(CAL_MAX >= 7 + 4 + 2 * EST_TL_CELLS, "a success's calibration rows fit in CAL_MAX");

enum alallo_err lifecycle__calibrate(struct events_ctx *c, struct store_writes *w,
                                     const struct store_calibration *k)
{
    assert(c->n_cal < CAL_MAX);
    if (!(k->actual_a > 0) || !(k->nominal_a > 0) || c->n_cal >= CAL_MAX)
        return ERR_OK;
    c->cal[c->n_cal++] = *k;
    return store_writes_calibration(w, k);
}

/* The name of the worker the job's attempt of `fence` ran on; NULL when
 * not known. By fence, not by the job's active attempt: that is cleared
 * when the attempt ends (lifecycle__end_attempt), before its ledger's end
 * is read, and the worker's rows were never written. */
static const char *attempt_worker(const struct events_ctx *c, uint64_t fence)
{
    for (int i = 0; i < c->n_history; i++)
        if ((uint64_t)c->history[i].fence == fence && c->history[i].worker[0])
            return c->history[i].worker;
    return NULL;
}

enum alallo_err lifecycle__ledger_end(struct events_ctx *c, struct store_job *j, long kept,
                                      struct store_writes *w)
{
    struct sched_state *st = c->st;
    if (!st)
        return ERR_OK;
    struct ledger_job *lj = &st->ledger;
    struct ledger_attempt *la = ledger_current(lj, lj->fence);
    if (!la)
        return ERR_OK;
    if (kept < 0)
        kept = lj->latest_checkpoint;
    ledger_attempt_end(lj, lj->fence, (double)c->now / 1000.0, kept);
    struct sched_plan p;
    enum alallo_err e = ERR_OK;
    if (sched_plan_read(j->plan, &p)) {
        /* The attempt against the plain FLOPs model teaches the model's
         * own speed and its shape's; the estimator's history gets the
         * error of the factor this attempt was predicted with (measured
         * out of sample, so that the band is the prediction's). */
        double used = st->model_factor > 0 ? st->model_factor : 1.0;
        /* Only a prediction made with the shape's own factor measures the
         * error of one (a new shape's estimate has the default bands). */
        enum sched_link_basis basis;
        sched_link_speed(c->ctl->sched, j, &basis);
        bool warm = basis == SCHED_SHAPE_OWN;
        bool warm_start = sched_link_shape_known(c->ctl->sched, j, "start");
        double raw = (double)(la->done_step - la->start_step) * st->nominal_step_s / used;
        /* The attempt's clock holds more than steps: a python grader's
         * seconds are their own term (sched_link_python_s), and what runs
         * between steps (validation, sample answers) is the estimate's
         * share of the steps' time (plan between_share). The speed is
         * the steps' alone, or the estimate would count those twice once
         * learnt. At least a tenth of the clock teaches it. */
        double steps_s = (la->train_s -
                          sched_link_python_s(j, la->done_step - la->start_step)) /
                         (1.0 + p.between_share);
        if (steps_s < 0.1 * la->train_s)
            steps_s = 0.1 * la->train_s;
        struct store_calibration k = {.method = (int)p.method,
                                      .class_ = st->worker_class,
                                      .goal = (int)p.goal,
                                      .actual_a = steps_s,
                                      .nominal_a = raw,
                                      .created_ms = c->now};
        text_copy(k.kind, sizeof k.kind, SCHED_LINK_FACTOR_KIND);
        text_copy(k.model, sizeof k.model, j->model);
        e = lifecycle__calibrate(c, w, &k);
        sched_link_shape_key(j, "speed", k.model, sizeof k.model);
        if (!e)
            e = lifecycle__calibrate(c, w, &k);
        /* The worker's own factor, from every attempt it ran. */
        const char *worker = attempt_worker(c, la->fence);
        if (!e && worker &&
            text_printf(k.model, sizeof k.model, "worker:%s", worker))
            e = lifecycle__calibrate(c, w, &k);
        /* The worker's own speed against the fleet's: the prediction's
         * offset, before the error joins the band it is measured from. */
        if (!e && worker && basis != SCHED_SHAPE_NONE) {
            double off = sched_link_worker_offset(c->ctl->sched, k.method, k.class_, !warm,
                                                  steps_s, raw * used, st->speed_log);
            struct store_calibration o = k;
            o.nominal_a = steps_s * exp(-off);
            if (isfinite(off) && text_printf(o.model, sizeof o.model, "%s%s",
                                             SCHED_LINK_WORKER_SPEED_PREFIX, worker))
                e = lifecycle__calibrate(c, w, &o);
        }
        /* The prediction's error: of the shape's own factor ("train"), or
         * of one borrowed from a neighbour or the fleet ("borrow"). */
        text_copy(k.kind, sizeof k.kind, warm ? "train" : "borrow");
        k.model[0] = '\0';
        k.nominal_a = raw * used;
        if (!e && basis != SCHED_SHAPE_NONE)
            e = lifecycle__calibrate(c, w, &k);
        /* The fixed costs of an attempt that ran to the end: its running
         * time that was not steps, against the nominal loading. */
        double fixed = la->ended_s - la->began_s - la->train_s;
        double sf = p.startup_factor > 0 ? p.startup_factor : 1.0;
        if (!e && la->done_step >= j->max_steps && la->start_step == 0 && fixed > 0 &&
            p.startup_s > 0) {
            k.actual_a = fixed;
            k.nominal_a = p.startup_s / sf;
            text_copy(k.kind, sizeof k.kind, SCHED_LINK_FACTOR_KIND);
            sched_link_shape_key(j, "start", k.model, sizeof k.model);
            e = lifecycle__calibrate(c, w, &k);
            text_copy(k.kind, sizeof k.kind, "start");
            k.model[0] = '\0';
            k.nominal_a = p.startup_s;
            if (!e && warm_start)
                e = lifecycle__calibrate(c, w, &k);
        }
    }
    st->has_tl = false;
    return e;
}

void lifecycle__end_attempt(struct store_job *j, struct store_attempt *a, int64_t now,
                            const char *reason)
{
    if (attempt_status_of(a->status) == ATTEMPT_ENDED)
        return;
    bool silent = strcmp(reason, "worker lost") == 0 || strcmp(reason, "worker restarted") == 0;
    if (j->run_started_ms && strcmp(j->active_attempt, a->id) == 0) {
        if (!silent)
            a->run_ms = now - j->run_started_ms;
        j->running_ms += a->run_ms;
        j->run_started_ms = 0;
    }
    a->end_step = j->steps_done;
    a->ended_ms = now;
    text_copy(a->status, sizeof a->status, attempt_status_name(ATTEMPT_ENDED));
    text_copy(a->reason, sizeof a->reason, reason);
    if (strcmp(j->active_attempt, a->id) == 0)
        j->active_attempt[0] = '\0';
}

void lifecycle__check_limits(const struct control *ctl, struct store_job *j,
                             const struct sched_state *st, int64_t now)
{
    if (j->status != JOB_RUNNING || !j->active_attempt[0] || lifecycle__stop_of(j) != STOP_REASON_NONE || !st)
        return;
    /* The ledger reads a limit of 0 as none; here 0 means at once. */
    struct ledger_limits l = {.time_limit_s = ctl->cfg.time_limit_s > 0
                                                  ? (double)ctl->cfg.time_limit_s
                                                  : 1e-9,
                              .budget_multiple = ctl->cfg.budget_multiple};
    enum stop_reason s = outcome_limit_stop(&st->ledger, &l, (double)now / 1000.0);
    if (s != STOP_REASON_NONE)
        lifecycle__set_stop(j, s);
}

void lifecycle__feed_calibration(struct control *ctl, const struct events_ctx *c,
                                 enum alallo_err committed)
{
    if (committed)
        return;
    for (int i = 0; i < c->n_cal; i++)
        sched_link_calibrate(ctl->sched, &c->cal[i]);
}

int lifecycle__load_history(struct control *ctl, const char *job, struct store_attempt *out,
                            int cap)
{
    int n = 0;
    if (store_attempt_list(ctl->store, job, out, cap, &n))
        return 0;
    return n;
}
