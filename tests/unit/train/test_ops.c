/* test_ops.c - finite-difference checks of every decoder op's backward
 * pass (rmsnorm, rope, attention with GQA, swiglu, cross-entropy), plus
 * properties that a wrong forward would break. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "test_ops_gradcheck.h"
#include "train/model/ops.h"

#define H_STEP 1e-2
#define ATOL 5e-4
#define RTOL 2e-2

/* ---- rmsnorm */
struct rms_ctx {
    int N, C;
    float *x, *w, *y, *rstd, *dyw;
};

static double rms_loss(void *p)
{
    struct rms_ctx *c = p;
    ops_rmsnorm_forward(c->y, c->rstd, c->x, c->w, c->N, c->C, 1e-5f);
    return gc_dot(c->dyw, c->y, (size_t)c->N * c->C);
}

static void rmsnorm_gradients(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 1);
    struct rms_ctx c = {.N = 5, .C = 12};
    size_t n = (size_t)c.N * c.C;
    float x[60], w[12], y[60], rstd[5], dyw[60], dx[60] = {0}, dw[12] = {0};
    c.x = x, c.w = w, c.y = y, c.rstd = rstd, c.dyw = dyw;
    gc_fill(x, n, &r, 1.0f);
    gc_fill(w, 12, &r, 1.0f);
    gc_fill(dyw, n, &r, 1.0f);
    rms_loss(&c);
    ops_rmsnorm_backward(dx, dw, dyw, x, w, rstd, c.N, c.C);
    assert_int_equal(gc_check("rmsnorm dx", rms_loss, &c, x, n, dx, 60, H_STEP, ATOL, RTOL), 0);
    assert_int_equal(gc_check("rmsnorm dw", rms_loss, &c, w, 12, dw, 12, H_STEP, ATOL, RTOL), 0);
    /* forward: with w = 1 each row has mean square 1 (up to eps) */
    for (int i = 0; i < 12; i++)
        w[i] = 1.0f;
    rms_loss(&c);
    double ms = 0.0;
    for (int i = 0; i < 12; i++)
        ms += (double)y[i] * y[i];
    assert_true(fabs(ms / 12.0 - 1.0) < 1e-3);
}

/* ---- rope */
struct rope_ctx {
    int B, T, nh, hd;
    float *x, *y, *cs, *sn, *dyw;
};

static double rope_loss(void *p)
{
    struct rope_ctx *c = p;
    size_t n = (size_t)c->B * c->T * c->nh * c->hd;
    memcpy(c->y, c->x, n * sizeof(float));
    ops_rope_forward(c->y, c->B, c->T, c->nh, c->hd, c->hd, 0, c->cs, c->sn);
    return gc_dot(c->dyw, c->y, n);
}

static void rope_gradients_and_convention(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 2);
    struct rope_ctx c = {.B = 2, .T = 5, .nh = 3, .hd = 8};
    size_t n = 2 * 5 * 3 * 8;
    float x[240], y[240], dyw[240], dx[240], cs[5 * 4], sn[5 * 4];
    c.x = x, c.y = y, c.cs = cs, c.sn = sn, c.dyw = dyw;
    ops_rope_tables(cs, sn, 5, 8, 10000.0f, NULL);
    gc_fill(x, n, &r, 1.0f);
    gc_fill(dyw, n, &r, 1.0f);
    memcpy(dx, dyw, sizeof dx);
    ops_rope_backward(dx, c.B, c.T, c.nh, c.hd, c.hd, 0, cs, sn);
    assert_int_equal(gc_check("rope dx", rope_loss, &c, x, n, dx, 120, H_STEP, ATOL, RTOL), 0);
    /* rotate-half: position 1, pair (0, 4) turns by angle 1 rad (i = 0). */
    float v[8] = {1, 0, 0, 0, 0, 0, 0, 0};
    ops_rope_forward(v, 1, 1, 1, 8, 8, 1, cs, sn);
    assert_float_equal(v[0], cosf(1.0f), 1e-6);
    assert_float_equal(v[4], sinf(1.0f), 1e-6);
    /* pair i = 1 turns by 1 * 10000^(-2/8) = 0.1 rad */
    float u[8] = {0, 1, 0, 0, 0, 0, 0, 0};
    ops_rope_forward(u, 1, 1, 1, 8, 8, 1, cs, sn);
    assert_float_equal(u[1], cosf(0.1f), 1e-6);
    assert_float_equal(u[5], sinf(0.1f), 1e-6);
}

