/* generate.c - KV-cache decoding (see generate.h). */
#include "train/run/generate.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/tokenizer/chat_format.h"
#include "train/data/data.h"
#include "train/run/decode.h"
#include "train/model/model.h"
#include "train/formats/modelio.h"
#include "train/model/ops.h"
#include "train/formats/quant.h"
#include "core/rng.h"
#include "train/tokenizer/tokenizer.h"

struct generator {
    struct model *m;
    struct tokenizer *tok;
    int eos;
    struct chat_format *fmt; /* the model's chat template, or NULL */
    char fmt_err[400];       /* why the model's template cannot be used ("" when it can) */
    struct gen_stops stops;  /* ids that end the answer of the call running */
    gen_text_fn on_text;     /* pieces of the text as it grows, or NULL */
    void *on_text_ctx;
    int has_adapter;
    int borrowed; /* m and tok are the caller's (gen_borrow) */
};

bool gen_stops_has(const struct gen_stops *s, int32_t id)
{
    for (int i = 0; i < s->n; i++)
        if (s->id[i] == id)
            return true;
    return false;
}

struct model *gen_model(const struct generator *g)
{
    return g->m;
}

struct tokenizer *gen_tokenizer(const struct generator *g)
{
    return g->tok;
}

void gen_set_on_text(struct generator *g, gen_text_fn fn, void *ctx)
{
    g->on_text = fn;
    g->on_text_ctx = ctx;
}

size_t gen_whole_len(const char *text, size_t len)
{
    static const char repl[] = "\xef\xbf\xbd";
    while (len >= 3 && memcmp(text + len - 3, repl, 3) == 0)
        len -= 3;
    return len;
}

char *gen_whole_text(const struct generator *g, const int32_t *ids, int n, size_t *len)
{
    char *text = tokenizer_decode(g->tok, ids, (size_t)n, 1);
    if (!text)
        return NULL;
    size_t l = gen_whole_len(text, strlen(text));
    text[l] = '\0';
    *len = l;
    return text;
}

void gen_growth(const struct generator *g, const int32_t *ids, int n, size_t *sent,
                gen_text_fn fn, void *ctx)
{
    size_t len;
    char *text = gen_whole_text(g, ids, n, &len);
    if (!text)
        return;
    if (len > *sent) {
        fn(ctx, text + *sent, len - *sent);
        *sent = len;
    }
    free(text);
}

struct generator *gen_borrow(struct model *m, struct tokenizer *tok, const char *model_dir)
{
    struct generator *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->m = m;
    g->tok = tok;
    g->borrowed = 1;
    g->eos = m->cfg.eos_id >= 0 ? m->cfg.eos_id : tokenizer_eos_id(tok);
    g->stops = (struct gen_stops){.id = {g->eos}, .n = 1};
    if (model_dir)
        g->fmt = chat_format_load(model_dir, g->fmt_err, sizeof g->fmt_err);
    return g;
}

struct generator *gen_open(const char *model_dir, const char *adapter_dir, char *err,
                           size_t errcap)
{
    return gen_open_as(model_dir, adapter_dir, false, err, errcap);
}

struct generator *gen_open_as(const char *model_dir, const char *adapter_dir, bool four_bit,
                              char *err, size_t errcap)
{
    struct generator *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    struct model_opts o = {.full = 0, .base_kind = four_bit ? WK_NF4 : WK_F32};
    if (adapter_dir && modelio_peft_opts(adapter_dir, &o, err, errcap))
        goto fail;
    g->m = modelio_load(model_dir, &o, err, errcap);
    if (!g->m)
        goto fail;
    if (adapter_dir && modelio_load_peft(g->m, adapter_dir, err, errcap))
        goto fail;
    g->has_adapter = adapter_dir != NULL;
    char path[MODELIO_MAX_PATH + 32];
    snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
    g->tok = tokenizer_load(path, err, errcap);
    if (!g->tok)
        goto fail;
    g->eos = g->m->cfg.eos_id >= 0 ? g->m->cfg.eos_id : tokenizer_eos_id(g->tok);
    g->stops = (struct gen_stops){.id = {g->eos}, .n = 1};
    /* A template alallo cannot read fails chats only, not completions. */
    g->fmt = chat_format_load(model_dir, g->fmt_err, sizeof g->fmt_err);
    return g;
fail:
    gen_close(g);
    return NULL;
}

