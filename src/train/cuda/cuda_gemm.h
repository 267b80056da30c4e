/* cuda_gemm.h - matrix products on the GPU through cuBLASLt (tensor cores).
 *
 * The same row-major contract as gemm.h: C (M,N) = alpha op(A) op(B) +
 * beta C, op(A) (M,K) (A stored (K,M) when ta), op(B) (K,N) (B stored (N,K)
 * when tb). Runs on cuda_ctx_stream(); all pointers are device pointers.
 *
 * Numerics: bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F), fp32 or
 * bf16 output. (LoRA's rank-r products once ran in fp32 on CUDA cores;
 * they read bf16 like the rest now, docs/trainer.md.) Determinism: cuBLASLt picks its algorithm by heuristics once
 * per shape and the choice is cached for the process, with split-K
 * reductions that are not atomic, so the same GPU kind, shapes and
 * library version give the same bits (docs/trainer.md, "GPU").
 */
#ifndef ALALLO_TRAIN_CUDA_GEMM_H
#define ALALLO_TRAIN_CUDA_GEMM_H

#include <stdint.h>

/* bf16 x bf16 -> fp32 C. 0, or -1 with a reason in cuda_ctx_error(). */
int cuda_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                   int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc);
/* bf16 x bf16 -> bf16 C (beta applies to the bf16 C). */
int cuda_gemm_bf16_out(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                       int lda, const uint16_t *B, int ldb, float beta, uint16_t *C, int ldc);
/* bf16 x bf16 -> bf16 D = alpha op(A) op(B) + R, R bf16 with D's shape and
 * leading dimension (R may be D): the sum and R's value added in fp32 and
 * rounded once, by the product's epilogue (a residual added where the
 * product writes: issue 36, change 1m). Counted as CUDA_GEMM_BF16_BF16. */
int cuda_gemm_bf16_out_add(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                           int lda, const uint16_t *B, int ldb, const uint16_t *R, uint16_t *D,
                           int ldc);

/* fp32 x fp32 -> fp32 without TF32 (CUBLAS_COMPUTE_32F), on CUDA cores:
 * for products that must match the CPU closely (tests); the trainer's
 * pass has none. */
int cuda_gemm_f32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);

/* Products asked for of each kind since the process began (refused ones
 * not counted, nor walked ones; a graph's replay asks for none): which
 * path a pass takes, for tests and benches. */
enum cuda_gemm_kind { CUDA_GEMM_BF16_F32 /* cuda_gemm_bf16 */,
                      CUDA_GEMM_BF16_BF16 /* cuda_gemm_bf16_out */,
                      CUDA_GEMM_F32_F32 /* cuda_gemm_f32 */, CUDA_GEMM_KINDS };
unsigned long cuda_gemm_calls(enum cuda_gemm_kind kind);

/* The arguments' checks each product above makes first
 * (cuda_gemm_args.c): -1 refused, with a reason in cuda_ctx_error() (a
 * negative size, a leading dimension shorter than a stored row, K 0 with a
 * beta other than 0 or 1); else what to do. */
enum { CUDA_GEMM_RUN = 0, CUDA_GEMM_NOTHING = 1 /* empty C, or K 0 and beta 1 */,
       CUDA_GEMM_ZERO = 2 /* K 0 and beta 0: C = 0 */ };
int cuda_gemm_args(int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, float beta);
/* While a walk is on (cuda_walk.h): notes the product (its kind, shapes,
 * scalars and operands; Cin the C it adds to, NULL for C itself) and
 * returns 1, and the product is neither queued nor counted; else 0. After
 * cuda_gemm_args, for a product it did not refuse. */
int cuda_gemm_walked(int kind, int ta, int tb, int M, int N, int K, float alpha, const void *A,
                     int lda, const void *B, int ldb, float beta, const void *Cin, const void *C,
                     int ldc);

#endif
