/* estimator.c - nominal time from the job and the fleet, ranges from the
 * calibration history. */
#include "sched/estimator.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Percentiles of the band. */
#define Q_LO 0.10
#define Q_HI 0.90
/* How many samples weigh as much as the default band. */
#define PRIOR_WEIGHT 10.0
/* Below this many samples a cell borrows the other methods of its class. */
#define BORROW_BELOW 30u
/* The most rings one band reads: a cell and its neighbours. */
#define MAX_RINGS (PLAN_METHOD_COUNT * WORKER_CLASS_COUNT)
/* Log ratios are clamped to this, so one absurd report cannot wreck a band. */
#define LOG_RATIO_MAX 5.0
/* Default bands (multipliers of nominal) for a service with no history yet:
 * wide, and wider above than below. */
static const double default_train[2] = {0.6, 2.0};
static const double default_start[2][2] = {{0.5, 3.0}, {0.3, 4.0}};

void est_history_init(struct est_history *h)
{
    memset(h, 0, sizeof *h);
}

static double clamp_log(double l)
{
    return l > LOG_RATIO_MAX ? LOG_RATIO_MAX : l < -LOG_RATIO_MAX ? -LOG_RATIO_MAX : l;
}

static bool positive(double x)
{
    return x > 0 && isfinite(x);
}

static void ring_add(struct est_ring *r, double actual_s, double nominal_s)
{
    if (!positive(actual_s) || !positive(nominal_s))
        return;
    r->log_ratio[r->next] = (float)clamp_log(log(actual_s / nominal_s));
    r->next = (r->next + 1) % EST_HISTORY_CAP;
    if (r->n < EST_HISTORY_CAP)
        r->n++;
}

static bool valid_cell(enum plan_method m, enum worker_class c)
{
    return (int)m >= 0 && m < PLAN_METHOD_COUNT && (int)c >= 0 && c < WORKER_CLASS_COUNT;
}

void est_history_add_train(struct est_history *h, enum plan_method m, enum worker_class c,
                           double actual_s, double nominal_s)
{
    if (h && valid_cell(m, c))
        ring_add(&h->train[m][c], actual_s, nominal_s);
}

