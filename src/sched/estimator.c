/* estimator.c - nominal time from the job and the fleet, ranges from the
 * calibration history. */
#include "sched/estimator.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Percentiles of the band: each part's band holds 90% of its history. */
#define Q_LO 0.05
#define Q_HI 0.95
/* How many samples weigh as much as the default band. */
#define PRIOR_WEIGHT 3.0
/* How many succeeded jobs weigh as much as a margin of 0. */
#define MARGIN_PRIOR 5.0
/* The margin never narrows the sum of the parts to less than this share
 * of its half-width (in logs). */
#define MARGIN_KEEP 0.5
/* Below this many samples a cell borrows the other methods of its class. */
#define BORROW_BELOW 30u
/* The most rings one band reads: a cell and its neighbours. */
#define MAX_RINGS (PLAN_METHOD_COUNT * WORKER_CLASS_COUNT)
/* The most rings one margin reads. */
#define MAX_MARGIN_RINGS (EST_TL_CELLS > EST_WAIT_CELLS ? EST_TL_CELLS : EST_WAIT_CELLS)
/* Log ratios are clamped to this, so one absurd report cannot wreck a band. */
#define LOG_RATIO_MAX 5.0
/* Default bands (multipliers of nominal) for a service with no history yet:
 * wide, and wider above than below. */
static const double default_train[2] = {0.6, 2.0};
static const double default_start[2][2] = {{0.5, 3.0}, {0.3, 4.0}};
/* A wait with no running job to read (its worker is draining, or nothing
 * can place the job now): the waiting default band. */
#define UNREAD_WAIT (default_start[1])

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

static void ring_push(struct est_ring *r, double v)
{
    r->log_ratio[r->next] = (float)v;
    r->next = (r->next + 1) % EST_HISTORY_CAP;
    if (r->n < EST_HISTORY_CAP)
        r->n++;
}

