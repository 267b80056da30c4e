/* model_pass.c - saved activations and the training forward/backward pass
 * of the decoder (contract in model.h).
 *
 * Kept per layer for the backward pass: the residual stream before the
 * layer and after attention, both RMSNorm scales, q/k (after rotation), v,
 * the attention output and each score row's log-sum-exp, the MLP gate and up projections,
 * and the LoRA products x A^T (a sparse layer's routing and its experts'
 * gate and up outputs are kept by moe.c instead of the MLP's); with
 * Qwen3's q/k norms also q and k as projected (before the norm) and each
 * head's RMSNorm scale. The normalized inputs and the SwiGLU output are
 * cheap to recompute and are not kept, to save memory.
 *
 * The output head is fused with the loss: logits exist only for rows that
 * have a target, a block of rows at a time, and are turned into their
 * gradient in place, so a 50k vocabulary never needs (B*T, V) floats.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#include "core/clock.h"
#include "core/rng.h"
#include "train/kernels/bigmem.h"
#include "train/kernels/gemm.h"
#include "train/model/model.h"
#include "train/model/moe.h"
#include "train/model/ops.h"

/* Logit floats held at once (rows x vocabulary); 64 MiB. */
#define HEAD_MAX_FLOATS (16u << 20)
/* Dequantization scratch floats at least (a whole 768x2048 matrix). */
#define DEQ_MIN_FLOATS (2u << 20)

struct model_acts {
    int B, T;
    size_t N;               /* B*T rows of capacity */
    int head_rows;          /* rows of logits per block */
    float *res;             /* (L+1, N, C) residual stream into each layer, and out */
    float *mid;             /* (L, N, C) residual after attention */
    float *rstd1, *rstd2;   /* (L, N) */
    float *q, *k, *v, *ao;  /* (L, N, qd) (L, N, kd) (L, N, kd) (L, N, qd) */
    float *lse;             /* (L, B, H, T) attention log-sum-exp per row */
    float *g, *u;           /* (L, N, I) */
    float *pa, *pf;         /* Gemma 2 (L, N, C): attention and MLP outputs before their norms */
    float *rstd3, *rstd4;   /* Gemma 2 (L, N) */
    float *capped;          /* (head_rows, V) soft-capped logits, when the family caps */
    float *qp, *kp;         /* q/k norms (L, N, qd) (L, N, kd): q and k before their norm */
    float *rstdq, *rstdk;   /* q/k norms (L, N*H) (L, N*KV) */
    float *xa;              /* (L, PROJ_COUNT, N, r) LoRA products */
    float *lnf, *rstdf;     /* (N, C), (N) */
    /* scratch, one layer at a time */
    float *ln, *tmp, *dres, *dres2, *dln;  /* (N, C) */
    float *dq, *dao, *dk, *dv;             /* (N, qd) (N, qd) (N, kd) (N, kd) */
    float *hbuf, *dg, *du, *dh;            /* (N, I) */
    float *logits;                         /* (head_rows, V) */
    float *xc, *dxc;                       /* (head_rows, C) */
    int32_t *rows, *tgt;                   /* (N) */
    struct linear_scratch ls;
    struct moe_acts *moe;   /* the sparse layers' (moe.h), or NULL for a dense model */
    float moe_aux_w;        /* the auxiliary loss's weight in this backward pass */
    double aux;             /* router_aux_coef * aux of the last pass */
    float drop_p;           /* LoRA dropout of the passes now (model_acts_dropout) */
    uint64_t drop_seed;
    float *mem;
    size_t mem_floats;
    double t_forward, t_head, t_backward;
    size_t hits; /* targets the last pass predicted (arg-max), model_last_hits */
};

