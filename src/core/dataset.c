/* dataset.c - line-by-line validation of JSONL data sets (dataset.h).
 *
 * The API checks an upload with dataset_check_buffer and the trainer walks
 * the same code through dataset_each, so a bad line gets the same words at
 * upload and at training time. Every problem text here is listed in
 * docs/data.md; change both together.
 */
#include "core/dataset.h"
#include "core/growbuf.h"
#include "core/text.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BOM "\xEF\xBB\xBF" /* U+FEFF in UTF-8 */
#define MAX_TURNS 4096 /* messages in one example; a 1 MiB line allows no more anyway */

static const char *const role_names[] = {"system", "user", "assistant", "tool"};

const char *dataset_role_name(enum dataset_role r)
{
    return (unsigned)r <= DATASET_TOOL ? role_names[r] : "?";
}


static void problem(struct dataset_check *c, long line, const char *fmt, ...)
{
    c->bad_line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->problem, sizeof c->problem, fmt, ap);
    va_end(ap);
    text_one_line(c->problem);
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

/* What the checks of one line share: the line number, the turns being
 * filled, values that must live until the callback returns (`keep`), and
 * the ids of the tool calls seen so far in the example. */
struct line_ctx {
    long line;
    struct dataset_turn *turns;
    json_t *keep;
    json_t *call_ids;
    int parallel; /* 0 when the line says "parallel_tool_calls": false */
};

/* Checks one tool call of an assistant message and appends its plain-text
 * line to `text`. */
static int check_tool_call(json_t *tc, size_t k, size_t j, struct line_ctx *L, json_t *text,
                           struct dataset_check *c)
{
    long line = L->line;
    if (!json_is_object(tc)) {
        problem(c, line, "message %zu: tool call %zu is not an object", k, j);
        return -1;
    }
    json_t *id = json_object_get(tc, "id"), *type = json_object_get(tc, "type");
    json_t *fn = json_object_get(tc, "function");
    if (!json_is_string(id) || json_string_length(id) == 0) {
        problem(c, line, "message %zu: tool call %zu needs an \"id\" string", k, j);
        return -1;
    }
    if (type && !(json_is_string(type) && strcmp(json_string_value(type), "function") == 0)) {
        problem(c, line, "message %zu: tool call %zu: \"type\" must be \"function\"", k, j);
        return -1;
    }
    if (!json_is_object(fn)) {
        problem(c, line, "message %zu: tool call %zu needs a \"function\" object", k, j);
        return -1;
    }
    json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
    if (!json_is_string(name) || json_string_length(name) == 0) {
        problem(c, line, "message %zu: tool call %zu: function needs a \"name\" string", k, j);
        return -1;
    }
    if (!json_is_string(args)) {
        problem(c, line,
                "message %zu: tool call %zu: \"arguments\" must be a string of JSON (as OpenAI "
                "writes it)", k, j);
        return -1;
    }
    json_error_t je;
    json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), 0, &je);
    if (!json_is_object(parsed)) {
        json_decref(parsed);
        problem(c, line, "message %zu: tool call %zu: \"arguments\" is not a JSON object", k, j);
        return -1;
    }
    json_array_append(L->call_ids, id);
    char *compact = json_dumps(parsed, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(parsed);
    if (!compact) {
        problem(c, line, "out of memory");
        return -1;
    }
    const char *prev = json_string_value(text);
    size_t n = strlen(prev) + strlen(compact) + json_string_length(name) + 64;
    char *buf = malloc(n);
    if (buf)
        snprintf(buf, n, "%s%s<tool_call>{\"name\": \"%s\", \"arguments\": %s}</tool_call>", prev,
                 prev[0] ? "\n" : "", json_string_value(name), compact);
    free(compact);
    if (!buf || json_string_set(text, buf) < 0) {
        free(buf);
        problem(c, line, "out of memory");
        return -1;
    }
    free(buf);
    return 0;
}

/* An assistant message's "tool_calls"; its turn text becomes the content
 * followed by one line per call (dataset.h). */