static void ring_add(struct est_ring *r, double actual_s, double nominal_s)
{
    if (!positive(actual_s) || !positive(nominal_s))
        return;
    ring_push(r, clamp_log(log(actual_s / nominal_s)));
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

void est_history_add_borrowed(struct est_history *h, enum plan_method m, enum worker_class c,
                              double actual_s, double predicted_s)
{
    if (h && valid_cell(m, c))
        ring_add(&h->borrowed[m][c], actual_s, predicted_s);
}

int est_shape_nearest(const struct est_shape *want, const struct est_shape *known, int n)
{
    int best = -1;
    double best_key[3] = {0, 0, 0};
    double tokens = (double)(want->batch > 0 ? want->batch : 1) *
                    (want->seq_len > 0 ? want->seq_len : 1);
    for (int i = 0; i < n; i++) {
        const struct est_shape *k = &known[i];
        if (strcmp(k->model, want->model) != 0 || strcmp(k->precision, want->precision) != 0)
            continue;
        double kt = (double)(k->batch > 0 ? k->batch : 1) * (k->seq_len > 0 ? k->seq_len : 1);
        double key[3] = {(double)(strcmp(k->adapter, want->adapter) != 0) +
                             (double)(strcmp(k->method, want->method) != 0),
                         fabs(log(kt / tokens)),
                         fabs(log((double)(k->batch > 0 ? k->batch : 1) /
                                  (want->batch > 0 ? want->batch : 1)))};
        bool better = best < 0;
        for (int d = 0; d < 3 && !better; d++) {
            if (key[d] < best_key[d] - 1e-12)
                better = true;
            else if (key[d] > best_key[d] + 1e-12)
                break;
        }
        if (better) {
            best = i;
            memcpy(best_key, key, sizeof key);
        }
    }
    return best;
}

void est_history_add_start(struct est_history *h, enum plan_method m, enum worker_class c,
                           double actual_s, double nominal_s)
{
    if (h && valid_cell(m, c))
        ring_add(&h->start[m][c], actual_s, nominal_s);
}

double est_range_spread(double actual_s, double low_s, double high_s, double margin)
{
    if (!positive(actual_s) || !positive(low_s) || !positive(high_s) || high_s < low_s ||
        !isfinite(margin))
        return NAN;
    double half = 0.5 * log(high_s / low_s) - margin; /* the parts' sum's */
    double off = fabs(log(actual_s / sqrt(low_s * high_s)));
    return clamp_log(off - half);
}

int est_wait_cell(bool waits, double wait_s, double total_s)
{
    if (!waits)
        return 0;
    return total_s > 0 && wait_s < EST_LONG_WAIT_SHARE * total_s ? 1 : 2;
}

void est_history_add_spread(struct est_history *h, int cell, double spread)
{
    if (!h || !isfinite(spread) || cell < 0 || cell >= EST_WAIT_CELLS)
        return;
    ring_push(&h->spread[cell], spread);
}

/* One error of a ring with its weight: newer errors weigh more. */
struct wv {
    float v, w;
};

/* The weight of entry i of a ring whose next entry goes at `next`: halves
 * every EST_HALF_LIFE entries added since it (1 for the newest). */
static float age_weight(uint32_t next, uint32_t i)
{
    uint32_t age = (next + EST_HISTORY_CAP - 1u - i) % EST_HISTORY_CAP;
    return (float)exp2(-(double)age / EST_HALF_LIFE);
}

/* Appends ring r's entries with their weights to v[n..); returns the new n. */
static size_t ring_collect(const struct est_ring *r, struct wv *v, size_t n)
{
    for (uint32_t i = 0; i < r->n; i++)
        v[n++] = (struct wv){.v = r->log_ratio[i], .w = age_weight(r->next, i)};
    return n;
}

static int cmp_wv(const void *a, const void *b)
{
    float x = ((const struct wv *)a)->v, y = ((const struct wv *)b)->v;
    return (x > y) - (x < y);
}

/* Quantile q of sorted v[n] by weight: entry i stands at the middle of its
 * weight, the lowest at 0 and the highest at 1, linear between (with equal
 * weights, the plain linear-interpolated quantile). */
static double quantile(const struct wv *v, size_t n, double q)
{
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += v[i].w;
    double span = total - 0.5 * (v[0].w + v[n - 1].w);
    if (n == 1 || !(span > 0))
        return v[n - 1].v;
    double below = 0, prev_p = 0;
    for (size_t i = 0; i < n; i++) {
        double p = (below + 0.5 * (v[i].w - v[0].w)) / span;
        if (p >= q) {
            if (i == 0 || p <= prev_p)
                return v[i].v;
            double f = (q - prev_p) / (p - prev_p);
            return v[i - 1].v * (1.0 - f) + v[i].v * f;
        }
        prev_p = p;
        below += v[i].w;
    }
    return v[n - 1].v;
}

/* How many equal samples v[n]'s weights are worth: (sum w)^2 / sum w^2. */
static double effective_n(const struct wv *v, size_t n)
{
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        s += v[i].w;
        s2 += (double)v[i].w * v[i].w;
    }
    return s2 > 0 ? s * s / s2 : 0;
}

/* The band of n weighted log ratios v[] (sorted here), pulled towards the
 * default band dflt (multipliers) while their effective number is small. */
static struct est_band band_from(struct wv *v, size_t n, const double dflt[2])
{
    double dlo = log(dflt[0]), dhi = log(dflt[1]);
    struct est_band b = {.lo = dflt[0], .hi = dflt[1], .n = (int)n};
    if (n == 0)
        return b;
    qsort(v, n, sizeof v[0], cmp_wv);
    double total = 0, mean = 0, var = 0;
    for (size_t i = 0; i < n; i++) {
        total += v[i].w;
        mean += (double)v[i].w * v[i].v;
    }
    mean /= total;
    for (size_t i = 0; i < n; i++)
        var += v[i].w * (v[i].v - mean) * (v[i].v - mean);
    double ne = effective_n(v, n);
    double sd = ne > 1 ? sqrt(var / total * ne / (ne - 1)) : 0;
    double se = ne > 0 ? sd / sqrt(ne) : 0;
    double med = quantile(v, n, 0.5);
    /* The spread measured, and the error of where its middle is. */
    double lo = quantile(v, n, Q_LO) - se;
    double hi = quantile(v, n, Q_HI) + se;
    /* Blend with the default band, centred on what history says. */
    double w = ne / (ne + PRIOR_WEIGHT);
    lo = w * lo + (1.0 - w) * (med + dlo);
    hi = w * hi + (1.0 - w) * (med + dhi);
    b.lo = exp(lo);
    b.hi = exp(hi);
    return b;
}

