/* cuda_model.c - the device copy of a model and its training pass on the
 * GPU (contract in cuda_model.h; the CPU twin is model_pass.c and linear.c,
 * read side by side: same layers, same saved activations, same order).
 *
 * Kept per layer, as on the CPU: the residual stream before the layer and
 * after attention, the RMSNorm scales, q/k (after rotation), v, the
 * attention output and its log-sum-exp, the MLP gate and up projections,
 * and the LoRA products x A^T. The products' bf16 inputs (the normalized
 * inputs, LoRA's columns beside, and the MLP's activation) are kept too
 * where a weight gradient reads them (change 1n, unlike the CPU, which
 * makes them again in the backward pass): bf16 that the forward writes
 * anyway, so the backward reads the same bits it would have made.
 */
#include "train/cuda/cuda_model.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_gemm.h"
#include "train/cuda/cuda_ops.h"

/* Logit floats held at once on the device (rows x vocabulary); 256 MiB:
 * at a 128k vocabulary, blocks of 512 rows keep the head's products large
 * enough for the tensor cores. */
#define CUDA_HEAD_MAX_FLOATS (64u << 20)
/* bf16 values of NF4 decoding scratch (8 MiB): the layers' NF4 products
 * and an untied NF4 head decode this much of a matrix at a time, never a
 * whole one (ALALLO_CUDA_DEQ_FLOATS sets less, for tests; never under
 * NF4_BLOCK rows of the widest input). The planner's GPU memory model
 * counts both (sched/planner.c; held to these allocations by
 * tests/gpu/test_cuda_memory.c). */
#define CUDA_DEQ_MIN (4u << 20)

/* One projection on the device: the struct linear of the host model with
 * its pointers mapped, and the bf16 weight the products read. */
struct dlin {
    int in, out, r;
    float scale;
    const uint16_t *wb;    /* bf16 (out,in), rows ldw apart, or NULL for NF4 */
    int ldw;               /* in, or in + the LoRA columns of its group (fold) */
    int fold;              /* LoRA folded into the base product: wb is wpad */
    int col0;              /* fold: scale B's columns in wpad, [col0, col0 + r) */
    uint16_t *wpad;        /* fold: (out + r, ldw): [W | the group's LoRA
                            * columns], then r rows [scale A | 0] */
    struct cuda_nf4 wq;    /* NF4 (wq.n > 0) */
    void *wq_mem;          /* the NF4 arrays' one allocation */
    float *dw;             /* full fine-tuning: fp32 gradient (out,in) */
    float *bias, *dbias;
    float *la, *dla, *lb, *dlb;
    const uint16_t *lab, *lbb; /* LoRA: bf16 copies of A and B the products read */
};

struct dlayer {
    const float *ln1, *ln2, *ln3, *ln4;
    float *dln1, *dln2, *dln3, *dln4;
    struct dlin proj[PROJ_COUNT];
    int ldx[PROJ_COUNT];   /* the forward's bf16 input of each projection:
                            * its rows' stride (in + its group's LoRA
                            * columns) */
    uint16_t *astack[4];   /* change 2c: each group's folded A stacked, bf16
                            * (acols, in), in its columns' order (NULL for
                            * o's group, whose input is not kept) */
    int acols[4];          /* the group's LoRA columns */
    int toff[PROJ_COUNT];  /* change 2d: each projection's t = dy B in its
                            * group's gathered T: from column toff ... */
    int tcols[4];          /* ... of the group's tcols (its adapted r's) */
};

/* A folded matrix's place in the host's bf16 block, left out of the
 * device's copy of it (the matrix lives in its dlin's wpad). */
struct bf_hole {
    size_t off, len;
};

struct cuda_model {
    struct model_config cfg;
    int full;
    size_t n_train, n_decay, n_fixed, n_bf;
    float *train, *grad, *fixed;
    uint16_t *bf;
    uint16_t *wbf;         /* bf16 copy of train[0, n_decay): full fine-tuning's
                            * matrices, or LoRA's A and B */
    uint16_t *embed_bf;    /* QLoRA: the embedding decoded once */
    const float *embed_f;  /* the lookup's table: fp32 (full) ... */
    const uint16_t *embed_b; /* ... or bf16 */
    float *embed_dw;
    struct dlin head;      /* the output head (the embedding when tied) */
    const float *norm_f;
    float *dnorm_f;
    struct dlayer *layers;
    float *rope_cos, *rope_sin;
    int rope_len;
    int fold;              /* ALALLO_CUDA_LORA: 1 fold (default), 0 each */
    struct bf_hole *holes; /* sorted by offset */
    int n_holes;
    struct cuda_lora_fold *folds_d; /* the folded projections, on the device */
    int n_folds;
    size_t fold_most;      /* the largest out r + r in among them */
    size_t bytes;
};

struct cuda_acts {
    int B, T;
    size_t N;
    int head_rows;
    int r;                       /* LoRA rank (0 full) */
    int recompute;               /* one layer's activations kept, not L */
    size_t max_in;               /* widest product input */
    int ldy;                     /* dyb's and dub's rows: the widest output
                                  * and LoRA's r columns past it (fold) */
    uint16_t *res, *mid;         /* the residual stream as bf16 (change 1j) */
    float *rstd1, *rstd2, *lse;
    uint16_t *q, *k, *v;         /* kept as bf16 as their products and rotary
                                  * positions write them (change 1i) */
    uint16_t *ao;                /* attention's output, kept as bf16 (1k) */
    uint16_t *g, *u;             /* gate's and up's outputs, kept as bf16 as
                                  * their products write them (change 1g) */
    float *pa, *pf, *rstd3, *rstd4;
    float *lnf, *rstdf;
    float *ln, *tmp, *dres, *dres2, *dln;
    float *dq, *dao, *dk, *dv;
    float *hbuf, *dh;            /* dg and du live as bf16 alone in dyb, dub;
                                  * dh is bf16 in the same memory where one
                                  * product makes it (change 1l) */
    size_t hbuf_n;               /* hbuf's floats (N x intermediate) */
    float *logits, *capped, *xc, *dxc; /* logits, capped: soft-capped heads only */
    float *attn_d;               /* (B, H, T) attention backward's scratch */
    float *dbt;                  /* cuda_lora_dbt's scratch (change 2e), or
                                  * NULL (no LoRA, or its rank too large) */
    uint16_t *tg;                /* change 2d: a group's gathered T (N, tcols) */
    float *dag;                  /* and its dA (tcols, in) before it is added
                                  * into each projection's */
    float *row_loss;             /* (N): each target row's loss, downloaded once a pass */
    float *row_w;                /* (N) a weighted pass's weight per target row */
    uint16_t *xb;                /* bf16 of a product's input, written by the
                                  * kernel that makes the input (cuda_ops.h,
                                  * "bf16 copies"); attention's output again
                                  * in the backward by a conversion */
    uint16_t *yb;                /* bf16 of LoRA's dropped input */
    uint16_t *kin;               /* the products' bf16 inputs as the forward
                                  * writes them, kept per layer for the weight
                                  * gradients (change 1n; layer_view), or NULL
                                  * (recompute, or nothing trains) */
    size_t kin_w[4];             /* each group's width in kin (its widest ldx;
                                  * o's input is ao: 0) */
    uint16_t *dyb, *dub;         /* bf16 of a product's dy, written by the
                                  * kernel that makes dy; dub: of du, beside
                                  * dg's in dyb */
    uint16_t *xa, *ltmp;         /* bf16 LoRA x' A^T per layer and projection;
                                  * (N, r) dy B */
    uint16_t *logits_b, *xcb;    /* the head's logits, then dlogits, as bf16
                                  * (change 1h; with a cap, dlogits' bf16);
                                  * the head's rows as bf16 */
    uint16_t *deq;               /* NF4 decoding scratch (weight_rows): a chunk
                                  * of a matrix's rows at a time */
    int nf4_fused;               /* ALALLO_CUDA_NF4=fused: the layers' NF4
                                  * products through cuda_nf4_gemm */
    size_t deq_cap;              /* bf16 values */
    int32_t *ids, *seg, *rows, *tgt, *hits_d; /* device copies */
    int32_t *rows_h, *tgt_h, *hits_h;         /* host staging */
    float *row_w_h;                           /* host staging of row_w */
    float *loss_h;
    float *drop, *drop2;         /* (N, max_in) LoRA dropout, made on first use */
    float drop_p;
    uint64_t drop_seed;
    uint64_t *seeds;             /* each projection's dropout seed (n_layers x
                                  * PROJ_COUNT) on the device, where the
                                  * kernels read it: the launches stay the
                                  * same from step to step (cuda_graph.h) */
    int n_layers;
    size_t tok0;                 /* the pass's first token in its step (micro-batches) */
    void *mem;
    size_t bytes;
    size_t hits;
    int failed;                  /* a product returned -1 in this pass */
    struct cuda_graphs *graphs[2]; /* the forward's and the backward's, or
                                    * NULL (cuda_acts_graphs) */
};

/* ------------------------------------------------------------ mapping */

static int inside(const void *p, const void *base, size_t n, size_t elem)
{
    uintptr_t u = (uintptr_t)p, b = (uintptr_t)base;
    return base && u >= b && u < b + n * elem;
}

/* The device address of a host fp32 pointer into one of the model's
 * blocks (NULL stays NULL). A pointer elsewhere breaks model.h's layout. */
static float *map_f(const struct cuda_model *cm, const struct model *m, const float *h)
{
    if (!h)
        return NULL;
    if (inside(h, m->train, m->n_train, sizeof(float)))
        return cm->train + (h - m->train);
    if (inside(h, m->grad, m->n_train, sizeof(float)))
        return cm->grad + (h - m->grad);
    if (inside(h, m->fixed, m->n_fixed, sizeof(float)))
        return cm->fixed + (h - m->fixed);
    fprintf(stderr, "cuda_model: a parameter outside the model's blocks\n");
    abort();
}

/* The device offset of host offset h of the bf16 block, which leaves the
 * folded matrices out. h inside one of them breaks the upload's layout. */
static size_t bf_offset(const struct cuda_model *cm, size_t h)
{
    size_t gone = 0;
    for (int i = 0; i < cm->n_holes && cm->holes[i].off <= h; i++) {
        if (h < cm->holes[i].off + cm->holes[i].len) {
            fprintf(stderr, "cuda_model: a folded matrix read from the bf16 block\n");
            abort();
        }
        gone += cm->holes[i].len;
    }
    return h - gone;
}

/* The bf16 weight the products read for host linear l (NULL for NF4). */
static const uint16_t *map_wb(const struct cuda_model *cm, const struct model *m,
                              const struct linear *l)
{
    if (l->kind == WK_F32) /* full fine-tuning: the bf16 copy of the master */
        return cm->wbf + (l->w - m->train);
    if (l->kind == WK_BF16)
        return cm->bf + bf_offset(cm, (size_t)(l->wb - m->bf));
    return NULL;
}

/* Whether linear l's LoRA is folded into its base product: a bf16 base
 * with an adapter, unless ALALLO_CUDA_LORA=each. */
static int folds(const struct cuda_model *cm, const struct linear *l)
{
    return cm->fold && l->kind == WK_BF16 && l->r > 0;
}

/* Copies NF4 tensor t to the device as one allocation. */
static int nf4_upload(struct dlin *d, const struct nf4_tensor *t, size_t *bytes)
{
    size_t nc = (t->n + 1) / 2, al = 256;
    size_t o_sc = (nc + al - 1) / al * al;
    size_t o_mean = o_sc + (t->n_blocks + al - 1) / al * al;
    size_t o_max = o_mean + (t->n_groups * sizeof(float) + al - 1) / al * al;
    size_t total = o_max + t->n_groups * sizeof(float);
    uint8_t *mem = cuda_alloc(total, 0);
    if (!mem)
        return -1;
    d->wq_mem = mem;
    *bytes += total;
    if (cuda_upload(mem, t->codes, nc) || cuda_upload(mem + o_sc, t->scale_codes, t->n_blocks) ||
        cuda_upload(mem + o_mean, t->group_mean, t->n_groups * sizeof(float)) ||
        cuda_upload(mem + o_max, t->group_absmax, t->n_groups * sizeof(float)))
        return -1;
    d->wq = (struct cuda_nf4){t->n, t->n_blocks, t->n_groups, mem,
                              (const int8_t *)(mem + o_sc), (const float *)(mem + o_mean),
                              (const float *)(mem + o_max)};
    return 0;
}

