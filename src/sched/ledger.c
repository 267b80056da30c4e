/* ledger.c - money rules, limits and fencing over a job's attempts. */
#include "sched/ledger.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sched/capacity.h"

static const char *const reason_texts[LEDGER_REASON_COUNT] = {
    "training steps",
    "lost work (repeated for free)",
    "above the upper end of the estimated price",
    "failed jobs cost nothing",
    "stopped jobs cost nothing",
    "cancelled while queued",
    "cancelled after the estimated time",
    "step time revised",
    "above the price the cancel was accepted at",
};

const char *ledger_kind_name(enum ledger_kind k)
{
    return k == LEDGER_REFUND ? "refund" : "charge";
}

const char *ledger_reason_text(enum ledger_reason r)
{
    if ((int)r < 0 || r >= LEDGER_REASON_COUNT)
        return "";
    return reason_texts[r];
}

void ledger_limits_default(struct ledger_limits *l)
{
    l->time_limit_s = LEDGER_DEFAULT_TIME_LIMIT_S;
    l->budget_multiple = LEDGER_DEFAULT_BUDGET_MULTIPLE;
}

void ledger_job_init(struct ledger_job *j, double created_s, double time_high_s,
                     double train_high_s, int64_t price_high_micros)
{
    memset(j, 0, sizeof *j);
    j->created_s = created_s;
    j->time_high_s = time_high_s;
    j->train_high_s = train_high_s;
    j->price_high_micros = price_high_micros;
}

void ledger_raise_budget_base(struct ledger_job *j, double base_s)
{
    if (base_s > j->train_high_s && isfinite(base_s))
        j->train_high_s = base_s;
}

static struct ledger_attempt *running_attempt(struct ledger_job *j)
{
    if (j->n_attempts == 0)
        return NULL;
    struct ledger_attempt *a = &j->attempts[j->n_attempts - 1];
    return a->ended ? NULL : a;
}

struct ledger_attempt *ledger_current(struct ledger_job *j, uint64_t fence)
{
    struct ledger_attempt *a = running_attempt(j);
    if (!a || fence == 0 || a->fence != fence || j->fence != fence || j->closed)
        return NULL;
    return a;
}

static long clamp_step(long s, long lo, long hi)
{
    return s < lo ? lo : s > hi ? hi : s;
}

/* The job continues from `step`: work of earlier attempts after it is
 * lost, and the job's model keeps none of it. */
static void keep_at_most(struct ledger_job *j, long step)
{
    for (int i = 0; i < j->n_attempts; i++) {
        struct ledger_attempt *p = &j->attempts[i];
        if (p->kept_step > step)
            p->kept_step = step < p->start_step ? p->start_step : step;
    }
}

enum alallo_err ledger_attempt_begin(struct ledger_job *j, int64_t id, double rate_per_hour,
                                     long start_step, double now, uint64_t *fence_out)
{
    if (j->closed || running_attempt(j))
        return ERR_CONFLICT;
    if (j->n_attempts >= LEDGER_MAX_ATTEMPTS)
        return ERR_TOO_LARGE;
    if (start_step < 0 || !(rate_per_hour >= 0) || !isfinite(rate_per_hour))
        return ERR_INVALID;
    keep_at_most(j, start_step);
    struct ledger_attempt *a = &j->attempts[j->n_attempts++];
    memset(a, 0, sizeof *a);
    a->id = id;
    a->fence = ++j->fence;
    a->rate_per_hour = rate_per_hour;
    a->start_step = a->done_step = a->kept_step = a->billed_to = start_step;
    a->began_s = now;
    j->latest_checkpoint = start_step;
    if (fence_out)
        *fence_out = a->fence;
    return ERR_OK;
}

enum alallo_err ledger_attempt_rebase(struct ledger_job *j, uint64_t fence, long start_step)
{
    struct ledger_attempt *a = ledger_current(j, fence);
    if (!a)
        return ERR_FENCED;
    if (start_step < 0 || start_step > a->start_step || a->done_step != a->start_step ||
        a->billed_to != a->start_step || a->train_s > 0)
        return ERR_INVALID;
    if (start_step == a->start_step)
        return ERR_OK;
    keep_at_most(j, start_step);
    a->start_step = a->done_step = a->kept_step = a->billed_to = start_step;
    j->latest_checkpoint = start_step;
    return ERR_OK;
}

enum alallo_err ledger_attempt_progress(struct ledger_job *j, uint64_t fence, long step,
                                        double train_s)
{
    struct ledger_attempt *a = ledger_current(j, fence);
    if (!a)
        return ERR_FENCED;
    if (step < a->done_step || !(train_s >= a->train_s) || !isfinite(train_s))
        return ERR_INVALID;
    a->done_step = step;
    a->train_s = train_s;
    return ERR_OK;
}

