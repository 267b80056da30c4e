/* cuda_ops.h - the decoder's layers as CUDA kernels, forward and backward,
 * on device arrays: the GPU twin of train/ops.h, with the same shapes,
 * layouts and meanings (read ops.h for each one; only what differs is said
 * here). Every function launches on cuda_ctx_stream() and returns at once;
 * errors surface at cuda_ctx_sync().
 *
 * Conventions (as ops.h): row-major, N = B*T rows, fp32 unless a parameter
 * is uint16_t (bf16 bits). Every backward ADDS into its gradient outputs.
 *
 * bf16 copies. The kernels whose output a product reads next (RMSNorm,
 * the gated activations, rotary positions' backward, attention's output)
 * take a second, uint16_t output beside the fp32 one: when it is not NULL
 * it gets the fp32 values just written as bf16, the same bits
 * cuda_to_bf16 gives, in the same pass (so the product's input costs no
 * conversion pass of its own; tests/gpu/test_cuda_ops.c checks the bits).
 *
 * Determinism: no floating-point atomics. Every reduction (RMSNorm's weight
 * gradient, attention's dk/dv over the query heads of a group, the
 * embedding's gradient, the gradient norm) runs in a fixed order, so the
 * same GPU kind and inputs give the same bits, which exact resume needs.
 *
 * Tolerance against the CPU ops (tests/gpu/test_cuda_ops.c): fp32 kernels
 * within 1e-4 relative (1e-3 for fp32 attention, whose sums run in another
 * order; 2e-2 for bf16 attention); bf16 conversions exact (round to
 * nearest even, as the CPU's).
 */
#ifndef ALALLO_TRAIN_CUDA_OPS_H
#define ALALLO_TRAIN_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

/* --- attention and rotary positions (train/cuda/cuda_attn.cu) --- */

/* Rotates x (B,T,nh,hd) in place, rotate-half, row t of each sequence at
 * position t - seg[b*T+t] (seg NULL: t). cos/sin: (Tmax, hd/2) on the
 * device, as ops_rope_tables fills them. The backward's dxb (may be NULL)
 * gets the rotated dx as bf16, a row (b, t) of nh x hd values ldxb apart
 * (ldxb >= nh hd). */
void cuda_rope_forward(float *x, int B, int T, int nh, int hd, const int32_t *seg,
                       const float *cos_t, const float *sin_t);
/* The forward on bf16 x (q and k as their products write them: issue 36,
 * change 1i): each pair read as floats, rotated as above, rounded back. */
void cuda_rope_forward_bf16(uint16_t *x, int B, int T, int nh, int hd, const int32_t *seg,
                            const float *cos_t, const float *sin_t);
void cuda_rope_backward(float *dx, uint16_t *dxb, int ldxb, int B, int T, int nh, int hd,
                        const int32_t *seg, const float *cos_t, const float *sin_t);

/* Which kernels attention runs (one setting per process; the trainer sets
 * it at open from ALALLO_CUDA_ATTENTION, tests per case):
 *   CUDA_ATTN_BF16  the default: products on tensor cores, with p and dS
 *                   rounded to bf16 and every sum, the softmax and lse in
 *                   fp32 (cuda_attn_tc.cu), for hd <= 128; larger heads run
 *                   the fp32 kernels.
 *   CUDA_ATTN_FP32  every product in fp32 on CUDA cores: the reference.
 * Both read Q, K, V and dO as bf16 (change 1i). Each gives the same bits
 * for the same inputs on the same GPU kind; the two differ by p's and dS's
 * rounding (test_cuda_attn.c: bf16 within 2e-2 of each tensor's magnitude
 * of the CPU on the same inputs; fp32 within 1e-3). */
enum cuda_attn_kind { CUDA_ATTN_BF16 = 0, CUDA_ATTN_FP32 = 1 };
void cuda_attention_use(enum cuda_attn_kind kind);
/* The kernels that run now for head dimension hd. */
enum cuda_attn_kind cuda_attention_kind(int hd);

