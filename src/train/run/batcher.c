/* batcher.c - one step of the running sequences of a base (see batcher.h). */
#include "train/run/batcher.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/model/model.h"
#include "train/tokenizer/tokenizer.h"

int batch_seq_start(struct batch_seq *s, struct generator *g,
                    const struct decode_adapter *adapter, int32_t *ids, size_t n,
                    const struct gen_stops *stops, const struct gen_opts *o, char *err,
                    size_t errcap)
{
    memset(s, 0, sizeof *s);
    s->prompt = ids;
    s->g = g;
    s->adapter = adapter;
    s->top_n = -1;
    s->opts = *o;
    s->stops = *stops;
    int maxpos = gen_model(g)->cfg.max_pos;
    if (n < 1) {
        snprintf(err, errcap, "the prompt is empty and the model has no start token");
        return GEN_EMPTY;
    }
    if (n >= (size_t)maxpos) {
        snprintf(err, errcap, "the prompt is %zu tokens; the model's context is %d", n, maxpos);
        s->n_prompt = n < (size_t)INT32_MAX ? (int)n : INT32_MAX;
        return GEN_TOO_LONG;
    }
    s->n_prompt = (int)n;
    if (o->max_tokens < 1 || o->max_tokens > GEN_MAX_TOKENS) {
        snprintf(err, errcap, "max_tokens must be from 1 to %d", GEN_MAX_TOKENS);
        return -1;
    }
    s->max_new = o->max_tokens < maxpos - s->n_prompt ? o->max_tokens : maxpos - s->n_prompt;
    s->out = malloc(sizeof *s->out * (size_t)s->max_new);
    if (!s->out || kv_cache_init(&s->kv, gen_model(g), s->n_prompt + s->max_new)) {
        snprintf(err, errcap, "out of memory for generation");
        return -1;
    }
    rng_seed(&s->rng, o->seed);
    return 0;
}

void batch_seq_end(struct batch_seq *s)
{
    free(s->prompt);
    free(s->out);
    free(s->lp);
    free(s->top);
    free(s->plp);
    free(s->ptop);
    kv_cache_free(&s->kv);
    s->prompt = s->out = NULL;
    s->lp = s->plp = NULL;
    s->top = s->ptop = NULL;
}

/* n log-probabilities and n tops of top_n into *lp and *top (both or
 * neither, the sequence's to free): 0, or -1 when memory ran out. */
static int lp_arrays(float **lp, struct batch_logprob **top, size_t n, int top_n)
{
    *lp = malloc(sizeof **lp * n);
    *top = malloc(sizeof **top * n * (size_t)(top_n ? top_n : 1));
    if (*lp && *top)
        return 0;
    free(*lp);
    free(*top);
    *lp = NULL;
    *top = NULL;
    return -1;
}

int batch_seq_logprobs(struct batch_seq *s, int top_n)
{
    if (top_n < 0 || top_n > BATCH_TOP_LOGPROBS_MAX || s->max_new < 1)
        return -1;
    if (lp_arrays(&s->lp, &s->top, (size_t)s->max_new, top_n))
        return -1;
    s->top_n = top_n;
    return 0;
}

int batch_seq_prompt_logprobs(struct batch_seq *s)
{
    if (s->top_n < 0 || s->kv.len > 0 || s->plp)
        return -1;
    if (lp_arrays(&s->plp, &s->ptop, (size_t)s->n_prompt, s->top_n))
        return -1;
    s->plp[0] = NAN;
    return 0;
}

size_t batch_seq_bytes(const struct batch_seq *s)
{
    size_t lps = s->plp ? (size_t)s->n_prompt * (sizeof(float) +
                                                  sizeof(struct batch_logprob) * (size_t)s->top_n)
                        : 0;
    return (size_t)s->kv.cap * s->kv.layers * s->kv.kd * 2 * sizeof(float) +
           sizeof(int32_t) * (size_t)(s->n_prompt + s->max_new) + lps;
}

struct batcher {
    struct decode_work *w;
    struct decode_seq *ds;
    int cap;
    float *logits;
    struct gen_cand *cands;
    size_t vocab_cap;
};

struct batcher *batcher_new(void)
{
    struct batcher *b = calloc(1, sizeof *b);
    if (b && !(b->w = decode_work_new())) {
        free(b);
        b = NULL;
    }
    return b;
}

void batcher_free(struct batcher *b)
{
    if (!b)
        return;
    decode_work_free(b->w);
    free(b->ds);
    free(b->logits);
    free(b->cands);
    free(b);
}

static int fit(struct batcher *b, int n, size_t V)
{
    if (n > b->cap) {
        struct decode_seq *ds = realloc(b->ds, sizeof *ds * (size_t)n);
        if (!ds)
            return -1;
        b->ds = ds;
        b->cap = n;
    }
    if ((size_t)n * V > b->vocab_cap) {
        float *l = malloc(sizeof *l * (size_t)n * V);
        struct gen_cand *c = malloc(sizeof *c * V);
        if (!l || !c) {
            free(l);
            free(c);
            return -1;
        }
        free(b->logits);
        free(b->cands);
        b->logits = l;
        b->cands = c;
        b->vocab_cap = (size_t)n * V;
    }
    return 0;
}

/* The log-probability of token `next` and the top_n most likely tokens
 * (top[0..top_n), most likely first; ties to the lower id) under logits. */
