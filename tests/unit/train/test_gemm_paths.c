/* test_gemm_paths.c - every CPU path's matrix products against a plain
 * fp32 reference, their tolerances, and their determinism. A path this CPU
 * lacks is skipped with a line that says so. */
#include <math.h>
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "train/kernels/cpu_path.h"
#include "train/kernels/gemm.h"
#include "train/kernels/nf4.h"
#include "train/kernels/onednn.h"

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

struct shape {
    int M, N, K, ta, tb;
    float alpha, beta;
};

/* Edges in every direction, both transposes, K over one block, beta 0/1/½. */
static const struct shape shapes[] = {
    {1, 1, 1, 0, 0, 1.0f, 0.0f},       {7, 5, 3, 0, 1, 1.0f, 0.0f},
    {8, 32, 256, 0, 1, 1.0f, 0.0f},    {64, 64, 64, 0, 1, 0.125f, 0.0f},
    {64, 64, 64, 0, 0, 1.0f, 1.0f},    {64, 64, 64, 1, 0, 1.0f, 1.0f},
    {33, 97, 515, 0, 1, 1.0f, 0.5f},   {256, 768, 768, 0, 1, 1.0f, 0.0f},
    {256, 768, 300, 0, 0, 1.0f, 1.0f}, {300, 70, 256, 1, 0, 2.0f, 1.0f},
    {129, 600, 1031, 1, 1, 1.0f, 0.0f}, {17, 1100, 40, 0, 1, -1.0f, 0.5f},
};

/* ref = alpha op(A) op(B) + beta C0 in double; bound = |alpha| sum |a||b|. */
static void reference(const struct shape *s, const float *A, const float *B, const float *C0,
                      double *ref, double *bound)
{
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    for (int i = 0; i < s->M; i++)
        for (int j = 0; j < s->N; j++) {
            double acc = 0, mag = 0;
            for (int k = 0; k < s->K; k++) {
                double a = s->ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = s->tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                acc += a * b;
                mag += fabs(a * b);
            }
            ref[(size_t)i * s->N + j] = s->alpha * acc + s->beta * C0[(size_t)i * s->N + j];
            bound[(size_t)i * s->N + j] = fabs(s->alpha) * mag + fabs(s->beta * C0[(size_t)i * s->N + j]);
        }
}

/* Runs every shape on the current path (bf16: gemm_bf16 with B as bf16 and
 * as fp32) and checks |got - ref| <= tol * bound + 1e-30. */
static void check_shapes(int bf16, int b_as_f32, double tol)
{
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const struct shape *s = &shapes[t];
        size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4), *C0 = malloc(nc * 4);
        uint16_t *Bh = malloc(nb * 2);
        double *ref = malloc(nc * 8), *bound = malloc(nc * 8);
        uint64_t seed = 42 + t;
        for (size_t i = 0; i < na; i++)
            A[i] = frand(&seed);
        for (size_t i = 0; i < nb; i++) {
            B[i] = frand(&seed);
            Bh[i] = to_bf16(B[i]);
            if (bf16 && !b_as_f32)
                B[i] = from_bf16(Bh[i]); /* the reference sees the stored weight */
        }
        for (size_t i = 0; i < nc; i++)
            C0[i] = C[i] = frand(&seed);
        reference(s, A, B, C0, ref, bound);
        int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
        if (!bf16)
            gemm(s->ta, s->tb, s->M, s->N, s->K, s->alpha, A, lda, B, ldb, s->beta, C, s->N);
        else
            gemm_bf16(s->ta, s->tb, s->M, s->N, s->K, s->alpha, A, lda, b_as_f32 ? NULL : Bh,
                      b_as_f32 ? B : NULL, ldb, s->beta, C, s->N);
        double worst = 0;
        for (size_t i = 0; i < nc; i++) {
            double e = fabs(C[i] - ref[i]) / (bound[i] + 1e-30);
            if (e > worst)
                worst = e;
        }
        if (worst > tol)
            fail_msg("path %s shape %dx%dx%d ta%d tb%d: error %.3g of sum|ab| (limit %.3g)",
                     cpu_path_name(cpu_path_current()), s->M, s->N, s->K, s->ta, s->tb, worst,
                     tol);
        free(A), free(B), free(C), free(C0), free(Bh), free(ref), free(bound);
    }
}