int gen_quantize(struct generator *g, const char *scheme, char *err, size_t errcap)
{
    enum quant_scheme s;
    if (quant_scheme_parse(scheme, &s) < 0) {
        snprintf(err, errcap, "unknown quantization \"%s\" (q8_0, q4_0 or q4_k_m)", scheme);
        return -1;
    }
    if (g->has_adapter) {
        snprintf(err, errcap, "quantization applies to a merged model, not one with an adapter");
        return -1;
    }
    struct model *m = g->m;
    for (int i = 0; i < m->n_tensors; i++) {
        const struct model_tensor *t = &m->tensors[i];
        if (!t->lin || t->is1d)
            continue;
        size_t rows = (size_t)t->rows, cols = (size_t)t->cols;
        enum quant_role role = quant_role_of(t->name, m->cfg.tied);
        if (role == QROLE_ROUTER) /* kept F32, as the GGUF keeps it */
            continue;
        enum quant_type qt = quant_pick(s, role, cols);
        float *w = malloc(rows * cols * sizeof *w);
        unsigned char *blocks = malloc(quant_row_bytes(qt, cols));
        if (!w || !blocks) {
            free(w);
            free(blocks);
            snprintf(err, errcap, "out of memory");
            return -1;
        }
        model_get_tensor(m, i, w);
        for (size_t r = 0; r < rows; r++) {
            quant_row(qt, w + r * cols, cols, blocks);
            quant_dequant_row(qt, blocks, cols, w + r * cols);
        }
        int rc = model_set_tensor(m, i, w);
        free(w);
        free(blocks);
        if (rc < 0) {
            snprintf(err, errcap, "out of memory");
            return -1;
        }
    }
    return 0;
}

void gen_close(struct generator *g)
{
    if (!g)
        return;
    if (!g->borrowed) {
        model_free(g->m);
        tokenizer_free(g->tok);
    }
    chat_format_free(g->fmt);
    free(g);
}

void gen_result_free(struct gen_result *r)
{
    free(r->text);
    r->text = NULL;
}


static int cmp_cand(const void *a, const void *b)
{
    const struct gen_cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1;
    return x->id - y->id; /* ties in id order: deterministic */
}

int gen_pick(const float *logits, int V, const struct gen_opts *o, struct rng *r,
             struct gen_cand *buf)
{
    int best = 0;
    for (int j = 1; j < V; j++)
        if (logits[j] > logits[best])
            best = j;
    if (!(o->temperature > 0.0f))
        return best;
    float mx = logits[best];
    double sum = 0.0;
    for (int j = 0; j < V; j++) {
        buf[j].p = expf((logits[j] - mx) / o->temperature);
        buf[j].id = j;
        sum += buf[j].p;
    }
    qsort(buf, (size_t)V, sizeof *buf, cmp_cand);
    /* nucleus: the smallest prefix whose mass reaches top_p */
    double keep = 0.0;
    int k = 0;
    double limit = (o->top_p > 0.0f && o->top_p < 1.0f ? o->top_p : 1.0) * sum;
    while (k < V && (k == 0 || keep < limit))
        keep += buf[k++].p;
    double u = (double)rng_uniform(r) * keep, acc = 0.0;
    for (int j = 0; j < k; j++) {
        acc += buf[j].p;
        if (u < acc)
            return buf[j].id;
    }
    return buf[k - 1].id;
}

int gen_ids(struct generator *g, const int32_t *ids, int n, const struct gen_opts *o,
            int32_t *out_ids, const char **finish_reason, char *err, size_t errcap)
{
    struct model *m = g->m;
    int maxpos = m->cfg.max_pos;
    if (n < 1) {
        snprintf(err, errcap, "the prompt is empty and the model has no start token");
        return GEN_EMPTY;
    }
    if (n >= maxpos) {
        snprintf(err, errcap, "the prompt is %d tokens; the model's context is %d", n, maxpos);
        return GEN_TOO_LONG;
    }
    if (o->max_tokens < 1 || o->max_tokens > GEN_MAX_TOKENS) {
        snprintf(err, errcap, "max_tokens must be from 1 to %d", GEN_MAX_TOKENS);
        return -1;
    }
    int max_new = o->max_tokens < maxpos - n ? o->max_tokens : maxpos - n;
    int ctx = n + max_new;
    struct kv_cache kv = {0};
    struct decode_work *w = decode_work_new();
    struct gen_cand *cands = malloc(sizeof *cands * (size_t)m->cfg.vocab);
    float *logits = malloc(sizeof *logits * (size_t)m->cfg.vocab);
    struct decode_seq seq = {&kv, ids, n, NULL, NULL};
    int count = -1;
    if (!w || !cands || !logits || kv_cache_init(&kv, m, ctx) ||
        decode_forward(m, w, &seq, 1, logits)) {
        snprintf(err, errcap, "out of memory for generation");
        goto out;
    }
    struct rng r;
    rng_seed(&r, o->seed);
    count = 0;
    size_t sent = 0;
    *finish_reason = "length";
    while (count < max_new) {
        int next = gen_pick(logits, m->cfg.vocab, o, &r, cands);
        if (gen_stops_has(&g->stops, next)) {
            *finish_reason = "stop";
            break;
        }
        out_ids[count++] = next;
        if (g->on_text)
            gen_growth(g, out_ids, count, &sent, g->on_text, g->on_text_ctx);
        if (count == max_new || n + count >= ctx)
            break;
        int32_t id = next;
        seq.ids = &id;
        seq.n = 1;
        if (decode_forward(m, w, &seq, 1, logits)) {
            snprintf(err, errcap, "out of memory for generation");
            count = -1;
            break;
        }
    }
out:
    kv_cache_free(&kv);
    decode_work_free(w);
    free(logits);
    free(cands);
    return count;
}