enum alallo_err ledger_attempt_checkpoint(struct ledger_job *j, uint64_t fence, long step)
{
    struct ledger_attempt *a = ledger_current(j, fence);
    if (!a)
        return ERR_FENCED;
    if (step < a->start_step || step > a->done_step)
        return ERR_INVALID;
    if (step > j->latest_checkpoint)
        j->latest_checkpoint = step;
    return ERR_OK;
}

enum alallo_err ledger_attempt_end(struct ledger_job *j, uint64_t fence, double now,
                                   long kept_step)
{
    struct ledger_attempt *a = ledger_current(j, fence);
    if (!a)
        return ERR_FENCED;
    a->ended = true;
    a->ended_s = now < a->began_s ? a->began_s : now;
    a->kept_step = clamp_step(kept_step, a->start_step, a->done_step);
    return ERR_OK;
}

double ledger_running_s(const struct ledger_job *j, double now)
{
    double sum = 0;
    for (int i = 0; i < j->n_attempts; i++) {
        const struct ledger_attempt *a = &j->attempts[i];
        double end = a->ended ? a->ended_s : now;
        if (end > a->began_s)
            sum += end - a->began_s;
    }
    return sum;
}

/* The two limits in the order they are reached. */
static void limits_of(const struct ledger_job *j, const struct ledger_limits *l, double *time_s,
                      double *budget_s)
{
    *time_s = l->time_limit_s > 0 ? l->time_limit_s : INFINITY;
    *budget_s = l->budget_multiple > 0 && j->train_high_s > 0
                    ? l->budget_multiple * j->train_high_s
                    : INFINITY;
}

enum job_message ledger_limit_reached(const struct ledger_job *j, const struct ledger_limits *l,
                                      double now)
{
    double time_s, budget_s;
    limits_of(j, l, &time_s, &budget_s);
    /* A microsecond of slack, so that a timer set by ledger_limit_deadline()
     * finds the limit reached despite rounding. */
    double run = ledger_running_s(j, now) + 1e-6;
    if (time_s <= budget_s) {
        if (run >= time_s)
            return MSG_STOPPED_TIME_LIMIT;
        if (run >= budget_s)
            return MSG_STOPPED_BUDGET;
    } else {
        if (run >= budget_s)
            return MSG_STOPPED_BUDGET;
        if (run >= time_s)
            return MSG_STOPPED_TIME_LIMIT;
    }
    return MSG_NONE;
}

double ledger_limit_deadline(const struct ledger_job *j, const struct ledger_limits *l,
                             double now)
{
    const struct ledger_attempt *a =
        j->n_attempts ? &j->attempts[j->n_attempts - 1] : NULL;
    if (!a || a->ended || j->closed)
        return INFINITY;
    double time_s, budget_s;
    limits_of(j, l, &time_s, &budget_s);
    double first = fmin(time_s, budget_s);
    if (!isfinite(first))
        return INFINITY;
    double run = ledger_running_s(j, now);
    return now + (first - run > 0 ? first - run : 0);
}

/* Money for an attempt's steps (start, to], at its average step time. */
static int64_t steps_cost(const struct ledger_attempt *a, long to)
{
    long n = a->done_step - a->start_step;
    if (n <= 0 || to <= a->start_step)
        return 0;
    double s = a->train_s * (double)(to - a->start_step) / (double)n;
    return capacity_price_micros(a->rate_per_hour, s);
}

/* Whether the outcome makes the job free, and the reason refunds carry. */
static bool free_outcome(const struct ledger_job *j, const struct ledger_outcome *o, double now,
                         enum ledger_reason *reason)
{
    if (o->status == JOB_FAILED) {
        *reason = o->message == MSG_STOPPED_BUDGET || o->message == MSG_STOPPED_TIME_LIMIT
                      ? LEDGER_R_STOPPED
                      : LEDGER_R_FAILED;
        return true;
    }
    if (o->status == JOB_CANCELLED) {
        enum job_status from = j->cancel_fixed ? j->cancel_from : o->cancelled_from;
        if (j->cancel_fixed)
            now = j->cancel_s; /* priced when the cancel was accepted */
        if (from == JOB_QUEUED) {
            *reason = LEDGER_R_CANCELLED_QUEUED;
            return true;
        }
        if (now - j->created_s > j->time_high_s) {
            *reason = LEDGER_R_CANCELLED_LATE;
            return true;
        }
    }
    return false;
}

