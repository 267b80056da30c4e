/* time_left.c - time left from the estimate, then from the measured pace. */
#include "sched/time_left.h"

#include <math.h>
#include <string.h>

#include "core/job.h"

#define SWITCH_SHARE 0.05 /* "about 5% of steps"                          */
#define EWMA_ALPHA 0.3    /* weight of the newest pace sample              */

/* Half-width of a 90% band in standard errors measured from df degrees of
 * freedom (Student's t, 95th percentile): wider while few samples are in. */
static double t_90(int df)
{
    static const double t[] = {6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833,
                               1.812};
    if (df < 1)
        return INFINITY;
    return df <= 10 ? t[df - 1] : 1.645 + 1.6 / (double)df;
}

const char *tl_basis_name(enum tl_basis b)
{
    return b == TL_PACE ? "pace" : "estimate";
}

void tl_begin(struct tl_state *s, long max_steps, long start_step, double now, double startup_s,
              double est_low_s, double est_high_s)
{
    memset(s, 0, sizeof *s);
    s->max_steps = max_steps > 0 ? max_steps : 1;
    s->start_step = start_step < 0 ? 0 : start_step > s->max_steps ? s->max_steps : start_step;
    long left = s->max_steps - s->start_step;
    long sw = (long)ceil(SWITCH_SHARE * (double)s->max_steps);
    long half = (left + 1) / 2;
    if (sw > half)
        sw = half;
    s->switch_after = sw < 1 ? 1 : sw;
    s->est_low_s = est_low_s > 0 ? est_low_s : 0;
    s->est_high_s = est_high_s > s->est_low_s ? est_high_s : s->est_low_s;
    s->startup_s = startup_s > 0 ? startup_s : 0;
    s->begin_t = now;
    s->last_step = s->start_step;
    s->last_t = now;
    s->block_steps = (long)llround(TL_BLOCK_SHARE * (double)left);
    if (s->block_steps < 1)
        s->block_steps = 1;
}

void tl_set_tail(struct tl_state *s, double tail_s)
{
    /* never more than the estimate's low end holds */
    s->tail_s = tail_s > 0 && isfinite(tail_s) ? fmin(tail_s, 0.9 * s->est_low_s) : 0;
}

/* The tail still ahead at `now`, nominal: whole while steps are left,
 * then what its time since the last report has not used (floored). */
static double tail_left(const struct tl_state *s, double now)
{
    if (!(s->tail_s > 0))
        return 0;
    if (s->last_step < s->max_steps)
        return s->tail_s;
    double since = now > s->last_t ? now - s->last_t : 0;
    return fmax(s->tail_s - since, TL_TAIL_FLOOR * s->tail_s);
}

/* How much slower (> 1) than the estimate's middle the attempt's pace runs,
 * from 0.5 to 4: the tail runs on the same worker. 1 without either. */
static double pace_ratio(const struct tl_state *s, double pace)
{
    long total = s->max_steps - s->start_step;
    double steps_s = 0.5 * (s->est_low_s + s->est_high_s) - s->tail_s;
    if (total <= 0 || !(steps_s > 0) || !(pace > 0))
        return 1;
    return fmin(fmax(pace * (double)total / steps_s, 0.5), 4.0);
}

void tl_observe(struct tl_state *s, long step, double t)
{
    if (!s->have_ref) {
        if (step < s->start_step)
            return;
        s->have_ref = true;
        s->warm = true;
        s->ref_step = s->blk_step = s->last_step = step;
        s->ref_t = s->blk_t = s->last_t = t;
        return;
    }
    if (step <= s->last_step || !(t > s->last_t))
        return;
    s->last_step = step;
    s->last_t = t;
    if (step - s->blk_step < s->block_steps || !(t > s->blk_t))
        return; /* the sample is still being gathered */
    if (s->warm && s->samples == 1) {
        /* the start's sample, now that another is in: the pace is
         * measured from its end */
        s->warm = false;
        s->samples = 0;
        s->ref_step = s->blk_step;
        s->ref_t = s->blk_t;
    }
    double x = (t - s->blk_t) / (double)(step - s->blk_step);
    s->blk_step = step;
    s->blk_t = t;
    if (s->samples == 0) {
        s->ewma_s = x;
        s->ewma_var = 0;
    } else {
        double d = x - s->ewma_s;
        s->ewma_s += EWMA_ALPHA * d;
        s->ewma_var = (1.0 - EWMA_ALPHA) * (s->ewma_var + EWMA_ALPHA * d * d);
    }
    s->samples++;
}

/* The most the pace band may span, as a share of its size: the estimate
 * band's relative width ((high - low) / middle), times 0.25 + 0.5 x the
 * share of the attempt still ahead: about 0.72 of it at the switch, a
 * quarter of it at the end. 0 (no cap) without an estimate. */
