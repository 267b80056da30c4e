/* lifecycle_internal.h - what the store_job_update() callbacks of
 * lifecycle.c (claims, ends, cancels, stops, lost workers, limits) and of
 * trainer_events.c (the trainer's events) share: the context of one
 * update (struct events_ctx), the stop asked of an attempt, the job's
 * scheduler state, ending an attempt and settling its ledger, calibration
 * and the limits. Internal to those two files (the prefix lifecycle__, as
 * libuv's uv__); the rest of the service uses lifecycle.h.
 */
#ifndef ALALLO_CONTROL_LIFECYCLE_INTERNAL_H
#define ALALLO_CONTROL_LIFECYCLE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "control/control.h"
#include "core/job.h"
#include "core/stop_reason.h"
#include "core/trainer_protocol.h"
#include "sched/ledger.h"
#include "sched/outcome.h"
#include "sched/scheduler.h"
#include "store/store.h"

struct tev; /* a trainer event as read (trainer_events.c) */

#define EVENTS_PER_TX 64 /* trainer events applied per transaction */
#define ATTEMPTS_MAX 64  /* attempts of one job considered for billing */
#define CAL_MAX 24       /* calibration pairs one transaction can add */
#define START_TIMEOUT_REASON "the trainer did not start in time"
#define BUDGET_BASE_MIN_S 60.0 /* the budget is a multiple of at least this */

/* Queues an event of type "message". */
enum alallo_err lifecycle__note(struct store_writes *w, int64_t now, const char *level,
                                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The stop asked of j's attempt; text the store holds that this server does
 * not know reads as none. */
enum stop_reason lifecycle__stop_of(const struct store_job *j);

void lifecycle__set_stop(struct store_job *j, enum stop_reason r);

bool lifecycle__attempt_owns(const struct store_job *j, const struct store_attempt *a);

/* The job's scheduler state; NULL when out of memory. Freed by the caller. */
struct sched_state *lifecycle__state_load(const struct store_job *j);

enum alallo_err lifecycle__state_save(struct store_job *j, const struct sched_state *st);

/* Appends a formatted line to attempt `attempt`'s training log. */
enum alallo_err lifecycle__training_log(struct store_writes *w, const char *attempt,
                                       const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

struct events_ctx {
    struct control *ctl;
    const struct tev *ev;
    int n;
    int64_t first; /* index of ev[0] within the attempt; -1 unknown */
    int64_t fence;
    int64_t now;
    const struct store_attempt *history; /* earlier attempts, for billing */
    int n_history;
    const struct sched_worker *workers; /* the capacity, for memory reports */
    int n_workers;
    struct sched_state *st; /* the job's, loaded in the callback */
    struct store_calibration cal[CAL_MAX]; /* OUT: calibration pairs written */
    int n_cal;
    bool broken;           /* OUT: the trainer broke the protocol; the attempt was ended */
    enum tproto_stop stop; /* OUT */
    long partial_step;     /* OUT: a cancel's partial model is due at this
                              checkpoint step (outcome_partial_step); 0 none */
};

/* Clears what an earlier run of a callback left in c. store_job_update()
 * may run a callback more than once (on PostgreSQL, again after a
 * serialization failure or a deadlock: docs/store.md), and only the run
 * that commits may leave its outputs, so every callback that uses an
 * events_ctx starts with this. */
void lifecycle__events_ctx_rerun(struct events_ctx *c);

/* Settles the job's ledger for `outcome` (src/sched/ledger.h) and writes
 * the rows it returns; the job's price follows the ledger. */
enum alallo_err lifecycle__settle(struct events_ctx *c, struct store_job *j,
                                  const struct store_attempt *current,
                                  const struct ledger_outcome *outcome, struct store_writes *w);

enum alallo_err lifecycle__settle_as(struct events_ctx *c, struct store_job *j,
                                     const struct store_attempt *current, enum job_status status,
                                     enum job_message m, enum job_status from, struct store_writes *w);

/* Queues a calibration pair, written with the job and fed to the history
 * once committed. */
enum alallo_err lifecycle__calibrate(struct events_ctx *c, struct store_writes *w,
                                     const struct store_calibration *k);

/* Ends the ledger's record of the running attempt: it keeps `kept` steps
 * (-1: up to the latest checkpoint). Its training time joins the
 * calibration history. */
enum alallo_err lifecycle__ledger_end(struct events_ctx *c, struct store_job *j, long kept,
                                      struct store_writes *w);

/* Closes attempt a at c->now; adds its running time to the job. An
 * attempt whose worker went silent keeps the time up to its last report:
 * the silence before it was noticed is neither billed nor counted. */
void lifecycle__end_attempt(struct store_job *j, struct store_attempt *a, int64_t now,
                            const char *reason);

void lifecycle__check_limits(const struct control *ctl, struct store_job *j,
                             const struct sched_state *st, int64_t now);

/* Gives the calibration pairs a committed transaction wrote to the
 * estimator's history. */
void lifecycle__feed_calibration(struct control *ctl, const struct events_ctx *c,
                                 enum alallo_err committed);

/* Earlier attempts of a job, for billing. Returns how many (0 on error). */
int lifecycle__load_history(struct control *ctl, const char *job, struct store_attempt *out,
                            int cap);

#endif
