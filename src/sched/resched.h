/* resched.h - when a running job must move, and how. Pure decisions: the
 * caller (the server, or the simulation) carries them out.
 *
 *   cause                        what happens
 *   measured peak memory above   the job needs more capacity than planned:
 *   what its worker offers       move now to a worker with enough (status
 *                                re-scheduling, message Re-scheduling); if no
 *                                known worker has enough, the job fails as
 *                                "Not available right now." (or "... Choose a
 *                                lower precision." when 4-bit would fit)
 *   worker lost (no heartbeat)   continue elsewhere from the latest complete
 *                                checkpoint; work after it is repeated free
 *   worker drained, spot         checkpoint first (the worker is told "move";
 *   capacity taken back          the trainer checkpoints on SIGTERM), then
 *                                continue elsewhere from that checkpoint
 *   a finish_by job would miss   checkpoint first, then continue on the
 *   its deadline where it runs,  capacity that meets it (resched_on_deadline)
 *   and capacity that meets it
 *   is free
 * In every case the next attempt gets a new fence (ledger.h), and time left
 * starts again from the estimate for the new capacity (time_left.h).
 */
#ifndef ALALLO_SCHED_RESCHED_H
#define ALALLO_SCHED_RESCHED_H

#include <stddef.h>
#include <stdint.h>

#include "core/job.h"
#include "sched/capacity.h"
#include "sched/planner.h"
#include "sched/scheduler.h"

/* Headroom added to a measured peak before placing the job again, in %. */
#define RESCHED_MEMORY_HEADROOM_PCT 10

enum resched_cause {
    RESCHED_MEMORY = 0,
    RESCHED_WORKER_LOST,
    RESCHED_DRAINED,
    RESCHED_SPOT_TAKEN,
    RESCHED_CAUSE_COUNT
};

enum resched_action {
    RESCHED_KEEP = 0,               /* nothing to do                          */
    RESCHED_MOVE,                   /* end the attempt now; continue from the
                                       latest checkpoint elsewhere            */
    RESCHED_CHECKPOINT_THEN_MOVE,   /* stop with a checkpoint, then move      */
    RESCHED_FAIL,                   /* the job cannot run anywhere: fail it   */
};

struct resched_decision {
    enum resched_action action;
    enum resched_cause cause;
    int64_t mem_bytes;          /* the job's memory need from now on         */
    enum job_message message;   /* the job's message: MSG_RESCHEDULING on a
                                   move, the failed message on RESCHED_FAIL,
                                   MSG_NONE on keep                           */
    const char *stop;           /* what the worker protocol tells the worker:
                                   "move", or NULL                           */
    const char *reason;         /* why the attempt ended (attempts[].reason) */
};

/* The text of a cause for attempts[].reason: "needs more memory",
 * "worker lost", "worker drained", "spot capacity taken back". */
const char *resched_reason_text(enum resched_cause c);

/* A memory report: the trainer measured peak_rss_bytes on `current`. The
 * job's need becomes max(planned, peak + 10%). Keep while the peak fits the
 * worker; otherwise move if some known worker offers the new need, else
 * fail. `job` (for the lower-precision message) may be NULL. */
void resched_on_memory(int64_t peak_rss_bytes, int64_t planned_bytes,
                       const struct sched_worker *current, const struct sched_worker *workers,
                       size_t n_workers, const struct plan_job *job,
                       struct resched_decision *out /* OUT */);

/* A change of the worker the job runs on: lost, drained or spot capacity
 * taken back (RESCHED_MEMORY is not a worker event: RESCHED_KEEP). */
void resched_on_worker(enum resched_cause cause, int64_t mem_bytes,
                       struct resched_decision *out /* OUT */);

/* A running finish_by job, checked against its deadline. */
struct resched_deadline {
    bool missed;   /* no capacity, where it runs or free elsewhere, finishes
                      it by the deadline at the 90% level                 */
    int move_to;   /* the worker to move to (checkpoint first); -1: stay  */
    double high_s; /* its finish at the 90% level where it goes on        */
};

/* `job` is the rest of a running finish_by job as a new attempt would run
 * it (work_flops from its latest checkpoint, startup_s, finish_by_s,
 * finish_hi); current_high_s its finish at the 90% level where it runs now
 * (now + the upper end of its time left). The candidates are the workers
 * free now (free_at[i] <= now; the caller gives the one it runs on as not
 * free). Stays while current_high_s is by the deadline. Otherwise moves to
 * the cheapest free worker that meets it (sched_choose's finish_by rule);
 * when none does, out->missed, and it moves only to a free worker whose
 * finish at the 90% level is earlier than current_high_s: it goes on at
 * the fastest capacity. */
void resched_on_deadline(const struct sched_job *job, double current_high_s,
                         const struct sched_worker *workers, size_t n_workers,
                         const double *free_at, double now,
                         struct resched_deadline *out /* OUT */);

#endif
