/* logprobs.c - log-probabilities as JSON entries (see logprobs.h). */
#include "train/serve/logprobs.h"

#include <math.h>
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

/* The entries of ids[from..to) with their log-probabilities lp and tops
 * top (top_n each); an entry whose lp is NAN has "logprob": null and no
 * top. */
static json_t *entries(const struct batch_seq *s, const int32_t *ids, const float *lp,
                       const struct batch_logprob *tops, int from, int to)
{
    const struct tokenizer *t = gen_tokenizer(s->g);
    json_t *all = json_array();
    for (int i = from; all && i < to; i++) {
        bool none = isnan(lp[i]);
        json_t *e = token_entry(t, ids[i], none ? 0.0f : lp[i]);
        json_t *top = json_array();
        bool ok = e && top;
        if (ok && none)
            ok = json_object_set_new(e, "logprob", json_null()) == 0;
        for (int k = 0; ok && !none && k < s->top_n; k++) {
            const struct batch_logprob *c = &tops[(size_t)i * (size_t)s->top_n + (size_t)k];
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

json_t *serve_logprobs_json(const struct batch_seq *s, int from, int to)
{
    return entries(s, s->out, s->lp, s->top, from, to);
}

json_t *serve_prompt_logprobs_json(const struct batch_seq *s, int from)
{
    return entries(s, s->prompt, s->plp, s->ptop, from, s->n_prompt);
}
