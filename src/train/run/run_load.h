/* run_load.h - what every training loop loads from its run's model folder,
 * in two halves with the data loaded between them (errors in the data come
 * before the model is read): first the tokenizer (checked against
 * config.json's vocabulary), the context (seq_len capped by the model's)
 * and the chat template; then the model, LoRA or full on its base's
 * storage, with its adapters drawn from the seed. Shared by the supervised
 * and DPO trainer (trainer.c) and reinforcement fine-tuning (rft_run.c).
 *
 * Ownership: run_load_text fills a run_text the caller releases with
 * run_text_free (also after a failure); run_load_model returns a model the
 * caller frees with model_free.
 */
#ifndef ALALLO_TRAIN_RUN_LOAD_H
#define ALALLO_TRAIN_RUN_LOAD_H

#include <stddef.h>

#include "train/run/train_config.h"

struct tokenizer;
struct chat_format;
struct model;
struct model_opts;

struct run_text {
    struct tokenizer *tok;
    struct chat_format *fmt; /* NULL: none, or one that cannot be read (fmt_err) */
    char fmt_err[400];       /* why fmt is NULL; "" when the model has no template */
    int seq;                 /* the context: seq_len capped by the model's */
};

/* The tokenizer, context and chat template of c->model_dir. TRAIN_OK, or
 * TRAIN_USER with a reason (a missing or bad tokenizer.json or
 * config.json, a tokenizer larger than the model's vocabulary). */
int run_load_text(const struct train_config *c, struct run_text *t /* OUT */, char *err,
                  size_t errcap);
void run_text_free(struct run_text *t); /* a zeroed one is fine */

/* The reason chat lines cannot be laid out (a template that cannot be
 * read), or NULL: what the data loaders take as why_no_format. */
const char *run_text_why_no_format(const struct run_text *t);

/* The model options a run of c trains with (LoRA or full, the base's
 * storage). */
void run_model_opts(const struct train_config *c, struct model_opts *out /* OUT */);

/* The model of c->model_dir as c trains it, its LoRA adapters initialised
 * from c->seed. NULL with *rc TRAIN_USER (the folder's fault) or
 * TRAIN_INTERNAL (out of memory) and a reason. */
struct model *run_load_model(const struct train_config *c, int *rc /* OUT */, char *err,
                             size_t errcap);

#endif