/* The band of the rings rings[m'][c] (the cell, then while thin the other
 * methods of its class), with the default training band as prior. */
static struct est_band train_like_band(const struct est_ring rings[PLAN_METHOD_COUNT][WORKER_CLASS_COUNT],
                                       enum plan_method m, enum worker_class c)
{
    struct wv v[EST_HISTORY_CAP * PLAN_METHOD_COUNT];
    size_t n = 0;
    for (int k = 0; k < PLAN_METHOD_COUNT; k++) {
        int o = k == 0 ? (int)m : k <= (int)m ? k - 1 : k;
        if (k > 0 && n >= BORROW_BELOW)
            break;
        n = ring_collect(&rings[o][c], v, n);
    }
    return band_from(v, n, default_train);
}

struct est_band est_band_train(const struct est_history *h, enum plan_method m,
                               enum worker_class c)
{
    if (!h || !valid_cell(m, c))
        return (struct est_band){.lo = default_train[0], .hi = default_train[1]};
    return train_like_band(h->train, m, c);
}

struct est_band est_band_borrowed(const struct est_history *h, enum plan_method m,
                                  enum worker_class c)
{
    if (!h || !valid_cell(m, c))
        return (struct est_band){.lo = default_train[0], .hi = default_train[1]};
    return train_like_band(h->borrowed, m, c);
}

/* The cells (method, class) a band of (m, c) reads while the ones before
 * are thin: the cell, the other methods of its class, then those of the
 * other class. Returns how many (MAX_RINGS). */
static int borrow_cells(enum plan_method m, enum worker_class c, int cells[MAX_RINGS][2])
{
    int n = 0;
    for (int cc = 0; cc < WORKER_CLASS_COUNT; cc++)
        for (int k = 0; k < PLAN_METHOD_COUNT; k++) {
            cells[n][0] = k == 0 ? (int)m : k <= (int)m ? k - 1 : k;
            cells[n][1] = cc == 0 ? (int)c : cc <= (int)c ? cc - 1 : cc;
            n++;
        }
    return n;
}

struct est_band est_band_start(const struct est_history *h, enum plan_method m,
                               enum worker_class c)
{
    if (!h || !valid_cell(m, c))
        return (struct est_band){.lo = default_start[0][0], .hi = default_start[0][1]};
    struct wv v[EST_HISTORY_CAP * MAX_RINGS];
    size_t n = 0;
    /* loading depends on the model more than on the method */
    int cells[MAX_RINGS][2];
    int nc = borrow_cells(m, c, cells);
    for (int i = 0; i < nc && (i == 0 || n < BORROW_BELOW); i++)
        n = ring_collect(&h->start[cells[i][0]][cells[i][1]], v, n);
    return band_from(v, n, default_start[0]);
}

/* The q quantile of the rings rings[order[0..n)] (the first, then while
 * thin the next ones), their entries weighed by recency,
 * pulled towards `prior` by MARGIN_PRIOR effective entries. */
static double ring_margin_to(const struct est_ring *const *rings, int n_rings, double q,
                             double prior)
{
    struct wv v[MAX_MARGIN_RINGS * EST_HISTORY_CAP];
    size_t n = 0;
    for (int k = 0; k < n_rings; k++) {
        if (k > 0 && n >= BORROW_BELOW)
            break;
        n = ring_collect(rings[k], v, n);
    }
    if (n == 0)
        return prior;
    qsort(v, n, sizeof v[0], cmp_wv);
    double ne = effective_n(v, n);
    return (ne * quantile(v, n, q) + MARGIN_PRIOR * prior) / (ne + MARGIN_PRIOR);
}

/* ring_margin_to, pulled towards 0. */
static double ring_margin(const struct est_ring *const *rings, int n_rings, double q)
{
    return ring_margin_to(rings, n_rings, q, 0.0);
}