static void add_row(struct ledger_job *j, struct ledger_row *rows, size_t *n, int64_t signed_amount,
                    const struct ledger_attempt *a, long from, long to, enum ledger_reason reason)
{
    if (signed_amount == 0)
        return;
    struct ledger_row *r = &rows[(*n)++];
    r->kind = signed_amount > 0 ? LEDGER_CHARGE : LEDGER_REFUND;
    r->amount_micros = signed_amount > 0 ? signed_amount : -signed_amount;
    r->attempt_id = a->id;
    r->from_step = from;
    r->to_step = to;
    r->reason = reason;
    if (r->kind == LEDGER_CHARGE)
        j->charged_micros += r->amount_micros;
    else
        j->refunded_micros += r->amount_micros;
}

enum alallo_err ledger_settle(struct ledger_job *j, const struct ledger_outcome *outcome,
                              double now, struct ledger_row *rows, size_t cap, size_t *n_rows)
{
    *n_rows = 0;
    if (j->closed)
        return ERR_CONFLICT;
    if (cap < LEDGER_MAX_ROWS)
        return ERR_INVALID;
    bool final = outcome->status == JOB_SUCCEEDED || outcome->status == JOB_FAILED ||
                 outcome->status == JOB_CANCELLED;
    enum ledger_reason free_reason = LEDGER_R_FAILED;
    bool is_free = final && free_outcome(j, outcome, now, &free_reason);

    struct ledger_attempt *run = running_attempt(j);
    if (final && run) {
        run->ended = true;
        run->ended_s = now < run->began_s ? run->began_s : now;
        run->kept_step = clamp_step(j->latest_checkpoint, run->start_step, run->done_step);
    }

    /* A cancel priced when accepted: no step after it is billed, and the
     * net charge is at most what it was shown at. */
    bool fixed_cancel = outcome->status == JOB_CANCELLED && j->cancel_fixed;
    int64_t cap_micros = j->price_high_micros;
    enum ledger_reason cap_reason = LEDGER_R_ABOVE_ESTIMATE;
    if (fixed_cancel && (cap_micros < 0 || j->cancel_micros < cap_micros)) {
        cap_micros = j->cancel_micros;
        cap_reason = LEDGER_R_CANCEL_PRICE;
    }
    long target[LEDGER_MAX_ATTEMPTS];
    int64_t desired[LEDGER_MAX_ATTEMPTS];
    bool capped[LEDGER_MAX_ATTEMPTS];
    int64_t total = 0;
    for (int i = 0; i < j->n_attempts; i++) {
        const struct ledger_attempt *a = &j->attempts[i];
        long t;
        if (is_free)
            t = a->start_step;
        else if (!a->ended) /* still running: only what a checkpoint secured */
            t = clamp_step(j->latest_checkpoint, a->start_step, a->done_step);
        else
            t = clamp_step(a->kept_step, a->start_step, a->done_step);
        if (fixed_cancel && t > a->start_step && t > j->cancel_step)
            t = j->cancel_step > a->start_step ? j->cancel_step : a->start_step;
        target[i] = t;
        desired[i] = steps_cost(a, t);
        capped[i] = false;
        total += desired[i];
    }
    /* The partial model holds every step the cancel was priced for: the
     * charge is that price to the micro, though the average step time
     * reported since (and so steps_cost) moved a little. */
    if (fixed_cancel && !is_free && j->n_attempts > 0 &&
        target[j->n_attempts - 1] == j->cancel_step && total < j->cancel_micros) {
        desired[j->n_attempts - 1] += j->cancel_micros - total;
        total = j->cancel_micros;
    }
    if (cap_micros >= 0 && total > cap_micros) {
        int64_t excess = total - cap_micros;
        for (int i = j->n_attempts - 1; i >= 0 && excess > 0; i--) {
            int64_t r = desired[i] < excess ? desired[i] : excess;
            if (r > 0) {
                desired[i] -= r;
                excess -= r;
                capped[i] = true;
            }
        }
    }

    for (int i = 0; i < j->n_attempts; i++) {
        struct ledger_attempt *a = &j->attempts[i];
        long t = target[i];
        if (t != a->billed_to) {
            int64_t step_amount = steps_cost(a, t) - steps_cost(a, a->billed_to);
            /* Priced at the cancel: its steps are one row of the amount. */
            if (fixed_cancel && i == j->n_attempts - 1 && t > a->billed_to &&
                desired[i] > a->billed_micros)
                step_amount = desired[i] - a->billed_micros;
            enum ledger_reason why = t > a->billed_to ? LEDGER_R_STEPS
                                     : is_free       ? free_reason
                                                     : LEDGER_R_LOST_WORK;
            long from = t > a->billed_to ? a->billed_to : t;
            long to = t > a->billed_to ? t : a->billed_to;
            add_row(j, rows, n_rows, step_amount, a, from, to, why);
            a->billed_micros += step_amount;
            a->billed_to = t;
        }
        int64_t residual = desired[i] - a->billed_micros;
        enum ledger_reason why = residual > 0 ? LEDGER_R_ADJUST
                                 : is_free    ? free_reason
                                 : capped[i]  ? cap_reason
                                              : LEDGER_R_ADJUST;
        add_row(j, rows, n_rows, residual, a, t, t, why);
        a->billed_micros = desired[i];
    }
    if (final)
        j->closed = true;
    return ERR_OK;
}

