/* paths.h - where a job's files live in the data folder, and the name its
 * model gets: pure helpers over the configuration and the ids, which call
 * nothing else of src/control (setup.h lists the data folder's layout).
 */
#ifndef ALALLO_CONTROL_PATHS_H
#define ALALLO_CONTROL_PATHS_H

#include <stdbool.h>
#include <stddef.h>

#include "control/control.h"
#include "store/store.h"

/* Where a job's files live: DATA/jobs/ID/{checkpoints,out}. Returns false
 * when the id is not a safe id or the path does not fit. */
bool control_job_dir(const struct control *ctl, const char *job_id, const char *sub,
                     char *out, size_t cap);

/* An attempt's own folder: DATA/jobs/JOB/attempts/ATT[/sub]; its trainer
 * writes its checkpoints in ATT/checkpoints and nowhere else. False when an
 * id is not a safe id or the path does not fit. */
bool control_attempt_dir(const struct control *ctl, const char *job_id, const char *attempt_id,
                         const char *sub, char *out, size_t cap);

/* The name a succeeded job's model gets: "ft:MODEL:SUFFIX:RANDOM". */
void control_fine_tuned_model_name(const struct store_job *j, char *out /* OUT */, size_t cap);

#endif