static int check_tool_calls(json_t *m, json_t *calls, size_t k, struct line_ctx *L,
                            struct dataset_turn *turn, struct dataset_check *c)
{
    if (!json_is_array(calls) || json_array_size(calls) == 0) {
        problem(c, L->line, "message %zu: \"tool_calls\" must be a non-empty array", k);
        return -1;
    }
    if (!L->parallel && json_array_size(calls) > 1) {
        problem(c, L->line,
                "message %zu: %zu tool calls in one message, but \"parallel_tool_calls\" is false",
                k, json_array_size(calls));
        return -1;
    }
    json_t *content = json_object_get(m, "content");
    json_t *text = json_string(json_is_string(content) ? json_string_value(content) : "");
    if (!text || json_array_append_new(L->keep, text) < 0) {
        problem(c, L->line, "out of memory");
        return -1;
    }
    for (size_t j = 0; j < json_array_size(calls); j++)
        if (check_tool_call(json_array_get(calls, j), k, j + 1, L, text, c) < 0)
            return -1;
    turn->text = json_string_value(text);
    turn->len = json_string_length(text);
    return 0;
}

/* Checks one message of a chat example; fills *turn on success. */
static int check_message(json_t *m, size_t idx, struct line_ctx *L, struct dataset_turn *turn,
                         struct dataset_check *c)
{
    size_t k = idx + 1; /* people count messages from 1 */
    long line = L->line;
    if (!json_is_object(m)) {
        problem(c, line, "message %zu is not an object", k);
        return -1;
    }
    json_t *role = json_object_get(m, "role");
    json_t *content = json_object_get(m, "content");
    if (!role) {
        problem(c, line, "message %zu: missing field \"role\"", k);
        return -1;
    }
    if (!json_is_string(role)) {
        problem(c, line, "message %zu: field \"role\" must be a string", k);
        return -1;
    }
    const char *r = json_string_value(role);
    int ri = -1;
    for (int i = 0; i <= DATASET_TOOL; i++)
        if (strcmp(r, role_names[i]) == 0)
            ri = i;
    if (ri < 0) {
        problem(c, line,
                "message %zu: unknown role \"%.*s\" (use system, user, assistant or tool)", k,
                text_utf8_prefix(r, 40), r);
        return -1;
    }
    turn->role = (enum dataset_role)ri;
    json_t *reasoning = json_object_get(m, "reasoning_content");
    if (reasoning && !json_is_null(reasoning)) {
        if (ri != DATASET_ASSISTANT) {
            problem(c, line, "message %zu: only assistant messages have \"reasoning_content\"", k);
            return -1;
        }
        if (!json_is_string(reasoning)) {
            problem(c, line, "message %zu: field \"reasoning_content\" must be a string or null",
                    k);
            return -1;
        }
    }
    json_t *calls = json_object_get(m, "tool_calls");
    if (calls && !json_is_null(calls)) {
        if (ri != DATASET_ASSISTANT) {
            problem(c, line, "message %zu: only assistant messages have \"tool_calls\"", k);
            return -1;
        }
        if (content && !json_is_null(content) && !json_is_string(content)) {
            problem(c, line, "message %zu: field \"content\" must be a string or null", k);
            return -1;
        }
        return check_tool_calls(m, calls, k, L, turn, c);
    }
    if (!content) {
        problem(c, line, "message %zu: missing field \"content\"", k);
        return -1;
    }
    if (!json_is_string(content)) {
        problem(c, line, "message %zu: field \"content\" must be a string", k);
        return -1;
    }
    if (ri == DATASET_TOOL) {
        json_t *id = json_object_get(m, "tool_call_id");
        if (!json_is_string(id)) {
            problem(c, line, "message %zu: a tool message needs a \"tool_call_id\" string", k);
            return -1;
        }
        int known = 0;
        for (size_t i = 0; i < json_array_size(L->call_ids) && !known; i++)
            known = json_equal(json_array_get(L->call_ids, i), id);
        if (!known) {
            problem(c, line, "message %zu: \"tool_call_id\" \"%.*s\" answers no earlier tool call",
                    k, text_utf8_prefix(json_string_value(id), 40), json_string_value(id));
            return -1;
        }
    }
    turn->text = json_string_value(content);
    turn->len = json_string_length(content);
    return 0;
}

