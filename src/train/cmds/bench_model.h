/* bench_model.h - what `alallo bench train` measures, shared by the CPU
 * bench (cmd_bench.c) and the GPU bench (bench_gpu.c): the options, the
 * model they name (a folder, or a named shape initialised at random) and
 * the batch of random tokens, and the FLOPs a token costs.
 *
 * Ownership: bench_setup_make fills a struct bench_setup that owns its
 * model, optimizer state and token arrays; bench_setup_free releases them.
 */
#ifndef ALALLO_TRAIN_BENCH_MODEL_H
#define ALALLO_TRAIN_BENCH_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "train/model/model.h"
#include "train/model/optim.h"

struct bench_opts {
    const char *model_dir; /* --model, or NULL                      */
    const char *shape;     /* --shape (124m when neither is given)   */
    const char *precision; /* "16-bit" or "4-bit"                    */
    const char *adapter;   /* "lora" or "full"                       */
    int full, four;        /* the two above as flags                 */
    int B, T, steps, threads, lora_r, vocab;
    float lr;
};

/* Parses the options both benches share (defaults: 124m, 16-bit, lora,
 * batch 4, seq 64, 5 steps, all CPUs, rank 16, lr 1e-5). 0, or 2 (the
 * exit status) after printing one line to stderr. */
int bench_opts_parse(int argc, char **argv, struct bench_opts *o /* OUT */);

/* The shapes bench knows, as its usage lines list them. */
#define BENCH_SHAPES "tiny, base, small, 124m, 1b"

/* The vocabulary bench gives a named shape's model: 512 for tiny, 4096 for
 * base and small, 0 (the shape's own) for the others. */
int bench_shape_vocab(const char *shape);

struct bench_setup {
    struct model *m;
    struct optim opt;
    int32_t *ids;  /* B x T random tokens            */
    uint8_t *mask; /* B x T ones                     */
    size_t n_targets;
};

/* The model o names, LoRA set up, AdamW state, and the batch. 0, or -1
 * with a reason in err (nothing is left allocated). */
int bench_setup_make(const struct bench_opts *o, struct bench_setup *s /* OUT */, char *err,
                     size_t errcap);
void bench_setup_free(struct bench_setup *s);

/* Model FLOPs per trained token: full fine-tuning 6N + 6 L d T, LoRA
 * 4 N_base + 6 N_lora (the frozen base needs no weight gradient). */
double bench_flops_per_token(const struct model *m, const struct bench_opts *o);

#endif
