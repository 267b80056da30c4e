/* ledger.h - what a job costs: the money rules of SPEC §2 as pure functions
 * over the job's attempts, the running-time limits, and fencing. No I/O,
 * no clock (time is a parameter); the caller owns `struct ledger_job`, keeps
 * it beside the job (the store) and writes the rows it returns into the
 * account's ledger.
 *
 * The rules (docs/ledger.md says them for users):
 *  - Price = the worker's hourly rate x the time the job's training steps
 *    took on it. Each step of the final model is billed once, at the rate of
 *    the worker that ran it: an attempt's steps after the checkpoint the job
 *    continued from are lost work, refunded (or never charged); their
 *    repetition is billed to the attempt that repeated them. Waiting,
 *    loading and moving are not steps and are free.
 *  - While a job runs, only steps secured by a checkpoint are charged.
 *  - failed (every failed message, both "Stopped:" ones included): free,
 *    everything charged is refunded.
 *  - succeeded: never more than the upper end of its estimated price; the
 *    excess is refunded. The net charge of any job stays within that
 *    upper end at every settle.
 *  - cancelled while queued: free. Cancelled while running or re-scheduling:
 *    the steps in the partial model (the checkpoint written on cancel) are
 *    charged. Cancelled after the upper end of the estimated time range has
 *    passed since creation: free. A cancel is priced when it is accepted
 *    (ledger_fix_cancel): the job is then charged exactly what cancelling
 *    cost at that moment; steps the trainer completes while it stops stay
 *    in the partial model, free.
 * Settling is idempotent: ledger_settle() compares what each attempt should
 * have been charged with what it was, and returns only the difference as
 * rows. Money is in micros (millionths of the currency unit).
 *
 * Fencing: every attempt gets a fence that grows by one per attempt of the
 * job. A report whose fence is not the job's current one, or whose attempt
 * has ended, changes and bills nothing (ERR_FENCED).
 */
#ifndef ALALLO_SCHED_LEDGER_H
#define ALALLO_SCHED_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/job.h"

#define LEDGER_MAX_ATTEMPTS 64
#define LEDGER_DEFAULT_TIME_LIMIT_S (12.0 * 3600.0)
#define LEDGER_DEFAULT_BUDGET_MULTIPLE 2.0
/* Most rows one settle can return: two per attempt. */
#define LEDGER_MAX_ROWS (2 * LEDGER_MAX_ATTEMPTS)

struct ledger_attempt {
    int64_t id;
    uint64_t fence;
    double rate_per_hour;  /* the worker's rate when the attempt began      */
    long start_step;       /* the step it continued from                    */
    long done_step;        /* the last step it completed                    */
    long kept_step;        /* its steps (start, kept] are in the job's model;
                              settled when it ends                          */
    double train_s;        /* seconds its steps (start, done] took          */
    double began_s;        /* when it began running                         */
    double ended_s;        /* when it ended; meaningful once `ended`        */
    bool ended;
    long billed_to;        /* steps (start, billed_to] are charged, net     */
    int64_t billed_micros; /* money charged for it, net                     */
};

struct ledger_job {
    double created_s;
    double time_high_s;        /* upper end of the estimated time (from
                                  creation): cancel after it is free        */
    double train_high_s;       /* upper end of the estimated training time:
                                  the budget is a multiple of it            */
    int64_t price_high_micros; /* upper end of the estimated price; < 0: none */
    uint64_t fence;            /* the current attempt's; 0 before the first */
    long latest_checkpoint;    /* newest complete checkpoint step; 0 none   */
    int n_attempts;
    struct ledger_attempt attempts[LEDGER_MAX_ATTEMPTS];
    int64_t charged_micros;    /* sum of charge rows (price.charged)        */
    int64_t refunded_micros;   /* sum of refund rows (price.refunded)       */
    bool closed;               /* the final settle was done                 */
    /* A cancel accepted while an attempt ran (ledger_fix_cancel): what it
     * charges was fixed then. */
    bool cancel_fixed;
    enum job_status cancel_from; /* the status it was cancelled from        */
    double cancel_s;             /* when it was accepted                    */
    long cancel_step;            /* steps after this one are not billed     */
    int64_t cancel_micros;       /* the net charge it was shown at          */
};

