/* generation.h - a completion from a model a caller may use: by the
 * resident inference engine (inference.h) when serve runs one, else by
 * `alallo generate` as a child process with a time limit (core/child.h),
 * the fallback an operator chooses with `serve --inference child`
 * (docs/serving.md). Either way a crash never takes the server down.
 *
 * With the engine, a fine-tuned LoRA model and a LoRA checkpoint are
 * served as their base plus their adapter (never the merged copy), a full
 * fine-tune as its own weights, a base model as itself.
 */
#ifndef ALALLO_CONTROL_GENERATION_H
#define ALALLO_CONTROL_GENERATION_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "control/control.h"
#include "core/err.h"

/* The bounds of a request's stop texts and the smallest top_p (the
 * engine's, train/run/stop_text.h and train/serve/engine.c). */
#define COMPLETION_STOP_MAX 4
#define COMPLETION_STOP_BYTES 256
#define COMPLETION_TOP_P_MIN 1e-6

struct control_generation {
    const char *prompt;
    const char *chat; /* instead of prompt: {"messages": [...], "tools": [...]} as JSON text */
    const char *prompt_ids; /* instead of prompt: the model's token ids, a JSON array as text
                             * (the engine's path only: a child refuses it, ERR_INVALID) */
    long max_tokens;
    double temperature;
    double top_p;   /* (0, 1]: the nucleus sampled from; 0 (unset) and 1: all */
    long long seed; /* 0..LLONG_MAX; -1: none */
    /* Texts that end the answer before the first of them that comes
     * (finish_reason "stop"; borrowed for the call). The engine's path
     * only: a child refuses them (ERR_INVALID). */
    const char *stop[COMPLETION_STOP_MAX];
    int n_stop;
    /* Each answer token's log-probability and the top_logprobs (0..20)
     * most likely tokens at its place: the answer's "logprobs" array
     * (train/serve/logprobs.h's entries). The engine's path only: a child
     * refuses it (ERR_INVALID). */
    bool logprobs;
    int top_logprobs;
    /* With logprobs and a prompt, the same for the prompt's own tokens:
     * the answer's "prompt_logprobs" array (train/serve/engine.h). */
    bool prompt_logprobs;
    /* When set, called (in the calling thread) with each piece of the text
     * as the generator produces it, before control_generate returns the
     * whole; the pieces joined are a prefix of the final text. With
     * logprobs, `logprobs` holds the entries of the tokens the piece
     * completes (else NULL; borrowed for the call). With prompt_ids or
     * prompt_logprobs, a first call with piece NULL brings, before any
     * piece, what the answer says of its prompt: {"prompt_text",
     * "prompt_logprobs"} (train/serve/engine.h) in `logprobs`. */
    void (*on_delta)(void *ctx, const char *piece, size_t len, const json_t *logprobs);
    void *on_delta_ctx;
    /* When > 0, a socket of the caller's client (the caller's to close):
     * when its peer hangs up (the client left) the generation is cancelled
     * at once, its slot and memory in the engine freed, and
     * control_generate returns ERR_UNAVAILABLE ("The client went away").
     * Watched by the engine's path only; a child runs to its end. */
    int watch_fd;
};

/* Generates from model `model_name` of `account`, whose folder is `dir`
 * (control_model_dir), for at most timeout_s seconds. *out gets the
 * generator's JSON object (text, finish_reason, prompt_tokens,
 * completion_tokens, and logprobs when asked for; the caller owns it). ERR_INVALID with a sentence for
 * the user in why when the request cannot be served by this model (a
 * prompt longer than its context, an empty prompt where the model needs
 * text, a conversation its template refuses); ERR_RATE_LIMITED with a
 * sentence when the engine's queue for the account is full;
 * ERR_UNAVAILABLE with a sentence when it took too long, or the engine is
 * restarting or went away mid-answer (retry after
 * INFERENCE_RETRY_AFTER_S); ERR_INTERNAL when it failed (logged with the
 * model's name and the generator's words, which never reach why). */
enum alallo_err control_generate(struct control *ctl, const char *account, const char *dir,
                                 const char *model_name, const struct control_generation *g,
                                 int timeout_s, json_t **out /* OUT */, char *why /* OUT */,
                                 size_t whycap);

#endif