const char *dataset_format_name(enum dataset_format f)
{
    switch (f) {
    case DATASET_CHAT:
        return "chat";
    case DATASET_PROMPT_COMPLETION:
        return "prompt-completion";
    case DATASET_MIXED:
        return "mixed";
    case DATASET_PREFERENCE:
        return "preference";
    case DATASET_REINFORCEMENT:
        return "reinforcement";
    case DATASET_EMPTY:
        break;
    }
    return "";
}

/* One output of a preference pair: an array of one assistant message with
 * non-empty content. */
static int check_output(json_t *obj, const char *key, struct line_ctx *L, const char **text,
                        size_t *len, const struct json_t **msg, struct dataset_check *c)
{
    long line = L->line;
    json_t *o = json_object_get(obj, key);
    if (!o) {
        problem(c, line, "missing field \"%s\"", key);
        return -1;
    }
    json_t *m = json_array_get(o, 0);
    struct dataset_turn t;
    if (!json_is_array(o) || json_array_size(o) != 1) {
        problem(c, line, "field \"%s\" must be an array of one assistant message", key);
        return -1;
    }
    if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")) ||
        strcmp(json_string_value(json_object_get(m, "role")), "assistant") != 0) {
        problem(c, line, "field \"%s\": the message's role must be \"assistant\"", key);
        return -1;
    }
    if (check_message(m, 0, L, &t, c) < 0)
        return -1;
    if (t.len == 0) {
        problem(c, line, "field \"%s\": the message's content is empty", key);
        return -1;
    }
    *text = t.text;
    *len = t.len;
    *msg = m;
    c->bytes_of_text += (long)t.len;
    return 0;
}

/* "tools": OpenAI's function definitions. */
static int check_tools(json_t *tools, long line, struct dataset_check *c)
{
    if (!json_is_array(tools)) {
        problem(c, line, "field \"tools\" must be an array");
        return -1;
    }
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        json_t *fn = json_is_object(t) ? json_object_get(t, "function") : NULL;
        json_t *type = json_is_object(t) ? json_object_get(t, "type") : NULL;
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")) ||
            (type && !(json_is_string(type) && strcmp(json_string_value(type), "function") == 0))) {
            problem(c, line,
                    "tool %zu must be {\"type\": \"function\", \"function\": {\"name\": ..., "
                    "\"parameters\": {...}}}", i + 1);
            return -1;
        }
        json_t *params = json_object_get(fn, "parameters");
        if (params && !json_is_object(params)) {
            problem(c, line, "tool %zu: \"parameters\" must be a JSON Schema object", i + 1);
            return -1;
        }
    }
    return 0;
}

/* Whether the n bytes at s hold more than white space. */
static int has_text(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n", s[i]))
            return 1;
    return 0;
}

/* An assistant message that reasons: a non-blank "reasoning_content", or
 * text between "<think>" and "</think>" in its content. */
static int reasons(json_t *m)
{
    json_t *r = json_object_get(m, "reasoning_content");
    if (json_is_string(r) && has_text(json_string_value(r), json_string_length(r)))
        return 1;
    const char *c = json_string_value(json_object_get(m, "content"));
    const char *open = c ? strstr(c, "<think>") : NULL;
    const char *close = open ? strstr(open, "</think>") : NULL;
    return close && has_text(open + 7, (size_t)(close - open - 7));
}

/* A message array named `field` of the object obj (whose "tools" and
 * "parallel_tool_calls" it reads): non-empty, each message valid, and (when
 * need_assistant) one from the assistant at least. */
