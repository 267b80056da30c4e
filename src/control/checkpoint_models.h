/* checkpoint_models.h - a listed checkpoint used as a model.
 *
 * Every checkpoint the API lists has a model name,
 * "ft:BASE:SUFFIX:ID:ckpt-step-N" (the job's fine-tuned model name and the
 * step, OpenAI's fine_tuned_model_checkpoint). Such a name works wherever a
 * model is expected. The first use makes the checkpoint into a model folder
 * (`alallo train --materialize`, a child process, as a checkpoint download
 * does) and keeps it with the job's files, in DATA/jobs/ID/checkpoint-models/
 * step-N/{model,adapter}, so later uses (and jobs trained from it) find it
 * even after the trainer pruned the checkpoint's own files. The folder is
 * made under a temporary name and renamed into place, so a crash halfway
 * never leaves a half-made model there. One build per job runs at a time
 * (an flock on checkpoint-models/build.lock, so across processes on the
 * same data too): concurrent first uses wait for the one build and use its
 * folder; at most 2 builds run at once in one process, all jobs together
 * (more wait their turn). A checkpoint the trainer prunes while it is
 * being made is ERR_NOT_FOUND, as one pruned before. At most 4 builds are
 * kept per job: a new one removes the least recently used (each use
 * renews its folder's time) that went unused for 5 minutes and that no job
 * trains from; a later use makes it again while the checkpoint is kept.
 */
#ifndef ALALLO_CONTROL_CHECKPOINT_MODELS_H
#define ALALLO_CONTROL_CHECKPOINT_MODELS_H

#include <stdbool.h>
#include <stddef.h>

#include "control/control.h"
#include "core/err.h"
#include "store/store.h"

/* Splits a checkpoint model name into its job's id (ftjob-ID) and step.
 * False when `name` is not of that form. */
bool control_checkpoint_name_parse(const char *name, char *job_id, size_t cap,
                                   long *step /* OUT */);

/* The model folder (and, for a LoRA job, the adapter folder; "" otherwise)
 * of checkpoint model `name` of `account`'s job, made on first use.
 * `job`, when not NULL, gets the job. ERR_NOT_FOUND with a sentence naming
 * the model in why when it is no checkpoint of the account or its files are
 * no longer kept; ERR_INTERNAL when it could not be made (logged). */
enum alallo_err control_checkpoint_model_dir(struct control *ctl, const char *account,
                                             const char *name, char *dir, size_t cap,
                                             char *adapter, size_t acap,
                                             struct store_job *job /* OUT, may be NULL */,
                                             char *why, size_t whycap);

/* The folder of the model job j trains from: a base model of the catalog,
 * a fine-tuned model of the same account, or one of its listed checkpoints
 * (control_checkpoint_model_dir, which calls this again for the base of
 * the checkpoint's job: the two live in one file). False when it is gone. */
bool control_job_model_dir(struct control *ctl, const struct store_job *j, char *out,
                           size_t cap);

#endif
