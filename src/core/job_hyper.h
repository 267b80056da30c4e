/* job_hyper.h - a job's hyper-parameters beyond epochs, batch size and
 * learning rate: the context, packing, the LoRA adapter, the learning-rate
 * schedule, train_on_inputs, DPO's beta and reinforcement fine-tuning's
 * sampling (docs/api.md, "Hyper-parameters"; docs/rft.md).
 *
 * The API validates them at the edge (api/job_request.c) and the store keeps
 * them as one JSON object (store_job.hyper); the planner, the estimator and
 * the trainer's settings read them back through job_hyper_parse. Pure: no I/O.
 */
#ifndef ALALLO_CORE_JOB_HYPER_H
#define ALALLO_CORE_JOB_HYPER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Ranges the API accepts (docs/api.md). */
#define JOB_HYPER_MIN_SEQ 32
#define JOB_HYPER_MAX_SEQ 131072
#define JOB_HYPER_MAX_RANK 256
#define JOB_HYPER_MAX_ALPHA 1024.0
#define JOB_HYPER_MAX_WARMUP 0.5
#define JOB_HYPER_MAX_DECAY 1.0
#define JOB_HYPER_MAX_BETA 10.0
/* lora_dropout is in [0, 1): 1 would drop every input */
#define JOB_HYPER_MAX_SPLIT 0.5     /* validation_split */
#define JOB_HYPER_MAX_PATIENCE 100  /* early_stopping.patience, in epochs */
#define JOB_HYPER_MAX_MIN_DELTA 100.0
/* The context of jobs made before max_seq_len existed. */
#define JOB_HYPER_LEGACY_SEQ 256

/* LoRA target modules, one bit each, in the order of the names below. */
#define JOB_HYPER_TARGETS 7
#define JOB_HYPER_ALL_TARGETS 0x7fu

enum job_lr_schedule { JOB_LR_COSINE = 0, JOB_LR_LINEAR, JOB_LR_CONSTANT, JOB_LR_COUNT };

struct job_hyper {
    int max_seq_len;        /* tokens per example (and per packed row) */
    bool packing;           /* several examples per row (default true) */
    int lora_rank;          /* 1..JOB_HYPER_MAX_RANK, default 16 */
    double lora_alpha;      /* (0, JOB_HYPER_MAX_ALPHA], default 32 */
    unsigned lora_targets;  /* non-empty bit set, default all seven */
    double lora_dropout;    /* [0, 1), default 0 (docs/api.md) */
    enum job_lr_schedule lr_schedule; /* default cosine */
    double warmup_ratio;    /* share of the steps warming up, default 0.05 */
    double weight_decay;    /* AdamW's, default 0 */
    bool train_on_inputs;   /* loss on prompts too, default false */
    double dpo_beta;        /* DPO only: (0, JOB_HYPER_MAX_BETA], default 0.1 */
    /* watching it learn (docs/api.md, "Validation and early stopping") */
    double validation_split; /* without a validation file: the share of the training
                                file held out, 0 (default, off) to JOB_HYPER_MAX_SPLIT */
    int early_stopping_patience; /* epochs without a better full validation loss
                                    before stopping; 0 (default) off */
    double early_stopping_min_delta; /* how much lower counts as better, default 0 */
    /* reinforcement fine-tuning only (docs/rft.md); rft_group is 0 for the
     * other methods, and then none of these is stored */
    int rft_group;                /* answers sampled per prompt, from compute_multiplier */
    double rft_compute_multiplier; /* (0, JOB_HYPER_MAX_COMPUTE], default 1 */
    int rft_eval_interval;        /* steps between validation rewards; 0: auto */
    int rft_eval_samples;         /* answers per validation prompt, default 1 */
    int rft_answer_tokens;        /* the most tokens of an answer, from reasoning_effort */
    char rft_effort[8];           /* "low", "medium" (default) or "high" */
    double rft_kl;                /* beta: the KL penalty to the reference, default 0 */
};

#define JOB_HYPER_MAX_COMPUTE 10.0
#define JOB_HYPER_MAX_EVAL_SAMPLES 16
#define JOB_HYPER_MAX_EVAL_INTERVAL 100000
/* Without a validation file, the validation rewards are measured on this
 * many of the first training prompts (the trainer, and the estimate). */
