/* live_stream.h - a generation streamed as server-sent events, shared by
 * /v1/chat/completions and /v1/completions (res_chat.c, res_completions.c).
 *
 * The generation (completion_generate) runs in a thread of its own; each
 * piece of text it produces is handed, under the stream's lock, to the
 * endpoint's format, which appends the events it makes of it to a buffer;
 * the connection's thread sends the buffer on as it grows. The answer's
 * status waits for the first piece or the end, so that a request the
 * generator refuses still gets its own error status. A failure after the
 * first piece ends the stream without `data: [DONE]`.
 *
 * Ownership: live_stream_start copies what it keeps of the request and g
 * (prompt, chat, prompt_ids, model) and takes `fmt` over: f->free(fmt) is
 * called once, when both threads let go. The format's calls never run at
 * once.
 */
#ifndef ALALLO_API_LIVE_STREAM_H
#define ALALLO_API_LIVE_STREAM_H

#include <jansson.h>
#include <stddef.h>

#include "api/http.h"
#include "api/jsonw.h"

struct api_server;
struct control_generation;

struct live_format {
    /* The events before the first piece (may be NULL). */
    void (*begin)(void *fmt, struct jsonw *buf);
    /* A piece of the text; `logprobs` the entries of the tokens it
     * completes (control/generation.h), or NULL. */
    void (*piece)(void *fmt, struct jsonw *buf, const char *piece, size_t len,
                  const json_t *logprobs);
    /* The generation succeeded with `out` (borrowed): the last events, up
     * to and with `data: [DONE]`. */
    void (*finish)(void *fmt, struct jsonw *buf, json_t *out);
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

/* Answers `res` with the stream of generation g from `model`, or with the
 * error the generation failed with before its first piece. input_param as
 * completion_generate's. g->watch_fd, when > 0, is duplicated: the
 * generation's thread watches its own copy. */
void live_stream_start(struct api_server *srv, struct http_request *req,
                       struct http_response *res, const char *model,
                       const struct control_generation *g, const char *input_param,
                       const struct live_format *f, void *fmt);

#endif