struct model_acts *model_acts_create(const struct model *m, int B, int T)
{
    const struct model_config *c = &m->cfg;
    if (B < 1 || T < 1 || (size_t)B * T > (1u << 22))
        return NULL;
    struct model_acts *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    size_t N = (size_t)B * T, L = (size_t)c->n_layers, C = (size_t)c->hidden;
    size_t qd = (size_t)c->n_heads * c->head_dim, kd = (size_t)c->n_kv_heads * c->head_dim;
    size_t F = (size_t)c->intermediate, V = (size_t)c->vocab;
    size_t r = m->opts.full ? 0 : (size_t)m->opts.lora_r;
    /* the dense MLP's kept g and u: none when every layer is sparse */
    size_t Ld = moe_sparse_layers(c) == c->n_layers ? 0 : L;
    size_t pn = c->post_norms ? 1 : 0, qn = c->qk_norm ? 1 : 0;
    size_t hr = HEAD_MAX_FLOATS / V;
    if (hr < 16)
        hr = 16;
    if (hr > N)
        hr = N;
    size_t deq = DEQ_MIN_FLOATS;
    for (int p = 0; p < PROJ_COUNT; p++) {
        size_t sz = (size_t)m->layers[0].proj[p].out * m->layers[0].proj[p].in;
        if (sz > deq)
            deq = sz;
    }
    a->B = B;
    a->T = T;
    a->N = N;
    a->head_rows = (int)hr;
    /* Sizes of every array, in the order they are carved from one block. */
    size_t sizes[] = {
        (L + 1) * N * C, L * N * C, L * N, L * N,        /* res mid rstd1 rstd2 */
        L * N * qd, L * N * kd, L * N * kd, L * N * qd,  /* q k v ao */
        L * (size_t)B * c->n_heads * T,                  /* lse */
        Ld * N * F, Ld * N * F,                          /* g u */
        L * PROJ_COUNT * N * r,                          /* xa */
        N * C, N,                                        /* lnf rstdf */
        N * C, N * C, N * C, N * C, N * C,               /* ln tmp dres dres2 dln */
        N * qd, N * qd, N * kd, N * kd,                  /* dq dao dk dv */
        N * F, N * F, N * F, N * F,                      /* hbuf dg du dh */
        hr * V, hr * C, hr * C,                          /* logits xc dxc */
        deq, N * (r > 0 ? r : 1),                        /* ls.deq ls.tmp */
        L * N * C * pn, L * N * C * pn, L * N * pn, L * N * pn, /* pa pf rstd3 rstd4 */
        c->final_softcap > 0.0f ? hr * V : 0,            /* capped */
        L * N * qd * qn, L * N * kd * qn,                /* qp kp */
        L * N * c->n_heads * qn, L * N * c->n_kv_heads * qn, /* rstdq rstdk */
    };
    float **dst[] = {
        &a->res, &a->mid, &a->rstd1, &a->rstd2, &a->q, &a->k, &a->v, &a->ao, &a->lse,
        &a->g, &a->u, &a->xa, &a->lnf, &a->rstdf, &a->ln, &a->tmp, &a->dres, &a->dres2,
        &a->dln, &a->dq, &a->dao, &a->dk, &a->dv, &a->hbuf, &a->dg, &a->du, &a->dh,
        &a->logits, &a->xc, &a->dxc, &a->ls.deq, &a->ls.tmp,
        &a->pa, &a->pf, &a->rstd3, &a->rstd4, &a->capped, &a->qp, &a->kp, &a->rstdq,
        &a->rstdk,
    };
    size_t total = 0, n = sizeof sizes / sizeof sizes[0];
    for (size_t i = 0; i < n; i++)
        total += (sizes[i] + 15) & ~(size_t)15; /* 64-byte aligned starts */
    a->mem = aligned_alloc(64, total * sizeof(float));
    bigmem_mark(a->mem, total * sizeof(float));
    a->rows = malloc(N * sizeof(int32_t));
    a->tgt = malloc(N * sizeof(int32_t));
    if (!a->mem || !a->rows || !a->tgt) {
        model_acts_free(a);
        return NULL;
    }
    a->mem_floats = total;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        *dst[i] = a->mem + off;
        off += (sizes[i] + 15) & ~(size_t)15;
    }
    a->ls.deq_cap = deq;
    a->ls.tmp_cap = N * (r > 0 ? r : 1);
    if (c->n_experts > 0 && !(a->moe = moe_acts_create(m, N))) {
        model_acts_free(a);
        return NULL;
    }
    return a;
}

int model_acts_dropout(struct model_acts *a, const struct model *m, float p, uint64_t seed)
{
    if (!(p >= 0.0f && p < 1.0f))
        return -1;
    a->drop_p = m->opts.full ? 0.0f : p;
    a->drop_seed = seed;
    if (a->drop_p == 0.0f || a->ls.drop)
        return 0;
    /* x' of the widest adapter input, made the first time it is needed:
     * a run without dropout never holds it */
    const struct model_config *c = &m->cfg;
    size_t in = (size_t)c->hidden;
    if ((size_t)c->intermediate > in)
        in = (size_t)c->intermediate;
    if ((size_t)c->n_heads * c->head_dim > in)
        in = (size_t)c->n_heads * c->head_dim;
    a->ls.drop = malloc(a->N * in * sizeof(float));
    if (!a->ls.drop) {
        a->drop_p = 0.0f;
        return -1;
    }
    a->ls.drop_cap = a->N * in;
    return 0;
}