static float logprobs(const float *logits, int V, int next, int top_n, struct batch_logprob *top)
{
    float mx = logits[0];
    for (int j = 1; j < V; j++)
        mx = logits[j] > mx ? logits[j] : mx;
    double sum = 0.0;
    for (int j = 0; j < V; j++)
        sum += exp((double)logits[j] - mx);
    double lse = mx + log(sum);
    int n = 0; /* insertion into the sorted top, kept at top_n */
    for (int j = 0; j < V && top_n > 0; j++) {
        if (n == top_n && logits[j] <= logits[top[n - 1].id])
            continue;
        int at = n < top_n ? n++ : n - 1;
        while (at > 0 && logits[top[at - 1].id] < logits[j]) {
            top[at] = top[at - 1];
            at--;
        }
        top[at].id = j;
    }
    for (int k = 0; k < n; k++)
        top[k].lp = (float)(logits[top[k].id] - lse);
    return (float)(logits[next] - lse);
}

/* decode_rows' call for a prompt scored: the logits after prompt[i] give
 * prompt[i + 1]'s entry. */
static void prompt_row(void *ctx, int i, const float *logits, int V)
{
    struct batch_seq *s = ctx;
    s->plp[i + 1] = logprobs(logits, V, s->prompt[i + 1], s->top_n,
                             s->ptop + (size_t)(i + 1) * (size_t)s->top_n);
}

/* Where the answer's token k starts in its text (text[0..len), the
 * answer's whole text): where the text of the tokens before it ends, or,
 * when that ends inside a character token k completes, where that
 * character starts. SIZE_MAX when memory ran out. */
static size_t token_start(const struct batch_seq *s, int k, const char *text, size_t len)
{
    if (k == 0)
        return 0;
    char *p = tokenizer_decode(gen_tokenizer(s->g), s->out, (size_t)k, 1);
    if (!p)
        return SIZE_MAX;
    size_t n = strlen(p);
    if (n > len || memcmp(p, text, n) != 0) /* its end is a character cut short */
        n = gen_whole_len(p, n);
    free(p);
    return n;
}

/* The answer's tokens whose text starts before byte `cut` of its text. */
static int tokens_before(const struct batch_seq *s, const char *text, size_t len, size_t cut)
{
    int k = s->n_out;
    while (k > 0) {
        size_t start = token_start(s, k - 1, text, len);
        if (start == SIZE_MAX || start < cut)
            break; /* out of memory: keeps the entries it has */
        k--;
    }
    return k;
}

/* With stop texts, after a token: the sequence ends at the first one that
 * came; else on_text gets the text grown, less an end that may yet grow
 * into one. */
static void grow_to_stop(struct batch_seq *s)
{
    size_t len;
    char *text = gen_whole_text(s->g, s->out, s->n_out, &len);
    if (!text)
        return; /* out of memory: looked at again after the next token */
    size_t show, at = stop_texts_find(&s->stop_texts, text, len);
    if (at != STOP_TEXT_NONE) {
        s->finish = "stop";
        s->has_cut = true;
        s->cut = show = at;
        s->n_kept = tokens_before(s, text, len, at);
    } else {
        size_t held = stop_texts_held(&s->stop_texts, text, len);
        show = len - held;
        if (held > 0) /* a token whose text is all held is not shown yet */
            s->n_kept = tokens_before(s, text, len, show);
    }
    if (s->on_text && show > s->sent) {
        s->on_text(s->on_text_ctx, text + s->sent, show - s->sent);
        s->sent = show;
    }
    free(text);
}

/* Takes sequence s's next token from its logits, as gen_ids does. */
static void advance(struct batcher *b, struct batch_seq *s, const float *logits, int V)
{
    int next = gen_pick(logits, V, &s->opts, &s->rng, b->cands);
    if (gen_stops_has(&s->stops, next)) {
        s->finish = "stop";
        s->n_kept = s->n_out; /* what was held is the answer's too */
        return;
    }
    if (s->lp)
        s->lp[s->n_out] = logprobs(logits, V, next, s->top_n,
                                   s->top + (size_t)s->n_out * (size_t)s->top_n);
    s->out[s->n_out++] = next;
    s->n_kept = s->n_out;
    if (s->stop_texts.n > 0)
        grow_to_stop(s);
    else if (s->on_text)
        gen_growth(s->g, s->out, s->n_out, &s->sent, s->on_text, s->on_text_ctx);
    if (!s->finish && (s->n_out == s->max_new || s->n_prompt + s->n_out >= s->kv.cap)) {
        s->finish = "length";
        s->n_kept = s->n_out;
    }
}

int batcher_step(struct batcher *b, struct batch_seq **seqs, int n)
{
    if (n < 1)
        return 0;
    struct model *m = gen_model(seqs[0]->g);
    size_t V = (size_t)m->cfg.vocab;
    if (fit(b, n, V))
        return -1;
    for (int i = 0; i < n; i++) {
        struct batch_seq *s = seqs[i];
        bool prefill = s->kv.len == 0;
        s->rows = (struct decode_rows){prompt_row, s};
        b->ds[i] = (struct decode_seq){&s->kv, prefill ? s->prompt : &s->out[s->n_out - 1],
                                       prefill ? s->n_prompt : 1, s->adapter,
                                       prefill && s->plp ? &s->rows : NULL};
    }
    if (decode_forward(m, b->w, b->ds, n, b->logits))
        return -1;
    for (int i = 0; i < n; i++)
        advance(b, seqs[i], b->logits + (size_t)i * V, (int)V);
    return 0;
}

struct decode_passes batcher_passes(const struct batcher *b)
{
    return decode_work_passes(b->w);
}
