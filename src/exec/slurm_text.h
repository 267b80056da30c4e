/* slurm_text.h - reading what Slurm's command-line tools print, and
 * Slurm's words said plainly. Pure: no I/O, no Slurm needed, so every odd
 * output is unit-tested here (tests/unit/exec/test_slurm_text.c).
 *
 * The formats are fixed by exec/slurm.c, which asks for them:
 *   sbatch --parsable                      JOBID[;CLUSTER]
 *   squeue -o SLURM_SQUEUE_FORMAT          one job a line (below)
 *   sinfo -N -o SLURM_SINFO_FORMAT         one node a line
 *   scontrol show partition -o NAME        Key=Value ... on one line
 * Lines are modified in place (cut at the separators).
 */
#ifndef ALALLO_EXEC_SLURM_TEXT_H
#define ALALLO_EXEC_SLURM_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/executor.h"

/* id|state|reason|start|end|nodes|name: the name last, so that a '|' in a
 * job name (another user's) cannot shift the other fields. */
#define SLURM_SQUEUE_FORMAT "%i|%T|%r|%S|%e|%N|%j"
/* node|cpus|memory MiB|gres|state */
#define SLURM_SINFO_FORMAT "%N|%c|%m|%G|%t"

/* The job id in sbatch --parsable's reply: the first line, blanks trimmed,
 * a ";cluster" suffix cut off. False when that is not a job id (digits,
 * with '_' or '+' for array and het jobs) or does not fit. */
bool slurm_parse_job_id(const char *reply, char id[EXEC_ID_MAX] /* OUT */);

/* A Slurm duration ("30", "1:30", "12:00:00", "2-00", "1-12:00:00") in
 * whole minutes, seconds cut off. "UNLIMITED" and "INFINITE" are 0. False
 * for anything else ("NONE", "", "1:2:3:4"). */
bool slurm_parse_minutes(const char *text, long *min /* OUT */);

/* A Slurm time stamp ("2026-12-01T11:14:42", local time) in milliseconds
 * since the epoch; 0 for "N/A", "Unknown", "None" or anything unreadable. */
int64_t slurm_parse_timestamp_ms(const char *text);

/* MaxTime from one line of `scontrol show partition -o`, in minutes (0:
 * unlimited). False when the line has no readable MaxTime. */
bool slurm_partition_max_time(const char *line, long *min /* OUT */);

/* Where a Slurm state word (squeue %T: PENDING, RUNNING, NODE_FAIL…) puts
 * a job; a word this code does not know counts as ended only when it is
 * one of the documented final states, else as pending. */
enum exec_state slurm_state_of(const char *state);

/* Why a job is pending (squeue %r), as a sentence a user understands,
 * ending with Slurm's own word in brackets. Always writes something. */
void slurm_pending_words(const char *reason, char *out /* OUT */, size_t cap);

/* How a job ended (its final state and reason) in plain words. */
void slurm_end_words(const char *state, const char *reason, char *out /* OUT */, size_t cap);

/* One line of squeue in SLURM_SQUEUE_FORMAT into j (every field set; the
 * reason in plain words). False for a line that does not have the seven
 * fields or whose id or name does not fit. */
bool slurm_parse_squeue_line(char *line, struct exec_job *j /* OUT */);

/* GPUs of type `type` ("" : any) in a GRES text such as "gpu:2",
 * "gpu:a100:4(S:0-1),gpu:v100:2" or "(null)". */
int slurm_gres_gpus(const char *gres, const char *type);

/* Adds one line of sinfo in SLURM_SINFO_FORMAT to c (nodes, and the CPUs,
 * memory and GPUs of nodes that take work). False for a malformed line. */
bool slurm_add_sinfo_line(char *line, const char *gpu_type, struct exec_capacity *c /* IN/OUT */);

#endif
