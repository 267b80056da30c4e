/* time_left.h - the "Time left" of a running job, as a range. Pure: time is
 * a parameter; the caller owns the state (one per attempt).
 *
 * Until about 5% of the job's steps are done in this attempt (at most half
 * of what the attempt has left to do), time left comes from the estimate
 * for the capacity the attempt runs on: the estimated training-time range
 * scaled by the share of steps left, plus what is left of loading (basis
 * "estimate"). After that it comes from the attempt's own pace: an
 * exponentially weighted average of the seconds per step between reports,
 * times the steps left (basis "pace"). The pace band is measured, at the
 * 90% level: the error of the smoothed pace (the step times' spread over
 * the samples it rests on), the noise of the reports still ahead (which
 * averages out over more of them), and the drift of the pace (the
 * smoothed pace against the attempt's mean pace) times the share still
 * ahead; so it narrows as the job goes. Its width relative to its size
 * never passes the estimate band's, times 0.25 + 0.5 x the share still
 * ahead, so a slowdown moves it rather than blowing it up
 * (docs/estimator.md). A move starts a new attempt, and so a new
 * state: time left starts again from the estimate for the new capacity.
 */
#ifndef ALALLO_SCHED_TIME_LEFT_H
#define ALALLO_SCHED_TIME_LEFT_H

#include <stdbool.h>

enum tl_basis { TL_ESTIMATE = 0, TL_PACE };

struct tl_state {
    long max_steps;
    long start_step;     /* the step the attempt continued from           */
    long switch_after;   /* steps of this attempt before pace is used     */
    double est_low_s;    /* training time range for start_step..max_steps */
    double est_high_s;   /*   on this capacity (estimator.h)              */
    double startup_s;    /* expected loading before the first report      */
    double begin_t;      /* when the attempt began                        */
    bool have_ref;       /* a first report has been seen                  */
    long last_step;
    double last_t;
    int samples;         /* pace samples taken                            */
    double ewma_s;       /* smoothed seconds per step                     */
    double ewma_var;     /* smoothed variance of seconds per step         */
    long ref_step;       /* the first report: where the attempt's mean    */
    double ref_t;        /*   pace is measured from                       */
};

struct tl_value {
    double low_s, high_s;
    double mid_s;        /* the single best guess                         */
    enum tl_basis basis;
    char text[48];       /* job_time_left_range_text: "40 min to 1.3 h"   */
};

/* "estimate" / "pace". */
const char *tl_basis_name(enum tl_basis b);

/* Starts the state of an attempt that continues from start_step of a job of
 * max_steps, begun at `now`, with the estimated training-time range
 * [est_low_s, est_high_s] for the steps it has to do and startup_s of
 * expected loading. */
void tl_begin(struct tl_state *s /* OUT */, long max_steps, long start_step, double now,
              double startup_s, double est_low_s, double est_high_s);

/* A progress report: `step` steps done at time t (the trainer's `started`
 * event counts as the report of start_step). The first report only sets the
 * reference; later ones with more steps and more time are pace samples.
 * Reports that go backwards are ignored. */
void tl_observe(struct tl_state *s, long step, double t);

/* Time left at `now`. */
void tl_value(const struct tl_state *s, double now, struct tl_value *out /* OUT */);

/* Time left of a job that has not started yet, waited_s seconds after the
 * estimate [est_low_s, est_high_s] (creation to finish) was made: the
 * estimate minus the time already waited, so that at creation the two
 * read the same. Each end is floored at the training part of the estimate
 * [train_low_s, train_high_s], but never above that end of the estimate
 * itself (the two ranges are calibrated apart, and the training one may
 * start higher). */
void tl_before_start(double est_low_s, double est_high_s, double train_low_s,
                     double train_high_s, double waited_s, double *low /* OUT */,
                     double *high /* OUT */);

#endif
