/* test_nf4.c - NF4 quantization: the levels, the round-trip error bound,
 * nibble order, double-quantized scales, partial ranges, and the gradient
 * through a frozen NF4 linear layer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_ops_gradcheck.h"
#include "train/kernels/cpu_path.h"
#include "train/model/linear.h"
#include "train/kernels/nf4.h"

static void levels_and_nearest(void **state)
{
    (void)state;
    assert_float_equal(nf4_levels[0], -1.0f, 0);
    assert_float_equal(nf4_levels[7], 0.0f, 0);
    assert_float_equal(nf4_levels[15], 1.0f, 0);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(nf4_nearest(nf4_levels[i]), i);
        if (i < 15)
            assert_true(nf4_levels[i] < nf4_levels[i + 1]);
    }
    assert_int_equal(nf4_nearest(-5.0f), 0);
    assert_int_equal(nf4_nearest(5.0f), 15);
    assert_int_equal(nf4_nearest(0.03f), 7);
    assert_int_equal(nf4_nearest(0.05f), 8);
}

static void exact_levels_round_trip(void **state)
{
    (void)state;
    /* Each block holds the 16 levels times a per-block scale; with every
     * block of one group sharing the scale, the scales are exact and so is
     * every value. Element 2j sits in the high nibble. */
    enum { n = 1024 };
    float x[n], y[n];
    for (int i = 0; i < n; i++)
        x[i] = 0.5f * nf4_levels[i % 16];
    struct nf4_tensor *t = nf4_quantize(x, n);
    assert_non_null(t);
    nf4_dequantize_range(t, 0, n, y);
    for (int i = 0; i < n; i++)
        assert_float_equal(y[i], x[i], 1e-7);
    assert_int_equal(t->codes[0] >> 4, 0);
    assert_int_equal(t->codes[0] & 15, 1);
    nf4_free(t);
}

static void random_round_trip_error_bound(void **state)
{
    (void)state;
    /* Normal weights in blocks of different scales, an odd length (tail
     * block) and more than one scale group. */
    size_t n = 3 * NF4_GROUP_VALUES + 777;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    assert_non_null(x);
    assert_non_null(y);
    struct rng r;
    rng_seed(&r, 21);
    for (size_t i = 0; i < n; i++)
        x[i] = rng_normal(&r) * (0.01f + 0.04f * (float)((i / NF4_BLOCK) % 5));
    struct nf4_tensor *t = nf4_quantize(x, n);
    assert_non_null(t);
    nf4_dequantize_range(t, 0, n, y);
    double se = 0.0, sx = 0.0;
    for (size_t b = 0; b < t->n_blocks; b++) {
        size_t s = b * NF4_BLOCK, e = s + NF4_BLOCK < n ? s + NF4_BLOCK : n;
        float amax = 0.0f;
        for (size_t i = s; i < e; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        float scale = nf4_block_scale(t, b);
        /* the double-quantized scale is off by at most half an int8 step
         * of its group's range */
        float serr = fabsf(scale - amax);
        assert_true(serr <= t->group_absmax[b / NF4_SCALE_GROUP] / 254.0f * 1.0001f + 1e-7f);
        for (size_t i = s; i < e; i++) {
            /* the largest gap between levels is -0.6961928 - (-1), halved,
             * plus what the scale's own rounding adds */
            assert_true(fabsf(y[i] - x[i]) <= 0.1520f * scale + serr + 1e-6f);
            se += (double)(y[i] - x[i]) * (y[i] - x[i]);
            sx += (double)x[i] * x[i];
        }
    }
    /* for normal data NF4 keeps the relative RMS error near 10% */
    assert_true(sqrt(se / sx) < 0.12);
    /* storage: about 4.13 bits per value */
    double bits = 8.0 * (double)(nf4_bytes(t) - sizeof *t) / (double)n;
    assert_true(bits > 4.12 && bits < 4.14);
    /* a partial range starting mid-byte matches the whole */
    float part[100];
    nf4_dequantize_range(t, 12345, 100, part);
    assert_memory_equal(part, y + 12345, sizeof part);
    float *p2 = malloc(n * sizeof(float));
    nf4_dequantize_parallel(t, 0, n, p2);
    assert_memory_equal(p2, y, n * sizeof(float));
    free(p2);
    /* encode in two pieces equals encode at once */
    struct nf4_tensor *t2 = nf4_create(n);
    assert_int_equal(nf4_encode(t2, 0, x, 2 * NF4_GROUP_VALUES), 0);
    assert_int_equal(nf4_encode(t2, 2 * NF4_GROUP_VALUES, x + 2 * NF4_GROUP_VALUES,
                                n - 2 * NF4_GROUP_VALUES), 0);
    assert_memory_equal(t2->codes, t->codes, (n + 1) / 2);
    assert_int_equal(nf4_encode(t2, 100, x, 64), -1);
    nf4_free(t2);
    nf4_free(t);
    free(x);
    free(y);
}

enum { N = 3, IN = 64, OUT = 8 };

struct ctx {
    struct linear *l;
    struct linear_scratch *s;
    float *x, *y, *dyw;
};

static double loss(void *p)
{
    struct ctx *c = p;
    linear_forward(c->l, c->y, c->x, N, NULL, c->s);
    return gc_dot(c->dyw, c->y, N * OUT);
}

static void nf4_linear_gradient(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 22);
    float w[OUT * IN], x[N * IN], y[N * OUT], dyw[N * OUT], dx[N * IN] = {0};
    static float deq[OUT * IN], tmp[N];
    gc_fill(w, OUT * IN, &r, 0.1f);
    gc_fill(x, N * IN, &r, 1.0f);
    gc_fill(dyw, N * OUT, &r, 1.0f);
    struct nf4_tensor *t = nf4_quantize(w, OUT * IN);
    struct linear l = {.in = IN, .out = OUT, .kind = WK_NF4, .wq = t};
    struct linear_scratch s = {.deq = deq, .deq_cap = OUT * IN, .tmp = tmp, .tmp_cap = N};
    struct ctx c = {&l, &s, x, y, dyw};
    loss(&c);
    linear_backward(&l, dx, dyw, x, NULL, N, &s);
    assert_int_equal(gc_check("nf4 dx", loss, &c, x, N * IN, dx, 64, 1e-2, 5e-4, 1e-2), 0);
    nf4_free(t);
}