int gen_score(struct generator *g, const char *text, double *loss, long *tokens, char *err,
              size_t errcap)
{
    struct model *m = g->m;
    int32_t *ids = NULL;
    size_t n = 0;
    if (data_encode_prompt(g->tok, text, &ids, &n) != 0 || n < 2) {
        free(ids);
        snprintf(err, errcap, "the text has fewer than two tokens");
        return -1;
    }
    int win = m->cfg.max_pos, V = m->cfg.vocab;
    struct kv_cache kv = {0};
    struct decode_work *w = decode_work_new();
    float *logits = malloc(sizeof *logits * (size_t)V);
    int rc = -1;
    if (!w || !logits || kv_cache_init(&kv, m, win)) {
        snprintf(err, errcap, "out of memory for scoring");
        goto out;
    }
    double sum = 0.0;
    long count = 0;
    for (size_t s = 0; s + 1 < n; s += (size_t)win) {
        size_t end = s + (size_t)win < n ? s + (size_t)win : n;
        kv.len = 0;
        for (size_t i = s; i + 1 < end; i++) {
            struct decode_seq seq = {&kv, &ids[i], 1, NULL, NULL};
            if (decode_forward(m, w, &seq, 1, logits)) {
                snprintf(err, errcap, "out of memory for scoring");
                goto out;
            }
            float mx = logits[0];
            for (int j = 1; j < V; j++)
                mx = fmaxf(mx, logits[j]);
            double z = 0.0;
            for (int j = 0; j < V; j++)
                z += exp((double)(logits[j] - mx));
            sum += log(z) + (double)mx - (double)logits[ids[i + 1]];
            count++;
        }
    }
    *loss = sum / (double)count;
    *tokens = count;
    rc = 0;
out:
    kv_cache_free(&kv);
    decode_work_free(w);
    free(logits);
    free(ids);
    return rc;
}

/* Generates after `ids` (n of them, taken over and freed). */
static int run_ids(struct generator *g, int32_t *ids, size_t n, const struct gen_opts *o,
                   struct gen_result *out, char *err, size_t errcap)
{
    int cap = o->max_tokens > 0 && o->max_tokens <= GEN_MAX_TOKENS ? o->max_tokens : 1;
    int32_t *gen = malloc(sizeof *gen * (size_t)cap);
    const char *finish = "length";
    int k = -1;
    if (gen && n < (size_t)g->m->cfg.max_pos)
        k = gen_ids(g, ids, (int)n, o, gen, &finish, err, errcap);
    else if (gen) {
        snprintf(err, errcap, "the prompt is %zu tokens; the model's context is %d", n,
                 g->m->cfg.max_pos);
        k = GEN_TOO_LONG;
    }
    if (k >= 0) {
        out->text = tokenizer_decode(g->tok, gen, (size_t)k, 1);
        if (!out->text) {
            snprintf(err, errcap, "out of memory decoding");
            k = -1;
        }
    } else if (!gen) {
        snprintf(err, errcap, "out of memory");
    }
    out->prompt_tokens = n < (size_t)INT32_MAX ? (int)n : INT32_MAX;
    out->context_tokens = g->m->cfg.max_pos;
    out->completion_tokens = k > 0 ? k : 0;
    out->finish_reason = finish;
    free(ids);
    free(gen);
    if (k == GEN_TOO_LONG || k == GEN_EMPTY)
        return k;
    return k < 0 ? -1 : 0;
}

int gen_encode_prompt(struct generator *g, const char *prompt, int32_t **ids, size_t *n,
                      struct gen_stops *stops, char *err, size_t errcap)
{
    *ids = NULL;
    *n = 0;
    stops->n = 0;
    if (data_encode_prompt(g->tok, prompt, ids, n) != 0) {
        snprintf(err, errcap, "cannot encode the prompt");
        return -1;
    }
    stops->id[stops->n++] = g->eos;
    return 0;
}