static int check_messages(json_t *obj, json_t *msgs, const char *field, struct line_ctx *L,
                          int need_assistant, size_t *n_out, struct dataset_check *c)
{
    long line = L->line;
    struct dataset_turn *turns = L->turns;
    if (!json_is_array(msgs)) {
        problem(c, line, "field \"%s\" must be an array", field);
        return -1;
    }
    size_t n = json_array_size(msgs);
    if (n == 0) {
        problem(c, line, "field \"%s\" is empty", field);
        return -1;
    }
    if (n > MAX_TURNS) {
        problem(c, line, "more than %d messages", MAX_TURNS);
        return -1;
    }
    json_t *tools = json_object_get(obj, "tools");
    if (tools && check_tools(tools, line, c) < 0)
        return -1;
    json_t *par = json_object_get(obj, "parallel_tool_calls");
    if (par && !json_is_boolean(par)) {
        problem(c, line, "field \"parallel_tool_calls\" must be true or false");
        return -1;
    }
    L->parallel = !json_is_false(par);
    int assistant = 0, tool_use = tools != NULL, reasoning = 0;
    for (size_t i = 0; i < n; i++) {
        if (check_message(json_array_get(msgs, i), i, L, &turns[i], c) < 0)
            return -1;
        if (turns[i].role == DATASET_ASSISTANT)
            assistant = 1;
        if (turns[i].role == DATASET_ASSISTANT && reasons(json_array_get(msgs, i)))
            reasoning = 1;
        if (turns[i].role == DATASET_TOOL)
            tool_use = 1;
        c->bytes_of_text += (long)turns[i].len;
    }
    if (!assistant && need_assistant) {
        problem(c, line, "no assistant message");
        return -1;
    }
    c->tool_examples += tool_use || json_array_size(L->call_ids) > 0;
    c->reasoning_examples += reasoning;
    *n_out = n;
    return 0;
}

static int check_pref(json_t *obj, struct line_ctx *L, struct dataset_example *ex,
                      struct dataset_check *c)
{
    long line = L->line;
    json_t *in = json_object_get(obj, "input");
    if (!in) {
        problem(c, line, "missing field \"input\"");
        return -1;
    }
    if (!json_is_object(in) || !json_object_get(in, "messages")) {
        problem(c, line, "field \"input\" must be an object with \"messages\"");
        return -1;
    }
    if (check_messages(in, json_object_get(in, "messages"), "input.messages", L, 0,
                       &ex->n_turns, c) < 0 ||
        check_output(obj, "preferred_output", L, &ex->preferred, &ex->preferred_len,
                     &ex->preferred_msg, c) < 0 ||
        check_output(obj, "non_preferred_output", L, &ex->non_preferred,
                     &ex->non_preferred_len, &ex->non_preferred_msg, c) < 0)
        return -1;
    ex->form = DATASET_PREFERENCE;
    ex->turns = L->turns;
    ex->messages = json_object_get(in, "messages");
    ex->tools = json_object_get(in, "tools");
    return 0;
}

static int check_chat(json_t *obj, json_t *msgs, struct line_ctx *L, struct dataset_example *ex,
                      struct dataset_check *c)
{
    size_t n;
    if (check_messages(obj, msgs, "messages", L, 0, &n, c) < 0)
        return -1;
    int assistant = 0;
    for (size_t i = 0; i < n; i++)
        assistant |= L->turns[i].role == DATASET_ASSISTANT;
    /* no answer, the user's message last: a prompt for reinforcement
     * fine-tuning, its other fields for the graders */
    if (!assistant && L->turns[n - 1].role != DATASET_USER) {
        problem(c, L->line, "no assistant message");
        return -1;
    }
    ex->form = assistant ? DATASET_CHAT : DATASET_REINFORCEMENT;
    ex->turns = L->turns;
    ex->n_turns = n;
    ex->messages = msgs;
    ex->tools = json_object_get(obj, "tools");
    return 0;
}

/* {"role": role, "content": text} appended to msgs. */
static int add_message(json_t *msgs, const char *role, json_t *content)
{
    return json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", role, "content", content));
}

/* Alpaca: instruction, optional input, output (and an optional system),
 * as a chat: [system,] user "instruction\n\ninput", assistant "output". */
static json_t *from_alpaca(json_t *obj, long line, struct dataset_check *c)
{
    json_t *ins = json_object_get(obj, "instruction"), *in = json_object_get(obj, "input");
    json_t *out = json_object_get(obj, "output"), *sys = json_object_get(obj, "system");
    const char *bad = !json_is_string(ins)                          ? "instruction"
                      : !json_is_string(out)                        ? "output"
                      : in && !json_is_null(in) && !json_is_string(in) ? "input"
                      : sys && !json_is_string(sys)                 ? "system"
                                                                    : NULL;
    if (bad) {
        problem(c, line, "Alpaca form: field \"%s\" must be a string", bad);
        return NULL;
    }
    json_t *msgs = json_array();
    json_t *user = json_string(json_string_value(ins));
    if (json_is_string(in) && json_string_length(in) > 0) {
        size_t n = json_string_length(ins) + json_string_length(in) + 3;
        char *s = malloc(n);
        if (s) {
            snprintf(s, n, "%s\n\n%s", json_string_value(ins), json_string_value(in));
            json_string_set(user, s);
        }
        free(s);
    }
    if (sys && json_string_length(sys) > 0)
        add_message(msgs, "system", sys);
    add_message(msgs, "user", user);
    add_message(msgs, "assistant", out);
    json_decref(user);
    c->alpaca++;
    return msgs;
}

