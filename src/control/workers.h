/* workers.h - the workers' side of the service: register, heartbeat,
 * drain and spot take-back, lost. Every change of a worker's state goes
 * through this module and its one table of allowed changes:
 *
 *   active   -> draining (drain, take-back, held by a serving engine),
 *               lost (no heartbeat)
 *   draining -> lost
 *   lost     -> active   (a heartbeat again: back from the dead)
 *   and a worker that registers again is active whatever it was (it
 *   restarted: its row is replaced, not moved).
 *
 * Each move is a compare-and-set in the store (store_worker_change_state):
 * it happens only from the state the decision was made on, so a heartbeat,
 * a drain and the lost-worker check racing each other never undo one
 * another, and a worker is marked lost only while it is still silent.
 *
 * A worker's attempts end when it is lost or registers again; its jobs
 * move on from their latest checkpoint (lifecycle_worker_gone).
 */
#ifndef ALALLO_CONTROL_WORKERS_H
#define ALALLO_CONTROL_WORKERS_H

#include <stdbool.h>

#include "control/control.h"
#include "core/trainer_protocol.h"
#include "sched/capacity.h"
#include "store/store.h"

/* Whether the table above allows a worker in `from` to go to `to`. */
bool control_worker_change_allowed(enum worker_state from, enum worker_state to);

/* A worker registers (again): whatever it ran before is gone. w is the
 * worker as it describes itself; its state, registration and heartbeat
 * times are set here. */
enum alallo_err control_worker_register(struct control *ctl, struct store_worker *w /* IN/OUT */);

/* Worker `name` is alive. A lost worker becomes active again (its
 * attempts ended when it was lost). *w gets the worker after.
 * ERR_NOT_FOUND when it is not registered. */
enum alallo_err control_worker_heartbeat(struct control *ctl, const char *name,
                                         struct store_worker *w /* OUT */);

/* What the worker must do with the trainer of its attempt `attempt_id`.
 * An attempt this server does not know, or one that is not this worker's,
 * is told to cancel: it runs for nothing. */
enum tproto_stop control_worker_stop_for(struct control *ctl, const char *worker,
                                         const char *attempt_id);

/* Drain (spot false) or spot take-back (spot true): the worker takes no
 * new attempt and its running jobs are told to checkpoint and move.
 * *w gets the worker after; open[] (cap entries) its open attempts, *n how
 * many. ERR_NOT_FOUND: no such worker; ERR_CONFLICT: take-back of a worker
 * that is not spot. */
enum alallo_err control_worker_take_away(struct control *ctl, const char *name, bool spot,
                                         struct store_worker *w /* OUT */,
                                         struct store_attempt *open /* OUT [cap] */, int cap,
                                         int *n /* OUT */);

/* Worker `name`, a slot of an engine's pool that runs no attempt, is held
 * by a serving engine: active -> draining, so that no pass places a job
 * on it and no estimate reads it as free. The engine gives it back by
 * declaring it again (active). ERR_NOT_FOUND: no such worker; ERR_CONFLICT:
 * it is lost. */
enum alallo_err control_worker_hold(struct control *ctl, const char *name);

/* Workers silent for longer than cfg.worker_timeout_s at now_ms are lost,
 * and their attempts move. */
void control_workers_check_lost(struct control *ctl, int64_t now_ms);

#endif
