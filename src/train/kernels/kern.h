/* kern.h - the trainer's hot elementwise loops, compiled twice: for the
 * x86-64 baseline and for x86-64-v3 (AVX2, FMA), picked at load time
 * (GCC target_clones), so one binary runs everywhere and uses the wide
 * vectors where they exist. math-errno is off in these functions only, so
 * that sqrtf vectorizes (its argument is never negative here).
 *
 * Single-threaded: callers split the work over their OpenMP threads. Each
 * function gives the same bits for the same input on the same machine.
 */
#ifndef ALALLO_TRAIN_KERN_H
#define ALALLO_TRAIN_KERN_H

#include <stddef.h>
#include <stdint.h>

/* AdamW on n elements (see optim.h): g is scaled by gscale; p decays by
 * `decay` (1 for none) before the step `step * m / (sqrt(v) * rc2 + eps)`. */
void kern_adamw(float *p, const float *g, float *m, float *v, size_t n, float gscale, float b1,
                float b2, float step, float rc2, float eps, float decay);

/* sum of g[i]^2 in float (callers keep chunks short and add the chunk sums
 * in double). */
float kern_sumsq(const float *g, size_t n);

/* bf16 bits to fp32. */
void kern_bf16_to_f32(const uint16_t *src, float *dst, size_t n);

/* The largest of x[0..n) (-FLT_MAX for n == 0). */
float kern_max(const float *x, size_t n);

/* exp(x[i] - shift) for i < n, stored to out[i] when out is not NULL (out
 * may be x), and their sum. On AVX2/FMA machines a polynomial exp within
 * 2e-7 relative of expf and eight lane sums; elsewhere expf. */
float kern_exp_sum(const float *x, float *out, size_t n, float shift);

/* SwiGLU (see ops.h) on n elements with the exp of kern_exp_sum: h = silu(g) u;
 * and its backward, which adds into dg and du. */
void kern_swiglu_forward(float *h, const float *g, const float *u, size_t n);
void kern_swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u,
                          size_t n);

#endif