struct ledger_limits {
    double time_limit_s;    /* running time across attempts; default 12 h */
    double budget_multiple; /* x train_high_s; default 2                  */
};

enum ledger_kind { LEDGER_CHARGE = 0, LEDGER_REFUND };

enum ledger_reason {
    LEDGER_R_STEPS = 0,        /* training steps                            */
    LEDGER_R_LOST_WORK,        /* steps after the checkpoint a move resumed */
    LEDGER_R_ABOVE_ESTIMATE,   /* above the upper end of the estimated price */
    LEDGER_R_FAILED,           /* a failed job costs nothing                */
    LEDGER_R_STOPPED,          /* stopped by the budget or time limit: free */
    LEDGER_R_CANCELLED_QUEUED, /* cancelled while queued: free              */
    LEDGER_R_CANCELLED_LATE,   /* cancelled after the estimated time: free  */
    LEDGER_R_ADJUST,           /* the step time of an attempt was revised   */
    LEDGER_R_CANCEL_PRICE,     /* above what the cancel cost when accepted  */
    LEDGER_REASON_COUNT
};

struct ledger_row {
    enum ledger_kind kind;
    int64_t amount_micros; /* > 0 */
    int64_t attempt_id;
    long from_step, to_step; /* steps (from, to]; equal for money-only rows */
    enum ledger_reason reason;
};

/* How the job stands when it is settled. status JOB_RUNNING (or queued,
 * re-scheduling): still going, an interim settle. JOB_SUCCEEDED,
 * JOB_FAILED (with its message), JOB_CANCELLED (with the status it was
 * cancelled from): final. */
struct ledger_outcome {
    enum job_status status;
    enum job_message message;
    enum job_status cancelled_from;
};

/* "charge" / "refund". */
const char *ledger_kind_name(enum ledger_kind k);
/* A short English reason for a row, e.g. "lost work (repeated for free)". */
const char *ledger_reason_text(enum ledger_reason r);

void ledger_limits_default(struct ledger_limits *l /* OUT */);

/* Starts a job's ledger: created at created_s with the estimate's upper
 * ends. */
void ledger_job_init(struct ledger_job *j /* OUT */, double created_s, double time_high_s,
                     double train_high_s, int64_t price_high_micros);

/* A new attempt `id` on a worker at rate_per_hour, continuing from
 * start_step, beginning at now. Earlier attempts keep at most the steps up
 * to start_step. ERR_CONFLICT when an attempt is still running or the job
 * is closed; ERR_TOO_LARGE past LEDGER_MAX_ATTEMPTS; ERR_INVALID for a
 * negative step or rate. *fence_out gets the attempt's fence. */
enum alallo_err ledger_attempt_begin(struct ledger_job *j, int64_t id, double rate_per_hour,
                                     long start_step, double now, uint64_t *fence_out /* OUT */);

/* The attempt holding `fence` continues from start_step rather than the
 * step it began with: its trainer could only resume from an older
 * checkpoint (the one asked for was missing or damaged). Allowed before its
 * first progress, and only downwards: work of earlier attempts after
 * start_step becomes lost work. ERR_FENCED for a stale fence; ERR_INVALID
 * for a step above the one it began with, or after progress. */
enum alallo_err ledger_attempt_rebase(struct ledger_job *j, uint64_t fence, long start_step);

/* A progress report of the attempt holding `fence`: `step` steps done and
 * train_s seconds spent on its steps so far (loading excluded). ERR_FENCED
 * for a stale fence; ERR_INVALID when step or time go backwards. */
enum alallo_err ledger_attempt_progress(struct ledger_job *j, uint64_t fence, long step,
                                        double train_s);

/* A complete checkpoint at `step` reported by the attempt holding `fence`. */
enum alallo_err ledger_attempt_checkpoint(struct ledger_job *j, uint64_t fence, long step);

