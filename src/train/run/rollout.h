/* rollout.h - answers to many prompts from one generator, as
 * reinforcement fine-tuning's rollouts draw them (rft_run.c) and the
 * trainer's sample answers (trainer.c): every answer laid out, sampled and
 * stopped as gen_run_chat, gen_run or gen_ids does (generate.h: the
 * model's chat template, its own seed, its stops, max_tokens or the
 * model's context), either all of them decoded together through the
 * batcher (batcher.h: each decode step of every running answer is one
 * pass through the model's matrix products; at most ROLLOUT_WIDTH at a
 * time, the next joining as one finishes) or one after another through
 * gen_run_chat (gen_run, gen_ids). Which answers run beside which is
 * fixed by their order, so a rollout repeats itself exactly; on fp32
 * weights a batched answer is the one gen_run_chat gives alone
 * (decode.h).
 *
 * Ownership: the requests are the caller's; rollout_run fills texts[i]
 * with strings the caller frees (all NULL after a failure).
 */
#ifndef ALALLO_TRAIN_ROLLOUT_H
#define ALALLO_TRAIN_ROLLOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "train/run/generate.h"

/* The most answers decoded together. */
#define ROLLOUT_WIDTH 64

/* One prompt: messages (and tools) when set, else text when set, else
 * ids[0..n_ids). */
struct rollout_req {
    const struct json_t *messages; /* OpenAI's messages, the user's last */
    const struct json_t *tools;    /* or NULL */
    struct gen_opts opts;          /* each answer's own limit, temperature and seed */
    const char *text;              /* a prompt laid out as gen_run lays it out */
    const int32_t *ids;            /* a prompt in ids, taken as gen_ids takes it */
    int n_ids;
};

/* Answers req[0..n) into texts[0..n) (UTF-8, special tokens skipped) and
 * their token counts into tokens[0..n) (may be NULL); batched chooses the
 * batcher over one at a time. 0; GEN_TOO_LONG, GEN_EMPTY or GEN_BAD_CHAT
 * (a conversation the model cannot answer, with the reason); -1 with a
 * reason (out of memory). */
int rollout_run(struct generator *g, const struct rollout_req *req, int n, bool batched,
                char **texts /* OUT */, int *tokens /* OUT, or NULL */, char *err,
                size_t errcap);

/* Called in the caller's thread as answer i is done, texts[i] set. */
typedef void (*rollout_done_fn)(void *ctx, int i);

/* rollout_run, calling done(ctx, i) as each answer is done (in the order
 * they finish), so that the caller can use an answer while the others
 * are decoded. After a failure texts[] keep what was done, for the
 * caller to free once nothing uses them. */
int rollout_run_each(struct generator *g, const struct rollout_req *req, int n, bool batched,
                     char **texts /* OUT */, int *tokens /* OUT, or NULL */,
                     rollout_done_fn done, void *ctx, char *err, size_t errcap);

/* Called for an answer the model cannot answer (rc GEN_TOO_LONG,
 * GEN_EMPTY or GEN_BAD_CHAT, why its reason), which is left out. */
typedef void (*rollout_skip_fn)(void *ctx, int i, int rc, const char *why);

/* rollout_run_each where such an answer is left out (texts[i] NULL,
 * skipped(ctx, i, ...) called) and the others go on: 0, or -1 with a
 * reason (out of memory). */
int rollout_run_some(struct generator *g, const struct rollout_req *req, int n, bool batched,
                     char **texts /* OUT */, int *tokens /* OUT, or NULL */,
                     rollout_skip_fn skipped, void *ctx, char *err, size_t errcap);

#endif