static int dlin_make(struct cuda_model *cm, const struct model *m, const struct linear *l,
                     struct dlin *d)
{
    memset(d, 0, sizeof *d);
    d->in = l->in;
    d->out = l->out;
    d->r = l->r;
    d->scale = l->scale;
    d->ldw = l->in;
    d->wb = folds(cm, l) ? NULL : map_wb(cm, m, l);
    if (l->kind == WK_NF4 && nf4_upload(d, l->wq, &cm->bytes))
        return -1;
    d->dw = map_f(cm, m, l->dw);
    d->bias = map_f(cm, m, l->bias);
    d->dbias = map_f(cm, m, l->dbias);
    d->la = map_f(cm, m, l->la);
    d->dla = map_f(cm, m, l->dla);
    d->lb = map_f(cm, m, l->lb);
    d->dlb = map_f(cm, m, l->dlb);
    if (l->la) { /* A and B lie in [0, n_decay), which wbf copies */
        d->lab = cm->wbf + (l->la - m->train);
        d->lbb = cm->wbf + (l->lb - m->train);
    }
    return 0;
}

/* ------------------------------------------------------------ the model */

/* LoRA folded into the base product (docs/trainer.md, "LoRA folded into
 * the base product"). The projections that read one input (q, k, v; o;
 * gate, up; down) form a group; the forward's bf16 input of a group is
 * [x | x'A^T of each folded projection, r columns each, in order], and a
 * folded projection's matrix is [W | 0 ... scale B ... 0] with its B in
 * its own columns, so one product over the first col0 + r columns makes
 * x W^T + scale (x' A^T) B^T. */
static const int proj_group[PROJ_COUNT] = {0, 0, 0, 1, 2, 2, 3};
/* each group's first projection, and how many it has */
static const int group_first[4] = {PROJ_Q, PROJ_O, PROJ_GATE, PROJ_DOWN};
static const int group_count[4] = {3, 1, 2, 1};

/* wpad for folded d from host W (out, in): W's rows ldw apart, then r
 * rows for scale A (the backward's [dy | dy B] [W ; scale A]), the rest
 * zero; cuda_model_params_changed writes scale B and scale A. 0 or -1. */
static int fold_make(struct cuda_model *cm, const uint16_t *w, struct dlin *d, int ldw, int col0)
{
    size_t n = (size_t)(d->out + d->r) * (size_t)ldw;
    uint16_t *h = calloc(n, sizeof *h);
    if (!h)
        return -1;
    for (int o = 0; o < d->out; o++)
        memcpy(h + (size_t)o * ldw, w + (size_t)o * d->in, (size_t)d->in * sizeof *h);
    d->wpad = cuda_alloc(n * sizeof *h, 0);
    int rc = d->wpad ? cuda_upload(d->wpad, h, n * sizeof *h) : -1;
    free(h);
    if (rc)
        return -1;
    cm->bytes += n * sizeof *h;
    d->wb = d->wpad;
    d->ldw = ldw;
    d->col0 = col0;
    d->fold = 1;
    return 0;
}

/* The folded projections' table that cuda_model_params_changed writes
 * scale B and scale A from, in one launch. 0 or -1. */
static int fold_table(struct cuda_model *cm)
{
    int n = 0;
    for (int l = 0; l < cm->cfg.n_layers; l++)
        for (int p = 0; p < PROJ_COUNT; p++)
            n += cm->layers[l].proj[p].fold;
    if (!n)
        return 0;
    struct cuda_lora_fold *h = calloc((size_t)n, sizeof *h);
    if (!h)
        return -1;
    int i = 0;
    for (int l = 0; l < cm->cfg.n_layers; l++)
        for (int p = 0; p < PROJ_COUNT; p++) {
            const struct dlin *d = &cm->layers[l].proj[p];
            if (!d->fold)
                continue;
            uint16_t *as = cm->layers[l].astack[proj_group[p]];
            if (as) /* its rows of the group's stacked A */
                as += (size_t)(d->col0 - d->in) * (size_t)d->in;
            h[i++] = (struct cuda_lora_fold){d->wpad, d->la,    d->lb,    d->ldw, d->col0,
                                             d->out,  d->in,    d->r,     d->scale, as};
            size_t most = (size_t)d->r * ((size_t)d->out + (size_t)d->in);
            if (most > cm->fold_most)
                cm->fold_most = most;
        }
    cm->folds_d = cuda_alloc((size_t)n * sizeof *h, 0);
    int rc = cm->folds_d ? cuda_upload(cm->folds_d, h, (size_t)n * sizeof *h) : -1;
    free(h);
    if (rc)
        return -1;
    cm->n_folds = n;
    cm->bytes += (size_t)n * sizeof *h;
    return 0;
}

/* Each layer's groups: the strides of their inputs, and the folded
 * projections' matrices. 0 or -1. */
static int fold_layers(struct cuda_model *cm, const struct model *m)
{
    for (int l = 0; l < cm->cfg.n_layers; l++) {
        const struct model_layer *L = &m->layers[l];
        struct dlayer *D = &cm->layers[l];
        int cols[4] = {0};
        for (int p = 0; p < PROJ_COUNT; p++)
            if (folds(cm, &L->proj[p]))
                cols[proj_group[p]] += L->proj[p].r;
        int at[4] = {0};
        for (int p = 0; p < PROJ_COUNT; p++) {
            const struct linear *x = &L->proj[p];
            int g = proj_group[p];
            D->ldx[p] = x->in + cols[g];
            if (!folds(cm, x))
                continue;
            if (fold_make(cm, x->wb, &D->proj[p], x->in + cols[g], x->in + at[g]))
                return -1;
            at[g] += x->r;
            if (g != 1 && !D->astack[g]) {
                size_t n = (size_t)cols[g] * (size_t)x->in * sizeof(uint16_t);
                if (!(D->astack[g] = cuda_alloc(n, 0)))
                    return -1;
                cm->bytes += n;
                D->acols[g] = cols[g];
            }
        }
    }
    return 0;
}

/* The folded matrices' places in the host's bf16 block, sorted. 0 or -1. */
static int fold_holes(struct cuda_model *cm, const struct model *m)
{
    int n = 0;
    cm->holes = calloc((size_t)cm->cfg.n_layers * PROJ_COUNT + 1, sizeof *cm->holes);
    if (!cm->holes)
        return -1;
    for (int l = 0; l < cm->cfg.n_layers; l++)
        for (int p = 0; p < PROJ_COUNT; p++) {
            const struct linear *x = &m->layers[l].proj[p];
            if (!folds(cm, x))
                continue;
            struct bf_hole h = {(size_t)(x->wb - m->bf), (size_t)x->out * x->in};
            int i = n++;
            for (; i > 0 && cm->holes[i - 1].off > h.off; i--)
                cm->holes[i] = cm->holes[i - 1];
            cm->holes[i] = h;
        }
    cm->n_holes = n;
    return 0;
}

/* The bf16 block without the folded matrices. 0 or -1. */
static int bf_upload(struct cuda_model *cm, const struct model *m)
{
    size_t gone = 0;
    for (int i = 0; i < cm->n_holes; i++)
        gone += cm->holes[i].len;
    size_t n = m->n_bf - gone, from = 0, to = 0;
    if (!n)
        return 0;
    cm->bf = cuda_alloc(n * sizeof(uint16_t), 0);
    if (!cm->bf)
        return -1;
    cm->bytes += n * sizeof(uint16_t);
    for (int i = 0; i <= cm->n_holes; i++) {
        size_t end = i < cm->n_holes ? cm->holes[i].off : m->n_bf;
        if (end > from && cuda_upload(cm->bf + to, m->bf + from, (end - from) * sizeof(uint16_t)))
            return -1;
        to += end - from;
        if (i < cm->n_holes)
            from = cm->holes[i].off + cm->holes[i].len;
    }
    return 0;
}

int cuda_model_check(const struct model *m, char *err, size_t errcap)
{
    if (!m->opts.full && m->opts.base_kind == WK_F32) {
        snprintf(err, errcap,
                 "the GPU trainer reads a frozen base as bf16 or NF4, not fp32: train LoRA "
                 "with a 16-bit or a 4-bit base");
        return -1;
    }
    if (m->cfg.qk_norm) {
        snprintf(err, errcap, "the GPU trainer does not compute %s's q/k norms yet: train it on "
                              "the CPU", model_family_name(m->cfg.family));
        return -1;
    }
    for (int l = 0; l < m->cfg.n_layers; l++)
        if (m->cfg.no_rope[l]) {
            snprintf(err, errcap, "the GPU trainer does not leave the rotary positions out of "
                                  "%s's layers yet: train it on the CPU",
                     model_family_name(m->cfg.family));
            return -1;
        }
    if (model_rot_dim(&m->cfg) != m->cfg.head_dim || m->cfg.longrope) {
        snprintf(err, errcap, "the GPU trainer does not compute %s's partial rotary positions "
                              "or longrope scaling yet: train it on the CPU",
                 model_family_name(m->cfg.family));
        return -1;
    }
    if (m->cfg.head_dim > 256) {
        snprintf(err, errcap, "the GPU attention takes head dimensions up to 256, not %d",
                 m->cfg.head_dim);
        return -1;
    }
    if (m->cfg.n_experts > 0) {
        snprintf(err, errcap, "the GPU trainer has no mixture-of-experts layers yet: train %s "
                              "on the CPU", model_family_name(m->cfg.family));
        return -1;
    }
    return 0;
}

static void *dev_copy(const void *src, size_t bytes, size_t *total)
{
    if (!bytes)
        return NULL;
    void *d = cuda_alloc(bytes, 0);
    if (!d)
        return NULL;
    *total += bytes;
    if (src && cuda_upload(d, src, bytes)) {
        cuda_free(d);
        return NULL;
    }
    return d;
}

