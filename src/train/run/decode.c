/* decode.c - KV caches and the batched forward pass (see decode.h). */
#include "train/run/decode.h"

#include <float.h>
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/kernels/gemm.h"
#include "train/kernels/rowdot.h"
#include "train/model/moe.h"
#include "train/model/ops.h"

size_t kv_cache_bytes(const struct model *m, int cap)
{
    const struct model_config *c = &m->cfg;
    return 2 * sizeof(float) * (size_t)c->n_layers * (size_t)cap *
           (size_t)(c->n_kv_heads * c->head_dim);
}

int kv_cache_init(struct kv_cache *c, const struct model *m, int cap)
{
    memset(c, 0, sizeof *c);
    c->layers = m->cfg.n_layers;
    c->kd = m->cfg.n_kv_heads * m->cfg.head_dim;
    size_t n = (size_t)c->layers * (size_t)cap * (size_t)c->kd;
    c->k = malloc(2 * n * sizeof(float));
    if (!c->k)
        return -1;
    c->v = c->k + n;
    c->cap = cap;
    return 0;
}

void kv_cache_free(struct kv_cache *c)
{
    free(c->k);
    memset(c, 0, sizeof *c);
}

/* Activations of up to `rows` new tokens of up to `seqs` sequences, caches
 * of up to `ctx` positions, adapters of rank up to `r`. */
struct decode_work {
    const struct model *m; /* the model the sizes are for */
    int rows, seqs, ctx, r;
    int32_t *ids;                      /* (rows) */
    float *x, *ln, *q, *kt, *vt, *ao, *tmp; /* (rows, ...) */
    float *rstd; /* (rows, heads): a row's scale, or each head's (Qwen3's q/k norms) */
    float *g, *u, *h;                  /* (rows, I) */
    float *xa, *att;                   /* (rows, r); (ctx) */
    float *last, *lnl;                 /* (seqs, C) */
    struct linear_scratch ls;
    struct moe_acts *moe; /* a mixture of experts' routing (moe.h), or NULL */
    float *mem;
    struct decode_seq *order; /* (seqs): the batch, prompts first */
    int *from;                /* (seqs): order[i] is the caller's seqs[from[i]] */
    struct decode_passes passes;
};

struct decode_work *decode_work_new(void)
{
    return calloc(1, sizeof(struct decode_work));
}

void decode_work_free(struct decode_work *w)
{
    if (!w)
        return;
    free(w->ids);
    free(w->mem);
    free(w->order);
    free(w->from);
    moe_acts_free(w->moe);
    free(w);
}

struct decode_passes decode_work_passes(const struct decode_work *w)
{
    return w->passes;
}

static int work_fit(struct decode_work *w, const struct model *m, int rows, int seqs, int ctx,
                    int r)
{
    if (w->m != m) { /* another model: sized again from nothing */
        w->rows = w->seqs = w->ctx = w->r = 0;
        free(w->mem);
        w->mem = NULL;
        moe_acts_free(w->moe);
        w->moe = NULL;
        w->m = m;
    }
    if (w->mem && rows <= w->rows && seqs <= w->seqs && ctx <= w->ctx && r <= w->r)
        return 0;
    rows = rows > w->rows ? rows : w->rows;
    seqs = seqs > w->seqs ? seqs : w->seqs;
    ctx = ctx > w->ctx ? ctx : w->ctx;
    r = r > w->r ? r : w->r;
    const struct model_config *c = &m->cfg;
    size_t C = (size_t)c->hidden, N = (size_t)rows, S = (size_t)seqs;
    size_t qd = (size_t)c->n_heads * c->head_dim, kd = (size_t)c->n_kv_heads * c->head_dim;
    size_t F = (size_t)c->intermediate, R = (size_t)r;
    int widest = c->intermediate > c->moe_intermediate ? c->intermediate : c->moe_intermediate;
    size_t sizes[] = {N * C, N * C, N * qd, N * kd, N * kd, N * qd, N * C, N * (size_t)c->n_heads,
                      N * F, N * F, N * F, N * R, (size_t)ctx, S * C, S * C,
                      linear_scratch_floats(widest),
                      N * R};
    float **dst[] = {&w->x, &w->ln, &w->q, &w->kt, &w->vt, &w->ao, &w->tmp, &w->rstd,
                     &w->g, &w->u, &w->h, &w->xa, &w->att, &w->last, &w->lnl,
                     &w->ls.deq, &w->ls.tmp};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += sizes[i];
    float *mem = malloc(total * sizeof(float));
    int32_t *ids = malloc(N * sizeof *ids);
    struct decode_seq *order = malloc(S * sizeof *order);
    int *from = malloc(S * sizeof *from);
    struct moe_acts *moe = c->n_experts > 0 ? moe_acts_create(m, N) : NULL;
    if (!mem || !ids || !order || !from || (c->n_experts > 0 && !moe)) {
        free(mem);
        free(ids);
        free(order);
        free(from);
        moe_acts_free(moe);
        return -1;
    }
    free(w->mem);
    free(w->ids);
    free(w->order);
    free(w->from);
    moe_acts_free(w->moe);
    w->mem = mem;
    w->ids = ids;
    w->order = order;
    w->from = from;
    w->moe = moe;
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *dst[i] = mem + off;
        off += sizes[i];
    }
    w->ls.deq_cap = sizes[15];
    w->ls.tmp_cap = sizes[16];
    w->ls.dropout = (struct linear_dropout){0}; /* decoding never drops */
    w->ls.drop = NULL;
    w->ls.drop_cap = 0;
    w->rows = rows;
    w->seqs = seqs;
    w->ctx = ctx;
    w->r = r;
    return 0;
}

