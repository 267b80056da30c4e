/* process.h - the executor that runs an attempt's batch script as a child
 * process of this one, for machines and tests without Slurm.
 *
 * The script is run as is (it must be executable, with its #! line; there
 * is no srun here), in its own process group, stdin /dev/null, stdout and
 * stderr appended to exec_submit.output (or /dev/null), in workdir when
 * given, with this process's environment. It runs at once: a process job
 * is never pending. The job id is the child's PID.
 *
 * Time is acted on whenever the executor is called (list, cancel, submit;
 * the control loop lists every few seconds), not by a thread of its own:
 * SIGUSR1 to the group signal_lead_s before the time limit, SIGTERM at the
 * limit, SIGKILL grace_s after any SIGTERM; cancel is SIGTERM, then the
 * same SIGKILL. When the script's own process ends, what it left in its
 * group is killed, as Slurm does at the end of a job. Ended jobs stay
 * listed for keep_ended_s with a state in Slurm's words (COMPLETED,
 * FAILED, CANCELLED, TIMEOUT) and a reason in plain words.
 *
 * A script another process still holds open for writing (ETXTBSY: a
 * child forked by another thread while the script was being written
 * holds the descriptor until it execs) is tried again for up to 2 s.
 *
 * What the executor ran is known to this process only: after a restart of
 * the service its old children are not listed (reconciliation ends their
 * attempts; the fence stops them writing) and close() stops every child
 * (SIGTERM, SIGKILL after grace_s). Children are reaped by PID, so the
 * process that holds this executor must not reap with waitpid(-1).
 */
#ifndef ALALLO_EXEC_PROCESS_H
#define ALALLO_EXEC_PROCESS_H

#include <stddef.h>

#include "core/err.h"
#include "exec/executor.h"

#define PROCESS_JOBS_MAX 4096

struct process_config {
    int keep_ended_s; /* how long an ended job stays listed; 0: 600            */
    int grace_s;      /* SIGTERM to SIGKILL; 0: 10                             */
    int gpus;         /* GPUs this machine offers (capacity); devices not managed */
};

/* Opens the executor; cfg may be NULL for the defaults. The caller frees
 * *x with executor_close. */
enum alallo_err executor_process_open(const struct process_config *cfg,
                                      struct executor **x /* OUT */, char *err /* OUT */,
                                      size_t errcap);

#endif
