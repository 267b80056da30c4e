/* res_chat.c - POST /v1/chat/completions (OpenAI shape): the next assistant
 * turn of a conversation from a base or fine-tuned model, laid out by the
 * model's chat template (control_generate with a chat, a child process).
 *
 * `tools` go to the template; an answer that holds tool calls in the
 * model family's form (core/tool_calls.h) is returned as `tool_calls` with
 * finish_reason "tool_calls". With "stream": true the answer is sent as
 * server-sent events of chat.completion.chunk objects ending in
 * `data: [DONE]`; the events are written when the generation has ended
 * (docs/api.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/handlers.h"
#include "api/jsonw.h"
#include "control/models.h"
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
        buf->failed = true;
        return;
    }
    jsonw_raw(buf, "data: ", 6);
    jsonw_raw(buf, s, strlen(s));
    jsonw_raw(buf, "\n\n", 2);
    free(s);
}

static json_t *chunk(const char *id, json_int_t created, const char *model, json_t *delta,
                     const char *finish)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:n,s:o}]}", "id", id, "object",
                     "chat.completion.chunk", "created", created, "model", model, "choices",
                     "index", 0, "delta", delta, "logprobs", "finish_reason",
                     finish ? json_string(finish) : json_null());
}

static void stream_answer(struct http_response *res, const char *id, json_int_t created,
                          const char *model, json_t *message, const char *finish, json_t *usage,
                          bool include_usage)
{
    struct jsonw b = {0};
    event(&b, chunk(id, created, model, json_pack("{s:s,s:s}", "role", "assistant", "content", ""),
                    NULL));
    const char *text = json_string_value(json_object_get(message, "content"));
    /* the text in pieces of a word each, as a client shows them */
    for (size_t at = 0, n = text ? strlen(text) : 0; at < n;) {
        size_t end = at;
        while (end < n && text[end] == ' ')
            end++;
        while (end < n && text[end] != ' ')
            end++;
        json_t *piece = json_stringn(text + at, end - at);
        event(&b, chunk(id, created, model, json_pack("{s:o}", "content", piece), NULL));
        at = end;
    }
    json_t *calls = json_object_get(message, "tool_calls");
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *d = json_pack("{s:[{s:i,s:O,s:O,s:O}]}", "tool_calls", "index", (int)i, "id",
                              json_object_get(c, "id"), "type", json_object_get(c, "type"),
                              "function", json_object_get(c, "function"));
        event(&b, chunk(id, created, model, d, NULL));
    }
    event(&b, chunk(id, created, model, json_object(), finish));
    if (include_usage)
        event(&b, json_pack("{s:s,s:s,s:I,s:s,s:[],s:O}", "id", id, "object",
                            "chat.completion.chunk", "created", created, "model", model,
                            "choices", "usage", usage));
    jsonw_raw(&b, "data: [DONE]\n\n", 14);
    if (b.failed)
        api_error(res, ERR_NOMEM, NULL, NULL);
    else
        http_respond(res, 200, "text/event-stream", b.p ? b.p : "", b.len);
    jsonw_free(&b);
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
    json_t *msgs = NULL, *chat = NULL;
    char *chat_text = NULL;
    bool ok = !model ? bad(res, "model", "model is required.")
              : tools && !json_is_null(tools) && !json_is_array(tools)
                  ? bad(res, "tools", "tools must be an array.")
              : n && !json_is_null(n) && !(json_is_integer(n) && json_integer_value(n) == 1)
                  ? bad(res, "n", "n must be 1.")
              : stream && !json_is_null(stream) && !json_is_boolean(stream)
                  ? bad(res, "stream", "stream must be true or false.")
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
        if (json_is_true(stream)) {
            json_t *so = json_object_get(body, "stream_options");
            stream_answer(res, id, created, model, message, finish, usage,
                          json_is_true(json_object_get(so, "include_usage")));
            json_decref(message);
        } else {
            api_json(res, 200,
                     json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:n,s:s}],s:O}", "id", id, "object",
                               "chat.completion", "created", created, "model", model, "choices",
                               "index", 0, "message", message, "logprobs", "finish_reason",
                               finish, "usage", usage));
        }
        json_decref(usage);
        json_decref(out);
    }
    free(chat_text);
    json_decref(chat);
    json_decref(msgs);
    json_decref(body);
}
