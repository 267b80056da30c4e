/* lifecycle.h - how a job moves through its seven statuses (the help page
 * and docs/lifecycle.md): claims by workers, the trainer's events relayed
 * by them, the end of an attempt, cancels, stops, lost workers.
 *
 * Every change to a job goes through store_job_update(), so each of these
 * is one durable transaction. Fencing: an attempt may change its job only
 * while its fence is the job's fence and it has not ended; otherwise
 * ERR_FENCED and nothing changes.
 */
#ifndef ALALLO_CONTROL_LIFECYCLE_H
#define ALALLO_CONTROL_LIFECYCLE_H

#include <jansson.h>

#include "control/control.h"
#include "core/stop_reason.h"
#include "core/trainer_protocol.h"
#include "store/store.h"

/* Worker `worker` asks for work: picks a waiting job that fits it, starts
 * an attempt with a new fence, and writes the trainer's spec (ATTEMPT.json
 * minus threads) into *spec. ERR_OK with *spec NULL: nothing for it now.
 * ERR_NOT_FOUND: the worker is not registered. */
enum alallo_err lifecycle_claim(struct control *ctl, const char *worker,
                                struct store_attempt *attempt /* OUT */, json_t **spec /* OUT */);

/* A free slot `slot` (a worker row of an engine's pool, control/engine.h)
 * takes a waiting job as lifecycle_claim does, but the attempt is recorded
 * with engine_state "submitting" in the same transaction, before anything
 * is submitted, and the job's message stays "Waiting for capacity".
 * *claimed false: nothing for it now. */
enum alallo_err lifecycle_claim_engine(struct control *ctl, const char *slot,
                                       struct store_attempt *attempt /* OUT */,
                                       bool *claimed /* OUT */);

/* The trainer's spec of attempt `attempt_id` (minus threads), made again
 * from what the store holds: the same for every call (the start call of an
 * attempt runner is idempotent). ERR_FENCED when the attempt no longer owns
 * its job or the job is being cancelled; ERR_NOT_FOUND when the attempt or
 * its model is gone. */
enum alallo_err lifecycle_attempt_spec(struct control *ctl, const char *attempt_id,
                                       struct store_attempt *attempt /* OUT */,
                                       struct store_job *job /* OUT */, json_t **spec /* OUT */);

/* Applies trainer events (docs/trainer-protocol.md; trainer_events.c) reported for attempt
 * `attempt_id` holding `fence`; `first` is the index within the attempt of
 * events[0] (-1: unknown, apply all). Events already applied (a batch sent
 * again) are skipped. *stop gets what the worker must do with its trainer. */
enum alallo_err lifecycle_events(struct control *ctl, const char *attempt_id, int64_t fence,
                                 int64_t first, json_t *events,
                                 enum tproto_stop *stop /* OUT */);

/* What ended an attempt, as its worker reports it. */
struct attempt_end {
    int exit_status;     /* -1 when it died by a signal */
    int signal;          /* 0 when it exited */
    bool not_started;    /* the trainer could not be started */
    enum tproto_stop acted_on;         /* the stop the worker acted on         */
    enum tproto_error_kind error_kind; /* from the trainer's `error`, or NONE   */
    char line[STORE_MESSAGE_MAX];
};

/* Whether attempt a, of fence `fence`, ended with its job's success at
 * its trainer's `done`: its worker or runner is finishing, and what it
 * sends until then (a batch sent again, a heartbeat) is answered with no
 * change rather than as a fence. */
bool lifecycle_attempt_finishing(const struct store_attempt *a, int64_t fence);

/* Ends attempt `attempt_id` and decides the job's outcome. */
enum alallo_err lifecycle_finish(struct control *ctl, const char *attempt_id, int64_t fence,
                                 const struct attempt_end *end);

/* Cancels job `id` of `account`: at once when nothing runs it, else
 * cancelling until its trainer has stopped. `out` gets the job after. */
enum alallo_err lifecycle_cancel(struct control *ctl, const char *account, const char *id,
                                 struct store_job *out /* OUT */);

/* Ends every open attempt on worker `worker` with `reason` ("worker lost",
 * "worker restarted"); their jobs go to re-scheduling (or back to queued
 * if they had not started, or to cancelled if cancelling). */
enum alallo_err lifecycle_worker_gone(struct control *ctl, const char *worker,
                                      const char *reason);

/* Asks the attempt running job `id` to stop for `reason` (a move, the time
 * limit, the budget); the worker learns it at its next call. A reason asked
 * before stays. */
enum alallo_err lifecycle_request_stop(struct control *ctl, const char *id,
                                       enum stop_reason reason);

/* What the worker must do with the trainer of attempt `a` of job `j`. An
 * attempt that no longer owns its job is told to cancel: its work counts
 * for nothing. */
enum tproto_stop lifecycle_stop_for(const struct store_job *j, const struct store_attempt *a);

/* Ends attempts that were claimed but whose trainer has not reported
 * `started` within --start-timeout: the job waits again (its message
 * "Waiting for capacity", or "Re-scheduling"), and after --start-tries
 * such attempts it fails as alallo's failure. Their workers are told to
 * cancel at their next call. */
void lifecycle_check_starts(struct control *ctl, int64_t now_ms);

/* Checks the running jobs against the time limit and the budget, and asks
 * those past either to stop. */
void lifecycle_check_limits(struct control *ctl, int64_t now_ms);

/* Tells the operator about a failure on alallo's side: an error line in the
 * server log, the failures counter, and the webhook (if configured). */
void lifecycle_report_internal(struct control *ctl, const struct store_job *j,
                               const char *detail);

/* Makes the partial model of every cancelled job that was charged but has
 * none: the cancel committed and the server stopped before the model was
 * made (keep_partial_model runs after the commit). Called at start-up. */
void lifecycle_repair_partial_models(struct control *ctl);

#endif