/* ShareGPT: conversations of {"from", "value"}. */
static json_t *from_sharegpt(json_t *conv, long line, struct dataset_check *c)
{
    static const char *const speakers[][2] = {
        {"system", "system"}, {"human", "user"},           {"user", "user"},
        {"gpt", "assistant"}, {"assistant", "assistant"}, {"chatgpt", "assistant"},
    };
    if (!json_is_array(conv)) {
        problem(c, line, "ShareGPT form: field \"conversations\" must be an array");
        return NULL;
    }
    json_t *msgs = json_array();
    for (size_t i = 0; i < json_array_size(conv); i++) {
        json_t *t = json_array_get(conv, i);
        json_t *from = json_is_object(t) ? json_object_get(t, "from") : NULL;
        json_t *value = json_is_object(t) ? json_object_get(t, "value") : NULL;
        if (!json_is_string(from) || !json_is_string(value)) {
            problem(c, line, "ShareGPT form: turn %zu needs \"from\" and \"value\" strings", i + 1);
            json_decref(msgs);
            return NULL;
        }
        const char *role = NULL;
        for (size_t k = 0; k < sizeof speakers / sizeof *speakers; k++)
            if (strcmp(json_string_value(from), speakers[k][0]) == 0)
                role = speakers[k][1];
        if (!role) {
            problem(c, line, "ShareGPT form: turn %zu: unknown speaker \"%.*s\" (use system, "
                             "human or gpt)", i + 1,
                    text_utf8_prefix(json_string_value(from), 40), json_string_value(from));
            json_decref(msgs);
            return NULL;
        }
        add_message(msgs, role, value);
    }
    c->sharegpt++;
    return msgs;
}

static int check_pc(json_t *obj, long line, struct dataset_example *ex, struct dataset_check *c)
{
    json_t *p = json_object_get(obj, "prompt");
    json_t *comp = json_object_get(obj, "completion");
    if (!p) {
        problem(c, line, "missing field \"prompt\"");
        return -1;
    }
    if (!comp) {
        problem(c, line, "missing field \"completion\"");
        return -1;
    }
    if (!json_is_string(p)) {
        problem(c, line, "field \"prompt\" must be a string");
        return -1;
    }
    if (!json_is_string(comp)) {
        problem(c, line, "field \"completion\" must be a string");
        return -1;
    }
    if (json_string_length(comp) == 0) {
        problem(c, line, "field \"completion\" is empty");
        return -1;
    }
    ex->form = DATASET_PROMPT_COMPLETION;
    ex->prompt = json_string_value(p);
    ex->prompt_len = json_string_length(p);
    ex->completion = json_string_value(comp);
    ex->completion_len = json_string_length(comp);
    c->bytes_of_text += (long)(ex->prompt_len + ex->completion_len);
    return 0;
}

/* The first character of a line that is not blank (n > 0). */
static char first_char(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t'))
        i++;
    return i < n ? s[i] : '\0';
}

/* A first line that is no JSON object means the file is in another format.
 * The problem carries no line number (the message names line 1 itself), so
 * dataset_check_error writes "NAME: alallo reads JSONL: ...". */
static void wrong_format(struct dataset_check *c, long line, const char *s, size_t n)
{
    unsigned char ch = (unsigned char)first_char(s, n);
    char shown[16];
    if (ch >= 0x20 && ch < 0x7f)
        snprintf(shown, sizeof shown, "'%c'", ch);
    else
        snprintf(shown, sizeof shown, "byte 0x%02X", ch);
    problem(c, 0, "alallo reads JSONL: one JSON object per line (line %ld starts with %s)", line,
            shown);
}