/* ---- attention */
struct att_ctx {
    int B, T, H, KV, hd;
    float *q, *k, *v, *out, *lse, *dyw;
    float scale, cap;
};

static double att_loss(void *p)
{
    struct att_ctx *c = p;
    ops_attention_forward(c->out, c->lse, c->q, c->k, c->v, c->B, c->T, c->H, c->KV, c->hd,
                          c->scale, c->cap);
    return gc_dot(c->dyw, c->out, (size_t)c->B * c->T * c->H * c->hd);
}

static void attention_gradients_gqa(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 3);
    enum { B = 2, T = 6, H = 4, KV = 2, HD = 4 };
    struct att_ctx c = {B, T, H, KV, HD, NULL, NULL, NULL, NULL, NULL, NULL, 0.5f, 0.0f};
    size_t nq = B * T * H * HD, nk = B * T * KV * HD;
    float q[B * T * H * HD], k[B * T * KV * HD], v[B * T * KV * HD], out[B * T * H * HD];
    float lse[B * H * T], dyw[B * T * H * HD];
    float dq[B * T * H * HD] = {0}, dk[B * T * KV * HD] = {0}, dv[B * T * KV * HD] = {0};
    c.q = q, c.k = k, c.v = v, c.out = out, c.lse = lse, c.dyw = dyw;
    gc_fill(q, nq, &r, 1.0f);
    gc_fill(k, nk, &r, 1.0f);
    gc_fill(v, nk, &r, 1.0f);
    gc_fill(dyw, nq, &r, 1.0f);
    att_loss(&c);
    ops_attention_backward(dq, dk, dv, dyw, lse, q, k, v, B, T, H, KV, HD, 0.5f, 0.0f);
    assert_int_equal(gc_check("attn dq", att_loss, &c, q, nq, dq, 96, H_STEP, ATOL, RTOL), 0);
    assert_int_equal(gc_check("attn dk", att_loss, &c, k, nk, dk, 96, H_STEP, ATOL, RTOL), 0);
    assert_int_equal(gc_check("attn dv", att_loss, &c, v, nk, dv, 96, H_STEP, ATOL, RTOL), 0);
    /* causal: the first position sees only itself, so its output is v0,
     * and its log-sum-exp is its one scaled score */
    att_loss(&c);
    for (int d = 0; d < HD; d++)
        assert_float_equal(out[d], v[d], 1e-6); /* b0 t0 h0 reads kv head 0 */
    float s00 = 0.0f;
    for (int d = 0; d < HD; d++)
        s00 += q[d] * k[d];
    assert_float_equal(lse[0], s00 / sqrtf((float)HD), 1e-5);
    /* changing a later key or value leaves earlier outputs alone */
    float keep[B * T * H * HD];
    memcpy(keep, out, sizeof keep);
    k[(T - 1) * KV * HD] += 1.0f; /* b0, t = T-1 */
    v[(T - 1) * KV * HD] += 1.0f;
    att_loss(&c);
    assert_memory_equal(out, keep, sizeof(float) * (size_t)(T - 1) * H * HD);
}

/* ---- gated MLP activations: SwiGLU (Llama) and GeGLU with the tanh GELU
 * (Gemma), gradients by finite differences and values worked by hand */
typedef void (*glu_fwd)(float *h, const float *g, const float *u, size_t n);
typedef void (*glu_bwd)(float *dg, float *du, const float *dh, const float *g, const float *u,
                        size_t n);

struct swi_ctx {
    size_t n;
    float *g, *u, *h, *dyw;
    glu_fwd fwd;
};

static double swi_loss(void *p)
{
    struct swi_ctx *c = p;
    c->fwd(c->h, c->g, c->u, c->n);
    return gc_dot(c->dyw, c->h, c->n);
}

static void check_glu(const char *name, glu_fwd fwd, glu_bwd bwd, uint64_t seed)
{
    struct rng r;
    rng_seed(&r, seed);
    float g[50], u[50], h[50], dyw[50], dg[50] = {0}, du[50] = {0};
    struct swi_ctx c = {50, g, u, h, dyw, fwd};
    gc_fill(g, 50, &r, 2.0f);
    gc_fill(u, 50, &r, 1.0f);
    gc_fill(dyw, 50, &r, 1.0f);
    swi_loss(&c);
    bwd(dg, du, dyw, g, u, 50);
    assert_int_equal(gc_check(name, swi_loss, &c, g, 50, dg, 50, H_STEP, ATOL, RTOL), 0);
    assert_int_equal(gc_check(name, swi_loss, &c, u, 50, du, 50, H_STEP, ATOL, RTOL), 0);
}