double est_range_margin(const struct est_history *h, int cell)
{
    if (!h || cell < 0 || cell >= EST_WAIT_CELLS)
        return 0.0;
    /* The cell, then (while thin) its neighbours, nearest first. */
    static const int order[EST_WAIT_CELLS][EST_WAIT_CELLS] = {{0, 1, 2}, {1, 2, 0}, {2, 1, 0}};
    const struct est_ring *r[EST_WAIT_CELLS];
    for (int k = 0; k < EST_WAIT_CELLS; k++)
        r[k] = &h->spread[order[cell][k]];
    return ring_margin(r, EST_WAIT_CELLS, EST_COVER);
}

void est_history_add_price_spread(struct est_history *h, double spread)
{
    if (h && isfinite(spread))
        ring_push(&h->price_spread, clamp_log(spread));
}

double est_price_spread(double end, double price, double low, double high)
{
    if (!(end > 0) || !(price > 0) || !(low > 0) || !(high > low) || !isfinite(high))
        return NAN;
    return log(end / price) / (0.5 * log(high / low));
}

double est_price_margin(const struct est_history *h)
{
    if (!h)
        return 0.0;
    const struct est_ring *r = &h->price_spread;
    return ring_margin(&r, 1, EST_PRICE_COVER);
}

void est_history_add_price_high_spread(struct est_history *h, double spread)
{
    if (h && isfinite(spread))
        ring_push(&h->price_spread_high, clamp_log(spread));
}

double est_price_high_margin(const struct est_history *h)
{
    if (!h)
        return 0.0;
    const struct est_ring *r = &h->price_spread_high;
    return fmax(0.0, -ring_margin(&r, 1, EST_PRICE_COVER));
}

void est_history_add_tl_spread(struct est_history *h, int cell, int side, double spread)
{
    if (!h || !isfinite(spread) || cell < 0 || cell >= EST_TL_CELLS || side < 0 || side > 1)
        return;
    ring_push(&h->tl_spread[cell][side], clamp_log(spread));
}

