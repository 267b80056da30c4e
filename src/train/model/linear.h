/* linear.h - a linear projection y = x W^T + b whose weight is trained
 * (fp32) or frozen (fp32, bf16 or NF4), optionally with a LoRA adapter.
 *
 * Shapes: x (N,in), y (N,out), W (out,in) as Hugging Face stores it, bias
 * (out), LoRA A (r,in) and B (out,r) with h = x W^T + (alpha/r) (x A^T) B^T.
 * On the avx512bf16 path (train/cpu_path.h) every product with W, and a
 * trained W's gradient dy^T x, takes bf16 inputs with fp32 accumulation,
 * as the GPU trainer's do: a frozen bf16/NF4 weight is read as stored (an
 * NF4 one decoded strip by strip), a trained fp32 weight and the
 * activations are rounded to bf16 as the kernel packs them. LoRA's rank-r
 * products stay fp32. On the other paths a frozen bf16/NF4 weight is
 * widened to fp32 in row chunks into the caller's scratch just before each
 * product. Memory stays at the stored size.
 *
 * Ownership: a struct linear only points into memory that its model owns;
 * nothing here allocates. Gradient pointers are NULL for frozen parts.
 */
#ifndef ALALLO_TRAIN_LINEAR_H
#define ALALLO_TRAIN_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "train/kernels/nf4.h"

enum wkind { WK_F32 = 0, WK_BF16, WK_NF4 };

struct linear {
    int in, out;
    enum wkind kind;
    float *w;               /* WK_F32: (out,in)                       */
    float *dw;              /* (out,in) when the weight trains, else NULL */
    uint16_t *wb;           /* WK_BF16: (out,in)                      */
    struct nf4_tensor *wq;  /* WK_NF4: out*in values                  */
    float *bias;            /* (out) or NULL                          */
    float *dbias;           /* (out) when the bias trains, else NULL  */
    int r;                  /* LoRA rank; 0 = no adapter              */
    float scale;            /* alpha / r                              */
    float *la, *dla;        /* LoRA A (r,in) and its gradient         */
    float *lb, *dlb;        /* LoRA B (out,r) and its gradient        */
    int dw_fresh;           /* dw holds nothing yet this step: the next
                               product writes it instead of adding
                               (model_grad_begin)                     */
};

/* LoRA dropout of one product (PEFT's lora_dropout): the adapter reads
 * x' = x * keep / (1 - p) in place of x, so h = x W^T + scale (x' A^T) B^T;
 * the frozen or trained weight W still reads x. keep[n][i] is 0 with
 * probability p, drawn from (seed, n * in + i) alone, so the backward pass
 * recomputes the same mask and a run resumed from a checkpoint draws the
 * same masks as one that never stopped. */
struct linear_dropout {
    float p;       /* [0, 1); 0: no dropout */
    uint64_t seed; /* distinct for every product of every step */
};

/* Scratch for one product at a time: `deq` holds dequantized weight rows
 * (at least in floats, see linear_scratch_floats), `tmp` holds (N,r).
 * With dropout.p > 0 (and an adapter) `drop` must hold N*in floats. */
struct linear_scratch {
    float *deq;
    size_t deq_cap; /* floats */
    float *tmp;
    size_t tmp_cap; /* floats */
    struct linear_dropout dropout; /* set by the caller before each product */
    float *drop;                   /* (N,in) the adapter's input x'       */
    size_t drop_cap;               /* floats                              */
};

/* keep / (1 - p) of element e of a product under dropout d: 0 or 1/(1-p). */
float linear_dropout_keep(const struct linear_dropout *d, size_t e);

/* Floats of `deq` scratch that let every weight of width `in` be read in
 * chunks of at least one row; the trainer sizes it larger for speed. */
size_t linear_scratch_floats(int in);

/* Weight rows [r0, r0+nr) as fp32: a pointer into w (WK_F32) or `buf`
 * filled by dequantization (nr*in floats). */
const float *linear_rows(const struct linear *l, int r0, int nr, float *buf);

/* The products with W alone, for the model's own loops (the head): 
 * y[:, 0:nr] (ldy) = beta y + x (N,in; ldx) . W[r0:r0+nr]^T, and
 * dx (N,in) = beta dx + dy (N,nr; lddy) . W[r0:r0+nr].
 * Every W takes bf16 products when gemm_has_bf16(); otherwise a frozen
 * bf16/NF4 W's rows are widened to fp32 in `deq` (nr*in floats). */
void linear_times_wt(const struct linear *l, int r0, int nr, const float *x, int ldx, int N,
                     float beta, float *y, int ldy, float *deq);
void linear_times_w(const struct linear *l, int r0, int nr, const float *dy, int lddy, int N,
                    float beta, float *dx, float *deq);

/* A trained W's gradient, rows [r0, r0+nr):
 * dw[r0:r0+nr] (nr,in) = beta dw[...] + dy[:, 0:nr] (N,nr; lddy)^T . x (N,in),
 * in the precision of W's other products. */
void linear_weight_grad(const struct linear *l, int r0, int nr, const float *dy, int lddy,
                        const float *x, int N, float beta);

/* y = x W^T + b + scale (x' A^T) B^T, x' = x without dropout (s->dropout).
 * xa OUT (N,r) = x' A^T is kept for the backward pass (NULL allowed when
 * r == 0). */
void linear_forward(const struct linear *l, float *y, const float *x, int N, float *xa,
                    struct linear_scratch *s);

/* Makes a fresh dw hold zeros (for a contribution that only adds). */
void linear_grad_touch(struct linear *l);

/* Given dy (N,out): dx += dy W + scale ((dy B) A) * keep/(1-p) (dx NULL to
 * skip), dw += dy^T x, dbias += column sums of dy, dB += scale dy^T xa,
 * dA += scale (dy B)^T x', each only where that gradient pointer is set
 * (dw = dy^T x when dw_fresh, which it then clears);
 * s->dropout must be what the forward pass had. */
void linear_backward(struct linear *l, float *dx, const float *dy, const float *x,
                     const float *xa, int N, struct linear_scratch *s);

/* Writes the effective weight W + scale B A (out,in) into w_out. */
void linear_merged_weight(const struct linear *l, float *w_out);

/* Adds the adapter's scale B A to w (out,in), a weight of this linear's
 * shape held by the caller; nothing without an adapter. */
void linear_add_adapter(const struct linear *l, float *w);

/* bf16 <-> fp32 (round to nearest even; NaN stays NaN). */
float linear_bf16_to_f32(uint16_t h);
uint16_t linear_f32_to_bf16(float f);

#endif