/* Causal grouped-query attention, flash-style: tiles of queries against
 * tiles of keys in shared memory with an online softmax, so memory is
 * O(T) per head, never (T,T). out (B,T,H,hd), lse (B,H,T) as
 * ops_attention_forward_seg (seg NULL: plain causal; cap > 0: soft-capped
 * scores) on q (B,T,H,hd), k and v (B,T,KV,hd) as bf16, as the trainer
 * keeps them (issue 36, change 1i). hd <= 256. out is written as bf16
 * (change 1k: the trainer keeps it so), and outb gets the same bits as a
 * row (b, t) of H x hd values ldo apart (ldo >= H hd): either may be
 * NULL. */
void cuda_attention_forward(uint16_t *out, uint16_t *outb, int ldo, float *lse,
                            const uint16_t *q, const uint16_t *k, const uint16_t *v,
                            const int32_t *seg, int B, int T, int H, int KV, int hd, float scale,
                            float cap);
/* dq, dk, dv = the gradients, recomputing probabilities from lse: every
 * value written, what they held before never read (issue 36, change 1e:
 * no zeroing pass before). Two passes with no atomics: one owns rows of
 * dq, one owns rows of dk and dv (summing over the H/KV query heads of
 * the group in order). Both need
 * D = rowsum(dout * out) per row, computed first from the forward's `out`
 * (bf16, packed) and the fp32 dout into `scratch` OUT: (B,H,T) floats of
 * the caller's, overwritten; the same pass writes dout as bf16 into doutb
 * OUT ((B,T,H,hd) of the caller's, overwritten), which both read. */
void cuda_attention_backward(float *dq, float *dk, float *dv, float *scratch, uint16_t *doutb,
                             const float *dout, const uint16_t *out, const float *lse,
                             const uint16_t *q, const uint16_t *k, const uint16_t *v,
                             const int32_t *seg, int B, int T, int H, int KV, int hd,
                             float scale, float cap);

/* As cuda_attention_backward, with dq, dk and dv written as bf16 alone,
 * rows ldq, ldk and ldv values apart (at least a row's H hd, KV hd), and
 * dq and dk rotated back by each row's rotary position first (cos_t,
 * sin_t: the (T, hd/2) tables cuda_rope_backward reads): the values
 * cuda_attention_backward then cuda_rope_backward (dq, dk) or
 * cuda_to_bf16_rows (dv) give, to the bit, in one pass with no fp32
 * written (issue 36, change 1o). Where cuda_attention_bf16_grads(hd): the
 * tensor-core kernels, hd a multiple of 16 (a lane holds both values of
 * each rotated pair). */
int cuda_attention_bf16_grads(int hd);
void cuda_attention_backward_bf16(uint16_t *dq, int ldq, uint16_t *dk, int ldk, uint16_t *dv,
                                  int ldv, float *scratch, uint16_t *doutb, const float *dout,
                                  const uint16_t *out, const float *lse, const uint16_t *q,
                                  const uint16_t *k, const uint16_t *v, const int32_t *seg, int B,
                                  int T, int H, int KV, int hd, float scale, float cap,
                                  const float *cos_t, const float *sin_t);

/* --- everything else (train/cuda/cuda_ops.cu) --- */

/* RMSNorm as ops_rmsnorm_forward/backward. dw (C) may be NULL (frozen);
 * when set, its column sums over N rows run in a fixed order. yb and dxb
 * (may be NULL) get y and the new dx (after the addition) as bf16; their
 * rows are ldyb and lddxb values apart (C when that is <= C: a product
 * that reads LoRA's columns beside them reads those past C). The
 * forward's y may be NULL when yb is not: its input kept as bf16 alone,
 * for products that read nothing else (change 1b, cuda_model.c). */
void cuda_rmsnorm_forward(float *y, uint16_t *yb, int ldyb, float *rstd, const float *x,
                          const float *w, int N, int C, float eps);
void cuda_rmsnorm_backward(float *dx, uint16_t *dxb, int lddxb, float *dw, const float *dy,
                           const float *x, const float *w, const float *rstd, int N, int C);
