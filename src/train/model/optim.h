/* optim.h - AdamW with decoupled weight decay, gradient clipping by global
 * norm, and the learning-rate schedule (linear warm-up, then cosine or
 * linear decay, or constant).
 *
 * The update runs fused in one OpenMP pass over the parameter block; every
 * element is independent, and the global norm is summed in double over
 * fixed-size chunks in chunk order, so results never depend on the number
 * of threads. Ownership: optim_init allocates the moment buffers; the caller
 * keeps the struct and calls optim_free.
 */
#ifndef ALALLO_TRAIN_OPTIM_H
#define ALALLO_TRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

struct optim {
    float *m, *v;       /* (n) first and second moments */
    size_t n;           /* parameters */
    size_t n_decay;     /* weight decay applies to [0, n_decay) */
    uint64_t t;         /* updates taken (for bias correction) */
    float beta1, beta2, eps, weight_decay;
};

/* Zeroed moments for n parameters; beta1 0.9, beta2 0.999, eps 1e-8.
 * 0, or -1 on allocation failure. */
int optim_init(struct optim *o, size_t n, size_t n_decay, float weight_decay);
void optim_free(struct optim *o); /* zeroed struct is fine */

/* sqrt(sum g^2), deterministic. */
double optim_grad_norm(const float *g, size_t n);

/* Scales g so that its norm is at most max_norm (given its current norm).
 * Returns the factor applied (1 when nothing changed). */
float optim_clip(float *g, size_t n, double norm, float max_norm);

/* The factor optim_clip would apply (1 when the norm is within max_norm),
 * for passing to optim_adamw_step instead of rescaling g in a pass of its
 * own. */
float optim_clip_factor(double norm, float max_norm);

/* One AdamW update of p (n) with gradient gscale*g at learning rate lr:
 * p -= lr*wd*p (decay region only); m,v moving averages;
 * p -= lr * mhat / (sqrt(vhat) + eps). Increments o->t first. */
void optim_adamw_step(struct optim *o, float *p, const float *g, float gscale, float lr);

/* The per-update factors of update t (1-based) that every element uses:
 * `step` (lr over the first moment's bias correction), `rc2` (one over the
 * square root of the second's) and `decay` (1 - lr*wd). Computed once on
 * the host, so that the CPU and GPU updates use the same bits. */
void optim_adamw_factors(uint64_t t, float beta1, float beta2, float lr, float wd,
                         float *step /* OUT */, float *rc2 /* OUT */, float *decay /* OUT */);

enum lr_kind { LR_COSINE = 0, LR_LINEAR, LR_CONSTANT };

struct lr_schedule {
    enum lr_kind kind;
    float peak;         /* the learning rate after warm-up */
    uint64_t warmup;    /* steps of linear warm-up (0 = none) */
    uint64_t total;     /* steps in all (max_steps) */
    float final_ratio;  /* the rate at the end, as a fraction of peak */
};

/* The rate for step s (0-based): warm-up (s+1)/warmup * peak, then decay
 * from peak toward final_ratio*peak, which it would reach at step `total`
 * (one past the last step, so the last step still has a rate > 0). */
float optim_lr(const struct lr_schedule *s, uint64_t step);

/* "cosine", "linear", "constant" -> kind; -1 if unknown. */
int optim_lr_kind_parse(const char *name);

#endif
