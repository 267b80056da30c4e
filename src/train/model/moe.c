/* moe.c - the mixture-of-experts MLP: config keys, routing, the experts'
 * grouped products, the auxiliary loss, and their backward (contract in
 * moe.h). */
#include "train/model/moe.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/model/model.h"
#include "train/model/ops.h"

/* ---------------------------------------------------------------- config */

int moe_config_parse(json_t *o, struct model_config *c, char *err, size_t errcap)
{
    static const char *const keys[] = {"num_experts", "num_experts_per_tok",
                                       "moe_intermediate_size", "decoder_sparse_step"};
    long val[] = {0, 0, 0, 1}; /* the defaults */
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(o, keys[i]);
        if (json_is_integer(v))
            val[i] = (long)json_integer_value(v);
        else if (v && !json_is_null(v)) {
            snprintf(err, errcap, "config.json: field \"%s\" must be an integer", keys[i]);
            return -1;
        }
    }
    long e = val[0], k = val[1], w = val[2], step = val[3];
    json_t *coef = json_object_get(o, "router_aux_loss_coef");
    if (coef && !json_is_null(coef) && !json_is_number(coef)) {
        snprintf(err, errcap, "config.json: field \"router_aux_loss_coef\" must be a number");
        return -1;
    }
    if (e < 0 || e > MOE_MAX_EXPERTS || k < 0 || k > e || w < 0 ||
        w > 8L * MODEL_MAX_HIDDEN || step < 1 || step > MODEL_MAX_LAYERS) {
        snprintf(err, errcap, "config.json: num_experts (at most %d), num_experts_per_tok, "
                              "moe_intermediate_size or decoder_sparse_step out of range",
                 MOE_MAX_EXPERTS);
        return -1;
    }
    c->n_experts = (int)e;
    c->n_experts_used = (int)k;
    c->moe_intermediate = (int)w;
    c->sparse_step = (int)step;
    c->norm_topk_prob = json_is_true(json_object_get(o, "norm_topk_prob"));
    c->router_aux_coef = coef && json_is_number(coef) ? (float)json_number_value(coef) : 0.001f;
    memset(c->mlp_only, 0, sizeof c->mlp_only);
    json_t *only = json_object_get(o, "mlp_only_layers");
    if (only && !json_is_null(only) && !json_is_array(only)) {
        snprintf(err, errcap, "config.json: mlp_only_layers must be a list of layer indices");
        return -1;
    }
    size_t i;
    json_t *v;
    json_array_foreach(only, i, v)
    {
        json_int_t l = json_is_integer(v) ? json_integer_value(v) : -1;
        if (l < 0 || l >= MODEL_MAX_LAYERS) {
            snprintf(err, errcap, "config.json: mlp_only_layers must be a list of layer "
                                  "indices below %d", MODEL_MAX_LAYERS);
            return -1;
        }
        c->mlp_only[l / 32] |= 1u << (l % 32);
    }
    return 0;
}

int moe_config_check(const struct model_config *c, char *err, size_t errcap)
{
    if (c->n_experts == 0)
        return 0;
    if (c->n_experts < 1 || c->n_experts > MOE_MAX_EXPERTS || c->n_experts_used < 1 ||
        c->n_experts_used > c->n_experts || c->moe_intermediate < 1 ||
        c->moe_intermediate > 8 * MODEL_MAX_HIDDEN || c->sparse_step < 1 ||
        !(c->router_aux_coef >= 0.0f)) {
        snprintf(err, errcap, "config.json: a mixture of experts needs num_experts 1..%d, "
                              "num_experts_per_tok 1..num_experts, a positive "
                              "moe_intermediate_size and decoder_sparse_step, and "
                              "router_aux_loss_coef >= 0", MOE_MAX_EXPERTS);
        return -1;
    }
    return 0;
}

void moe_config_to_json(const struct model_config *c, json_t *o)
{
    json_t *keys = json_pack("{si si si sb sf si sb}", "num_experts", c->n_experts,
                             "num_experts_per_tok", c->n_experts_used, "moe_intermediate_size",
                             c->moe_intermediate, "norm_topk_prob", c->norm_topk_prob,
                             "router_aux_loss_coef", (double)c->router_aux_coef,
                             "decoder_sparse_step", c->sparse_step, "output_router_logits", 1);
    json_object_update(o, keys);
    json_decref(keys);
    json_t *only = json_array();
    for (int l = 0; l < c->n_layers; l++)
        if (c->mlp_only[l / 32] & (1u << (l % 32)))
            json_array_append_new(only, json_integer(l));
    json_object_set_new(o, "mlp_only_layers", only);
}