/* y (n,out) = x (n,in) W^T + b for an fp32 W, each weight row read once
 * for all n rows, in register tiles, each output one fixed-order dot
 * product (kernels/rowdot.h): a row's result never depends on n or on the
 * threads, so a sequence decoded in a batch gets the numbers it gets
 * alone, and a prompt's rows the numbers its tokens get decoded one at a
 * time. The model's own adapter, if any, as linear_forward adds it. */
static void rows_times_wt(const struct linear *l, float *y, const float *x, int n, float *xa)
{
    rowdot_times_wt(y, x, n, l->w, l->bias, l->out, l->in);
    if (l->r > 0) {
        gemm(0, 1, n, l->r, l->in, 1.0f, x, l->in, l->la, l->in, 0.0f, xa, l->r);
        gemm(0, 1, n, l->out, l->r, l->scale, xa, l->r, l->lb, l->r, 1.0f, y, l->out);
    }
}

/* A prompt of at most this many tokens goes through the tiles, a longer
 * one through the packed product: at 21 rows of the 1B shape's products
 * the tiles run 1.4x to 1.6x the packed product, from about 32 rows the
 * packed one is ahead, at 64 and more well ahead (it fuses the multiply
 * and the add; bench/serve/prefill_flops.sh). The rule reads a prompt's
 * own length only, so the prompts beside it never change its numbers. */
#define TILE_PROMPT_MAX 32

/* The kinds of rows, in the order decode_forward lays them out: each kind
 * is one run of rows, one product a matrix. */
enum row_kind { ROWS_LONG_PROMPT, ROWS_SHORT_PROMPT, ROWS_ONE_TOKEN, ROW_KINDS };

static enum row_kind row_kind(int n)
{
    return n == 1 ? ROWS_ONE_TOKEN : n <= TILE_PROMPT_MAX ? ROWS_SHORT_PROMPT : ROWS_LONG_PROMPT;
}

/* Whether weight l goes through the tiles for one-token rows and short
 * prompts: it must be fp32 and held in memory. */
static bool tiled(const struct linear *l)
{
    return l->kind == WK_F32 && l->w;
}

/* y (n rows) = x W^T + b (+ the model's adapter): by rows_times_wt when W
 * is fp32 and the rows are one-token rows or short prompts, else by
 * linear_forward. */
static void times_wt(const struct linear *l, float *y, const float *x, int n, enum row_kind kind,
                     struct decode_work *w)
{
    if (kind != ROWS_LONG_PROMPT && tiled(l))
        rows_times_wt(l, y, x, n, w->xa);
    else
        linear_forward(l, y, x, n, w->xa, &w->ls);
}

/* Which product rows of kind k join through weight l: with an fp32
 * weight the short prompts' rows and the one-token rows take the same
 * tiles (one order of sums), so they are one product, one read of the
 * weight; otherwise each kind is a product of its own. */
static int product_of(const struct linear *l, enum row_kind k)
{
    return tiled(l) && k == ROWS_ONE_TOKEN ? ROWS_SHORT_PROMPT : (int)k;
}

