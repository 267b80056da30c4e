/* sim.h - the fleet simulation behind `alallo sim`: a discrete-event run on
 * a virtual clock of the real planner, scheduler, estimator, time left,
 * re-scheduling decisions and ledger, with simulated trainers and workers.
 *
 * What it simulates (docs/scheduler.md, "The simulation"):
 *  - a fleet of workers of five kinds (memory 24..141 GB), on-demand and
 *    spot, each with a measured speed that is a little off its true speed;
 *  - jobs from accounts of very different sizes, on five model shapes,
 *    three methods, two goals (and finish_by with --finish-by-share, whose
 *    deadlines the pass and the checks at each report keep to, moves
 *    included, and whose refusals, deadlines met and missed are counted),
 *    with data sets of 1k..100k examples,
 *    arriving at random (Poisson) so that the fleet is ~75% busy, or all at
 *    once (--burst);
 *  - trainers whose true pace differs from the nominal one by method, by
 *    worker class, by job and from report to report; loading times; a few
 *    jobs whose memory peak is well above the plan;
 *  - workers lost, spot capacity taken back, workers drained, each coming
 *    back later; cancels at random times; late reports from attempts that
 *    no longer own their job;
 *  - history building up: every finished attempt and job feeds the
 *    estimator's calibration.
 * Every event checks the invariants for the job it touched: nothing billed
 * twice, a cancelled job never runs again, running time within the limits,
 * a succeeded job's charge within its estimate, one owner per attempt.
 *
 * Deterministic per seed, apart from the timing figures (max_pass_ms,
 * max_pass_queued, biggest_pass_ms, wall_s), which measure this machine.
 */
#ifndef ALALLO_SCHED_SIM_H
#define ALALLO_SCHED_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "sched/ledger.h"

#define SIM_MAX_JOBS 1000000
#define SIM_MAX_WORKERS 20000

struct sim_config {
    long jobs;
    int workers;
    uint64_t seed;
    int accounts;            /* default 12                                  */
    bool burst;              /* every job arrives at t = 0                  */
    double load;             /* share of the fleet kept busy; default 0.75  */
    double pass_interval_s;  /* at most one scheduling pass per this; 30    */
    double finish_by_share;  /* share of jobs with the goal finish_by, with a
                                deadline of 0.8..4 x the upper end of their
                                fastest finish; default 0 (none)          */
    struct ledger_limits limits;
};

struct sim_result {
    long jobs;
    long succeeded, failed, cancelled;
    long not_available;       /* failed at creation: no capacity could ever  */
    long stopped;             /* budget or time limit                        */
    long moves;               /* attempts ended by re-scheduling             */
    long fenced_reports;      /* late reports that the ledger refused        */
    double coverage;          /* succeeded jobs whose submit-to-finish time
                                 fell inside the range given at creation    */
    double above_high;        /* ... above its upper end                     */
    double below_low;         /* ... below its lower end                     */
    double time_left_mape_after_5pct; /* median absolute percentage error of
                                 time left (mid of the range) once it runs
                                 on pace, over all samples of succeeded jobs */
    long time_left_samples;
    double median_range_ratio; /* median high/low of the ranges given at
                                  creation ("width_before_start")           */
    double price_coverage;    /* succeeded jobs whose net charge fell inside
                                 the price range given at creation          */
    double price_width;       /* median high/low of the price ranges given
                                 at creation ("price_width_before_start")  */
    double width_at[2];       /* median high/low of time left at the first
                                 report past 20% ([0]) and 50% ([1]) of the
                                 steps, on pace, of succeeded jobs          */
    double coverage_at[2];    /* ... how often the time really left fell
                                 inside it                                  */
    long invariant_violations;
    long billed_twice;        /* jobs with a step billed twice               */
    char first_violation[160];
    double max_pass_ms;       /* the longest scheduling pass, in CPU time of
                                 the thread (not wall clock: the machine may
                                 be shared)                                  */
    long max_pass_queued;     /* queued jobs in that pass                    */
    long biggest_pass_queued; /* the most queued jobs any pass placed        */
    double biggest_pass_ms;   /* how long that pass took (CPU time)          */
    long max_queued;          /* the most jobs queued at once                */
    long passes;
    double virtual_hours;     /* virtual time until the last job ended       */
    double wall_s;            /* wall time of the whole run                  */
    /* goal finish_by (finish_by_share > 0): such jobs, those refused at
     * creation (no capacity could meet the deadline), those that succeeded
     * and those of them that finished by their deadline */
    long finish_by_jobs, finish_by_refused, finish_by_succeeded, finish_by_met;
    /* ... the jobs a check at a report found could no longer meet their
     * deadline, and the moves those checks made (resched_on_deadline) */
    long finish_by_missed, finish_by_moves;
};

/* Defaults for everything but jobs, workers and seed. */
void sim_config_default(struct sim_config *c /* OUT */);

/* Runs the simulation. ERR_INVALID (reason in why) for counts out of range
 * (jobs 1..SIM_MAX_JOBS, workers 1..SIM_MAX_WORKERS); ERR_NOMEM. */
enum alallo_err sim_run(const struct sim_config *c, struct sim_result *out /* OUT */, char *why,
                        size_t whycap);

/* The result as one JSON object on one line. with_timing false writes null
 * for the timing figures, so that two runs of one seed compare equal.
 * Returns the length, or -1 when cap is too small. */
int sim_result_json(const struct sim_result *r, bool with_timing, char *buf, size_t cap);

#endif
