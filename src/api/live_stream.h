/* live_stream.h - generations streamed as server-sent events, shared by
 * /v1/chat/completions and /v1/completions (res_chat.c, res_completions.c):
 * one answer, or several (n above 1, a list of prompts) interleaved as
 * they come, each chunk naming its choice's index.
 *
 * The generations (completion_generate, or completion_generate_many side
 * by side) run in a thread of their own; each piece of text one produces
 * is handed, under the stream's lock, to its choice's format, which
 * appends the events it makes of it to a buffer; the connection's thread
 * sends the buffer on as it grows. The answer's status waits for the first
 * piece or the end, so that a request the generator refuses still gets its
 * own error status. A failure after the first piece ends the stream with
 * its error as one last event (`data: {"error": {...}}`, the body its
 * status would have carried) and without `data: [DONE]`; a failure of one
 * of several cancels the others,
 * and so does the client leaving.
 *
 * Ownership: live_stream_start copies what it keeps of the request and gs
 * (prompt, chat, prompt_ids, stop texts, model, about) and owns each
 * choice's format instance, made by f->make: f->free(fmt) is called once,
 * when both threads let go. The format's calls never run at once.
 */
#ifndef ALALLO_API_LIVE_STREAM_H
#define ALALLO_API_LIVE_STREAM_H

#include <jansson.h>
#include <stddef.h>

#include "api/http.h"
#include "api/jsonw.h"

struct api_server;
struct control_generation;

/* A format: one instance a choice (fmts[i] is choice i's, and writes its
 * chunks with index i). */
struct live_format {
    /* Choice i's instance for generation g, from the caller's ctx (what
     * the request's chunks share: its id, its options), or NULL when
     * memory ran out. */
    void *(*make)(const void *ctx, int i, const struct control_generation *g);
    /* The choice's events before its first piece (may be NULL). */
    void (*begin)(void *fmt, struct jsonw *buf);
    /* A piece of the choice's text; `logprobs` the entries of the tokens
     * it completes (control/generation.h), or NULL. */
    void (*piece)(void *fmt, struct jsonw *buf, const char *piece, size_t len,
                  const json_t *logprobs);
    /* The choice's generation succeeded with `out` (borrowed): its last
     * events (the finish reason). */
    void (*finish)(void *fmt, struct jsonw *buf, json_t *out);
    /* Every choice finished (outs[i] choice i's, borrowed): the stream's
     * last events, up to and with `data: [DONE]`; fmts are all k. */
    void (*end)(void *const *fmts, int k, struct jsonw *buf, json_t *const *outs);
    void (*free)(void *fmt);
    /* What the answer says of its prompt ({"prompt_text",
     * "prompt_logprobs"}: control/generation.h's prompt_ids and
     * prompt_logprobs), before the first piece; NULL when the format never
     * asks for it. */
    void (*prompt)(void *fmt, struct jsonw *buf, const json_t *prompt);
};

/* One SSE event "data: JSON\n\n" appended to buf (chunk taken over; NULL
 * marks buf as failed). */
void live_event(struct jsonw *buf, json_t *chunk);

/* The SSE end marker. */
void live_done(struct jsonw *buf);

/* The log-probability entries of a streamed answer that no chunk carried
 * yet (pending NULL: none were asked for; the format owns pending). */
struct live_logprobs {
    json_t *pending;
    size_t got; /* entries the pieces brought */
};

/* Adds the entries a piece brought (`logprobs`, borrowed, may be NULL). */
void live_logprobs_add(struct live_logprobs *lp, const json_t *logprobs);
/* Adds the entries of the whole answer `out` that no piece brought. */
void live_logprobs_rest(struct live_logprobs *lp, json_t *out);
/* The pending entries, taken (NULL when there are none); the next ones
 * gather anew. */
json_t *live_logprobs_take(struct live_logprobs *lp);

/* Answers `res` with the stream of generations gs[0..k) from `model` (1
 * <= k <= COMPLETION_CHOICES_MAX; k above 1 only with the resident
 * engine: completion_generate_many), or with the error the first that
 * failed failed with before any piece (about[i], when about is not NULL,
 * names it, as completion_generate_many's). input_param as
 * completion_generate's. gs[0].watch_fd, when > 0, is duplicated: the
 * generations' thread watches its own copy. Each choice's format is
 * f->make(make_ctx, i, &gs[i]) (make_ctx is only read during the call). */
void live_stream_start(struct api_server *srv, struct http_request *req,
                       struct http_response *res, const char *model,
                       const struct control_generation *gs, int k, const char *const *about,
                       const char *input_param, const struct live_format *f,
                       const void *make_ctx);

#endif
