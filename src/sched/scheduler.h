/* scheduler.h - one scheduling pass: which queued job starts on which free
 * worker now, and where every other queued job is expected to start. Pure:
 * time is a parameter, no I/O; the caller owns all memory given in and out.
 *
 * Order: fair between accounts, first come first served within one. The
 * pass repeatedly takes the account with the fewest jobs running plus
 * placed in this pass (ties: the one whose next job is oldest), and places
 * that account's oldest job.
 *
 * Placement by the job's goal, over every active worker with enough
 * memory, counting the wait for a worker that is busy (or already reserved
 * in this pass):
 *   fastest_finish  the earliest expected finish (start + loading +
 *                   training); ties go to the cheaper, then the smaller
 *                   worker, so large workers stay free for large jobs;
 *   lowest_cost     the lowest expected price (hourly rate x training
 *                   time) among workers that can start it within its
 *                   patience (the larger of 1 hour and its training time
 *                   there); prices within 10% of each other count as
 *                   equal and the earlier finish wins. When no worker can
 *                   start it within its patience, the soonest start wins;
 *   finish_by       (with a deadline, finish_by_s) the lowest expected
 *                   price, as for lowest_cost, among the workers whose
 *                   calibrated finish at the 90% level (now + the time to
 *                   its expected finish x the job's finish_hi for that
 *                   worker's class, whether it waits, and its share of
 *                   start) is by the deadline; when none is, the
 *                   earliest finish at that level wins (the job goes on
 *                   at the fastest capacity).
 * A job whose best worker is idle now is assigned (message "Starting");
 * otherwise it reserves its best worker from the time that worker is
 * expected to be free, and waits ("Waiting for capacity"). Reservations
 * live only inside the pass; the next pass decides afresh.
 *
 * Cost: O(J log J + J * W). 10,000 queued jobs on 200 workers take about
 * 15-20 ms of CPU on the 2-core build machine (bench/sched/run.sh).
 */
#ifndef ALALLO_SCHED_SCHEDULER_H
#define ALALLO_SCHED_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/job.h"
#include "sched/capacity.h"

#define SCHED_MAX_JOBS 1000000
#define SCHED_MAX_WORKERS 100000
#define SCHED_FINISH_SHARES 5 /* start shares 0, 0.25, .. 1 of finish_hi */

enum sched_goal { SCHED_LOWEST_COST = 0, SCHED_FASTEST_FINISH, SCHED_FINISH_BY, SCHED_GOAL_COUNT };

/* A job waiting to be placed (queued, or re-scheduling after a move). */
struct sched_job {
    int64_t id;           /* the caller's; ties in order break on it       */
    uint64_t account;     /* any number that is the same for one account   */
    double created_s;     /* when the job was created: FCFS within account */
    enum sched_goal goal;
    int64_t mem_bytes;    /* memory need (planner.h, or measured + margin) */
    int64_t gpu_mem_bytes; /* GPU memory need at a batch of 1
                              (planner_gpu_need); a GPU worker whose GPUs
                              are smaller is skipped. 0: not known, no
                              check (plans stored before GPUs lack it)    */
    double work_flops;    /* FLOPs of the training still to do             */
    double params;        /* the model's active parameters, for a worker's
                             speed on it (capacity_worker_flops_for); 0:
                             unknown, the bench's speed                    */
    double startup_s;     /* expected loading time before the first step   */
    double deadline_s;    /* lowest cost: the upper end of the time its
                             estimate showed (created + high end); it waits
                             for a busy cheaper worker only while that one
                             still finishes it by then. 0: no such bound   */
    double finish_by_s;   /* finish_by: the user's deadline (unix seconds) */
    /* finish_by: the upper end, at the 90% level, of the time from now to
     * the finish as a multiple of its nominal value, by whether the job
     * would wait ([1]) or start at once ([0]), the worker's class, and the
     * share of that time that is the start (wait + loading) at
     * k / (SCHED_FINISH_SHARES - 1), read between them linearly
     * (est_finish_by_factors). Values below 1 read as 1. */
    float finish_hi[2][WORKER_CLASS_COUNT][SCHED_FINISH_SHARES];
};