/* The same on a bf16 x (the residual stream, issue 36 change 1j), each
 * value widened as it is read: the fp32 kernels' bits on x's values. */
void cuda_rmsnorm_forward_bf16(float *y, uint16_t *yb, int ldyb, float *rstd,
                               const uint16_t *x, const float *w, int N, int C, float eps);
void cuda_rmsnorm_backward_bf16(float *dx, uint16_t *dxb, int lddxb, float *dw,
                                const float *dy, const uint16_t *x, const float *w,
                                const float *rstd, int N, int C);

/* SwiGLU and GeGLU (tanh), n values, as ops.h. hb, dgb and dub (each may
 * be NULL) get h and the new dg and du as bf16, as rows of cols values
 * (n / cols rows) ldhb or ldb apart (cols 0: n in a row; ld <= cols:
 * packed). The forward's h may be NULL when hb is not (bf16 alone). The
 * backward adds into dg and du as ops.h when acc, else writes them
 * without reading them: the bits of adding into zeros (change 1c: no
 * zeroing pass, no read); without acc, dg or du may be NULL when its bf16
 * is not (bf16 alone, change 1f). */
void cuda_swiglu_forward(float *h, uint16_t *hb, int cols, int ldhb, const float *g,
                         const float *u, size_t n);
void cuda_swiglu_backward(float *dg, float *du, uint16_t *dgb, uint16_t *dub, int cols, int ldb,
                          const float *dh, const float *g, const float *u, size_t n, int acc);
void cuda_geglu_forward(float *h, uint16_t *hb, int cols, int ldhb, const float *g,
                        const float *u, size_t n);
void cuda_geglu_backward(float *dg, float *du, uint16_t *dgb, uint16_t *dub, int cols, int ldb,
                         const float *dh, const float *g, const float *u, size_t n, int acc);
/* The same two (GeGLU when gelu, else SwiGLU) reading g and u as bf16, as
 * the trainer keeps them (change 1g): the bits the fp32 kernels give on
 * g and u rounded to bf16. */
void cuda_gated_forward_bf16(int gelu, float *h, uint16_t *hb, int cols, int ldhb,
                             const uint16_t *g, const uint16_t *u, size_t n);
void cuda_gated_backward_bf16(int gelu, float *dg, float *du, uint16_t *dgb, uint16_t *dub,
                              int cols, int ldb, const float *dh, const uint16_t *g,
                              const uint16_t *u, size_t n, int acc);
/* The same with dh as bf16 too (down's dX product writes it so on a 16-bit
 * base: change 1l), each value widened: the fp32-dh kernel's bits on the
 * same values. */
void cuda_gated_backward_bf16dh(int gelu, float *dg, float *du, uint16_t *dgb, uint16_t *dub,
                                int cols, int ldb, const uint16_t *dh, const uint16_t *g,
                                const uint16_t *u, size_t n, int acc);

/* Soft-capping in place and its backward, as ops_softcap(_backward). */
void cuda_softcap(float *x, size_t n, float cap);
void cuda_softcap_backward(float *dx, const float *y, size_t n, float cap);

/* Cross-entropy on M rows of logits (M,V), one thread block per row (the
 * vocabulary is read in chunks, max and sum online): row_loss[r] OUT =
 * -log p(target r); when `grad`, row r becomes (softmax - onehot) *
 * dscale * (w ? w[r] : 1). hits OUT (M, may be NULL): 1 where the target
 * is the arg-max (ties to the lowest id), else 0. The caller sums
 * row_loss in row order on the host (determinism). */
void cuda_xent_rows(float *logits, const int32_t *targets, int M, int V, int grad,
                    float dscale, const float *w, float *row_loss, int32_t *hits);
/* The same on bf16 logits (the head's product writes them so: change 1h),
 * read as floats; with `grad` the gradient is written over them as bf16,
 * the bits of cuda_xent_rows's fp32 gradient rounded (cuda_to_bf16). */
