/* test_cuda_gemm.c - the GPU's products (cuda_gemm.h) against the CPU's
 * gemm (train/kernels/gemm.h) on the same inputs: every transpose, odd sizes,
 * leading dimensions wider than the rows, beta 0, 1 and 1/2, each output
 * type; the same bits twice; bad shapes refused with a reason.
 *
 * Tolerances. The bf16 inputs are rounded on the host, so the GPU and the
 * CPU multiply the same numbers exactly and differ only in the order of
 * their fp32 sums: within 1e-5 of bound = |alpha| sum_k |a||b| + |beta c|
 * (far below one bf16 step; a wrong transpose or layout is off by about
 * bound). A bf16 output adds its own rounding: half a bf16 step, 2^-8
 * relative. fp32 inputs (CUBLAS_COMPUTE_32F, no TF32) within 1e-5 of bound
 * as well: TF32 would round each input to 10 bits and miss it by ~1e-3.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/rng.h"
#include "gpu_test.h"
#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_gemm.h"
#include "train/kernels/gemm.h"
#include "train/model/linear.h"

/* OUT_BF16_ADD: cuda_gemm_bf16_out_add, D = alpha op(A) op(B) + R with R
 * (the shape's C) apart from D, which starts as zeros (beta taken as 1). */
enum out_kind { OUT_F32, OUT_BF16, IN_F32, OUT_BF16_ADD };

struct shape {
    int M, N, K, ta, tb, pad; /* pad: extra columns in every leading dimension */
    float alpha, beta;
};

static const struct shape shapes[] = {
    {1, 1, 1, 0, 0, 0, 1.0f, 0.0f},      {7, 5, 3, 0, 1, 0, 1.0f, 0.0f},
    {37, 53, 91, 0, 0, 3, 1.0f, 1.0f},   {37, 53, 91, 0, 1, 0, 0.5f, 0.5f},
    {37, 53, 91, 1, 0, 8, -1.0f, 0.0f},  {37, 53, 91, 1, 1, 1, 2.0f, 1.0f},
    {1, 129, 64, 0, 1, 0, 1.0f, 0.0f},   {129, 1, 64, 1, 0, 0, 1.0f, 1.0f},
    {256, 768, 768, 0, 1, 0, 1.0f, 0.0f}, {300, 70, 1031, 1, 0, 8, 1.0f, 1.0f},
    {64, 1024, 8192, 0, 1, 0, 0.125f, 0.0f},
};

/* Uniform in [-1, 1) from core/rng.h; bf16 as the trainer rounds it. */
static float frand(struct rng *r)
{
    return 2.0f * rng_uniform(r) - 1.0f;
}

#define to_bf16 linear_f32_to_bf16
#define from_bf16 linear_bf16_to_f32

/* Host and device copies of one product's operands. */
struct operands {
    int lda, ldb, ldc;
    size_t na, nb, nc;    /* elements, leading dimensions included */
    float *A, *B, *C0;    /* fp32 values (bf16-exact unless IN_F32) */
    uint16_t *Ah, *Bh, *Ch;
    void *dA, *dB, *dC;
};

static void operands_make(struct operands *o, const struct shape *s, enum out_kind kind,
                          uint64_t seed_n)
{
    struct rng r, *seed = &r;
    rng_seed(&r, seed_n);
    memset(o, 0, sizeof *o);
    o->lda = (s->ta ? s->M : s->K) + s->pad;
    o->ldb = (s->tb ? s->K : s->N) + s->pad;
    o->ldc = s->N + s->pad;
    o->na = (size_t)(s->ta ? s->K : s->M) * o->lda;
    o->nb = (size_t)(s->tb ? s->N : s->K) * o->ldb;
    o->nc = (size_t)s->M * o->ldc;
    o->A = malloc(o->na * 4);
    o->B = malloc(o->nb * 4);
    o->C0 = malloc(o->nc * 4);
    o->Ah = malloc(o->na * 2);
    o->Bh = malloc(o->nb * 2);
    o->Ch = malloc(o->nc * 2);
    assert_non_null(o->A && o->B && o->C0 && o->Ah && o->Bh && o->Ch);
    int bf = kind != IN_F32;
    for (size_t i = 0; i < o->na; i++) {
        o->Ah[i] = to_bf16(frand(seed));
        o->A[i] = bf ? from_bf16(o->Ah[i]) : frand(seed);
    }
    for (size_t i = 0; i < o->nb; i++) {
        o->Bh[i] = to_bf16(frand(seed));
        o->B[i] = bf ? from_bf16(o->Bh[i]) : frand(seed);
    }
    for (size_t i = 0; i < o->nc; i++) {
        o->Ch[i] = to_bf16(frand(seed));
        o->C0[i] = kind == OUT_BF16 || kind == OUT_BF16_ADD ? from_bf16(o->Ch[i]) : frand(seed);
    }
    size_t ein = kind == IN_F32 ? 4 : 2, eout = kind == OUT_BF16 || kind == OUT_BF16_ADD ? 2 : 4;
    o->dA = cuda_alloc(o->na * ein, 0);
    o->dB = cuda_alloc(o->nb * ein, 0);
    o->dC = cuda_alloc(o->nc * eout, 0);
    assert_non_null(o->dA);
    assert_non_null(o->dB);
    assert_non_null(o->dC);
    assert_int_equal(cuda_upload(o->dA, kind == IN_F32 ? (void *)o->A : (void *)o->Ah,
                                 o->na * ein), 0);
    assert_int_equal(cuda_upload(o->dB, kind == IN_F32 ? (void *)o->B : (void *)o->Bh,
                                 o->nb * ein), 0);
}