/* The dropout of projection p of layer l in the passes now: its own mask
 * (PEFT gives each adapted module its own dropout). */
static struct linear_scratch *proj_scratch(struct model_acts *a, int l, int p)
{
    a->ls.dropout = (struct linear_dropout){0};
    if (a->drop_p > 0.0f)
        a->ls.dropout = (struct linear_dropout){
            a->drop_p, rng_derive(a->drop_seed, (uint64_t)l * PROJ_COUNT + (uint64_t)p)};
    return &a->ls;
}

void model_acts_free(struct model_acts *a)
{
    if (!a)
        return;
    free(a->ls.drop);
    moe_acts_free(a->moe);
    free(a->mem);
    free(a->rows);
    free(a->tgt);
    free(a);
}

size_t model_acts_bytes(const struct model_acts *a)
{
    return a->mem_floats * sizeof(float) + 2 * a->N * sizeof(int32_t) + moe_acts_bytes(a->moe);
}

void model_acts_timing(const struct model_acts *a, struct model_timing *t)
{
    t->forward = a->t_forward;
    t->head = a->t_head;
    t->backward = a->t_backward;
}

double model_last_aux(const struct model_acts *a)
{
    return a->aux;
}

size_t model_last_hits(const struct model_acts *a)
{
    return a->hits;
}

size_t model_count_targets(const uint8_t *mask, int B, int T)
{
    size_t n = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t + 1 < T; t++)
            n += mask[(size_t)b * T + t + 1] != 0;
    return n;
}

/* Pointers to one layer's saved activations. */
struct layer_acts {
    float *x, *mid, *out, *rstd1, *rstd2, *q, *k, *v, *ao, *lse, *g, *u;
    float *pa, *pf, *rstd3, *rstd4; /* NULL without post norms */
    float *qp, *kp, *rstdq, *rstdk; /* NULL without q/k norms */
    float *xa[PROJ_COUNT];
};

static void layer_view(const struct model *m, const struct model_acts *a, int l,
                       struct layer_acts *la)
{
    const struct model_config *c = &m->cfg;
    size_t N = a->N, C = (size_t)c->hidden;
    size_t qd = (size_t)c->n_heads * c->head_dim, kd = (size_t)c->n_kv_heads * c->head_dim;
    size_t F = (size_t)c->intermediate;
    size_t r = m->opts.full ? 0 : (size_t)m->opts.lora_r;
    la->x = a->res + (size_t)l * N * C;
    la->out = a->res + (size_t)(l + 1) * N * C;
    la->mid = a->mid + (size_t)l * N * C;
    la->rstd1 = a->rstd1 + (size_t)l * N;
    la->rstd2 = a->rstd2 + (size_t)l * N;
    la->q = a->q + (size_t)l * N * qd;
    la->k = a->k + (size_t)l * N * kd;
    la->v = a->v + (size_t)l * N * kd;
    la->ao = a->ao + (size_t)l * N * qd;
    la->lse = a->lse + (size_t)l * a->B * c->n_heads * a->T;
    la->g = m->layers[l].moe ? NULL : a->g + (size_t)l * N * F;
    la->u = m->layers[l].moe ? NULL : a->u + (size_t)l * N * F;
    int pn = c->post_norms;
    la->pa = pn ? a->pa + (size_t)l * N * C : NULL;
    la->pf = pn ? a->pf + (size_t)l * N * C : NULL;
    la->rstd3 = pn ? a->rstd3 + (size_t)l * N : NULL;
    la->rstd4 = pn ? a->rstd4 + (size_t)l * N : NULL;
    int qn = c->qk_norm;
    la->qp = qn ? a->qp + (size_t)l * N * qd : NULL;
    la->kp = qn ? a->kp + (size_t)l * N * kd : NULL;
    la->rstdq = qn ? a->rstdq + (size_t)l * N * c->n_heads : NULL;
    la->rstdk = qn ? a->rstdk + (size_t)l * N * c->n_kv_heads : NULL;
    for (int p = 0; p < PROJ_COUNT; p++)
        la->xa[p] = r ? a->xa + ((size_t)l * PROJ_COUNT + p) * N * r : NULL;
}