struct cuda_model *cuda_model_upload(const struct model *m, char *err, size_t errcap)
{
    if (cuda_model_check(m, err, errcap))
        return NULL;
    const struct model_config *c = &m->cfg;
    struct cuda_model *cm = calloc(1, sizeof *cm);
    if (!cm || !(cm->layers = calloc((size_t)c->n_layers, sizeof *cm->layers))) {
        free(cm);
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    cm->cfg = *c;
    cm->full = m->opts.full;
    cm->n_train = m->n_train;
    cm->n_decay = m->n_decay;
    cm->n_fixed = m->n_fixed;
    cm->n_bf = m->n_bf;
    size_t half = (size_t)c->head_dim / 2, nr = (size_t)m->rope_len * half;
    int bad = 0;
    if (m->n_train) {
        cm->train = dev_copy(m->train, m->n_train * sizeof(float), &cm->bytes);
        cm->grad = cuda_alloc(m->n_train * sizeof(float), 1);
        cm->bytes += m->n_train * sizeof(float);
        bad |= !cm->train || !cm->grad;
    }
    if (m->n_fixed)
        bad |= !(cm->fixed = dev_copy(m->fixed, m->n_fixed * sizeof(float), &cm->bytes));
    const char *fold_s = getenv("ALALLO_CUDA_LORA");
    if (fold_s && strcmp(fold_s, "fold") != 0 && strcmp(fold_s, "each") != 0) {
        snprintf(err, errcap, "ALALLO_CUDA_LORA=%s: fold or each", fold_s);
        cuda_model_free(cm);
        return NULL;
    }
    cm->fold = !fold_s || strcmp(fold_s, "fold") == 0;
    if (fold_holes(cm, m)) {
        snprintf(err, errcap, "out of memory");
        cuda_model_free(cm);
        return NULL;
    }
    if (m->n_bf)
        bad |= bf_upload(cm, m) != 0;
    if (m->n_decay) /* full: the matrices; LoRA: A and B */
        bad |= !(cm->wbf = dev_copy(NULL, m->n_decay * sizeof(uint16_t), &cm->bytes));
    cm->rope_cos = dev_copy(m->rope_cos, nr * sizeof(float), &cm->bytes);
    cm->rope_sin = dev_copy(m->rope_sin, nr * sizeof(float), &cm->bytes);
    cm->rope_len = m->rope_len;
    bad |= !cm->rope_cos || !cm->rope_sin;
    if (bad)
        goto fail;
    for (int l = 0; l < c->n_layers; l++) {
        const struct model_layer *L = &m->layers[l];
        struct dlayer *D = &cm->layers[l];
        D->ln1 = map_f(cm, m, L->ln1);
        D->ln2 = map_f(cm, m, L->ln2);
        D->ln3 = map_f(cm, m, L->ln3);
        D->ln4 = map_f(cm, m, L->ln4);
        D->dln1 = map_f(cm, m, L->dln1);
        D->dln2 = map_f(cm, m, L->dln2);
        D->dln3 = map_f(cm, m, L->dln3);
        D->dln4 = map_f(cm, m, L->dln4);
        for (int p = 0; p < PROJ_COUNT; p++)
            if (dlin_make(cm, m, &L->proj[p], &D->proj[p]))
                goto fail;
        for (int p = 0; p < PROJ_COUNT; p++) { /* T's columns, in projection order */
            int g = proj_group[p];
            D->toff[p] = D->tcols[g];
            D->tcols[g] += D->proj[p].dla ? D->proj[p].r : 0;
        }
    }
    if (fold_layers(cm, m) || fold_table(cm))
        goto fail;
    cm->norm_f = map_f(cm, m, m->norm_f);
    cm->dnorm_f = map_f(cm, m, m->dnorm_f);
    cm->embed_dw = map_f(cm, m, m->embed.dw);
    const struct linear *E = &m->embed;
    if (E->kind == WK_F32) {
        cm->embed_f = map_f(cm, m, E->w);
    } else if (E->kind == WK_BF16) {
        cm->embed_b = map_wb(cm, m, E);
    } else {
        /* QLoRA: the lookup reads scattered rows, so the embedding is
         * decoded once and kept as bf16 (its NF4 arrays are dropped) */
        struct dlin tmp = {0};
        size_t n = (size_t)E->out * E->in, before = cm->bytes;
        cm->embed_bf = dev_copy(NULL, n * sizeof(uint16_t), &cm->bytes);
        if (!cm->embed_bf || dlin_make(cm, m, E, &tmp)) {
            cuda_free(tmp.wq_mem);
            goto fail;
        }
        cuda_nf4_to_bf16(cm->embed_bf, &tmp.wq, 0, n);
        int rc = cuda_ctx_sync();
        cuda_free(tmp.wq_mem);
        cm->bytes = before + n * sizeof(uint16_t);
        if (rc)
            goto fail;
        cm->embed_b = cm->embed_bf;
    }
    if (c->tied && E->kind == WK_NF4) /* the head reads the decoded embedding */
        cm->head = (struct dlin){.in = E->in, .out = E->out, .wb = cm->embed_bf, .ldw = E->in};
    else if (dlin_make(cm, m, c->tied ? E : &m->head, &cm->head))
        goto fail;
    cuda_model_params_changed(cm);
    if (cuda_ctx_sync())
        goto fail;
    return cm;
fail:
    snprintf(err, errcap, "copying the model to the GPU: %s", cuda_ctx_error());
    cuda_model_free(cm);
    return NULL;
}

void cuda_model_free(struct cuda_model *cm)
{
    if (!cm)
        return;
    for (int l = 0; cm->layers && l < cm->cfg.n_layers; l++)
        for (int p = 0; p < PROJ_COUNT; p++) {
            cuda_free(cm->layers[l].proj[p].wq_mem);
            cuda_free(cm->layers[l].proj[p].wpad);
        }
    for (int l = 0; cm->layers && l < cm->cfg.n_layers; l++)
        for (int g = 0; g < 4; g++)
            cuda_free(cm->layers[l].astack[g]);
    free(cm->holes);
    cuda_free(cm->folds_d);
    cuda_free(cm->head.wq_mem);
    cuda_free(cm->train);
    cuda_free(cm->grad);
    cuda_free(cm->fixed);
    cuda_free(cm->bf);
    cuda_free(cm->wbf);
    cuda_free(cm->embed_bf);
    cuda_free(cm->rope_cos);
    cuda_free(cm->rope_sin);
    free(cm->layers);
    free(cm);
}

size_t cuda_model_bytes(const struct cuda_model *cm)
{
    return cm->bytes;
}

int cuda_model_lora_folded(const struct cuda_model *cm)
{
    int n = 0;
    for (int l = 0; l < cm->cfg.n_layers; l++)
        for (int p = 0; p < PROJ_COUNT; p++)
            n += cm->layers[l].proj[p].fold;
    return n;
}

float *cuda_model_params(struct cuda_model *cm)
{
    return cm->train;
}

float *cuda_model_grads(struct cuda_model *cm)
{
    return cm->grad;
}

size_t cuda_model_n_train(const struct cuda_model *cm)
{
    return cm->n_train;
}

size_t cuda_model_n_decay(const struct cuda_model *cm)
{
    return cm->n_decay;
}

void cuda_model_zero_grads(struct cuda_model *cm)
{
    if (cm->n_train)
        cuda_zero(cm->grad, cm->n_train * sizeof(float));
}

void cuda_model_params_changed(struct cuda_model *cm)
{
    if (cm->wbf)
        cuda_to_bf16(cm->wbf, cm->train, cm->n_decay);
    cuda_lora_fold(cm->folds_d, cm->n_folds, cm->fold_most);
}

int cuda_model_put_params(struct cuda_model *cm, const struct model *m)
{
    if (m->n_train != cm->n_train)
        return -1;
    if (cm->n_train && cuda_upload(cm->train, m->train, cm->n_train * sizeof(float)))
        return -1;
    cuda_model_params_changed(cm);
    return cuda_ctx_sync();
}

int cuda_model_get_params(const struct cuda_model *cm, struct model *m)
{
    if (m->n_train != cm->n_train)
        return -1;
    return cm->n_train ? cuda_download(m->train, cm->train, cm->n_train * sizeof(float)) : 0;
}

int cuda_model_get_grads(const struct cuda_model *cm, struct model *m)
{
    if (m->n_train != cm->n_train)
        return -1;
    return cm->n_train ? cuda_download(m->grad, cm->grad, cm->n_train * sizeof(float)) : 0;
}

/* ------------------------------------------------------------ activations */

struct cuda_acts *cuda_acts_create(const struct cuda_model *cm, int B, int T, int recompute,
                                   char *err, size_t errcap)
{
    const struct model_config *c = &cm->cfg;
    if (B < 1 || T < 1 || (size_t)B * T > (1u << 22)) {
        snprintf(err, errcap, "a batch of %d x %d tokens is outside what the GPU pass takes",
                 B, T);
        return NULL;
    }
    if (T > cm->rope_len) {
        snprintf(err, errcap, "context %d is beyond the %d positions of the uploaded rotary "
                 "tables", T, cm->rope_len);
        return NULL;
    }
    struct cuda_acts *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    /* L: layers whose inputs are kept; K: layers whose other activations
     * are (one when the backward pass recomputes them) */
    size_t N = (size_t)B * T, L = (size_t)c->n_layers, C = (size_t)c->hidden;
    size_t K = recompute ? 1 : L;
    size_t qd = (size_t)c->n_heads * c->head_dim, kd = (size_t)c->n_kv_heads * c->head_dim;
    size_t F = (size_t)c->intermediate, V = (size_t)c->vocab;
    size_t r = 0, pn = c->post_norms ? 1 : 0;
    size_t deq = CUDA_DEQ_MIN, max_in = C, max_out = C;
    const char *deq_s = getenv("ALALLO_CUDA_DEQ_FLOATS"), *nf4_s = getenv("ALALLO_CUDA_NF4");
    if (deq_s) {
        char *end;
        unsigned long long v = strtoull(deq_s, &end, 10);
        if (end == deq_s || *end || v == 0 || v > CUDA_DEQ_MIN) {
            snprintf(err, errcap, "ALALLO_CUDA_DEQ_FLOATS=%s: a count of values, 1 to %u",
                     deq_s, CUDA_DEQ_MIN);
            free(a);
            return NULL;
        }
        deq = (size_t)v;
    }
    if (nf4_s && strcmp(nf4_s, "chunks") != 0 && strcmp(nf4_s, "fused") != 0) {
        snprintf(err, errcap, "ALALLO_CUDA_NF4=%s: chunks or fused", nf4_s);
        free(a);
        return NULL;
    }
    a->nf4_fused = nf4_s && strcmp(nf4_s, "fused") == 0;
    for (int p = 0; p < PROJ_COUNT; p++) {
        const struct dlin *d = &cm->layers[0].proj[p];
        if ((size_t)d->r > r)
            r = (size_t)d->r;
        if ((size_t)d->in > max_in)
            max_in = (size_t)d->in;
        if ((size_t)d->out > max_out)
            max_out = (size_t)d->out;
    }
    if (deq < (size_t)NF4_BLOCK * max_in) /* a chunk is whole NF4 blocks of rows */
        deq = (size_t)NF4_BLOCK * max_in;
    size_t max_ldx = max_in; /* the forward's bf16 inputs, LoRA's columns beside */
    for (int l = 0; l < c->n_layers; l++)
        for (int p = 0; p < PROJ_COUNT; p++)
            if ((size_t)cm->layers[l].ldx[p] > max_ldx)
                max_ldx = (size_t)cm->layers[l].ldx[p];
    /* the products' inputs kept per layer where the backward would make
     * them again for the weight gradients (change 1n): the groups with a
     * weight that trains (o's input is attention's output, kept anyway) */
    size_t kin = 0;
    if (!recompute) {
        for (int l = 0; l < c->n_layers; l++)
            for (int p = 0; p < PROJ_COUNT; p++) {
                const struct dlin *d = &cm->layers[l].proj[p];
                size_t w = (size_t)cm->layers[l].ldx[p];
                if (p != PROJ_O && (d->dw || d->dla) && w > a->kin_w[proj_group[p]])
                    a->kin_w[proj_group[p]] = w;
            }
        kin = L * N * (a->kin_w[0] + a->kin_w[2] + a->kin_w[3]);
    }
    size_t dbt = 0; /* LoRA's dB and dy B in one pass (change 2e) */
    for (int l = 0; l < c->n_layers; l++)
        for (int p = 0; p < PROJ_COUNT; p++) {
            const struct dlin *d = &cm->layers[l].proj[p];
            size_t n = d->dlb ? cuda_lora_dbt_floats((int)N, d->out, d->r) : 0;
            dbt = n > dbt ? n : dbt;
        }
    size_t tgc = 0, tgin = 0; /* a group's dA in one product (change 2d): its T */
    for (int l = 0; dbt && l < c->n_layers; l++)
        for (int g = 0; g < 4; g++) {
            const struct dlayer *D = &cm->layers[l];
            int n = 0;
            for (int p = group_first[g]; p < group_first[g] + group_count[g]; p++)
                n += D->proj[p].dla != NULL;
            if (n < 2)
                continue;
            tgc = (size_t)D->tcols[g] > tgc ? (size_t)D->tcols[g] : tgc;
            size_t in = (size_t)D->proj[group_first[g]].in;
            tgin = in > tgin ? in : tgin;
        }
    int cap = c->final_softcap > 0.0f; /* else the logits are bf16 alone (change 1h) */
    size_t hr = CUDA_HEAD_MAX_FLOATS / V;
    if (hr < 16)
        hr = 16;
    if (hr > N)
        hr = N;
    a->B = B;
    a->T = T;
    a->N = N;
    a->head_rows = (int)hr;
    a->r = (int)r;
    a->recompute = recompute != 0;
    a->n_layers = cm->cfg.n_layers;
    a->max_in = max_in;
    a->deq_cap = deq;
    a->hbuf_n = N * F;
    /* fp32 arrays, then bf16 and int32 arrays counted in bytes */
    size_t fsz[] = {
        K * N, K * N,                                    /* rstd1 rstd2 */
        K * (size_t)B * c->n_heads * T,                  /* lse */
        K * N * C * pn, K * N * C * pn, K * N * pn, K * N * pn, /* pa pf rstd3 rstd4 */
        N * C, N,                                        /* lnf rstdf */
        N * C, N * C, N * C, N * C, N * C,               /* ln tmp dres dres2 dln */
        N * qd, N * qd, N * kd, N * kd,                  /* dq dao dk dv */
        N * F, N * F,                                    /* hbuf dh */
        cap ? hr * V : 0, cap ? hr * V : 0,              /* logits capped: 1h */
        hr * C, hr * C, N,                               /* xc dxc row_loss */
        (size_t)B * c->n_heads * T, N,                   /* attn_d row_w */
        dbt, tgc * tgin,                                 /* dbt dag: 2e, 2d */
    };
    float **fdst[] = {
        &a->rstd1, &a->rstd2, &a->lse,
        &a->pa, &a->pf, &a->rstd3, &a->rstd4, &a->lnf, &a->rstdf,
        &a->ln, &a->tmp, &a->dres, &a->dres2, &a->dln, &a->dq, &a->dao, &a->dk, &a->dv,
        &a->hbuf, &a->dh, &a->logits, &a->capped, &a->xc, &a->dxc,
        &a->row_loss, &a->attn_d, &a->row_w, &a->dbt, &a->dag,
    };
    size_t ldy = max_out + r; /* dy's bf16 and t = dy B beside it */
    a->ldy = (int)ldy;
    size_t bsz[] = {N * max_ldx, N * max_in, N * ldy, N * ldy, /* xb yb dyb dub */
                    hr * V, hr * C, deq, /* bf16 values */
                    K * PROJ_COUNT * N * r, N * (r ? r : 1), /* xa ltmp */
                    K * N * F, K * N * F, /* g u */
                    K * N * qd, K * N * kd, K * N * kd, /* q k v */
                    (L + 1) * N * C, K * N * C, /* res mid */
                    K * N * qd, kin, N * tgc}; /* ao kin tg */
    uint16_t **bdst[] = {&a->xb, &a->yb, &a->dyb, &a->dub, &a->logits_b, &a->xcb,
                         &a->deq, &a->xa, &a->ltmp, &a->g, &a->u, &a->q, &a->k, &a->v,
                         &a->res, &a->mid, &a->ao, &a->kin, &a->tg};
    size_t isz[] = {N, N, N, N, N}; /* int32 values */
    int32_t **idst[] = {&a->ids, &a->seg, &a->rows, &a->tgt, &a->hits_d};
    size_t nf = sizeof fsz / sizeof fsz[0], nb = sizeof bsz / sizeof bsz[0];
    size_t ni = sizeof isz / sizeof isz[0];
    size_t total = 0;
    for (size_t i = 0; i < nf; i++)
        total += (fsz[i] * sizeof(float) + 255) & ~(size_t)255;
    for (size_t i = 0; i < nb; i++)
        total += (bsz[i] * sizeof(uint16_t) + 255) & ~(size_t)255;
    for (size_t i = 0; i < ni; i++)
        total += (isz[i] * sizeof(int32_t) + 255) & ~(size_t)255;
    a->mem = cuda_alloc(total, 1);
    a->rows_h = malloc(N * sizeof(int32_t));
    a->tgt_h = malloc(N * sizeof(int32_t));
    a->hits_h = malloc(N * sizeof(int32_t));
    a->loss_h = malloc(N * sizeof(float));
    a->row_w_h = malloc(N * sizeof(float));
    if (!a->mem || !a->rows_h || !a->tgt_h || !a->hits_h || !a->loss_h || !a->row_w_h) {
        snprintf(err, errcap, "no room for the activations of %d x %d tokens (%zu MiB): %s",
                 B, T, total >> 20, a->mem ? "out of host memory" : cuda_ctx_error());
        cuda_acts_free(a);
        return NULL;
    }
    a->bytes = total;
    uint8_t *base = a->mem;
    size_t off = 0;
    for (size_t i = 0; i < nf; i++) {
        *fdst[i] = fsz[i] ? (float *)(base + off) : NULL;
        off += (fsz[i] * sizeof(float) + 255) & ~(size_t)255;
    }
    for (size_t i = 0; i < nb; i++) {
        int optional = bdst[i] == &a->kin || bdst[i] == &a->tg; /* NULL when not made */
        *bdst[i] = bsz[i] || !optional ? (uint16_t *)(base + off) : NULL;
        off += (bsz[i] * sizeof(uint16_t) + 255) & ~(size_t)255;
    }
    for (size_t i = 0; i < ni; i++) {
        *idst[i] = (int32_t *)(base + off);
        off += (isz[i] * sizeof(int32_t) + 255) & ~(size_t)255;
    }
    return a;
}

void cuda_acts_free(struct cuda_acts *a)
{
    if (!a)
        return;
    cuda_free(a->drop);
    cuda_free(a->drop2);
    cuda_free(a->seeds);
    cuda_free(a->mem);
    free(a->rows_h);
    free(a->tgt_h);
    free(a->hits_h);
    free(a->loss_h);
    free(a->row_w_h);
    cuda_graphs_free(a->graphs[0]);
    cuda_graphs_free(a->graphs[1]);
    free(a);
}

int cuda_acts_graphs(struct cuda_acts *a, int on)
{
    for (int i = 0; i < 2; i++) {
        cuda_graphs_free(a->graphs[i]);
        a->graphs[i] = on ? cuda_graphs_create() : NULL;
    }
    if (on && (!a->graphs[0] || !a->graphs[1])) {
        cuda_acts_graphs(a, 0);
        return -1;
    }
    return 0;
}

void cuda_acts_graph_stats(const struct cuda_acts *a, struct cuda_graph_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 1; i >= 0; i--) {
        struct cuda_graph_stats one;
        if (!a->graphs[i])
            continue;
        cuda_graphs_stats(a->graphs[i], &one);
        out->eager += one.eager;
        out->captures += one.captures;
        out->replays += one.replays;
        out->walk_s += one.walk_s;
        if (one.off[0])
            memcpy(out->off, one.off, sizeof out->off);
    }
}

