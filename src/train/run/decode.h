/* decode.h - the one decode path: a KV cache per sequence and a forward
 * pass over several sequences at once, shared by `alallo generate`
 * (generate.c, one sequence), the trainer's sample answers (through
 * generate.c) and the resident inference engine (train/serve/, many
 * sequences of one base model, each with its own LoRA adapter or none).
 *
 * decode_forward runs the new tokens of every sequence of a batch through
 * the model together: each linear layer is one matrix product over the
 * rows of all the long prompts and one over the short prompts' (at most
 * 32 tokens) and all the one-token rows (decode steps) together, each in the
 * order of operations it has alone (the trainer's packed product for long
 * prompts, kernels/rowdot.h's fixed order for the rest, so a short
 * prompt's rows get the numbers its tokens get decoded one at a time; a
 * prompt's kind depends on its own length only), and a sequence's adapter is
 * added to its own rows only (h_i += scale (x_i A^T) B^T, the products
 * linear_forward makes for an adapter inside the model); attention reads
 * each sequence's own cache. A batch of one sequence whose adapter is the
 * model's own (loaded into it) is what generate.c always did.
 *
 * Ownership: a kv_cache and a decode_work own their memory (free with
 * kv_cache_free, decode_work_free); a decode_adapter is the caller's and
 * only read here.
 */
#ifndef ALALLO_TRAIN_DECODE_H
#define ALALLO_TRAIN_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "train/model/model.h"

/* The keys and values of one sequence's positions [0, len), room for cap. */
struct kv_cache {
    int cap, len;
    int layers, kd;
    float *k, *v; /* (layers, cap, kd) each */
};

/* Makes room for `cap` positions of model m (len 0). 0 or -1 (memory). */
int kv_cache_init(struct kv_cache *c, const struct model *m, int cap);
void kv_cache_free(struct kv_cache *c); /* a zeroed one is fine */
/* Bytes a cache of cap positions of m holds. */
size_t kv_cache_bytes(const struct model *m, int cap);

/* A LoRA adapter held apart from its base: lin[l * PROJ_COUNT + p] is the
 * adapter of projection p of layer l (r 0: none there; only r, scale, la,
 * lb, in and out are read). */
struct decode_adapter {
    int n_layers;
    struct linear *lin;
};

/* Logits at every new token but the last (a prompt scored, as legacy
 * completions' echo with logprobs asks): fn(ctx, i, logits, vocab) for
 * i = 0 .. n - 2 in order, logits the model's output after token i (the
 * same numbers the last token's logits get: the head through the one-row
 * tiles, up to 32 rows at a time), borrowed for the call. */
struct decode_rows {
    void (*fn)(void *ctx, int i, const float *logits, int vocab);
    void *ctx;
};

/* One sequence's part of a batch: n new tokens at positions kv->len... */
struct decode_seq {
    struct kv_cache *kv;
    const int32_t *ids;
    int n;
    const struct decode_adapter *adapter; /* NULL: the model alone */
    const struct decode_rows *rows;       /* NULL: the last token's logits only */
};

struct decode_work; /* activations for a batch; grows as needed */

struct decode_work *decode_work_new(void);
void decode_work_free(struct decode_work *w); /* NULL is fine */

/* The products a work's batches made, counted on one matrix (each pass
 * reads every weight of the model once): `prompt` the passes that carry
 * prompts' rows (one for the long prompts of a batch, one for its short
 * prompts, with the decode rows beside them when the weights are fp32),
 * `token` the passes of one-token rows alone (decode steps, and prompts
 * of one token). */
struct decode_passes {
    unsigned long long prompt, token;
};
struct decode_passes decode_work_passes(const struct decode_work *w);

/* Runs the batch: every sequence's tokens fill its cache (kv->len grows by
 * n; n + len must fit cap) and logits (n_seq, vocab) get the logits of
 * each sequence's last new token, in the order of seqs. The rows of all
 * long prompts go through each matrix in one product, and those of all
 * short prompts and the one-token rows in another (with an fp32 weight
 * they share the tiles' order; through other weights they are two
 * products), whatever the order in seqs: a row's product is the one it
 * gets alone, so neither the batch nor its order changes a sequence's
 * numbers. A sequence with `rows` gets its other tokens' logits too,
 * handed to rows->fn after the pass. 0, or -1 when memory ran out (the
 * caches are then as before). */
int decode_forward(struct model *m, struct decode_work *w, struct decode_seq *seqs, int n_seq,
                   float *logits /* OUT */);

#endif
