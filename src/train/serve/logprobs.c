/* logprobs.c - log-probabilities as JSON entries (see logprobs.h). */
#include "train/serve/logprobs.h"

#include <stdbool.h>
#include <stdlib.h>

#include "train/tokenizer/tokenizer.h"

/* {"token", "logprob", "bytes"} of token `id`; NULL when out of memory. */
static json_t *token_entry(const struct tokenizer *t, int32_t id, float lp)
{
    char *bytes;
    size_t len;
    char *text = tokenizer_token_piece(t, id, &bytes, &len);
    json_t *b = json_array();
    for (size_t i = 0; text && b && i < len; i++)
        if (json_array_append_new(b, json_integer((unsigned char)bytes[i])))
            break;
    json_t *e = text && b ? json_pack("{s:s s:f s:O}", "token", text, "logprob", (double)lp,
                                      "bytes", b)
                          : NULL;
    json_decref(b);
    free(text);
    free(bytes);
    return e;
}

json_t *serve_logprobs_json(const struct batch_seq *s, int from, int to)
{
    const struct tokenizer *t = gen_tokenizer(s->g);
    json_t *all = json_array();
    for (int i = from; all && i < to; i++) {
        json_t *e = token_entry(t, s->out[i], s->lp[i]);
        json_t *top = json_array();
        bool ok = e && top;
        for (int k = 0; ok && k < s->top_n; k++) {
            const struct batch_logprob *c = &s->top[(size_t)i * (size_t)s->top_n + (size_t)k];
            ok = json_array_append_new(top, token_entry(t, c->id, c->lp)) == 0;
        }
        if (ok) /* these steal their value, even when they fail */
            ok = json_object_set_new(e, "top_logprobs", top) == 0;
        else
            json_decref(top);
        if (ok)
            ok = json_array_append_new(all, e) == 0;
        else
            json_decref(e);
        if (!ok) {
            json_decref(all);
            all = NULL;
        }
    }
    return all;
}