size_t cuda_acts_bytes(const struct cuda_acts *a)
{
    return a->bytes + (a->drop ? 2 * a->N * a->max_in * sizeof(float) +
                                     (size_t)a->n_layers * PROJ_COUNT * sizeof(uint64_t)
                               : 0);
}

void cuda_acts_offset(struct cuda_acts *a, size_t tok0)
{
    a->tok0 = tok0;
}

int cuda_acts_rows(const struct cuda_acts *a)
{
    return a->B;
}

size_t cuda_acts_hits(const struct cuda_acts *a)
{
    return a->hits;
}

int cuda_acts_dropout(struct cuda_acts *a, float p, uint64_t seed)
{
    if (!(p >= 0.0f && p < 1.0f))
        return -1;
    a->drop_p = a->r ? p : 0.0f; /* nothing drops without adapters */
    a->drop_seed = seed;
    if (a->drop_p == 0.0f)
        return 0;
    /* x' and the masked dx of the widest adapter input, and the seeds,
     * made the first time they are needed */
    size_t bytes = a->N * a->max_in * sizeof(float), n = (size_t)a->n_layers * PROJ_COUNT;
    if (!a->drop) {
        a->drop = cuda_alloc(bytes, 0);
        a->drop2 = a->drop ? cuda_alloc(bytes, 0) : NULL;
        a->seeds = a->drop2 ? cuda_alloc(n * sizeof(uint64_t), 0) : NULL;
        if (!a->seeds) {
            cuda_free(a->drop);
            cuda_free(a->drop2);
            a->drop = a->drop2 = NULL;
            a->drop_p = 0.0f;
            return -1;
        }
    }
    uint64_t *h = malloc(n * sizeof *h);
    if (!h) {
        a->drop_p = 0.0f;
        return -1;
    }
    for (size_t i = 0; i < n; i++) /* projection p of layer l at l * PROJ_COUNT + p */
        h[i] = rng_derive(seed, (uint64_t)i);
    int rc = cuda_upload(a->seeds, h, n * sizeof *h);
    free(h);
    if (rc)
        a->drop_p = 0.0f;
    return rc;
}

/* ------------------------------------------------------------ products */

static void check(struct cuda_acts *a, int rc)
{
    if (rc)
        a->failed = 1;
}

/* A projection's LoRA dropout in the passes: p (0: none) and its seed on
 * the device (a->seeds), as proj_scratch in model_pass.c draws it: its own
 * mask per product. */
struct gpu_dropout {
    float p;
    const uint64_t *seed;
};

static struct gpu_dropout proj_dropout(const struct cuda_acts *a, const struct dlin *d, int l,
                                       int p)
{
    struct gpu_dropout x = {0.0f, NULL};
    if (a->drop_p > 0.0f && d->r > 0)
        x = (struct gpu_dropout){a->drop_p, a->seeds + (size_t)l * PROJ_COUNT + (size_t)p};
    return x;
}

/* Weight rows [r0, r0+nr) of d as bf16: the stored copy, or NF4 decoded
 * into the acts' scratch just now (nr rows must fit it: nf4_chunk_rows). */
static const uint16_t *weight_rows(struct cuda_acts *a, const struct dlin *d, int r0, int nr)
{
    if (d->wb)
        return d->wb + (size_t)r0 * d->in;
    cuda_nf4_to_bf16(a->deq, &d->wq, (size_t)r0 * d->in, (size_t)nr * d->in);
    return a->deq;
}

/* The rows of an NF4 matrix of `in` columns decoded at a time: as many
 * whole NF4 blocks of rows as the scratch holds (at least one: the
 * scratch is sized for it). */
static int nf4_chunk_rows(const struct cuda_acts *a, int in)
{
    size_t rows = a->deq_cap / (size_t)in / NF4_BLOCK * NF4_BLOCK;
    return rows > (size_t)INT32_MAX ? INT32_MAX : (int)rows;
}

/* A product with an NF4 W, a chunk of W's rows decoded at a time, each
 * chunk one product at cuBLASLt's rate (never a whole decoded matrix), or
 * on request the product that decodes tile by tile in shared memory
 * (cuda_nf4_gemm; docs/trainer.md, "NF4 a chunk at a time"). forward: y
 * (N,out) = x W^T from xb into out, or as bf16 into outb (out NULL), each
 * chunk making its columns of y (each the same sum as one product's);
 * else dx (N,in) = dy W + beta dx from dy's bf16, the first chunk with
 * beta (0: dx written), the others adding their part of the sum. */
static void nf4_product(struct cuda_acts *a, const struct dlin *d, int forward, float *out,
                        uint16_t *outb, const uint16_t *inb, int lda, int N, float beta)
{
    assert((out != NULL) != (outb != NULL) && (!outb || forward));
    if (a->nf4_fused && outb) {
        /* the fused product writes fp32: through hbuf, free while q, k, v,
         * gate and up run (the only projections with a bf16 output) */
        assert((size_t)N * d->out <= a->hbuf_n);
        cuda_nf4_gemm(1, N, d->out, d->in, 1.0f, inb, lda, &d->wq, d->in, 0.0f, a->hbuf, d->out);
        cuda_to_bf16(outb, a->hbuf, (size_t)N * d->out);
        return;
    }
    if (a->nf4_fused) {
        if (forward)
            cuda_nf4_gemm(1, N, d->out, d->in, 1.0f, inb, lda, &d->wq, d->in, 0.0f, out,
                          d->out);
        else
            cuda_nf4_gemm(0, N, d->in, d->out, 1.0f, inb, lda, &d->wq, d->in, beta, out,
                          d->in);
        return;
    }
    int step = nf4_chunk_rows(a, d->in);
    for (int r0 = 0; r0 < d->out; r0 += step) {
        int nr = d->out - r0 < step ? d->out - r0 : step;
        const uint16_t *w = weight_rows(a, d, r0, nr);
        if (outb)
            check(a, cuda_gemm_bf16_out(0, 1, N, nr, d->in, 1.0f, inb, lda, w, d->in, 0.0f,
                                        outb + r0, d->out));
        else if (forward)
            check(a, cuda_gemm_bf16(0, 1, N, nr, d->in, 1.0f, inb, lda, w, d->in, 0.0f,
                                    out + r0, d->out));
        else /* the first chunk with the caller's beta, the rest adding */
            check(a, cuda_gemm_bf16(0, 0, N, d->in, nr, 1.0f, inb + r0, lda, w, d->in,
                                    r0 ? 1.0f : beta, out, d->in));
    }
}

/* Whether one product makes d's output (forward) or its dX (backward,
 * with dropout drop): a 16-bit W, and LoRA folded or none; a dropped
 * LoRA input unfolds the backward's (its mask is LoRA's alone). The
 * products that write bf16 alone (changes 1l, 1m) need it. */
static int one_product(const struct dlin *d, int backward, int drop)
{
    return d->wb && (d->r == 0 || (d->fold && !(backward && drop)));
}

/* LoRA's dropped input x' = dropout(x) (n values from element e0 on) as
 * bf16 in a->yb: from the fp32 x, or from x's bf16 alone (xk, packed:
 * attention's output, change 1k). */
