/* optim.c - AdamW, clipping and the learning-rate schedule (see optim.h). */
#include "train/model/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/kernels/bigmem.h"
#include "train/kernels/kern.h"

/* Values per partial sum of the norm: a fixed size keeps the sum order
 * independent of the thread count. */
#define NORM_CHUNK 4096
/* Elements per AdamW task. */
#define ADAM_BLOCK 16384

int optim_init(struct optim *o, size_t n, size_t n_decay, float weight_decay)
{
    memset(o, 0, sizeof *o);
    o->n = n;
    o->n_decay = n_decay;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->weight_decay = weight_decay;
    if (n == 0)
        return 0;
    o->m = bigmem_calloc(n, sizeof(float));
    o->v = bigmem_calloc(n, sizeof(float));
    if (!o->m || !o->v) {
        optim_free(o);
        return -1;
    }
    return 0;
}

void optim_free(struct optim *o)
{
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
}

double optim_grad_norm(const float *g, size_t n)
{
    size_t chunks = (n + NORM_CHUNK - 1) / NORM_CHUNK;
    double total = 0.0;
    /* Partial sums per chunk, then added in chunk order. */
    enum { BATCH = 1024 };
    double part[BATCH];
    for (size_t c0 = 0; c0 < chunks; c0 += BATCH) {
        size_t cn = chunks - c0 < BATCH ? chunks - c0 : BATCH;
#pragma omp parallel for schedule(static) if (cn > 8)
        for (size_t c = 0; c < cn; c++) {
            size_t s = (c0 + c) * NORM_CHUNK, e = s + NORM_CHUNK < n ? s + NORM_CHUNK : n;
            /* float within a chunk (vectorized; 4096 terms keep it within
             * ~1e-5 relative, plenty for a clipping threshold), double
             * across chunks */
            part[c] = (double)kern_sumsq(g + s, e - s);
        }
        for (size_t c = 0; c < cn; c++)
            total += part[c];
    }
    return sqrt(total);
}

float optim_clip_factor(double norm, float max_norm)
{
    if (!(max_norm > 0.0f) || !(norm > (double)max_norm))
        return 1.0f;
    return (float)((double)max_norm / (norm + 1e-6));
}

float optim_clip(float *g, size_t n, double norm, float max_norm)
{
    float f = optim_clip_factor(norm, max_norm);
    if (f == 1.0f)
        return f;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (size_t i = 0; i < n; i++)
        g[i] *= f;
    return f;
}

void optim_adamw_factors(uint64_t t, float beta1, float beta2, float lr, float wd,
                         float *step, float *rc2, float *decay)
{
    /* Bias corrections folded into the step size and the epsilon. */
    double c1 = 1.0 - pow((double)beta1, (double)t);
    double c2 = 1.0 - pow((double)beta2, (double)t);
    *step = (float)((double)lr / c1);
    *rc2 = (float)(1.0 / sqrt(c2));
    *decay = 1.0f - lr * wd;
}

void optim_adamw_step(struct optim *o, float *p, const float *g, float gscale, float lr)
{
    o->t++;
    float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
    float step, rc2, decay;
    optim_adamw_factors(o->t, b1, b2, lr, o->weight_decay, &step, &rc2, &decay);
    float *m = o->m, *v = o->v;
    /* Two ranges, [0, n_decay) decays and the rest does not, each cut in
     * fixed blocks (elementwise, so the cut never changes a result). */
    for (int part = 0; part < 2; part++) {
        size_t s = part ? o->n_decay : 0, e = part ? o->n : o->n_decay;
        float dk = part ? 1.0f : decay;
        size_t nb = (e - s + ADAM_BLOCK - 1) / ADAM_BLOCK;
#pragma omp parallel for schedule(static) if (nb > 1)
        for (size_t b = 0; b < nb; b++) {
            size_t bs = s + b * ADAM_BLOCK, be = bs + ADAM_BLOCK < e ? bs + ADAM_BLOCK : e;
            kern_adamw(p + bs, g + bs, m + bs, v + bs, be - bs, gscale, b1, b2, step, rc2, eps,
                       dk);
        }
    }
}

float optim_lr(const struct lr_schedule *s, uint64_t step)
{
    if (step < s->warmup)
        return s->peak * (float)(step + 1) / (float)s->warmup;
    if (s->kind == LR_CONSTANT)
        return s->peak;
    /* Decay reaches final_ratio at step `total`, one past the last, so the
     * last step still moves the weights. */
    uint64_t span = s->total > s->warmup ? s->total - s->warmup : 1;
    double p = (double)(step - s->warmup) / (double)span;
    if (p > 1.0)
        p = 1.0;
    double lo = (double)s->final_ratio;
    double f = s->kind == LR_COSINE ? lo + (1.0 - lo) * 0.5 * (1.0 + cos(M_PI * p))
                                    : lo + (1.0 - lo) * (1.0 - p);
    return (float)((double)s->peak * f);
}

int optim_lr_kind_parse(const char *name)
{
    if (strcmp(name, "cosine") == 0)
        return LR_COSINE;
    if (strcmp(name, "linear") == 0)
        return LR_LINEAR;
    if (strcmp(name, "constant") == 0)
        return LR_CONSTANT;
    return -1;
}