static double pace_width_cap(const struct tl_state *s, double ahead)
{
    double mid = 0.5 * (s->est_low_s + s->est_high_s);
    if (!(mid > 0) || !(s->est_high_s > s->est_low_s))
        return 0;
    return (s->est_high_s - s->est_low_s) / mid * (0.25 + 0.5 * ahead);
}

/* The pace band at `now` before the measured margin: its middle and its
 * ends as shares of the middle below and above. False while time left
 * still comes from the estimate. */
static bool pace_band(const struct tl_state *s, double now, double *mid_out, double *rel_lo_out,
                      double *rel_hi_out)
{
    long total = s->max_steps - s->start_step;
    long done = s->last_step - s->start_step;
    long left = s->max_steps - s->last_step;
    if (left < 0)
        left = 0;
    double share_left = total > 0 ? (double)left / (double)total : 0;
    if (!(s->samples > 0 && done >= s->switch_after))
        return false;
    double since = now > s->last_t ? now - s->last_t : 0;
    /* The smoothed variance starts at 0 with the first sample: it is
     * unbiased by 1 - (1 - a)^(samples - 1); with one sample there is
     * no spread measured yet, and the band is the cap below. */
    double seen = 1.0 - pow(1.0 - EWMA_ALPHA, (double)(s->samples - 1));
    double var = seen > 0 ? s->ewma_var / seen : INFINITY;
    double cv = s->ewma_s > 0 ? sqrt(var) / s->ewma_s : INFINITY;
    double ahead = share_left; /* narrows as the attempt goes */
    double t90 = t_90(s->samples - 1);
    /* The pace: the attempt's mean while the smoothed pace agrees with
     * it (its error falls with every sample), else the smoothed pace,
     * which follows a change within a few reports (its error then
     * stays that of about (2 - a) / a samples, plus the drift it
     * measured, for the share still ahead). */
    double pace = s->ewma_s, err2 = INFINITY;
    if (s->blk_step > s->ref_step && s->blk_t > s->ref_t && s->ewma_s > 0) {
        double mean = (s->blk_t - s->ref_t) / (double)(s->blk_step - s->ref_step);
        double gap = fabs(s->ewma_s - mean) / mean;
        double n_ewma = fmin((double)s->samples, (2.0 - EWMA_ALPHA) / EWMA_ALPHA);
        if (gap <= t90 * cv / sqrt(n_ewma)) {
            pace = mean;
            err2 = cv * cv / (double)s->samples;
        } else {
            err2 = cv * cv / n_ewma + gap * ahead * gap * ahead;
        }
    }
    double mid = (double)left * pace - since;
    if (left > 0 && mid < pace)
        mid = pace; /* a job that is late still has a step to go */
    if (mid < 0)
        mid = 0;
    /* The reports ahead average their own noise out: cv / sqrt(their
     * number) of the time left; weighed by the share ahead it stays at
     * cv / sqrt(the attempt's reports) and never grows at the end. */
    double per_report = (double)(s->blk_step - s->ref_step) / (double)s->samples;
    double reports_ahead = per_report > 0 ? fmax(1.0, (double)left / per_report) : 1.0;
    double rel = t90 * sqrt(err2 + cv * cv * ahead / reports_ahead);
    if (!isfinite(rel))
        rel = 1.0; /* nothing measured yet: the cap decides */
    double rel_lo = fmin(0.6, rel);
    double rel_hi = rel;
    /* Never wider, relative to its size, than the estimate's band, and
     * less so the more is done: a slowdown (cv jumps while the smoothed
     * pace catches up) moves the range rather than blowing it up. */
    double cap = pace_width_cap(s, ahead);
    if (cap > 0 && rel_lo + rel_hi > cap) {
        double k = cap / (rel_lo + rel_hi);
        rel_lo *= k;
        rel_hi *= k;
    }
    *mid_out = mid;
    *rel_lo_out = rel_lo;
    *rel_hi_out = rel_hi;
    return true;
}

int tl_cell(long step, long max_steps)
{
    double done = max_steps > 0 ? (double)step / (double)max_steps : 1.0;
    return done < 0.2 ? 0 : done < 0.5 ? 1 : done < 0.8 ? 2 : 3;
}