static const uint16_t *dropped_bf16(struct cuda_acts *a, const float *x, const uint16_t *xk,
                                    size_t n, struct gpu_dropout dr, size_t e0)
{
    if (x)
        cuda_dropout_at(a->drop, x, n, dr.p, dr.seed, e0);
    else
        cuda_dropout_bf16_at(a->drop, xk, n, dr.p, dr.seed, e0);
    cuda_to_bf16(a->yb, a->drop, n);
    return a->yb;
}

/* y (N,out) = x W^T + b + scale (x' A^T) B^T; xb is x as bf16, its rows
 * ldx apart (the caller's kernel wrote it once for the products that
 * share an input); xa OUT = x' A^T as bf16. LoRA's products read bf16 too
 * (x' is xb itself without dropout; A and B the copies
 * cuda_model_params_changed keeps) and sum in fp32 on the tensor cores;
 * x' A^T is rounded to bf16 once, as the products after it and the
 * backward read it. Folded (d->fold): x' A^T goes into its columns of xb
 * as well, and one product over [x | LoRA's columns] and [W | scale B]
 * makes y; else (x' A^T) B^T is a product of its own, added into y.
 * With yb (y NULL) the products write y as bf16 (change 1g: gate's and
 * up's outputs); LoRA's own product then adds into the bf16, rounding
 * again, as a bf16 trainer does. With yr as well, the one product adds
 * yr (bf16, the residual stream) in its epilogue: yb = yr + x W^T (+ the
 * folded LoRA), rounded once (change 1m; lin_adds says when). xa NULL:
 * x A^T is in xb's columns already, made for the whole group by one
 * product (change 2c: folded, no dropout). */
static void lin_forward(struct cuda_acts *a, const struct dlin *d, float *y, uint16_t *yb,
                        const uint16_t *yr, const float *x, const uint16_t *xk, uint16_t *xb,
                        int ldx, int N, uint16_t *xa, struct gpu_dropout dr)
{
    assert((y != NULL) != (yb != NULL));
    assert(!yr || (yb && one_product(d, 0, 0) && !d->bias));
    assert(xa || d->r == 0 || (d->fold && dr.p == 0.0f));
    uint16_t *ybias = NULL; /* with a bias, the bf16 is made with it, rounding once */
    if (yb && d->bias) {
        assert((size_t)N * d->out <= a->hbuf_n); /* hbuf is free while q, k, v run */
        ybias = yb;
        yb = NULL;
        y = a->hbuf;
    }
    if (d->r > 0 && xa) {
        const uint16_t *xd = xb;
        int ldd = ldx;
        if (dr.p > 0.0f) { /* x' = dropout(x), as bf16 in yb (free in the forward) */
            xd = dropped_bf16(a, x, xk, (size_t)N * d->in, dr, a->tok0 * (size_t)d->in);
            ldd = d->in;
        }
        check(a, cuda_gemm_bf16_out(0, 1, N, d->r, d->in, 1.0f, xd, ldd, d->lab, d->in, 0.0f,
                                    xa, d->r));
    }
    int K = d->fold ? d->col0 + d->r : d->in;
    if (d->fold && xa)
        cuda_copy_cols(xb + d->col0, ldx, xa, d->r, N, d->r);
    if (d->wb && yr)
        check(a, cuda_gemm_bf16_out_add(0, 1, N, d->out, K, 1.0f, xb, ldx, d->wb, d->ldw, yr, yb,
                                        d->out));
    else if (d->wb && yb)
        check(a, cuda_gemm_bf16_out(0, 1, N, d->out, K, 1.0f, xb, ldx, d->wb, d->ldw, 0.0f, yb,
                                    d->out));
    else if (d->wb)
        check(a, cuda_gemm_bf16(0, 1, N, d->out, K, 1.0f, xb, ldx, d->wb, d->ldw, 0.0f, y,
                                d->out));
    else {
        assert(ldx == d->in && !d->fold); /* no NF4 projection folds: no columns */
        nf4_product(a, d, 1, y, yb, xb, ldx, N, 0.0f);
    }
    if (d->bias && !ybias)
        cuda_add_bias(y, d->bias, N, d->out);
    if (d->r > 0 && !d->fold && yb)
        check(a, cuda_gemm_bf16_out(0, 1, N, d->out, d->r, d->scale, xa, d->r, d->lbb, d->r,
                                    1.0f, yb, d->out));
    else if (d->r > 0 && !d->fold)
        check(a, cuda_gemm_bf16(0, 1, N, d->out, d->r, d->scale, xa, d->r, d->lbb, d->r, 1.0f, y,
                                d->out));
    if (ybias)
        cuda_add_bias_bf16(ybias, y, d->bias, N, d->out);
}

/* LoRA's side of a projection's backward (lin_backward): x' A^T as the
 * forward kept it, its rows ldxa apart; tg: where cuda_lora_dbt writes
 * t = dy B too, the projection's columns of its group's gathered T (rows
 * ldtg apart), whose dA the group makes in one product (change 2d: the
 * projection makes none), or NULL: the projection makes its own dA. */
struct lora_side {
    const uint16_t *xa;
    int ldxa;
    uint16_t *tg;
    int ldtg;
};

/* As linear_backward: dx += dy W + scale ((dy B) A) [masked] (dx NULL to
 * skip; dx_fresh: dx holds nothing yet, and the base's dX product, the
 * first into it, writes it, beta 0), dw += dy^T x (xb: x as bf16, its rows
 * ldxb apart, needed when d->dw, and for dA when no dropout), dbias, dB, dA. dyb is dy as
 * bf16, its rows a->ldy apart, made by the kernel that made dy, or NULL
 * to convert it here (into a->dyb); dy may be NULL beside dyb when no
 * bias trains (its one fp32 reader); ldy: dyb's row stride (a->dyb's,
 * a->ldy, unless the caller's dyb has its own). LoRA's products read bf16 (dy, x',
 * xa, dy B rounded once, A and B's copies) and add into the fp32 dA, dB
 * and dx. Folded (d->fold, without dropout): t = dy B goes into dyb's r
 * columns past dy, and one product over [dy | t] and [W ; scale A] adds
 * dy W + scale t A into dx; else t A is a product of its own (masked with
 * dropout). dxb (dx NULL): dx written as bf16 alone by the one product
 * that makes it (change 1l: dh), which needs a 16-bit W, dx fresh, and
 * LoRA folded or none (lin_dx_bf16). ls: LoRA's side (struct lora_side). */
static void lin_backward(struct cuda_acts *a, const struct dlin *d, float *dx, uint16_t *dxb,
                         int dx_fresh, const float *dy, uint16_t *dyb, int ldy, const float *x,
                         const uint16_t *xb, int ldxb, struct lora_side ls, int N,
                         struct gpu_dropout dr)
{
    int drop = dr.p > 0.0f, fold = d->fold && !drop;
    assert(dyb || ldy == a->ldy); /* converted into a->dyb below */
    float beta = dx_fresh ? 0.0f : 1.0f; /* the base's dX product: the first into dx */
    assert(dy || (dyb && !d->dbias)); /* the fp32 is read for the bias and the bf16 alone */
    assert(!dxb || (!dx && dx_fresh && one_product(d, 1, drop)));
    if (!dyb && (dx || dxb || d->dw || d->r > 0)) {
        cuda_to_bf16_rows(a->dyb, ldy, dy, N, d->out);
        dyb = a->dyb;
    }
    if (d->dbias)
        cuda_bias_backward(d->dbias, dy, N, d->out);
    uint16_t *t = fold ? dyb + d->out : a->ltmp; /* (N,r) = dy B */
    int ldt = fold ? ldy : d->r;
    if (d->r > 0) {
        assert(!fold || d->out + d->r <= ldy);
        size_t n = (size_t)N * d->in;
        assert(!ls.tg || (a->dbt && d->dlb && !drop));
        if (d->dlb && a->dbt && d->r <= CUDA_LORA_DBT_MAX_R) { /* one pass over dy (2e) */
            cuda_lora_dbt(N, d->out, d->r, d->scale, dyb, ldy, d->lbb, ls.xa, ls.ldxa, d->dlb, t,
                          ldt, ls.tg, ls.ldtg, a->dbt);
        } else {
            check(a, cuda_gemm_bf16_out(0, 0, N, d->r, d->out, 1.0f, dyb, ldy, d->lbb, d->r,
                                        0.0f, t, ldt));
            if (d->dlb) /* dB (out,r) += scale dy^T xa */
                check(a, cuda_gemm_bf16(1, 0, d->out, d->r, N, d->scale, dyb, ldy, ls.xa,
                                        ls.ldxa, 1.0f, d->dlb, d->r));
        }
        if (d->dla && !ls.tg) { /* else its group's (group_da) */ /* dA (r,in) += scale t^T x' */
            const uint16_t *xd = xb;
            int ldd = ldxb;
            if (drop) { /* from x, or its bf16 alone (attention's output: 1k) */
                assert(x || ldxb == d->in);
                xd = dropped_bf16(a, x, xb, n, dr, a->tok0 * (size_t)d->in);
                ldd = d->in;
            }
            check(a, cuda_gemm_bf16(1, 0, d->r, d->in, N, d->scale, t, ldt, xd, ldd, 1.0f,
                                    d->dla, d->in));
        }
    }
    if (dxb) /* one product writes dx as bf16 (folded: K runs over t's columns too) */
        check(a, cuda_gemm_bf16_out(0, 0, N, d->in, d->out + (fold ? d->r : 0), 1.0f, dyb, ldy,
                                    d->wb, d->ldw, 0.0f, dxb, d->in));
    else if (dx && fold) /* [dy | t] [W ; scale A]: the rows of wpad past W's */
        check(a, cuda_gemm_bf16(0, 0, N, d->in, d->out + d->r, 1.0f, dyb, ldy, d->wb, d->ldw,
                                beta, dx, d->in));
    else if (dx && d->wb)
        check(a, cuda_gemm_bf16(0, 0, N, d->in, d->out, 1.0f, dyb, ldy, d->wb, d->ldw, beta, dx,
                                d->in));
    else if (dx)
        nf4_product(a, d, 0, dx, NULL, dyb, ldy, N, beta);
    if (d->dw) /* full fine-tuning: never folded, so wb is (out, in) */
        check(a, cuda_gemm_bf16(1, 0, d->out, d->in, N, 1.0f, dyb, ldy, xb, ldxb, 1.0f, d->dw,
                                d->in));
    if (d->r > 0 && dx && !fold) {
        size_t n = (size_t)N * d->in;
        if (drop) { /* dx += (scale t A) * keep/(1-p) */
            check(a, cuda_gemm_bf16(0, 0, N, d->in, d->r, d->scale, t, ldt, d->lab, d->in, 0.0f,
                                    a->drop, d->in));
            cuda_dropout_at(a->drop2, a->drop, n, dr.p, dr.seed, a->tok0 * (size_t)d->in);
            cuda_accumulate(dx, a->drop2, n);
        } else {
            check(a, cuda_gemm_bf16(0, 0, N, d->in, d->r, d->scale, t, ldt, d->lab, d->in, 1.0f,
                                    dx, d->in));
        }
    }
}

/* ------------------------------------------------------------ the pass */

struct layer_acts {
    uint16_t *x, *mid, *out; /* the residual stream, bf16 */
    float *rstd1, *rstd2, *lse;
    uint16_t *q, *k, *v, *ao;
    uint16_t *g, *u;
    float *pa, *pf, *rstd3, *rstd4;
    uint16_t *xa[PROJ_COUNT];  /* x' A^T (N, r), rows ldxa apart */
    int ldxa[PROJ_COUNT];
    uint16_t *kin[4];  /* each group's kept bf16 input (a->kin), or NULL */
    int grouped[4];    /* change 2c: the group's x A^T is one product, into
                        * its kept input's columns, where xa points */
    int da_group[4];   /* change 2d: the group's dA is one product (da_on) */
};

/* Whether projections p0..p0+n-1 of layer l read their fp32 input: only
 * to draw LoRA's dropout mask from it (lin_forward, lin_backward); every
 * product reads the bf16 copy. Without, the kernel that makes the input
 * writes its bf16 alone (change 1b). */
