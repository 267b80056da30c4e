/* cuda_gemm_args.c - the checks every GPU product makes on its arguments
 * before it runs (cuda_gemm.h), in one place for cuda_gemm.c and for the
 * emulator's stand-in (tests/gpu/emu/cuda_gemm_emu.cc), and a product's
 * note in a walk (cuda_walk.h). No CUDA in it. */
#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_gemm.h"
#include "train/cuda/cuda_walk.h"

int cuda_gemm_args(int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, float beta)
{
    /* The stored row-major shapes and their least leading dimensions. */
    int a_cols = ta ? M : K, b_cols = tb ? K : N;
    if (M < 0 || N < 0 || K < 0 || lda < (a_cols > 1 ? a_cols : 1) ||
        ldb < (b_cols > 1 ? b_cols : 1) || ldc < (N > 1 ? N : 1))
        return cuda_ctx_fail("bad GPU product: M %d, N %d, K %d (ta %d, tb %d) with leading "
                             "dimensions %d %d %d",
                             M, N, K, ta, tb, lda, ldb, ldc);
    if (M == 0 || N == 0)
        return CUDA_GEMM_NOTHING;
    if (K == 0) { /* C = beta C: only the two betas the trainer uses */
        if (beta == 1.0f)
            return CUDA_GEMM_NOTHING;
        if (beta != 0.0f)
            return cuda_ctx_fail("a GPU product with K 0 takes beta 0 or 1, not %g",
                                 (double)beta);
        return CUDA_GEMM_ZERO;
    }
    return CUDA_GEMM_RUN;
}

int cuda_gemm_walked(int kind, int ta, int tb, int M, int N, int K, float alpha, const void *A,
                     int lda, const void *B, int ldb, float beta, const void *Cin, const void *C,
                     int ldc)
{
    struct cuda_walk *w = cuda_ctx_walk();
    if (!w)
        return 0;
    struct {
        const void *ptrs[4];
        int dims[9];
        float scalars[2];
        int unused; /* 0: no padding (cuda_walk.h) */
    } item = {{A, B, Cin, C}, {kind, ta, tb, M, N, K, lda, ldb, ldc}, {alpha, beta}, 0};
    cuda_walk_note(w, CUDA_WALK_PRODUCT, &item, sizeof item);
    return 1;
}