/* Decoding (vectorized for whole blocks where the CPU can) gives exactly
 * level x block scale for every value, from any start and length. */
static void decode_matches_the_definition(void **state)
{
    (void)state;
    size_t n = 64 * 300 + 37;
    float *x = malloc(n * sizeof *x), *out = malloc(n * sizeof *out);
    assert_non_null(x);
    assert_non_null(out);
    uint64_t s = 5;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((int64_t)(s >> 33) - (1LL << 30)) / (float)(1LL << 30) * (1 + i % 7);
    }
    struct nf4_tensor *t = nf4_quantize(x, n);
    assert_non_null(t);
    const size_t starts[] = {0, 1, 63, 64, 65, 129, 64 * 17};
    for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++) {
        size_t start = starts[k], count = n - start - (k % 3) * 11;
        nf4_dequantize_range(t, start, count, out);
        for (size_t i = 0; i < count; i++) {
            size_t e = start + i;
            int code = e % 2 == 0 ? t->codes[e / 2] >> 4 : t->codes[e / 2] & 15;
            float want = nf4_levels[code] * nf4_block_scale(t, e / NF4_BLOCK);
            if (out[i] != want)
                fail_msg("value %zu (start %zu): %g, want %g", e, start, out[i], want);
        }
    }
    nf4_free(t);
    free(x);
    free(out);
}

/* The bf16 decoding is the fp32 one rounded to nearest even, from any
 * start and length (where the CPU has avx512bf16). */
static void decode_bf16_is_the_rounded_value(void **state)
{
    (void)state;
    if (!cpu_path_supported(CPU_PATH_AVX512BF16)) {
        printf("nf4 bf16 decoding: skipped, this CPU lacks avx512bf16 (it has: %s)\n",
               cpu_path_flags());
        skip();
    }
    size_t n = 64 * 300 + 37;
    float *x = malloc(n * sizeof *x), *f = malloc(n * sizeof *f);
    uint16_t *h = malloc(n * sizeof *h);
    assert_true(x && f && h);
    for (size_t i = 0; i < n; i++)
        x[i] = sinf((float)i * 0.37f) * (float)(1 + i % 5);
    struct nf4_tensor *t = nf4_quantize(x, n);
    assert_non_null(t);
    const size_t starts[] = {0, 1, 63, 64, 100, 64 * 70 + 5};
    for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++) {
        size_t start = starts[k], count = n - start - k * 3;
        nf4_dequantize_range(t, start, count, f);
        nf4_dequantize_bf16(t, start, count, h);
        for (size_t i = 0; i < count; i++)
            if (h[i] != linear_f32_to_bf16(f[i]))
                fail_msg("value %zu (start %zu): bf16 %04x, want %04x", start + i, start, h[i],
                         linear_f32_to_bf16(f[i]));
    }
    nf4_free(t);
    free(x);
    free(f);
    free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(levels_and_nearest),
        cmocka_unit_test(exact_levels_round_trip),
        cmocka_unit_test(random_round_trip_error_bound),
        cmocka_unit_test(nf4_linear_gradient),
        cmocka_unit_test(decode_matches_the_definition),
        cmocka_unit_test(decode_bf16_is_the_rounded_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