static int group_reads_f32(const struct cuda_model *cm, const struct cuda_acts *a, int l, int p0,
                           int n)
{
    for (int p = p0; p < p0 + n; p++)
        if (proj_dropout(a, &cm->layers[l].proj[p], l, p).p > 0.0f)
            return 1;
    return 0;
}

/* Whether group g of layer l makes its projections' dA in one product
 * (change 2d): two or more adapters, each through cuda_lora_dbt (which
 * writes t into the gathered T too), one scale, no dropout (each
 * projection's dropped input is its own). */
static int da_on(const struct cuda_model *cm, const struct cuda_acts *a, int l, int g)
{
    const struct dlayer *L = &cm->layers[l];
    int n = 0;
    float scale = 0.0f;
    if (!a->tg || group_reads_f32(cm, a, l, group_first[g], group_count[g]))
        return 0;
    for (int p = group_first[g]; p < group_first[g] + group_count[g]; p++) {
        const struct dlin *d = &L->proj[p];
        if (!d->dla)
            continue;
        if (!d->dlb || d->r > CUDA_LORA_DBT_MAX_R || (n && d->scale != scale))
            return 0;
        scale = d->scale;
        n++;
    }
    return n >= 2;
}

static void layer_view(const struct cuda_model *cm, const struct cuda_acts *a, int l,
                       struct layer_acts *s)
{
    const struct model_config *c = &cm->cfg;
    size_t N = a->N, C = (size_t)c->hidden, F = (size_t)c->intermediate;
    size_t qd = (size_t)c->n_heads * c->head_dim, kd = (size_t)c->n_kv_heads * c->head_dim;
    size_t r = (size_t)a->r;
    size_t k = a->recompute ? 0 : (size_t)l; /* the slot of the layer's other activations */
    s->x = a->res + (size_t)l * N * C;
    s->out = a->res + (size_t)(l + 1) * N * C;
    s->mid = a->mid + k * N * C;
    s->rstd1 = a->rstd1 + k * N;
    s->rstd2 = a->rstd2 + k * N;
    s->q = a->q + k * N * qd;
    s->k = a->k + k * N * kd;
    s->v = a->v + k * N * kd;
    s->ao = a->ao + k * N * qd;
    s->lse = a->lse + k * a->B * c->n_heads * a->T;
    s->g = a->g + k * N * F;
    s->u = a->u + k * N * F;
    int pn = c->post_norms;
    s->pa = pn ? a->pa + k * N * C : NULL;
    s->pf = pn ? a->pf + k * N * C : NULL;
    s->rstd3 = pn ? a->rstd3 + k * N : NULL;
    s->rstd4 = pn ? a->rstd4 + k * N : NULL;
    /* A group's input is kept unless a LoRA dropout mask is drawn from its
     * fp32 (the backward makes that again, and the bf16 beside it). */
    uint16_t *at = a->kin ? a->kin + (size_t)l * N * (a->kin_w[0] + a->kin_w[2] + a->kin_w[3])
                          : NULL;
    for (int g = 0; g < 4; g++) {
        int kept = at && a->kin_w[g] && !group_reads_f32(cm, a, l, group_first[g], group_count[g]);
        s->kin[g] = kept ? at : NULL;
        if (at)
            at += N * a->kin_w[g];
        s->grouped[g] = kept && cm->layers[l].astack[g];
        s->da_group[g] = da_on(cm, a, l, g);
    }
    for (int p = 0; p < PROJ_COUNT; p++) {
        const struct dlin *d = &cm->layers[l].proj[p];
        int g = proj_group[p];
        s->xa[p] = r && d->r ? a->xa + (k * PROJ_COUNT + p) * N * r : NULL;
        s->ldxa[p] = (int)r;
        if (s->grouped[g] && d->fold) { /* its columns of the kept input */
            s->xa[p] = s->kin[g] + d->col0;
            s->ldxa[p] = cm->layers[l].ldx[p];
        }
    }
}

/* The fp32 output f of a kernel whose bf16 goes to fb for projections
 * p0..p0+n-1 of layer l: f, or NULL when only the bf16 is read. */
static float *f32_out(const struct cuda_model *cm, const struct cuda_acts *a, int l, int p0, int n,
                      float *f, const uint16_t *fb)
{
    return fb && !group_reads_f32(cm, a, l, p0, n) ? NULL : f;
}

/* hb: h as bf16, its rows ldhb apart (0: packed); h may be NULL. g and
 * u as the products wrote them, bf16. */
static void mlp_act(const struct cuda_model *cm, float *h, uint16_t *hb, int ldhb,
                    const uint16_t *g, const uint16_t *u, size_t n)
{
    cuda_gated_forward_bf16(cm->cfg.gelu, h, hb, cm->cfg.intermediate, ldhb, g, u, n);
}

/* lin_forward for projection p of layer l from x (fp32, or NULL beside
 * xk, x as packed bf16 alone) and its bf16 in xb (group_in), with its
 * dropout; into y, or as bf16 into yb (y NULL), with yr added (lin_adds). */
static void proj_forward(const struct cuda_model *cm, struct cuda_acts *a, int l, int p,
                         float *y, uint16_t *yb, const uint16_t *yr, const float *x,
                         const uint16_t *xk, uint16_t *xb, const struct layer_acts *s, int N)
{
    const struct dlin *d = &cm->layers[l].proj[p];
    uint16_t *xa = s->grouped[proj_group[p]] && d->fold ? NULL : s->xa[p];
    lin_forward(a, d, y, yb, yr, x, xk, xb, cm->layers[l].ldx[p], N, xa,
                proj_dropout(a, d, l, p));
}

/* Change 2c: group g's x A^T for all its folded projections in one
 * product, from its kept input xb (in columns) with the stacked A, into
 * the LoRA columns beside it, where the products read them and the
 * backward's dB does (layer_view's xa): x read once a group, no copy. */
static void group_xa(const struct cuda_model *cm, struct cuda_acts *a, int l, int g, uint16_t *xb,
                     const struct layer_acts *s, int N)
{
    const struct dlayer *L = &cm->layers[l];
    if (!s->grouped[g])
        return;
    int in = L->proj[group_first[g]].in, ldx = L->ldx[group_first[g]];
    assert(ldx == in + L->acols[g]);
    check(a, cuda_gemm_bf16_out(0, 1, N, L->acols[g], in, 1.0f, xb, ldx, L->astack[g], in, 0.0f,
                                xb + in, ldx));
}

/* Group g's bf16 input: as the forward keeps it for the backward (change
 * 1n), or else in scratch (the forward's a->xb, the backward's making it
 * again); group_ld: its row stride for projection p of layer l (the
 * forward writes its rows ldx apart, LoRA's columns beside; the
 * backward's making again, packed). */
static uint16_t *group_in(const struct layer_acts *s, int g, uint16_t *scratch)
{
    return s->kin[g] ? s->kin[g] : scratch;
}

static int group_ld(const struct cuda_model *cm, const struct layer_acts *s, int l, int p)
{
    return s->kin[proj_group[p]] ? cm->layers[l].ldx[p] : cm->layers[l].proj[p].in;
}

/* Whether projection p of layer l's output can be added to the residual
 * stream by its product's epilogue (change 1m): one product makes it (a
 * 16-bit W, LoRA folded or none) and no bias follows. */
static int lin_adds(const struct cuda_model *cm, int l, int p)
{
    const struct dlin *d = &cm->layers[l].proj[p];
    return one_product(d, 0, 0) && !d->bias;
}

/* again set: the backward pass recomputes what it needs of layer l (the
 * same kernels on the same input, so the same bits), and the layer's
 * output, already kept as the next layer's input, is not written. */
static void layer_forward(const struct cuda_model *cm, struct cuda_acts *a, int l,
                          const int32_t *seg, int B, int T, int again)
{
    const struct model_config *c = &cm->cfg;
    const struct dlayer *L = &cm->layers[l];
    struct layer_acts s;
    layer_view(cm, a, l, &s);
    int N = B * T, C = c->hidden, H = c->n_heads, KV = c->n_kv_heads, hd = c->head_dim;
    size_t NC = (size_t)N * C, NF = (size_t)N * c->intermediate;
    float scale = model_attn_scale(c);
    /* attention block: mid = x + o(attn(rope(q(ln1 x)), rope(k(..)), v(..))) */
    uint16_t *xq = group_in(&s, 0, a->xb), *xg = group_in(&s, 2, a->xb);
    uint16_t *xd = group_in(&s, 3, a->xb);
    cuda_rmsnorm_forward_bf16(f32_out(cm, a, l, PROJ_Q, 3, a->ln, xq), xq, L->ldx[PROJ_Q],
                              s.rstd1, s.x, L->ln1, N, C, c->rms_eps);
    group_xa(cm, a, l, 0, xq, &s, N);
    /* q, k and v as bf16 (change 1i), rotated so, as attention reads them */
    proj_forward(cm, a, l, PROJ_Q, NULL, s.q, NULL, a->ln, NULL, xq, &s, N);
    proj_forward(cm, a, l, PROJ_K, NULL, s.k, NULL, a->ln, NULL, xq, &s, N);
    proj_forward(cm, a, l, PROJ_V, NULL, s.v, NULL, a->ln, NULL, xq, &s, N);
    cuda_rope_forward_bf16(s.q, B, T, H, hd, seg, cm->rope_cos, cm->rope_sin);
    cuda_rope_forward_bf16(s.k, B, T, KV, hd, seg, cm->rope_cos, cm->rope_sin);
    cuda_attention_forward(s.ao, a->xb, L->ldx[PROJ_O], s.lse, s.q, s.k, s.v, seg, B, T, H, KV,
                           hd, scale, c->attn_softcap);
    if (!s.pa && lin_adds(cm, l, PROJ_O)) { /* mid = x + o(ao) in o's product (1m) */
        proj_forward(cm, a, l, PROJ_O, NULL, s.mid, s.x, NULL, s.ao, a->xb, &s, N);
    } else {
        float *ao_out = s.pa ? s.pa : a->tmp;
        proj_forward(cm, a, l, PROJ_O, ao_out, NULL, NULL, NULL, s.ao, a->xb, &s, N);
        if (s.pa)
            cuda_rmsnorm_forward(a->tmp, NULL, 0, s.rstd3, s.pa, L->ln3, N, C, c->rms_eps);
        cuda_add_bf16(s.mid, s.x, a->tmp, NC);
    }
    /* MLP block: out = mid + down(act(gate(ln2 mid)) * up(ln2 mid)) [ln4 after down] */
    cuda_rmsnorm_forward_bf16(f32_out(cm, a, l, PROJ_GATE, 2, a->ln, xg), xg,
                              L->ldx[PROJ_GATE], s.rstd2, s.mid, L->ln2, N, C, c->rms_eps);
    group_xa(cm, a, l, 2, xg, &s, N);
    proj_forward(cm, a, l, PROJ_GATE, NULL, s.g, NULL, a->ln, NULL, xg, &s, N);
    proj_forward(cm, a, l, PROJ_UP, NULL, s.u, NULL, a->ln, NULL, xg, &s, N);
    mlp_act(cm, f32_out(cm, a, l, PROJ_DOWN, 1, a->hbuf, xd), xd, L->ldx[PROJ_DOWN], s.g, s.u,
            NF);
    group_xa(cm, a, l, 3, xd, &s, N);
    if (!s.pf && !again && lin_adds(cm, l, PROJ_DOWN)) { /* out = mid + down(h) (1m) */
        proj_forward(cm, a, l, PROJ_DOWN, NULL, s.out, s.mid, a->hbuf, NULL, xd, &s, N);
        return;
    }
    float *mlp_out = s.pf ? s.pf : a->tmp;
    proj_forward(cm, a, l, PROJ_DOWN, mlp_out, NULL, NULL, a->hbuf, NULL, xd, &s, N);
    if (s.pf)
        cuda_rmsnorm_forward(a->tmp, NULL, 0, s.rstd4, s.pf, L->ln4, N, C, c->rms_eps);
    if (!again)
        cuda_add_bf16(s.out, s.mid, a->tmp, NC);
}

/* Where a kernel that makes a product's input also writes its bf16 for
 * the weight gradients (full fine-tuning's dW, LoRA's dA): a->xb, or NULL
 * when nothing trains. */
static uint16_t *kept_bf16(const struct cuda_model *cm, struct cuda_acts *a)
{
    return cm->full || a->r > 0 ? a->xb : NULL;
}

