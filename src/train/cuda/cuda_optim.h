/* cuda_optim.h - AdamW on the GPU: the moments live on the device, the
 * update is cuda_adamw, the gradient norm cuda_sumsq (summed in fixed
 * chunks, read back, square-rooted on the host). The twin of optim.h:
 * the host struct optim stays the source of the settings and is what a
 * checkpoint reads and writes (cuda_optim_download / _upload), so the
 * checkpoint format is the CPU trainer's.
 *
 * Ownership: cuda_optim_init allocates the device moments and a double
 * for the norm; cuda_optim_free releases them (a zeroed struct is fine).
 * The context (cuda_ctx.h) must be open.
 */
#ifndef ALALLO_TRAIN_CUDA_OPTIM_H
#define ALALLO_TRAIN_CUDA_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "train/model/optim.h"

struct cuda_optim {
    float *m, *v;      /* (n) on the device */
    double *sumsq;     /* one double on the device */
    size_t n, n_decay;
    uint64_t t;        /* updates taken */
    float beta1, beta2, eps, weight_decay;
};

/* Device moments for the host optimizer h: its settings and its moments
 * and step count copied up (zero for a fresh one, the checkpoint's after
 * a resume). 0, or -1 with the reason in cuda_ctx_error(). */
int cuda_optim_init(struct cuda_optim *o, const struct optim *h);
void cuda_optim_free(struct cuda_optim *o);
/* Copies the host optimizer's moments and step count up (a resume). */
int cuda_optim_upload(struct cuda_optim *o, const struct optim *h);
/* Copies the moments and step count down into h (a checkpoint). */
int cuda_optim_download(const struct cuda_optim *o, struct optim *h);

/* sqrt(sum g^2) of the device gradients g (n): 0, or -1. */
int cuda_optim_grad_norm(struct cuda_optim *o, const float *g, double *norm /* OUT */);
/* One AdamW update of the device parameters p with gradient gscale * g at
 * learning rate lr, as optim_adamw_step (increments o->t first). */
void cuda_optim_step(struct cuda_optim *o, float *p, const float *g, float gscale, float lr);

#endif