void tl_value(const struct tl_state *s, double now, struct tl_value *out)
{
    double mid, rel_lo, rel_hi;
    if (pace_band(s, now, &mid, &rel_lo, &rel_hi)) {
        /* The measured margin of the share done, in logs on each end; it
         * may narrow an end to half of its own width, never past it. */
        const double *m = s->margin[tl_cell(s->last_step, s->max_steps)];
        double half_lo = -log1p(-rel_lo), half_hi = log1p(rel_hi);
        double tail = tail_left(s, now) * pace_ratio(s, s->ewma_s);
        out->basis = TL_PACE;
        out->mid_s = mid + tail;
        out->low_s = mid * exp(-fmax(half_lo + m[0], 0.5 * half_lo)) + TL_TAIL_LO * tail;
        out->high_s = mid * exp(fmax(half_hi + m[1], 0.5 * half_hi)) + TL_TAIL_HI * tail;
    } else {
        long left = s->max_steps - s->last_step;
        long total = s->max_steps - s->start_step;
        double share_left = total > 0 && left > 0 ? (double)left / (double)total : 0;
        double loading = 0;
        if (!s->have_ref) {
            loading = s->startup_s - (now - s->begin_t);
            if (loading < 0)
                loading = 0;
        }
        /* the steps' part of the estimate by the share of steps left,
         * then the tail whole (or what is left of it) */
        double tail = tail_left(s, now);
        out->basis = TL_ESTIMATE;
        out->low_s = loading + (s->est_low_s - s->tail_s) * share_left + tail;
        out->high_s = loading + (s->est_high_s - s->tail_s) * share_left + tail;
        out->mid_s = 0.5 * (out->low_s + out->high_s);
    }
    job_time_left_range_text(out->text, sizeof out->text, out->low_s, out->high_s);
}

void tl_value_of_job(const struct tl_state *s, double now, double job_low_s, double job_high_s,
                     double since_created_s, struct tl_value *out)
{
    tl_value(s, now, out);
    if (out->basis != TL_ESTIMATE || s->start_step != 0 || !(job_high_s > 0))
        return;
    double left_lo, left_hi; /* the job's estimate less the time since, no floor */
    tl_before_start(job_low_s, job_high_s, 0, 0, since_created_s, &left_lo, &left_hi);
    double lo = fmax(out->low_s, left_lo);
    double hi = fmax(out->high_s, left_hi);
    if (hi < lo)
        hi = lo;
    if (lo == out->low_s && hi == out->high_s)
        return;
    out->low_s = lo;
    out->high_s = hi;
    out->mid_s = 0.5 * (lo + hi);
    job_time_left_range_text(out->text, sizeof out->text, lo, hi);
}

void tl_calibrate(struct tl_state *s, const struct est_history *h)
{
    for (int c = 0; c < EST_TL_CELLS; c++)
        for (int side = 0; side < 2; side++)
            s->margin[c][side] = est_tl_margin(h, c, side);
}

void tl_note_shown(const struct tl_state *s, struct tl_shown shown[EST_TL_CELLS])
{
    struct tl_shown *sh = &shown[tl_cell(s->last_step, s->max_steps)];
    double mid, rel_lo, rel_hi;
    if (!sh->set && s->last_step < s->max_steps &&
        pace_band(s, s->last_t, &mid, &rel_lo, &rel_hi) && mid > 0) {
        double tail = tail_left(s, s->last_t) * pace_ratio(s, s->ewma_s);
        *sh = (struct tl_shown){.set = true,
                                .t = s->last_t,
                                .low_s = mid * (1.0 - rel_lo) + TL_TAIL_LO * tail,
                                .high_s = mid * (1.0 + rel_hi) + TL_TAIL_HI * tail};
    }
}

void tl_spreads(const struct tl_shown shown[EST_TL_CELLS], double finish_t,
                double out[EST_TL_CELLS][2])
{
    for (int c = 0; c < EST_TL_CELLS; c++) {
        const struct tl_shown *sh = &shown[c];
        double truth = finish_t - sh->t;
        bool ok = sh->set && truth > 0 && sh->low_s > 0 && sh->high_s > 0;
        out[c][0] = ok ? log(sh->low_s / truth) : NAN;
        out[c][1] = ok ? log(truth / sh->high_s) : NAN;
    }
}

void tl_history_add(const struct tl_shown shown[EST_TL_CELLS], double finish_t,
                    struct est_history *h)
{
    double sp[EST_TL_CELLS][2];
    tl_spreads(shown, finish_t, sp);
    for (int c = 0; c < EST_TL_CELLS; c++)
        for (int side = 0; side < 2; side++)
            est_history_add_tl_spread(h, c, side, sp[c][side]); /* NAN: ignored */
}

void tl_before_start(double est_low_s, double est_high_s, double train_low_s,
                     double train_high_s, double waited_s, double *low, double *high)
{
    if (!(waited_s > 0))
        waited_s = 0;
    double floor_lo = fmin(train_low_s, est_low_s);
    double floor_hi = fmin(train_high_s, est_high_s);
    *low = fmax(est_low_s - waited_s, floor_lo);
    *high = fmax(est_high_s - waited_s, floor_hi);
    if (*low < 0)
        *low = 0;
    if (*high < *low)
        *high = *low;
}
