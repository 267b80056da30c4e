/* outcome.h - what becomes of a job when something happens to its attempt:
 * the attempt ends (the trainer exited, was stopped, never started), the
 * user cancels, its worker is lost, it passes its time limit or budget, it
 * finishes. Pure decisions over the job's status, the stop it was asked
 * for and how the attempt ended; the caller carries them out. The server
 * (src/control/lifecycle.c) and the fleet simulation (sim.c) both call
 * these, so a change to how a job moves or is billed shows in both.
 *
 * Each decision gives the job's next status and message, whether and how
 * to settle its ledger (ledger_settle() with `ledger`), whether it waits
 * for a placement again, whether its latest checkpoint becomes a partial
 * model, and whether alallo's operator must hear of it. No I/O, no clock,
 * no store: the rows of docs/lifecycle.md and docs/ledger.md as code.
 */
#ifndef ALALLO_SCHED_OUTCOME_H
#define ALALLO_SCHED_OUTCOME_H

#include <stdbool.h>

#include "core/job.h"
#include "core/stop_reason.h"
#include "sched/ledger.h"


enum outcome_kind {
    OUTCOME_NONE = 0,        /* nothing changes (a cancel of a cancelling or
                                ended job, a `done` of an ended one)        */
    OUTCOME_SUCCEEDED,       /* the model is done                           */
    OUTCOME_CANCELLED,       /* cancelled, final                            */
    OUTCOME_CANCELLING,      /* the attempt must stop first (stop CANCEL)   */
    OUTCOME_STOPPED,         /* failed by a stop: time limit, budget, or not
                                available; free                             */
    OUTCOME_TRAINING_FAILED, /* the user's error (data, config): free       */
    OUTCOME_FAILED_INTERNAL, /* alallo's failure: free, operator told       */
    OUTCOME_REQUEUED,        /* waits for a placement again, continuing from
                                its latest checkpoint                       */
};

struct outcome {
    enum outcome_kind kind;
    enum job_status status;       /* the job's status after                  */
    enum job_message message;     /* and its message                         */
    bool settle;                  /* settle the ledger now, for `ledger`     */
    struct ledger_outcome ledger; /* meaningful when settle                  */
    enum stop_reason stop;       /* OUTCOME_CANCELLING: the stop to record  */
    bool requeue;                 /* back into the queue of the pass         */
    bool partial_model;           /* cancelled after it trained: the
                                     checkpoint at outcome_partial_step()
                                     is kept as a partial model            */
    bool internal;                /* alallo's failure: tell the operator     */
    const char *attempt_reason;   /* attempts[].reason; NULL when the caller
                                     words how the trainer ended            */
};

/* attempts[].reason of an attempt whose trainer's `done` made its job
 * succeed: its runner still heartbeats and sends its finish after. */
#define OUTCOME_REASON_SUCCEEDED "succeeded"

/* How the attempt ended, as its worker reports it. */
struct outcome_end {
    int exit_status;            /* -1 when it died by a signal             */
    int signal;                 /* 0 when it exited                        */
    bool not_started;           /* the trainer could not be started        */
    enum stop_reason acted_on; /* the stop the worker acted on: CANCEL,
                                   MOVE or NONE                            */
    bool user_error;            /* the trainer reported a user error       */
};

/* The job as it stands when its attempt ends. */
struct outcome_job {
    enum job_status status;
    enum stop_reason stop; /* the stop asked of its attempt, or NONE      */
    bool trained;           /* the attempt ran training, or the job has
                               steps from earlier attempts                */
};

/* What the worker must do with the trainer of a job in `status` asked for
 * `stop`: CANCEL (stop it; its work ends here), MOVE (stop it after a
 * checkpoint; the job continues elsewhere) or NONE. A cancelling job, and
 * every stop but a move, is CANCEL. */
enum stop_reason outcome_worker_stop(enum job_status status, enum stop_reason stop);

/* A stop `asked` for the attempt of a job in `status` whose attempt was
 * already asked for `current` (or NONE). False when refused: the job has
 * ended or is cancelling, or no attempt holds it. Else *stop gets the stop
 * to record (the first one asked stays) and *status_after the job's status:
 * a move shows at once, a running job is re-scheduling while its trainer
 * writes the checkpoint it continues from. */
bool outcome_stop_request(enum job_status status, bool has_attempt, enum stop_reason current,
                          enum stop_reason asked, enum stop_reason *stop /* OUT */,
                          enum job_status *status_after /* OUT */);

/* The job's attempt ended as `end` says. In this order: a cancelling job
 * (or one asked to cancel) is cancelled, billed for what it trained; one
 * asked to stop for a limit or for memory fails with that stop's message;
 * a user error (or exit status 3) fails as training failed; a trainer that
 * stopped on request (exit 4, or killed by SIGTERM/SIGKILL after a move was
 * asked) waits again (queued if it had not started running, else
 * re-scheduling); anything else is alallo's failure. */
void outcome_of_end(const struct outcome_job *job, const struct outcome_end *end,
                    struct outcome *out /* OUT */);

/* The trainer reported `done` for a job in `status`: succeeded (from
 * running or cancelling alike: the model is done); NONE once it ended. */
void outcome_of_done(enum job_status status, struct outcome *out /* OUT */);

/* The user cancels a job in `status`; `has_attempt` when an attempt holds
 * it. Without one it is cancelled at once, billed as cancelled from
 * `status` (re-scheduling: the steps it keeps, and their partial model);
 * with one it is cancelling, its attempt asked to stop (CANCEL) and the
 * rest decided when it ends. NONE when it is already cancelling or has
 * ended. */
void outcome_of_cancel(enum job_status status, bool has_attempt, struct outcome *out /* OUT */);

/* The worker of the job's attempt is gone (lost, restarted). A cancelling
 * job is cancelled, billed for and keeping its latest checkpoint; one whose trainer had not started (queued) waits again
 * with nothing to settle; any other re-schedules from its latest
 * checkpoint. */
void outcome_of_worker_gone(enum job_status status, struct outcome *out /* OUT */);

/* The step whose checkpoint becomes the partial model of a job cancelled
 * by `o`, read from its ledger after the settle `o` asked for: the last
 * step the job keeps, which for a charged cancel is exactly the last step
 * charged (each kept step is billed once). 0 when no partial model is due:
 * the outcome is not such a cancel, or the job keeps no step. Every
 * cancel that charges steps has one, whichever way it came (the attempt
 * ended, the job was re-scheduling, the worker was lost). */
long outcome_partial_step(const struct outcome *o, const struct ledger_job *settled);

/* The stop the limits call for now, over the job's ledger: TIME_LIMIT or
 * BUDGET (the smaller limit first, as ledger_limit_reached()), else NONE.
 * Whether to look (the job runs, no stop was asked yet) is the caller's. */
enum stop_reason outcome_limit_stop(const struct ledger_job *ledger,
                                     const struct ledger_limits *limits, double now);

#endif
