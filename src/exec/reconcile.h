/* reconcile.h - what to do when the store's open attempts of an engine and
 * the engine's own list of jobs disagree (docs/slurm.md, "Reconciliation").
 * Pure: the caller lists the engine (executor_list), reads its open
 * attempts from the store, calls exec_reconcile, and carries out the
 * actions; nothing here runs a command or writes the store.
 *
 * Attempts and jobs are matched by the tag alallo-<attempt id> only, never
 * by the engine's job id: a Slurm controller that crashes can lose jobs
 * it acknowledged and give their ids to new ones.
 *
 *   store                     engine (by tag)              action
 *   submitting                none                         RESUBMIT (the submit was lost;
 *                                                           same attempt, same tag)
 *   any open                  pending or running           KEEP, or UPDATE when the id
 *                                                           or the state differs
 *   any open, no finish       ended, or none (pending or   END, with the reason in words
 *                             running in the store)
 *   any open, finish received ended or none                KEEP (the finish closes it)
 *   none open                 pending or running           CANCEL the tag (an orphan, or
 *                                                           a ghost after a crash)
 *
 * An attempt submitted after the list was taken (submitted_ms later than
 * listed_ms less EXEC_RECONCILE_SLACK_MS) is too new to judge: KEEP. When
 * one tag has several jobs (a resubmit whose first reply was only
 * delayed), the one furthest along counts: running, then pending, then
 * ended.
 */
#ifndef ALALLO_EXEC_RECONCILE_H
#define ALALLO_EXEC_RECONCILE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/ids.h"
#include "core/worker_state.h"
#include "exec/executor.h"

#define EXEC_RECONCILE_SLACK_MS 2000

struct exec_open_attempt {
    char attempt_id[IDS_MAX];
    enum engine_state state;     /* core/worker_state.h; never none here      */
    char engine_id[EXEC_ID_MAX]; /* "" when not recorded                    */
    bool finished;               /* the runner's finish was received         */
    int64_t submitted_ms;        /* wall clock, when the intent was recorded */
};

enum exec_action_kind {
    EXEC_ACT_KEEP,     /* as recorded                                          */
    EXEC_ACT_UPDATE,   /* record engine_id and state (and show reason)        */
    EXEC_ACT_RESUBMIT, /* submit the attempt again, same tag                   */
    EXEC_ACT_END,      /* end the attempt: its engine job ended or vanished     */
    EXEC_ACT_CANCEL,   /* cancel the tag: no open attempt owns the job         */
};

struct exec_action {
    enum exec_action_kind kind;
    char attempt_id[IDS_MAX];     /* CANCEL: the id the orphan tag names       */
    char tag[EXEC_TAG_MAX];
    char engine_id[EXEC_ID_MAX];  /* the job's id when one was listed         */
    enum engine_state state;      /* UPDATE and KEEP: the state to record      */
    char node[64];                /* where it runs, when listed                */
    char reason[EXEC_REASON_MAX]; /* END: why, in words; KEEP/UPDATE while
                                     pending: why it waits                     */
};

/* Decides one action per open attempt (in the order given) and then one
 * CANCEL per orphan tag (once per tag). jobs must be the engine's whole
 * list (executor_list's total no more than the room given): a job left
 * out reads as vanished. out must have room for na + nj actions; *nout
 * gets how many were written. listed_ms is the wall time the engine's
 * list was taken. */
void exec_reconcile(const struct exec_open_attempt *attempts, int na, const struct exec_job *jobs,
                    int nj, int64_t listed_ms, struct exec_action *out /* OUT [na + nj] */,
                    int *nout /* OUT */);

/* "keep", "update", "resubmit", "end", "cancel". */
const char *exec_action_name(enum exec_action_kind k);

#endif
