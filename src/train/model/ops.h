/* ops.h - the layers of a Llama-style decoder, forward and backward side by
 * side, on row-major fp32 arrays.
 *
 * Shapes use N = B*T rows (batch times positions), C = hidden size,
 * H = query heads, KV = key/value heads, hd = head dimension, I = MLP width.
 * Every backward function ADDS into its gradient outputs (callers zero them
 * once per step), so that a tensor used twice gathers both contributions.
 *
 * Determinism: every reduction runs in a fixed order that does not depend on
 * the number of OpenMP threads (work is split over rows or columns that each
 * thread owns alone), so two runs with the same inputs give the same bits.
 * The caller owns every buffer; only attention allocates, (T,T) scratch
 * per thread for the length of the call.
 */
#ifndef ALALLO_TRAIN_OPS_H
#define ALALLO_TRAIN_OPS_H

#include <stddef.h>
#include <stdint.h>

/* RMSNorm: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps).
 * x, y: (N,C); w: (C); rstd OUT: (N), kept for the backward pass. */
void ops_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w,
                         int N, int C, float eps);
/* dx += d(loss)/dx; dw += d(loss)/dw (dw NULL when w is frozen). */
void ops_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x,
                          const float *w, const float *rstd, int N, int C);

/* Rotary tables for positions [0, T) and head dim hd (even):
 * cos/sin OUT: (T, hd/2), angle = pos * theta^(-2i/hd) / div[i] (div NULL:
 * all 1; Llama 3's scaling divides the low frequencies). */
void ops_rope_tables(float *cos_t, float *sin_t, int T, int hd, float theta,
                     const float *div);
/* Rotates x (B,T,nh,hd) in place, rotate-half convention over the first
 * rot dims of each head (rot = hd: all; Phi-3 turns part): pairs
 * (i, i+rot/2), tables of (T, rot/2); the other dims pass unchanged.
 * Row t of each sequence is at position pos0 + t. */
void ops_rope_forward(float *x, int B, int T, int nh, int hd, int rot, int pos0,
                      const float *cos_t, const float *sin_t);
/* The transpose of the rotation, applied in place to the gradient dx. */
void ops_rope_backward(float *dx, int B, int T, int nh, int hd, int rot, int pos0,
                       const float *cos_t, const float *sin_t);

/* The same with positions restarting per packed example: seg (B,T) holds,
 * for each row, the index (within its sequence) of the first row of its
 * example, so row t is at position t - seg[t]. seg NULL: all zero. */
void ops_rope_forward_seg(float *x, int B, int T, int nh, int hd, int rot, const int32_t *seg,
                          const float *cos_t, const float *sin_t);
void ops_rope_backward_seg(float *dx, int B, int T, int nh, int hd, int rot,
                           const int32_t *seg,
                           const float *cos_t, const float *sin_t);

/* Causal grouped-query attention. q: (B,T,H,hd), k,v: (B,T,KV,hd),
 * out OUT: (B,T,H,hd), lse OUT: (B,H,T) the log-sum-exp of each row of
 * scores, kept for the backward pass (which recomputes the probabilities
 * from it). Head h reads key/value head h / (H/KV). Scores are
 * scale * q.k, then cap * tanh(score / cap) when cap > 0 (Gemma 2). */
void ops_attention_forward(float *out, float *lse, const float *q, const float *k,
                           const float *v, int B, int T, int H, int KV, int hd, float scale,
                           float cap);
/* dq, dk, dv += gradients (each (B,T,·,hd) like its input). */
void ops_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                            const float *lse, const float *q, const float *k,
                            const float *v, int B, int T, int H, int KV, int hd, float scale,
                            float cap);
/* The same, block-diagonal for packed examples: row i attends to rows
 * seg[i] .. i of its sequence only (seg as for ops_rope_forward_seg, with
 * seg[i] <= i; NULL: plain causal). */
void ops_attention_forward_seg(float *out, float *lse, const float *q, const float *k,
                               const float *v, const int32_t *seg, int B, int T, int H, int KV,
                               int hd, float scale, float cap);
void ops_attention_backward_seg(float *dq, float *dk, float *dv, const float *dout,
                                const float *lse, const float *q, const float *k,
                                const float *v, const int32_t *seg, int B, int T, int H, int KV,
                                int hd, float scale, float cap);
/* The same with a sliding window of win rows (0: none): row i attends to
 * rows max(seg[i], i - win + 1) .. i only (Gemma 2 and 3's local layers). */
void ops_attention_forward_win(float *out, float *lse, const float *q, const float *k,
                               const float *v, const int32_t *seg, int win, int B, int T, int H,
                               int KV, int hd, float scale, float cap);
void ops_attention_backward_win(float *dq, float *dk, float *dv, const float *dout,
                                const float *lse, const float *q, const float *k,
                                const float *v, const int32_t *seg, int win, int B, int T,
                                int H, int KV, int hd, float scale, float cap);

/* Soft-capping in place: x = cap * tanh(x / cap), n values. */
void ops_softcap(float *x, size_t n, float cap);
/* Its backward given the capped values y: dx *= 1 - (y / cap)^2. */
void ops_softcap_backward(float *dx, const float *y, size_t n, float cap);

/* SwiGLU: h = silu(g) * u, g,u,h: (N,I) as n = N*I values. */
void ops_swiglu_forward(float *h, const float *g, const float *u, size_t n);
/* dg, du += gradients. */
void ops_swiglu_backward(float *dg, float *du, const float *dh, const float *g,
                         const float *u, size_t n);

/* GeGLU with the tanh GELU: h = gelu_tanh(g) * u (Gemma), n values. */
void ops_geglu_forward(float *h, const float *g, const float *u, size_t n);
/* dg, du += gradients. */
void ops_geglu_backward(float *dg, float *du, const float *dh, const float *g,
                        const float *u, size_t n);
/* Softmax cross-entropy on rows of logits (M,V) with target ids (M).
 * Replaces each row of logits with its gradient (softmax - onehot) * dscale
 * and returns the sum over rows of -log p(target), summed in double in row
 * order. Targets must lie in [0, V). */
double ops_xent_forward_backward(float *logits, const int32_t *targets, int M, int V,
                                 float dscale);
/* The same loss without the gradient (logits left unchanged). */
double ops_xent_forward(const float *logits, const int32_t *targets, int M, int V);
/* How many rows of logits (M,V) have their target as the arg-max (the
 * greedy choice; ties go to the lowest id, as generation breaks them).
 * The token accuracy's numerator. */
size_t ops_argmax_hits(const float *logits, const int32_t *targets, int M, int V);

/* Per row: row_loss[r] OUT = -log p(target) of row r; when w is not NULL,
 * row r of logits is replaced by its gradient times w[r] (each row its own
 * weight: DPO weighs the tokens of each sequence by that sequence's share
 * of the loss). Rows are independent, so the result does not depend on the
 * number of threads. */
void ops_xent_rows(float *logits, const int32_t *targets, int M, int V, const float *w,
                   double *row_loss);

/* Residual add: y = a + b, n values (y may alias a). */
void ops_add(float *y, const float *a, const float *b, size_t n);
/* y += x, n values. */
void ops_accumulate(float *y, const float *x, size_t n);
/* y = 0, n values, split over the threads (gradient blocks are large). */
void ops_zero(float *y, size_t n);

#endif