int64_t ledger_cancel_micros(const struct ledger_job *j, enum job_status from, double now)
{
    if (j->closed)
        return ledger_net_micros(j);
    if (j->cancel_fixed)
        return j->cancel_micros;
    /* The cancel runs on a copy, step by step as the server runs it. */
    struct ledger_job copy = *j;
    struct ledger_row rows[LEDGER_MAX_ROWS];
    size_t n = 0;
    struct ledger_attempt *run = running_attempt(&copy);
    if (run) {
        /* The trainer's checkpoint on stop holds every completed step;
         * the attempt ends keeping them (ledger_attempt_end's kept_step). */
        if (run->done_step > copy.latest_checkpoint)
            copy.latest_checkpoint = run->done_step;
        run->ended = true;
        run->ended_s = now < run->began_s ? run->began_s : now;
        run->kept_step = run->done_step;
    }
    struct ledger_outcome o = {.status = JOB_CANCELLED, .cancelled_from = from};
    if (ledger_settle(&copy, &o, now, rows, LEDGER_MAX_ROWS, &n) != ERR_OK)
        return ledger_net_micros(j);
    return ledger_net_micros(&copy);
}

enum job_status ledger_cancel_from(enum job_status status, long steps_done)
{
    if (status == JOB_RUNNING || status == JOB_CANCELLING)
        return steps_done > 0 ? JOB_RUNNING : JOB_QUEUED;
    return status;
}

void ledger_fix_cancel(struct ledger_job *j, enum job_status from, double now)
{
    if (j->cancel_fixed || j->closed)
        return;
    const struct ledger_attempt *run = running_attempt(j);
    long step = j->latest_checkpoint;
    if (run && run->done_step > step)
        step = run->done_step;
    j->cancel_micros = ledger_cancel_micros(j, from, now);
    j->cancel_from = from;
    j->cancel_s = now;
    j->cancel_step = step;
    j->cancel_fixed = true;
}

int64_t ledger_net_micros(const struct ledger_job *j)
{
    return j->charged_micros - j->refunded_micros;
}

int64_t ledger_steps_micros(const struct ledger_job *j)
{
    int64_t sum = 0;
    for (int i = 0; i < j->n_attempts; i++) {
        const struct ledger_attempt *a = &j->attempts[i];
        long t = a->ended ? a->kept_step : a->done_step;
        sum += steps_cost(a, clamp_step(t, a->start_step, a->done_step));
    }
    return sum;
}

static int broken(int n, char *why, size_t cap, const char *what)
{
    if (n == 0 && why && cap)
        snprintf(why, cap, "%s", what);
    return n + 1;
}

int ledger_check(const struct ledger_job *j, char *why, size_t whycap)
{
    int n = 0;
    int64_t sum = 0;
    for (int i = 0; i < j->n_attempts; i++) {
        const struct ledger_attempt *a = &j->attempts[i];
        if (i > 0 && a->fence <= j->attempts[i - 1].fence)
            n = broken(n, why, whycap, "fences do not grow");
        if (a->billed_micros < 0)
            n = broken(n, why, whycap, "an attempt has a negative net charge");
        if (a->billed_to < a->start_step || a->billed_to > a->done_step)
            n = broken(n, why, whycap, "billed steps outside the attempt's steps");
        for (int k = 0; k < i; k++) {
            const struct ledger_attempt *b = &j->attempts[k];
            bool overlap = a->billed_to > a->start_step && b->billed_to > b->start_step &&
                           a->start_step < b->billed_to && b->start_step < a->billed_to;
            if (overlap)
                n = broken(n, why, whycap, "a step is billed twice");
        }
        sum += a->billed_micros;
    }
    if (sum != j->charged_micros - j->refunded_micros)
        n = broken(n, why, whycap, "ledger rows do not add up to the attempts' charges");
    if (j->price_high_micros >= 0 && sum > j->price_high_micros)
        n = broken(n, why, whycap, "net charge above the upper end of the estimated price");
    return n;
}
