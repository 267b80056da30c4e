/* tool_calls.c - tool calls in a model's answer (tool_calls.h). */
#include "core/tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* One call object {"name", "arguments"|"parameters"} appended in OpenAI's
 * shape; 0, or -1 when obj is no call. */
static int add_call(json_t *calls, json_t *obj, const char *id_prefix)
{
    const char *name = json_string_value(json_object_get(obj, "name"));
    json_t *args = json_object_get(obj, "arguments");
    if (!args)
        args = json_object_get(obj, "parameters");
    if (!name || !args || !(json_is_object(args) || json_is_string(args)))
        return -1;
    char *text = json_is_string(args) ? strdup(json_string_value(args))
                                      : json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    char id[96];
    snprintf(id, sizeof id, "call_%s%zu", id_prefix, json_array_size(calls));
    json_t *c = text ? json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function",
                                 "function", "name", name, "arguments", text)
                     : NULL;
    free(text);
    return c ? json_array_append_new(calls, c) : -1;
}

static json_t *trimmed(const char *s, size_t n)
{
    while (n && ws(*s)) {
        s++;
        n--;
    }
    while (n && ws(s[n - 1]))
        n--;
    return n ? json_stringn(s, n) : NULL;
}

/* <tool_call>...</tool_call> blocks. */
static json_t *tagged(const char *text, const char *id_prefix, json_t **content)
{
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    if (!strstr(text, open))
        return NULL;
    json_t *calls = json_array();
    char *rest = malloc(strlen(text) + 1);
    size_t rn = 0;
    const char *p = text;
    while (calls && rest) {
        const char *a = strstr(p, open);
        if (!a)
            break;
        const char *b = strstr(a, close);
        size_t body_len = b ? (size_t)(b - a) - (sizeof open - 1) : strlen(a + sizeof open - 1);
        json_t *obj = json_loadb(a + sizeof open - 1, body_len, 0, NULL);
        int ok = json_is_object(obj) && add_call(calls, obj, id_prefix) == 0;
        json_decref(obj);
        if (!ok) /* not a call after all: keep it as text */
            break;
        memcpy(rest + rn, p, (size_t)(a - p));
        rn += (size_t)(a - p);
        p = b ? b + sizeof close - 1 : a + strlen(a);
    }
    if (!calls || !rest || json_array_size(calls) == 0) {
        free(rest);
        json_decref(calls);
        return NULL;
    }
    size_t tail = strlen(p);
    memcpy(rest + rn, p, tail);
    rn += tail;
    *content = trimmed(rest, rn);
    free(rest);
    return calls;
}

/* The whole answer as a JSON call or array of calls. */
static json_t *whole(const char *text, const char *id_prefix)
{
    static const char *const marks[] = {"[TOOL_CALLS]", "<|python_tag|>"};
    while (ws(*text))
        text++;
    for (size_t i = 0; i < sizeof marks / sizeof *marks; i++)
        if (strncmp(text, marks[i], strlen(marks[i])) == 0)
            text += strlen(marks[i]);
    while (ws(*text))
        text++;
    if (*text != '{' && *text != '[')
        return NULL;
    json_t *v = json_loads(text, JSON_DISABLE_EOF_CHECK, NULL);
    json_t *calls = json_array();
    int ok = v && calls;
    if (ok && json_is_object(v)) {
        ok = add_call(calls, v, id_prefix) == 0;
    } else if (ok && json_is_array(v) && json_array_size(v) > 0) {
        for (size_t i = 0; i < json_array_size(v) && ok; i++)
            ok = add_call(calls, json_array_get(v, i), id_prefix) == 0;
    } else {
        ok = 0;
    }
    json_decref(v);
    if (!ok) {
        json_decref(calls);
        return NULL;
    }
    return calls;
}

json_t *tool_calls_parse(const char *text, const char *id_prefix, json_t **content)
{
    *content = NULL;
    json_t *calls = tagged(text, id_prefix, content);
    return calls ? calls : whole(text, id_prefix);
}
