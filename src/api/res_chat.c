/* res_chat.c - POST /v1/chat/completions (OpenAI shape): the next assistant
 * turn of a conversation from a base or fine-tuned model, laid out by the
 * model's chat template (control_generate with a chat: the inference engine,
 * or a child process).
 *
 * `tools` go to the template; an answer that holds tool calls in the
 * model family's form (core/tool_calls.h) is returned as `tool_calls` with
 * finish_reason "tool_calls". With "stream": true the answer is sent as
 * server-sent events of chat.completion.chunk objects ending in
 * `data: [DONE]`, each piece of text sent as the generator produces it
 * (struct live below; docs/api.md). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/handlers.h"
#include "api/jsonw.h"
#include "control/generation.h"
#include "core/clock.h"
#include "core/ids.h"
#include "core/text.h"
#include "core/tool_calls.h"

#define CHAT_MAX (64 * 1024) /* bytes of messages and tools handed to the generator */
#define MESSAGES_MAX 1024

static bool bad(struct http_response *res, const char *param, const char *msg)
{
    api_error(res, ERR_INVALID, msg, param);
    return false;
}

/* A message's content as text: a string, null, or an array of parts of
 * which the "text" ones are joined. NULL when it is none of these. */
static json_t *content_text(json_t *c)
{
    if (!c || json_is_null(c))
        return json_null();
    if (json_is_string(c))
        return json_incref(c);
    if (!json_is_array(c))
        return NULL;
    size_t n = 0, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!type || strcmp(type, "text") != 0 || !json_is_string(json_object_get(part, "text")))
            return NULL;
        n += json_string_length(json_object_get(part, "text"));
    }
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    size_t at = 0;
    json_array_foreach(c, i, part) {
        json_t *t = json_object_get(part, "text");
        memcpy(s + at, json_string_value(t), json_string_length(t));
        at += json_string_length(t);
    }
    json_t *v = json_stringn(s, at);
    free(s);
    return v;
}

/* The request's messages as the generator takes them: roles system, user,
 * assistant, tool ("developer" is the system); content as text. */
static json_t *clean_messages(json_t *msgs, struct http_response *res)
{
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        bad(res, "messages", "messages must be a non-empty array.");
        return NULL;
    }
    if (json_array_size(msgs) > MESSAGES_MAX) {
        bad(res, "messages", "messages has more than 1024 items.");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *m;
    char msg[200];
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        static const char *const roles[] = {"system", "user", "assistant", "tool", "developer"};
        int known = 0;
        for (size_t k = 0; role && k < sizeof roles / sizeof *roles; k++)
            known |= strcmp(role, roles[k]) == 0;
        json_t *content = json_is_object(m) ? content_text(json_object_get(m, "content")) : NULL;
        json_t *calls = json_object_get(m, "tool_calls");
        if (!json_is_object(m) || !known) {
            text_printf(msg, sizeof msg, "messages[%zu].role must be system, user, assistant, "
                                         "tool or developer.", i);
        } else if (!content) {
            text_printf(msg, sizeof msg, "messages[%zu].content must be a string or an array "
                                         "of text parts.", i);
        } else if (json_is_null(content) && !(strcmp(role, "assistant") == 0 && calls)) {
            text_printf(msg, sizeof msg, "messages[%zu].content is required.", i);
        } else if (calls && !json_is_array(calls)) {
            text_printf(msg, sizeof msg, "messages[%zu].tool_calls must be an array.", i);
        } else {
            json_t *c = json_pack("{s:s,s:o}", "role",
                                  strcmp(role, "developer") == 0 ? "system" : role, "content",
                                  json_is_null(content) ? json_string("") : content);
            if (json_is_null(content))
                json_decref(content);
            if (calls)
                json_object_set(c, "tool_calls", calls);
            json_t *id = json_object_get(m, "tool_call_id");
            if (json_is_string(id))
                json_object_set(c, "tool_call_id", id);
            json_array_append_new(out, c);
            continue;
        }
        json_decref(content);
        json_decref(out);
        bad(res, "messages", msg);
        return NULL;
    }
    return out;
}

