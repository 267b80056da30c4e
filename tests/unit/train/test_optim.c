/* test_optim.c - AdamW against values worked out by hand, clipping, the
 * learning-rate schedule, and the determinism of the gradient norm. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "train/kernels/kern.h"
#include "train/model/optim.h"
#include "core/rng.h"

static void adamw_two_steps_by_hand(void **state)
{
    (void)state;
    struct optim o;
    assert_int_equal(optim_init(&o, 2, 1, 0.01f), 0);
    float p[2] = {1.0f, 1.0f};
    float g[2] = {0.5f, 0.5f};
    /* step 1: p0 decays to 1 - 0.1*0.01 = 0.999; m = 0.05, v = 0.00025,
     * mhat = 0.5, vhat = 0.25, update 0.1 * 0.5 / 0.5 = 0.1 (eps aside) */
    optim_adamw_step(&o, p, g, 1.0f, 0.1f);
    assert_float_equal(p[0], 0.899f, 1e-6);
    assert_float_equal(p[1], 0.9f, 1e-6); /* outside the decay region */
    /* step 2 with g = -0.25: m = 0.9*0.05 - 0.025 = 0.02; v = 0.999*0.00025
     * + 0.001*0.0625 = 0.00031225; mhat = 0.02/0.19 ; vhat = v/(1-0.999^2) */
    g[0] = g[1] = -0.25f;
    optim_adamw_step(&o, p, g, 1.0f, 0.1f);
    double mhat = 0.02 / (1.0 - 0.81), vhat = 0.00031225 / (1.0 - 0.998001);
    double upd = 0.1 * mhat / (sqrt(vhat) + 1e-8);
    assert_float_equal(p[0], 0.899 * (1.0 - 0.001) - upd, 2e-6);
    assert_float_equal(p[1], 0.9 - upd, 2e-6);
    assert_int_equal(o.t, 2);
    optim_free(&o);
}

/* The vector AdamW gives the bits of the plain formula, lane by lane and in
 * the scalar tail (n not a multiple of 8). */
static void adamw_kernel_matches_formula(void **state)
{
    (void)state;
    enum { N = 1003 };
    static float p[N], g[N], m[N], v[N], pr[N], mr[N], vr[N];
    struct rng r;
    rng_seed(&r, 9);
    for (int i = 0; i < N; i++) {
        p[i] = pr[i] = rng_normal(&r);
        g[i] = rng_normal(&r);
        m[i] = mr[i] = 0.1f * rng_normal(&r);
        v[i] = vr[i] = 0.01f * rng_uniform(&r);
    }
    float gs = 0.7f, b1 = 0.9f, b2 = 0.999f, st = 1e-3f, rc2 = 1.3f, eps = 1e-8f, dk = 0.999f;
    kern_adamw(p, g, m, v, N, gs, b1, b2, st, rc2, eps, dk);
    for (int i = 0; i < N; i++) {
        float gi = g[i] * gs;
        float mi = b1 * mr[i] + (1.0f - b1) * gi;
        float vi = b2 * vr[i] + (1.0f - b2) * gi * gi;
        mr[i] = mi;
        vr[i] = vi;
        pr[i] = pr[i] * dk - st * mi / (sqrtf(vi) * rc2 + eps);
    }
    assert_memory_equal(p, pr, sizeof p);
    assert_memory_equal(m, mr, sizeof m);
    assert_memory_equal(v, vr, sizeof v);
}

static void clipping(void **state)
{
    (void)state;
    float g[2] = {3.0f, 4.0f};
    double n = optim_grad_norm(g, 2);
    assert_float_equal(n, 5.0, 1e-12);
    assert_float_equal(optim_clip(g, 2, n, 10.0f), 1.0f, 0);
    assert_float_equal(g[0], 3.0f, 0);
    optim_clip(g, 2, n, 1.0f);
    assert_float_equal(optim_grad_norm(g, 2), 1.0, 1e-5);
    assert_float_equal(g[0] / g[1], 0.75f, 1e-6);
    assert_float_equal(optim_clip_factor(5.0, 1.0f), 0.2f, 1e-6);
    assert_float_equal(optim_clip_factor(5.0, 0.0f), 1.0f, 0);
    /* a scaled gradient in the update equals the gradient scaled before */
    struct optim a, b;
    optim_init(&a, 2, 2, 0.0f);
    optim_init(&b, 2, 2, 0.0f);
    float pa[2] = {1, 2}, pb[2] = {1, 2}, ga[2] = {0.3f, -0.7f}, gb[2] = {0.15f, -0.35f};
    optim_adamw_step(&a, pa, ga, 0.5f, 0.01f);
    optim_adamw_step(&b, pb, gb, 1.0f, 0.01f);
    assert_memory_equal(pa, pb, sizeof pa);
    optim_free(&a);
    optim_free(&b);
}

static void norm_is_deterministic_and_accurate(void **state)
{
    (void)state;
    size_t n = 1000003;
    float *g = malloc(n * sizeof(float));
    struct rng r;
    rng_seed(&r, 3);
    double want = 0.0;
    for (size_t i = 0; i < n; i++) {
        g[i] = rng_normal(&r);
        want += (double)g[i] * g[i];
    }
    double a = optim_grad_norm(g, n), b = optim_grad_norm(g, n);
    assert_true(a == b);
    assert_float_equal(a, sqrt(want), 1e-9 * sqrt(want));
    free(g);
}

static void schedule(void **state)
{
    (void)state;
    struct lr_schedule s = {LR_COSINE, 1.0f, 4, 104, 0.0f};
    assert_float_equal(optim_lr(&s, 0), 0.25f, 1e-7);
    assert_float_equal(optim_lr(&s, 3), 1.0f, 1e-7);
    assert_float_equal(optim_lr(&s, 4), 1.0f, 1e-7);
    assert_float_equal(optim_lr(&s, 54), 0.5f, 1e-6);  /* half way */
    assert_true(optim_lr(&s, 103) > 0.0f);              /* last step still moves */
    assert_true(optim_lr(&s, 103) < 0.001f);
    s.kind = LR_LINEAR;
    s.final_ratio = 0.1f;
    assert_float_equal(optim_lr(&s, 54), 0.55f, 1e-6);
    assert_float_equal(optim_lr(&s, 104), 0.1f, 1e-6);
    s.kind = LR_CONSTANT;
    assert_float_equal(optim_lr(&s, 90), 1.0f, 0);
    s.warmup = 0;
    assert_float_equal(optim_lr(&s, 0), 1.0f, 0);
    assert_int_equal(optim_lr_kind_parse("linear"), LR_LINEAR);
    assert_int_equal(optim_lr_kind_parse("step"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(adamw_two_steps_by_hand),
        cmocka_unit_test(adamw_kernel_matches_formula),
        cmocka_unit_test(clipping),
        cmocka_unit_test(norm_is_deterministic_and_accurate),
        cmocka_unit_test(schedule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