/* Checks one non-blank line; on success calls fn. */
static int check_line(const char *s, size_t n, long line, struct dataset_turn *turns,
                      dataset_example_fn fn, void *ctx, struct dataset_check *c,
                      json_t **converted /* OUT: the line in chat form, when converted */)
{
    if (n > DATASET_MAX_LINE) {
        problem(c, line, "line is longer than 1 MiB");
        return -1;
    }
    json_error_t jerr;
    if (n >= 3 && memcmp(s, BOM, 3) == 0) {
        problem(c, line, "starts with a byte-order mark (U+FEFF), which is allowed only at the "
                         "start of the file; remove it");
        return -1;
    }
    json_t *obj = json_loadb(s, n, JSON_DECODE_ANY, &jerr);
    if (!json_is_object(obj) && c->examples == 0 && first_char(s, n) != '{') {
        /* The first line is not even the start of an object: a JSON array,
         * a CSV file, plain text. The parser's words would not say why. */
        wrong_format(c, line, s, n);
        json_decref(obj);
        return -1;
    }
    if (!obj) {
        problem(c, line, "not valid JSON (column %d: %s)", jerr.column, jerr.text);
        return -1;
    }
    int rc = -1;
    struct dataset_example ex = {0};
    json_t *keep = json_array(), *call_ids = json_array();
    if (!keep || !call_ids) {
        problem(c, line, "out of memory");
        goto out;
    }
    if (!json_is_object(obj)) {
        problem(c, line, "not a JSON object");
        goto out;
    }
    json_t *msgs = json_object_get(obj, "messages");
    int has_pc = json_object_get(obj, "prompt") || json_object_get(obj, "completion");
    /* Alpaca's "input" is a string; a preference pair's is an object */
    int has_pref = json_is_object(json_object_get(obj, "input")) ||
                   json_object_get(obj, "preferred_output") ||
                   json_object_get(obj, "non_preferred_output");
    json_t *conv = json_object_get(obj, "conversations");
    int alpaca = json_object_get(obj, "instruction") || json_object_get(obj, "output");
    if (has_pref && (msgs || has_pc || conv || alpaca)) {
        problem(c, line, "has both a preference pair (\"input\", \"preferred_output\", "
                         "\"non_preferred_output\") and \"%s\"; use one form",
                msgs ? "messages" : has_pc ? "prompt" : conv ? "conversations" : "instruction");
        goto out;
    }
    struct line_ctx L = {.line = line, .turns = turns, .keep = keep, .call_ids = call_ids};
    if (has_pref) {
        if (check_pref(obj, &L, &ex, c) < 0)
            goto out;
    } else {
        if ((msgs != NULL) + has_pc + (conv != NULL) + alpaca > 1) {
            problem(c, line,
                    "has fields of several forms (\"messages\", \"prompt\"/\"completion\", "
                    "\"instruction\"/\"output\", \"conversations\"); use one form");
            goto out;
        }
        if (!msgs && !has_pc && !conv && !alpaca) {
            problem(c, line, "missing field \"messages\" (or \"prompt\" and \"completion\")");
            goto out;
        }
        if (conv || alpaca) {
            msgs = alpaca ? from_alpaca(obj, line, c) : from_sharegpt(conv, line, c);
            if (!msgs)
                goto out;
            json_object_set_new(obj, "messages", msgs); /* lives as long as the line */
            if (converted)
                *converted = json_pack("{s:O}", "messages", msgs);
        }
        if ((msgs ? check_chat(obj, msgs, &L, &ex, c) : check_pc(obj, line, &ex, c)) < 0)
            goto out;
    }
    enum dataset_format f = ex.form;
    if (c->format != DATASET_EMPTY &&
        (c->format == DATASET_PREFERENCE) != (f == DATASET_PREFERENCE)) {
        problem(c, line, "a file of preference pairs holds nothing else (this line is %s)",
                f == DATASET_PREFERENCE ? "a preference pair" : "not a preference pair");
        goto out;
    }
    if (c->format == DATASET_REINFORCEMENT && f != DATASET_REINFORCEMENT) {
        problem(c, line, "a file of prompts for reinforcement fine-tuning (chats that end with "
                         "the user's message) holds nothing else (this line has an answer)");
        goto out;
    }
    if (c->format != DATASET_EMPTY && c->format != DATASET_REINFORCEMENT &&
        f == DATASET_REINFORCEMENT) {
        problem(c, line, "no assistant message");
        goto out;
    }
    if (c->format == DATASET_EMPTY)
        c->format = f;
    else if (c->format != f)
        c->format = DATASET_MIXED;
    c->examples++;
    rc = fn ? fn(ctx, line, &ex) : 0;
out:
    json_decref(keep);
    json_decref(call_ids);
    json_decref(obj);
    return rc;
}