static void layer_forward(struct model *m, struct model_acts *a, int l, const int32_t *seg, int B,
                          int T)
{
    const struct model_config *c = &m->cfg;
    struct model_layer *L = &m->layers[l];
    struct layer_acts s;
    layer_view(m, a, l, &s);
    int N = B * T, C = c->hidden, H = c->n_heads, KV = c->n_kv_heads, hd = c->head_dim;
    size_t NC = (size_t)N * C;
    /* attention block: mid = x + o(attn(rope(q(ln1 x)), rope(k(..)), v(..))) */
    ops_rmsnorm_forward(a->ln, s.rstd1, s.x, L->ln1, N, C, c->rms_eps);
    /* with q/k norms the projections land in qp/kp, normalized per head into q/k */
    float *qo = s.qp ? s.qp : s.q, *ko = s.kp ? s.kp : s.k;
    linear_forward(&L->proj[PROJ_Q], qo, a->ln, N, s.xa[PROJ_Q], proj_scratch(a, l, PROJ_Q));
    linear_forward(&L->proj[PROJ_K], ko, a->ln, N, s.xa[PROJ_K], proj_scratch(a, l, PROJ_K));
    linear_forward(&L->proj[PROJ_V], s.v, a->ln, N, s.xa[PROJ_V], proj_scratch(a, l, PROJ_V));
    if (s.qp) {
        ops_rmsnorm_forward(s.q, s.rstdq, s.qp, L->qn, N * H, hd, c->rms_eps);
        ops_rmsnorm_forward(s.k, s.rstdk, s.kp, L->kn, N * KV, hd, c->rms_eps);
    }
    const float *rc, *rs; /* Gemma 3's local layers have their own tables */
    model_layer_rope(m, l, &rc, &rs);
    int rot = model_rot_dim(c); /* Phi-3 turns part of each head */
    if (!c->no_rope[l]) {
        ops_rope_forward_seg(s.q, B, T, H, hd, rot, seg, rc, rs);
        ops_rope_forward_seg(s.k, B, T, KV, hd, rot, seg, rc, rs);
    }
    ops_attention_forward_win(s.ao, s.lse, s.q, s.k, s.v, seg, model_layer_window(c, l), B, T,
                              H, KV, hd, model_attn_scale(c), c->attn_softcap);
    /* Gemma 2 normalizes the block's output (ln3) before the residual add */
    float *ao_out = s.pa ? s.pa : a->tmp;
    linear_forward(&L->proj[PROJ_O], ao_out, s.ao, N, s.xa[PROJ_O], proj_scratch(a, l, PROJ_O));
    if (s.pa)
        ops_rmsnorm_forward(a->tmp, s.rstd3, s.pa, L->ln3, N, C, c->rms_eps);
    ops_add(s.mid, s.x, a->tmp, NC);
    /* MLP block: out = mid + down(act(gate(ln2 mid)) * up(ln2 mid)) [ln4 after down] */
    ops_rmsnorm_forward(a->ln, s.rstd2, s.mid, L->ln2, N, C, c->rms_eps);
    float *mlp_out = s.pf ? s.pf : a->tmp;
    if (L->moe) {
        moe_forward(m, a->moe, l, mlp_out, a->ln, N, &a->ls);
    } else {
        linear_forward(&L->proj[PROJ_GATE], s.g, a->ln, N, s.xa[PROJ_GATE], proj_scratch(a, l, PROJ_GATE));
        linear_forward(&L->proj[PROJ_UP], s.u, a->ln, N, s.xa[PROJ_UP], proj_scratch(a, l, PROJ_UP));
        model_mlp_act(m, a->hbuf, s.g, s.u, (size_t)N * c->intermediate);
        linear_forward(&L->proj[PROJ_DOWN], mlp_out, a->hbuf, N, s.xa[PROJ_DOWN], proj_scratch(a, l, PROJ_DOWN));
    }
    if (s.pf)
        ops_rmsnorm_forward(a->tmp, s.rstd4, s.pf, L->ln4, N, C, c->rms_eps);
    ops_add(s.out, s.mid, a->tmp, NC);
}

void model_embed(const struct model *m, const int32_t *ids, int n, float *out)
{
    int C = m->cfg.hidden;
    /* Hugging Face rounds sqrt(hidden) to the activations' type first */
    float sc = m->cfg.embed_scale ? sqrtf((float)C) : 1.0f;
#pragma omp parallel for schedule(static) if ((long)n * C > 32768)
    for (int i = 0; i < n; i++) {
        float *dst = out + (size_t)i * C;
        const float *src = linear_rows(&m->embed, ids[i], 1, dst);
        if (src != dst)
            memcpy(dst, src, sizeof(float) * C);
        if (m->cfg.embed_scale)
            for (int j = 0; j < C; j++)
                dst[j] *= sc;
    }
}

