/* gemm.h - fp32 matrix products for the trainer: OpenBLAS sgemm, split
 * over the trainer's OpenMP threads.
 *
 * Why not OpenBLAS's own threads: Debian's OpenBLAS runs a pthread pool of
 * its own, and on a machine with few cores its spinning workers and
 * OpenMP's fight over the same cores (measured: ~70% of a tiny model's time
 * went to spinning). So OpenBLAS is kept single-threaded (gemm_set_threads)
 * and each product is cut into one block of rows or columns per OpenMP
 * thread; each output element is computed by one thread with the same
 * K-order however the cut falls, so results do not depend on the split.
 */
#ifndef ALALLO_TRAIN_GEMM_H
#define ALALLO_TRAIN_GEMM_H

/* Sets the OpenMP thread count for all trainer work and makes OpenBLAS
 * single-threaded. Call once before any compute. */
void gemm_set_threads(int threads);

/* Row-major C (M,N) = alpha * op(A) op(B) + beta * C, where op(A) is (M,K)
 * (A stored (K,M) when ta) and op(B) is (K,N) (B stored (N,K) when tb).
 * Same contract as cblas_sgemm with CblasRowMajor. */
void gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc);

#endif
