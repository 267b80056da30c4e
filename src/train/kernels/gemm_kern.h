/* gemm_kern.h - alallo's own single-threaded matrix-product kernels for
 * the avx512 and avx512bf16 CPU paths (train/cpu_path.h). gemm.c splits a
 * product into blocks and calls these; nothing else should.
 *
 * Contract (both): row-major C (M,N) = alpha op(A) op(B) + beta C, with
 * op(A) (M,K) (A stored (K,M) when ta) and op(B) (K,N) (B stored (N,K)
 * when tb), as cblas_sgemm. beta == 0 never reads C.
 *
 * Numerics, the same for every block cut: each C element is
 * fma(alpha, s, c') per block of K (256 for fp32, 512 for bf16), where s
 * is the sum of that block's products in K order (one FMA chain, or pairs
 * of bf16 products for vdpbf16ps) and c' is beta C (first block) or the
 * previous block's result. So a result depends only on M, N, K, the data
 * and the path: not on how gemm.c cut the product or on the thread count.
 *
 * Memory: packing buffers are per thread (thread-local, allocated on first
 * use, 0.75 MiB, kept for the thread's life).
 */
#ifndef ALALLO_TRAIN_GEMM_KERN_H
#define ALALLO_TRAIN_GEMM_KERN_H

#include <stdint.h>

#include "train/kernels/gemm.h"

/* fp32 inputs, fp32 accumulation (AVX-512 FMA). Needs avx512f. */
void gemm_kern_f32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);

/* bf16 products, fp32 accumulation (vdpbf16ps). A is fp32 and rounds to
 * the nearest bf16 (ties to even); B is bf16 (Bh), fp32 (Bf, rounded the
 * same way) or NF4 (Bq, decoded to bf16 a strip at a time as it is
 * packed): exactly one of them is non-NULL. Needs avx512f and
 * avx512bf16. */
void gemm_kern_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const uint16_t *Bh, const float *Bf, const struct gemm_nf4 *Bq, int ldb,
                    float beta, float *C, int ldc);

/* The same product with A already rounded to bf16 (Ah, row-major (M,K),
 * lda apart, as gemm_kern_round_bf16 writes it; op(A) = A only): the same
 * bits as gemm_kern_bf16 on the fp32 A, without rounding it again, so that
 * threads sharing one A round it once. */
void gemm_kern_bf16_ah(int M, int N, int K, float alpha, const uint16_t *Ah, int lda,
                       int tb, const uint16_t *Bh, const float *Bf, const struct gemm_nf4 *Bq,
                       int ldb, float beta, float *C, int ldc);

/* rows x cols fp32 values (rows ldx apart) rounded to bf16 (nearest, ties
 * to even, as the kernels round) into out (rows ldo apart). Needs
 * avx512bf16. */
void gemm_kern_round_bf16(const float *x, int ldx, int rows, int cols, uint16_t *out, int ldo);

#endif