/* Two runs, and on the own kernels a run on one thread, give the same bits. */
static void check_bits(int bf16)
{
    int M = 130, N = 777, K = 600;
    float *A = malloc((size_t)M * K * 4), *B = malloc((size_t)N * K * 4);
    float *C1 = malloc((size_t)M * N * 4), *C2 = malloc((size_t)M * N * 4);
    float *C3 = malloc((size_t)M * N * 4);
    uint64_t seed = 7;
    for (int i = 0; i < M * K; i++)
        A[i] = frand(&seed);
    for (int i = 0; i < N * K; i++)
        B[i] = frand(&seed);
    int threads = omp_get_max_threads();
    for (int run = 0; run < 3; run++) {
        float *C = run == 0 ? C1 : run == 1 ? C2 : C3;
        gemm_set_threads(run == 2 ? 1 : 2);
        if (bf16)
            gemm_bf16(0, 1, M, N, K, 1.0f, A, K, NULL, B, K, 0.0f, C, N);
        else
            gemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
    }
    gemm_set_threads(threads);
    assert_memory_equal(C1, C2, (size_t)M * N * 4);
    enum cpu_path path = cpu_path_current();
    if (path == CPU_PATH_AVX512 || path == CPU_PATH_AVX512BF16) /* own kernels: any cut */
        assert_memory_equal(C1, C3, (size_t)M * N * 4);
    free(A), free(B), free(C1), free(C2), free(C3);
}

static int on_path(enum cpu_path p)
{
    char why[256];
    if (p == CPU_PATH_ONEDNN && cpu_path_supported(CPU_PATH_AVX512BF16) &&
        !onednn_available(why, sizeof why)) {
        printf("path onednn: skipped, %s\n", why);
        return 0;
    }
    if (!cpu_path_supported(p)) {
        printf("path %s: skipped, this CPU lacks it (it has: %s)\n", cpu_path_name(p),
               cpu_path_flags());
        return 0;
    }
    cpu_path_set(p);
    printf("path %s: running (CPU flags: %s)\n", cpu_path_name(p), cpu_path_flags());
    return 1;
}

static void test_avx2(void **state)
{
    (void)state;
    if (!on_path(CPU_PATH_AVX2))
        skip();
    check_shapes(0, 0, 1e-5);
    check_bits(0);
}

static void test_avx512(void **state)
{
    (void)state;
    if (!on_path(CPU_PATH_AVX512))
        skip();
    check_shapes(0, 0, 1e-5);
    check_bits(0);
}

static void test_avx512bf16(void **state)
{
    (void)state;
    if (!on_path(CPU_PATH_AVX512BF16))
        skip();
    check_shapes(0, 0, 1e-5);   /* fp32 products stay fp32 */
    check_shapes(1, 0, 1.0 / 128); /* bf16 weight: A rounds to bf16 */
    check_shapes(1, 1, 1.0 / 64);  /* fp32 weight rounded too */
    check_bits(1);
}

/* The onednn path: the bf16 tolerances, the same bits run to run, and
 * the products that should reach oneDNN do (its implementation is named
 * after one). */