void est_history_add_job(struct est_history *h, enum plan_method m, enum worker_class c,
                         bool waited, enum sched_goal g, double start_actual_s,
                         double start_nominal_s, double train_actual_s, double train_nominal_s)
{
    if (!h || !valid_cell(m, c) || (int)g < 0 || g >= SCHED_GOAL_COUNT || !positive(start_actual_s) || !positive(start_nominal_s) ||
        !positive(train_actual_s) || !positive(train_nominal_s))
        return;
    struct est_job_ring *r = &h->job[m][c][waited ? 1 : 0][g];
    r->log_start[r->next] = (float)clamp_log(log(start_actual_s / start_nominal_s));
    r->log_train[r->next] = (float)clamp_log(log(train_actual_s / train_nominal_s));
    r->next = (r->next + 1) % EST_HISTORY_CAP;
    if (r->n < EST_HISTORY_CAP)
        r->n++;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Linear-interpolated quantile q of sorted v[n]. */
static double quantile(const float *v, size_t n, double q)
{
    double pos = q * (double)(n - 1);
    size_t i = (size_t)pos;
    if (i + 1 >= n)
        return v[n - 1];
    double f = pos - (double)i;
    return v[i] * (1.0 - f) + v[i + 1] * f;
}

/* The band of n log ratios v[] (sorted here), pulled towards the default
 * band dflt (multipliers) when n is small. */
static struct est_band band_from(float *v, size_t n, const double dflt[2])
{
    double dlo = log(dflt[0]), dhi = log(dflt[1]);
    struct est_band b = {.lo = dflt[0], .hi = dflt[1], .n = (int)n};
    if (n == 0)
        return b;
    qsort(v, n, sizeof v[0], cmp_float);
    double mean = 0, var = 0;
    for (size_t i = 0; i < n; i++)
        mean += v[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++)
        var += (v[i] - mean) * (v[i] - mean);
    double sd = n > 1 ? sqrt(var / (double)(n - 1)) : 0;
    double se = sd / sqrt((double)n);
    double med = quantile(v, n, 0.5);
    double lo = quantile(v, n, Q_LO) - se;
    double hi = quantile(v, n, Q_HI) + 2.0 * se;
    /* Blend with the default band, centred on what history says. */
    double w = (double)n / ((double)n + PRIOR_WEIGHT);
    lo = w * lo + (1.0 - w) * (med + dlo);
    hi = w * hi + (1.0 - w) * (med + dhi);
    if (hi - med < med - lo) /* wider on the upper side, always */
        hi = med + (med - lo);
    b.lo = exp(lo);
    b.hi = exp(hi);
    return b;
}

struct est_band est_band_train(const struct est_history *h, enum plan_method m,
                               enum worker_class c)
{
    if (!h || !valid_cell(m, c))
        return (struct est_band){.lo = default_train[0], .hi = default_train[1]};
    float v[EST_HISTORY_CAP * PLAN_METHOD_COUNT];
    size_t n = 0;
    /* The cell, then (while thin) the other methods of the class. */
    for (int k = 0; k < PLAN_METHOD_COUNT; k++) {
        int o = k == 0 ? (int)m : k <= (int)m ? k - 1 : k;
        if (k > 0 && n >= BORROW_BELOW)
            break;
        const struct est_ring *r = &h->train[o][c];
        for (uint32_t i = 0; i < r->n; i++)
            v[n++] = r->log_ratio[i];
    }
    return band_from(v, n, default_train);
}

struct est_band est_band_job(const struct est_history *h, enum plan_method m,
                             enum worker_class c, bool waits, enum sched_goal g,
                             double start_share)
{
    int wi = waits ? 1 : 0;
    double sh = start_share > 0 ? start_share < 1 ? start_share : 1 : 0;
    double dflt[2] = {sh * default_start[wi][0] + (1 - sh) * default_train[0],
                      sh * default_start[wi][1] + (1 - sh) * default_train[1]};
    if (!h || !valid_cell(m, c) || (int)g < 0 || g >= SCHED_GOAL_COUNT)
        return (struct est_band){.lo = dflt[0], .hi = dflt[1]};
    float v[EST_HISTORY_CAP * MAX_RINGS];
    size_t n = 0;
    /* The cell, then (while thin) the other methods of its class, then the
     * other class. */
    for (int cc = 0; cc < WORKER_CLASS_COUNT; cc++) {
        int cls = cc == 0 ? (int)c : cc <= (int)c ? cc - 1 : cc;
        for (int k = 0; k < PLAN_METHOD_COUNT; k++) {
            int o = k == 0 ? (int)m : k <= (int)m ? k - 1 : k;
            if ((k > 0 || cc > 0) && n >= BORROW_BELOW)
                break;
            const struct est_job_ring *r = &h->job[o][cls][wi][g];
            for (uint32_t i = 0; i < r->n; i++)
                v[n++] = (float)log(sh * exp(r->log_start[i]) + (1 - sh) * exp(r->log_train[i]));
        }
    }
    return band_from(v, n, dflt);
}

void est_train_range(const struct est_history *h, enum plan_method m, enum worker_class c,
                     double nominal_s, double *low_s, double *high_s)
{
    struct est_band b = est_band_train(h, m, c);
    *low_s = nominal_s * b.lo;
    *high_s = nominal_s * b.hi;
}

static enum alallo_err fail(char *why, size_t cap, enum alallo_err e, const char *reason)
{
    if (why && cap)
        snprintf(why, cap, "%s", reason);
    return e;
}

/* With no active worker that fits, the best known one for pricing and a
 * guess at the wait: one training time, until a worker comes back. */
static int fallback_worker(const struct sched_job *sj, const struct sched_worker *workers,
                           size_t n)
{
    int best = -1;
    double best_t = INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (workers[i].state == WORKER_LOST || workers[i].mem_bytes < sj->mem_bytes ||
            !sched_gpu_fits(sj, workers[i].gpus > 0 ? workers[i].gpu_mem_bytes : -1))
            continue;
        double t = capacity_train_seconds(sj->work_flops, &workers[i]);
        if (t < best_t) {
            best_t = t;
            best = (int)i;
        }
    }
    return best;
}