void model_mlp_act(const struct model *m, float *h, const float *g, const float *u, size_t n)
{
    if (m->cfg.gelu)
        ops_geglu_forward(h, g, u, n);
    else
        ops_swiglu_forward(h, g, u, n);
}

float model_attn_scale(const struct model_config *c)
{
    return 1.0f / sqrtf(c->query_scalar);
}

/* On entry a->dres holds d(loss)/d(out of layer l); on return, d/d(x). */
static void layer_backward(struct model *m, struct model_acts *a, int l, const int32_t *seg,
                           int B, int T, int need_dx)
{
    const struct model_config *c = &m->cfg;
    struct model_layer *L = &m->layers[l];
    struct layer_acts s;
    layer_view(m, a, l, &s);
    int N = B * T, C = c->hidden, H = c->n_heads, KV = c->n_kv_heads, hd = c->head_dim;
    size_t NC = (size_t)N * C, NI = (size_t)N * c->intermediate;
    size_t Nq = (size_t)N * H * hd, Nk = (size_t)N * KV * hd;
    float eps = c->rms_eps;
    /* MLP block, recomputing ln2(mid) and the activation's output */
    ops_rmsnorm_forward(a->ln, s.rstd2, s.mid, L->ln2, N, C, eps);
    if (!L->moe)
        model_mlp_act(m, a->hbuf, s.g, s.u, NI);
    const float *dmlp = a->dres;
    if (s.pf) { /* through ln4 into a->tmp */
        memset(a->tmp, 0, NC * sizeof(float));
        ops_rmsnorm_backward(a->tmp, L->dln4, a->dres, s.pf, L->ln4, s.rstd4, N, C);
        dmlp = a->tmp;
    }
    memset(a->dln, 0, NC * sizeof(float));
    if (L->moe) {
        moe_backward(m, a->moe, l, a->dln, dmlp, a->ln, N, a->moe_aux_w, &a->ls);
    } else {
        memset(a->dh, 0, NI * sizeof(float));
        linear_backward(&L->proj[PROJ_DOWN], a->dh, dmlp, a->hbuf, s.xa[PROJ_DOWN], N, proj_scratch(a, l, PROJ_DOWN));
        memset(a->dg, 0, NI * sizeof(float));
        memset(a->du, 0, NI * sizeof(float));
        if (c->gelu)
            ops_geglu_backward(a->dg, a->du, a->dh, s.g, s.u, NI);
        else
            ops_swiglu_backward(a->dg, a->du, a->dh, s.g, s.u, NI);
        linear_backward(&L->proj[PROJ_GATE], a->dln, a->dg, a->ln, s.xa[PROJ_GATE], N, proj_scratch(a, l, PROJ_GATE));
        linear_backward(&L->proj[PROJ_UP], a->dln, a->du, a->ln, s.xa[PROJ_UP], N, proj_scratch(a, l, PROJ_UP));
    }
    /* dres: d(out) -> d(mid), residual path plus the norm path */
    ops_rmsnorm_backward(a->dres, L->dln2, a->dln, s.mid, L->ln2, s.rstd2, N, C);
    /* attention block */
    const float *dattn = a->dres;
    if (s.pa) { /* through ln3 into a->tmp */
        memset(a->tmp, 0, NC * sizeof(float));
        ops_rmsnorm_backward(a->tmp, L->dln3, a->dres, s.pa, L->ln3, s.rstd3, N, C);
        dattn = a->tmp;
    }
    memset(a->dao, 0, Nq * sizeof(float));
    linear_backward(&L->proj[PROJ_O], a->dao, dattn, s.ao, s.xa[PROJ_O], N, proj_scratch(a, l, PROJ_O));
    memset(a->dq, 0, Nq * sizeof(float));
    memset(a->dk, 0, Nk * sizeof(float));
    memset(a->dv, 0, Nk * sizeof(float));
    ops_attention_backward_win(a->dq, a->dk, a->dv, a->dao, s.lse, s.q, s.k, s.v, seg,
                               model_layer_window(c, l), B, T, H, KV, hd, model_attn_scale(c),
                               c->attn_softcap);
    const float *rc, *rs;
    model_layer_rope(m, l, &rc, &rs);
    int rot = model_rot_dim(c);
    if (!c->no_rope[l]) {
        ops_rope_backward_seg(a->dq, B, T, H, hd, rot, seg, rc, rs);
        ops_rope_backward_seg(a->dk, B, T, KV, hd, rot, seg, rc, rs);
    }
    if (s.qp) { /* through each head's norm, by way of a->dao (free now; kd <= qd) */
        memset(a->dao, 0, Nq * sizeof(float));
        ops_rmsnorm_backward(a->dao, L->dqn, a->dq, s.qp, L->qn, s.rstdq, N * H, hd);
        memcpy(a->dq, a->dao, Nq * sizeof(float));
        memset(a->dao, 0, Nk * sizeof(float));
        ops_rmsnorm_backward(a->dao, L->dkn, a->dk, s.kp, L->kn, s.rstdk, N * KV, hd);
        memcpy(a->dk, a->dao, Nk * sizeof(float));
    }
    ops_rmsnorm_forward(a->ln, s.rstd1, s.x, L->ln1, N, C, eps);
    float *dln = need_dx ? a->dln : NULL;
    if (dln)
        memset(dln, 0, NC * sizeof(float));
    linear_backward(&L->proj[PROJ_Q], dln, a->dq, a->ln, s.xa[PROJ_Q], N, proj_scratch(a, l, PROJ_Q));
    linear_backward(&L->proj[PROJ_K], dln, a->dk, a->ln, s.xa[PROJ_K], N, proj_scratch(a, l, PROJ_K));
    linear_backward(&L->proj[PROJ_V], dln, a->dv, a->ln, s.xa[PROJ_V], N, proj_scratch(a, l, PROJ_V));
    if (need_dx || L->dln1) {
        /* The norm weight's gradient needs dln even where dx is not needed. */
        if (!need_dx) {
            memset(a->dln, 0, NC * sizeof(float));
            for (int p = PROJ_Q; p <= PROJ_V; p++) {
                struct linear frozen = L->proj[p];
                frozen.dw = NULL;
                frozen.dbias = NULL;
                frozen.dla = frozen.dlb = NULL;
                linear_backward(&frozen, a->dln, p == PROJ_Q ? a->dq : p == PROJ_K ? a->dk : a->dv,
                                a->ln, s.xa[p], N, proj_scratch(a, l, p));
            }
        }
        ops_rmsnorm_backward(a->dres, L->dln1, a->dln, s.x, L->ln1, s.rstd1, N, C);
    }
}

