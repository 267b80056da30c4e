/* train_events.h - the trainer's events on stdout, one JSON object a line,
 * flushed after each (docs/trainer-protocol.md). Every event carries
 * "event" and "t" (seconds since tev_init). Nothing else is written to
 * stdout by the trainer; diagnostics go to stderr.
 */
#ifndef ALALLO_TRAIN_TRAIN_EVENTS_H
#define ALALLO_TRAIN_TRAIN_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/trainer_protocol.h"

/* Starts the clock for "t". */
void tev_init(void);
/* Seconds since tev_init. */
double tev_now(void);

/* resumed_from < 0 is written as null; cpu_path names the matrix-product
 * path in use (train/cpu_path.h). */
void tev_started(uint64_t step, uint64_t max_steps, size_t examples, size_t tokens,
                 int64_t resumed_from, const char *cpu_path);
/* A line of the training log users read (also copied to stderr). */
void tev_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A warning for the training log: a `log` event with "level": "warn",
 * which the server also records as a warning event of the job. */
void tev_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tev_step(uint64_t step, double loss, double lr, double tokens_per_s);
/* Metrics by enum tproto_metric; NAN: not measured (not written). */
struct tev_metrics {
    double v[TPROTO_METRIC_COUNT];
};
/* All NAN. */
void tev_metrics_clear(struct tev_metrics *m);

/* What a step event may carry besides (docs/trainer-protocol.md). */
struct tev_step_extra {
    double packing_efficiency; /* real tokens / tokens computed since the last
                                  step event, 0..1; < 0: not written */
    int dpo;                   /* 1: the two DPO fields below are written */
    double reward_margin;      /* mean beta * (chosen - rejected) log-ratio */
    double reward_accuracy;    /* share of pairs with a positive margin */
    double chosen_logp, rejected_logp; /* mean log-probability per answer token */
    const struct tev_metrics *metrics; /* NULL: none; else each measured one */
    int moe;                   /* 1: aux_loss below is written */
    double aux_loss;           /* a mixture of experts' auxiliary term in `loss` */
};
void tev_step_with(uint64_t step, double loss, double lr, double tokens_per_s,
                   const struct tev_step_extra *x /* NULL: none */);
/* gpu_peak_bytes: device memory at most since the GPU trainer opened (the
 * model, the optimizer state, the activations), 0 on the CPU (left out). */
void tev_memory(uint64_t peak_rss_bytes, uint64_t gpu_peak_bytes);
/* metrics NULL: no `metrics` object. */
void tev_checkpoint(uint64_t step, const char *path, double train_loss,
                    const struct tev_metrics *metrics);
/* adapter_dir NULL is written as null. */
void tev_done(uint64_t step, double train_loss, const char *model_dir, const char *adapter_dir);
/* Early stopping ended the run at `step` (the steps run), the model being
 * the checkpoint at best_step (docs/trainer-protocol.md). */
void tev_done_early(uint64_t step, double train_loss, const char *model_dir,
                    const char *adapter_dir, uint64_t best_step);
 /* A prompt's greedy answer at `step` (base: the model before training). */
void tev_sample(uint64_t step, int base, const char *prompt, const char *answer);
/* The same for an answer a grader scored (reinforcement fine-tuning):
 * its `score`, and when scores is not NULL (a multi grader's) each
 * sub-grader's score by name as `scores`. */
struct json_t;
void tev_sample_graded(uint64_t step, int base, const char *prompt, const char *answer,
                       double score, const struct json_t *scores);
/* user: 1 for kind "user" (data or settings), 0 for "internal". */
void tev_error(int user, const char *line);

/* The process's peak resident memory in bytes (VmHWM), 0 if unknown. */
uint64_t tev_peak_rss(void);

#endif
