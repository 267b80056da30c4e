/* models.h - what the service does with models beyond training them: which
 * precisions the capacity can train a base model at, the folder of a model
 * a caller may use, and the files made of it for a download (exports, a
 * checkpoint made into a model; generations from it: generation.h).
 *
 * Exports run this binary as a child process with a time
 * limit (core/child.h), so a crash or a runaway one never takes the server down.
 * Their files are made in DATA/tmp and belong to the caller's struct
 * control_artifact until control_artifact_free.
 */
#ifndef ALALLO_CONTROL_MODELS_H
#define ALALLO_CONTROL_MODELS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control/catalog.h"
#include "control/control.h"
#include "store/store.h"

#define CONTROL_EXPORT_TIMEOUT_S 600

/* One way to train a base model: its memory need, and whether the largest
 * active worker now has that much. */
struct control_method {
    const char *precision; /* "16-bit" or "4-bit" */
    const char *adapter;   /* "lora" or "full" */
    int64_t memory_bytes;
    bool available;
};

#define CONTROL_METHODS 3

/* The methods of base model m (16-bit LoRA, 16-bit full, 4-bit LoRA) at
 * batch 8 and the service's context, against the fleet now. */
void control_model_methods(struct control *ctl, const struct catalog_model *m,
                           struct control_method out[CONTROL_METHODS] /* OUT */);

/* Where a model is expected, a job id (ftjob-...) of `account` stands for
 * the job's fine-tuned model. Writes into out the model name `id` stands
 * for (id itself when it is not a job id) and returns true; returns false
 * with a sentence in why when it is a job id of the account whose job has
 * no model ("The job ftjob-... failed: it has no model.") or no such job. */
bool control_model_name(struct control *ctl, const char *account, const char *id, char *out,
                        size_t cap, char *why, size_t whycap);

/* "No such model: ID. Available: a, b, ..." naming the catalog's models and
 * the account's newest fine-tuned ones (at most CONTROL_MODELS_NAMED in
 * all), for an answer to a model that is not there. */
#define CONTROL_MODELS_NAMED 12
void control_no_such_model(struct control *ctl, const char *account, const char *id, char *out,
                           size_t cap);

/* The folder of model `id` as `account` may use it: a base model of the
 * catalog, a fine-tuned model of the account, or one of its listed
 * checkpoints (made into a model on first use, checkpoint_models.h).
 * ERR_NOT_FOUND with a sentence naming the model in why when none of
 * these ("No such model: ID. Available: ..." unless it names a checkpoint
 * that is gone); ERR_INTERNAL when a checkpoint could not be made into a
 * model. */
enum alallo_err control_model_dir(struct control *ctl, const char *account, const char *id,
                                  char *dir, size_t cap, char *why, size_t whycap);

/* A file or folder made for a download, in its own temporary folder. */
struct control_artifact {
    char tmp[512];   /* the temporary folder; "" when none */
    char path[1024]; /* the file or folder made */
    bool is_dir;
};

/* Whether `dtype` is a GGUF storage `alallo export --dtype` takes. */
bool control_export_dtype_valid(const char *dtype);

/* Exports a model as `format` ("hf", "peft", "gguf" or "ollama": a folder
 * of model.gguf and its Modelfile), the GGUF matrices stored as dtype (NULL:
 * f16; checked with control_export_dtype_valid): the model in base_dir (a
 * base model when j is NULL; a checkpoint of job j made into a model, its
 * LoRA adapter in adapter_dir, otherwise), or (base_dir NULL) the
 * fine-tuned model of job j. PEFT is the
 * LoRA adapter: for a finished LoRA job the one it saved, for a cancelled
 * one's partial model made again from its latest checkpoint.
 * ERR_INVALID when the model has no such form (a base model or a full
 * fine-tune has no adapter); ERR_INTERNAL or ERR_IO when it failed (the
 * child's words go to the log). why gets a sentence for the caller that
 * never names a folder. */
enum alallo_err control_export(struct control *ctl, const char *base_dir,
                               const char *adapter_dir, const struct store_job *j,
                               const char *format, const char *dtype,
                               struct control_artifact *out /* OUT */, char *why, size_t whycap);

/* Makes checkpoint `ckpt_path` of job j into a model folder (the base with
 * the checkpoint's weights). ERR_NOT_FOUND when the job's base model is
 * gone; ERR_INTERNAL with a fixed reason in why when it could not be made
 * (the materializer's words go to the log). */
enum alallo_err control_checkpoint_model(struct control *ctl, const struct store_job *j,
                                         const char *ckpt_path,
                                         struct control_artifact *out /* OUT */, char *why,
                                         size_t whycap);

/* Removes the artifact's temporary folder. Accepts one never made. */
void control_artifact_free(struct control_artifact *a);

#endif