static void swiglu_gradients(void **state)
{
    (void)state;
    check_glu("swiglu", ops_swiglu_forward, ops_swiglu_backward, 4);
    /* silu(0) = 0, silu(x) -> x for large x */
    float g2[2] = {0.0f, 20.0f}, u2[2] = {1.0f, 1.0f}, h2[2];
    ops_swiglu_forward(h2, g2, u2, 2);
    assert_float_equal(h2[0], 0.0f, 0);
    assert_float_equal(h2[1], 20.0f, 1e-4);
}

static void geglu_gradients(void **state)
{
    (void)state;
    check_glu("geglu", ops_geglu_forward, ops_geglu_backward, 14);
    /* gelu_tanh(0) = 0; gelu_tanh(1) = 0.5 (1 + tanh(0.79788456 * 1.044715)) = 0.8411920 */
    float g2[2] = {0.0f, 1.0f}, u2[2] = {1.0f, 1.0f}, h2[2];
    ops_geglu_forward(h2, g2, u2, 2);
    assert_float_equal(h2[0], 0.0f, 0);
    assert_float_equal(h2[1], 0.8411920f, 1e-6);
}

/* Attention with Gemma 2's soft-capped scores and a scale that is not
 * 1/sqrt(hd): gradients by finite differences, and the cap bounds the
 * log-sum-exp of the first row (its one score) by the cap. */
static void attention_softcap_gradients(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 13);
    enum { B = 1, T = 5, H = 2, KV = 1, HD = 4 };
    struct att_ctx c = {B, T, H, KV, HD, NULL, NULL, NULL, NULL, NULL, NULL, 0.9f, 1.5f};
    size_t nq = B * T * H * HD, nk = B * T * KV * HD;
    float q[B * T * H * HD], k[B * T * KV * HD], v[B * T * KV * HD], out[B * T * H * HD];
    float lse[B * H * T], dyw[B * T * H * HD];
    float dq[B * T * H * HD] = {0}, dk[B * T * KV * HD] = {0}, dv[B * T * KV * HD] = {0};
    c.q = q, c.k = k, c.v = v, c.out = out, c.lse = lse, c.dyw = dyw;
    gc_fill(q, nq, &r, 2.0f);
    gc_fill(k, nk, &r, 2.0f);
    gc_fill(v, nk, &r, 1.0f);
    gc_fill(dyw, nq, &r, 1.0f);
    att_loss(&c);
    ops_attention_backward(dq, dk, dv, dyw, lse, q, k, v, B, T, H, KV, HD, 0.9f, 1.5f);
    assert_int_equal(gc_check("capped dq", att_loss, &c, q, nq, dq, 40, H_STEP, ATOL, RTOL), 0);
    assert_int_equal(gc_check("capped dk", att_loss, &c, k, nk, dk, 20, H_STEP, ATOL, RTOL), 0);
    assert_int_equal(gc_check("capped dv", att_loss, &c, v, nk, dv, 20, H_STEP, ATOL, RTOL), 0);
    float s00 = 0.0f;
    for (int d = 0; d < HD; d++)
        s00 += q[d] * k[d];
    assert_float_equal(lse[0], 1.5f * tanhf(0.9f * s00 / 1.5f), 1e-5);
}

/* Llama 3's frequency scaling: angles divided per frequency. */
static void rope_tables_divisor(void **state)
{
    (void)state;
    float cs[3 * 2], sn[3 * 2], div[2] = {1.0f, 8.0f};
    ops_rope_tables(cs, sn, 3, 4, 100.0f, div);
    /* position 2: pair 0 turns 2 rad; pair 1 turns 2 * 100^(-1/2) / 8 */
    assert_float_equal(cs[2 * 2 + 0], cosf(2.0f), 1e-6);
    assert_float_equal(sn[2 * 2 + 1], sinf(2.0f * 0.1f / 8.0f), 1e-6);
}

/* ---- cross-entropy */
struct xe_ctx {
    int M, V;
    float *logits;
    int32_t *tgt;
};

static double xe_loss(void *p)
{
    struct xe_ctx *c = p;
    return ops_xent_forward(c->logits, c->tgt, c->M, c->V);
}

