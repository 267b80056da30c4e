/* cuda_gemm.c - row-major products through cuBLASLt (contract in
 * cuda_gemm.h).
 *
 * Row-major through a column-major library: a row-major (R,C) matrix is
 * the column-major (C,R) matrix with the same leading dimension, so row-
 * major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt
 * gets m = N, n = M, its "A" is our B and its "B" our A, with the same
 * transposes.
 *
 * One plan per product kind, transposes, sizes, leading dimensions and
 * pointer alignments: the matmul descriptor, the three layouts and the
 * algorithm cuBLASLt's heuristic chose, made at the first such product and
 * kept for the process. So a shape always runs the same algorithm (what
 * exact resume needs: docs/trainer.md, "GPU"); the heuristic is itself a
 * pure function of these, so a plan made again after the table filled up
 * is the same plan.
 */
#include <stdint.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_gemm.h"

enum kind { BF16_F32 = CUDA_GEMM_BF16_F32, BF16_BF16 = CUDA_GEMM_BF16_BF16,
            F32_F32 = CUDA_GEMM_F32_F32 };

static unsigned long calls[CUDA_GEMM_KINDS];

unsigned long cuda_gemm_calls(enum cuda_gemm_kind kind)
{
    return kind >= 0 && kind < CUDA_GEMM_KINDS ? calls[kind] : 0;
}

struct key {
    int kind, ta, tb, M, N, K, lda, ldb, ldc;
    unsigned align_a, align_b, align_c; /* bytes, powers of two up to 256 */
};

struct plan {
    struct key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (our B), B (our A), C */
    cublasLtMatmulAlgo_t algo;
};

/* A trainer has a few dozen shapes (each projection forward and both
 * backward products, LoRA's, the head's chunks); 512 is far above that. */
#define PLANS_MAX 512

static struct {
    void *lt; /* the handle the plans were made with */
    int n;
    struct plan plans[PLANS_MAX];
} cache;

static unsigned alignment(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    unsigned k = 1;
    while (k < 256 && !(a & k))
        k <<= 1;
    return k;
}

static void plan_destroy(struct plan *p)
{
    if (p->la)
        cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc)
        cublasLtMatrixLayoutDestroy(p->lc);
    if (p->op)
        cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

static int lt_fail(const char *what, cublasStatus_t s, const struct key *k)
{
    return cuda_ctx_fail("cuBLASLt %s failed for a %dx%dx%d product (ta %d, tb %d): %s", what,
                         k->M, k->N, k->K, k->ta, k->tb, cublasLtGetStatusString(s));
}

static int plan_make(struct plan *p, const struct key *k)
{
    memset(p, 0, sizeof *p);
    p->key = *k;
    cudaDataType_t in = k->kind == F32_F32 ? CUDA_R_32F : CUDA_R_16BF;
    cudaDataType_t out = k->kind == BF16_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasOperation_t opa = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A = our B */
    cublasOperation_t opb = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's B = our A */
    cublasStatus_t s = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    /* Column-major shapes as stored: our B is (N,K) col-major untransposed,
     * (K,N) when tb; our A is (K,M), or (M,K) when ta; C is (N,M). */
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->la, in, k->tb ? k->K : k->N, k->tb ? k->N : k->K,
                                       k->ldb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->lb, in, k->ta ? k->M : k->K, k->ta ? k->K : k->M,
                                       k->lda);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->lc, out, k->N, k->M, k->ldc);
    if (s != CUBLAS_STATUS_SUCCESS) {
        plan_destroy(p);
        return lt_fail("descriptor set-up", s, k);
    }
    cublasLtMatmulPreference_t pref = NULL;
    size_t ws_bytes = 0;
    (void)cuda_ctx_workspace(&ws_bytes);
    uint32_t al_a = k->align_b, al_b = k->align_a, al_c = k->align_c; /* swapped as above */
    const struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        const void *value;
        size_t size;
    } prefs[] = {
        {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c},
    };
    s = cublasLtMatmulPreferenceCreate(&pref);
    for (size_t i = 0; i < sizeof prefs / sizeof prefs[0] && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, prefs[i].attr, prefs[i].value,
                                                 prefs[i].size);
    cublasLtMatmulHeuristicResult_t best;
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)cuda_ctx_lt(), p->op, p->la, p->lb,
                                           p->lc, p->lc, pref, 1, &best, &found);
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found < 1) {
        plan_destroy(p);
        if (s == CUBLAS_STATUS_SUCCESS)
            return cuda_ctx_fail("cuBLASLt has no algorithm for a %dx%dx%d product (ta %d, tb "
                                 "%d, leading dimensions %d %d %d)",
                                 k->M, k->N, k->K, k->ta, k->tb, k->lda, k->ldb, k->ldc);
        return lt_fail("heuristic", s, k);
    }
    p->algo = best.algo;
    return 0;
}

