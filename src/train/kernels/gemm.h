/* gemm.h - the trainer's matrix products, split over its OpenMP threads
 * and run by the CPU path chosen at start (train/cpu_path.h):
 *   avx2        OpenBLAS sgemm, single-threaded per block
 *   avx512      alallo's AVX-512 kernels (train/gemm_kern.h)
 *   avx512bf16  the same for fp32 products; gemm_bf16 for products with a
 *               frozen bf16/NF4 weight
 *   onednn      as avx512bf16, with gemm_bf16's products (but an NF4 B's,
 *               and a weight's gradient's unless oneDNN runs AMX) through
 *               oneDNN's matmul (train/onednn.h)
 *
 * Why not OpenBLAS's own threads: Debian's OpenBLAS runs a pthread pool of
 * its own, and on a machine with few cores its spinning workers and
 * OpenMP's fight over the same cores (measured: ~70% of a tiny model's time
 * went to spinning). So OpenBLAS is kept single-threaded (gemm_set_threads)
 * and each product is cut into one block of rows or columns per OpenMP
 * thread.
 *
 * Determinism: on one machine and path, the same inputs give the same
 * bits. Each output element is computed by one thread with the same
 * K-order however the cut falls; on the avx512 paths the result does not
 * depend on the thread count either (gemm_kern.h). oneDNN's products keep
 * its own order of the sums: the same bits run to run for one thread
 * count, different bits from alallo's kernels. Tolerances against plain
 * fp32 (tests/unit/train/test_gemm_paths.c): avx2 and avx512 within 1e-5
 * relative to the sum of |a||b|; bf16 (both bf16 paths) within 2^-7 of it
 * (each input rounds to 8 significant bits).
 *
 * Memory: a bf16 product cut by columns rounds A to bf16 once for all
 * threads (rather than each thread rounding all of it) into a buffer of
 * M x K halves that grows as needed and is kept, one per calling thread.
 * The onednn path rounds every product's A the same way (and an fp32 B
 * into a second buffer), as oneDNN reads bf16 memory: half the bytes of
 * the largest fp32 A (and B) the process multiplies, kept.
 */
#ifndef ALALLO_TRAIN_GEMM_H
#define ALALLO_TRAIN_GEMM_H

#include <stddef.h>
#include <stdint.h>

struct nf4_tensor;

/* Sets the OpenMP thread count for all trainer work and makes OpenBLAS
 * single-threaded. Call once before any compute. */
void gemm_set_threads(int threads);

/* Row-major C (M,N) = alpha * op(A) op(B) + beta * C, where op(A) is (M,K)
 * (A stored (K,M) when ta) and op(B) is (K,N) (B stored (N,K) when tb).
 * Same contract as cblas_sgemm with CblasRowMajor. */
void gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc);

/* True when products with frozen 16-bit weights go through gemm_bf16 (the
 * path in use is avx512bf16). */
int gemm_has_bf16(void);

/* As gemm, with bf16 products and fp32 accumulation: A is fp32 rounded to
 * bf16; B is bf16 (Bh) or fp32 (Bf, rounded the same way), exactly one
 * non-NULL. Only when gemm_has_bf16(). */
void gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const uint16_t *Bh, const float *Bf, int ldb, float beta, float *C, int ldc);

/* A frozen NF4 weight read as a bf16 matrix: element (i, j) of the stored
 * matrix (leading dimension ldb) is value base + i * ldb + j of t, rounded
 * to bf16 exactly as nf4_dequantize_bf16 gives it. */
struct gemm_nf4 {
    const struct nf4_tensor *t;
    size_t base;
};
/* As gemm_bf16 with B an NF4 weight, decoded a strip at a time as B is
 * packed (into a per-thread buffer of 32 KiB), never whole: the same bits
 * as nf4_dequantize_bf16 into a buffer and gemm_bf16 on it, with neither
 * the buffer nor its pass over memory. Only when gemm_has_bf16(). */
void gemm_bf16_nf4(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const struct gemm_nf4 *Bq, int ldb, float beta, float *C, int ldc);

#endif