/* The output head fused with the loss over the rows that have targets.
 * With backward set, a->dres receives d(loss)/d(lnf) (rows without a
 * target get zero) and the head's weight gradient is accumulated. */
static double head_loss(struct model *m, struct model_acts *a, const int32_t *ids,
                        const uint8_t *mask, int B, int T, float dscale, int backward,
                        const float *tok_w, double *tok_loss, size_t *n_targets)
{
    const struct model_config *c = &m->cfg;
    int C = c->hidden, V = c->vocab;
    struct linear *head = c->tied ? &m->embed : &m->head;
    int M = 0;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t + 1 < T; t++) {
            size_t i = (size_t)b * T + t;
            if (mask[i + 1]) {
                a->rows[M] = (int32_t)i;
                a->tgt[M] = ids[i + 1];
                M++;
            }
        }
    }
    *n_targets = (size_t)M;
    a->hits = 0;
    if (backward)
        memset(a->dres, 0, (size_t)B * T * C * sizeof(float));
    if (tok_loss)
        memset(tok_loss, 0, (size_t)B * T * sizeof *tok_loss);
    /* Per-token weights and losses (DPO) go row by row through
     * ops_xent_rows, with the block's weights and losses gathered here. */
    float *wbuf = NULL;
    double *lbuf = NULL;
    if (tok_w || tok_loss) {
        wbuf = malloc((size_t)a->head_rows * sizeof *wbuf);
        lbuf = malloc((size_t)a->head_rows * sizeof *lbuf);
        if (!wbuf || !lbuf)
            abort(); /* out of memory mid-step: nothing sane to return */
    }
    int vstep = (int)(a->ls.deq_cap / (size_t)C);
    if (head->kind == WK_F32 || (head->kind == WK_BF16 && gemm_has_bf16()) || vstep > V)
        vstep = V;
    double loss = 0.0;
    for (int m0 = 0; m0 < M; m0 += a->head_rows) {
        int mr = M - m0 < a->head_rows ? M - m0 : a->head_rows;
        for (int i = 0; i < mr; i++)
            memcpy(a->xc + (size_t)i * C, a->lnf + (size_t)a->rows[m0 + i] * C,
                   sizeof(float) * C);
        for (int v0 = 0; v0 < V; v0 += vstep) {
            int nv = V - v0 < vstep ? V - v0 : vstep;
            linear_times_wt(head, v0, nv, a->xc, C, mr, 0.0f, a->logits + v0, V, a->ls.deq);
        }
        size_t mv = (size_t)mr * V;
        if (c->final_softcap > 0.0f) {
            ops_softcap(a->logits, mv, c->final_softcap);
            if (backward)
                memcpy(a->capped, a->logits, mv * sizeof(float));
        }
        a->hits += ops_argmax_hits(a->logits, a->tgt + m0, mr, V);
        if (lbuf) {
            for (int i = 0; i < mr; i++)
                wbuf[i] = tok_w ? tok_w[a->rows[m0 + i]] : dscale;
            ops_xent_rows(a->logits, a->tgt + m0, mr, V, backward ? wbuf : NULL, lbuf);
            for (int i = 0; i < mr; i++) {
                loss += lbuf[i];
                if (tok_loss)
                    tok_loss[a->rows[m0 + i]] = lbuf[i];
            }
            if (!backward)
                continue;
        } else if (!backward) {
            loss += ops_xent_forward(a->logits, a->tgt + m0, mr, V);
            continue;
        } else {
            loss += ops_xent_forward_backward(a->logits, a->tgt + m0, mr, V, dscale);
        }
        if (c->final_softcap > 0.0f)
            ops_softcap_backward(a->logits, a->capped, mv, c->final_softcap);
        for (int v0 = 0; v0 < V; v0 += vstep) {
            int nv = V - v0 < vstep ? V - v0 : vstep;
            /* dxc (mr,C) (+)= dlogits[:, v0:v0+nv] . w (nv,C) */
            linear_times_w(head, v0, nv, a->logits + v0, V, mr, v0 ? 1.0f : 0.0f, a->dxc,
                           a->ls.deq);
            if (head->dw) /* dW (nv,C) (+)= dlogits^T . xc */
                linear_weight_grad(head, v0, nv, a->logits + v0, V, a->xc, mr,
                                   head->dw_fresh ? 0.0f : 1.0f);
        }
        head->dw_fresh = 0; /* every row of dW was written */
        for (int i = 0; i < mr; i++)
            memcpy(a->dres + (size_t)a->rows[m0 + i] * C, a->dxc + (size_t)i * C,
                   sizeof(float) * C);
    }
    free(wbuf);
    free(lbuf);
    return loss;
}

