/* worker_state.h - the states of a worker and of an attempt, with one name
 * table each: the text the store keeps and the worker protocol carries.
 * Which changes are allowed is control/workers.c's table (workers) and
 * docs/lifecycle.md (attempts). Pure: no I/O.
 */
#ifndef ALALLO_CORE_WORKER_STATE_H
#define ALALLO_CORE_WORKER_STATE_H

#include <stdbool.h>

/* active: takes new attempts. draining: keeps nothing new; its attempt is
 * checkpointed and moved. lost: no heartbeat; its attempt continues
 * elsewhere from the latest checkpoint. */
enum worker_state { WORKER_ACTIVE = 0, WORKER_DRAINING, WORKER_LOST, WORKER_STATE_COUNT };

/* "active", "draining", "lost"; NULL when out of range. */
const char *worker_state_name(enum worker_state s);

/* Parses a name of worker_state_name(); false for any other text. */
bool worker_state_parse(const char *name, enum worker_state *out /* OUT */);

/* starting: claimed, the trainer has not said `started`. running: it has.
 * ended: finished, stopped, lost or fenced off; it changes nothing more. */
enum attempt_status { ATTEMPT_STARTING = 0, ATTEMPT_RUNNING, ATTEMPT_ENDED, ATTEMPT_STATUS_COUNT };

/* "starting", "running", "ended"; NULL when out of range. */
const char *attempt_status_name(enum attempt_status s);

/* The status named by stored text; text it does not know reads as ended
 * (an attempt this server cannot read changes nothing). */
enum attempt_status attempt_status_of(const char *name);

/* Where an attempt stands with a batch engine (Slurm), beside its status:
 * none: not an engine's attempt (a worker's), or text this server does not
 * know. submitting: recorded before the submit, no engine id yet. pending:
 * the engine holds it, not running. running: the engine runs it. */
enum engine_state {
    ENGINE_STATE_NONE = 0,
    ENGINE_STATE_SUBMITTING,
    ENGINE_STATE_PENDING,
    ENGINE_STATE_RUNNING,
    ENGINE_STATE_COUNT
};

/* "", "submitting", "pending", "running": the text the store keeps; NULL
 * when out of range. */
const char *engine_state_name(enum engine_state s);

/* The engine state named by stored text; "" and text it does not know read
 * as none. */
enum engine_state engine_state_of(const char *name);

#endif
