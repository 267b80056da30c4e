/* sim.c - the fleet simulation: virtual clock, simulated trainers and
 * workers, the real sched modules, invariants at every event. */
#include "sched/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/job.h"
#include "core/rng.h"
#include "sched/capacity.h"
#include "sched/estimator.h"
#include "sched/outcome.h"
#include "sched/planner.h"
#include "sched/resched.h"
#include "sched/scheduler.h"
#include "sched/time_left.h"

#define GB 1e9
#define REPORTS_PER_ATTEMPT 25    /* step reports over a whole job          */
#define CHECKPOINTS_PER_JOB 10
#define CHECKPOINT_EVERY_S 1800.0
#define MAX_EVENTS_PER_JOB 100000 /* a runaway guard, far above need        */
#define TL_SAMPLES_CAP 8000000
#define EXACT_HORIZON_MAX_QUEUE 4000 /* longer queues estimate from the horizon */

/* ---- random numbers (core/rng.h) and the distributions drawn from them */

/* Uniform in (0, 1). */
static double u01(struct rng *r)
{
    return ((double)(rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
}

static double uniform(struct rng *r, double a, double b)
{
    return a + (b - a) * u01(r);
}

static double log_uniform(struct rng *r, double a, double b)
{
    return exp(uniform(r, log(a), log(b)));
}

static double normal(struct rng *r)
{
    return sqrt(-2.0 * log(u01(r))) * cos(6.283185307179586 * u01(r));
}

static double exponential(struct rng *r, double mean)
{
    return -mean * log(u01(r));
}

/* ---- the fleet and the catalog ---------------------------------------- */

struct worker_kind {
    const char *name;
    double mem_gb;
    double flops;     /* effective FLOP/s of a training step */
    double price;     /* on-demand per hour; spot is 40% of it */
};

/* Prices are roughly proportional to speed, as clouds price them, so that
 * lowest_cost is decided mostly by class (spot) and not by one kind. */
static const struct worker_kind kinds[] = {
    {"l4", 24, 60e12, 0.80},   {"a100-40", 40, 150e12, 2.00}, {"a100-80", 80, 160e12, 2.30},
    {"h100", 80, 400e12, 5.20}, {"h200", 141, 450e12, 6.00},
};
static const double kind_weight[] = {0.30, 0.20, 0.20, 0.20, 0.10};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

struct model_shape {
    const char *name;
    struct plan_model m;
};

static const struct model_shape shapes[] = {
    {"124m", {.layers = 12, .hidden = 768, .intermediate = 2048, .heads = 12, .vocab = 50257,
              .tied = true}},
    {"1b", {.layers = 16, .hidden = 2048, .intermediate = 8192, .heads = 32, .kv_heads = 8,
            .vocab = 128256, .tied = true}},
    {"3b", {.layers = 28, .hidden = 3072, .intermediate = 8192, .heads = 24, .kv_heads = 8,
            .vocab = 128256, .tied = true}},
    {"8b", {.layers = 32, .hidden = 4096, .intermediate = 14336, .heads = 32, .kv_heads = 8,
            .vocab = 128256}},
    {"70b", {.layers = 80, .hidden = 8192, .intermediate = 28672, .heads = 64, .kv_heads = 8,
             .vocab = 128256}},
};
static const double shape_weight[] = {0.25, 0.30, 0.20, 0.20, 0.05};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

/* How much slower than nominal the trainer truly is, by method and class:
 * what calibration must learn. */
static const double method_slowdown[PLAN_METHOD_COUNT] = {1.00, 1.15, 1.30};
static const double class_slowdown[WORKER_CLASS_COUNT] = {1.00, 1.05};

static size_t pick(struct rng *r, const double *w, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += w[i];
    double x = u01(r) * sum;
    for (size_t i = 0; i < n; i++) {
        if (x < w[i])
            return i;
        x -= w[i];
    }
    return n - 1;
}

/* ---- state ------------------------------------------------------------ */

struct sim_worker {
    double true_flops; /* what it really does; sched_worker.flops is measured */
    double lost_mtbf_s, spot_mtbf_s, drain_mtbf_s;
    int job;           /* the job of its running attempt; -1 idle          */
    double bench_flops; /* its measurement, before its own correction      */
    double offset;      /* its attempts' offsets (est_worker_offset): mean */
    long offsets;       /* and count                                       */
};

/* A billed step range of one attempt, rebuilt from ledger rows alone, to
 * check the ledger from outside. */
struct billed {
    int64_t attempt;
    long lo, hi;
};

struct sim_job {
    /* what the user asked for */
    struct plan_job plan;
    enum plan_method method;
    uint64_t account;
    enum sched_goal goal;
    double train_tokens, tokens_per_step, fpt;
    long max_steps;
    double submit_s;
    double startup_nominal_s;
    /* what is true but unknown to the service */
    double slowdown;        /* per job                                     */
    double mem_factor;      /* true peak / planned                         */
    double cancel_at;
    /* the estimate given at creation */
    double est_low, est_high, est_start, est_train;
    double est_margin;      /* its range_margin                            */
    int est_cell;           /* its wait_cell                               */
    int64_t price_low;
    double price_margin;    /* its price_margin                            */
    double price_high_nominal; /* its price_high_nominal                   */
    bool est_waits;
    enum worker_class est_class;
    int64_t price_high;
    /* the service's view */
    enum job_status status;
    enum job_message message;
    int64_t mem_need, mem_planned;
    long steps;             /* steps the current attempt has done          */
    long checkpoint;
    double checkpoint_t;
    int worker;
    uint64_t fence;
    int64_t attempt_id;
    long attempt_start_step;
    double attempt_train_s;
    double attempt_speed_log; /* its worker's correction at its start      */
    double nominal_step_s;  /* on the current worker                       */
    double true_step_s;
    bool loaded, memory_reported, in_queue;
    double last_report_t;
    long next_step;
    struct tl_state tl;
    double attempt_begin_t;
    /* time left shown at the first report past 20% and 50% of the steps */
    float tl_t[2], tl_lo[2], tl_hi[2];
    bool tl_seen[2];
    struct tl_shown tl_shown[EST_TL_CELLS]; /* tl_note_shown, over its attempts */
    struct ledger_job *ledger;
    struct billed billed[LEDGER_MAX_ATTEMPTS];
    int n_billed;
    double first_step_t;    /* when the first attempt finished loading     */
    double finish_s;
    long events;
    /* goal finish_by (sim_config.finish_by_share): the deadline set at
     * arrival, slack x the upper end of the job's fastest finish */
    double finish_by, finish_by_slack;
    bool finish_by_missed;  /* counted in finish_by_missed */
};

enum ev_kind {
    EV_ARRIVE = 0, EV_PASS, EV_LOADED, EV_REPORT, EV_LIMIT, EV_CANCEL,
    EV_WORKER_LOST, EV_SPOT_TAKEN, EV_DRAIN, EV_WORKER_BACK,
};

struct event {
    double t;
    uint64_t seq;
    enum ev_kind kind;
    int job, worker;
    uint64_t fence;
};

struct tl_sample {
    int job;
    float t, mid;
};

struct sim {
    const struct sim_config *cfg;
    struct rng rng;
    struct sim_result *res;
    double now;
    struct sched_worker *w;
    struct sim_worker *sw;
    int nw;
    struct sim_job *jobs;
    long nj;
    struct est_history *hist;
    /* est_finish_by_factors of hist per method, made again when a job's
     * band changes (fb_stale); read only with finish_by jobs */
    float fb_hi[PLAN_METHOD_COUNT][2][WORKER_CLASS_COUNT][SCHED_FINISH_SHARES];
    bool fb_stale;
    /* event heap */
    struct event *heap;
    size_t n_heap, cap_heap;
    uint64_t seq;
    /* queue of jobs waiting for a placement */
    int *queue;
    size_t n_queue;
    double *horizon;      /* free_at of the latest pass, plus reservations */
    bool pass_scheduled;
    double last_pass;
    long *account_running;
    /* scratch for passes */
    struct sched_job *pj;
    struct sched_assignment *pa;
    double *pfree;
    struct sched_account_load *loads;
    /* outcomes */
    long terminal;
    int64_t next_attempt_id;
    struct tl_sample *samples;
    size_t n_samples;
    long covered, above, below;
    long price_covered;
    bool failed_alloc;
};

static size_t pass_input(struct sim *s, long extra, size_t *n_loads);

/* ---- events ----------------------------------------------------------- */

static bool ev_before(const struct event *a, const struct event *b)
{
    if (a->t != b->t)
        return a->t < b->t;
    return a->seq < b->seq;
}

static void push(struct sim *s, double t, enum ev_kind kind, int job, int worker, uint64_t fence)
{
    if (s->n_heap == s->cap_heap) {
        size_t cap = s->cap_heap ? 2 * s->cap_heap : 1024;
        struct event *h = realloc(s->heap, cap * sizeof *h);
        if (!h) {
            s->failed_alloc = true;
            return;
        }
        s->heap = h;
        s->cap_heap = cap;
    }
    struct event e = {.t = t < s->now ? s->now : t, .seq = s->seq++, .kind = kind, .job = job,
                      .worker = worker, .fence = fence};
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_before(&e, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
}

static struct event pop(struct sim *s)
{
    struct event top = s->heap[0];
    struct event last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const struct event *best = &last;
        if (l < n && ev_before(&s->heap[l], best)) {
            m = l;
            best = &s->heap[l];
        }
        if (r < n && ev_before(&s->heap[r], best))
            m = r;
        if (m == i)
            break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n > 0)
        s->heap[i] = last;
    return top;
}

static void violation(struct sim *s, const char *what, long job)
{
    if (s->res->invariant_violations == 0)
        snprintf(s->res->first_violation, sizeof s->res->first_violation, "job %ld: %s", job,
                 what);
    s->res->invariant_violations++;
}

/* A status change of job ji after its first status, checked against the
 * server's transition table (core/job.c, the one job_move_to() in
 * src/control enforces): a move the server would refuse is a violation. */
static void move_job(struct sim *s, long ji, enum job_status to)
{
    struct sim_job *j = &s->jobs[ji];
    if (!job_transition_allowed(j->status, to))
        violation(s, "a status change the transition table forbids", ji);
    j->status = to;
}

static void need_pass(struct sim *s)
{
    if (s->pass_scheduled)
        return;
    double t = s->last_pass + s->cfg->pass_interval_s;
    push(s, t > s->now ? t : s->now, EV_PASS, -1, -1, 0);
    s->pass_scheduled = true;
}

/* ---- the ledger, checked from outside --------------------------------- */

/* Applies rows to the job's outside view of what each attempt is billed for
 * and checks that no step is billed twice. */
static void apply_rows(struct sim *s, long ji, const struct ledger_row *rows, size_t n)
{
    struct sim_job *j = &s->jobs[ji];
    for (size_t k = 0; k < n; k++) {
        const struct ledger_row *r = &rows[k];
        struct billed *b = NULL;
        for (int i = 0; i < j->n_billed; i++)
            if (j->billed[i].attempt == r->attempt_id)
                b = &j->billed[i];
        if (!b) {
            if (j->n_billed == LEDGER_MAX_ATTEMPTS)
                return;
            b = &j->billed[j->n_billed++];
            b->attempt = r->attempt_id;
            b->lo = b->hi = r->from_step;
        }
        if (r->from_step == r->to_step)
            continue; /* money only */
        if (r->kind == LEDGER_CHARGE) {
            if (r->from_step != b->hi)
                violation(s, "charge does not continue the attempt's billed steps", ji);
            b->hi = r->to_step;
        } else {
            if (r->to_step != b->hi)
                violation(s, "refund does not end at the attempt's billed steps", ji);
            b->hi = r->from_step;
        }
    }
    bool twice = false;
    for (int a = 0; a < j->n_billed; a++)
        for (int c = 0; c < a; c++) {
            const struct billed *x = &j->billed[a], *y = &j->billed[c];
            if (x->hi > x->lo && y->hi > y->lo && x->lo < y->hi && y->lo < x->hi)
                twice = true;
        }
    if (twice) {
        s->res->billed_twice++;
        violation(s, "a step is billed twice", ji);
    }
    char why[128];
    if (ledger_check(j->ledger, why, sizeof why))
        violation(s, why, ji);
}

static void settle(struct sim *s, long ji, enum job_status st, enum job_message m,
                   enum job_status from)
{
    struct ledger_row rows[LEDGER_MAX_ROWS];
    size_t n = 0;
    struct ledger_outcome o = {.status = st, .message = m, .cancelled_from = from};
    if (ledger_settle(s->jobs[ji].ledger, &o, s->now, rows, LEDGER_MAX_ROWS, &n))
        violation(s, "settle refused", ji);
    apply_rows(s, ji, rows, n);
}

/* ---- jobs ------------------------------------------------------------- */

static void check_job(struct sim *s, long ji)
{
    struct sim_job *j = &s->jobs[ji];
    double run = ledger_running_s(j->ledger, s->now);
    double limit = s->cfg->limits.time_limit_s > 0 ? s->cfg->limits.time_limit_s : INFINITY;
    if (s->cfg->limits.budget_multiple > 0 && j->ledger->train_high_s > 0)
        limit = fmin(limit, s->cfg->limits.budget_multiple * j->ledger->train_high_s);
    if (run > limit + 1e-6)
        violation(s, "running time past the limit", ji);
    if (j->status == JOB_SUCCEEDED && ledger_net_micros(j->ledger) > j->price_high)
        violation(s, "succeeded job charged above its estimate", ji);
    if (j->status == JOB_FAILED && ledger_net_micros(j->ledger) != 0)
        violation(s, "failed job charged", ji);
    if (++j->events > MAX_EVENTS_PER_JOB)
        violation(s, "runaway job", ji);
}

static void make_terminal(struct sim *s, long ji, enum job_status st, enum job_message m)
{
    struct sim_job *j = &s->jobs[ji];
    move_job(s, ji, st);
    j->message = m;
    j->finish_s = s->now;
    j->in_queue = false;
    s->terminal++;
    if (st == JOB_SUCCEEDED)
        s->res->succeeded++;
    else if (st == JOB_CANCELLED)
        s->res->cancelled++;
    else
        s->res->failed++;
    if (m == MSG_STOPPED_BUDGET || m == MSG_STOPPED_TIME_LIMIT)
        s->res->stopped++;
}

/* The step the trainer is at now (between two reports). */
static long current_step(const struct sim_job *j, double now)
{
    if (!j->loaded || j->true_step_s <= 0)
        return j->steps;
    long more = (long)floor((now - j->last_report_t) / j->true_step_s);
    long at = j->steps + (more > 0 ? more : 0);
    if (at >= j->next_step)
        at = j->next_step - 1;
    return at < j->steps ? j->steps : at;
}

/* Reports the trainer's progress at `step` now to the ledger. */
static void report_progress(struct sim *s, long ji, long step, double train_s)
{
    struct sim_job *j = &s->jobs[ji];
    if (ledger_attempt_progress(j->ledger, j->fence, step, train_s))
        violation(s, "current attempt's report refused", ji);
    j->steps = step;
    j->attempt_train_s = train_s;
}

/* The worker's own speed, as the server learns it (control/sched_link.c,
 * docs/estimator.md "The worker's own speed"): the attempt's offset joins
 * its worker's, and every worker's correction is read again. */
static void learn_worker_speed(struct sim *s, struct sim_job *j)
{
    struct sim_worker *x = &s->sw[j->worker];
    long done = j->steps - j->attempt_start_step;
    double off = est_worker_offset(s->hist, j->method, s->w[j->worker].class_, false,
                                   j->attempt_train_s, (double)done * j->nominal_step_s,
                                   j->attempt_speed_log);
    if (!isfinite(off))
        return;
    x->offset = est_mean_step(x->offset, ++x->offsets, off, EST_WORKER_MEMORY);
    double *mean = malloc((size_t)s->nw * sizeof *mean);
    long *count = malloc((size_t)s->nw * sizeof *count);
    double *logs = malloc((size_t)s->nw * sizeof *logs);
    if (mean && count && logs) {
        for (int i = 0; i < s->nw; i++) {
            mean[i] = s->sw[i].offset;
            count[i] = s->sw[i].offsets;
        }
        est_worker_speed_logs(mean, count, (size_t)s->nw, logs);
        for (int i = 0; i < s->nw; i++) {
            s->w[i].flops = s->sw[i].bench_flops;
            capacity_correct_speed(&s->w[i], logs[i]);
        }
    }
    free(mean);
    free(count);
    free(logs);
}

/* Ends the job's running attempt now, keeping steps up to kept. */
static void end_attempt(struct sim *s, long ji, long kept)
{
    struct sim_job *j = &s->jobs[ji];
    if (j->worker < 0)
        return;
    if (ledger_attempt_end(j->ledger, j->fence, s->now, kept))
        violation(s, "attempt end refused", ji);
    long done = j->steps - j->attempt_start_step;
    if (done > 0 && j->attempt_train_s > 0) {
        learn_worker_speed(s, j);
        est_history_add_train(s->hist, j->method, s->w[j->worker].class_, j->attempt_train_s,
                              (double)done * j->nominal_step_s);
    }
    s->w[j->worker].running_attempt = 0;
    s->sw[j->worker].job = -1;
    s->account_running[j->account]--;
    j->worker = -1;
    j->steps = kept;
    j->checkpoint = kept;
    need_pass(s);
}

/* A trainer told to stop (SIGTERM) checkpoints the step it is at. */
static long stop_with_checkpoint(struct sim *s, long ji)
{
    struct sim_job *j = &s->jobs[ji];
    long at = current_step(j, s->now);
    if (at > j->steps)
        report_progress(s, ji, at, j->attempt_train_s + (double)(at - j->steps) * j->true_step_s);
    if (at > j->attempt_start_step && ledger_attempt_checkpoint(j->ledger, j->fence, at))
        violation(s, "checkpoint refused", ji);
    return at;
}

/* A cancel that charges steps leaves the partial model of exactly those
 * steps: the last step billed, seen from outside (the rows). */
static void check_partial_model(struct sim *s, long ji, const struct outcome *o)
{
    const struct sim_job *j = &s->jobs[ji];
    long billed = 0;
    for (int i = 0; i < j->n_billed; i++)
        if (j->billed[i].hi > j->billed[i].lo && j->billed[i].hi > billed)
            billed = j->billed[i].hi;
    if (ledger_net_micros(j->ledger) <= 0 || billed == 0)
        return;
    long step = outcome_partial_step(o, j->ledger);
    if (step == 0)
        violation(s, "a charged cancel leaves no partial model", ji);
    else if (step != billed)
        violation(s, "the partial model is not the steps charged", ji);
}

/* Carries out the outcome o (src/sched/outcome.h: the decisions the
 * server's lifecycle makes too) for job ji, whose attempt, if it had one,
 * has ended: its status, the queue, the ledger. */
static void apply_outcome(struct sim *s, long ji, const struct outcome *o)
{
    struct sim_job *j = &s->jobs[ji];
    if (o->kind == OUTCOME_NONE)
        return;
    if (o->requeue) {
        move_job(s, ji, o->status);
        j->message = o->message;
        j->in_queue = true;
        s->queue[s->n_queue++] = (int)ji;
        if (s->n_queue > (size_t)s->res->max_queued)
            s->res->max_queued = (long)s->n_queue;
        s->res->moves++;
    }
    if (o->settle)
        settle(s, ji, o->ledger.status, o->ledger.message, o->ledger.cancelled_from);
    if (o->kind == OUTCOME_CANCELLED)
        check_partial_model(s, ji, o);
    if (job_status_is_terminal(o->status))
        make_terminal(s, ji, o->status, o->message);
    if (o->requeue)
        need_pass(s);
}

/* The finish_by factors of method m from the history, made again only
 * after it changed. */
static void finish_by_factors(struct sim *s, enum plan_method m,
                              float out[2][WORKER_CLASS_COUNT][SCHED_FINISH_SHARES])
{
    if (s->fb_stale) {
        for (int k = 0; k < PLAN_METHOD_COUNT; k++)
            est_finish_by_factors(s->hist, (enum plan_method)k, s->fb_hi[k]);
        s->fb_stale = false;
    }
    memcpy(out, s->fb_hi[m], sizeof s->fb_hi[0]);
}

/* Asks the job's attempt to move (memory, drain, spot): the status it
 * shows meanwhile is the server's rule. */
static void ask_move(struct sim *s, long ji)
{
    struct sim_job *j = &s->jobs[ji];
    enum stop_reason stop;
    enum job_status to;
    if (outcome_stop_request(j->status, j->worker >= 0, STOP_REASON_NONE, STOP_REASON_MOVE,
                             &stop, &to) &&
        to != j->status) {
        move_job(s, ji, to);
        j->message = MSG_RESCHEDULING;
    }
}

static void attempt_stopped(struct sim *s, long ji, enum stop_reason stop);

/* goal finish_by at a report, as the server checks it (control/deadlines.c),
 * on the attempt's own pace: a job late where it runs moves, from a
 * checkpoint, to a free worker that meets its deadline, or, when none can,
 * is counted as missed once and moves only to a clearly earlier end.
 * True when it moved. */
static bool deadline_move(struct sim *s, long ji)
{
    struct sim_job *j = &s->jobs[ji];
    struct tl_value v;
    tl_value(&j->tl, s->now, &v);
    if (v.basis != TL_PACE)
        return false;
    struct sched_job rest = {
        .goal = SCHED_FINISH_BY, .mem_bytes = j->mem_need,
        .work_flops = (double)(j->max_steps - j->checkpoint) * j->tokens_per_step * j->fpt,
        .startup_s = j->startup_nominal_s, .finish_by_s = j->finish_by};
    finish_by_factors(s, j->method, rest.finish_hi);
    sched_free_at(s->w, (size_t)s->nw, s->now, s->pfree);
    struct resched_deadline d;
    resched_on_deadline(&rest, s->now + v.high_s, s->w, (size_t)s->nw, s->pfree, s->now, &d);
    if (d.missed && !j->finish_by_missed) {
        j->finish_by_missed = true;
        s->res->finish_by_missed++;
    }
    if (d.move_to < 0)
        return false;
    s->res->finish_by_moves++;
    ask_move(s, ji);
    long at = stop_with_checkpoint(s, ji);
    end_attempt(s, ji, at);
    attempt_stopped(s, ji, STOP_REASON_MOVE);
    return true;
}

/* The job's attempt has ended after it was asked to stop for `stop`: the
 * simulated trainer, told to stop, checkpoints and exits 4, as the real
 * one does on SIGTERM. What becomes of the job is the server's rule. */
static void attempt_stopped(struct sim *s, long ji, enum stop_reason stop)
{
    struct sim_job *j = &s->jobs[ji];
    struct outcome_job oj = {.status = j->status, .stop = stop,
                             .trained = j->loaded || j->steps > 0};
    struct outcome_end end = {.exit_status = 4, .signal = 0,
                              .acted_on = outcome_worker_stop(j->status, stop)};
    struct outcome o;
    outcome_of_end(&oj, &end, &o);
    apply_outcome(s, ji, &o);
}

static void fail_job(struct sim *s, long ji, enum job_message m)
{
    struct sim_job *j = &s->jobs[ji];
    if (j->worker >= 0)
        end_attempt(s, ji, j->checkpoint);
    settle(s, ji, JOB_FAILED, m, JOB_QUEUED);
    make_terminal(s, ji, JOB_FAILED, m);
}

static void new_job(struct sim *s, long ji)
{
    struct rng *r = &s->rng;
    struct sim_job *j = &s->jobs[ji];
    memset(j, 0, sizeof *j);
    /* Accounts of very different sizes: weight 1/(k+1). */
    double aw[256];
    int na = s->cfg->accounts > 256 ? 256 : s->cfg->accounts;
    for (int a = 0; a < na; a++)
        aw[a] = 1.0 / (a + 1);
    j->account = pick(r, aw, (size_t)na);
    size_t sh = pick(r, shape_weight, N_SHAPES);
    j->plan.model = shapes[sh].m;
    bool large = sh >= 3;
    j->plan.precision = u01(r) < (sh == 4 ? 0.85 : 0.4) ? PLAN_4BIT : PLAN_16BIT;
    j->plan.adapter = j->plan.precision == PLAN_16BIT && sh <= 2 && u01(r) < 0.15 ? PLAN_FULL
                                                                                  : PLAN_LORA;
    static const int batches[] = {1, 2, 4, 8};
    static const int seqs[] = {256, 512, 1024};
    j->plan.batch = batches[rng_next(r) % (large ? 2 : 4)];
    j->plan.seq_len = seqs[rng_next(r) % (large ? 2 : 3)];
    j->goal = u01(r) < 0.45 ? SCHED_LOWEST_COST : SCHED_FASTEST_FINISH;
    /* Drawn only when asked for, so that the default mix is unchanged. */
    if (s->cfg->finish_by_share > 0 && u01(r) < s->cfg->finish_by_share) {
        j->goal = SCHED_FINISH_BY;
        j->finish_by_slack = uniform(r, 0.8, 4.0);
    }
    double examples = floor(log_uniform(r, 1000, sh == 4 ? 20000 : 100000));
    int epochs = 1 + (int)(rng_next(r) % 3);
    double per_example = fmin(log_uniform(r, 150, 1500), j->plan.seq_len);
    j->train_tokens = examples * epochs * per_example;
    j->max_steps = job_max_steps((long)examples, epochs, j->plan.batch);
    j->tokens_per_step = j->train_tokens / (double)j->max_steps;
    j->fpt = planner_flops_per_token(&j->plan);
    j->method = planner_method(j->plan.precision, j->plan.adapter);
    struct plan_memory mem;
    planner_memory(&j->plan, &mem, NULL, 0);
    j->mem_need = j->mem_planned = mem.total;
    j->startup_nominal_s = 30.0 + (double)mem.base / GB; /* loading ~1 GB/s */
    j->slowdown = method_slowdown[j->method] * exp(0.10 * normal(r));
    j->mem_factor = u01(r) < 0.04 ? uniform(r, 1.15, 1.8) : exp(0.03 * normal(r));
    j->cancel_at = u01(r) < 0.05 ? u01(r) : -1; /* share of the estimate */
    j->worker = -1;
    j->status = JOB_QUEUED;
}

/* Creation: feasibility, the estimate, the ledger, the queue. */
static void arrive(struct sim *s, long ji)
{
    struct sim_job *j = &s->jobs[ji];
    j->submit_s = s->now;
    /* Where the job will stand in the fair order: a dry run of the pass up
     * to its turn. With a very long queue, the last pass's horizon plus the
     * reservations made since, as a server under load might. */
    double *fa = s->pfree;
    bool exact = false;
    if (s->n_queue <= EXACT_HORIZON_MAX_QUEUE) {
        size_t nl, n = pass_input(s, ji, &nl);
        exact = sched_horizon_before(s->pj, n, n - 1, s->w, (size_t)s->nw, s->loads, nl, s->now,
                                     fa) == ERR_OK;
    }
    if (!exact) {
        sched_free_at(s->w, (size_t)s->nw, s->now, fa);
        for (int i = 0; i < s->nw; i++)
            if (s->horizon[i] > fa[i] && isfinite(fa[i]))
                fa[i] = s->horizon[i];
    }
    struct est_request req = {.job = j->plan, .train_tokens = j->train_tokens, .goal = j->goal,
                              .startup_s = j->startup_nominal_s, .now = s->now,
                              .pass_delay_s = s->cfg->pass_interval_s,
                              /* nothing starts before the next pass */
                              .next_pass_s = fmax(s->now, s->last_pass + s->cfg->pass_interval_s)};
    struct estimate e;
    char why[128];
    if (j->goal == SCHED_FINISH_BY) {
        /* The user's deadline: a slack over the upper end of the fastest
         * finish, so that some cannot be met. */
        struct est_request fast = req;
        fast.goal = SCHED_FASTEST_FINISH;
        if (est_estimate(&fast, s->w, (size_t)s->nw, fa, s->hist, &e, why, sizeof why) ==
                ERR_OK &&
            e.fit == PLAN_FITS)
            j->finish_by = s->now + j->finish_by_slack * e.time_high_s;
        req.finish_by_s = j->finish_by;
        s->res->finish_by_jobs++;
    }
    if (est_estimate(&req, s->w, (size_t)s->nw, fa, s->hist, &e, why, sizeof why)) {
        violation(s, why, ji);
        settle(s, ji, JOB_FAILED, MSG_FAILED_INTERNAL, JOB_QUEUED);
        make_terminal(s, ji, JOB_FAILED, MSG_FAILED_INTERNAL);
        return;
    }
    /* The budget counts running time, loading included: its base is the
     * upper end of loading plus training. */
    ledger_job_init(j->ledger, s->now, e.time_high_s, e.startup_s + e.train_high_s,
                    e.price_high_micros);
    if (e.fit != PLAN_FITS) {
        s->res->not_available++;
        settle(s, ji, JOB_FAILED, e.fail_message, JOB_QUEUED);
        make_terminal(s, ji, JOB_FAILED, e.fail_message);
        return;
    }
    if (j->goal == SCHED_FINISH_BY) {
        /* A deadline no capacity meets is refused: nothing is created. */
        est_finish_by_verdict(&e, s->now, j->finish_by);
        if (!e.finish_by_met) {
            s->res->finish_by_refused++;
            settle(s, ji, JOB_FAILED, MSG_NOT_AVAILABLE, JOB_QUEUED);
            make_terminal(s, ji, JOB_FAILED, MSG_NOT_AVAILABLE);
            return;
        }
    }
    j->est_low = e.time_low_s;
    j->est_high = e.time_high_s;
    j->est_start = e.wait_s + e.startup_s;
    j->est_train = e.train_s;
    j->est_waits = e.waits;
    j->est_margin = e.range_margin;
    j->est_cell = e.wait_cell;
    j->est_class = e.worker_class;
    j->price_high = e.price_high_micros;
    j->price_low = e.price_low_micros;
    j->price_margin = e.price_margin;
    j->price_high_nominal = e.price_high_nominal;
    if (e.worker >= 0)
        s->horizon[e.worker] = fmax(s->horizon[e.worker], e.finish_s);
    j->status = JOB_QUEUED;
    j->message = MSG_WAITING_FOR_CAPACITY;
    j->in_queue = true;
    s->queue[s->n_queue++] = (int)ji;
    if (s->n_queue > (size_t)s->res->max_queued)
        s->res->max_queued = (long)s->n_queue;
    if (j->cancel_at >= 0)
        push(s, s->now + j->cancel_at * 1.2 * e.time_high_s, EV_CANCEL, (int)ji, -1, 0);
    need_pass(s);
}

static void start_attempt(struct sim *s, long ji, int wi)
{
    struct sim_job *j = &s->jobs[ji];
    struct sched_worker *w = &s->w[wi];
    if (job_status_is_terminal(j->status) || j->status == JOB_CANCELLING) {
        violation(s, "a cancelled or ended job was placed", ji);
        return;
    }
    if (w->running_attempt || s->sw[wi].job >= 0 || j->worker >= 0 || w->state != WORKER_ACTIVE) {
        violation(s, "attempt placed on a worker or job that has an owner", ji);
        return;
    }
    int64_t id = ++s->next_attempt_id;
    uint64_t fence;
    enum alallo_err e = ledger_attempt_begin(j->ledger, id, w->price_per_hour, j->checkpoint,
                                             s->now, &fence);
    if (e == ERR_TOO_LARGE) {
        fail_job(s, ji, MSG_FAILED_INTERNAL);
        return;
    }
    if (e) {
        violation(s, "attempt begin refused", ji);
        return;
    }
    j->fence = fence;
    j->attempt_id = id;
    j->worker = wi;
    j->in_queue = false;
    j->message = MSG_STARTING;
    j->attempt_start_step = j->steps = j->checkpoint;
    j->attempt_train_s = 0;
    j->loaded = false;
    j->memory_reported = false;
    j->checkpoint_t = s->now;
    w->running_attempt = id;
    s->sw[wi].job = (int)ji;
    s->account_running[j->account]++;
    settle(s, ji, JOB_RUNNING, MSG_NONE, JOB_RUNNING);

    double step_flops = j->tokens_per_step * j->fpt;
    j->nominal_step_s = step_flops / capacity_worker_flops(w);
    j->attempt_speed_log = w->speed_log;
    j->true_step_s = step_flops / s->sw[wi].true_flops * j->slowdown * class_slowdown[w->class_];
    long left = j->max_steps - j->steps;
    double lo, hi;
    est_train_range(s->hist, j->method, w->class_, (double)left * j->nominal_step_s, &lo, &hi);
    tl_begin(&j->tl, j->max_steps, j->steps, s->now, j->startup_nominal_s, lo, hi);
    tl_calibrate(&j->tl, s->hist);
    ledger_raise_budget_base(j->ledger,
                             ledger_running_s(j->ledger, s->now) + j->startup_nominal_s + hi);
    /* as the server reads a worker whose attempt has not reported yet
     * (control/sched_link.c): the job's own estimate less the time since */
    struct tl_value v;
    tl_value_of_job(&j->tl, s->now, j->est_low, j->est_high, s->now - j->submit_s, &v);
    w->busy_until_s = s->now + v.mid_s;
    w->busy_low_s = s->now + v.low_s;
    w->busy_high_s = s->now + v.high_s;
    j->attempt_begin_t = s->now;

    double startup = j->startup_nominal_s * uniform(&s->rng, 0.7, 1.6);
    push(s, s->now + startup, EV_LOADED, (int)ji, wi, fence);
    double deadline = ledger_limit_deadline(j->ledger, &s->cfg->limits, s->now);
    if (isfinite(deadline))
        push(s, deadline, EV_LIMIT, (int)ji, wi, fence);
}

static void schedule_report(struct sim *s, long ji)
{
    struct sim_job *j = &s->jobs[ji];
    long every = j->max_steps / REPORTS_PER_ATTEMPT;
    if (every < 1)
        every = 1;
    j->next_step = j->steps + every > j->max_steps ? j->max_steps : j->steps + every;
    double dt = (double)(j->next_step - j->steps) * j->true_step_s * exp(0.03 * normal(&s->rng));
    push(s, s->now + dt, EV_REPORT, (int)ji, j->worker, j->fence);
}

/* A report from an attempt that no longer owns its job must change and
 * bill nothing. */
static void stale_report(struct sim *s, const struct event *ev)
{
    struct sim_job *j = &s->jobs[ev->job];
    int64_t before = ledger_net_micros(j->ledger);
    enum alallo_err e = ledger_attempt_progress(j->ledger, ev->fence, j->max_steps, 1e12);
    if (e != ERR_FENCED)
        violation(s, "a stale attempt's report was accepted", ev->job);
    else
        s->res->fenced_reports++;
    if (ledger_net_micros(j->ledger) != before)
        violation(s, "a stale report changed the bill", ev->job);
}

static bool current(const struct sim *s, const struct event *ev)
{
    const struct sim_job *j = &s->jobs[ev->job];
    return j->worker >= 0 && j->fence == ev->fence && !job_status_is_terminal(j->status) &&
           j->status != JOB_CANCELLING;
}

static void on_loaded(struct sim *s, const struct event *ev)
{
    if (!current(s, ev)) {
        stale_report(s, ev);
        return;
    }
    struct sim_job *j = &s->jobs[ev->job];
    j->loaded = true;
    est_history_add_start(s->hist, j->method, s->w[ev->worker].class_, s->now - j->attempt_begin_t,
                          j->startup_nominal_s);
    if (j->first_step_t <= 0)
        j->first_step_t = s->now;
    move_job(s, ev->job, JOB_RUNNING);
    j->message = MSG_NONE;
    j->last_report_t = s->now;
    tl_observe(&j->tl, j->steps, s->now);
    schedule_report(s, ev->job);
}

static void succeed(struct sim *s, long ji)
{
    struct sim_job *j = &s->jobs[ji];
    struct outcome o;
    outcome_of_done(j->status, &o);
    end_attempt(s, ji, j->max_steps);
    apply_outcome(s, ji, &o);
    double actual = s->now - j->submit_s;
    if (actual < j->est_low)
        s->below++;
    else if (actual > j->est_high)
        s->above++;
    else
        s->covered++;
    int64_t paid = ledger_net_micros(j->ledger);
    if (paid >= j->price_low && paid <= j->price_high)
        s->price_covered++;
    tl_history_add(j->tl_shown, s->now, s->hist);
    est_history_add_spread(s->hist, j->est_cell,
                           est_range_spread(actual, j->est_low, j->est_high, j->est_margin));
    /* each end against the range before its margins, in its half-widths */
    double plo = (double)j->price_low / 1e6 * exp(j->price_margin), phi = j->price_high_nominal;
    est_history_add_price_spread(s->hist, est_price_spread(plo, (double)paid / 1e6, plo, phi));
    est_history_add_price_high_spread(
        s->hist, est_price_spread((double)ledger_steps_micros(j->ledger) / 1e6, phi, plo, phi));
    est_history_add_job(s->hist, j->method, j->est_class, j->est_waits, j->goal,
                        j->first_step_t - j->submit_s, j->est_start,
                        s->now - j->first_step_t, j->est_train);
    s->fb_stale = true;
    if (j->goal == SCHED_FINISH_BY) {
        s->res->finish_by_succeeded++;
        if (s->now <= j->finish_by)
            s->res->finish_by_met++;
    }
}

static void on_report(struct sim *s, const struct event *ev)
{
    if (!current(s, ev)) {
        stale_report(s, ev);
        return;
    }
    long ji = ev->job;
    struct sim_job *j = &s->jobs[ji];
    struct sched_worker *w = &s->w[j->worker];
    long step = j->next_step;
    report_progress(s, ji, step, j->attempt_train_s + (s->now - j->last_report_t));
    j->last_report_t = s->now;
    long every_ckpt = (j->max_steps + CHECKPOINTS_PER_JOB - 1) / CHECKPOINTS_PER_JOB;
    if (step == j->max_steps || step - j->checkpoint >= every_ckpt ||
        s->now - j->checkpoint_t >= CHECKPOINT_EVERY_S) {
        if (ledger_attempt_checkpoint(j->ledger, j->fence, step))
            violation(s, "checkpoint refused", ji);
        j->checkpoint = step;
        j->checkpoint_t = s->now;
    }
    if (step == j->max_steps) {
        succeed(s, ji);
        return;
    }
    if (!j->memory_reported) {
        j->memory_reported = true;
        int64_t peak = (int64_t)((double)j->mem_planned * j->mem_factor);
        struct resched_decision d;
        resched_on_memory(peak, j->mem_need, w, s->w, (size_t)s->nw, &j->plan, &d);
        j->mem_need = d.mem_bytes;
        if (d.action == RESCHED_FAIL) {
            /* Stopped: no worker offers what it needs. */
            end_attempt(s, ji, j->checkpoint);
            attempt_stopped(s, ji, d.message == MSG_NOT_AVAILABLE_LOWER_PRECISION
                                       ? STOP_REASON_NOT_AVAILABLE_LOWER
                                       : STOP_REASON_NOT_AVAILABLE);
            return;
        }
        if (d.action == RESCHED_MOVE) {
            ask_move(s, ji);
            long at = stop_with_checkpoint(s, ji);
            end_attempt(s, ji, at);
            attempt_stopped(s, ji, STOP_REASON_MOVE);
            return;
        }
    }
    tl_observe(&j->tl, step, s->now);
    tl_note_shown(&j->tl, j->tl_shown);
    struct tl_value v;
    tl_value_of_job(&j->tl, s->now, j->est_low, j->est_high, s->now - j->submit_s, &v);
    if (v.basis == TL_PACE && s->n_samples < TL_SAMPLES_CAP && s->samples)
        s->samples[s->n_samples++] = (struct tl_sample){(int)ji, (float)s->now, (float)v.mid_s};
    w->busy_until_s = s->now + v.mid_s;
    w->busy_low_s = s->now + v.low_s;
    w->busy_high_s = s->now + v.high_s;
    static const double marks[2] = {0.2, 0.5};
    for (int k = 0; k < 2; k++)
        if (!j->tl_seen[k] && v.basis == TL_PACE && step >= marks[k] * (double)j->max_steps &&
            step < j->max_steps) {
            j->tl_seen[k] = true;
            j->tl_t[k] = (float)s->now;
            j->tl_lo[k] = (float)v.low_s;
            j->tl_hi[k] = (float)v.high_s;
        }
    if (j->goal == SCHED_FINISH_BY && deadline_move(s, ji))
        return;
    schedule_report(s, ji);
}

static void on_limit(struct sim *s, const struct event *ev)
{
    if (!current(s, ev))
        return; /* the timer of an ended attempt: nothing to do */
    long ji = ev->job;
    struct sim_job *j = &s->jobs[ji];
    enum stop_reason stop = outcome_limit_stop(j->ledger, &s->cfg->limits, s->now);
    if (stop == STOP_REASON_NONE) {
        violation(s, "limit timer fired before the limit", ji);
        return;
    }
    long at = stop_with_checkpoint(s, ji);
    end_attempt(s, ji, at);
    attempt_stopped(s, ji, stop);
}

static void on_cancel(struct sim *s, const struct event *ev)
{
    long ji = ev->job;
    struct sim_job *j = &s->jobs[ji];
    struct outcome o;
    outcome_of_cancel(j->status, j->worker >= 0, &o);
    if (o.kind == OUTCOME_CANCELLING) {
        /* Placed or running: stop with a checkpoint, the partial model. */
        move_job(s, ji, o.status);
        long at = stop_with_checkpoint(s, ji);
        end_attempt(s, ji, at);
        attempt_stopped(s, ji, o.stop);
        return;
    }
    apply_outcome(s, ji, &o);
}

static void schedule_worker_events(struct sim *s, int wi, double from)
{
    struct sim_worker *x = &s->sw[wi];
    push(s, from + exponential(&s->rng, x->lost_mtbf_s), EV_WORKER_LOST, -1, wi, 0);
    push(s, from + exponential(&s->rng, x->drain_mtbf_s), EV_DRAIN, -1, wi, 0);
    if (s->w[wi].class_ == WORKER_SPOT)
        push(s, from + exponential(&s->rng, x->spot_mtbf_s), EV_SPOT_TAKEN, -1, wi, 0);
}

static void on_worker_down(struct sim *s, const struct event *ev)
{
    struct sched_worker *w = &s->w[ev->worker];
    if (w->state != WORKER_ACTIVE)
        return; /* already down; its next events come when it is back */
    enum resched_cause cause = ev->kind == EV_WORKER_LOST ? RESCHED_WORKER_LOST
                               : ev->kind == EV_DRAIN     ? RESCHED_DRAINED
                                                          : RESCHED_SPOT_TAKEN;
    w->state = cause == RESCHED_DRAINED ? WORKER_DRAINING : WORKER_LOST;
    int ji = s->sw[ev->worker].job;
    if (ji >= 0) {
        struct sim_job *j = &s->jobs[ji];
        struct resched_decision d;
        resched_on_worker(cause, j->mem_need, &d);
        if (d.action == RESCHED_CHECKPOINT_THEN_MOVE) {
            /* Drained or spot taken back: asked to move, it checkpoints. */
            ask_move(s, ji);
            long at = stop_with_checkpoint(s, ji);
            end_attempt(s, ji, at);
            attempt_stopped(s, ji, stop_reason_of(d.stop));
        } else {
            /* Lost: the latest checkpoint is what is left. */
            struct outcome o;
            outcome_of_worker_gone(j->status, &o);
            end_attempt(s, ji, j->checkpoint);
            apply_outcome(s, ji, &o);
        }
    }
    double back = cause == RESCHED_WORKER_LOST ? exponential(&s->rng, 2 * 3600.0)
                  : cause == RESCHED_DRAINED   ? 4 * 3600.0
                                               : exponential(&s->rng, 3 * 3600.0);
    push(s, s->now + back, EV_WORKER_BACK, -1, ev->worker, 0);
}

static void on_worker_back(struct sim *s, const struct event *ev)
{
    s->w[ev->worker].state = WORKER_ACTIVE;
    schedule_worker_events(s, ev->worker, s->now);
    need_pass(s);
}

/* The CPU time of this thread: a pass's cost without the time the machine
 * gave to other processes (the build machine is shared). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The pass's input: the jobs in the queue (plus `extra` when >= 0) into
 * s->pj, the accounts' running jobs into s->loads. */
static size_t pass_input(struct sim *s, long extra, size_t *n_loads)
{
    size_t n = 0;
    for (size_t i = 0; i <= s->n_queue; i++) {
        long ji = i < s->n_queue ? s->queue[i] : extra;
        if (ji < 0)
            continue;
        struct sim_job *j = &s->jobs[ji];
        if (i < s->n_queue && (!j->in_queue || j->worker >= 0 || job_status_is_terminal(j->status)))
            continue;
        s->pj[n++] = (struct sched_job){
            .id = ji, .account = j->account, .created_s = j->submit_s, .goal = j->goal,
            .mem_bytes = j->mem_need,
            .work_flops = (double)(j->max_steps - j->checkpoint) * j->tokens_per_step * j->fpt,
            .startup_s = j->startup_nominal_s,
            .deadline_s = j->est_high > 0 ? j->submit_s + j->est_high : 0};
        if (j->goal == SCHED_FINISH_BY) {
            s->pj[n - 1].finish_by_s = j->finish_by;
            finish_by_factors(s, j->method, s->pj[n - 1].finish_hi);
        }
    }
    size_t nl = 0;
    for (int a = 0; a < s->cfg->accounts; a++)
        if (s->account_running[a] > 0)
            s->loads[nl++] = (struct sched_account_load){(uint64_t)a, (int)s->account_running[a]};
    *n_loads = nl;
    return n;
}

static void on_pass(struct sim *s)
{
    s->pass_scheduled = false;
    s->last_pass = s->now;
    /* Drop jobs that left the queue (placed, cancelled, failed). */
    size_t n = 0;
    for (size_t i = 0; i < s->n_queue; i++) {
        struct sim_job *j = &s->jobs[s->queue[i]];
        if (j->in_queue && j->worker < 0 && !job_status_is_terminal(j->status))
            s->queue[n++] = s->queue[i];
    }
    s->n_queue = n;
    if (n == 0) {
        sched_free_at(s->w, (size_t)s->nw, s->now, s->horizon);
        return;
    }
    size_t nl;
    if (pass_input(s, -1, &nl) != n)
        violation(s, "queue and pass input disagree", -1);
    struct sched_pass_out out = {.assignments = s->pa, .free_at_s = s->horizon};
    double t0 = cpu_now();
    enum alallo_err e = sched_pass(s->pj, n, s->w, (size_t)s->nw, s->loads, nl, s->now, &out);
    double ms = (cpu_now() - t0) * 1e3;
    s->res->passes++;
    if ((long)n > s->res->biggest_pass_queued) {
        s->res->biggest_pass_queued = (long)n;
        s->res->biggest_pass_ms = ms;
    }
    if (ms > s->res->max_pass_ms) {
        s->res->max_pass_ms = ms;
        s->res->max_pass_queued = (long)n;
    }
    if (e) {
        violation(s, "scheduling pass failed", -1);
        return;
    }
    for (size_t k = 0; k < out.n_assignments; k++)
        start_attempt(s, (long)s->pj[out.assignments[k].job].id, (int)out.assignments[k].worker);
    /* Keep only the jobs still waiting, so that a job placed now and moved
     * before the next pass is never in the queue twice. */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        struct sim_job *j = &s->jobs[s->queue[i]];
        if (j->worker >= 0 || !j->in_queue)
            continue;
        if (j->status == JOB_QUEUED)
            j->message = MSG_WAITING_FOR_CAPACITY;
        s->queue[kept++] = s->queue[i];
    }
    s->n_queue = kept;
}

/* ---- set-up and results ----------------------------------------------- */

static void make_fleet(struct sim *s)
{
    for (int i = 0; i < s->nw; i++) {
        /* The first worker is always a big on-demand one, so that every
         * fleet has somewhere to run 4-bit 70B. */
        size_t k = i == 0 ? N_KINDS - 1 : pick(&s->rng, kind_weight, N_KINDS);
        enum worker_class c = i == 0 || u01(&s->rng) >= 0.45 ? WORKER_ON_DEMAND : WORKER_SPOT;
        struct sched_worker *w = &s->w[i];
        memset(w, 0, sizeof *w);
        snprintf(w->name, sizeof w->name, "%s-%d", kinds[k].name, i);
        w->cpus = 16;
        w->mem_bytes = (int64_t)(kinds[k].mem_gb * GB);
        w->class_ = c;
        w->price_per_hour = kinds[k].price * (c == WORKER_SPOT ? 0.4 : 1.0);
        s->sw[i].true_flops = kinds[k].flops * exp(0.05 * normal(&s->rng));
        w->flops = kinds[k].flops * exp(0.05 * normal(&s->rng)); /* its own measurement */
        s->sw[i].bench_flops = w->flops;
        w->state = WORKER_ACTIVE;
        s->sw[i].job = -1;
        s->sw[i].lost_mtbf_s = 300 * 3600.0;
        s->sw[i].drain_mtbf_s = 1000 * 3600.0;
        s->sw[i].spot_mtbf_s = 60 * 3600.0;
        s->horizon[i] = 0;
    }
}

/* Spreads arrivals so that the fleet is about cfg->load busy. */
static double arrival_span(struct sim *s)
{
    double work = 0, flops = 0;
    for (long i = 0; i < s->nj; i++)
        work += s->jobs[i].train_tokens * s->jobs[i].fpt * s->jobs[i].slowdown;
    for (int i = 0; i < s->nw; i++)
        flops += s->sw[i].true_flops;
    return work / (flops * s->cfg->load);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void finish_results(struct sim *s)
{
    struct sim_result *r = s->res;
    long n = s->covered + s->above + s->below;
    r->coverage = n ? (double)s->covered / (double)n : 0;
    r->above_high = n ? (double)s->above / (double)n : 0;
    r->below_low = n ? (double)s->below / (double)n : 0;
    float *ape = s->n_samples ? malloc(s->n_samples * sizeof *ape) : NULL;
    size_t m = 0;
    for (size_t i = 0; ape && i < s->n_samples; i++) {
        const struct tl_sample *x = &s->samples[i];
        const struct sim_job *j = &s->jobs[x->job];
        double actual = j->finish_s - (double)x->t;
        if (j->status != JOB_SUCCEEDED || actual <= 0)
            continue;
        ape[m++] = (float)(fabs((double)x->mid - actual) / actual);
    }
    if (m) {
        qsort(ape, m, sizeof *ape, cmp_float);
        r->time_left_mape_after_5pct = m % 2 ? ape[m / 2] : 0.5 * (ape[m / 2 - 1] + ape[m / 2]);
    }
    r->time_left_samples = (long)m;
    free(ape);
    float *ratio = malloc((size_t)s->nj * sizeof *ratio);
    size_t k = 0;
    for (long i = 0; ratio && i < s->nj; i++)
        if (s->jobs[i].est_low > 0)
            ratio[k++] = (float)(s->jobs[i].est_high / s->jobs[i].est_low);
    if (k) {
        qsort(ratio, k, sizeof *ratio, cmp_float);
        r->median_range_ratio = ratio[k / 2];
    }
    r->price_coverage = n ? (double)s->price_covered / (double)n : 0;
    k = 0;
    for (long i = 0; ratio && i < s->nj; i++)
        if (s->jobs[i].price_low > 0)
            ratio[k++] = (float)((double)s->jobs[i].price_high / (double)s->jobs[i].price_low);
    if (k) {
        qsort(ratio, k, sizeof *ratio, cmp_float);
        r->price_width = ratio[k / 2];
    }
    for (int mk = 0; ratio && mk < 2; mk++) {
        size_t c = 0, inside = 0;
        for (long i = 0; i < s->nj; i++) {
            const struct sim_job *j = &s->jobs[i];
            if (j->status != JOB_SUCCEEDED || !j->tl_seen[mk] || !(j->tl_lo[mk] > 0))
                continue;
            double left = j->finish_s - (double)j->tl_t[mk];
            inside += left >= j->tl_lo[mk] && left <= j->tl_hi[mk];
            ratio[c++] = j->tl_hi[mk] / j->tl_lo[mk];
        }
        if (c) {
            qsort(ratio, c, sizeof *ratio, cmp_float);
            r->width_at[mk] = ratio[c / 2];
            r->coverage_at[mk] = (double)inside / (double)c;
        }
    }
    free(ratio);
    r->virtual_hours = s->now / 3600.0;
}

void sim_config_default(struct sim_config *c)
{
    memset(c, 0, sizeof *c);
    c->jobs = 1000;
    c->workers = 50;
    c->seed = 1;
    c->accounts = 12;
    c->load = 0.75;
    c->pass_interval_s = 30;
    ledger_limits_default(&c->limits);
}

static void free_sim(struct sim *s)
{
    if (s->jobs)
        for (long i = 0; i < s->nj; i++)
            free(s->jobs[i].ledger);
    free(s->w);
    free(s->sw);
    free(s->jobs);
    free(s->hist);
    free(s->heap);
    free(s->queue);
    free(s->horizon);
    free(s->account_running);
    free(s->pj);
    free(s->pa);
    free(s->pfree);
    free(s->loads);
    free(s->samples);
}

enum alallo_err sim_run(const struct sim_config *c, struct sim_result *out, char *why,
                        size_t whycap)
{
    memset(out, 0, sizeof *out);
    if (c->jobs < 1 || c->jobs > SIM_MAX_JOBS || c->workers < 1 || c->workers > SIM_MAX_WORKERS ||
        c->accounts < 1 || c->accounts > 256 || !(c->load > 0 && c->load <= 10) ||
        !(c->pass_interval_s >= 0)) {
        snprintf(why, whycap, "jobs must be 1..%d, workers 1..%d, accounts 1..256", SIM_MAX_JOBS,
                 SIM_MAX_WORKERS);
        return ERR_INVALID;
    }
    double wall0 = clock_mono_s();
    struct sim s = {.cfg = c, .res = out, .nw = c->workers, .nj = c->jobs};
    rng_seed(&s.rng, c->seed);
    size_t nw = (size_t)c->workers, nj = (size_t)c->jobs;
    s.w = calloc(nw, sizeof *s.w);
    s.sw = calloc(nw, sizeof *s.sw);
    s.jobs = calloc(nj, sizeof *s.jobs);
    s.hist = calloc(1, sizeof *s.hist);
    s.fb_stale = true;
    s.queue = calloc(nj, sizeof *s.queue);
    s.horizon = calloc(nw, sizeof *s.horizon);
    s.account_running = calloc((size_t)c->accounts, sizeof *s.account_running);
    s.pj = calloc(nj, sizeof *s.pj);
    s.pa = calloc(nw, sizeof *s.pa);
    s.pfree = calloc(nw, sizeof *s.pfree);
    s.loads = calloc((size_t)c->accounts, sizeof *s.loads);
    size_t samples_cap = nj * REPORTS_PER_ATTEMPT * 2;
    s.samples = calloc(samples_cap < TL_SAMPLES_CAP ? samples_cap : TL_SAMPLES_CAP,
                       sizeof *s.samples);
    bool ok = s.w && s.sw && s.jobs && s.hist && s.queue && s.horizon && s.account_running &&
              s.pj && s.pa && s.pfree && s.loads && s.samples;
    if (!ok) {
        free_sim(&s);
        snprintf(why, whycap, "out of memory");
        return ERR_NOMEM;
    }
    est_history_init(s.hist);
    make_fleet(&s);
    for (long i = 0; i < s.nj; i++) {
        new_job(&s, i);
        s.jobs[i].ledger = malloc(sizeof *s.jobs[i].ledger);
        if (!s.jobs[i].ledger) {
            free_sim(&s);
            snprintf(why, whycap, "out of memory");
            return ERR_NOMEM;
        }
        ledger_job_init(s.jobs[i].ledger, 0, 0, 0, -1);
    }
    double span = c->burst ? 0 : arrival_span(&s);
    double t = 0;
    for (long i = 0; i < s.nj; i++) {
        if (!c->burst)
            t += exponential(&s.rng, span / (double)s.nj);
        push(&s, t, EV_ARRIVE, (int)i, -1, 0);
    }
    for (int i = 0; i < s.nw; i++)
        schedule_worker_events(&s, i, 0);

    while (s.terminal < s.nj && s.n_heap > 0 && !s.failed_alloc) {
        struct event ev = pop(&s);
        s.now = ev.t;
        switch (ev.kind) {
        case EV_ARRIVE: arrive(&s, ev.job); break;
        case EV_PASS: on_pass(&s); break;
        case EV_LOADED: on_loaded(&s, &ev); break;
        case EV_REPORT: on_report(&s, &ev); break;
        case EV_LIMIT: on_limit(&s, &ev); break;
        case EV_CANCEL: on_cancel(&s, &ev); break;
        case EV_WORKER_LOST:
        case EV_SPOT_TAKEN:
        case EV_DRAIN: on_worker_down(&s, &ev); break;
        case EV_WORKER_BACK: on_worker_back(&s, &ev); break;
        }
        if (ev.job >= 0)
            check_job(&s, ev.job);
    }
    enum alallo_err err = ERR_OK;
    if (s.failed_alloc) {
        snprintf(why, whycap, "out of memory");
        err = ERR_NOMEM;
    } else if (s.terminal < s.nj) {
        violation(&s, "the simulation ended with jobs unfinished", -1);
    }
    out->jobs = s.nj;
    finish_results(&s);
    free_sim(&s);
    out->wall_s = clock_mono_s() - wall0;
    return err;
}

int sim_result_json(const struct sim_result *r, bool with_timing, char *buf, size_t cap)
{
    char pass_ms[32] = "null", wall[32] = "null", big_ms[32] = "null", pass_q[32] = "null";
    if (with_timing) {
        snprintf(pass_q, sizeof pass_q, "%ld", r->max_pass_queued);
        snprintf(pass_ms, sizeof pass_ms, "%.3f", r->max_pass_ms);
        snprintf(wall, sizeof wall, "%.3f", r->wall_s);
        snprintf(big_ms, sizeof big_ms, "%.3f", r->biggest_pass_ms);
    }
    char first[sizeof r->first_violation];
    snprintf(first, sizeof first, "%s", r->first_violation);
    for (char *p = first; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = '\'';
    int n = snprintf(
        buf, cap,
        "{\"jobs\":%ld,\"coverage\":%.4f,\"above_high\":%.4f,\"below_low\":%.4f,"
        "\"time_left_mape_after_5pct\":%.4f,\"invariant_violations\":%ld,\"billed_twice\":%ld,"
        "\"max_pass_ms\":%s,\"wall_s\":%s,\"succeeded\":%ld,\"failed\":%ld,\"cancelled\":%ld,"
        "\"not_available\":%ld,\"stopped\":%ld,\"moves\":%ld,\"fenced_reports\":%ld,"
        "\"time_left_samples\":%ld,\"median_range_ratio\":%.3f,\"max_queued\":%ld,\"max_pass_queued\":%s,"
        "\"biggest_pass_queued\":%ld,\"biggest_pass_ms\":%s,\"passes\":%ld,"
        "\"virtual_hours\":%.2f,\"price_coverage\":%.4f,\"price_width_before_start\":%.3f,"
        "\"width_before_start\":%.3f,"
        "\"width_at_20pct\":%.3f,\"coverage_at_20pct\":%.4f,\"width_at_50pct\":%.3f,"
        "\"coverage_at_50pct\":%.4f,\"first_violation\":\"%s\"}",
        r->jobs, r->coverage, r->above_high, r->below_low, r->time_left_mape_after_5pct,
        r->invariant_violations, r->billed_twice, pass_ms, wall, r->succeeded, r->failed,
        r->cancelled, r->not_available, r->stopped, r->moves, r->fenced_reports,
        r->time_left_samples, r->median_range_ratio, r->max_queued, pass_q, r->biggest_pass_queued, big_ms,
        r->passes, r->virtual_hours, r->price_coverage, r->price_width, r->median_range_ratio,
        r->width_at[0],
        r->coverage_at[0], r->width_at[1], r->coverage_at[1], first);
    if (n < 0 || (size_t)n >= cap)
        return -1;
    if (r->finish_by_jobs > 0) { /* only when asked for (--finish-by-share) */
        int k = snprintf(buf + n - 1, cap - (size_t)n + 1,
                         ",\"finish_by\":{\"jobs\":%ld,\"refused\":%ld,\"succeeded\":%ld,"
                         "\"met\":%ld,\"missed\":%ld,\"moves\":%ld}}",
                         r->finish_by_jobs, r->finish_by_refused, r->finish_by_succeeded,
                         r->finish_by_met, r->finish_by_missed, r->finish_by_moves);
        if (k < 0 || (size_t)k >= cap - (size_t)n + 1)
            return -1;
        n += k - 1;
    }
    return n;
}
