/* test_lora.c - the linear layer: trained fp32 weight with bias, frozen
 * bf16 base with a LoRA adapter, and the merged weight. Gradients by
 * finite differences; forward against a plain triple loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "test_ops_gradcheck.h"
#include "train/model/linear.h"

enum { N = 5, IN = 7, OUT = 6, R = 3 };

struct lin_ctx {
    struct linear *l;
    struct linear_scratch *s;
    float *x, *y, *xa, *dyw;
};

static double lin_loss(void *p)
{
    struct lin_ctx *c = p;
    linear_forward(c->l, c->y, c->x, N, c->xa, c->s);
    return gc_dot(c->dyw, c->y, N * OUT);
}

static float deq[IN * OUT * 16], tmp[N * R];

static void trained_weight_and_bias(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 11);
    float w[OUT * IN], b[OUT], x[N * IN], y[N * OUT], dyw[N * OUT];
    float dw[OUT * IN] = {0}, db[OUT] = {0}, dx[N * IN] = {0};
    gc_fill(w, OUT * IN, &r, 0.5f), gc_fill(b, OUT, &r, 0.5f);
    gc_fill(x, N * IN, &r, 1.0f), gc_fill(dyw, N * OUT, &r, 1.0f);
    struct linear l = {.in = IN, .out = OUT, .kind = WK_F32, .w = w, .dw = dw, .bias = b,
                       .dbias = db};
    struct linear_scratch s = {.deq = deq, .deq_cap = sizeof deq / 4, .tmp = tmp, .tmp_cap = sizeof tmp / 4};
    struct lin_ctx c = {&l, &s, x, y, NULL, dyw};
    lin_loss(&c);
    /* forward against the definition */
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) {
            double acc = b[o];
            for (int i = 0; i < IN; i++)
                acc += (double)x[n * IN + i] * w[o * IN + i];
            assert_float_equal(y[n * OUT + o], acc, 1e-5);
        }
    linear_backward(&l, dx, dyw, x, NULL, N, &s);
    assert_int_equal(gc_check("linear dx", lin_loss, &c, x, N * IN, dx, 35, 1e-2, 5e-4, 1e-2), 0);
    assert_int_equal(gc_check("linear dw", lin_loss, &c, w, OUT * IN, dw, 42, 1e-2, 5e-4, 1e-2), 0);
    assert_int_equal(gc_check("linear db", lin_loss, &c, b, OUT, db, 6, 1e-2, 5e-4, 1e-2), 0);
}

static void lora_on_frozen_bf16(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 12);
    float w32[OUT * IN], x[N * IN], y[N * OUT], dyw[N * OUT], xa[N * R];
    float la[R * IN], lb[OUT * R], dla[R * IN] = {0}, dlb[OUT * R] = {0}, dx[N * IN] = {0};
    uint16_t wb[OUT * IN];
    gc_fill(w32, OUT * IN, &r, 0.5f);
    for (int i = 0; i < OUT * IN; i++)
        wb[i] = linear_f32_to_bf16(w32[i]);
    gc_fill(x, N * IN, &r, 1.0f), gc_fill(dyw, N * OUT, &r, 1.0f);
    /* B non-zero here so that every gradient path is exercised */
    gc_fill(la, R * IN, &r, 0.5f), gc_fill(lb, OUT * R, &r, 0.5f);
    struct linear l = {.in = IN, .out = OUT, .kind = WK_BF16, .wb = wb, .r = R,
                       .scale = 2.0f, .la = la, .dla = dla, .lb = lb, .dlb = dlb};
    struct linear_scratch s = {.deq = deq, .deq_cap = sizeof deq / 4, .tmp = tmp, .tmp_cap = sizeof tmp / 4};
    struct lin_ctx c = {&l, &s, x, y, xa, dyw};
    lin_loss(&c);
    linear_backward(&l, dx, dyw, x, xa, N, &s);
    assert_int_equal(gc_check("lora dx", lin_loss, &c, x, N * IN, dx, 35, 1e-2, 5e-4, 1e-2), 0);
    assert_int_equal(gc_check("lora dA", lin_loss, &c, la, R * IN, dla, 21, 1e-2, 5e-4, 1e-2), 0);
    assert_int_equal(gc_check("lora dB", lin_loss, &c, lb, OUT * R, dlb, 18, 1e-2, 5e-4, 1e-2), 0);
    /* y equals x . merged^T */
    float merged[OUT * IN];
    linear_merged_weight(&l, merged);
    lin_loss(&c);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) {
            double acc = 0.0;
            for (int i = 0; i < IN; i++)
                acc += (double)x[n * IN + i] * merged[o * IN + i];
            assert_float_equal(y[n * OUT + o], acc, 1e-4);
        }
    /* merged = bf16(W) + scale * B A */
    double e = (double)linear_bf16_to_f32(wb[0]);
    for (int k = 0; k < R; k++)
        e += 2.0 * lb[0 * R + k] * la[k * IN + 0];
    assert_float_equal(merged[0], e, 1e-5);
}