/* y (rows) = the projection p of layer l of x, each sequence's adapter
 * added to its own rows. Consecutive sequences whose rows join one
 * product (product_of) go through times_wt together. */
static void project(struct model *m, struct decode_work *w, int l, int p, float *y,
                    const float *x, const struct decode_seq *seqs, int n_seq, int rows)
{
    const struct linear *base = &m->layers[l].proj[p];
    (void)rows;
    for (int s = 0, row0 = 0; s < n_seq;) {
        enum row_kind kind = row_kind(seqs[s].n);
        int product = product_of(base, kind), run = 0, e = s;
        bool prompt = false;
        for (; e < n_seq && product_of(base, row_kind(seqs[e].n)) == product; e++) {
            run += seqs[e].n;
            prompt |= seqs[e].n > 1;
        }
        if (l == 0 && p == PROJ_Q) { /* one product per matrix: one pass over the weights */
            w->passes.prompt += prompt;
            w->passes.token += !prompt;
        }
        times_wt(base, y + (size_t)row0 * base->out, x + (size_t)row0 * base->in, run, kind, w);
        row0 += run;
        s = e;
    }
    int row0 = 0;
    for (int s = 0; s < n_seq; row0 += seqs[s].n, s++) {
        const struct decode_adapter *ad = seqs[s].adapter;
        const struct linear *a = ad && l < ad->n_layers ? &ad->lin[l * PROJ_COUNT + p] : NULL;
        if (!a || a->r == 0)
            continue;
        int n = seqs[s].n;
        gemm(0, 1, n, a->r, a->in, 1.0f, x + (size_t)row0 * a->in, a->in, a->la, a->in, 0.0f,
             w->xa, a->r);
        gemm(0, 1, n, a->out, a->r, a->scale, w->xa, a->r, a->lb, a->r, 1.0f,
             y + (size_t)row0 * a->out, a->out);
    }
}

/* Attention of the n new tokens of one sequence (queries q, n rows) over
 * its cache up to each one's position, into ao. */
static void attend(const struct model_config *c, const struct kv_cache *kv, int l, int p0,
                   int n, const float *q, float *ao, float *att)
{
    int H = c->n_heads, KV = c->n_kv_heads, hd = c->head_dim;
    int qd = H * hd, kd = KV * hd, group = H / KV;
    float scale = model_attn_scale(c);
    const float *kc = kv->k + (size_t)l * kv->cap * kd, *vc = kv->v + (size_t)l * kv->cap * kd;
    int win = model_layer_window(c, l);
    for (int i = 0; i < n; i++) {
        int pos = p0 + i;
        int lo = win > 0 && pos - win + 1 > 0 ? pos - win + 1 : 0; /* Gemma's local layers */
        for (int h = 0; h < H; h++) {
            const float *qi = q + (size_t)i * qd + (size_t)h * hd;
            int kh = h / group;
            float mx = -FLT_MAX;
            for (int j = lo; j <= pos; j++) {
                const float *kj = kc + (size_t)j * kd + (size_t)kh * hd;
                float s = 0.0f;
                for (int d = 0; d < hd; d++)
                    s += qi[d] * kj[d];
                att[j] = s * scale;
                if (c->attn_softcap > 0.0f)
                    ops_softcap(&att[j], 1, c->attn_softcap);
                if (att[j] > mx)
                    mx = att[j];
            }
            float sum = 0.0f;
            for (int j = lo; j <= pos; j++) {
                att[j] = expf(att[j] - mx);
                sum += att[j];
            }
            float *o = ao + (size_t)i * qd + (size_t)h * hd;
            memset(o, 0, sizeof(float) * hd);
            for (int j = lo; j <= pos; j++) {
                const float *vj = vc + (size_t)j * kd + (size_t)kh * hd;
                float pj = att[j] / sum;
                for (int d = 0; d < hd; d++)
                    o[d] += pj * vj[d];
            }
        }
    }
}

/* The adapters' widest rank over the batch (and the model's own). */
static int widest_rank(const struct model *m, const struct decode_seq *seqs, int n_seq)
{
    int r = m->opts.lora_r > 0 ? m->opts.lora_r : 1;
    for (int s = 0; s < n_seq; s++) {
        const struct decode_adapter *ad = seqs[s].adapter;
        for (int i = 0; ad && i < ad->n_layers * PROJ_COUNT; i++)
            r = ad->lin[i].r > r ? ad->lin[i].r : r;
    }
    return r;
}

