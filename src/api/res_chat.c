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
 * (live_stream.h; docs/api.md). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/completion_call.h"
#include "api/handlers.h"
#include "api/live_stream.h"
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

/* A choice's logprobs: {"content": entries} (entries taken over), or
 * null when there are none. */
static json_t *logprobs_of(json_t *entries)
{
    return entries ? json_pack("{s:o,s:n}", "content", entries, "refusal") : json_null();
}

/* A streamed answer's chunks (live_stream.h's format), one instance a
 * choice: each piece of text as a chunk as it comes. With tools in the
 * request the text is sent until a character that may start a tool call
 * ('<', '[', '{'); the rest waits for the end, where the whole answer is
 * parsed and its calls (or the held text) sent. */
struct chat_stream {
    char id[IDS_MAX];
    char stem[IDS_MAX + 16]; /* its tool calls' ids: the id, and the index after the first */
    int index;
    json_int_t created;
    char *model;
    bool tools, include_usage;
    bool holding;       /* tools: a piece may have begun a call      */
    size_t text_sent;   /* bytes of the text sent as content         */
    struct live_logprobs lp;
};

/* A chunk of c's choice; `logprobs` (taken over, or NULL) are those of its
 * tokens. */
static json_t *chunk(const struct chat_stream *c, json_t *delta, const char *finish,
                     json_t *logprobs)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o,s:o}]}", "id", c->id, "object",
                     "chat.completion.chunk", "created", c->created, "model", c->model,
                     "choices", "index", c->index, "delta", delta, "logprobs",
                     logprobs_of(logprobs), "finish_reason",
                     finish ? json_string(finish) : json_null());
}

/* The events that end a streamed choice: its tool calls (whole, one chunk
 * each) and the finish reason (with `logprobs`, taken over, when not NULL:
 * those of tokens no content chunk carried). */
static void end_events(const struct chat_stream *s, struct jsonw *b, json_t *message,
                       const char *finish, json_t *logprobs)
{
    json_t *calls = json_object_get(message, "tool_calls");
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *d = json_pack("{s:[{s:i,s:O,s:O,s:O}]}", "tool_calls", "index", (int)i, "id",
                              json_object_get(c, "id"), "type", json_object_get(c, "type"),
                              "function", json_object_get(c, "function"));
        live_event(b, chunk(s, d, NULL, NULL));
    }
    live_event(b, chunk(s, json_object(), finish, logprobs));
}

static void chat_stream_free(void *fmt)
{
    struct chat_stream *c = fmt;
    json_decref(c->lp.pending);
    free(c->model);
    free(c);
}

static void content_event(struct chat_stream *c, struct jsonw *buf, const char *piece,
                          size_t len)
{
    if (len == 0)
        return;
    live_event(buf, chunk(c, json_pack("{s:s%}", "content", piece, len), NULL,
                          live_logprobs_take(&c->lp)));
    c->text_sent += len;
}

static void chat_begin(void *fmt, struct jsonw *buf)
{
    struct chat_stream *c = fmt;
    live_event(buf,
               chunk(c, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL, NULL));
}

static void chat_piece(void *fmt, struct jsonw *buf, const char *piece, size_t len,
                       const json_t *logprobs)
{
    struct chat_stream *c = fmt;
    live_logprobs_add(&c->lp, logprobs);
    if (!c->holding) {
        size_t n = c->tools ? strcspn(piece, "<[{") : len;
        if (n > len)
            n = len;
        content_event(c, buf, piece, n);
        c->holding = n < len;
    }
}

/* The end of a choice's generation that succeeded: what was held, the
 * calls and the finish reason. */
