/* inference.h - the resident inference engine beside `serve`
 * (`alallo inference`, train/serve/engine.h; docs/serving.md): a
 * supervisor thread that starts it, and starts it again whenever it ends
 * (a crash, a kill), and the client that hands it one generation over its
 * local socket.
 *
 * A crash of the engine never takes the server down: the requests it was
 * answering end with ERR_UNAVAILABLE ("restarting", a 503 with
 * Retry-After), and the next ones wait up to INFERENCE_CONNECT_WAIT_MS for
 * the new engine to listen.
 *
 * A shutdown is not a crash: once serve announces it (inference_stopping)
 * an engine that ends is logged as stopped and not started again; an
 * engine that ended of a stop signal (a service manager signalling serve
 * and the engine together) waits INFERENCE_STOP_GRACE_MS for that
 * announcement before it is restarted. A crash (any other end) is logged
 * as one and restarted.
 *
 * Ownership: inference_start returns a handle inference_stop ends (the
 * engine is stopped with SIGTERM and waited for). Thread-safe: any number
 * of threads may call inference_generate at once.
 */
#ifndef ALALLO_CONTROL_INFERENCE_H
#define ALALLO_CONTROL_INFERENCE_H

#include <jansson.h>
#include <stddef.h>

#include "core/err.h"

#define INFERENCE_CONNECT_WAIT_MS 5000
#define INFERENCE_RETRY_AFTER_S 1
#define INFERENCE_STOP_GRACE_MS 3000

/* What the operator sets (serve's --inference-* options). */
struct inference_config {
    long long model_memory;     /* bytes of models kept loaded */
    int max_running;            /* sequences batched at once */
    long long max_tokens;       /* prompt + max_tokens of those */
    int max_queued;             /* waiting requests per account */
    int threads;                /* 0: the engine's own default (every CPU) */
};

struct inference;
struct serving_registry;

/* Starts the engine as `bin inference --socket PATH ...` with its socket in
 * data_dir (or the temporary folder when that path is too long for a
 * socket), and its supervisor. NULL when the thread cannot start. */
struct inference *inference_start(const char *bin, const char *data_dir,
                                  const struct inference_config *cfg);
void inference_stop(struct inference *inf); /* NULL is fine */

/* No engine beside serve: each generation goes to one of the engines on
 * the cluster's nodes that `registry` knows (serving jobs of an engine's
 * pool, control/engine.h; docs/serving.md, "On a cluster"), over TCP,
 * with that engine's key, and with the model paths as the nodes see them
 * (map_from / map_to: serve's --cluster-data, "" for none). Waits up to
 * INFERENCE_CONNECT_WAIT_MS for one to be known; none is ERR_UNAVAILABLE
 * as a restarting engine is. The registry stays the caller's. NULL when
 * out of memory. */
struct inference *inference_remote(struct serving_registry *registry, const char *map_from,
                                   const char *map_to);

/* Serve is shutting down: from now on the engine is not started again when
 * it ends (it goes on answering until inference_stop). NULL is fine. */
void inference_stopping(struct inference *inf);

/* How many times the engine was started (1 after inference_start; more
 * after restarts), for tests and /metrics. */
long inference_starts(const struct inference *inf);

/* One generation request (engine.h's line) written and its answer read,
 * for at most timeout_s seconds; on_delta gets each {"delta"} piece (and
 * its "logprobs", or NULL), and a streamed answer's prompt line
 * ({"prompt_text", "prompt_logprobs"}, engine.h) as piece NULL with that
 * object.
 * ERR_OK with *out the final object: the answer or one of the engine's
 * errors ({"error": CODE, ...}) for the caller to read. ERR_UNAVAILABLE
 * with a sentence in why when the engine is restarting or went away
 * mid-answer, the time ran out, or watch_fd (when > 0, a socket of the
 * caller's client) hung up: the request is then cancelled in the engine at
 * once (its connection closed, engine.h). */
enum alallo_err inference_call(struct inference *inf, const json_t *request, int timeout_s,
                               int watch_fd,
                               void (*on_delta)(void *ctx, const char *piece, size_t len,
                                                const json_t *logprobs),
                               void *ctx, json_t **out /* OUT */, char *why, size_t whycap);

/* The engine's state now (engine.h's {"stats": true} answer: models,
 * model_bytes, running, waiting, tokens_in_flight, tokens_generated,
 * steps), into *out (the caller's), without waiting for an engine that is
 * restarting: ERR_UNAVAILABLE then. With engines on nodes, their last
 * reports summed, with "engines": how many answer. For /metrics. */
enum alallo_err inference_stats(struct inference *inf, json_t **out /* OUT */);

#endif