/* Rows scored at a time for a sequence's decode_rows: the tiles' widest
 * (one read of the head for this many rows, each row's sums in the order
 * it has alone). */
#define SCORE_ROWS TILE_PROMPT_MAX

/* The scratch of scoring (decode_rows) for this batch, (SCORE_ROWS, C) for
 * the normed rows then (SCORE_ROWS, vocab) for their logits: NULL with
 * *need false when no sequence asks, NULL with *need true when memory ran
 * out. */
static float *score_scratch(const struct model_config *c, const struct decode_seq *seqs,
                            int n_seq, bool *need)
{
    *need = false;
    for (int s = 0; s < n_seq; s++)
        *need |= seqs[s].rows && seqs[s].n > 1;
    return *need ? malloc(sizeof(float) * SCORE_ROWS * ((size_t)c->hidden + (size_t)c->vocab))
                 : NULL;
}

/* Hands s's logits after each of its new tokens but the last, whose final
 * hidden states are x (s->n rows), to s->rows->fn. */
static void score(struct model *m, struct decode_work *w, const struct decode_seq *s,
                  const float *x, float *scratch)
{
    const struct model_config *c = &m->cfg;
    int C = c->hidden, V = c->vocab;
    float *ln = scratch, *lg = scratch + (size_t)SCORE_ROWS * C;
    struct linear *head = c->tied ? &m->embed : &m->head;
    for (int i0 = 0; i0 < s->n - 1; i0 += SCORE_ROWS) {
        int k = s->n - 1 - i0 < SCORE_ROWS ? s->n - 1 - i0 : SCORE_ROWS;
        ops_rmsnorm_forward(ln, w->rstd, x + (size_t)i0 * C, m->norm_f, k, C, c->rms_eps);
        times_wt(head, lg, ln, k, ROWS_SHORT_PROMPT, w); /* a row's bits as alone */
        if (c->final_softcap > 0.0f)
            ops_softcap(lg, (size_t)k * V, c->final_softcap);
        for (int j = 0; j < k; j++)
            s->rows->fn(s->rows->ctx, i0 + j, lg + (size_t)j * V, V);
    }
}

