/* slurm.h - the executor over Slurm's command-line tools: sbatch, squeue,
 * scancel, scontrol and sinfo, run as child processes with fixed output
 * formats (exec/slurm_text.h) and a time limit each; no libslurm. The
 * cluster is the one SLURM_CONF in this process's environment names (or
 * Slurm's default), which every command inherits.
 *
 * Submission (executor_submit): one `sbatch --parsable` with the tag as
 * --job-name, --no-requeue (alallo, not Slurm, restarts an attempt from
 * its checkpoint as a new fenced attempt), --export=NONE (the script must
 * use absolute paths), --nodes=1 --ntasks=1, and --time, --gres, --mem,
 * --cpus-per-task, --signal=USR1@lead, --output with --open-mode=append,
 * --chdir, --comment, partition, QOS, account and constraint when given. A time
 * limit above the partition's MaxTime (`scontrol show partition -o`,
 * trusted for a minute) would leave the job pending for ever: it is
 * lowered to MaxTime and the receipt says so. A command that does not
 * answer in time is killed: ERR_UNAVAILABLE (for sbatch: the reply was
 * lost, the job may exist; list by tag to find out).
 *
 * Listing: `squeue -h -a -t all -u USER` (finished jobs stay MinJobAge),
 * only names that are alallo tags kept. A list is complete or an error:
 * one line that cannot be read fails the whole list, since a caller acts
 * on what is missing from it.
 *
 * Cancelling: `scancel --name=TAG --user=USER`, never by job id.
 *
 * Errors (x->error holds the line, with the tool's stderr): ERR_UNAVAILABLE
 * for a tool that could not start, timed out, died, or could not reach
 * the controller; ERR_INVALID for a request Slurm refused (bad partition,
 * resources no node has); ERR_TOO_LARGE for output over 32 MiB.
 */
#ifndef ALALLO_EXEC_SLURM_H
#define ALALLO_EXEC_SLURM_H

#include <stddef.h>

#include "core/err.h"
#include "exec/executor.h"

#define SLURM_TIMEOUT_MS_DEFAULT 15000
#define SLURM_OUTPUT_MAX (32u << 20)

struct slurm_config {
    char bin_dir[EXEC_PATH_MAX]; /* folder of sbatch, squeue…; "": found in PATH     */
    char user[64];               /* whose jobs to list and cancel; "": this process's */
    int timeout_ms;              /* each command's limit; 0: SLURM_TIMEOUT_MS_DEFAULT */
    int partition_cache_s;       /* how long a MaxTime is trusted; 0: 60, <0: never  */
};

/* Opens the executor. Checks nothing with Slurm yet (the controller may
 * come later). ERR_INVALID (with err) for a config that cannot work: a
 * bin_dir that is not an absolute folder, a user that is not a plain name.
 * The caller frees *x with executor_close. */
enum alallo_err executor_slurm_open(const struct slurm_config *cfg, struct executor **x /* OUT */,
                                    char *err /* OUT */, size_t errcap);

#endif
