/* completion_logprobs.c - legacy completion log-probabilities (see
 * completion_logprobs.h). */
#include "api/completion_logprobs.h"

#include <stdbool.h>

/* Characters that start among a token's bytes: the bytes that are not a
 * UTF-8 continuation byte. */
static size_t chars_of(const json_t *bytes)
{
    size_t n = 0, i;
    const json_t *b;
    json_array_foreach(bytes, i, b)
        n += ((unsigned)json_integer_value(b) & 0xC0u) != 0x80u;
    return n;
}

/* Adds token:logprob to `top` unless a token of that text is there. */
static bool put(json_t *top, const json_t *e)
{
    const char *token = json_string_value(json_object_get(e, "token"));
    if (!token || json_object_get(top, token))
        return true;
    return json_object_set(top, token, json_object_get(e, "logprob")) == 0;
}

json_t *completion_logprobs(const json_t *entries, size_t *chars)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(),
           *offsets = json_array();
    bool ok = tokens && lps && tops && offsets;
    size_t i, k;
    const json_t *e, *t;
    json_array_foreach(entries, i, e) {
        bool none = json_is_null(json_object_get(e, "logprob")); /* a prompt's first token */
        json_t *top = none ? json_null() : json_object();
        ok = ok && top;
        json_array_foreach(json_object_get(e, "top_logprobs"), k, t)
            ok = ok && put(top, t);
        ok = ok && (none || put(top, e));
        if (ok) /* takes top, even when it fails */
            ok = json_array_append_new(tops, top) == 0;
        else
            json_decref(top);
        ok = ok && json_array_append(tokens, json_object_get(e, "token")) == 0 &&
             json_array_append(lps, json_object_get(e, "logprob")) == 0 &&
             json_array_append_new(offsets, json_integer((json_int_t)*chars)) == 0;
        if (!ok)
            break;
        *chars += chars_of(json_object_get(e, "bytes"));
    }
    if (!ok) {
        json_decref(tokens);
        json_decref(lps);
        json_decref(tops);
        json_decref(offsets);
        return NULL;
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offsets);
}