int decode_forward(struct model *m, struct decode_work *w, struct decode_seq *seqs, int n_seq,
                   float *logits)
{
    const struct model_config *c = &m->cfg;
    int C = c->hidden, H = c->n_heads, KV = c->n_kv_heads, hd = c->head_dim;
    int qd = H * hd, kd = KV * hd;
    int rows = 0, ctx = 0;
    for (int s = 0; s < n_seq; s++) {
        rows += seqs[s].n;
        int end = seqs[s].kv->len + seqs[s].n;
        ctx = end > ctx ? end : ctx;
    }
    bool scoring;
    float *scratch = score_scratch(c, seqs, n_seq, &scoring);
    if (rows < 1 || (scoring && !scratch) || model_rope_ensure(m, ctx) ||
        work_fit(w, m, rows, n_seq, ctx, widest_rank(m, seqs, n_seq))) {
        free(scratch);
        return -1;
    }
    /* The long prompts' rows first, then the short prompts', then the
     * one-token rows, each in the caller's order: each kind is one run of
     * rows, one product a matrix. A prompt of one token is a one-token
     * row, as it is alone. */
    int n_order = 0;
    for (int kind = 0; kind < ROW_KINDS; kind++)
        for (int s = 0; s < n_seq; s++)
            if (row_kind(seqs[s].n) == (enum row_kind)kind) {
                w->from[n_order] = s;
                w->order[n_order++] = seqs[s];
            }
    seqs = w->order;
    for (int s = 0, row0 = 0; s < n_seq; row0 += seqs[s].n, s++)
        memcpy(w->ids + row0, seqs[s].ids, sizeof(int32_t) * (size_t)seqs[s].n);
    model_embed(m, w->ids, rows, w->x);
    for (int l = 0; l < c->n_layers; l++) {
        struct model_layer *L = &m->layers[l];
        ops_rmsnorm_forward(w->ln, w->rstd, w->x, L->ln1, rows, C, c->rms_eps);
        project(m, w, l, PROJ_Q, w->q, w->ln, seqs, n_seq, rows);
        project(m, w, l, PROJ_K, w->kt, w->ln, seqs, n_seq, rows);
        project(m, w, l, PROJ_V, w->vt, w->ln, seqs, n_seq, rows);
        if (L->qn) { /* Qwen3: each head of q and k normalized before the rotation */
            ops_rmsnorm_forward(w->q, w->rstd, w->q, L->qn, rows * H, hd, c->rms_eps);
            ops_rmsnorm_forward(w->kt, w->rstd, w->kt, L->kn, rows * KV, hd, c->rms_eps);
        }
        for (int s = 0, row0 = 0; s < n_seq; row0 += seqs[s].n, s++) {
            struct kv_cache *kv = seqs[s].kv;
            int n = seqs[s].n, p0 = kv->len;
            float *q = w->q + (size_t)row0 * qd, *k = w->kt + (size_t)row0 * kd;
            const float *rc, *rs; /* Gemma 3's local layers have their own tables */
            model_layer_rope(m, l, &rc, &rs);
            if (!c->no_rope[l]) { /* SmolLM3's layers without positions skip it */
                ops_rope_forward(q, 1, n, H, hd, model_rot_dim(c), p0, rc, rs);
                ops_rope_forward(k, 1, n, KV, hd, model_rot_dim(c), p0, rc, rs);
            }
            size_t at = ((size_t)l * kv->cap + (size_t)p0) * kd;
            memcpy(kv->k + at, k, sizeof(float) * (size_t)n * kd);
            memcpy(kv->v + at, w->vt + (size_t)row0 * kd, sizeof(float) * (size_t)n * kd);
            attend(c, kv, l, p0, n, q, w->ao + (size_t)row0 * qd, w->att);
        }
        project(m, w, l, PROJ_O, w->tmp, w->ao, seqs, n_seq, rows);
        if (L->ln3) { /* Gemma 2's norm after attention (w->ln is free here) */
            ops_rmsnorm_forward(w->ln, w->rstd, w->tmp, L->ln3, rows, C, c->rms_eps);
            memcpy(w->tmp, w->ln, sizeof(float) * (size_t)rows * C);
        }
        ops_add(w->x, w->x, w->tmp, (size_t)rows * C);
        ops_rmsnorm_forward(w->ln, w->rstd, w->x, L->ln2, rows, C, c->rms_eps);
        if (L->moe) { /* the experts carry no adapter (docs/models.md) */
            moe_forward(m, w->moe, l, w->tmp, w->ln, rows, &w->ls);
        } else {
            project(m, w, l, PROJ_GATE, w->g, w->ln, seqs, n_seq, rows);
            project(m, w, l, PROJ_UP, w->u, w->ln, seqs, n_seq, rows);
            model_mlp_act(m, w->h, w->g, w->u, (size_t)rows * c->intermediate);
            project(m, w, l, PROJ_DOWN, w->tmp, w->h, seqs, n_seq, rows);
        }
        if (L->ln4) { /* and after the MLP */
            ops_rmsnorm_forward(w->ln, w->rstd, w->tmp, L->ln4, rows, C, c->rms_eps);
            memcpy(w->tmp, w->ln, sizeof(float) * (size_t)rows * C);
        }
        ops_add(w->x, w->x, w->tmp, (size_t)rows * C);
    }
    /* only each sequence's last position's logits are needed */
    for (int s = 0, row0 = 0; s < n_seq; row0 += seqs[s].n, s++) {
        memcpy(w->last + (size_t)w->from[s] * C, w->x + (size_t)(row0 + seqs[s].n - 1) * C,
               sizeof(float) * (size_t)C);
        seqs[s].kv->len += seqs[s].n;
    }
    ops_rmsnorm_forward(w->lnl, w->rstd, w->last, m->norm_f, n_seq, C, c->rms_eps);
    struct linear *head = c->tied ? &m->embed : &m->head;
    times_wt(head, logits, w->lnl, n_seq, ROWS_ONE_TOKEN, w); /* one row per sequence */
    if (c->final_softcap > 0.0f)
        ops_softcap(logits, (size_t)n_seq * c->vocab, c->final_softcap);
    for (int s = 0, row0 = 0; scoring && s < n_seq; row0 += seqs[s].n, s++)
        if (seqs[s].rows && seqs[s].n > 1)
            score(m, w, &seqs[s], w->x + (size_t)row0 * C, scratch);
    free(scratch);
    return 0;
}