/* LoRA dropout with its mask fixed (one seed): the forward pass is the
 * definition (W reads x, the adapter x * keep/(1-p)), every gradient
 * matches finite differences, the mask drops about p of the inputs, and
 * p = 0 computes exactly what no dropout does. */
static void lora_dropout_with_a_fixed_mask(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 13);
    float w[OUT * IN], x[N * IN], y[N * OUT], dyw[N * OUT], xa[N * R], drop[N * IN];
    float la[R * IN], lb[OUT * R], dla[R * IN] = {0}, dlb[OUT * R] = {0}, dx[N * IN] = {0};
    gc_fill(w, OUT * IN, &r, 0.5f);
    gc_fill(x, N * IN, &r, 1.0f), gc_fill(dyw, N * OUT, &r, 1.0f);
    gc_fill(la, R * IN, &r, 0.5f), gc_fill(lb, OUT * R, &r, 0.5f);
    struct linear l = {.in = IN, .out = OUT, .kind = WK_F32, .w = w, .r = R, .scale = 2.0f,
                       .la = la, .dla = dla, .lb = lb, .dlb = dlb};
    struct linear_scratch s = {.deq = deq, .deq_cap = sizeof deq / 4, .tmp = tmp,
                               .tmp_cap = sizeof tmp / 4, .drop = drop, .drop_cap = N * IN,
                               .dropout = {.p = 0.3f, .seed = 99}};
    struct lin_ctx c = {&l, &s, x, y, xa, dyw};
    lin_loss(&c);
    int dropped = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) {
            double acc = 0.0;
            for (int i = 0; i < IN; i++)
                acc += (double)x[n * IN + i] * w[o * IN + i];
            for (int k = 0; k < R; k++) {
                double xak = 0.0;
                for (int i = 0; i < IN; i++) {
                    float keep = linear_dropout_keep(&s.dropout, (size_t)n * IN + i);
                    assert_true(keep == 0.0f || keep == 1.0f / 0.7f);
                    xak += (double)x[n * IN + i] * keep * la[k * IN + i];
                }
                acc += 2.0 * xak * lb[o * R + k];
            }
            assert_float_equal(y[n * OUT + o], acc, 1e-4);
        }
    for (int e = 0; e < N * IN; e++)
        dropped += linear_dropout_keep(&s.dropout, (size_t)e) == 0.0f;
    assert_true(dropped > 0 && dropped < N * IN);
    linear_backward(&l, dx, dyw, x, xa, N, &s);
    assert_int_equal(gc_check("dropout dx", lin_loss, &c, x, N * IN, dx, 35, 1e-2, 5e-4, 1e-2), 0);
    assert_int_equal(gc_check("dropout dA", lin_loss, &c, la, R * IN, dla, 21, 1e-2, 5e-4, 1e-2), 0);
    assert_int_equal(gc_check("dropout dB", lin_loss, &c, lb, OUT * R, dlb, 18, 1e-2, 5e-4, 1e-2), 0);
    /* over many elements the share dropped is p */
    long n_drop = 0, total = 200000;
    for (long e = 0; e < total; e++)
        n_drop += linear_dropout_keep(&s.dropout, (size_t)e) == 0.0f;
    assert_float_equal((double)n_drop / total, 0.3, 0.01);
    /* p = 0: bit for bit what a scratch without dropout gives */
    float y0[N * OUT], y1[N * OUT], dx0[N * IN] = {0}, dx1[N * IN] = {0};
    s.dropout.p = 0.0f;
    linear_forward(&l, y0, x, N, xa, &s);
    linear_backward(&l, dx0, dyw, x, xa, N, &s);
    struct linear_scratch plain = {.deq = deq, .deq_cap = sizeof deq / 4, .tmp = tmp,
                                   .tmp_cap = sizeof tmp / 4};
    linear_forward(&l, y1, x, N, xa, &plain);
    linear_backward(&l, dx1, dyw, x, xa, N, &plain);
    assert_memory_equal(y0, y1, sizeof y0);
    assert_memory_equal(dx0, dx1, sizeof dx0);
}