/* Jobs an account has running now (attempts on workers). Accounts absent
 * from the list have none. */
struct sched_account_load {
    uint64_t account;
    int running;
};

/* The best worker for one job, given when each worker is free. */
struct sched_choice {
    int worker;          /* index into workers; -1 when none fits          */
    double start_s;      /* when it is expected to start                   */
    double train_s;      /* expected training time on that worker          */
    double finish_s;     /* start + loading + training                     */
    double price;        /* rate x training time, currency units           */
    double high_s;       /* the finish at the 90% level: now + (finish - now)
                            x the job's finish_hi (finish_by; finish_s for
                            the other goals)                              */
};

struct sched_assignment {
    size_t job;       /* index into the jobs given                         */
    size_t worker;    /* index into the workers given                      */
    double finish_s;  /* expected finish                                   */
};

/* What a pass returns. The caller provides the arrays with the sizes
 * shown; optional ones may be NULL. */
struct sched_pass_out {
    struct sched_assignment *assignments; /* [n_workers]: jobs to start now */
    size_t n_assignments;                 /* OUT                           */
    enum job_message *messages;           /* [n_jobs], optional: MSG_STARTING
                                             or MSG_WAITING_FOR_CAPACITY   */
    int *planned_worker;                  /* [n_jobs], optional: the worker
                                             assigned or reserved; -1 none  */
    double *expected_start_s;             /* [n_jobs], optional; +inf none  */
    double *free_at_s;                    /* [n_workers], optional: when each
                                             worker is free after all the
                                             pass's reservations (+inf for a
                                             worker that is not active).
                                             The estimator's horizon.      */
};

/* "lowest_cost" / "fastest_finish" / "finish_by"; NULL when out of range. */
const char *sched_goal_name(enum sched_goal g);
bool sched_goal_parse(const char *s, enum sched_goal *out /* OUT */);

/* When each worker is free as seen at `now`, before any queued job: now for
 * an idle active worker, its busy_until_s (at least now + 1 s, since it is
 * still busy) for a busy one, +inf for a draining or lost one. */
void sched_free_at(const struct sched_worker *workers, size_t n_workers, double now,
                   double *free_at /* OUT [n_workers] */);

/* The best worker for `job` by its goal at `now`, given free_at[] (see
 * above). Returns false, with out->worker = -1, when no active worker has
 * the memory. */
/* Whether a worker whose GPUs hold gpu_mem_bytes each (-1: a CPU worker)
 * can hold `job` on one of them. Always true on a CPU worker and for a job
 * whose GPU need is not known (0). */
bool sched_gpu_fits(const struct sched_job *job, int64_t gpu_mem_bytes);

bool sched_choose(const struct sched_job *job, const struct sched_worker *workers,
                  size_t n_workers, const double *free_at, double now,
                  struct sched_choice *out /* OUT */);

/* One pass over `jobs` and `workers` at time `now`. `loads` may be NULL.
 * Returns ERR_OK; ERR_INVALID when counts pass SCHED_MAX_* or out lacks
 * assignments; ERR_NOMEM when scratch memory cannot be had. */
enum alallo_err sched_pass(const struct sched_job *jobs, size_t n_jobs,
                           const struct sched_worker *workers, size_t n_workers,
                           const struct sched_account_load *loads, size_t n_loads, double now,
                           struct sched_pass_out *out /* IN/OUT */);

/* The horizon a job would see if it were placed now: runs the fair order
 * over jobs[0..n_jobs) (the queue, with the job in question among them at
 * index `job`) without assigning anything, and writes into free_at[]
 * [n_workers] when each worker is free just before that job's turn. Give
 * it to est_estimate() for an estimate that knows where in the fair order
 * the job will stand. Cost: a pass up to that job. */
enum alallo_err sched_horizon_before(const struct sched_job *jobs, size_t n_jobs, size_t job,
                                     const struct sched_worker *workers, size_t n_workers,
                                     const struct sched_account_load *loads, size_t n_loads,
                                     double now, double *free_at /* OUT [n_workers] */);

/* For a worker asking for work (the worker protocol's claim): the job the
 * pass assigned to worker `worker`, or -1. */
long sched_assigned_job(const struct sched_pass_out *out, size_t worker);

#endif