/* Embedding, every layer and the final norm: leaves a->lnf (N,C). */
static void trunk_forward(struct model *m, struct model_acts *a, const int32_t *ids,
                          const int32_t *seg, int B, int T)
{
    const struct model_config *c = &m->cfg;
    int N = B * T, C = c->hidden;
    /* Callers validate sizes; these are invariants, not input checks. */
    if ((size_t)N > a->N || T > a->T || B > a->B || T > m->rope_len)
        abort();
    /* embedding: res0[n] = E[ids[n]] (times sqrt(C) for Gemma) */
    model_embed(m, ids, N, a->res);
    if (a->moe)
        moe_begin(a->moe);
    for (int l = 0; l < c->n_layers; l++)
        layer_forward(m, a, l, seg, B, T);
    a->aux = a->moe ? (double)c->router_aux_coef * moe_aux_loss(m, a->moe) : 0.0;
    float *xL = a->res + (size_t)c->n_layers * a->N * C;
    ops_rmsnorm_forward(a->lnf, a->rstdf, xL, m->norm_f, N, C, c->rms_eps);
}

void model_forward_logits(struct model *m, struct model_acts *a, const int32_t *ids, int B,
                          int T, float *logits)
{
    const struct model_config *c = &m->cfg;
    int N = B * T, C = c->hidden, V = c->vocab;
    struct linear *head = c->tied ? &m->embed : &m->head;
    trunk_forward(m, a, ids, NULL, B, T);
    int vstep = (int)(a->ls.deq_cap / (size_t)C);
    if (head->kind == WK_F32 || (head->kind == WK_BF16 && gemm_has_bf16()) || vstep > V)
        vstep = V;
    for (int v0 = 0; v0 < V; v0 += vstep) {
        int nv = V - v0 < vstep ? V - v0 : vstep;
        linear_times_wt(head, v0, nv, a->lnf, C, N, 0.0f, logits + v0, V, a->ls.deq);
    }
    if (c->final_softcap > 0.0f)
        ops_softcap(logits, (size_t)N * V, c->final_softcap);
}