static void chunked_dequant_matches_whole(void **state)
{
    (void)state;
    /* A scratch of two rows forces three chunks; results must not change. */
    struct rng r;
    rng_seed(&r, 13);
    float w32[OUT * IN], x[N * IN], y1[N * OUT], y2[N * OUT], dy[N * OUT];
    float dx1[N * IN] = {0}, dx2[N * IN] = {0};
    uint16_t wb[OUT * IN];
    gc_fill(w32, OUT * IN, &r, 0.5f);
    for (int i = 0; i < OUT * IN; i++)
        wb[i] = linear_f32_to_bf16(w32[i]);
    gc_fill(x, N * IN, &r, 1.0f), gc_fill(dy, N * OUT, &r, 1.0f);
    struct linear l = {.in = IN, .out = OUT, .kind = WK_BF16, .wb = wb};
    struct linear_scratch big = {.deq = deq, .deq_cap = sizeof deq / 4, .tmp = tmp, .tmp_cap = sizeof tmp / 4};
    struct linear_scratch small = {.deq = deq, .deq_cap = 2 * IN, .tmp = tmp, .tmp_cap = sizeof tmp / 4};
    linear_forward(&l, y1, x, N, NULL, &big);
    linear_forward(&l, y2, x, N, NULL, &small);
    for (int i = 0; i < N * OUT; i++)
        assert_float_equal(y1[i], y2[i], 1e-6);
    linear_backward(&l, dx1, dy, x, NULL, N, &big);
    linear_backward(&l, dx2, dy, x, NULL, N, &small);
    for (int i = 0; i < N * IN; i++)
        assert_float_equal(dx1[i], dx2[i], 1e-5);
}

static void bf16_rounding(void **state)
{
    (void)state;
    assert_int_equal(linear_f32_to_bf16(1.0f), 0x3f80);
    /* 1 + 2^-8 is halfway between bf16 neighbours 1 and 1+2^-7: rounds to even (1) */
    assert_int_equal(linear_f32_to_bf16(1.00390625f), 0x3f80);
    /* 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: rounds to even (0x3f82) */
    assert_int_equal(linear_f32_to_bf16(1.01171875f), 0x3f82);
    assert_float_equal(linear_bf16_to_f32(0xc000), -2.0f, 0);
    assert_true(isnan(linear_bf16_to_f32(linear_f32_to_bf16(NAN))));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(trained_weight_and_bias),
        cmocka_unit_test(lora_on_frozen_bf16),
        cmocka_unit_test(lora_dropout_with_a_fixed_mask),
        cmocka_unit_test(chunked_dequant_matches_whole),
        cmocka_unit_test(bf16_rounding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
