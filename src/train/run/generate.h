/* generate.h - text generation from a model folder with a KV cache:
 * greedy (temperature 0) or sampled (temperature, top-p, seed) decoding,
 * for a base or fine-tuned folder, optionally with a PEFT LoRA adapter
 * applied on top (not merged: the adapter's product is added at run time).
 *
 * Prompts are encoded with data_encode_prompt, the way training formats a
 * prompt, so a model trained on prompt/completion pairs continues a
 * training prompt as it was trained to. Generation stops at the model's
 * end-of-sequence token (finish_reason "stop") or after max_tokens
 * ("length").
 *
 * Ownership: gen_open returns a generator the caller closes with
 * gen_close; gen_run fills a result the caller frees with gen_result_free.
 * One generator serves one call at a time.
 */
#ifndef ALALLO_TRAIN_GENERATE_H
#define ALALLO_TRAIN_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GEN_MAX_TOKENS 4096

struct gen_opts {
    int max_tokens;      /* 1..GEN_MAX_TOKENS */
    float temperature;   /* 0 = greedy */
    float top_p;         /* (0, 1]; 1 = no cut */
    uint64_t seed;
};

struct gen_result {
    char *text;                /* the completion only, UTF-8 */
    int prompt_tokens;
    int context_tokens;        /* the model's context (positions) */
    int completion_tokens;
    const char *finish_reason; /* "stop" or "length" (static) */
};

struct generator;

/* Loads model_dir (config.json, *.safetensors, tokenizer.json) and, when
 * adapter_dir is not NULL, a PEFT adapter. NULL with a reason. */
struct generator *gen_open(const char *model_dir, const char *adapter_dir, char *err,
                           size_t errcap);
/* As gen_open; with four_bit the base's matrices are loaded as NF4, as a
 * 4-bit (QLoRA) job trains on them: quantized as they are read, a chunk at
 * a time (the whole base is never held in fp32), and decoded a block of
 * rows at a time inside each product. The answers are those of the model
 * the adapter was trained with, not of the merged folder. */
struct generator *gen_open_as(const char *model_dir, const char *adapter_dir, bool four_bit,
                              char *err, size_t errcap);
void gen_close(struct generator *g); /* NULL is fine */

/* Called while a completion is generated with each piece of its text as
 * it grows (UTF-8, whole characters; special tokens skipped): the pieces
 * joined are a prefix of the result's text, which they equal unless the
 * last characters were still incomplete when generation stopped (the
 * caller sends the rest from the result). */
typedef void (*gen_text_fn)(void *ctx, const char *piece, size_t len);

/* Sets (fn NULL: clears) the piece callback of the following calls. */
void gen_set_on_text(struct generator *g, gen_text_fn fn, void *ctx);

/* Replaces every matrix of a generator opened without an adapter by its
 * round trip through the GGUF export's quantization (quant.h's choice per
 * tensor, the same encoder and decoder), so that generation runs the
 * weights `alallo export --dtype SCHEME` writes. Quantizing rows commutes
 * with llama.cpp's q/k row order; Gemma 2's folded query scale is not
 * applied first, so its q rows are close, not identical. 0, or -1 with a
 * reason (an adapter is loaded; out of memory). */
int gen_quantize(struct generator *g, const char *scheme, char *err, size_t errcap);

struct model;
struct tokenizer;
/* A generator over a model and tokenizer the caller keeps owning (the
 * trainer's, for sample answers during training: LoRA adapters are
 * applied at run time as for gen_open's). model_dir, when not NULL, is
 * the folder whose chat template lays out conversations (gen_run_chat),
 * as gen_open's. gen_close frees only the generator. NULL on out of
 * memory. */
struct generator *gen_borrow(struct model *m, struct tokenizer *tok, const char *model_dir);

/* What gen_run and gen_ids return when the caller asked for something the
 * model cannot do (the caller's mistake, not the generator's failure):
 * GEN_TOO_LONG, the prompt fills the model's context (prompt_tokens and
 * context_tokens say by how much); GEN_EMPTY, the prompt has no tokens
 * (an empty prompt for a model without a start token). */
#define GEN_TOO_LONG (-2)
#define GEN_EMPTY (-3)

/* Generates a completion of `prompt`. 0; GEN_TOO_LONG or GEN_EMPTY (with a
 * reason, and out->prompt_tokens and out->context_tokens set); or -1 with a
 * reason when the generator failed (out of memory). A completion that
 * would run past the context stops there (finish_reason "length"). */
int gen_run(struct generator *g, const char *prompt, const struct gen_opts *o,
            struct gen_result *out /* OUT */, char *err, size_t errcap);