int moe_layer_sparse(const struct model_config *c, int l)
{
    if (c->n_experts <= 0 || l < 0 || l >= MODEL_MAX_LAYERS)
        return 0;
    if (c->mlp_only[l / 32] & (1u << (l % 32)))
        return 0;
    return c->sparse_step > 0 && (l + 1) % c->sparse_step == 0;
}

int moe_sparse_layers(const struct model_config *c)
{
    int n = 0;
    for (int l = 0; l < c->n_layers; l++)
        n += moe_layer_sparse(c, l);
    return n;
}

size_t moe_layer_params(const struct model_config *c, int active)
{
    size_t per = 3 * (size_t)c->hidden * c->moe_intermediate;
    size_t n = active ? (size_t)c->n_experts_used : (size_t)c->n_experts;
    return (size_t)c->n_experts * c->hidden + n * per;
}

void moe_each_linear(struct model *m, void (*fn)(struct linear *, void *), void *ctx)
{
    for (int l = 0; l < m->cfg.n_layers; l++) {
        struct moe_layer *x = m->layers ? m->layers[l].moe : NULL;
        if (!x)
            continue;
        fn(&x->router, ctx);
        for (int i = 0; x->experts && i < m->cfg.n_experts * MOE_PROJ_COUNT; i++)
            fn(&x->experts[i], ctx);
    }
}

/* ----------------------------------------------------------- activations */

struct moe_acts {
    size_t N;   /* tokens of capacity */
    size_t bytes; /* all it holds */
    int L;      /* layers (sparse ones hold their slot) */
    /* kept per layer, (L, ...) */
    float *probs;       /* (N, E) softmax of the router */
    float *w;           /* (N, k) the chosen experts' weights */
    int32_t *sel;       /* (N, k) the chosen experts */
    int32_t *order;     /* (N k) slot n*k+j of each grouped row */
    int32_t *pos;       /* (N k) grouped row of slot n*k+j */
    int32_t *off;       /* (E + 1) each expert's first grouped row */
    float *g, *u;       /* (N k, I) the experts' gate and up outputs */
    /* the auxiliary loss: counts over the pass's sparse layers */
    double *chosen, *psum; /* (E) */
    int layers_seen;
    size_t tokens;      /* N of the pass */
    /* scratch, one layer at a time */
    float *x, *y;       /* (N k, C) grouped inputs; outputs (forward), the rows' dout
                         * then w dout (backward) */
    float *h, *dh, *dg, *du; /* (N k, I) */
    float *dx;          /* (N k, C) */
    float *dlog;        /* (N, E) */
    double *dw;         /* (N, k) */
};

struct moe_acts *moe_acts_create(const struct model *m, size_t N)
{
    const struct model_config *c = &m->cfg;
    size_t L = (size_t)c->n_layers, E = (size_t)c->n_experts, K = (size_t)c->n_experts_used;
    size_t C = (size_t)c->hidden, I = (size_t)c->moe_intermediate, NK = N * K;
    struct moe_acts *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->N = N;
    a->L = (int)L;
    a->probs = malloc(L * N * E * sizeof(float));
    a->w = malloc(L * NK * sizeof(float));
    a->sel = malloc(L * NK * sizeof(int32_t));
    a->order = malloc(L * NK * sizeof(int32_t));
    a->pos = malloc(L * NK * sizeof(int32_t));
    a->off = malloc(L * (E + 1) * sizeof(int32_t));
    a->g = malloc(L * NK * I * sizeof(float));
    a->u = malloc(L * NK * I * sizeof(float));
    a->chosen = calloc(E, sizeof(double));
    a->psum = calloc(E, sizeof(double));
    a->x = malloc(NK * C * sizeof(float));
    a->y = malloc(NK * C * sizeof(float));
    a->dx = malloc(NK * C * sizeof(float));
    a->h = malloc(NK * I * sizeof(float));
    a->dh = malloc(NK * I * sizeof(float));
    a->dg = malloc(NK * I * sizeof(float));
    a->du = malloc(NK * I * sizeof(float));
    a->dlog = malloc(N * E * sizeof(float));
    a->dw = malloc(NK * sizeof(double));
    if (!a->probs || !a->w || !a->sel || !a->order || !a->pos || !a->off || !a->g || !a->u ||
        !a->chosen || !a->psum || !a->x || !a->y || !a->dx || !a->h || !a->dh || !a->dg ||
        !a->du || !a->dlog || !a->dw) {
        moe_acts_free(a);
        return NULL;
    }
    /* kept: probs, w sel order pos, off, g u; scratch: x y dx, h dh dg du, dlog, dw */
    a->bytes = L * N * E * 4 + L * NK * 16 + L * (E + 1) * 4 + 2 * L * NK * I * 4 +
               3 * NK * C * 4 + 4 * NK * I * 4 + N * E * 4 + NK * 8 + 2 * E * 8;
    return a;
}

