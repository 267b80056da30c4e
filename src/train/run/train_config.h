/* train_config.h - the settings of one training attempt, read from the
 * ATTEMPT.json a worker writes (docs/trainer-protocol.md).
 *
 * Required: model_dir, train_file, checkpoint_dir, out_dir, max_steps.
 * Everything else has a default (docs/trainer.md). Unknown fields are
 * ignored. Every string is bounded by TRAIN_MAX_PATH; every number is range
 * checked, and a bad one is reported as a settings error naming the field.
 */
#ifndef ALALLO_TRAIN_TRAIN_CONFIG_H
#define ALALLO_TRAIN_TRAIN_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define TRAIN_MAX_PATH 1024
#define TRAIN_SAMPLE_PROMPTS_MAX 8192 /* sample_prompts as compact JSON text */

/* Where the attempt runs (field "device"; train/train_device.h). */
enum train_device {
    TRAIN_DEVICE_CPU = 0, /* "cpu", and the default */
    TRAIN_DEVICE_CUDA,    /* "cuda": the first GPU CUDA_VISIBLE_DEVICES leaves visible */
};

struct train_config {
    char model_dir[TRAIN_MAX_PATH];
    char train_file[TRAIN_MAX_PATH];
    char train_file_name[256];       /* default: the file's base name */
    char validation_file[TRAIN_MAX_PATH]; /* "" when none */
    char checkpoint_dir[TRAIN_MAX_PATH];
    char out_dir[TRAIN_MAX_PATH];
    int four_bit;                    /* precision "4-bit" */
    int full;                        /* adapter "full" */
    int lora_r;                      /* default 16 */
    float lora_alpha;                /* default 32 */
    float lora_dropout;              /* [0, 1), default 0 (train/linear.h) */
    unsigned lora_targets;           /* default all seven projections */
    int n_epochs;                    /* default 1 (informational: max_steps rules) */
    int batch_size;                  /* default 4 */
    float learning_rate;             /* default 2e-4 (LoRA) or 2e-5 (full) */
    uint64_t seed;                   /* default 0 */
    uint64_t max_steps;
    int seq_len;                     /* default 512, at most the model's context */
    uint64_t checkpoint_every_steps; /* 0 = off */
    double checkpoint_every_s;       /* 0 = off */
    int checkpoint_each_epoch;       /* 1: also at the end of each epoch and at the
                                        last step; default 0 */
    int threads;                     /* default: online CPUs */
    /* optional extras */
    uint64_t warmup_steps;           /* default: 5% of max_steps, at least 1 */
    int lr_schedule;                 /* enum lr_kind; default cosine */
    float weight_decay;              /* default 0 */
    float max_grad_norm;             /* default 1.0; 0 = no clipping */
    int keep_checkpoints;            /* default 3 */
    int packing;                     /* 1 (default): a step's examples share rows
                                        (train/pack.h); 0: a row each, padded */
    int dpo;                         /* method "dpo": preference pairs (default
                                        "supervised"); batch_size counts pairs, at
                                        most PACK_MAX_EXAMPLES / 2 */
    float dpo_beta;                  /* default 0.1 */
    int train_on_inputs;             /* 1: loss on every token after the first, prompts
                                        included; default 0 (completions only) */
    int64_t resume_step;             /* -1 (absent): the latest complete checkpoint in
                                        checkpoint_dir; 0: from the start; N: the
                                        checkpoint at step N (or, if it is missing or
                                        damaged, the newest complete one below it) */
    /* watching the job learn (docs/trainer.md, "Validation and early stopping") */
    double validation_split;         /* without validation_file: the share of the training
                                        examples held out for validation, 0 (default) to 0.5 */
    uint64_t valid_every_steps;      /* validation loss on one batch every N steps;
                                        default 10 (the step events' rhythm), 0 = off */
    int early_stopping_patience;     /* epochs without a better full validation loss
                                        before stopping; 0 (default) = off */
    double early_stopping_min_delta; /* how much lower counts as better; default 0 */
    char sample_prompts[TRAIN_SAMPLE_PROMPTS_MAX]; /* the job's own prompts to answer at
                                        each epoch's end (core/sample_prompts.h), as
                                        compact JSON; "" (absent or null): the first
                                        validation prompts */
    char resume_from[TRAIN_MAX_PATH]; /* "" (absent or null): resume in checkpoint_dir as
                                        resume_step says; else the checkpoint folder to
                                        resume from, outside checkpoint_dir (the server's
                                        latest recorded one, written by an earlier
                                        attempt): read, never changed */
    int device;                      /* enum train_device; default TRAIN_DEVICE_CPU */
    /* method "reinforcement" (docs/rft.md): prompts, answered and graded */
    int rft;
    char rft_grader[4096];           /* the grader, compact JSON (core/grader.h) */
    char rft_models[4096];           /* {model name: its folder} for score_model graders */
    int rft_group;                   /* answers sampled per prompt, default 4 */
    int rft_answer_tokens;           /* the most tokens of an answer, default 128 */
    int rft_eval_interval;           /* steps between validation rewards; 0: auto */
    int rft_eval_samples;            /* answers per validation prompt, default 1 */
    double rft_kl;                   /* the KL penalty's beta; 0 (default): off */
};

/* Parses ATTEMPT.json text. 0, or -1 with a one-line reason for the user,
 * e.g. "settings: field \"batch_size\" must be an integer from 1 to 1024". */
int train_config_parse(const char *json, struct train_config *c /* OUT */, char *err,
                       size_t errcap);

/* Reads and parses a file (at most 1 MiB). */
int train_config_load(const char *path, struct train_config *c /* OUT */, char *err,
                      size_t errcap);

#endif
