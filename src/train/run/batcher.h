/* batcher.h - continuous batching: the running sequences of one base model
 * advance one token each per step, all through the model's matrix
 * products together (train/run/decode.h), each with its own adapter.
 *
 * A sequence joins whenever it is admitted: its first step feeds its whole
 * prompt (the prefill, in one pass with the prompts of every sequence
 * joining at that step, in the same forward pass as the others' next
 * tokens) and later steps its last token. After each step every sequence
 * picks its next token as gen_ids does (generate.h: the same sampling
 * from its own seed, the same stops, the same limit at max_tokens or the
 * model's context), so a sequence's answer is the one `alallo generate`
 * gives alone; a sequence with stop texts also ends at the first of
 * them. A sequence leaves when it has finished (finish != NULL) or its
 * client went away; the others go on.
 *
 * Ownership: a batch_seq owns its prompt, its output ids and its cache
 * (batch_seq_end frees them); the generator and adapter are the
 * caller's, kept alive while the sequence runs. A batcher owns the
 * working memory of a step.
 */
#ifndef ALALLO_TRAIN_BATCHER_H
#define ALALLO_TRAIN_BATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "train/run/decode.h"
#include "train/run/generate.h"
#include "train/run/stop_text.h"

struct batch_seq {
    struct generator *g;                  /* the base: model, tokenizer */
    const struct decode_adapter *adapter; /* NULL: the base alone */
    struct gen_opts opts;
    struct gen_stops stops;
    int32_t *prompt;
    int n_prompt;
    int32_t *out; /* the answer's ids so far */
    int n_out, max_new;
    struct kv_cache kv;
    struct rng rng;
    size_t sent;        /* bytes of the answer given to on_text */
    const char *finish; /* NULL while running; then "stop" or "length" */
    /* Texts that end the answer where one first appears (stop_text.h; the
     * caller sets them after batch_seq_start). While there are any, the
     * text given to on_text holds back an end that may grow into one; when
     * one comes the sequence finishes ("stop"), its answer is its text's
     * first `cut` bytes (has_cut) and its tokens those whose text starts
     * before that. */
    struct stop_texts stop_texts;
    bool has_cut;
    size_t cut;
    /* The answer's tokens shown (whose log-probabilities go out): n_out,
     * but while text is held back those whose text starts before it, and
     * with a cut those whose text starts before the cut. */
    int n_kept;
    gen_text_fn on_text; /* each piece of the answer as it grows, or NULL */
    void *on_text_ctx;
    /* With batch_seq_logprobs: for out[i], its log-probability lp[i] and
     * the top_n most likely tokens there, most likely first:
     * top[i * top_n + k] (ids and log-probabilities). */
    int top_n; /* -1: none kept */
    float *lp;
    struct batch_logprob *top;
    /* With batch_seq_prompt_logprobs, the same of the prompt's own tokens,
     * filled by the prefill: prompt[i]'s log-probability after prompt[0..i)
     * plp[i] and the top_n most likely tokens there ptop[i * top_n + k];
     * plp[0] is NAN (no token before it). */
    float *plp;
    struct batch_logprob *ptop;
    struct decode_rows rows; /* the prefill's call back into plp */
};

/* A token and its log-probability: the natural log of its softmax
 * probability under the model's logits, before temperature and top_p. */
struct batch_logprob {
    int32_t id;
    float lp;
};

#define BATCH_TOP_LOGPROBS_MAX 20

/* Readies s to answer after `ids` (n of them, taken over: freed by
 * batch_seq_end even on failure). 0; GEN_EMPTY or GEN_TOO_LONG (the
 * caller's mistake, with a reason, as gen_ids); -1 with a reason (bad
 * max_tokens, out of memory). */
int batch_seq_start(struct batch_seq *s, struct generator *g,
                    const struct decode_adapter *adapter, int32_t *ids, size_t n,
                    const struct gen_stops *stops, const struct gen_opts *o, char *err,
                    size_t errcap);
void batch_seq_end(struct batch_seq *s); /* a zeroed one is fine */

/* Keeps, from now on, each answer token's log-probability and the top_n
 * (0..BATCH_TOP_LOGPROBS_MAX) most likely tokens at its place (lp, top).
 * 0, or -1 (bad top_n, out of memory). */
int batch_seq_logprobs(struct batch_seq *s, int top_n);

/* Keeps the prompt's own tokens' log-probabilities too (plp, ptop), with
 * the top_n of batch_seq_logprobs (called first), before the sequence's
 * first step. 0, or -1 (no batch_seq_logprobs yet, already stepped, out
 * of memory). */
int batch_seq_prompt_logprobs(struct batch_seq *s);

/* Bytes a sequence holds while it runs (its cache and ids). */
size_t batch_seq_bytes(const struct batch_seq *s);

struct batcher;
struct batcher *batcher_new(void);
void batcher_free(struct batcher *b); /* NULL is fine */

/* One step of seqs[0..n), all unfinished and of one base: one forward pass
 * over all of them, then each one's next token. The prompts of the
 * sequences that join at this step are prefilled together, one product a
 * matrix for all their rows (decode_forward), whatever their order in
 * seqs. 0, or -1 when memory ran out (the step did not happen). */
int batcher_step(struct batcher *b, struct batch_seq **seqs, int n);

/* The passes over the weights of b's steps so far (decode.h). */
struct decode_passes batcher_passes(const struct batcher *b);

#endif
