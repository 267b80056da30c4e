/* engine.h - the resident inference engine (`alallo inference`): one
 * process beside `serve` that keeps models loaded (model_lru.h), admits
 * requests fairly (admission.h) and answers them by continuous batching
 * (batcher.h), over a local socket (docs/serving.md).
 *
 * The protocol, one connection per request: the client writes one JSON
 * object on one line -
 *   {"account": ID, "weights": DIR, "adapter": DIR (optional),
 *    "four_bit": BOOL (optional: the weights' matrices loaded as NF4, as
 *    a 4-bit job trained on them; model_lru.h),
 *    "prompt": TEXT | "prompt_ids": [ID...] | "chat": {"messages": [...],
 *    "tools": [...]},
 *    "max_tokens": N, "temperature": T, "top_p": P, "seed": S (optional),
 *    "stream": BOOL, "logprobs": TOP (optional, 0..20),
 *    "prompt_logprobs": BOOL (optional; true only with logprobs and a
 *    prompt or prompt_ids)}
 * - and reads lines: with stream, {"delta": TEXT} as the answer grows; then
 * one final object, the answer {"text", "prompt_tokens",
 * "completion_tokens", "finish_reason"} or an error {"error": CODE, ...}:
 * "context_length_exceeded" and "empty_prompt" (with "prompt_tokens" and
 * "context_tokens"), "invalid_chat" (with "message"), as `alallo generate
 * --json` prints them; "invalid_request" (a request the engine cannot
 * read, with "message"); "busy" (the account's queue or the engine's
 * memory is full: try again); "failed" (the model could not be loaded or
 * memory ran out; "message" says why, for the operator's log). The engine
 * closes the connection after the final line. A client that closes its
 * end first cancels the request: it leaves the queue, or its sequence the
 * batch, at once.
 *
 * With "logprobs", each answer token's log-probability and the TOP most
 * likely tokens at its place (logprobs.h's entries, before temperature and
 * top_p): the answer has them all as "logprobs": [...], and each delta
 * those of the tokens it completes ({"delta": TEXT, "logprobs": [...]}; a
 * token whose text ends inside a character goes with the next delta).
 * With "prompt_logprobs" too, the answer has the same entries of the
 * prompt's own tokens as "prompt_logprobs": [...], each one's
 * log-probability after the tokens before it (a start token the model puts
 * before a text prompt has no entry; a first token with nothing before it
 * has "logprob": null and no top), computed by the prefill.
 *
 * "prompt_ids" is a prompt already in the model's token ids (integers from
 * 0 to its vocabulary's size - 1; anything else is "invalid_prompt", with
 * "message"), taken
 * as it is: no start token is added. Its answer has "prompt_text", the
 * ids' text with special tokens spelt out, and its prompt_logprobs have an
 * entry for every id.
 *
 * Streamed, what the answer says of its prompt ("prompt_text",
 * "prompt_logprobs") comes first, on a line of its own holding only those
 * keys, before the first delta.
 *
 * A request {"stats": true} is answered with one line of the engine's
 * state: {"models", "model_bytes", "loaded" ([{"dir", "adapter",
 * "four_bit", "bytes"}...], most recently loaded first), "running", "waiting",
 * "tokens_in_flight", "tokens_generated", "steps", "prefill_passes" and
 * "decode_passes" (the passes over the weights for prompts' rows and for
 * one-token rows: batcher_passes), "cancelled"} (requests whose client
 * closed its end before their answer).
 *
 * Each turn of the loop takes every connection waiting and the request
 * line each has sent, then admits what fits and makes one step: the
 * requests that are there when a step starts join it together, their
 * prompts prefilled in one pass over the weights.
 *
 * On a cluster node (`--listen HOST:PORT`, started by `alallo serving
 * run`: docs/serving.md, "On a cluster") the engine listens on TCP, and
 * every request, stats included, must carry "key": the serving job's
 * token; one without it, or with another, is answered {"error":
 * "forbidden"}. A connection that has not sent its line within
 * ENGINE_READ_TIMEOUT_MS is closed. The stats then also say
 * "model_memory" (the bytes the engine may keep loaded), as they always
 * do.
 */
#ifndef ALALLO_SERVE_ENGINE_H
#define ALALLO_SERVE_ENGINE_H

#include <stddef.h>

#include "train/serve/admission.h"

#define ENGINE_READ_TIMEOUT_MS 10000 /* a TCP client's request line, at most */
#define ENGINE_KEY_MAX 128

struct engine_config {
    const char *socket_path;      /* a local socket; NULL when listen is set  */
    const char *listen;           /* "HOST:PORT" on TCP (PORT 0: any free one);
                                     NULL for the local socket               */
    const char *key;              /* with listen: what every request's "key"
                                     must be (required then)                 */
    const char *port_file;        /* with listen: the port bound, written
                                     there ("PORT\n") once listening; may be
                                     NULL                                     */
    size_t max_model_bytes;       /* models kept loaded (model_lru.h) */
    struct admission_limits limits;
};

/* Listens on cfg->socket_path (replacing a stale socket file), or on
 * cfg->listen, and serves until SIGTERM or SIGINT. 0 when stopped so; 1
 * when it could not start (the reason on stderr). */
int engine_run(const struct engine_config *cfg);

#endif