static void operands_free(struct operands *o)
{
    cuda_free(o->dA);
    cuda_free(o->dB);
    cuda_free(o->dC);
    free(o->A);
    free(o->B);
    free(o->C0);
    free(o->Ah);
    free(o->Bh);
    free(o->Ch);
}

/* Uploads C0, runs the GPU product, downloads C (as fp32) into out. */
static int run_gpu(const struct shape *s, enum out_kind kind, struct operands *o, float *out)
{
    int add = kind == OUT_BF16_ADD, b16 = kind == OUT_BF16 || add;
    size_t eout = b16 ? 2 : 4;
    assert_int_equal(cuda_upload(o->dC, b16 ? (void *)o->Ch : (void *)o->C0, o->nc * eout), 0);
    uint16_t *dD = NULL;
    if (add) { /* R is the uploaded C; D starts as zeros */
        dD = cuda_alloc(o->nc * 2, 1);
        assert_non_null(dD);
    }
    int rc = add ? cuda_gemm_bf16_out_add(s->ta, s->tb, s->M, s->N, s->K, s->alpha, o->dA,
                                          o->lda, o->dB, o->ldb, o->dC, dD, o->ldc)
             : kind == OUT_F32
                 ? cuda_gemm_bf16(s->ta, s->tb, s->M, s->N, s->K, s->alpha, o->dA, o->lda,
                                  o->dB, o->ldb, s->beta, o->dC, o->ldc)
             : kind == OUT_BF16
                 ? cuda_gemm_bf16_out(s->ta, s->tb, s->M, s->N, s->K, s->alpha, o->dA, o->lda,
                                      o->dB, o->ldb, s->beta, o->dC, o->ldc)
                 : cuda_gemm_f32(s->ta, s->tb, s->M, s->N, s->K, s->alpha, o->dA, o->lda,
                                 o->dB, o->ldb, s->beta, o->dC, o->ldc);
    if (rc == 0)
        rc = cuda_ctx_sync();
    if (rc) {
        fprintf(stderr, "GPU product failed: %s\n", cuda_ctx_error());
        return rc;
    }
    if (b16) {
        uint16_t *h = malloc(o->nc * 2);
        assert_non_null(h);
        assert_int_equal(cuda_download(h, add ? dD : o->dC, o->nc * 2), 0);
        for (size_t i = 0; i < o->nc; i++)
            out[i] = from_bf16(h[i]);
        free(h);
        cuda_free(dD);
        return 0;
    }
    return cuda_download(out, o->dC, o->nc * 4);
}

static void check_kind(enum out_kind kind)
{
    const char *names[] = {"bf16 -> fp32", "bf16 -> bf16", "fp32 -> fp32", "bf16 -> bf16 + R"};
    for (size_t n = 0; n < sizeof shapes / sizeof shapes[0]; n++) {
        const struct shape *s = &shapes[n];
        struct operands o;
        operands_make(&o, s, kind, 1000 + n);
        float *ref = malloc(o.nc * 4), *got = malloc(o.nc * 4), *again = malloc(o.nc * 4);
        assert_non_null(ref && got && again);
        float beta = kind == OUT_BF16_ADD ? 1.0f : s->beta;
        memcpy(ref, o.C0, o.nc * 4);
        gemm(s->ta, s->tb, s->M, s->N, s->K, s->alpha, o.A, o.lda, o.B, o.ldb, beta, ref, o.ldc);
        assert_int_equal(run_gpu(s, kind, &o, got), 0);
        assert_int_equal(run_gpu(s, kind, &o, again), 0);
        double worst = 0;
        for (int i = 0; i < s->M; i++)
            for (int j = 0; j < s->N; j++) {
                double bound = fabs((double)beta * o.C0[(size_t)i * o.ldc + j]);
                for (int k = 0; k < s->K; k++) {
                    double a = s->ta ? o.A[(size_t)k * o.lda + i] : o.A[(size_t)i * o.lda + k];
                    double b = s->tb ? o.B[(size_t)j * o.ldb + k] : o.B[(size_t)k * o.ldb + j];
                    bound += fabs((double)s->alpha * a * b);
                }
                size_t at = (size_t)i * o.ldc + j;
                double diff = fabs((double)got[at] - ref[at]);
                double tol = 1e-5 * bound + 1e-30;
                if (kind == OUT_BF16 || kind == OUT_BF16_ADD)
                    tol += fabs((double)ref[at]) / 256.0;
                if (diff / tol > worst)
                    worst = diff / tol;
                if (diff > tol) {
                    fprintf(stderr,
                            "%s %dx%dx%d ta %d tb %d: C[%d,%d] GPU %.9g, CPU %.9g (|diff| %.3g "
                            "> %.3g)\n",
                            names[kind], s->M, s->N, s->K, s->ta, s->tb, i, j, got[at], ref[at],
                            diff, tol);
                    fail();
                }
                /* The padding past N is the GPU's to leave alone. */
                if (j == s->N - 1)
                    for (int p = s->N; p < o.ldc; p++)
                        if (got[(size_t)i * o.ldc + p] !=
                            (kind == OUT_BF16_ADD ? 0.0f
                             : kind == OUT_BF16   ? from_bf16(o.Ch[(size_t)i * o.ldc + p])
                                                  : o.C0[(size_t)i * o.ldc + p])) {
                            fprintf(stderr, "%s: the product wrote past N in row %d\n",
                                    names[kind], i);
                            fail();
                        }
            }
        assert_memory_equal(got, again, o.nc * 4); /* same shape, same bits */
        printf("%s %dx%dx%d ta %d tb %d beta %g: worst |diff| %.2f of its tolerance\n",
               names[kind], s->M, s->N, s->K, s->ta, s->tb, (double)beta, worst);
        free(ref);
        free(got);
        free(again);
        operands_free(&o);
    }
}