/* Appends to the converted copy dataset_convert writes (NULL: none
 * wanted). Its size is bounded by the data set's (GROWBUF_UNBOUNDED); a
 * failure stays in copy->err. */
static void copy_put(struct growbuf *copy, const char *s, size_t n)
{
    if (copy)
        growbuf_append(copy, s, n);
}

static int walk(const char *buf, size_t len, dataset_example_fn fn, void *ctx,
                struct dataset_check *out, struct growbuf *copy)
{
    memset(out, 0, sizeof *out);
    struct dataset_turn *turns = malloc(MAX_TURNS * sizeof *turns);
    if (!turns) {
        problem(out, 0, "out of memory");
        return -1;
    }
    long line = 0;
    int rc = 0;
    size_t pos = 0;
    /* Editors on Windows start UTF-8 files with a byte-order mark, U+FEFF;
     * it is no part of the data. Elsewhere it is a mistake, named below. */
    if (len >= 3 && memcmp(buf, BOM, 3) == 0)
        pos = 3;
    for (; pos < len && rc == 0;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        line++;
        const char *s = buf + pos;
        size_t n = end - pos;
        if (n > 0 && s[n - 1] == '\r')
            n--;
        json_t *converted = NULL;
        if (!blank(s, n))
            rc = check_line(s, n, line, turns, fn, ctx, out, copy ? &converted : NULL);
        char *text = converted ? json_dumps(converted, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        if (converted && !text && copy && !copy->err)
            copy->err = GROWBUF_NO_MEMORY;
        copy_put(copy, text ? text : s, text ? strlen(text) : n);
        copy_put(copy, "\n", 1);
        free(text);
        json_decref(converted);
        pos = end + 1;
    }
    free(turns);
    if (rc != 0)
        return rc;
    if (out->examples == 0) {
        problem(out, 0, "the file has no examples");
        return -1;
    }
    if (copy && copy->err) {
        problem(out, 0, "out of memory");
        return -1;
    }
    return 0;
}

int dataset_each(const char *buf, size_t len, dataset_example_fn fn, void *ctx,
                 struct dataset_check *out)
{
    return walk(buf, len, fn, ctx, out, NULL);
}

int dataset_convert(const char *buf, size_t len, char **out, size_t *out_len,
                    struct dataset_check *check)
{
    struct growbuf copy = GROWBUF_INIT(GROWBUF_UNBOUNDED);
    *out = NULL;
    *out_len = 0;
    int rc = walk(buf, len, NULL, NULL, check, &copy);
    if (rc != 0) {
        growbuf_free(&copy);
        return -1;
    }
    *out_len = copy.len;
    *out = growbuf_take(&copy);
    return 0;
}

const char *dataset_check_converted_from(const struct dataset_check *c)
{
    if (c->alpaca && c->sharegpt)
        return "alpaca+sharegpt";
    return c->alpaca ? "alpaca" : c->sharegpt ? "sharegpt" : NULL;
}

int dataset_check_buffer(const char *buf, size_t len, struct dataset_check *out)
{
    return dataset_each(buf, len, NULL, NULL, out);
}

char *dataset_check_error(const struct dataset_check *c, const char *name, char *buf, size_t cap)
{
    /* The name is the user's and may not even be UTF-8: one_line mends it. */
    if (c->bad_line > 0)
        snprintf(buf, cap, "line %ld of %s: %s", c->bad_line, name, c->problem);
    else
        snprintf(buf, cap, "%s: %s", name, c->problem);
    text_one_line(buf);
    return buf;
}