double est_tl_margin(const struct est_history *h, int cell, int side)
{
    if (!h || cell < 0 || cell >= EST_TL_CELLS || side < 0 || side > 1)
        return 0.0;
    static const int order[EST_TL_CELLS][EST_TL_CELLS] = {
        {0, 1, 2, 3}, {1, 0, 2, 3}, {2, 1, 3, 0}, {3, 2, 1, 0}};
    const struct est_ring *r[EST_TL_CELLS];
    for (int k = 0; k < EST_TL_CELLS; k++)
        r[k] = &h->tl_spread[order[cell][k]][side];
    return ring_margin_to(r, EST_TL_CELLS, EST_TL_SIDE_COVER, EST_TL_MARGIN_PRIOR);
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
    struct wv v[EST_HISTORY_CAP * MAX_RINGS];
    size_t n = 0;
    int cells[MAX_RINGS][2];
    int nc = borrow_cells(m, c, cells);
    for (int i = 0; i < nc && (i == 0 || n < BORROW_BELOW); i++) {
        const struct est_job_ring *r = &h->job[cells[i][0]][cells[i][1]][wi][g];
        for (uint32_t k = 0; k < r->n; k++)
            v[n++] = (struct wv){
                .v = (float)log(sh * exp(r->log_start[k]) + (1 - sh) * exp(r->log_train[k])),
                .w = age_weight(r->next, k)};
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

double est_worker_offset(const struct est_history *h, enum plan_method m, enum worker_class c,
                         bool borrowed, double actual_s, double predicted_s, double applied)
{
    if (!positive(actual_s) || !positive(predicted_s) || !isfinite(applied))
        return NAN;
    struct est_band b = borrowed ? est_band_borrowed(h, m, c) : est_band_train(h, m, c);
    return log(actual_s / predicted_s) + applied - 0.5 * log(b.lo * b.hi);
}

double est_mean_step(double mean, long n, double x, long memory)
{
    assert(memory >= 1);
    double w = 1.0 / (double)(n < 1 ? 1 : n < memory ? n : memory);
    return mean + w * (x - mean);
}

void est_worker_speed_logs(const double *mean, const long *count, size_t n, double *out)
{
    double sum = 0, weight = 0;
    size_t known = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = 0;
        if (count[i] > 0 && isfinite(mean[i])) {
            double k = (double)count[i];
            out[i] = mean[i] * k / (k + EST_WORKER_PRIOR);
            sum += k * out[i];
            weight += k;
            known++;
        }
    }
    double fleet = weight > 0 ? sum / weight : 0;
    for (size_t i = 0; i < n; i++)
        if (known < 2) /* nothing to measure it against */
            out[i] = 0;
        else if (count[i] > 0 && isfinite(mean[i]))
            out[i] = fmin(fmax(out[i] - fleet, -EST_WORKER_MAX_LOG), EST_WORKER_MAX_LOG);
}

/* The wait's range on worker w, whose nominal wait is wait_s: the running
 * attempt's own time left (busy_low_s..busy_high_s, from its pace), then
 * the jobs placed ahead of this one (the rest of the wait) at the
 * training band bt. A worker with no range of its own reads as its
 * expected end. */
static void wait_range(const struct sched_worker *w, double wait_s, double now,
                       double pass_delay_s, struct est_band bt, double *low, double *high)
{
    *low = *high = 0;
    if (!(wait_s > 0))
        return;
    double mid = 0, rlo = 0, rhi = 0;
    if (w->running_attempt) {
        mid = fmin(fmax(w->busy_until_s - now, 0), wait_s);
        rlo = w->busy_low_s > 0 ? fmin(fmax(w->busy_low_s - now, 0), mid) : mid;
        rhi = w->busy_high_s > 0 ? fmax(w->busy_high_s - now, mid) : mid;
    }
    double ahead = wait_s - mid;
    *low = rlo + ahead * bt.lo;
    /* a worker that frees up is filled at the next pass */
    *high = rhi + ahead * bt.hi + (w->running_attempt && pass_delay_s > 0 ? pass_delay_s : 0);
}

/* Where a job that waits for worker `chosen` runs if it does not get that
 * one: a job created later may stand before it in the fair order when the
 * worker frees, or another worker frees first. The scheduler's next
 * choice with `chosen` taken (out->worker -1 when there is none). False
 * when out of memory. */
static bool second_choice(const struct sched_job *sj, const struct sched_worker *workers,
                          size_t n, const double *free_at, double now, int chosen,
                          struct sched_choice *out)
{
    out->worker = -1;
    double *alt = malloc((n ? n : 1) * sizeof *alt);
    if (!alt)
        return false;
    memcpy(alt, free_at, n * sizeof *alt);
    alt[chosen] = INFINITY;
    if (!sched_choose(sj, workers, n, alt, now, out))
        out->worker = -1;
    free(alt);
    return true;
}

/* The range from now to the finish of a job that starts on worker w after
 * wait_s (pass_wait_s of it waiting for the pass), whose fixed costs'
 * range is [startup_lo, startup_hi] and training train_s at band bt. */
static void finish_range(const struct sched_worker *w, double wait_s, double pass_wait_s,
                         double now, double pass_delay_s, struct est_band bt, double startup_lo,
                         double startup_hi, double train_s, double *lo, double *hi)
{
    double wl, wh;
    wait_range(w, wait_s - pass_wait_s, now, pass_delay_s, bt, &wl, &wh);
    *lo = wl + pass_wait_s + startup_lo + train_s * bt.lo;
    *hi = wh + pass_wait_s + startup_hi + train_s * bt.hi;
}

/* The training band of the request's shape: the default for a shape
 * nothing is known of, the band of borrowed predictions for one whose
 * factor is borrowed, else the band of its own factor's predictions. */
static struct est_band training_band(const struct est_request *req, const struct est_history *h,
                                     enum plan_method m, enum worker_class c)
{
    if (req->new_shape)
        return est_band_train(NULL, m, c);
    return req->borrowed_shape ? est_band_borrowed(h, m, c) : est_band_train(h, m, c);
}

static enum alallo_err fail(char *why, size_t cap, enum alallo_err e, const char *reason)
{
    if (why && cap)
        snprintf(why, cap, "%s", reason);
    return e;
}

/* With no active worker that fits, the best known one that may run jobs
 * (capacity_may_run: a lost one may come back) for pricing and a guess at
 * the wait: one training time, until a worker comes back. */
static int fallback_worker(const struct sched_job *sj, const struct sched_worker *workers,
                           size_t n)
{
    int best = -1;
    double best_t = INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (!capacity_may_run(&workers[i]) || workers[i].mem_bytes < sj->mem_bytes ||
            !sched_gpu_fits(sj, workers[i].gpus > 0 ? workers[i].gpu_mem_bytes : -1))
            continue;
        double t = capacity_train_seconds(sj->work_flops, sj->params, &workers[i]);
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
    out->alt_worker = -1;
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
    out->params = (double)planner_active_params(&job);
    out->gpu_need_bytes = planner_gpu_need(&job);
    out->work_flops = planner_work_flops(&job, req->train_tokens, req->reference_tokens);
    out->reference_flops = out->work_flops - req->train_tokens * out->flops_per_token;
    out->startup_s = req->startup_s > 0 ? req->startup_s : EST_DEFAULT_STARTUP_S;

    double factor = req->work_factor > 0 && isfinite(req->work_factor) ? req->work_factor : 1.0;
    struct sched_job sj = {.goal = req->goal, .mem_bytes = out->memory_bytes,
                           .work_flops = out->work_flops * factor, .startup_s = out->startup_s,
                           .created_s = req->now, .gpu_mem_bytes = out->gpu_need_bytes,
                           .params = out->params};
    if (req->goal == SCHED_FINISH_BY) {
        sj.finish_by_s = req->finish_by_s;
        est_finish_by_factors(h, out->method, sj.finish_hi);
    }
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
    struct sched_choice c, c2 = {.worker = -1};
    bool read_queue = true;
    double pass_wait = 0; /* from when capacity frees to the pass */
    if (sched_choose(&sj, workers, n_workers, free_at, req->now, &c)) {
        out->worker = c.worker;
        out->train_s = c.train_s;
        out->wait_s = fmax(0, c.start_s - req->now);
        pass_wait = fmax(0, req->next_pass_s - fmax(c.start_s, req->now));
        if (c.start_s > req->now && !second_choice(&sj, workers, n_workers, free_at, req->now,
                                                   c.worker, &c2)) {
            free(own);
            return fail(why, whycap, ERR_NOMEM, "out of memory");
        }
    } else {
        out->worker = fallback_worker(&sj, workers, n_workers);
        if (out->worker < 0) { /* cannot happen when fit == PLAN_FITS */
            free(own);
            return fail(why, whycap, ERR_INTERNAL, "no worker for a job that fits");
        }
        out->train_s = capacity_train_seconds(sj.work_flops, sj.params, &workers[out->worker]);
        out->wait_s = out->train_s;
        read_queue = false;
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
    out->wait_s += pass_wait;
    if (!free_now)
        out->message = EST_NO_CAPACITY_MESSAGE;
    else if (out->waits) /* its goal waits for a busy worker: say so */
        out->message = req->goal == SCHED_LOWEST_COST ? EST_WAITS_CHEAPER_MESSAGE
                       : req->goal == SCHED_FINISH_BY && c.high_s <= req->finish_by_s
                           ? EST_WAITS_DEADLINE_MESSAGE
                           : EST_WAITS_FASTER_MESSAGE;
    else
        out->message = NULL;

    double nominal = out->wait_s + out->startup_s + out->train_s;
    out->finish_s = req->now + nominal;
    /* Each part's range measured apart (docs/estimator.md, "The range"). */
    out->new_shape = req->new_shape;
    out->borrowed_shape = req->borrowed_shape;
    struct est_band bt = training_band(req, h, out->method, w->class_);
    struct est_band bs = est_band_start(req->new_shape ? NULL : h, out->method, w->class_);
    out->train_low_s = out->train_s * bt.lo;
    out->train_high_s = out->train_s * bt.hi;
    out->startup_low_s = out->startup_s * bs.lo;
    out->startup_high_s = out->startup_s * bs.hi;
    if (read_queue) {
        wait_range(w, out->wait_s - pass_wait, req->now, req->pass_delay_s, bt,
                   &out->wait_low_s, &out->wait_high_s);
        out->wait_low_s += pass_wait;
        out->wait_high_s += pass_wait;
    } else {
        out->wait_low_s = out->wait_s * UNREAD_WAIT[0];
        out->wait_high_s = out->wait_s * UNREAD_WAIT[1];
    }
    double lo = out->wait_low_s + out->startup_low_s + out->train_low_s;
    double hi = out->wait_high_s + out->startup_high_s + out->train_high_s;
    /* A job that waits runs on its worker or, put back, on the next
     * choice: the range holds both (docs/estimator.md, "Waiting"). */
    out->alt_worker = c2.worker;
    if (c2.worker >= 0) {
        const struct sched_worker *w2 = &workers[c2.worker];
        struct est_band bt2 = training_band(req, h, out->method, w2->class_);
        double wait2 = fmax(0, c2.start_s - req->now);
        double pw2 = fmax(0, req->next_pass_s - fmax(c2.start_s, req->now));
        finish_range(w2, wait2 + pw2, pw2, req->now, req->pass_delay_s, bt2, out->startup_low_s,
                     out->startup_high_s, c2.train_s, &out->alt_low_s, &out->alt_high_s);
        lo = fmin(lo, out->alt_low_s);
        hi = fmax(hi, out->alt_high_s);
    }
    /* Calibrated as a whole: widened (or narrowed) about its geometric
     * centre by the margin that held the succeeded jobs. */
    out->range_margin = 0;
    if (lo > 0 && hi >= lo) {
        double centre = sqrt(lo * hi), half = 0.5 * log(hi / lo);
        out->wait_cell = est_wait_cell(out->waits, out->wait_s, nominal);
        double wider = fmax(half + est_range_margin(h, out->wait_cell), MARGIN_KEEP * half);
        /* never narrower than the wait's own range with the rest nominal:
         * the running job's time left is calibrated on its own */
        double rest = out->startup_s + out->train_s;
        if (out->wait_low_s + rest > 0 && out->wait_high_s > out->wait_low_s)
            wider = fmax(wider, 0.5 * log((out->wait_high_s + rest) / (out->wait_low_s + rest)));
        out->range_margin = wider - half;
        lo = centre * exp(-wider);
        hi = centre * exp(wider);
    }
    out->time_low_s = lo;
    out->time_high_s = hi;
    job_estimate_range_text(out->time_text, sizeof out->time_text, out->time_low_s,
                            out->time_high_s);
    out->price_low_micros = capacity_price_micros(w->price_per_hour, out->train_low_s);
    out->price_high_micros = capacity_price_micros(w->price_per_hour, out->train_high_s);
    /* Each end where succeeded jobs' prices stayed (est_price_margin,
     * est_price_high_margin), neither past the range's centre; the cap
     * only ever comes down. */
    out->price_margin = 0;
    out->price_high_margin = 0;
    out->price_high_nominal = (double)out->price_high_micros / 1e6;
    if (out->price_low_micros > 0 && out->price_high_micros >= out->price_low_micros) {
        double plo = (double)out->price_low_micros, phi = (double)out->price_high_micros;
        double centre = sqrt(plo * phi), half = 0.5 * log(phi / plo);
        double low = fmin(plo * exp(-half * est_price_margin(h)), centre);
        double high = fmax(phi * exp(-half * est_price_high_margin(h)), centre);
        out->price_margin = log(plo / low);
        out->price_high_margin = log(phi / high);
        out->price_low_micros = (int64_t)llround(low);
        out->price_high_micros = (int64_t)llround(high);
    }
    return ERR_OK;
}

void est_finish_by_factors(const struct est_history *h, enum plan_method m,
                           float out[2][WORKER_CLASS_COUNT][SCHED_FINISH_SHARES])
{
    for (int wi = 0; wi < 2; wi++)
        for (int c = 0; c < WORKER_CLASS_COUNT; c++)
            for (int k = 0; k < SCHED_FINISH_SHARES; k++)
                out[wi][c][k] = (float)est_band_job(h, m, (enum worker_class)c, wi == 1,
                                                    SCHED_FINISH_BY,
                                                    (double)k / (SCHED_FINISH_SHARES - 1))
                                    .hi;
}

void est_finish_by_verdict(struct estimate *e, double now, double finish_by_s)
{
    e->finish_by_s = finish_by_s;
    e->finish_by_met = true;
    e->finish_high_s = 0;
    e->finish_by_message[0] = '\0';
    if (e->fit != PLAN_FITS || e->worker < 0)
        return;
    e->finish_high_s = now + e->time_high_s;
    e->finish_by_met = e->finish_high_s <= finish_by_s;
    if (e->finish_by_met)
        return;
    char by[40], earliest[40];
    job_moment_text(by, sizeof by, finish_by_s, false);
    job_moment_text(earliest, sizeof earliest, e->finish_high_s, true);
    snprintf(e->finish_by_message, sizeof e->finish_by_message,
             "No capacity can finish this job by %s; the earliest is %s.", by, earliest);
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

void est_rft_terms(double prompt_tokens, long prompts, int group, int answer_tokens, bool kl,
                   double grade_per_answer, struct est_rft_terms *out)
{
    double answers = (double)prompts * answer_tokens / 2.0;
    out->rollout = group * (prompt_tokens / 3.0 + answers * EST_DECODE_SLOWDOWN / 3.0);
    out->grading = grade_per_answer > 0 ? (double)group * prompts * grade_per_answer : 0;
    out->update = group * (prompt_tokens + answers) * (kl ? 4.0 / 3.0 : 1.0);
}

double est_rft_tokens(double prompt_tokens, long prompts, int group, int answer_tokens, bool kl,
                      double grade_per_answer)
{
    struct est_rft_terms t;
    est_rft_terms(prompt_tokens, prompts, group, answer_tokens, kl, grade_per_answer, &t);
    return t.rollout + t.grading + t.update;
}

double est_rft_python_s(double answer_s, long steps, int batch, int group)
{
    if (!(answer_s > 0) || !isfinite(answer_s) || steps <= 0 || batch <= 0 || group <= 0)
        return 0;
    return (double)steps * batch * group * answer_s;
}

double est_rft_validation_rounds(long max_steps, long eval_every)
{
    long every = eval_every > 0 ? eval_every : 1;
    long steps = max_steps > 0 ? max_steps : 0;
    return 1.0 + (double)(steps / every) + (steps % every ? 1.0 : 0.0);
}

double est_rft_validation_share(double train_tokens, double valid_prompt_tokens,
                                long valid_prompts, int eval_samples, int answer_tokens,
                                double grade_per_answer, long max_steps, long eval_every)
{
    if (!(train_tokens > 0) || !(valid_prompt_tokens > 0) || valid_prompts <= 0 ||
        eval_samples <= 0)
        return 0.0;
    double rounds = est_rft_validation_rounds(max_steps, eval_every);
    struct est_rft_terms t;
    est_rft_terms(valid_prompt_tokens, valid_prompts, eval_samples, answer_tokens, false,
                  grade_per_answer, &t);
    return rounds * (t.rollout + t.grading) / train_tokens;
}

double est_rft_grade_tokens(double prompt_tokens, int answer_reads, int answer_tokens,
                            int max_tokens, double size_ratio)
{
    if (!(prompt_tokens > 0) || answer_reads < 0 || answer_tokens < 0 || max_tokens <= 0 ||
        !(size_ratio > 0) || !isfinite(size_ratio) || !isfinite(prompt_tokens))
        return 0;
    double read = prompt_tokens + (double)answer_reads * answer_tokens / 2.0;
    double reply = max_tokens;
    return size_ratio * (read / 3.0 + reply * EST_DECODE_ALONE / 3.0);
}

double est_loading_s(double model_bytes, double grader_bytes)
{
    double bytes = (model_bytes > 0 && isfinite(model_bytes) ? model_bytes : 0) +
                   (grader_bytes > 0 && isfinite(grader_bytes) ? grader_bytes : 0);
    return EST_LOAD_BASE_S + bytes / EST_LOAD_BYTES_PER_S;
}