static void test_onednn(void **state)
{
    (void)state;
    if (!on_path(CPU_PATH_ONEDNN))
        skip();
    printf("onednn: %s\n", cpu_path_detail());
    check_shapes(0, 0, 1e-5);      /* fp32 products: alallo's kernels */
    check_shapes(1, 0, 1.0 / 128); /* bf16 weight */
    check_shapes(1, 1, 1.0 / 64);  /* fp32 weight rounded too */
    check_bits(1);
    assert_true(onednn_last_impl()[0] != '\0');
    printf("onednn ran its products on %s\n", onednn_last_impl());
    /* tb = 0 (an input's gradient, dy W) and op(A) = A^T, twice each: the
     * same bits */
    static const struct shape bs[] = {{256, 768, 300, 0, 0, 1.0f, 1.0f},
                                      {300, 70, 256, 1, 0, 2.0f, 1.0f}};
    for (size_t si = 0; si < 2; si++) {
        const struct shape *s = &bs[si];
        size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        float *A = malloc(na * 4), *C1 = malloc(nc * 4), *C2 = malloc(nc * 4);
        uint16_t *Bh = malloc(nb * 2);
        uint64_t seed = 5 + si;
        for (size_t i = 0; i < na; i++)
            A[i] = frand(&seed);
        for (size_t i = 0; i < nb; i++)
            Bh[i] = to_bf16(frand(&seed));
        for (size_t i = 0; i < nc; i++)
            C1[i] = C2[i] = frand(&seed);
        int lda = s->ta ? s->M : s->K;
        gemm_bf16(s->ta, 0, s->M, s->N, s->K, s->alpha, A, lda, Bh, NULL, s->N, s->beta, C1,
                  s->N);
        gemm_bf16(s->ta, 0, s->M, s->N, s->K, s->alpha, A, lda, Bh, NULL, s->N, s->beta, C2,
                  s->N);
        assert_memory_equal(C1, C2, nc * 4);
        free(A), free(C1), free(C2), free(Bh);
    }
}

/* An NF4 B on the onednn path, decoded a strip at a time (several strips
 * in the larger shapes, as bands of C's columns or of K): within 1e-5 of
 * sum|ab| of the same product on the weight decoded first, the same bits
 * run to run. */
static void test_onednn_nf4(void **state)
{
    (void)state;
    if (!on_path(CPU_PATH_ONEDNN))
        skip();
    static const struct shape qs[] = {
        {256, 768, 768, 0, 1, 1.0f, 0.0f}, {256, 768, 2048, 0, 0, 1.0f, 1.0f},
        {33, 97, 515, 0, 1, 1.0f, 0.5f},   {70, 300, 130, 0, 0, 1.0f, 1.0f},
        {64, 1500, 1400, 0, 1, 1.0f, 0.0f}, {64, 1400, 1500, 0, 0, 0.5f, 1.0f},
    };
    for (size_t si = 0; si < sizeof qs / sizeof qs[0]; si++) {
        const struct shape *s = &qs[si];
        int ldb = s->tb ? s->K : s->N, rows = s->tb ? s->N : s->K;
        size_t base = si % 2 ? 96 : 0, n = base + (size_t)rows * ldb;
        size_t na = (size_t)s->M * s->K, nc = (size_t)s->M * s->N;
        float *A = malloc(na * 4), *W = malloc(n * 4), *B = malloc((n - base) * 4);
        float *C0 = malloc(nc * 4), *C1 = malloc(nc * 4), *C2 = malloc(nc * 4);
        float *Cd = malloc(nc * 4);
        double *ref = malloc(nc * 8), *bound = malloc(nc * 8);
        uint16_t *Bh = malloc(n * 2);
        uint64_t seed = 17 + si;
        for (size_t i = 0; i < na; i++)
            A[i] = frand(&seed);
        for (size_t i = 0; i < n; i++)
            W[i] = frand(&seed) * 0.05f;
        for (size_t i = 0; i < nc; i++)
            C0[i] = frand(&seed);
        struct nf4_tensor *t = nf4_quantize(W, n);
        assert_non_null(t);
        nf4_dequantize_bf16(t, base, n - base, Bh);
        for (size_t i = 0; i < n - base; i++)
            B[i] = from_bf16(Bh[i]);
        reference(s, A, B, C0, ref, bound);
        struct gemm_nf4 q = {t, base};
        memcpy(Cd, C0, nc * 4);
        gemm_bf16(0, s->tb, s->M, s->N, s->K, s->alpha, A, s->K, Bh, NULL, ldb, s->beta, Cd,
                  s->N);
        for (int run = 0; run < 2; run++) {
            float *C = run ? C2 : C1;
            memcpy(C, C0, nc * 4);
            gemm_bf16_nf4(0, s->tb, s->M, s->N, s->K, s->alpha, A, s->K, &q, ldb, s->beta, C,
                          s->N);
        }
        assert_memory_equal(C1, C2, nc * 4);
        double worst = 0;
        for (size_t i = 0; i < nc; i++) {
            double e = fabs((double)C1[i] - Cd[i]) / (bound[i] + 1e-30);
            worst = e > worst ? e : worst;
        }
        printf("onednn nf4 B %dx%dx%d tb=%d: %.2g of sum|ab| from the decoded weight's\n",
               s->M, s->N, s->K, s->tb, worst);
        assert_true(worst <= 1e-5);
        nf4_free(t);
        free(A), free(W), free(B), free(C0), free(C1), free(C2), free(Cd), free(ref);
        free(bound), free(Bh);
    }
}