static void xent_gradients(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 5);
    enum { M = 4, V = 11 };
    float logits[M * V], grad[M * V];
    int32_t tgt[M] = {0, 3, 10, 3};
    struct xe_ctx c = {M, V, logits, tgt};
    gc_fill(logits, M * V, &r, 3.0f);
    memcpy(grad, logits, sizeof grad);
    double l1 = ops_xent_forward(logits, tgt, M, V);
    double l2 = ops_xent_forward_backward(grad, tgt, M, V, 1.0f);
    assert_true(l1 == l2);
    assert_int_equal(
        gc_check("xent", xe_loss, &c, logits, M * V, grad, M * V, H_STEP, ATOL, RTOL), 0);
    /* uniform logits give log V per row */
    float z[V] = {0};
    int32_t t0 = 2;
    assert_float_equal(ops_xent_forward(z, &t0, 1, V), log(V), 1e-5);
    /* dscale scales the gradient */
    float g2[V] = {0};
    ops_xent_forward_backward(g2, &t0, 1, V, 0.5f);
    assert_float_equal(g2[0], 0.5f / V, 1e-7);
    assert_float_equal(g2[2], 0.5f / V - 0.5f, 1e-7);
}

static void determinism_across_threads(void **state)
{
    (void)state;
    /* The same attention backward twice gives the same bits. */
    struct rng r;
    rng_seed(&r, 6);
    enum { B = 2, T = 9, H = 4, KV = 1, HD = 8 };
    static float q[B * T * H * HD], k[B * T * KV * HD], v[B * T * KV * HD], out[B * T * H * HD];
    static float lse[B * H * T], dout[B * T * H * HD];
    static float dq1[B * T * H * HD], dk1[B * T * KV * HD], dv1[B * T * KV * HD];
    static float dq2[B * T * H * HD], dk2[B * T * KV * HD], dv2[B * T * KV * HD];
    gc_fill(q, sizeof q / 4, &r, 1), gc_fill(k, sizeof k / 4, &r, 1);
    gc_fill(v, sizeof v / 4, &r, 1), gc_fill(dout, sizeof dout / 4, &r, 1);
    ops_attention_forward(out, lse, q, k, v, B, T, H, KV, HD, 0.35f, 0.0f);
    ops_attention_backward(dq1, dk1, dv1, dout, lse, q, k, v, B, T, H, KV, HD, 0.35f, 0.0f);
    ops_attention_backward(dq2, dk2, dv2, dout, lse, q, k, v, B, T, H, KV, HD, 0.35f, 0.0f);
    assert_memory_equal(dk1, dk2, sizeof dk1);
    assert_memory_equal(dv1, dv2, sizeof dv1);
    assert_memory_equal(dq1, dq2, sizeof dq1);
}

/* Token accuracy's numerator by hand: 4 rows over a vocabulary of 3.
 * Row 0 picks 2 (target 2: hit), row 1 picks 0 (target 1: miss), row 2 ties
 * between 0 and 1 and the lowest id wins (target 0: hit), row 3 picks 1
 * (target 2: miss). Two hits of four. */
static void argmax_hits_by_hand(void **state)
{
    (void)state;
    const float logits[4 * 3] = {0.1f, 0.2f, 0.9f,  /* */
                                 2.0f, 1.5f, -1.0f, /* */
                                 0.5f, 0.5f, 0.1f,  /* */
                                 -3.0f, 4.0f, 3.9f};
    const int32_t targets[4] = {2, 1, 0, 2};
    assert_int_equal(ops_argmax_hits(logits, targets, 4, 3), 2);
    assert_int_equal(ops_argmax_hits(logits, targets, 1, 3), 1);
    const int32_t all_right[4] = {2, 0, 0, 1};
    assert_int_equal(ops_argmax_hits(logits, all_right, 4, 3), 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rmsnorm_gradients),
        cmocka_unit_test(rope_gradients_and_convention),
        cmocka_unit_test(attention_gradients_gqa),
        cmocka_unit_test(swiglu_gradients),
        cmocka_unit_test(geglu_gradients),
        cmocka_unit_test(attention_softcap_gradients),
        cmocka_unit_test(rope_tables_divisor),
        cmocka_unit_test(xent_gradients),
        cmocka_unit_test(determinism_across_threads),
        cmocka_unit_test(argmax_hits_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