void cuda_xent_rows_bf16(uint16_t *logits, const int32_t *targets, int M, int V, int grad,
                         float dscale, const float *w, float *row_loss, int32_t *hits);

/* Token embedding: out (n,C) row i = table[ids[i]] * scale; the table is
 * fp32 (tf) or bf16 (tb), exactly one non-NULL. */
void cuda_embed_forward(float *out, const int32_t *ids, int n, const float *tf,
                        const uint16_t *tb, int C, float scale);
/* The same written as bf16 (the residual stream's first rows, change 1j):
 * cuda_embed_forward's values rounded. */
void cuda_embed_forward_bf16(uint16_t *out, const int32_t *ids, int n, const float *tf,
                             const uint16_t *tb, int C, float scale);
/* dtable (V,C) += scale * dout rows scattered by ids, each column summed
 * over the n rows in row order (no atomics). */
void cuda_embed_backward(float *dtable, const int32_t *ids, int n, const float *dout, int C,
                         float scale);

/* Elementwise. y = a + b (y may alias a); y += x; y *= s; y = 0. */
void cuda_add(float *y, const float *a, const float *b, size_t n);
/* y = bf16 of a + b, a bf16 (the residual stream: change 1j); y may alias a. */
void cuda_add_bf16(uint16_t *y, const uint16_t *a, const float *b, size_t n);
void cuda_accumulate(float *y, const float *x, size_t n);
void cuda_scale(float *y, float s, size_t n);
void cuda_zero(void *y, size_t bytes);
/* y (N,C) += bias (C) per row; dbias (C) += column sums of dy (N,C) in row
 * order. */
void cuda_add_bias(float *y, const float *bias, int N, int C);
/* yb (N,C) = bf16 of y + bias per row, rounded once (a product's bf16
 * output with its bias: q, k, v's, issue 36 change 1i). */
void cuda_add_bias_bf16(uint16_t *yb, const float *y, const float *bias, int N, int C);
void cuda_bias_backward(float *dbias, const float *dy, int N, int C);

/* bf16 conversions, round to nearest even (NaN stays NaN), as
 * linear_f32_to_bf16 / linear_bf16_to_f32. */
void cuda_to_bf16(uint16_t *dst, const float *src, size_t n);
void cuda_from_bf16(float *dst, const uint16_t *src, size_t n);
/* src (rows, cols) packed into dst's rows, ldd values apart. */
void cuda_to_bf16_rows(uint16_t *dst, int ldd, const float *src, int rows, int cols);

/* LoRA folded into a base weight (docs/trainer.md, "LoRA folded into the
 * base product"): w (out + r rows, ldw apart) gets, in columns [col0,
 * col0 + r) of its first out rows, scale times b (out, r), and in the
 * first `in` columns of its r rows past those, scale times a (r, in);
 * fp32 a and b, each value scale times it rounded once to bf16 (nearest
 * even). Nothing else of w is written. as, unless NULL, gets a itself
 * (r, in) rounded once: the projection's rows of its group's stacked A
 * (change 2c). */
struct cuda_lora_fold {
    uint16_t *w;
    const float *a, *b;
    int ldw, col0, out, in, r;
    float scale;
    uint16_t *as;
};
/* Every fold of d (n of them, d and what it points at on the device) in
 * one launch; most: the largest out r + r in among them. */
void cuda_lora_fold(const struct cuda_lora_fold *d, int n, size_t most);
/* LoRA's backward from dy in one pass over it (change 2e): t = dy B (N,
 * r) rounded once to bf16 into t (rows ldt apart) and, unless t2 is NULL,
 * into t2 (rows ldt2 apart); dB (out, r) += scale dy^T xa, fp32. dy (N,
 * out) bf16 rows ldy apart, B (out, r) bf16 packed, xa (N, r) bf16 rows
 * ldxa apart. Blocks of CUDA_LORA_DBT_ROWS rows and a slice of out's
 * columns each sum their share on the tensor cores (bf16 in, fp32 sums)
 * into scratch (cuda_lora_dbt_floats of them, the caller's), and a second
 * launch adds the shares in a fixed order: the same bits on every run of
 * a GPU kind. r from 1 to CUDA_LORA_DBT_MAX_R (beyond, two products:
 * cuda_gemm_bf16_out and cuda_gemm_bf16). */