/* The assistant message of the answer: content, and tool_calls when the
 * request had tools and the text holds calls. Sets *finish. */
static json_t *answer_message(const char *text, bool tools, const char *id, const char **finish)
{
    json_t *content = NULL;
    json_t *calls = tools ? tool_calls_parse(text, id + 9 /* after "chatcmpl-" */, &content) : NULL;
    if (!calls)
        return json_pack("{s:s,s:s}", "role", "assistant", "content", text);
    *finish = "tool_calls";
    json_t *m = json_pack("{s:s,s:o,s:o}", "role", "assistant", "content",
                          content ? content : json_null(), "tool_calls", calls);
    return m;
}

/* One SSE event "data: JSON\n\n" appended to buf. */
static void event(struct jsonw *buf, json_t *chunk)
{
    char *s = chunk ? json_dumps(chunk, JSON_COMPACT) : NULL;
    json_decref(chunk);
    if (!s) {
        buf->b.err = GROWBUF_NO_MEMORY; /* the chunk could not be written */
        return;
    }
    jsonw_raw(buf, "data: ", 6);
    jsonw_raw(buf, s, strlen(s));
    jsonw_raw(buf, "\n\n", 2);
    free(s);
}

/* A choice's logprobs: {"content": entries} (entries taken over), or
 * null when there are none. */
static json_t *logprobs_of(json_t *entries)
{
    return entries ? json_pack("{s:o,s:n}", "content", entries, "refusal") : json_null();
}

/* A chunk; `logprobs` (taken over, or NULL) are those of its tokens. */
static json_t *chunk(const char *id, json_int_t created, const char *model, json_t *delta,
                     const char *finish, json_t *logprobs)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o,s:o}]}", "id", id, "object",
                     "chat.completion.chunk", "created", created, "model", model, "choices",
                     "index", 0, "delta", delta, "logprobs", logprobs_of(logprobs),
                     "finish_reason", finish ? json_string(finish) : json_null());
}

/* The events that end a streamed answer: its tool calls (whole, one chunk
 * each), the finish reason (with `logprobs`, taken over, when not NULL:
 * those of tokens no content chunk carried), the usage when asked for, and
 * [DONE]. */
static void end_events(struct jsonw *b, const char *id, json_int_t created, const char *model,
                       json_t *message, const char *finish, json_t *logprobs, json_t *usage,
                       bool include_usage)
{
    json_t *calls = json_object_get(message, "tool_calls");
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *d = json_pack("{s:[{s:i,s:O,s:O,s:O}]}", "tool_calls", "index", (int)i, "id",
                              json_object_get(c, "id"), "type", json_object_get(c, "type"),
                              "function", json_object_get(c, "function"));
        event(b, chunk(id, created, model, d, NULL, NULL));
    }
    event(b, chunk(id, created, model, json_object(), finish, logprobs));
    if (include_usage)
        event(b, json_pack("{s:s,s:s,s:I,s:s,s:[],s:O}", "id", id, "object",
                           "chat.completion.chunk", "created", created, "model", model,
                           "choices", "usage", usage));
    jsonw_raw(b, "data: [DONE]\n\n", 14);
}

/* A streamed answer. The generation runs in a thread of its own and
 * appends each piece of text, as the generator produces it, to `buf` as a
 * chunk event; the connection's thread (live_read) sends the events on as
 * they come. With tools in the request the text is sent until a character
 * that may start a tool call ('<', '[', '{'); the rest waits for the end,
 * where the whole answer is parsed and its calls (or the held text) sent.
 * Shared by the two threads; whichever lets go last frees it. */
struct live {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    bool started;             /* the first piece came: the answer is 200 */
    bool done;                /* the generation has ended                 */
    struct jsonw buf;         /* events, buf.b.p[sent..] not yet sent     */
    size_t sent;
    struct http_response err; /* the error, when it failed before a piece */
    struct api_server *srv;
    struct http_request req;  /* the caller's account; the body is not used */
    struct control_generation g;
    char *chat_text, *model;
    char id[IDS_MAX];
    json_int_t created;
    bool tools, include_usage;
    bool holding;             /* tools: a piece may have begun a call      */
    size_t text_sent;         /* bytes of the text sent as content         */
    json_t *lp_pending;       /* logprobs: entries no chunk carried yet    */
    size_t lp_got;            /* entries the pieces brought                */
};