/* Whether projection p of layer l's dX can be one product writing bf16
 * (lin_backward's dxb): a 16-bit W, and LoRA folded without dropout, or
 * none. */
static int lin_dx_bf16(const struct cuda_model *cm, const struct cuda_acts *a, int l, int p)
{
    const struct dlin *d = &cm->layers[l].proj[p];
    return one_product(d, 1, proj_dropout(a, d, l, p).p > 0.0f);
}

/* lin_backward for projection p of layer l, with its dropout; dx fp32, or
 * (dx NULL) dxb bf16 (lin_dx_bf16); xb x's bf16 as group_in gives it. */
static void proj_backward(const struct cuda_model *cm, struct cuda_acts *a, int l, int p,
                          float *dx, uint16_t *dxb, const float *dy, uint16_t *dyb, int ldy,
                          const float *x, const uint16_t *xb, const struct layer_acts *s, int N)
{
    int g = proj_group[p], ldxb = group_ld(cm, s, l, p);
    assert(!s->kin[g] || xb == s->kin[g]);
    const struct dlin *d = &cm->layers[l].proj[p];
    /* The first projection of its group (q, o, gate, down; the backward
     * runs each group in order) writes dx, the others add (change 1d:
     * no zeroing pass before, no read of the zeros). */
    int first = p == 0 || proj_group[p] != proj_group[p - 1];
    struct lora_side ls = {s->xa[p], s->ldxa[p], NULL, 0};
    if (s->da_group[g] && d->dla) { /* its columns of the group's T (change 2d) */
        ls.tg = a->tg + cm->layers[l].toff[p];
        ls.ldtg = cm->layers[l].tcols[g];
    }
    lin_backward(a, d, dx, dxb, first, dy, dyb, ldy, x, xb, ldxb, ls, N,
                 proj_dropout(a, d, l, p));
}

/* Change 2d: group g's dA for all its adapters in one product, from the
 * T its projections' backward gathered (in a->tg) and the group's input
 * xb (as group_in gives it: kept, or made again), into a->dag, then added into
 * each projection's dA: x read once a group. */
static void group_da(const struct cuda_model *cm, struct cuda_acts *a, int l, int g,
                     const uint16_t *xb, const struct layer_acts *s, int N)
{
    const struct dlayer *L = &cm->layers[l];
    if (!s->da_group[g])
        return;
    int p0 = group_first[g], in = L->proj[p0].in, rg = L->tcols[g];
    int ldxb = group_ld(cm, s, l, p0);
    float scale = 0.0f;
    for (int p = p0; p < p0 + group_count[g]; p++)
        if (L->proj[p].dla)
            scale = L->proj[p].scale; /* one scale (da_on) */
    check(a, cuda_gemm_bf16(1, 0, rg, in, N, scale, a->tg, rg, xb, ldxb, 0.0f, a->dag, in));
    for (int p = p0; p < p0 + group_count[g]; p++) {
        const struct dlin *d = &L->proj[p];
        if (d->dla)
            cuda_accumulate(d->dla, a->dag + (size_t)L->toff[p] * in, (size_t)d->r * in);
    }
}

/* Whether attention's backward can write layer l's dq, dk and dv as bf16
 * alone, dq and dk rotated back (change 1o): its tensor-core kernels at
 * this head dim (cuda_attention_bf16_grads), no bias on q, k or v that
 * trains (its gradient reads the fp32), and each gradient's rows, with
 * LoRA's r columns past them (lin_backward's t), fitting the fp32
 * buffer's memory (out + r <= 2 out). ld OUT: each one's row stride. */
static int dqkv_bf16(const struct cuda_model *cm, int l, int ld[3])
{
    if (!cuda_attention_bf16_grads(cm->cfg.head_dim))
        return 0;
    for (int p = PROJ_Q; p <= PROJ_V; p++) {
        const struct dlin *d = &cm->layers[l].proj[p];
        ld[p - PROJ_Q] = d->out + d->r;
        if (d->dbias || d->r > d->out)
            return 0;
    }
    return 1;
}

/* On entry a->dres holds d(loss)/d(out of layer l) and a->dyb its bf16;
 * on return, with need_dx, both hold d/d(x). */
static void layer_backward(const struct cuda_model *cm, struct cuda_acts *a, int l,
                           const int32_t *seg, int B, int T, int need_dx)
{
    const struct model_config *c = &cm->cfg;
    const struct dlayer *L = &cm->layers[l];
    struct layer_acts s;
    layer_view(cm, a, l, &s);
    int N = B * T, C = c->hidden, H = c->n_heads, KV = c->n_kv_heads, hd = c->head_dim;
    size_t NC = (size_t)N * C, NF = (size_t)N * c->intermediate;
    int F = c->intermediate;
    float eps = c->rms_eps, scale = model_attn_scale(c);
    uint16_t *xb = kept_bf16(cm, a);
    /* each group's input as the forward kept it (change 1n), or made again
     * below into xb (packed) where it was not */
    uint16_t *xq = group_in(&s, 0, xb), *xg = group_in(&s, 2, xb), *xd = group_in(&s, 3, xb);
    /* MLP block: the activation's output (and its bf16) again */
    if (!s.kin[3])
        mlp_act(cm, f32_out(cm, a, l, PROJ_DOWN, 1, a->hbuf, xb), xb, 0, s.g, s.u, NF);
    const float *dmlp = a->dres;
    if (s.pf) { /* through ln4 into a->tmp */
        cuda_zero(a->tmp, NC * sizeof(float));
        cuda_rmsnorm_backward(a->tmp, a->dyb, a->ldy, L->dln4, a->dres, s.pf, L->ln4, s.rstd4,
                              N, C);
        dmlp = a->tmp;
    }
    /* dh as bf16 where one product makes it (change 1l; a->dh's memory) */
    uint16_t *dhb = lin_dx_bf16(cm, a, l, PROJ_DOWN) ? (uint16_t *)a->dh : NULL;
    proj_backward(cm, a, l, PROJ_DOWN, dhb ? NULL : a->dh, dhb, dmlp, a->dyb, a->ldy, a->hbuf, xd,
                  &s, N);
    /* dg and du written, not added into zeros (change 1c), as bf16 alone
     * (change 1f): their fp32 would be read only for a bias gate and up
     * never have (lin_backward asserts it: their fp32 dy is NULL) */
    if (dhb)
        cuda_gated_backward_bf16dh(c->gelu, NULL, NULL, a->dyb, a->dub, F, a->ldy, dhb, s.g,
                                   s.u, NF, 0);
    else
        cuda_gated_backward_bf16(c->gelu, NULL, NULL, a->dyb, a->dub, F, a->ldy, a->dh, s.g,
                                 s.u, NF, 0);
    /* ln2(mid) again (and its bf16) for gate's and up's weight gradients */
    if (!s.kin[2])
        cuda_rmsnorm_forward_bf16(f32_out(cm, a, l, PROJ_GATE, 2, a->ln, xb), xb, 0, s.rstd2,
                                  s.mid, L->ln2, N, C, eps);
    proj_backward(cm, a, l, PROJ_GATE, a->dln, NULL, NULL, a->dyb, a->ldy, a->ln, xg, &s, N);
    proj_backward(cm, a, l, PROJ_UP, a->dln, NULL, NULL, a->dub, a->ldy, a->ln, xg, &s, N);
    group_da(cm, a, l, 2, xg, &s, N);
    /* dres: d(out) -> d(mid), residual path plus the norm path */
    cuda_rmsnorm_backward_bf16(a->dres, s.pa ? NULL : a->dyb, a->ldy, L->dln2, a->dln, s.mid,
                               L->ln2, s.rstd2, N, C);
    /* attention block */
    const float *dattn = a->dres;
    if (s.pa) { /* through ln3 into a->tmp */
        cuda_zero(a->tmp, NC * sizeof(float));
        cuda_rmsnorm_backward(a->tmp, a->dyb, a->ldy, L->dln3, a->dres, s.pa, L->ln3, s.rstd3,
                              N, C);
        dattn = a->tmp;
    }
    /* attention's output is kept as bf16 alone (change 1k): o's weight
     * gradients read it as it is, no conversion */
    proj_backward(cm, a, l, PROJ_O, a->dao, NULL, dattn, a->dyb, a->ldy, NULL, xb ? s.ao : NULL,
                  &s, N);
    /* written whole, not added into: no zeroing (change 1e); dO's bf16 for
     * the kernels in a->xb, free until ln1 is made again below (1i). Where
     * it can (dqkv_bf16), as bf16 alone, dq and dk rotated back, in the
     * fp32 buffers' memory, each row r wider for LoRA's t (change 1o) */
    int ld[3] = {0, 0, 0};
    uint16_t *gb[3] = {(uint16_t *)a->dq, (uint16_t *)a->dk, (uint16_t *)a->dv};
    int fused = dqkv_bf16(cm, l, ld);
    if (fused)
        cuda_attention_backward_bf16(gb[0], ld[0], gb[1], ld[1], gb[2], ld[2], a->attn_d, a->xb,
                                     a->dao, s.ao, s.lse, s.q, s.k, s.v, seg, B, T, H, KV, hd,
                                     scale, c->attn_softcap, cm->rope_cos, cm->rope_sin);
    else
        cuda_attention_backward(a->dq, a->dk, a->dv, a->attn_d, a->xb, a->dao, s.ao, s.lse, s.q,
                                s.k, s.v, seg, B, T, H, KV, hd, scale, c->attn_softcap);
    if (!s.kin[0])
        cuda_rmsnorm_forward_bf16(f32_out(cm, a, l, PROJ_Q, 3, a->ln, xb), xb, 0, s.rstd1, s.x,
                                  L->ln1, N, C, eps);
    /* The norm weight's gradient needs dln even where dx is not needed. */
    float *dln = need_dx || L->dln1 ? a->dln : NULL;
    if (fused) {
        proj_backward(cm, a, l, PROJ_Q, dln, NULL, NULL, gb[0], ld[0], a->ln, xq, &s, N);
        proj_backward(cm, a, l, PROJ_K, dln, NULL, NULL, gb[1], ld[1], a->ln, xq, &s, N);
        proj_backward(cm, a, l, PROJ_V, dln, NULL, NULL, gb[2], ld[2], a->ln, xq, &s, N);
    } else { /* dq's and dk's rotation back writes their bf16, one at a time */
        cuda_rope_backward(a->dq, a->dyb, a->ldy, B, T, H, hd, seg, cm->rope_cos, cm->rope_sin);
        proj_backward(cm, a, l, PROJ_Q, dln, NULL, a->dq, a->dyb, a->ldy, a->ln, xq, &s, N);
        cuda_rope_backward(a->dk, a->dyb, a->ldy, B, T, KV, hd, seg, cm->rope_cos, cm->rope_sin);
        proj_backward(cm, a, l, PROJ_K, dln, NULL, a->dk, a->dyb, a->ldy, a->ln, xq, &s, N);
        proj_backward(cm, a, l, PROJ_V, dln, NULL, a->dv, NULL, a->ldy, a->ln, xq, &s,
                      N); /* converts dv */
    }
    group_da(cm, a, l, 0, xq, &s, N);
    if (dln)
        cuda_rmsnorm_backward_bf16(a->dres, need_dx ? a->dyb : NULL, a->ldy, L->dln1, a->dln,
                                   s.x, L->ln1, s.rstd1, N, C);
}

/* The output head fused with the loss over the rows that have targets, a
 * block of rows at a time (gathered with the embedding's lookup kernel,
 * scattered back with its backward). With backward set, a->dres receives
 * d(loss)/d(lnf) (zero for rows without a target) and the head's weight
 * gradient is accumulated (full fine-tuning); each target's loss gradient
 * is dscale, or tok_w[i] (host, B*T) for the target after position i when
 * tok_w is given. tok_loss (host, B*T, may be NULL) OUT gets each target's
 * loss at its position, 0 elsewhere (model_token_losses' layout). queued
 * (may be NULL) is called with queued_arg once the head's work is queued,
 * before its results are waited for, while the GPU runs it. */
