/* job_move.h - the one way the control layer changes a job's status.
 *
 * Every status a job takes after its first one goes through job_move_to():
 * it checks the lifecycle's table (job_transition_allowed() and
 * job_message_allowed() in core/job.h, drawn in docs/lifecycle.md) and
 * changes nothing when the move is not in it. A message change within the
 * same status (queued "Starting" -> "Waiting for capacity") is a move too.
 *
 * A forbidden move is a broken rule of the caller, never the user's doing:
 * job_move_to() logs it and answers ERR_INTERNAL, and the caller returns
 * that from its store_job_update() callback, so the transaction rolls back
 * and nothing half-moved is written. Callers test the status they expect
 * before moving where a move is optional; the result must never be ignored
 * (the build enforces it).
 *
 * The first status of a new job is not a move: job_move_initial() sets it.
 */
#ifndef ALALLO_CONTROL_JOB_MOVE_H
#define ALALLO_CONTROL_JOB_MOVE_H

#include "core/err.h"
#include "core/job.h"
#include "store/store.h"

/* Moves j to status `to` with message `m` when the table allows it.
 * ERR_OK: moved. ERR_INTERNAL: the move is forbidden; j is unchanged. */
enum alallo_err job_move_to(struct store_job *j, enum job_status to, enum job_message m)
    __attribute__((warn_unused_result));

/* Gives a job being created its first status: queued (with "Starting" or
 * "Waiting for capacity") or failed (with a "Not available" message).
 * ERR_INTERNAL for any other pair; j is unchanged then. */
enum alallo_err job_move_initial(struct store_job *j, enum job_status s, enum job_message m)
    __attribute__((warn_unused_result));

#endif