/* Where the CPU has AMX, the onednn path runs its products on the tiles,
 * a weight's gradient too. Skipped, with a line, on a CPU without. */
static void test_onednn_amx(void **state)
{
    (void)state;
    if (!cpu_path_has_amx()) {
        printf("onednn on AMX: skipped, this CPU has no AMX (it has: %s)\n", cpu_path_flags());
        skip();
    }
    if (!cpu_path_amx_granted()) {
        printf("onednn on AMX: skipped, this CPU has AMX but the kernel does not grant its "
               "tile state to a process (Linux 5.16 or later does)\n");
        skip();
    }
    if (!on_path(CPU_PATH_ONEDNN))
        fail_msg("this CPU has AMX but the onednn path is not offered");
    printf("onednn: %s\n", cpu_path_detail());
    assert_true(onednn_uses_amx());
    int M = 256, N = 768, K = 768;
    float *A = malloc((size_t)M * K * 4), *C = malloc((size_t)M * N * 4);
    float *W = malloc((size_t)K * N * 4);
    uint16_t *Bh = malloc((size_t)N * K * 2);
    uint64_t seed = 3;
    for (int i = 0; i < M * K; i++)
        A[i] = frand(&seed);
    for (int i = 0; i < N * K; i++)
        Bh[i] = to_bf16(frand(&seed));
    gemm_bf16(0, 1, M, N, K, 1.0f, A, K, Bh, NULL, K, 0.0f, C, N);
    printf("onednn forward on %s\n", onednn_last_impl());
    assert_non_null(strstr(onednn_last_impl(), "amx"));
    /* a weight's gradient dW (N,K) = dy^T x, with dy = C and x = A */
    gemm_bf16(1, 0, N, K, M, 1.0f, C, N, NULL, A, K, 0.0f, W, K);
    printf("onednn weight gradient on %s\n", onednn_last_impl());
    assert_non_null(strstr(onednn_last_impl(), "amx"));
    free(A), free(C), free(W), free(Bh);
}

/* bf16 products with op(A) = A^T (a weight's gradient dy^T x) give the
 * same bits as with A transposed first: the transposed pack rounds the
 * same values and the sums keep their order. Edges in M, odd K, fp32 and
 * bf16 B, one and two threads. */