static int head_loss(const struct cuda_model *cm, struct cuda_acts *a, const int32_t *ids,
                     const uint8_t *mask, int B, int T, float dscale, int backward,
                     const float *tok_w, double *tok_loss, double *loss_out, size_t *n_targets,
                     void (*queued)(void *), void *queued_arg)
{
    const struct model_config *c = &cm->cfg;
    const struct dlin *head = &cm->head;
    int C = c->hidden, V = c->vocab;
    int M = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t + 1 < T; t++) {
            size_t i = (size_t)b * T + t;
            if (mask[i + 1]) {
                a->rows_h[M] = (int32_t)i;
                a->tgt_h[M] = ids[i + 1];
                M++;
            }
        }
    *n_targets = (size_t)M;
    a->hits = 0;
    if (tok_loss)
        memset(tok_loss, 0, (size_t)B * T * sizeof *tok_loss);
    if (backward)
        cuda_zero(a->dres, (size_t)B * T * C * sizeof(float));
    if (M && (cuda_upload(a->rows, a->rows_h, (size_t)M * sizeof(int32_t)) ||
              cuda_upload(a->tgt, a->tgt_h, (size_t)M * sizeof(int32_t))))
        return -1;
    if (backward && tok_w && M) {
        for (int i = 0; i < M; i++)
            a->row_w_h[i] = tok_w[a->rows_h[i]];
        if (cuda_upload(a->row_w, a->row_w_h, (size_t)M * sizeof(float)))
            return -1;
    }
    /* rows of the head at once: all of them from a bf16 copy, chunks of
     * the scratch from an NF4 head */
    int vstep = V;
    /* The product writes the logits as bf16 (change 1h), and the loss
     * kernel writes dlogits over them as bf16, as the products after it
     * read them; soft-capped logits stay fp32 (the cap and its backward). */
    int lb = c->final_softcap <= 0.0f;
    if (!head->wb && (size_t)nf4_chunk_rows(a, C) < (size_t)V)
        vstep = nf4_chunk_rows(a, C);
    double loss = 0.0;
    for (int m0 = 0; m0 < M; m0 += a->head_rows) {
        int mr = M - m0 < a->head_rows ? M - m0 : a->head_rows;
        size_t mv = (size_t)mr * V;
        cuda_embed_forward(a->xc, a->rows + m0, mr, a->lnf, NULL, C, 1.0f);
        cuda_to_bf16(a->xcb, a->xc, (size_t)mr * C);
        for (int v0 = 0; v0 < V; v0 += vstep) {
            int nv = V - v0 < vstep ? V - v0 : vstep;
            const uint16_t *w = weight_rows(a, head, v0, nv);
            if (lb)
                check(a, cuda_gemm_bf16_out(0, 1, mr, nv, C, 1.0f, a->xcb, C, w, C, 0.0f,
                                            a->logits_b + v0, V));
            else
                check(a, cuda_gemm_bf16(0, 1, mr, nv, C, 1.0f, a->xcb, C, w, C, 0.0f,
                                        a->logits + v0, V));
        }
        if (!lb) {
            cuda_softcap(a->logits, mv, c->final_softcap);
            if (backward && cuda_copy(a->capped, a->logits, mv * sizeof(float)))
                return -1;
        }
        /* each chunk's losses and hits stay on the device, at their rows:
         * one download each after the last chunk, not two syncs a chunk */
        const float *row_w = backward && tok_w ? a->row_w + m0 : NULL;
        float ds = tok_w ? 1.0f : dscale;
        if (lb)
            cuda_xent_rows_bf16(a->logits_b, a->tgt + m0, mr, V, backward, ds, row_w,
                                a->row_loss + m0, a->hits_d + m0);
        else
            cuda_xent_rows(a->logits, a->tgt + m0, mr, V, backward, ds, row_w,
                           a->row_loss + m0, a->hits_d + m0);
        if (!backward)
            continue;
        if (!lb) {
            cuda_softcap_backward(a->logits, a->capped, mv, c->final_softcap);
            cuda_to_bf16(a->logits_b, a->logits, mv);
        }
        for (int v0 = 0; v0 < V; v0 += vstep) {
            int nv = V - v0 < vstep ? V - v0 : vstep;
            const uint16_t *w = weight_rows(a, head, v0, nv);
            /* dxc (mr,C) (+)= dlogits[:, v0:v0+nv] . w (nv,C) */
            check(a, cuda_gemm_bf16(0, 0, mr, C, nv, 1.0f, a->logits_b + v0, V, w, C,
                                    v0 ? 1.0f : 0.0f, a->dxc, C));
            if (head->dw) /* dW (nv,C) += dlogits^T . xc */
                check(a, cuda_gemm_bf16(1, 0, nv, C, mr, 1.0f, a->logits_b + v0, V, a->xcb, C,
                                        1.0f, head->dw + (size_t)v0 * C, C));
        }
        /* the rows are distinct: adding into zeroed dres places them */
        cuda_embed_backward(a->dres, a->rows + m0, mr, a->dxc, C, 1.0f);
    }
    if (queued) /* the head's work is queued: the caller's host work beside it */
        queued(queued_arg);
    if (M && (cuda_download(a->loss_h, a->row_loss, (size_t)M * sizeof(float)) ||
              cuda_download(a->hits_h, a->hits_d, (size_t)M * sizeof(int32_t))))
        return -1;
    for (int i = 0; i < M; i++) { /* in row order, as the chunks summed them */
        loss += (double)a->loss_h[i];
        a->hits += (size_t)(a->hits_h[i] != 0);
        if (tok_loss)
            tok_loss[a->rows_h[i]] = (double)a->loss_h[i];
    }
    *loss_out = loss;
    return 0;
}

/* A part of the pass (below) and what it reads: its body's argument. */
struct part {
    const struct cuda_model *cm;
    struct cuda_acts *a;
    const int32_t *seg; /* on the device, or NULL */
    int B, T;
    int swapped;        /* after_head has run */
};

/* The forward up to the head: the embedding's rows (times sqrt(C) for
 * Gemma) as bf16, the residual stream being bf16 (change 1j), the layers,
 * the final norm. */
static void forward_part(void *arg)
{
    const struct part *p = arg;
    const struct cuda_model *cm = p->cm;
    struct cuda_acts *a = p->a;
    const struct model_config *c = &cm->cfg;
    int N = p->B * p->T, C = c->hidden;
    cuda_embed_forward_bf16(a->res, a->ids, N, cm->embed_f, cm->embed_b, C,
                            c->embed_scale ? sqrtf((float)C) : 1.0f);
    for (int l = 0; l < c->n_layers; l++)
        layer_forward(cm, a, l, p->seg, p->B, p->T, 0);
    const uint16_t *xL = a->res + (size_t)c->n_layers * a->N * C;
    cuda_rmsnorm_forward_bf16(a->lnf, NULL, 0, a->rstdf, xL, cm->norm_f, N, C, c->rms_eps);
}

/* The backward from the head's d/d(lnf), which a->dres2 holds (after_head
 * swapped the two): through the final norm into a->dres (and its
 * bf16 into dyb, the top layer's dy), the layers (each run forward again
 * first with recompute), the embedding's gradient. */
static void backward_part(void *arg)
{
    const struct part *p = arg;
    const struct cuda_model *cm = p->cm;
    struct cuda_acts *a = p->a;
    const struct model_config *c = &cm->cfg;
    int N = p->B * p->T, C = c->hidden;
    const uint16_t *xL = a->res + (size_t)c->n_layers * a->N * C;
    cuda_zero(a->dres, (size_t)N * C * sizeof(float));
    cuda_rmsnorm_backward_bf16(a->dres, a->dyb, a->ldy, cm->dnorm_f, a->dres2, xL, cm->norm_f,
                               a->rstdf, N, C);
    for (int l = c->n_layers - 1; l >= 0; l--) {
        /* the slot holds the last layer's activations from the forward */
        if (a->recompute && l < c->n_layers - 1)
            layer_forward(cm, a, l, p->seg, p->B, p->T, 1);
        layer_backward(cm, a, l, p->seg, p->B, p->T, l > 0 || cm->embed_dw != NULL);
    }
    if (cm->embed_dw) /* a token seen twice adds in row order (no atomics) */
        cuda_embed_backward(cm->embed_dw, a->ids, N, a->dres, C,
                            c->embed_scale ? sqrtf((float)C) : 1.0f);
}

/* A part through its set of graphs (cuda_acts_graphs), or as it is. */
static void run_part(struct cuda_acts *a, int backward, void (*body)(void *), struct part *p)
{
    struct cuda_graphs *g = a->graphs[backward];
    if (!g)
        body(p);
    else if (cuda_graphs_run(g, body, p))
        a->failed = 1;
}

/* Once the head's backward is queued (it wrote d/d(lnf) into a->dres):
 * that buffer becomes dres2, the backward's input, and the other dres,
 * its output (the two swap each pass, so a backward's launches repeat
 * every other pass: two of its set's graphs); then the backward is walked
 * while the GPU runs the forward and the head. */
static void after_head(void *arg)
{
    struct part *p = arg;
    struct cuda_acts *a = p->a;
    float *swap = a->dres;
    a->dres = a->dres2;
    a->dres2 = swap;
    p->swapped = 1;
    if (a->graphs[1])
        cuda_graphs_walk(a->graphs[1], backward_part, p);
}

/* The pass all three entry points share (model_pass.c's pass): with fn,
 * the head runs forward for tok_loss, fn turns it into tok_w, and the head
 * runs again with those weights for the backward. */
static int pass(struct cuda_model *cm, struct cuda_acts *a, const int32_t *ids,
                const uint8_t *mask, const int32_t *seg, int B, int T, float dscale,
                int backward, model_weights_fn fn, void *ctx, double *tok_loss, float *tok_w,
                double *loss, size_t *n_targets)
{
    int N = B * T;
    /* Callers validate sizes; these are invariants, not input checks. */
    if (B < 1 || T < 1 || (size_t)N > a->N || T > a->T || B > a->B || T > cm->rope_len)
        abort();
    *loss = 0.0;
    *n_targets = 0;
    a->failed = 0;
    if (cuda_upload(a->ids, ids, (size_t)N * sizeof(int32_t)))
        return -1;
    struct part part = {cm, a, NULL, B, T, 0};
    if (seg) {
        if (cuda_upload(a->seg, seg, (size_t)N * sizeof(int32_t)))
            return -1;
        part.seg = a->seg;
    }
    run_part(a, 0, forward_part, &part);
    if (fn) {
        if (head_loss(cm, a, ids, mask, B, T, 0.0f, 0, NULL, tok_loss, loss, n_targets, NULL,
                      NULL) ||
            a->failed)
            return -1;
        fn(ctx, tok_loss, tok_w);
        if (head_loss(cm, a, ids, mask, B, T, 0.0f, 1, tok_w, NULL, loss, n_targets, NULL,
                      NULL))
            return -1;
    } else if (head_loss(cm, a, ids, mask, B, T, dscale, backward, NULL, tok_loss, loss,
                         n_targets, backward ? after_head : NULL, &part)) {
        return -1;
    }
    if (a->failed)
        return -1;
    if (!backward)
        return cuda_ctx_sync();
    if (!part.swapped) /* DPO's second head: walked now */
        after_head(&part);
    if (!a->graphs[1])
        backward_part(&part);
    else if (cuda_graphs_play(a->graphs[1], backward_part, &part))
        return -1;
    if (a->failed)
        return -1;
    return cuda_ctx_sync();
}

int cuda_model_forward_backward_packed(struct cuda_model *cm, struct cuda_acts *a,
                                       const int32_t *ids, const uint8_t *mask,
                                       const int32_t *seg, int B, int T, float dscale,
                                       int backward, double *loss, size_t *n_targets)
{
    return pass(cm, a, ids, mask, seg, B, T, dscale, backward, NULL, NULL, NULL, NULL, loss,
                n_targets);
}

int cuda_model_token_losses(struct cuda_model *cm, struct cuda_acts *a, const int32_t *ids,
                            const uint8_t *mask, const int32_t *seg, int B, int T,
                            double *tok_loss, double *loss, size_t *n_targets)
{
    return pass(cm, a, ids, mask, seg, B, T, 0.0f, 0, NULL, NULL, tok_loss, NULL, loss,
                n_targets);
}

int cuda_model_forward_backward_weighted(struct cuda_model *cm, struct cuda_acts *a,
                                         const int32_t *ids, const uint8_t *mask,
                                         const int32_t *seg, int B, int T, model_weights_fn fn,
                                         void *ctx, double *tok_loss, float *tok_w,
                                         double *loss, size_t *n_targets)
{
    return pass(cm, a, ids, mask, seg, B, T, 0.0f, 1, fn, ctx, tok_loss, tok_w, loss,
                n_targets);
}