/* The cached plan for k, made now if new; NULL with a reason. When the
 * table is full, *tmp is made and must be destroyed after the launch. */
static const struct plan *plan_get(const struct key *k, struct plan *tmp)
{
    void *lt = cuda_ctx_lt();
    if (cache.lt != lt) { /* a new context: the old plans belong to the old one */
        for (int i = 0; i < cache.n; i++)
            plan_destroy(&cache.plans[i]);
        cache.n = 0;
        cache.lt = lt;
    }
    for (int i = 0; i < cache.n; i++)
        if (memcmp(&cache.plans[i].key, k, sizeof *k) == 0)
            return &cache.plans[i];
    struct plan *p = cache.n < PLANS_MAX ? &cache.plans[cache.n] : tmp;
    if (plan_make(p, k) < 0)
        return NULL;
    if (p != tmp)
        cache.n++;
    return p;
}

/* C = alpha op(A) op(B) + beta Cin (Cin NULL: C itself). */
static int product(int kind, int ta, int tb, int M, int N, int K, float alpha, const void *A,
                   int lda, const void *B, int ldb, float beta, const void *Cin, void *C, int ldc)
{
    if (!cuda_ctx_lt())
        return cuda_ctx_fail("a GPU product was asked for with no GPU context open");
    int what = cuda_gemm_args(ta, tb, M, N, K, lda, ldb, ldc, beta);
    if (what < 0)
        return -1;
    if (cuda_gemm_walked(kind, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cin, C, ldc))
        return 0;
    calls[kind]++;
    size_t esize = kind == BF16_BF16 ? 2 : 4;
    if (what == CUDA_GEMM_NOTHING && Cin && Cin != C && M > 0 && N > 0) { /* K 0: C = Cin */
        cudaError_t e = cudaMemcpy2DAsync(C, (size_t)ldc * esize, Cin, (size_t)ldc * esize,
                                          (size_t)N * esize, (size_t)M, cudaMemcpyDeviceToDevice,
                                          (cudaStream_t)cuda_ctx_stream());
        return e == cudaSuccess ? 0 : cuda_ctx_fail("cudaMemcpy2DAsync failed: %s",
                                                    cudaGetErrorString(e));
    }
    if (what == CUDA_GEMM_NOTHING)
        return 0;
    if (what == CUDA_GEMM_ZERO) {
        cudaError_t e = cudaMemset2DAsync(C, (size_t)ldc * esize, 0, (size_t)N * esize,
                                          (size_t)M, (cudaStream_t)cuda_ctx_stream());
        return e == cudaSuccess ? 0 : cuda_ctx_fail("cudaMemset2DAsync failed: %s",
                                                    cudaGetErrorString(e));
    }
    struct key k;
    memset(&k, 0, sizeof k); /* the key is compared bytewise */
    k.kind = kind;
    k.ta = !!ta;
    k.tb = !!tb;
    k.M = M;
    k.N = N;
    k.K = K;
    k.lda = lda;
    k.ldb = ldb;
    k.ldc = ldc;
    k.align_a = alignment(A);
    k.align_b = alignment(B);
    k.align_c = alignment(C);
    if (Cin && alignment(Cin) < k.align_c) /* the plan promises both C's and D's */
        k.align_c = alignment(Cin);
    struct plan tmp;
    memset(&tmp, 0, sizeof tmp);
    const struct plan *p = plan_get(&k, &tmp);
    if (!p)
        return -1;
    size_t ws_bytes = 0;
    void *ws = cuda_ctx_workspace(&ws_bytes);
    cublasStatus_t s = cublasLtMatmul((cublasLtHandle_t)cuda_ctx_lt(), p->op, &alpha, B, p->la,
                                      A, p->lb, &beta, Cin ? Cin : C, p->lc, C, p->lc, &p->algo,
                                      ws, ws_bytes, (cudaStream_t)cuda_ctx_stream());
    if (p == &tmp)
        plan_destroy(&tmp);
    return s == CUBLAS_STATUS_SUCCESS ? 0 : lt_fail("matmul", s, &k);
}

int cuda_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                   int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc)
{
    return product(BF16_F32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, NULL, C, ldc);
}

int cuda_gemm_bf16_out(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                       int lda, const uint16_t *B, int ldb, float beta, uint16_t *C, int ldc)
{
    return product(BF16_BF16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, NULL, C, ldc);
}

int cuda_gemm_bf16_out_add(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                           int lda, const uint16_t *B, int ldb, const uint16_t *R, uint16_t *D,
                           int ldc)
{
    return product(BF16_BF16, ta, tb, M, N, K, alpha, A, lda, B, ldb, 1.0f, R, D, ldc);
}

int cuda_gemm_f32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc)
{
    return product(F32_F32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, NULL, C, ldc);
}