static void test_bf16_transposed_a_matches(void **state)
{
    (void)state;
    if (!on_path(CPU_PATH_AVX512BF16))
        skip();
    static const struct shape ts[] = {
        {768, 768, 256, 1, 0, 1.0f, 0.0f}, {300, 70, 257, 1, 0, 2.0f, 1.0f},
        {13, 40, 1031, 1, 1, 1.0f, 0.5f},  {8, 32, 1, 1, 0, 1.0f, 0.0f},
    };
    int threads = omp_get_max_threads();
    for (size_t si = 0; si < sizeof ts / sizeof ts[0]; si++) {
        const struct shape *s = &ts[si];
        size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        float *At = malloc(na * 4), *A = malloc(na * 4), *B = malloc(nb * 4);
        float *C0 = malloc(nc * 4), *C1 = malloc(nc * 4), *C2 = malloc(nc * 4);
        uint16_t *Bh = malloc(nb * 2);
        uint64_t seed = 91 + si;
        for (int k = 0; k < s->K; k++) /* At (K,M) stored; A (M,K) its transpose */
            for (int i = 0; i < s->M; i++)
                A[(size_t)i * s->K + k] = At[(size_t)k * s->M + i] = frand(&seed);
        for (size_t i = 0; i < nb; i++)
            Bh[i] = to_bf16(B[i] = frand(&seed));
        for (size_t i = 0; i < nc; i++)
            C0[i] = frand(&seed);
        int ldb = s->tb ? s->K : s->N;
        for (int nt = 1; nt <= 2; nt++)
            for (int f32 = 0; f32 <= 1; f32++) {
                gemm_set_threads(nt);
                memcpy(C1, C0, nc * 4);
                memcpy(C2, C0, nc * 4);
                gemm_bf16(1, s->tb, s->M, s->N, s->K, s->alpha, At, s->M, f32 ? NULL : Bh,
                          f32 ? B : NULL, ldb, s->beta, C1, s->N);
                gemm_bf16(0, s->tb, s->M, s->N, s->K, s->alpha, A, s->K, f32 ? NULL : Bh,
                          f32 ? B : NULL, ldb, s->beta, C2, s->N);
                assert_memory_equal(C1, C2, nc * 4);
            }
        printf("bf16 A^T %dx%dx%d tb=%d: same bits as A transposed first\n", s->M, s->N, s->K,
               s->tb);
        free(At), free(A), free(B), free(C0), free(C1), free(C2), free(Bh);
    }
    gemm_set_threads(threads);
}

/* An NF4 B decoded as it is packed gives the same bits as decoding it all
 * first: both transposes, edges, a weight that starts inside the tensor
 * (base), rows that do not start on a block, one and two threads. */
static void test_nf4_b_matches_decoded(void **state)
{
    (void)state;
    if (!on_path(CPU_PATH_AVX512BF16))
        skip();
    static const struct shape qs[] = {
        {256, 768, 768, 0, 1, 1.0f, 0.0f},  {256, 768, 2048, 0, 0, 1.0f, 1.0f},
        {33, 97, 515, 0, 1, 1.0f, 0.5f},    {70, 300, 130, 0, 0, 1.0f, 1.0f},
        {8, 1100, 40, 0, 1, -1.0f, 0.0f},   {600, 64, 96, 0, 0, 0.5f, 0.0f},
    };
    int threads = omp_get_max_threads();
    for (size_t si = 0; si < sizeof qs / sizeof qs[0]; si++) {
        const struct shape *s = &qs[si];
        int ldb = s->tb ? s->K : s->N, rows = s->tb ? s->N : s->K;
        size_t base = si % 2 ? 96 : 0, n = base + (size_t)rows * ldb;
        float *A = malloc((size_t)s->M * s->K * 4), *W = malloc(n * 4);
        float *C1 = malloc((size_t)s->M * s->N * 4), *C2 = malloc((size_t)s->M * s->N * 4);
        uint16_t *Bh = malloc(n * 2);
        uint64_t seed = 11 + si;
        for (size_t i = 0; i < (size_t)s->M * s->K; i++)
            A[i] = frand(&seed);
        for (size_t i = 0; i < n; i++)
            W[i] = frand(&seed) * 0.05f;
        for (size_t i = 0; i < (size_t)s->M * s->N; i++)
            C1[i] = C2[i] = frand(&seed);
        struct nf4_tensor *t = nf4_quantize(W, n);
        assert_non_null(t);
        nf4_dequantize_bf16(t, base, n - base, Bh);
        struct gemm_nf4 q = {t, base};
        for (int nt = 1; nt <= 2; nt++) {
            gemm_set_threads(nt);
            for (size_t i = 0; i < (size_t)s->M * s->N; i++)
                C2[i] = C1[i];
            float *Cd = malloc((size_t)s->M * s->N * 4);
            memcpy(Cd, C1, (size_t)s->M * s->N * 4);
            gemm_bf16(0, s->tb, s->M, s->N, s->K, s->alpha, A, s->K, Bh, NULL, ldb, s->beta, Cd,
                      s->N);
            gemm_bf16_nf4(0, s->tb, s->M, s->N, s->K, s->alpha, A, s->K, &q, ldb, s->beta, C2,
                          s->N);
            assert_memory_equal(Cd, C2, (size_t)s->M * s->N * 4);
            free(Cd);
        }
        printf("nf4 B %dx%dx%d tb=%d base %zu: same bits as decoded first\n", s->M, s->N, s->K,
               s->tb, base);
        nf4_free(t);
        free(A), free(W), free(C1), free(C2), free(Bh);
    }
    gemm_set_threads(threads);
}

