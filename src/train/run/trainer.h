/* trainer.h - one training attempt from start to final model, as
 * `alallo train --config ATTEMPT.json` runs it (docs/trainer-protocol.md),
 * and the making of a model folder from a checkpoint.
 *
 * The trainer owns its process: it installs SIGTERM/SIGUSR1 handlers,
 * writes events on stdout, and returns the exit status the protocol names
 * (0 done, 3 user error, 4 stopped on request, 1 internal error).
 */
#ifndef ALALLO_TRAIN_TRAINER_H
#define ALALLO_TRAIN_TRAINER_H

#include "core/trainer_protocol.h"
#include "train/run/train_config.h"

enum train_exit {
    TRAIN_OK = TPROTO_EXIT_DONE,
    TRAIN_INTERNAL = TPROTO_EXIT_INTERNAL,
    TRAIN_USER = TPROTO_EXIT_USER_ERROR,
    TRAIN_STOPPED = TPROTO_EXIT_STOPPED
};

/* Runs the attempt described by `c`. Returns an enum train_exit. */
int trainer_run(const struct train_config *c);
#ifdef ALALLO_HAVE_CUDA
/* The same attempt with its passes and AdamW on the GPU (cuda_train.h):
 * the same loop, data, events and checkpoints. Uses the context that is
 * open (train_device_prepare), or opens GPU 0. DPO is refused. */
int trainer_run_gpu(const struct train_config *c);
#endif

/* Makes a merged model folder at out_dir from the checkpoint folder
 * ckpt_dir over the base model base_dir (and, when adapter_dir is not NULL
 * and the checkpoint holds LoRA adapters, a PEFT folder there).
 * 0, or -1 with a reason. */
int trainer_materialize(const char *ckpt_dir, const char *base_dir, const char *out_dir,
                        const char *adapter_dir, char *err, size_t errcap);

struct model;
/* Writes the trained model *mp as the run's output: c->out_dir/model (the
 * merged model) and, for LoRA, c->out_dir/adapter (PEFT); their paths into
 * model_out and adapter_out. LoRA: the merged model is the base folder's
 * published weights plus *mp's adapters, a tensor at a time (*mp stays the
 * caller's). 0, or -1 with a reason. */
int trainer_save_output(const struct train_config *c, struct model **mp, char *model_out,
                        char *adapter_out, size_t cap, char *err, size_t errcap);

/* What a checkpoint's trainable block means (its meta.json, malloc'd; NULL
 * on out of memory), for a loop of its own (rft_run.c) that writes the
 * same checkpoints. */
char *trainer_meta_json(const struct train_config *c, size_t n_params);

/* Reads the checkpoint at path into *k (the caller's, ckpt_release) and
 * checks it fits model m (its trainable block, LoRA's settings) and a run
 * of max_steps. 0, or -1 with a reason (k released). */
struct ckpt;
int trainer_read_checkpoint(const char *path, const struct model *m, uint64_t max_steps,
                            struct ckpt *k, char *err, size_t errcap);

#endif