/* Ends the attempt holding `fence` at now. kept_step is the last step of
 * its work the job keeps: done_step when it finished or wrote a checkpoint
 * on stop, the latest checkpoint when it was lost. Clamped to its steps. */
enum alallo_err ledger_attempt_end(struct ledger_job *j, uint64_t fence, double now,
                                   long kept_step);

/* Raises the base of the budget (train_high_s) to at least base_s; never
 * lowers it. Called when an attempt is placed: with the running time so
 * far plus the upper end of loading and training on the capacity it got,
 * so that a job the service put on slower capacity than the estimate
 * assumed is not stopped for the service's choice. */
void ledger_raise_budget_base(struct ledger_job *j, double base_s);

/* The attempt holding `fence`, or NULL (stale or unknown). */
struct ledger_attempt *ledger_current(struct ledger_job *j, uint64_t fence);

/* Running time across attempts at now (a running attempt counts to now). */
double ledger_running_s(const struct ledger_job *j, double now);

/* MSG_STOPPED_TIME_LIMIT or MSG_STOPPED_BUDGET when the job's running time
 * has reached that limit at now (the smaller limit first), else MSG_NONE. */
enum job_message ledger_limit_reached(const struct ledger_job *j, const struct ledger_limits *l,
                                      double now);

/* When the running attempt reaches the first limit, as an absolute time;
 * +inf when no attempt runs. For the caller's timer. */
double ledger_limit_deadline(const struct ledger_job *j, const struct ledger_limits *l,
                             double now);

/* Brings what was charged in line with the rules for `outcome` at now, and
 * writes the difference as rows (at most LEDGER_MAX_ROWS; cap must be at
 * least that). A final outcome closes the job; a settle after that is
 * ERR_CONFLICT. A final outcome with an attempt still running ends it first
 * with what it has checkpointed. */
enum alallo_err ledger_settle(struct ledger_job *j, const struct ledger_outcome *outcome,
                              double now, struct ledger_row *rows /* OUT [cap] */, size_t cap,
                              size_t *n_rows /* OUT */);

/* What cancelling the job at `now` would make its net charge, cancelled
 * from status `from` (the status the cancel's settle is given: queued,
 * running or re-scheduling). It is the settle a cancel ends with: the
 * trainer writes a checkpoint when it stops, so a running attempt keeps
 * every step it has completed (done_step), and the cancel rules of
 * ledger_settle() (queued or late: free; the estimate's cap) apply at now.
 * A closed ledger answers its net charge. Pure: j is not changed. The API's
 * price.cancel_now is this, so the amount shown is the amount a cancel in
 * the same state charges. */
int64_t ledger_cancel_micros(const struct ledger_job *j, enum job_status from, double now);

/* The status a cancel of a job in `status` with steps_done steps trained
 * is priced from: a running or cancelling job that has trained no step is
 * priced as queued (free). */
enum job_status ledger_cancel_from(enum job_status status, long steps_done);

/* Fixes what a cancel accepted at `now` from status `from` charges: the
 * ledger_cancel_micros() of that moment, for the steps completed by then
 * (the running attempt's done_step). The final settle of a cancelled job
 * then charges at most that amount, for at most those steps, and judges
 * "late" by `now` rather than by when the trainer stopped;
 * ledger_cancel_micros() answers the fixed amount from then on. A second
 * call changes nothing. */
void ledger_fix_cancel(struct ledger_job *j, enum job_status from, double now);

/* The net charge of the job (charged - refunded). */
int64_t ledger_net_micros(const struct ledger_job *j);

/* What the steps the job keeps cost at their workers' rates, before the
 * price cap and the other rules: each attempt's kept steps (done steps
 * while it runs). For a succeeded job, its price as if it had no cap:
 * what the estimator's upper end is measured against. Pure. */
int64_t ledger_steps_micros(const struct ledger_job *j);

/* Checks the ledger's invariants after a settle: fences grow, the billed
 * step ranges of attempts do not overlap (nothing billed twice), nothing
 * billed above the price cap, totals add up. Returns the number of broken
 * ones; the first is described in why. */
int ledger_check(const struct ledger_job *j, char *why, size_t whycap);

#endif