void moe_acts_free(struct moe_acts *a)
{
    if (!a)
        return;
    void *bufs[] = {a->probs, a->w, a->sel, a->order, a->pos, a->off, a->g, a->u,
                    a->chosen, a->psum, a->x, a->y, a->dx, a->h, a->dh, a->dg,
                    a->du, a->dlog, a->dw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(a);
}

size_t moe_acts_bytes(const struct moe_acts *a)
{
    return a ? a->bytes : 0;
}

void moe_begin(struct moe_acts *a)
{
    a->layers_seen = 0;
    a->tokens = 0;
}

/* One layer's view of the kept arrays. */
struct moe_view {
    float *probs, *w, *g, *u;
    int32_t *sel, *order, *pos, *off;
};

static void view(const struct model *m, const struct moe_acts *a, int l, struct moe_view *v)
{
    const struct model_config *c = &m->cfg;
    size_t N = a->N, E = (size_t)c->n_experts, NK = N * (size_t)c->n_experts_used;
    size_t I = (size_t)c->moe_intermediate;
    v->probs = a->probs + (size_t)l * N * E;
    v->w = a->w + (size_t)l * NK;
    v->sel = a->sel + (size_t)l * NK;
    v->order = a->order + (size_t)l * NK;
    v->pos = a->pos + (size_t)l * NK;
    v->off = a->off + (size_t)l * (E + 1);
    v->g = a->g + (size_t)l * NK * I;
    v->u = a->u + (size_t)l * NK * I;
}

/* Softmax of each router row, the top k by probability (the lower index
 * first among equals) and their weights. */
static void route(const struct model_config *c, const float *logits, struct moe_view *v, int N)
{
    int E = c->n_experts, K = c->n_experts_used;
#pragma omp parallel for schedule(static) if (N > 256)
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * E;
        float *p = v->probs + (size_t)n * E;
        float mx = z[0];
        for (int e = 1; e < E; e++)
            mx = z[e] > mx ? z[e] : mx;
        double s = 0.0;
        for (int e = 0; e < E; e++)
            s += p[e] = expf(z[e] - mx);
        for (int e = 0; e < E; e++)
            p[e] = (float)(p[e] / s);
        int32_t *sel = v->sel + (size_t)n * K;
        float *w = v->w + (size_t)n * K;
        double wsum = 0.0;
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j && !taken; i++)
                    taken = sel[i] == e;
                if (!taken && (best < 0 || p[e] > p[best]))
                    best = e;
            }
            sel[j] = best;
            w[j] = p[best];
            wsum += p[best];
        }
        if (c->norm_topk_prob)
            for (int j = 0; j < K; j++)
                w[j] = (float)(w[j] / wsum);
    }
}

/* Groups the N*k slots by expert, in token order within each: off, order
 * and pos. */
static void group(const struct model_config *c, struct moe_view *v, int N)
{
    int E = c->n_experts, K = c->n_experts_used;
    size_t NK = (size_t)N * K;
    for (int e = 0; e <= E; e++)
        v->off[e] = 0;
    for (size_t s = 0; s < NK; s++)
        v->off[v->sel[s] + 1]++;
    for (int e = 0; e < E; e++)
        v->off[e + 1] += v->off[e];
    assert(E > 0 && E <= MOE_MAX_EXPERTS);
    int32_t next[MOE_MAX_EXPERTS];
    for (int e = 0; e < E; e++) /* (a loop: GCC at -O2 under ASan doubted memcpy's bound) */
        next[e] = v->off[e];
    for (size_t s = 0; s < NK; s++) {
        int32_t r = next[v->sel[s]]++;
        v->order[r] = (int32_t)s;
        v->pos[s] = r;
    }
}

/* xg (N k, C): each grouped row's token input. */
static void gather(float *xg, const float *x, const int32_t *order, size_t NK, int K, int C)
{
#pragma omp parallel for schedule(static) if (NK * C > 65536)
    for (size_t r = 0; r < NK; r++)
        memcpy(xg + r * C, x + (size_t)(order[r] / K) * C, sizeof(float) * C);
}

