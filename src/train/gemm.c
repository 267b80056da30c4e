/* gemm.c - sgemm split over OpenMP threads (see gemm.h). */
#include "train/gemm.h"

#include <cblas.h>
#include <omp.h>

/* Below this many multiply-adds a product runs on one thread: splitting
 * costs more than it saves. */
#define PAR_MIN_WORK (1L << 18)

void gemm_set_threads(int threads)
{
    if (threads < 1)
        threads = 1;
    omp_set_num_threads(threads);
    openblas_set_num_threads(1);
}

void gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc)
{
    enum CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE opb = tb ? CblasTrans : CblasNoTrans;
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt <= 1 || (long)M * N * K < PAR_MIN_WORK) {
        cblas_sgemm(CblasRowMajor, opa, opb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* Cut the longer side of C, in multiples of 16 so that every block
     * keeps whole vector tiles. */
    int by_rows = M >= N;
    int len = by_rows ? M : N;
    int chunk = (len + nt - 1) / nt;
    chunk = (chunk + 15) & ~15;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int t = 0; t < nt; t++) {
        int s = t * chunk;
        int e = s + chunk < len ? s + chunk : len;
        if (s >= e)
            continue;
        if (by_rows) {
            /* rows s..e of op(A): A + s*lda, or columns s.. of stored A^T */
            const float *a = ta ? A + s : A + (long)s * lda;
            cblas_sgemm(CblasRowMajor, opa, opb, e - s, N, K, alpha, a, lda, B, ldb, beta,
                        C + (long)s * ldc, ldc);
        } else {
            /* columns s..e of op(B): B + s, or rows s.. of stored B^T */
            const float *b = tb ? B + (long)s * ldb : B + s;
            cblas_sgemm(CblasRowMajor, opa, opb, M, e - s, K, alpha, A, lda, b, ldb, beta,
                        C + s, ldc);
        }
    }
}
