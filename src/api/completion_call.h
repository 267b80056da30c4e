/* completion_call.h - one generation for a completions request, shared by
 * /v1/completions and /v1/chat/completions (plain and streamed,
 * live_stream.h): the model's name resolved for the caller's account, then
 * control_generate (the resident inference engine, or a child process).
 * The engine queues each account's requests itself and answers a full
 * queue with 429 and a crash with 503, both with Retry-After
 * (docs/serving.md). With a child per request, at most cfg.max_completions
 * run at once, shared fairly between accounts (fair_share.h): a call waits
 * up to cfg.slot_wait_ms for its turn, then gets 429.
 */
#ifndef ALALLO_API_COMPLETION_CALL_H
#define ALALLO_API_COMPLETION_CALL_H

#include <jansson.h>
#include <stdbool.h>

#include "api/http.h"

struct api_server;
struct control_generation;

/* One generation from `model` (NULL with res set; else the generator's
 * object, the caller's). input_param names the request field a user
 * mistake is about ("prompt", "messages"). */
json_t *completion_generate(struct api_server *srv, struct http_request *req, const char *model,
                            const struct control_generation *g, const char *input_param,
                            struct http_response *res);

/* The most generations one request may ask for (prompts times n). */
#define COMPLETION_CHOICES_MAX 32

/* Generations gs[0..n) from `model` side by side (a thread each; the
 * engine batches them), for the resident engine only: true with outs[i]
 * the generator's object of gs[i] (the caller's), or false with res set
 * from the first that failed (about[i], when about is not NULL, names it
 * before the sentence) and every object freed. The first failure, or the
 * client leaving (req->client_fd hung up), cancels the others in the
 * engine at once; gs' watch_fd is not used. */
bool completion_generate_many(struct api_server *srv, struct http_request *req, const char *model,
                              const struct control_generation *gs, int n,
                              const char *const *about, const char *input_param, json_t **outs,
                              struct http_response *res);

#endif
