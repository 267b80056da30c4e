/* estimate_provisional.h - the server's stand-in estimator, memory planner
 * and time-left rule, until the scheduler modules of src/sched take over.
 * Each function is named *_provisional so the swap is a search away.
 *
 * Pure: plain structs in, numbers out; no clock, no I/O. The inputs are
 * what SPEC §2 names: the model's shape, the data set's size, the method,
 * and each worker's declared memory, price and measured speed.
 */
#ifndef ALALLO_API_ESTIMATE_PROVISIONAL_H
#define ALALLO_API_ESTIMATE_PROVISIONAL_H

#include <stdbool.h>
#include <stdint.h>

#include "api/catalog.h"
#include "store/store.h"

/* What is being trained. */
struct est_shape {
    const struct catalog_model *model;
    const char *precision; /* "16-bit" | "4-bit" */
    const char *adapter;   /* "lora" | "full" */
    const char *goal;      /* "lowest_cost" | "fastest_finish" */
    int batch_size;
    int seq_len;
    int64_t tokens; /* tokens to train on, all epochs together */
};

/* One worker as the estimate sees it. */
struct est_worker {
    const char *name;
    int64_t mem_bytes;
    int cpus;
    double flops;        /* measured FLOP/s; 0 when unknown */
    double price_per_hour;
    bool idle;           /* running nothing now */
};

struct estimate {
    double low_s, high_s;             /* submit to finish, wait included */
    double train_low_s, train_high_s; /* the training alone */
    double price_low, price_high;
    int64_t memory_bytes;
    char worker[STORE_NAME_MAX]; /* "" when none fits */
    bool any_worker;             /* some worker is known (and active) */
    bool fits;                   /* some known worker can run it */
    bool fits_at_4bit;           /* ... at 4-bit precision */
    bool free_now;               /* a fitting worker is idle now */
};

/* Memory a training process needs: frozen base (bf16 or NF4 with
 * double-quantized scales), trainable weights with their gradient and
 * AdamW state, activations and logits for one batch, and the process. */
int64_t memory_need_provisional(const struct catalog_model *m, const char *precision,
                                const char *adapter, int batch_size, int seq_len);

/* Training FLOPs per token (FACTS.md): full 6N + 6·L·d·T; LoRA ≈ 4N. */
double flops_per_token_provisional(const struct catalog_model *m, const char *adapter,
                                   int seq_len);

/* Tokens in one epoch of a data set with `examples` examples and
 * `text_bytes` bytes of text, each example cut to seq_len. */
int64_t tokens_per_epoch_provisional(long examples, int64_t text_bytes, int seq_len);

/* The estimate for `s` on the workers `w[0..n)` with `queued_ahead` jobs
 * already waiting. */
void estimate_provisional(const struct est_shape *s, const struct est_worker *w, int n,
                          long queued_ahead, struct estimate *out /* OUT */);

/* Time left of a job at `now_ms`: a range and its basis ("estimate" before
 * about 5% of the steps of the current run, "pace" after). Returns false
 * when the job has no time left to show (it ended). */
bool time_left_provisional(const struct store_job *j, int64_t now_ms, double *low_s /* OUT */,
                           double *high_s /* OUT */, const char **basis /* OUT */);

#endif