/* Projection p (in_w -> out_w) of every expert with tokens, one product
 * over its grouped rows of `in`: forward into y when dy is NULL; else
 * backward, dx += dy W (not when dx is NULL) and the weight's gradient
 * (where it trains). */
static void experts_proj(struct moe_layer *x, const struct moe_view *v, int E, int p, int in_w,
                         int out_w, const float *in, float *y, const float *dy, float *dx,
                         struct linear_scratch *ls)
{
    for (int e = 0; e < E; e++) {
        int r0 = v->off[e], n = v->off[e + 1] - r0;
        if (n == 0)
            continue;
        struct linear *l = &x->experts[e * MOE_PROJ_COUNT + p];
        const float *xe = in + (size_t)r0 * in_w;
        if (!dy)
            linear_forward(l, y + (size_t)r0 * out_w, xe, n, NULL, ls);
        else if (dx || l->dw)
            linear_backward(l, dx ? dx + (size_t)r0 * in_w : NULL, dy + (size_t)r0 * out_w, xe,
                            NULL, n, ls);
    }
}

/* dx += dy Wd for every expert's down projection with tokens, one product
 * over its grouped rows; no weight gradient (experts_proj takes it). */
static void experts_down_dx(struct moe_layer *x, const struct moe_view *v, int E, int in_w,
                            int out_w, const float *dy, float *dx, struct linear_scratch *ls)
{
    for (int e = 0; e < E; e++) {
        int r0 = v->off[e], n = v->off[e + 1] - r0;
        if (n == 0)
            continue;
        struct linear l = x->experts[e * MOE_PROJ_COUNT + MOE_DOWN];
        assert(l.r == 0); /* the experts have no adapters */
        l.dw = NULL, l.dbias = NULL; /* a copy that takes the input's gradient only */
        linear_backward(&l, dx + (size_t)r0 * in_w, dy + (size_t)r0 * out_w, NULL, NULL, n, ls);
    }
}

/* Sparse layer l's experts and kept arrays; its products never drop (the
 * experts have no adapters). */
static struct moe_layer *begin_layer(struct model *m, struct moe_acts *a, int l,
                                     struct moe_view *v, struct linear_scratch *ls)
{
    view(m, a, l, v);
    ls->dropout = (struct linear_dropout){0};
    return m->layers[l].moe;
}

void moe_forward(struct model *m, struct moe_acts *a, int l, float *out, const float *x, int N,
                 struct linear_scratch *ls)
{
    const struct model_config *c = &m->cfg;
    struct moe_view v;
    struct moe_layer *ml = begin_layer(m, a, l, &v, ls);
    int E = c->n_experts, K = c->n_experts_used, C = c->hidden, I = c->moe_intermediate;
    size_t NK = (size_t)N * K;
    linear_forward(&ml->router, a->dlog, x, N, NULL, ls);
    route(c, a->dlog, &v, N);
    group(c, &v, N);
    for (int e = 0; e < E; e++) {
        double s = 0.0;
        for (int n = 0; n < N; n++)
            s += v.probs[(size_t)n * E + e];
        a->psum[e] = (a->layers_seen ? a->psum[e] : 0.0) + s;
        a->chosen[e] = (a->layers_seen ? a->chosen[e] : 0.0) + (v.off[e + 1] - v.off[e]);
    }
    a->layers_seen++;
    a->tokens = (size_t)N;
    gather(a->x, x, v.order, NK, K, C);
    experts_proj(ml, &v, E, MOE_GATE, C, I, a->x, v.g, NULL, NULL, ls);
    experts_proj(ml, &v, E, MOE_UP, C, I, a->x, v.u, NULL, NULL, ls);
    ops_swiglu_forward(a->h, v.g, v.u, NK * I);
    experts_proj(ml, &v, E, MOE_DOWN, I, C, a->h, a->y, NULL, NULL, ls);
#pragma omp parallel for schedule(static) if ((size_t)N * C > 65536)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        memset(o, 0, sizeof(float) * C);
        for (int j = 0; j < K; j++) {
            const float *y = a->y + (size_t)v.pos[(size_t)n * K + j] * C;
            float w = v.w[(size_t)n * K + j];
            for (int i = 0; i < C; i++)
                o[i] += w * y[i];
        }
    }
}

double moe_aux_loss(const struct model *m, const struct moe_acts *a)
{
    const struct model_config *c = &m->cfg;
    if (!a || a->layers_seen == 0 || a->tokens == 0)
        return 0.0;
    double rows = (double)a->layers_seen * (double)a->tokens, s = 0.0;
    for (int e = 0; e < c->n_experts; e++)
        s += (a->chosen[e] / rows) * (a->psum[e] / rows);
    return s * c->n_experts;
}