static void chat_finish(void *fmt, struct jsonw *buf, json_t *out)
{
    struct chat_stream *c = fmt;
    const char *text = json_string_value(json_object_get(out, "text"));
    const char *finish = json_string_value(json_object_get(out, "finish_reason"));
    if (!text)
        text = "";
    if (!finish)
        finish = "length";
    json_t *message = answer_message(text, c->tools, c->stem, &finish);
    live_logprobs_rest(&c->lp, out);
    size_t tn = strlen(text), sent = c->text_sent <= tn ? c->text_sent : tn;
    if (json_object_get(message, "tool_calls")) {
        /* the content is the text outside the calls, trimmed: send what
         * of it follows the part already sent */
        const char *content = json_string_value(json_object_get(message, "content"));
        size_t lead = strspn(text, " \t\r\n"), done = sent > lead ? sent - lead : 0;
        if (content && strlen(content) > done && strncmp(content, text + lead, done) == 0)
            content_event(c, buf, content + done, strlen(content) - done);
    } else {
        content_event(c, buf, text + sent, tn - sent);
    }
    end_events(c, buf, message, finish, live_logprobs_take(&c->lp));
    json_decref(message);
}

/* Every choice ended: the usage when asked for (the conversation's tokens
 * once, as OpenAI counts them, and every answer's), and [DONE]. */
static void chat_end(void *const *fmts, int k, struct jsonw *buf, json_t *const *outs)
{
    const struct chat_stream *c = fmts[0];
    json_int_t pt = json_integer_value(json_object_get(outs[0], "prompt_tokens")), ct = 0;
    for (int i = 0; i < k; i++)
        ct += json_integer_value(json_object_get(outs[i], "completion_tokens"));
    if (c->include_usage)
        live_event(buf, json_pack("{s:s,s:s,s:I,s:s,s:[],s:{s:I,s:I,s:I}}", "id", c->id,
                                  "object", "chat.completion.chunk", "created", c->created,
                                  "model", c->model, "choices", "usage", "prompt_tokens", pt,
                                  "completion_tokens", ct, "total_tokens", pt + ct));
    live_done(buf);
}

/* What a streamed chat's choices share. */
struct chat_make {
    const char *model;
    char id[IDS_MAX];
    json_int_t created;
    bool tools, include_usage;
};

/* Choice i's format: one id for all, each answer's tool calls ids of
 * their own, as without stream. */
static void *chat_make(const void *ctx, int i, const struct control_generation *g)
{
    const struct chat_make *m = ctx;
    struct chat_stream *c = calloc(1, sizeof *c);
    if (!c || !(c->model = strdup(m->model)) || (g->logprobs && !(c->lp.pending = json_array()))) {
        if (c)
            chat_stream_free(c);
        return NULL;
    }
    text_copy(c->id, sizeof c->id, m->id);
    text_printf(c->stem, sizeof c->stem, i ? "%s%d" : "%s", m->id, i);
    c->index = i;
    c->created = m->created;
    c->tools = m->tools;
    c->include_usage = m->include_usage;
    return c;
}

static const struct live_format chat_format = {chat_make, chat_begin, chat_piece,       chat_finish,
                                               chat_end,  chat_stream_free, NULL};

/* Starts the streamed answer of gs[0..k) (live_stream.h): a format each,
 * of one id. */
