/* logprobs.h - a sequence's log-probabilities (batcher.h's lp and top) as
 * the engine's protocol carries them (engine.h), in the shape of the chat
 * completions API's choices[].logprobs.content: one object per answer
 * token, {"token": TEXT, "logprob": X, "bytes": [B...], "top_logprobs":
 * [{"token", "logprob", "bytes"}...]}. "token" is the token's text (UTF-8,
 * U+FFFD for bytes that are no whole character), "bytes" its bytes, which
 * joined over the tokens give the answer's bytes.
 *
 * Ownership: the array returned is the caller's.
 */
#ifndef ALALLO_SERVE_LOGPROBS_H
#define ALALLO_SERVE_LOGPROBS_H

#include <jansson.h>

#include "train/run/batcher.h"

/* The entries of s->out[from..to) (s keeps log-probabilities: top_n >= 0).
 * NULL when memory ran out. */
json_t *serve_logprobs_json(const struct batch_seq *s, int from, int to);

/* The entries of the prompt's own tokens s->prompt[from..n_prompt) (s
 * keeps them: batch_seq_prompt_logprobs, and has been prefilled); the
 * first token of the prompt, with nothing before it, has "logprob": null
 * and "top_logprobs": []. NULL when memory ran out. */
json_t *serve_prompt_logprobs_json(const struct batch_seq *s, int from);

#endif