void moe_backward(struct model *m, struct moe_acts *a, int l, float *dx, const float *dout,
                  const float *x, int N, float aux_w, struct linear_scratch *ls)
{
    const struct model_config *c = &m->cfg;
    struct moe_view v;
    struct moe_layer *ml = begin_layer(m, a, l, &v, ls);
    int E = c->n_experts, K = c->n_experts_used, C = c->hidden, I = c->moe_intermediate;
    size_t NK = (size_t)N * K;
    /* recompute the grouped inputs and the activation; each grouped row
     * takes its token's dout */
    gather(a->x, x, v.order, NK, K, C);
    ops_swiglu_forward(a->h, v.g, v.u, NK * I);
    gather(a->y, dout, v.order, NK, K, C);
    /* down's input gradient before the weight, e = dout[n] Wd (one product
     * per expert, no output recomputed): d(out)/d(w[n,j]) = dout[n] . y =
     * e . h, and the row's dh = w e */
    memset(a->dh, 0, NK * I * sizeof(float));
    experts_down_dx(ml, &v, E, I, C, a->y, a->dh, ls);
#pragma omp parallel for schedule(static) if (NK * I > 65536)
    for (size_t s = 0; s < NK; s++) {
        size_t r = (size_t)v.pos[s];
        float *dh = a->dh + r * I;
        const float *h = a->h + r * I;
        double dot = 0.0;
        for (int i = 0; i < I; i++)
            dot += (double)dh[i] * h[i];
        a->dw[s] = dot;
        float w = v.w[s];
        for (int i = 0; i < I; i++)
            dh[i] *= w;
        float *y = a->y + r * C; /* w dout[n]: the gradient of the row's output */
        for (int i = 0; i < C; i++)
            y[i] *= w;
    }
    /* down's weight gradient where the experts are trained; then the
     * activation, gate and up */
    experts_proj(ml, &v, E, MOE_DOWN, I, C, a->h, NULL, a->y, NULL, ls);
    memset(a->dg, 0, NK * I * sizeof(float));
    memset(a->du, 0, NK * I * sizeof(float));
    memset(a->dx, 0, NK * C * sizeof(float));
    ops_swiglu_backward(a->dg, a->du, a->dh, v.g, v.u, NK * I);
    experts_proj(ml, &v, E, MOE_GATE, C, I, a->x, NULL, a->dg, a->dx, ls);
    experts_proj(ml, &v, E, MOE_UP, C, I, a->x, NULL, a->du, a->dx, ls);
    /* each token's rows back into dx, and the router's gradient: through
     * the weights (normalised or not) and the auxiliary loss into the
     * probabilities, then through the softmax */
    double rows = (double)a->layers_seen * (double)a->tokens;
    double aux_scale = aux_w * (double)c->router_aux_coef * E / (rows * rows);
#pragma omp parallel for schedule(static) if ((size_t)N * C > 65536)
    for (int n = 0; n < N; n++) {
        float *d = dx + (size_t)n * C;
        const int32_t *sel = v.sel + (size_t)n * K;
        const float *w = v.w + (size_t)n * K;
        const double *dw = a->dw + (size_t)n * K;
        for (int j = 0; j < K; j++) {
            const float *r = a->dx + (size_t)v.pos[(size_t)n * K + j] * C;
            for (int i = 0; i < C; i++)
                d[i] += r[i];
        }
        const float *p = v.probs + (size_t)n * E;
        float *dz = a->dlog + (size_t)n * E;
        double dp[MOE_MAX_EXPERTS];
        for (int e = 0; e < E; e++)
            dp[e] = aux_scale * a->chosen[e];
        if (c->norm_topk_prob) {
            double sum = 0.0, dot = 0.0;
            for (int j = 0; j < K; j++) {
                sum += p[sel[j]];
                dot += dw[j] * w[j];
            }
            for (int j = 0; j < K; j++)
                dp[sel[j]] += (dw[j] - dot) / sum;
        } else {
            for (int j = 0; j < K; j++)
                dp[sel[j]] += dw[j];
        }
        double pd = 0.0;
        for (int e = 0; e < E; e++)
            pd += p[e] * dp[e];
        for (int e = 0; e < E; e++)
            dz[e] = (float)(p[e] * (dp[e] - pd));
    }
    linear_backward(&ml->router, dx, a->dlog, x, NULL, N, ls);
}