double model_forward_backward(struct model *m, struct model_acts *a, const int32_t *ids,
                              const uint8_t *mask, int B, int T, float dscale, int backward,
                              size_t *n_targets)
{
    return model_forward_backward_packed(m, a, ids, mask, NULL, B, T, dscale, backward,
                                         n_targets);
}

/* The pass behind every entry point: forward, the head's losses, and with
 * backward set the gradient, each target weighted by dscale, or by the
 * weights fn writes from the per-token losses when fn is set. */
static double pass(struct model *m, struct model_acts *a, const int32_t *ids,
                   const uint8_t *mask, const int32_t *seg, int B, int T, float dscale,
                   int backward, model_weights_fn fn, void *ctx, double *tok_loss,
                   float *tok_w, size_t *n_targets)
{
    const struct model_config *c = &m->cfg;
    int N = B * T, C = c->hidden;
    double t0 = clock_mono_s();
    trunk_forward(m, a, ids, seg, B, T);
    float *xL = a->res + (size_t)c->n_layers * a->N * C;
    double t1 = clock_mono_s();
    double loss;
    if (fn) {
        /* the losses first, then the head again with their weights */
        loss = head_loss(m, a, ids, mask, B, T, 0.0f, 0, NULL, tok_loss, n_targets);
        fn(ctx, tok_loss, tok_w);
        head_loss(m, a, ids, mask, B, T, 0.0f, 1, tok_w, NULL, n_targets);
    } else {
        loss = head_loss(m, a, ids, mask, B, T, dscale, backward, NULL, tok_loss, n_targets);
    }
    double t2 = clock_mono_s();
    a->t_forward += t1 - t0;
    a->t_head += t2 - t1;
    if (!backward)
        return loss;
    /* the auxiliary loss joins the objective with the batch's share of the
     * mean (model.h); the weighted pass leaves it out */
    a->moe_aux_w = fn ? 0.0f : dscale * (float)*n_targets;
    /* dres holds d/d(lnf); through the final norm into dres2 */
    memset(a->dres2, 0, (size_t)N * C * sizeof(float));
    ops_rmsnorm_backward(a->dres2, m->dnorm_f, a->dres, xL, m->norm_f, a->rstdf, N, C);
    float *swap = a->dres;
    a->dres = a->dres2;
    a->dres2 = swap;
    for (int l = c->n_layers - 1; l >= 0; l--)
        layer_backward(m, a, l, seg, B, T, l > 0 || m->embed.dw != NULL);
    if (m->embed.dw) {
        float sc = c->embed_scale ? sqrtf((float)C) : 1.0f;
        linear_grad_touch(&m->embed);
        /* Serial over rows: a token seen twice adds in a fixed order. */
        for (int n = 0; n < N; n++) {
            float *dw = m->embed.dw + (size_t)ids[n] * C;
            const float *d = a->dres + (size_t)n * C;
            for (int j = 0; j < C; j++)
                dw[j] += d[j] * sc;
        }
    }
    model_grad_settle(m);
    a->t_backward += clock_mono_s() - t2;
    return loss;
}

double model_forward_backward_packed(struct model *m, struct model_acts *a, const int32_t *ids,
                                     const uint8_t *mask, const int32_t *seg, int B, int T,
                                     float dscale, int backward, size_t *n_targets)
{
    return pass(m, a, ids, mask, seg, B, T, dscale, backward, NULL, NULL, NULL, NULL,
                n_targets);
}

double model_token_losses(struct model *m, struct model_acts *a, const int32_t *ids,
                          const uint8_t *mask, const int32_t *seg, int B, int T,
                          double *tok_loss, size_t *n_targets)
{
    return pass(m, a, ids, mask, seg, B, T, 0.0f, 0, NULL, NULL, tok_loss, NULL, n_targets);
}

double model_forward_backward_weighted(struct model *m, struct model_acts *a,
                                       const int32_t *ids, const uint8_t *mask,
                                       const int32_t *seg, int B, int T, model_weights_fn fn,
                                       void *ctx, double *tok_loss, float *tok_w,
                                       size_t *n_targets)
{
    return pass(m, a, ids, mask, seg, B, T, 0.0f, 1, fn, ctx, tok_loss, tok_w, n_targets);
}