static void test_bf16_to_f32(void **state)
{
    (void)state;
    check_kind(OUT_F32);
}

static void test_bf16_to_bf16(void **state)
{
    (void)state;
    check_kind(OUT_BF16);
}

static void test_f32_to_f32(void **state)
{
    (void)state;
    check_kind(IN_F32);
}

/* A residual added by the epilogue (change 1m): R read from apart from D,
 * which is written whole, its padding left. */
static void test_bf16_plus_residual(void **state)
{
    (void)state;
    check_kind(OUT_BF16_ADD);
}

/* K 0 is beta C (beta 0 clears C), M or N 0 does nothing, a leading
 * dimension below its rows is refused with a reason that names the shape. */
static void test_edges_and_refusals(void **state)
{
    (void)state;
    float host[6] = {1, 2, 3, 4, 5, 6};
    float *dC = cuda_alloc(sizeof host, 0);
    uint16_t *dA = cuda_alloc(64, 1), *dB = cuda_alloc(64, 1);
    assert_non_null(dC);
    assert_non_null(dA);
    assert_non_null(dB);
    assert_int_equal(cuda_upload(dC, host, sizeof host), 0);
    assert_int_equal(cuda_gemm_bf16(0, 0, 2, 3, 0, 1.0f, dA, 1, dB, 3, 1.0f, dC, 3), 0);
    float got[6];
    assert_int_equal(cuda_ctx_sync(), 0);
    assert_int_equal(cuda_download(got, dC, sizeof got), 0);
    assert_memory_equal(got, host, sizeof host);
    assert_int_equal(cuda_gemm_bf16(0, 0, 2, 3, 0, 1.0f, dA, 1, dB, 3, 0.0f, dC, 3), 0);
    assert_int_equal(cuda_ctx_sync(), 0);
    assert_int_equal(cuda_download(got, dC, sizeof got), 0);
    for (int i = 0; i < 6; i++)
        assert_true(got[i] == 0.0f);
    assert_int_equal(cuda_gemm_bf16(0, 0, 0, 3, 4, 1.0f, dA, 4, dB, 3, 0.0f, dC, 3), 0);
    assert_int_equal(cuda_gemm_bf16(0, 0, 2, 3, 4, 1.0f, dA, 3, dB, 3, 0.0f, dC, 3), -1);
    assert_non_null(strstr(cuda_ctx_error(), "bad GPU product"));
    assert_int_equal(cuda_gemm_bf16(0, 1, 2, 3, 4, 1.0f, dA, 4, dB, 3, 0.0f, dC, 3), -1);
    assert_int_equal(cuda_gemm_bf16(0, 0, 2, 3, 4, 1.0f, dA, 4, dB, 3, 0.0f, dC, 2), -1);
    assert_int_equal(cuda_gemm_bf16(0, 0, 2, 3, 0, 1.0f, dA, 1, dB, 3, 0.5f, dC, 3), -1);
    assert_non_null(strstr(cuda_ctx_error(), "beta"));
    cuda_free(dA);
    cuda_free(dB);
    cuda_free(dC);
}

int main(void)
{
    int rc = gpu_test_open("test_cuda_gemm");
    if (rc)
        return rc;
    gemm_set_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_to_f32),
        cmocka_unit_test(test_bf16_to_bf16),
        cmocka_unit_test(test_f32_to_f32),
        cmocka_unit_test(test_bf16_plus_residual),
        cmocka_unit_test(test_edges_and_refusals),
    };
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    cuda_ctx_close();
    return rc;
}
