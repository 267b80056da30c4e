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
 *
 * The steps alone do not see what the job's time left truly holds: a move,
 * a lost worker, a slower one after it. So each end of the pace band is
 * then widened (or narrowed) by a margin measured on succeeded jobs: how
 * far outside that end of the band shown at the same share of the steps
 * done their truth fell (tl_history_add, est_tl_margin), so that the band
 * holds about 90% of them at every share done.
 */
#ifndef ALALLO_SCHED_TIME_LEFT_H
#define ALALLO_SCHED_TIME_LEFT_H

#include <stdbool.h>

#include "sched/estimator.h"

enum tl_basis { TL_ESTIMATE = 0, TL_PACE };

/* A pace band shown, before its margin: when, and its ends (seconds left).
 * The caller keeps one per share-done cell per job, across its attempts,
 * zeroed when the job is created (tl_note_shown, tl_history_add). */
struct tl_shown {
    bool set;
    double t, low_s, high_s;
};

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
    long ref_step;       /* where the attempt's mean pace is measured     */
    double ref_t;        /*   from: its start, then its first pace sample  */
    bool warm;           /* the one sample taken holds the start's costs   */
    long block_steps;    /* steps a pace sample spans at least            */
    long blk_step;       /* where the pace sample being gathered began    */
    double blk_t;
    double margin[EST_TL_CELLS][2]; /* tl_calibrate: logs, below / above  */
    double tail_s;       /* nominal work after the last step (tl_set_tail) */
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

/* What runs after the last step, tail_s nominal seconds (a reinforcement
 * job's final validation: its rollouts, their grading): part of the
 * estimate [est_low_s, est_high_s], so tl_begin's caller sets it after.
 * Time left holds it until the job ends: after the estimate's steps, or
 * the pace's, at the pace's speed against the estimate's (TL_TAIL_LO to
 * TL_TAIL_HI of it), and once the last step is reported, what is left of
 * it (never under TL_TAIL_FLOOR of it while the job runs). Without it,
 * a job whose steps are done reads as ending now, and a job queued behind
 * it as starting now. */
#define TL_TAIL_LO 0.6
#define TL_TAIL_HI 1.8
#define TL_TAIL_FLOOR 0.1
void tl_set_tail(struct tl_state *s, double tail_s);

/* A progress report: `step` steps done at time t (the trainer's `started`
 * event counts as the report of start_step). The first report only sets the
 * reference; later ones with more steps and more time make pace samples,
 * each of at least TL_BLOCK_SHARE of the attempt's steps (reports closer
 * than that are gathered into one: the trainer reports every few steps,
 * and a sample that short measures the step times' jitter, not the
 * pace's). The first sample holds what the trainer did between its start
 * and its first steps (allocating, first touches): it is the pace while
 * it is the only one, and dropped, with the mean measured from its end,
 * once a second is in. Reports that go backwards are ignored. */
#define TL_BLOCK_SHARE 0.01
void tl_observe(struct tl_state *s, long step, double t);

/* Time left at `now`. */
void tl_value(const struct tl_state *s, double now, struct tl_value *out /* OUT */);

/* Time left of attempt s at `now` (tl_value), for a job whose estimate
 * [job_low_s, job_high_s] (creation to finish) was made since_created_s
 * ago. While the attempt is the job's first from step 0 and its basis is
 * the estimate, each end is raised to the job's own estimate less the
 * time since (tl_before_start with no floor): the estimate basis holds the
 * training and what is left of the loading alone, and the job's estimate
 * also its other fixed costs and the margin learnt for whole jobs. So the
 * job's page does not drop at its start, and a job queued behind it does
 * not read a wait shorter than the job ahead was promised. Otherwise, and
 * without an estimate (job_high_s <= 0), tl_value unchanged. */
void tl_value_of_job(const struct tl_state *s, double now, double job_low_s, double job_high_s,
                     double since_created_s, struct tl_value *out /* OUT */);

/* The share-done cell (EST_TL_CELLS) of `step` of max_steps: under 20%,
 * 20-50%, 50-80%, the rest. */
int tl_cell(long step, long max_steps);

/* Sets the state's margins from the history (est_tl_margin of each cell
 * and end); call after tl_begin. Without it (or with an empty history)
 * the margins are 0 and the pace band is the one measured from the steps. */
void tl_calibrate(struct tl_state *s, const struct est_history *h);

/* After a report (tl_observe): when the pace gives time left and nothing
 * is noted yet in the share-done cell of the report, notes the band there,
 * before its margin, as of the report. */
void tl_note_shown(const struct tl_state *s, struct tl_shown shown[EST_TL_CELLS] /* IN/OUT */);

/* How far outside each end (below [0], above [1]) of the band noted in
 * each cell the time truly left at finish_t fell, in logs (> 0 outside);
 * NAN where nothing was noted. */
void tl_spreads(const struct tl_shown shown[EST_TL_CELLS], double finish_t,
                double out[EST_TL_CELLS][2] /* OUT */);

/* The job succeeded at finish_t: adds, for each cell where a band was
 * noted, how far outside each of its ends the time left the job truly had
 * fell (est_history_add_tl_spread). */
void tl_history_add(const struct tl_shown shown[EST_TL_CELLS], double finish_t,
                    struct est_history *h);

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