enum alallo_err est_estimate(const struct est_request *req, const struct sched_worker *workers,
                             size_t n_workers, const double *free_at,
                             const struct est_history *h, struct estimate *out, char *why,
                             size_t whycap)
{
    memset(out, 0, sizeof *out);
    out->worker = -1;
    snprintf(out->currency, sizeof out->currency, "%s",
             req->currency && req->currency[0] ? req->currency : "USD");
    if (n_workers > SCHED_MAX_WORKERS)
        return fail(why, whycap, ERR_INVALID, "too many workers");
    if (!(req->train_tokens > 0) || !isfinite(req->train_tokens) || req->train_tokens > 1e15)
        return fail(why, whycap, ERR_INVALID, "token count out of range");
    if (!(req->reference_tokens >= 0) || req->reference_tokens > 1e15)
        return fail(why, whycap, ERR_INVALID, "reference token count out of range");
    if ((int)req->goal < 0 || req->goal >= SCHED_GOAL_COUNT)
        return fail(why, whycap, ERR_INVALID, "unknown goal");
    struct plan_job job;
    enum alallo_err e = planner_normalize(&req->job, &job, why, whycap);
    if (e)
        return e;

    out->method = planner_method(job.precision, job.adapter);
    out->fit = planner_feasibility(&job, workers, n_workers, &out->memory_bytes);
    out->fail_message = planner_fit_message(out->fit);
    if (out->fit != PLAN_FITS) {
        out->message = job_message_text(out->fail_message);
        return ERR_OK;
    }
    out->flops_per_token = planner_flops_per_token(&job);
    out->gpu_need_bytes = planner_gpu_need(&job);
    out->work_flops = planner_work_flops(&job, req->train_tokens, req->reference_tokens);
    out->reference_flops = out->work_flops - req->train_tokens * out->flops_per_token;
    out->startup_s = req->startup_s > 0 ? req->startup_s : EST_DEFAULT_STARTUP_S;

    double factor = req->work_factor > 0 && isfinite(req->work_factor) ? req->work_factor : 1.0;
    struct sched_job sj = {.goal = req->goal, .mem_bytes = out->memory_bytes,
                           .work_flops = out->work_flops * factor, .startup_s = out->startup_s,
                           .created_s = req->now, .gpu_mem_bytes = out->gpu_need_bytes};
    double *own = NULL;
    if (!free_at) {
        own = malloc((n_workers ? n_workers : 1) * sizeof *own);
        if (!own)
            return fail(why, whycap, ERR_NOMEM, "out of memory");
        sched_free_at(workers, n_workers, req->now, own);
        free_at = own;
    }
    bool free_now = false;
    for (size_t i = 0; i < n_workers; i++)
        if (workers[i].state == WORKER_ACTIVE && workers[i].mem_bytes >= sj.mem_bytes &&
            sched_gpu_fits(&sj, workers[i].gpus > 0 ? workers[i].gpu_mem_bytes : -1) &&
            free_at[i] <= req->now)
            free_now = true;
    struct sched_choice c;
    if (sched_choose(&sj, workers, n_workers, free_at, req->now, &c)) {
        out->worker = c.worker;
        out->train_s = c.train_s;
        out->wait_s = fmax(0, c.start_s - req->now);
    } else {
        out->worker = fallback_worker(&sj, workers, n_workers);
        if (out->worker < 0) { /* cannot happen when fit == PLAN_FITS */
            free(own);
            return fail(why, whycap, ERR_INTERNAL, "no worker for a job that fits");
        }
        out->train_s = capacity_train_seconds(sj.work_flops, &workers[out->worker]);
        out->wait_s = out->train_s;
    }
    free(own);

    const struct sched_worker *w = &workers[out->worker];
    snprintf(out->worker_name, sizeof out->worker_name, "%s", w->name);
    out->worker_class = w->class_;
    if (w->gpus > 0) {
        struct plan_job at = job;
        struct plan_memory gm;
        at.batch = planner_gpu_batch(&job, w->gpu_mem_bytes);
        if (at.batch > 0 && planner_memory_gpu(&at, &gm, NULL, 0) == ERR_OK) {
            out->gpu_batch = at.batch;
            out->gpu_memory_bytes = gm.total;
        }
    }
    out->waits = out->wait_s > 0;
    if (!free_now)
        out->message = EST_NO_CAPACITY_MESSAGE;
    else if (out->wait_s > 0) /* its goal waits for a busy worker: say so */
        out->message = req->goal == SCHED_LOWEST_COST ? EST_WAITS_CHEAPER_MESSAGE
                                                      : EST_WAITS_FASTER_MESSAGE;
    else
        out->message = NULL;

    double start = out->wait_s + out->startup_s;
    double nominal = start + out->train_s;
    out->finish_s = req->now + nominal;
    struct est_band b =
        est_band_job(h, out->method, w->class_, out->waits, req->goal, start / nominal);
    out->time_low_s = nominal * b.lo;
    out->time_high_s = nominal * b.hi;
    job_estimate_range_text(out->time_text, sizeof out->time_text, out->time_low_s,
                            out->time_high_s);
    est_train_range(h, out->method, w->class_, out->train_s, &out->train_low_s,
                    &out->train_high_s);
    out->price_low_micros = capacity_price_micros(w->price_per_hour, out->train_low_s);
    out->price_high_micros = capacity_price_micros(w->price_per_hour, out->train_high_s);
    return ERR_OK;
}

void est_time_limit_message(struct estimate *e, double limit_s)
{
    e->limit_message[0] = '\0';
    if (!(limit_s > 0) || e->fit != PLAN_FITS || e->worker < 0)
        return;
    double low = e->startup_s + e->train_low_s, high = e->startup_s + e->train_high_s;
    if (!(high > limit_s))
        return;
    snprintf(e->limit_message, sizeof e->limit_message,
             "The job %s reach the %g-hour time limit before it finishes; it would then stop, "
             "and you pay nothing.",
             low > limit_s ? "would" : "may", limit_s / 3600.0);
}

