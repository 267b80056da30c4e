/* cuda_optim.c - AdamW with its moments on the GPU (contract in
 * cuda_optim.h). */
#include "train/cuda/cuda_optim.h"

#include <math.h>
#include <string.h>

#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_ops.h"

int cuda_optim_init(struct cuda_optim *o, const struct optim *h)
{
    memset(o, 0, sizeof *o);
    o->n = h->n;
    o->n_decay = h->n_decay;
    o->beta1 = h->beta1;
    o->beta2 = h->beta2;
    o->eps = h->eps;
    o->weight_decay = h->weight_decay;
    o->sumsq = cuda_alloc(sizeof(double), 1);
    if (!o->sumsq)
        return -1;
    if (o->n) {
        o->m = cuda_alloc(o->n * sizeof(float), 1);
        o->v = o->m ? cuda_alloc(o->n * sizeof(float), 1) : NULL;
        if (!o->v) {
            cuda_optim_free(o);
            return -1;
        }
    }
    if (cuda_optim_upload(o, h)) {
        cuda_optim_free(o);
        return -1;
    }
    return 0;
}

void cuda_optim_free(struct cuda_optim *o)
{
    cuda_free(o->m);
    cuda_free(o->v);
    cuda_free(o->sumsq);
    o->m = o->v = NULL;
    o->sumsq = NULL;
}

int cuda_optim_upload(struct cuda_optim *o, const struct optim *h)
{
    if (h->n != o->n)
        return -1;
    o->t = h->t;
    if (!o->n)
        return 0;
    if (cuda_upload(o->m, h->m, o->n * sizeof(float)) ||
        cuda_upload(o->v, h->v, o->n * sizeof(float)))
        return -1;
    return 0;
}

int cuda_optim_download(const struct cuda_optim *o, struct optim *h)
{
    if (h->n != o->n)
        return -1;
    h->t = o->t;
    if (!o->n)
        return 0;
    if (cuda_download(h->m, o->m, o->n * sizeof(float)) ||
        cuda_download(h->v, o->v, o->n * sizeof(float)))
        return -1;
    return 0;
}

int cuda_optim_grad_norm(struct cuda_optim *o, const float *g, double *norm)
{
    double s = 0.0;
    *norm = 0.0;
    if (!o->n)
        return 0;
    cuda_sumsq(o->sumsq, g, o->n);
    if (cuda_download(&s, o->sumsq, sizeof s))
        return -1;
    *norm = sqrt(s);
    return 0;
}

void cuda_optim_step(struct cuda_optim *o, float *p, const float *g, float gscale, float lr)
{
    o->t++;
    if (o->n)
        cuda_adamw(p, g, o->m, o->v, o->n, o->n_decay, gscale, lr, o->beta1, o->beta2, o->eps,
                   o->weight_decay, o->t);
}