static void live_release(void *ctx)
{
    struct live *l = ctx;
    pthread_mutex_lock(&l->mu);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->mu);
    if (!last)
        return;
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    jsonw_free(&l->buf);
    json_decref(l->lp_pending);
    http_response_free(&l->err);
    free(l->chat_text);
    free(l->model);
    free(l);
}

/* The entries no chunk carried yet, taken (NULL when none, or without
 * logprobs); the next ones gather anew. */
static json_t *take_pending(struct live *l)
{
    json_t *p = l->lp_pending;
    if (!p || json_array_size(p) == 0)
        return NULL;
    l->lp_pending = json_array();
    return p;
}

static void content_event(struct live *l, const char *piece, size_t len)
{
    if (len == 0)
        return;
    event(&l->buf, chunk(l->id, l->created, l->model,
                         json_pack("{s:s%}", "content", piece, len), NULL, take_pending(l)));
    l->text_sent += len;
}

static void live_piece(void *ctx, const char *piece, size_t len, const json_t *logprobs)
{
    struct live *l = ctx;
    pthread_mutex_lock(&l->mu);
    if (l->lp_pending && json_is_array(logprobs)) {
        json_array_extend(l->lp_pending, (json_t *)logprobs);
        l->lp_got += json_array_size(logprobs);
    }
    if (!l->holding) {
        size_t n = l->tools ? strcspn(piece, "<[{") : len;
        if (n > len)
            n = len;
        content_event(l, piece, n);
        l->holding = n < len;
    }
    l->started = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* The end of a generation that succeeded: what was held, the calls, the
 * finish reason and the usage. Under l->mu. */
static void live_finish(struct live *l, json_t *out)
{
    const char *text = json_string_value(json_object_get(out, "text"));
    const char *finish = json_string_value(json_object_get(out, "finish_reason"));
    json_int_t pt = json_integer_value(json_object_get(out, "prompt_tokens"));
    json_int_t ct = json_integer_value(json_object_get(out, "completion_tokens"));
    if (!text)
        text = "";
    if (!finish)
        finish = "length";
    json_t *message = answer_message(text, l->tools, l->id, &finish);
    json_t *all = json_object_get(out, "logprobs");
    for (size_t i = l->lp_got; l->lp_pending && i < json_array_size(all); i++)
        json_array_append(l->lp_pending, json_array_get(all, i)); /* no piece brought them */
    size_t tn = strlen(text), sent = l->text_sent <= tn ? l->text_sent : tn;
    if (json_object_get(message, "tool_calls")) {
        /* the content is the text outside the calls, trimmed: send what
         * of it follows the part already sent */
        const char *c = json_string_value(json_object_get(message, "content"));
        size_t lead = strspn(text, " \t\r\n"), done = sent > lead ? sent - lead : 0;
        if (c && strlen(c) > done && strncmp(c, text + lead, done) == 0)
            content_event(l, c + done, strlen(c) - done);
    } else {
        content_event(l, text + sent, tn - sent);
    }
    json_t *usage = json_pack("{s:I,s:I,s:I}", "prompt_tokens", pt, "completion_tokens", ct,
                              "total_tokens", pt + ct);
    end_events(&l->buf, l->id, l->created, l->model, message, finish, take_pending(l), usage,
               l->include_usage);
    json_decref(usage);
    json_decref(message);
}

static void *live_run(void *ctx)
{
    struct live *l = ctx;
    json_t *out = completion_generate(l->srv, &l->req, l->model, &l->g, "messages", &l->err);
    if (l->g.watch_fd > 0) /* the generation is over: nothing to watch */
        close(l->g.watch_fd);
    pthread_mutex_lock(&l->mu);
    if (out) { /* an empty answer starts here; a failure after the first
                  piece ends the stream without [DONE] */
        l->started = true;
        live_finish(l, out);
    }
    l->done = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    json_decref(out);
    live_release(l);
    return NULL;
}

/* http_stream_fn: the events as they come; -1 at the end. */
static ssize_t live_read(void *ctx, char *buf, size_t max)
{
    struct live *l = ctx;
    pthread_mutex_lock(&l->mu);
    while (l->sent == l->buf.b.len && !l->done && !l->buf.b.err)
        pthread_cond_wait(&l->cv, &l->mu);
    ssize_t n = -1;
    if (l->buf.b.err) {
        n = -2;
    } else if (l->sent < l->buf.b.len) {
        size_t k = l->buf.b.len - l->sent < max ? l->buf.b.len - l->sent : max;
        memcpy(buf, l->buf.b.p + l->sent, k);
        l->sent += k;
        n = (ssize_t)k;
    }
    pthread_mutex_unlock(&l->mu);
    return n;
}

/* Starts the streamed answer: waits for the first piece or the end, so
 * that a request the generator refuses still gets its error status. */
static void live_start(struct api_server *srv, struct http_request *req,
                       struct http_response *res, const char *model,
                       const struct control_generation *g, const char *chat_text, bool tools,
                       bool include_usage)
{
    struct live *l = calloc(1, sizeof *l);
    if (!l || !(l->chat_text = strdup(chat_text)) || !(l->model = strdup(model))) {
        if (l) {
            free(l->chat_text);
            free(l);
        }
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->refs = 2;
    l->srv = srv;
    l->req = *req;
    l->req.body = NULL;
    l->req.body_len = 0;
    l->g = *g;
    l->g.chat = l->chat_text;
    l->g.on_delta = live_piece;
    l->g.on_delta_ctx = l;
    /* The generation's thread watches its own copy of the client's
     * socket: the connection's thread may close the original while the
     * generation still runs (the client gone, its events not read). */
    l->g.watch_fd = g->watch_fd > 0 ? fcntl(g->watch_fd, F_DUPFD_CLOEXEC, 3) : 0;
    l->req.client_fd = 0;
    l->tools = tools;
    l->include_usage = include_usage;
    l->lp_pending = g->logprobs ? json_array() : NULL;
    ids_make(l->id, sizeof l->id, "chatcmpl-");
    l->created = (json_int_t)(clock_now_ms() / 1000);
    event(&l->buf, chunk(l->id, l->created, l->model,
                         json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL,
                         NULL));
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, live_run, l) != 0) {
        pthread_attr_destroy(&attr);
        if (l->g.watch_fd > 0)
            close(l->g.watch_fd);
        l->refs = 1;
        live_release(l);
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    pthread_attr_destroy(&attr);
    pthread_mutex_lock(&l->mu);
    while (!l->started && !l->done)
        pthread_cond_wait(&l->cv, &l->mu);
    bool failed = !l->started;
    if (failed) { /* the error completion_generate wrote, handed over */
        http_response_free(res);
        *res = l->err;
        memset(&l->err, 0, sizeof l->err);
    }
    pthread_mutex_unlock(&l->mu);
    if (failed) {
        live_release(l);
        return;
    }
    http_response_free(res);
    res->status = 200;
    text_copy(res->content_type, sizeof res->content_type, "text/event-stream");
    res->stream = live_read;
    res->stream_ctx = l;
    res->stream_free = live_release;
}

void chat_completions_create(struct api_server *srv, struct http_request *req,
                             struct http_response *res)
{
    json_t *body = api_body_object(req, res);
    if (!body)
        return;
    struct control_generation g = {0};
    const char *model = json_string_value(json_object_get(body, "model"));
    json_t *tools = json_object_get(body, "tools");
    json_t *n = json_object_get(body, "n");
    json_t *stream = json_object_get(body, "stream");
    json_t *lp = json_object_get(body, "logprobs"), *top = json_object_get(body, "top_logprobs");
    bool has_top = top && !json_is_null(top);
    json_t *msgs = NULL, *chat = NULL;
    char *chat_text = NULL;
    bool ok = !model ? bad(res, "model", "model is required.")
              : tools && !json_is_null(tools) && !json_is_array(tools)
                  ? bad(res, "tools", "tools must be an array.")
              : n && !json_is_null(n) && !(json_is_integer(n) && json_integer_value(n) == 1)
                  ? bad(res, "n", "n must be 1.")
              : stream && !json_is_null(stream) && !json_is_boolean(stream)
                  ? bad(res, "stream", "stream must be true or false.")
              : lp && !json_is_null(lp) && !json_is_boolean(lp)
                  ? bad(res, "logprobs", "logprobs must be true or false.")
              : has_top && !(json_is_integer(top) && json_integer_value(top) >= 0 &&
                             json_integer_value(top) <= 20)
                  ? bad(res, "top_logprobs", "top_logprobs must be an integer from 0 to 20.")
              : has_top && !json_is_true(lp)
                  ? bad(res, "top_logprobs", "top_logprobs needs logprobs set to true.")
              : json_is_true(lp) && !srv->ctl->inference
                  ? bad(res, "logprobs", "logprobs are served by the resident inference engine "
                                         "only; this server answers with a process per request "
                                         "(serve --inference child).")
                  : completion_sampling_parse(body, &g, res);
    if (ok)
        ok = (msgs = clean_messages(json_object_get(body, "messages"), res)) != NULL;
    const char *choice = json_string_value(json_object_get(body, "tool_choice"));
    bool use_tools = json_is_array(tools) && json_array_size(tools) > 0 &&
                     !(choice && strcmp(choice, "none") == 0);
    if (ok) {
        chat = json_pack("{s:O}", "messages", msgs);
        if (use_tools)
            json_object_set(chat, "tools", tools);
        chat_text = json_dumps(chat, JSON_COMPACT);
        if (!chat_text || strlen(chat_text) > CHAT_MAX)
            ok = bad(res, "messages", "messages and tools are too long (at most 65536 bytes).");
    }
    g.chat = chat_text;
    g.logprobs = json_is_true(lp);
    g.top_logprobs = has_top ? (int)json_integer_value(top) : 0;
    g.watch_fd = req->client_fd; /* the client gone cancels the generation */
    if (ok && json_is_true(stream)) {
        json_t *so = json_object_get(body, "stream_options");
        live_start(srv, req, res, model, &g, chat_text, use_tools,
                   json_is_true(json_object_get(so, "include_usage")));
        ok = false; /* answered */
    }
    json_t *out = ok ? completion_generate(srv, req, model, &g, "messages", res) : NULL;
    if (out) {
        char id[IDS_MAX];
        ids_make(id, sizeof id, "chatcmpl-");
        json_int_t created = (json_int_t)(clock_now_ms() / 1000);
        json_int_t pt = json_integer_value(json_object_get(out, "prompt_tokens"));
        json_int_t ct = json_integer_value(json_object_get(out, "completion_tokens"));
        const char *text = json_string_value(json_object_get(out, "text"));
        const char *finish = json_string_value(json_object_get(out, "finish_reason"));
        if (!finish)
            finish = "length";
        json_t *message = answer_message(text ? text : "", use_tools, id, &finish);
        json_t *usage = json_pack("{s:I,s:I,s:I}", "prompt_tokens", pt, "completion_tokens", ct,
                                  "total_tokens", pt + ct);
        json_t *entries = json_object_get(out, "logprobs");
        json_t *lps = g.logprobs ? logprobs_of(entries ? json_incref(entries) : json_array())
                                 : json_null();
        api_json(res, 200,
                 json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o,s:s}],s:O}", "id", id, "object",
                           "chat.completion", "created", created, "model", model, "choices",
                           "index", 0, "message", message, "logprobs", lps, "finish_reason",
                           finish, "usage", usage));
        json_decref(usage);
        json_decref(out);
    }
    free(chat_text);
    json_decref(chat);
    json_decref(msgs);
    json_decref(body);
}