#define JOB_HYPER_RFT_VALID_FROM_TRAIN 16
/* eval_interval "auto": a tenth of the steps, at least 1. */
#define JOB_HYPER_RFT_EVAL_EVERY(max_steps) ((max_steps) >= 10 ? (max_steps) / 10 : 1)

/* Steps between a reinforcement job's validation rewards: h's
 * eval_interval, or "auto"'s for max_steps. */
long job_hyper_rft_eval_every(const struct job_hyper *h, long max_steps);

/* Sets the reinforcement fields of h from compute_multiplier and
 * reasoning_effort (NULL or "auto": the defaults): rft_group is
 * round(4 * compute_multiplier) within [2, 32]; low, medium and high
 * answer in at most 64, 128 and 256 tokens. false for an effort that is
 * none of these. */
bool job_hyper_rft(struct job_hyper *h, double compute_multiplier, const char *effort);

/* The defaults above, with max_seq_len 0 (chosen per model and fleet). */
void job_hyper_defaults(struct job_hyper *h /* OUT */);

/* "q_proj" ... "down_proj" for bit i; NULL out of range. */
const char *job_hyper_target_name(int i);
/* The bit of a target module's name; -1 if unknown. */
int job_hyper_target_parse(const char *name);
/* "cosine", "linear", "constant"; NULL out of range. */
const char *job_hyper_schedule_name(enum job_lr_schedule s);
/* false for an unknown name. */
bool job_hyper_schedule_parse(const char *name, enum job_lr_schedule *out /* OUT */);

/* Reads the stored object. "" (a job made before these existed) gives the
 * defaults with max_seq_len JOB_HYPER_LEGACY_SEQ and packing off, so that
 * such a job trains as it did. Fields missing or out of range keep their
 * default. */
void job_hyper_parse(const char *json, struct job_hyper *out /* OUT */);

/* Writes the object (every field; dpo_beta only when `dpo`). false when it
 * does not fit in cap. */
bool job_hyper_format(const struct job_hyper *h, bool dpo, char *out, size_t cap);

/* Sets key to value in the stored object `hyper` (the job's further
 * settings kept beside the hyper-parameters: integrations, sample prompts).
 * Takes the caller's reference to value (NULL: false). false, hyper
 * unchanged, when hyper is no JSON object or the result does not fit in
 * cap. */
bool job_hyper_set(char *hyper /* IN/OUT */, size_t cap, const char *key, json_t *value);

/* The goal finish_by's deadline kept in the stored object (key
 * "finish_by", Unix seconds; control/job_draft.c sets it with
 * job_hyper_set); 0 when there is none. */
double job_hyper_finish_by(const char *hyper);

/* A reinforcement job's score_model graders' models, which its trainer
 * loads beside the policy, as kept in the stored object (key
 * "grader_weights" {"params", "bytes"}: their parameters and their files'
 * bytes, each model counted once; control/job_draft.c sets it): 0 and 0
 * when there is none (any other grader, any other method). */
void job_hyper_grader_weights(const char *hyper, int64_t *params /* OUT */,
                              int64_t *bytes /* OUT */);

/* A reinforcement job's python graders' nominal seconds for each answer
 * graded (key "python_answer_s", EST_PYTHON_GRADE_S for each of its python
 * graders; control/job_draft.c sets it): 0 when there is none. */
double job_hyper_python_answer_s(const char *hyper);

/* How many of a training file's `examples` a validation_split of `split`
 * holds out, by the trainer's rule (docs/api.md, "Hyper-parameters"):
 * round(split * examples), at least 1, and at least 1 left to train on.
 * 0 when split is 0 (off); -1 when the file has fewer than 2 examples, so
 * that none can be held out: the API refuses such a job when it is made or
 * estimated, naming hyperparameters.validation_split. */
long job_hyper_split_held_out(double split, long examples);

/* Warm-up steps of a job of max_steps steps: ceil(ratio * max_steps). */
long job_hyper_warmup_steps(const struct job_hyper *h, long max_steps);

#endif