#define CUDA_LORA_DBT_ROWS 256
#define CUDA_LORA_DBT_MAX_R 64
size_t cuda_lora_dbt_floats(int N, int out, int r);
void cuda_lora_dbt(int N, int out, int r, float scale, const uint16_t *dy, int ldy,
                   const uint16_t *B, const uint16_t *xa, int ldxa, float *dB, uint16_t *t,
                   int ldt, uint16_t *t2, int ldt2, float *scratch);
/* dst[i * ldd + j] = src[i * lds + j] for i < rows, j < cols (bf16). */
void cuda_copy_cols(uint16_t *dst, int ldd, const uint16_t *src, int lds, int rows, int cols);

/* NF4 on the device: the arrays of struct nf4_tensor (train/nf4.h) copied
 * as they are. Writes values [start, start+count) as bf16 (each the fp32
 * value nf4_dequantize_range gives, rounded), start a multiple of
 * NF4_BLOCK. */
struct cuda_nf4 {
    size_t n, n_blocks, n_groups;
    const uint8_t *codes;
    const int8_t *scale_codes;
    const float *group_mean, *group_absmax;
};
void cuda_nf4_to_bf16(uint16_t *dst, const struct cuda_nf4 *t, size_t start, size_t count);

/* A product that reads NF4 weight w as it is, never decoded whole: C
 * (M,N) = alpha A op(W) + beta C (beta 0: C is not read), A (M,K) bf16
 * with row stride lda, op(W) = W^T when tw (W stored (N,K): y = x W^T)
 * else W (stored (K,N): dx = dy W), W's rows ldw values apart from value 0
 * of w. Each tile of W is decoded to bf16 in shared memory as it is read
 * (each value as cuda_nf4_to_bf16 gives it) and the products sum in fp32
 * on the tensor cores, in a fixed order: cuda_gemm_bf16 on the decoded
 * matrix, within its sum order. Any M, N, K >= 0 (M up to 65535 x 128,
 * the grid's rows of tiles; beyond, the launch fails at cuda_ctx_sync). */
void cuda_nf4_gemm(int tw, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                   const struct cuda_nf4 *w, int ldw, float beta, float *C, int ldc);

/* LoRA dropout: x_out = x * keep / (1 - p) for n values, element e's keep
 * drawn exactly as linear_dropout_keep({p, seed}, e0 + e) draws it (the
 * same hash, bit for bit, so a job can move between CPU and GPU). */
void cuda_dropout(float *x_out, const float *x, size_t n, float p, uint64_t seed, size_t e0);
/* The same from a bf16 x (attention's output, kept as bf16: change 1k),
 * each value widened: cuda_dropout's bits on x's values. */
void cuda_dropout_bf16(float *x_out, const uint16_t *x, size_t n, float p, uint64_t seed,
                       size_t e0);
/* The two above with the seed read from the device (one uint64_t at
 * seed): the same bits, and launches whose arguments stay the same while
 * the seed changes, so that a CUDA graph replays them (cuda_graph.h). */
void cuda_dropout_at(float *x_out, const float *x, size_t n, float p, const uint64_t *seed,
                     size_t e0);
void cuda_dropout_bf16_at(float *x_out, const uint16_t *x, size_t n, float p,
                          const uint64_t *seed, size_t e0);

/* The sum of squares of g (n) into *out (one double on the device), in
 * fixed chunks summed in chunk order, as optim_grad_norm before its sqrt. */
void cuda_sumsq(double *out, const float *g, size_t n);
/* One AdamW update as optim_adamw_step for t (already incremented), on
 * n parameters with decay on [0, n_decay): gradient gscale * g. */
void cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, size_t n_decay,
                float gscale, float lr, float beta1, float beta2, float eps, float wd,
                uint64_t t);

#endif