/* The model's mean loss (natural log) on `text`: encoded as a prompt
 * (BOS text), cut into windows of the model's context, each token after the
 * first of a window predicted from the window before it. *tokens gets the
 * count of predicted tokens. 0, or -1 with a reason (fewer than two tokens;
 * out of memory). For comparing weights (bench/gguf), not a server path. */
int gen_score(struct generator *g, const char *text, double *loss /* OUT */,
              long *tokens /* OUT */, char *err, size_t errcap);

/* What gen_run_chat returns when the conversation is one the model's chat
 * template refuses (its raise_exception, e.g. roles that do not alternate)
 * or names an unknown role: the caller's mistake, with the reason. */
#define GEN_BAD_CHAT (-4)

struct json_t;

/* Generates the next assistant turn of a conversation (OpenAI's messages,
 * and tools or NULL) laid out by the model's chat template, or by the
 * plain layout of data_encode_chat for a model without one; stops at EOS
 * or at the template family's end-of-turn token (chat_format_stop_ids).
 * Returns as gen_run, or GEN_BAD_CHAT. */
int gen_run_chat(struct generator *g, const struct json_t *messages, const struct json_t *tools,
                 const struct gen_opts *o, struct gen_result *out /* OUT */, char *err,
                 size_t errcap);

/* Generates from token ids (after the prompt formatting), writing up to
 * max_tokens ids into out_ids. Returns the count, GEN_TOO_LONG, GEN_EMPTY
 * or -1, as gen_run. For tests. */
int gen_ids(struct generator *g, const int32_t *ids, int n, const struct gen_opts *o,
            int32_t *out_ids, const char **finish_reason, char *err, size_t errcap);

void gen_result_free(struct gen_result *r);

/* The pieces the resident engine (train/serve/) drives one decode step at
 * a time, with the same prompt layout, sampling and stops as gen_run and
 * gen_run_chat, so its answers are theirs. */

/* The ids that end an answer: the end-of-sequence token and, for a chat,
 * the template family's end-of-turn tokens. */
#define GEN_MAX_STOP 8
struct gen_stops {
    int32_t id[GEN_MAX_STOP + 1];
    int n;
};
bool gen_stops_has(const struct gen_stops *s, int32_t id);

/* The ids gen_run would generate after (*ids the caller frees) and the
 * ids that end its answer. 0, or -1 with a reason. */
int gen_encode_prompt(struct generator *g, const char *prompt, int32_t **ids /* OUT */,
                      size_t *n /* OUT */, struct gen_stops *stops /* OUT */, char *err,
                      size_t errcap);
/* The same for a prompt given as token ids in[0..n) (each below the
 * model's vocabulary: the caller's check), taken as they are (no start
 * token added). 0, or -1 with a reason (memory). */
int gen_encode_ids(struct generator *g, const int32_t *in, size_t n, int32_t **ids /* OUT */,
                   struct gen_stops *stops /* OUT */, char *err, size_t errcap);
/* The same for gen_run_chat's conversation: 0, -1 or GEN_BAD_CHAT. */
int gen_encode_chat(struct generator *g, const struct json_t *messages,
                    const struct json_t *tools, int32_t **ids /* OUT */, size_t *n /* OUT */,
                    struct gen_stops *stops /* OUT */, char *err, size_t errcap);

/* The next token from a position's logits (V of them): the largest at
 * temperature 0, else drawn from the nucleus with r. buf holds V. */
struct rng;
struct gen_cand {
    float p;
    int id;
};
int gen_pick(const float *logits, int V, const struct gen_opts *o, struct rng *r,
             struct gen_cand *buf);

/* The text of ids[0..n) (special tokens skipped) up to its last whole
 * character (a token may end inside one): malloc'd, the caller frees it;
 * *len its bytes. NULL when memory ran out. */
char *gen_whole_text(const struct generator *g, const int32_t *ids, int n, size_t *len);
/* The bytes of text[0..len) before the U+FFFD a decode puts where its
 * last character is still incomplete. */
size_t gen_whole_len(const char *text, size_t len);

/* Gives fn what the text of ids[0..n) has grown by past *sent bytes, up
 * to its last whole character (a token may end inside one), and moves
 * *sent on. */
void gen_growth(const struct generator *g, const int32_t *ids, int n, size_t *sent,
                gen_text_fn fn, void *ctx);

/* The generator's model and tokenizer (its own, or the borrowed ones). */
struct model *gen_model(const struct generator *g);
struct tokenizer *gen_tokenizer(const struct generator *g);

#endif