int gen_encode_ids(struct generator *g, const int32_t *in, size_t n, int32_t **ids,
                   struct gen_stops *stops, char *err, size_t errcap)
{
    stops->n = 0;
    *ids = malloc(sizeof **ids * (n ? n : 1));
    if (!*ids) {
        snprintf(err, errcap, "out of memory for the prompt");
        return -1;
    }
    if (n)
        memcpy(*ids, in, sizeof **ids * n);
    stops->id[stops->n++] = g->eos;
    return 0;
}

int gen_run(struct generator *g, const char *prompt, const struct gen_opts *o,
            struct gen_result *out, char *err, size_t errcap)
{
    memset(out, 0, sizeof *out);
    int32_t *ids = NULL;
    size_t n = 0;
    if (gen_encode_prompt(g, prompt, &ids, &n, &g->stops, err, errcap))
        return -1;
    return run_ids(g, ids, n, o, out, err, errcap);
}

/* The plain layout of a conversation (models without a chat template). */
static int plain_chat(const struct generator *g, const json_t *messages, int32_t **ids,
                      size_t *n, char *err, size_t errcap)
{
    size_t nm = json_array_size(messages);
    struct dataset_turn *turns = calloc(nm + 1, sizeof *turns);
    json_t *keep = json_array(); /* texts made here, until encoded */
    if (!turns || !keep) {
        json_decref(keep);
        free(turns);
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < nm; i++) {
        json_t *m = json_array_get(messages, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *content = json_object_get(m, "content");
        int r = -1;
        for (int k = 0; role && k <= DATASET_TOOL; k++)
            if (strcmp(role, dataset_role_name((enum dataset_role)k)) == 0)
                r = k;
        if (r < 0) {
            json_decref(keep);
            free(turns);
            snprintf(err, errcap, "message %zu: unknown role", i + 1);
            return -1;
        }
        turns[i].role = (enum dataset_role)r;
        turns[i].text = json_is_string(content) ? json_string_value(content) : "";
        /* an assistant's calls as training wrote them (core/dataset.h) */
        json_t *calls = json_object_get(m, "tool_calls");
        for (size_t k = 0; k < json_array_size(calls); k++) {
            json_t *fn = json_object_get(json_array_get(calls, k), "function");
            const char *args_text = json_string_value(json_object_get(fn, "arguments"));
            json_t *args = args_text ? json_loads(args_text, 0, NULL) : NULL;
            char *a = args ? json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
            const char *name = json_string_value(json_object_get(fn, "name"));
            char *line = NULL;
            if (asprintf(&line, "%s%s<tool_call>{\"name\": \"%s\", \"arguments\": %s}</tool_call>",
                         turns[i].text, turns[i].text[0] ? "\n" : "", name ? name : "",
                         a ? a : "{}") < 0)
                line = NULL;
            free(a);
            json_decref(args);
            if (!line || json_array_append_new(keep, json_string(line)) < 0) {
                free(line);
                break;
            }
            free(line);
            turns[i].text = json_string_value(json_array_get(keep, json_array_size(keep) - 1));
        }
        turns[i].len = strlen(turns[i].text);
    }
    int rc = data_encode_chat(g->tok, turns, nm, ids, n);
    json_decref(keep);
    free(turns);
    if (rc)
        snprintf(err, errcap, "cannot encode the conversation");
    return rc;
}

int gen_encode_chat(struct generator *g, const json_t *messages, const json_t *tools,
                    int32_t **ids, size_t *n, struct gen_stops *stops, char *err, size_t errcap)
{
    *ids = NULL;
    *n = 0;
    stops->n = 0;
    if (g->fmt_err[0]) {
        snprintf(err, errcap, "%s", g->fmt_err);
        return GEN_BAD_CHAT;
    }
    if (!g->fmt) {
        if (plain_chat(g, messages, ids, n, err, errcap))
            return GEN_BAD_CHAT;
    } else {
        char *text;
        if (chat_format_prompt(g->fmt, messages, tools, &text, err, errcap))
            return GEN_BAD_CHAT;
        int rc = tokenizer_encode_special(g->tok, text, strlen(text), ids, n);
        free(text);
        if (rc) {
            snprintf(err, errcap, "cannot encode the conversation");
            return -1;
        }
    }
    stops->id[stops->n++] = g->eos;
    stops->n += chat_format_stop_ids(g->fmt, g->tok, stops->id + 1, GEN_MAX_STOP);
    return 0;
}

int gen_run_chat(struct generator *g, const json_t *messages, const json_t *tools,
                 const struct gen_opts *o, struct gen_result *out, char *err, size_t errcap)
{
    memset(out, 0, sizeof *out);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = gen_encode_chat(g, messages, tools, &ids, &n, &g->stops, err, errcap);
    if (rc)
        return rc;
    return run_ids(g, ids, n, o, out, err, errcap);
}