static void chat_stream_start(struct api_server *srv, struct http_request *req,
                              struct http_response *res, const char *model,
                              const struct control_generation *gs, int k, bool tools,
                              bool include_usage)
{
    struct chat_make m = {.model = model,
                          .created = (json_int_t)(clock_now_ms() / 1000),
                          .tools = tools,
                          .include_usage = include_usage};
    ids_make(m.id, sizeof m.id, "chatcmpl-");
    live_stream_start(srv, req, res, model, gs, k, NULL, "messages", &chat_format, &m);
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
              : n && !json_is_null(n) &&
                      !(json_is_integer(n) && json_integer_value(n) >= 1 &&
                        json_integer_value(n) <= COMPLETION_CHOICES_MAX)
                  ? bad(res, "n", "n must be an integer from 1 to 32.")
              : stream && !json_is_null(stream) && !json_is_boolean(stream)
                  ? bad(res, "stream", "stream must be true or false.")
              : lp && !json_is_null(lp) && !json_is_boolean(lp)
                  ? bad(res, "logprobs", "logprobs must be true or false.")
              : has_top && !(json_is_integer(top) && json_integer_value(top) >= 0 &&
                             json_integer_value(top) <= 20)
                  ? bad(res, "top_logprobs", "top_logprobs must be an integer from 0 to 20.")
              : has_top && !json_is_true(lp)
                  ? bad(res, "top_logprobs", "top_logprobs needs logprobs set to true.")
              : json_is_true(lp) && !completion_logprobs_served(srv, res)
                  ? false
                  : completion_sampling_parse(srv, body, &g, res);
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
    int count = json_is_integer(n) ? (int)json_integer_value(n) : 1;
    if (ok && count > 1 && !srv->ctl->inference)
        ok = bad(res, "n", "several answers a request (n above 1) are served by the resident "
                           "inference engine only; this server answers with a process per "
                           "request (serve --inference child).");
    /* the k-th answer samples from seed + k: n answers differ, and a seed
     * repeats them all */
    struct control_generation gs[COMPLETION_CHOICES_MAX];
    json_t *outs[COMPLETION_CHOICES_MAX];
    for (int i = 0; ok && i < count; i++) {
        gs[i] = g;
        gs[i].seed = (long long)(((unsigned long long)g.seed + (unsigned)i) & LLONG_MAX);
    }
    if (ok && json_is_true(stream)) {
        json_t *so = json_object_get(body, "stream_options");
        chat_stream_start(srv, req, res, model, gs, count, use_tools,
                          json_is_true(json_object_get(so, "include_usage")));
        ok = false; /* answered */
    }
    if (ok && count == 1)
        ok = (outs[0] = completion_generate(srv, req, model, &gs[0], "messages", res)) != NULL;
    else if (ok)
        ok = completion_generate_many(srv, req, model, gs, count, NULL, "messages", outs, res);
    if (ok) {
        char id[IDS_MAX];
        ids_make(id, sizeof id, "chatcmpl-");
        json_int_t created = (json_int_t)(clock_now_ms() / 1000);
        json_int_t pt = json_integer_value(json_object_get(outs[0], "prompt_tokens")), ct = 0;
        json_t *choices = json_array();
        for (int i = 0; i < count; i++) {
            json_t *out = outs[i];
            ct += json_integer_value(json_object_get(out, "completion_tokens"));
            const char *text = json_string_value(json_object_get(out, "text"));
            const char *finish = json_string_value(json_object_get(out, "finish_reason"));
            if (!finish)
                finish = "length";
            char stem[IDS_MAX + 16]; /* each answer's tool calls ids of their own */
            text_printf(stem, sizeof stem, i ? "%s%d" : "%s", id, i);
            json_t *message = answer_message(text ? text : "", use_tools, stem, &finish);
            json_t *entries = json_object_get(out, "logprobs");
            json_t *lps = g.logprobs ? logprobs_of(entries ? json_incref(entries) : json_array())
                                     : json_null();
            json_array_append_new(choices, json_pack("{s:i,s:o,s:o,s:s}", "index", i, "message",
                                                     message, "logprobs", lps, "finish_reason",
                                                     finish));
        }
        /* the conversation's tokens count once, as OpenAI counts them */
        json_t *usage = json_pack("{s:I,s:I,s:I}", "prompt_tokens", pt, "completion_tokens", ct,
                                  "total_tokens", pt + ct);
        if (choices && json_array_size(choices) == (size_t)count)
            api_json(res, 200,
                     json_pack("{s:s,s:s,s:I,s:s,s:O,s:O}", "id", id, "object",
                               "chat.completion", "created", created, "model", model, "choices",
                               choices, "usage", usage));
        else
            api_error(res, ERR_NOMEM, NULL, NULL);
        json_decref(choices);
        json_decref(usage);
        for (int i = 0; i < count; i++)
            json_decref(outs[i]);
    }
    free(chat_text);
    json_decref(chat);
    json_decref(msgs);
    json_decref(body);
}