double est_validation_share(double train_tokens, double valid_tokens, long valid_examples,
                            int n_epochs, long max_steps, int batch, long valid_every)
{
    if (!(train_tokens > 0) || !(valid_tokens > 0) || valid_examples <= 0)
        return 0.0;
    /* forward only: about 1 of the 3 matrix products per weight a step makes */
    const double forward_share = 1.0 / 3.0;
    double per_example = valid_tokens / (double)valid_examples;
    double batches = valid_every > 0 ? (double)(max_steps / valid_every) : 0.0;
    long per_batch = batch < valid_examples ? batch : valid_examples;
    double tokens = (double)(n_epochs > 0 ? n_epochs : 1) * valid_tokens +
                    batches * (double)per_batch * per_example;
    return forward_share * tokens / train_tokens;
}

double est_samples_share(double train_tokens, int n_prompts, double prompt_tokens,
                         int answer_tokens, int n_epochs)
{
    if (!(train_tokens > 0) || n_prompts <= 0 || !(prompt_tokens >= 0) || answer_tokens < 0)
        return 0.0;
    const double forward_share = 1.0 / 3.0;
    double rounds = 1.0 + (double)(n_epochs > 0 ? n_epochs : 1); /* the base model's, each epoch */
    double per_round = prompt_tokens + EST_DECODE_SLOWDOWN * (double)n_prompts * answer_tokens;
    return forward_share * rounds * per_round / train_tokens;
}

void est_add_validation(struct estimate *e, double share)
{
    if (!(share > 0))
        return;
    double extra_low = e->train_low_s * share, extra_high = e->train_high_s * share;
    e->train_s *= 1.0 + share;
    e->train_low_s += extra_low;
    e->train_high_s += extra_high;
    e->time_low_s += extra_low;
    e->time_high_s += extra_high;
    e->finish_s += e->train_s * share / (1.0 + share);
    e->price_low_micros = (int64_t)llround((double)e->price_low_micros * (1.0 + share));
    e->price_high_micros = (int64_t)llround((double)e->price_high_micros * (1.0 + share));
    job_estimate_range_text(e->time_text, sizeof e->time_text, e->time_low_s,
                            e->time_high_s);
}

int est_gpu_kinds(const struct sched_worker *workers, size_t n, struct est_gpu_kind *out, int cap)
{
    int k = 0;
    double log_sum[EST_GPU_KINDS_MAX] = {0};
    if (cap > EST_GPU_KINDS_MAX)
        cap = EST_GPU_KINDS_MAX;
    for (size_t i = 0; i < n; i++) {
        const struct sched_worker *w = &workers[i];
        if (w->gpus <= 0 || !w->gpu_kind[0] || !(w->flops > 0) || !isfinite(w->flops))
            continue;
        int at = -1;
        for (int j = 0; j < k && at < 0; j++)
            if (strcmp(out[j].kind, w->gpu_kind) == 0)
                at = j;
        if (at < 0) {
            if (k >= cap)
                continue;
            at = k++;
            memset(&out[at], 0, sizeof out[at]);
            snprintf(out[at].kind, sizeof out[at].kind, "%s", w->gpu_kind);
        }
        log_sum[at] += log(w->flops / w->gpus);
        out[at].workers++;
    }
    for (int j = 0; j < k; j++)
        out[j].flops_per_gpu = exp(log_sum[j] / out[j].workers);
    return k;
}

void est_gpu_fill_speed(struct sched_worker *workers, size_t n)
{
    struct est_gpu_kind kinds[EST_GPU_KINDS_MAX];
    int k = est_gpu_kinds(workers, n, kinds, EST_GPU_KINDS_MAX);
    for (size_t i = 0; i < n; i++) {
        struct sched_worker *w = &workers[i];
        if (w->gpus <= 0 || w->flops > 0)
            continue;
        for (int j = 0; j < k; j++)
            if (strcmp(kinds[j].kind, w->gpu_kind) == 0)
                w->flops = kinds[j].flops_per_gpu * w->gpus;
    }
}

double est_rft_tokens(double prompt_tokens, long prompts, int group, int answer_tokens, bool kl)
{
    double answers = (double)prompts * answer_tokens / 2.0;
    double rollout = prompt_tokens / 3.0 + answers * EST_DECODE_SLOWDOWN / 3.0;
    double update = (prompt_tokens + answers) * (kl ? 4.0 / 3.0 : 1.0);
    return group * (rollout + update);
}