/* A resume's log line: another path, the same path run by another isa of
 * oneDNN's, another thread count, or nothing to say. */
static void test_resume_note(void **state)
{
    (void)state;
    char line[320];
    cpu_path_set(CPU_PATH_AVX2);
    cpu_path_resume_note("avx512", NULL, 2, 2, line, sizeof line);
    assert_non_null(strstr(line, "written on the avx512 path and this attempt runs on the avx2"));
    cpu_path_resume_note("avx2", NULL, 2, 4, line, sizeof line);
    assert_string_equal(line, "the checkpoint was written with 2 threads and this attempt runs 4");
    cpu_path_resume_note("avx2", NULL, 2, 2, line, sizeof line);
    assert_string_equal(line, "");
    cpu_path_resume_note(NULL, NULL, 0, 2, line, sizeof line);
    assert_string_equal(line, "");
    if (!on_path(CPU_PATH_ONEDNN))
        skip();
    cpu_path_resume_note("onednn", "oneDNN 2.6.3, isa avx512_core_amx", 2, 2, line, sizeof line);
    printf("%s\n", line);
    if (onednn_uses_amx())
        assert_string_equal(line, "");
    else
        assert_non_null(strstr(line, "with oneDNN 2.6.3, isa avx512_core_amx and this attempt "
                                     "runs it with oneDNN "));
    cpu_path_resume_note("onednn", cpu_path_detail(), 2, 2, line, sizeof line);
    assert_string_equal(line, "");
}

static void test_names(void **state)
{
    (void)state;
    char err[160];
    assert_int_equal(cpu_path_parse("avx512bf16"), CPU_PATH_AVX512BF16);
    assert_int_equal(cpu_path_parse("onednn"), CPU_PATH_ONEDNN);
    assert_int_equal(cpu_path_parse("sse"), -1);
    assert_int_equal(cpu_path_init("sse", err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown CPU path"));
    assert_int_equal(cpu_path_init("avx2", err, sizeof err), 0);
    assert_int_equal(cpu_path_current(), CPU_PATH_AVX2);
    assert_true(cpu_path_supported(cpu_path_best()));
}

int main(void)
{
    gemm_set_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_resume_note),
        cmocka_unit_test(test_avx2),
        cmocka_unit_test(test_avx512),
        cmocka_unit_test(test_avx512bf16),
        cmocka_unit_test(test_onednn),
        cmocka_unit_test(test_onednn_nf4),
        cmocka_unit_test(test_onednn_amx),
        cmocka_unit_test(test_nf4_b_matches_decoded),
        cmocka_unit_test(test_bf16_transposed_a_matches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
