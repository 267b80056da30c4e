/* test_cuda_ops.c - the GPU kernels of train/cuda/cuda_ops.cu (everything
 * but attention and RoPE) against their CPU twins in train/ on the same
 * random inputs: sizes that are not multiples of any block, a 50257-wide
 * vocabulary, NF4 over a few scale groups, dropout masks bit for bit
 * against linear_dropout_keep, bf16 conversion of ties, NaN, Inf and
 * subnormals.
 *
 * Tolerances (cuda_ops.h): fp32 kernels within 1e-4 relative of the CPU
 * (|gpu - cpu| <= 1e-4 (|cpu| + rms(cpu)), the rms term for entries near
 * zero); exact bits where the contract promises the CPU's bits: bf16
 * conversions, NF4 values, dropout, the embedding, the elementwise
 * helpers, AdamW. The bf16 copies RMSNorm and the gated activations write
 * beside their fp32 outputs (forward and backward) have the bits
 * linear_f32_to_bf16 gives for those outputs (also when the forward writes
 * its bf16 alone, without the fp32), and the outputs are the same
 * without them. Reductions are also run twice and must repeat their bits
 * (determinism).
 *
 * Needs a GPU: without one it prints a `skip:` line and exits 77 (CTest's
 * skip code).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_ops.h"
#include "train/model/linear.h"
#include "train/kernels/nf4.h"
#include "train/model/ops.h"
#include "train/model/optim.h"

#define RTOL 1e-4

/* ---- helpers ----------------------------------------------------------- */

static void *dev_copy(const void *host, size_t bytes)
{
    void *d = cuda_alloc(bytes ? bytes : 1, 0);
    if (!d)
        fail_msg("cuda_alloc(%zu): %s", bytes, cuda_ctx_error());
    if (bytes && cuda_upload(d, host, bytes) != 0)
        fail_msg("cuda_upload: %s", cuda_ctx_error());
    return d;
}

/* NF4 tensor t's arrays on the device, as the trainer holds them; freed
 * by nf4_device_free. */
static struct cuda_nf4 nf4_to_device(const struct nf4_tensor *t)
{
    return (struct cuda_nf4){
        .n = t->n,
        .n_blocks = t->n_blocks,
        .n_groups = t->n_groups,
        .codes = dev_copy(t->codes, (t->n + 1) / 2),
        .scale_codes = dev_copy(t->scale_codes, t->n_blocks),
        .group_mean = dev_copy(t->group_mean, t->n_groups * 4),
        .group_absmax = dev_copy(t->group_absmax, t->n_groups * 4),
    };
}

static void nf4_device_free(struct cuda_nf4 *g)
{
    cuda_free((void *)g->codes), cuda_free((void *)g->scale_codes);
    cuda_free((void *)g->group_mean), cuda_free((void *)g->group_absmax);
}

static void *dev_zero(size_t bytes)
{
    void *d = cuda_alloc(bytes ? bytes : 1, 1);
    if (!d)
        fail_msg("cuda_alloc(%zu): %s", bytes, cuda_ctx_error());
    return d;
}

/* Waits for the kernels, then copies bytes of dev back into host. */
static void fetch(void *host, const void *dev, size_t bytes)
{
    if (cuda_ctx_sync() != 0)
        fail_msg("kernel failed: %s", cuda_ctx_error());
    if (cuda_download(host, dev, bytes) != 0)
        fail_msg("cuda_download: %s", cuda_ctx_error());
}

static float *fill(size_t n, struct rng *r, float scale)
{
    float *x = malloc(n * sizeof *x + 1);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = scale * (2.0f * rng_uniform(r) - 1.0f);
    return x;
}

static float *dup(const float *x, size_t n)
{
    float *y = malloc(n * sizeof *y + 1);
    assert_non_null(y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* |got - want| <= RTOL (|want| + rms(want)) everywhere; prints the worst. */
static void expect_close(const char *what, const float *got, const float *want, size_t n)
{
    double ss = 0.0;
    for (size_t i = 0; i < n; i++)
        ss += (double)want[i] * want[i];
    double rms = n ? sqrt(ss / (double)n) : 0.0;
    size_t bad = 0, worst = 0;
    double worst_ratio = 0.0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - (double)want[i]);
        double lim = RTOL * (fabs((double)want[i]) + rms);
        double ratio = lim > 0.0 ? err / lim : (err > 0.0 ? INFINITY : 0.0);
        if (!(ratio <= 1.0))
            bad++;
        if (!(ratio <= worst_ratio)) {
            worst_ratio = ratio;
            worst = i;
        }
    }
    if (bad)
        fail_msg("%s: %zu of %zu values off; worst [%zu] gpu %.9g cpu %.9g (%.3g x the "
                 "tolerance)",
                 what, bad, n, worst, (double)got[worst], (double)want[worst], worst_ratio);
}

static void expect_same_bits(const char *what, const void *got, const void *want, size_t bytes,
                             size_t elem)
{
    const unsigned char *g = got, *w = want;
    for (size_t i = 0; i < bytes; i++) {
        if (g[i] != w[i]) {
            size_t e = i / elem, o = e * elem;
            uint32_t gv = 0, wv = 0;
            memcpy(&gv, g + o, elem < 4 ? elem : 4);
            memcpy(&wv, w + o, elem < 4 ? elem : 4);
            fail_msg("%s: element %zu differs: gpu bits 0x%08x, cpu 0x%08x", what, e, gv, wv);
        }
    }
}

/* The bf16 copy a kernel wrote beside its fp32 output (gb, n values on the
 * device) has the bits linear_f32_to_bf16 gives for that output (host,
 * already fetched): what cuda_to_bf16 would have made in a pass of its
 * own (cuda_ops.h, "bf16 copies"). */
static void expect_bf16_copy(const char *what, const uint16_t *gb, const float *out, size_t n)
{
    uint16_t *got = malloc(n * 2), *want = malloc(n * 2);
    assert_non_null(got && want);
    fetch(got, gb, n * 2);
    for (size_t i = 0; i < n; i++)
        want[i] = linear_f32_to_bf16(out[i]);
    expect_same_bits(what, got, want, n * 2, 2);
    free(got);
    free(want);
}

/* ---- RMSNorm ----------------------------------------------------------- */

static void rmsnorm_case(int N, int C, int with_dw)
{
    struct rng r;
    rng_seed(&r, (uint64_t)N * 1000 + (uint64_t)C);
    size_t nc = (size_t)N * C;
    float *x = fill(nc, &r, 2.0f), *w = fill((size_t)C, &r, 1.5f), *dy = fill(nc, &r, 1.0f);
    float *dx0 = fill(nc, &r, 0.5f), *dw0 = fill((size_t)C, &r, 0.5f);
    float *y = malloc(nc * sizeof *y), *rstd = malloc((size_t)N * sizeof *rstd);
    float *dx = dup(dx0, nc), *dw = dup(dw0, (size_t)C);
    ops_rmsnorm_forward(y, rstd, x, w, N, C, 1e-5f);
    ops_rmsnorm_backward(dx, with_dw ? dw : NULL, dy, x, w, rstd, N, C);

    float *gx = dev_copy(x, nc * 4), *gw = dev_copy(w, (size_t)C * 4), *gdy = dev_copy(dy, nc * 4);
    float *gy = dev_zero(nc * 4), *grstd = dev_zero((size_t)N * 4);
    float *gdx = dev_copy(dx0, nc * 4), *gdw = dev_copy(dw0, (size_t)C * 4);
    uint16_t *gyb = dev_zero(nc * 2), *gdxb = dev_zero(nc * 2);
    cuda_rmsnorm_forward(gy, gyb, C, grstd, gx, gw, N, C, 1e-5f);
    cuda_rmsnorm_backward(gdx, gdxb, C, with_dw ? gdw : NULL, gdy, gx, gw, grstd, N, C);
    float *hy = malloc(nc * 4), *hr = malloc((size_t)N * 4), *hdx = malloc(nc * 4);
    float *hdw = malloc((size_t)C * 4), *hdw2 = malloc((size_t)C * 4);
    fetch(hy, gy, nc * 4);
    fetch(hr, grstd, (size_t)N * 4);
    fetch(hdx, gdx, nc * 4);
    fetch(hdw, gdw, (size_t)C * 4);
    expect_close("rmsnorm y", hy, y, nc);
    expect_close("rmsnorm rstd", hr, rstd, (size_t)N);
    expect_close("rmsnorm dx", hdx, dx, nc);
    expect_bf16_copy("rmsnorm y's bf16", gyb, hy, nc);
    expect_bf16_copy("rmsnorm dx's bf16", gdxb, hdx, nc);
    /* The bf16 alone (no fp32 y): the same bf16 bits, y left as it was,
     * the same rstd. */
    cuda_zero(gyb, nc * 2);
    cuda_zero(gy, nc * 4);
    cuda_rmsnorm_forward(NULL, gyb, C, grstd, gx, gw, N, C, 1e-5f);
    expect_bf16_copy("rmsnorm y's bf16 alone", gyb, hy, nc);
    fetch(hdx, gy, nc * 4);
    for (size_t i = 0; i < nc; i++)
        assert_true(hdx[i] == 0.0f);
    fetch(hdx, grstd, (size_t)N * 4);
    expect_same_bits("rmsnorm rstd with the bf16 alone", hdx, hr, (size_t)N * 4, 4);
    fetch(hdx, gdx, nc * 4);
    if (with_dw) {
        expect_close("rmsnorm dw", hdw, dw, (size_t)C);
        /* the same sums again from the same start: the same bits */
        cuda_upload(gdw, dw0, (size_t)C * 4);
        cuda_rmsnorm_backward(gdx, NULL, 0, gdw, gdy, gx, gw, grstd, N, C);
        fetch(hdw2, gdw, (size_t)C * 4);
        expect_same_bits("rmsnorm dw, run twice", hdw2, hdw, (size_t)C * 4, 4);
    } else {
        expect_same_bits("rmsnorm dw NULL leaves dw", hdw, dw0, (size_t)C * 4, 4);
    }
    cuda_free(gx), cuda_free(gw), cuda_free(gdy), cuda_free(gy), cuda_free(grstd);
    cuda_free(gdx), cuda_free(gdw), cuda_free(gyb), cuda_free(gdxb);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(y), free(rstd), free(dx), free(dw);
    free(hy), free(hr), free(hdx), free(hdw), free(hdw2);
}

/* Change 1j: the residual stream is bf16. The norm on a bf16 x (forward,
 * backward, its weight's gradient), the residual add into bf16 and the
 * embedding written as bf16 give the fp32 kernels' bits on the same
 * values (the outputs that are bf16, those bits rounded). */
static void residual_bf16_case(int N, int C)
{
    struct rng r;
    rng_seed(&r, (uint64_t)N * 31 + (uint64_t)C);
    size_t nc = (size_t)N * C;
    float *x = fill(nc, &r, 2.0f), *w = fill((size_t)C, &r, 1.5f), *dy = fill(nc, &r, 1.0f);
    float *dx0 = fill(nc, &r, 0.5f), *dw0 = fill((size_t)C, &r, 0.5f), *b = fill(nc, &r, 0.3f);
    uint16_t *xb = malloc(nc * 2);
    for (size_t i = 0; i < nc; i++) {
        xb[i] = linear_f32_to_bf16(x[i]);
        x[i] = linear_bf16_to_f32(xb[i]);
    }
    float *gx = dev_copy(x, nc * 4), *gw = dev_copy(w, (size_t)C * 4), *gdy = dev_copy(dy, nc * 4);
    uint16_t *gxb = dev_copy(xb, nc * 2);
    float *gy[2] = {dev_zero(nc * 4), dev_zero(nc * 4)};
    float *gr[2] = {dev_zero((size_t)N * 4), dev_zero((size_t)N * 4)};
    float *gdx[2] = {dev_copy(dx0, nc * 4), dev_copy(dx0, nc * 4)};
    float *gdw[2] = {dev_copy(dw0, (size_t)C * 4), dev_copy(dw0, (size_t)C * 4)};
    uint16_t *gyb[2] = {dev_zero(nc * 2), dev_zero(nc * 2)};
    cuda_rmsnorm_forward(gy[0], gyb[0], C, gr[0], gx, gw, N, C, 1e-5f);
    cuda_rmsnorm_forward_bf16(gy[1], gyb[1], C, gr[1], gxb, gw, N, C, 1e-5f);
    cuda_rmsnorm_backward(gdx[0], NULL, 0, gdw[0], gdy, gx, gw, gr[0], N, C);
    cuda_rmsnorm_backward_bf16(gdx[1], NULL, 0, gdw[1], gdy, gxb, gw, gr[0], N, C);
    float *h[2] = {malloc(nc * 4), malloc(nc * 4)};
    uint16_t *hb[2] = {malloc(nc * 2), malloc(nc * 2)};
    for (int k = 0; k < 2; k++) {
        fetch(h[k], gy[k], nc * 4);
        fetch(hb[k], gyb[k], nc * 2);
    }
    expect_same_bits("rmsnorm on bf16 x: y", h[1], h[0], nc * 4, 4);
    expect_same_bits("rmsnorm on bf16 x: y's bf16", hb[1], hb[0], nc * 2, 2);
    for (int k = 0; k < 2; k++)
        fetch(h[k], gr[k], (size_t)N * 4);
    expect_same_bits("rmsnorm on bf16 x: rstd", h[1], h[0], (size_t)N * 4, 4);
    for (int k = 0; k < 2; k++)
        fetch(h[k], gdx[k], nc * 4);
    expect_same_bits("rmsnorm on bf16 x: dx", h[1], h[0], nc * 4, 4);
    for (int k = 0; k < 2; k++)
        fetch(h[k], gdw[k], (size_t)C * 4);
    expect_same_bits("rmsnorm on bf16 x: dw", h[1], h[0], (size_t)C * 4, 4);
    /* mid = x + b into bf16, in place too: x's value plus b, rounded once */
    float *gb = dev_copy(b, nc * 4);
    uint16_t *gm = dev_zero(nc * 2);
    cuda_add_bf16(gm, gxb, gb, nc);
    cuda_add_bf16(gxb, gxb, gb, nc);
    fetch(hb[0], gm, nc * 2);
    fetch(hb[1], gxb, nc * 2);
    for (size_t i = 0; i < nc; i++)
        xb[i] = linear_f32_to_bf16(x[i] + b[i]);
    expect_same_bits("residual add into bf16", hb[0], xb, nc * 2, 2);
    expect_same_bits("residual add into bf16, in place", hb[1], xb, nc * 2, 2);
    /* the embedding's rows as bf16: the fp32 rows rounded (scaled, as Gemma's) */
    int V = 37;
    float *table = fill((size_t)V * C, &r, 1.0f);
    int32_t *ids = malloc((size_t)N * sizeof *ids);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)rng_below(&r, (uint64_t)V);
    float *gt = dev_copy(table, (size_t)V * C * 4);
    int32_t *gids = dev_copy(ids, (size_t)N * 4);
    cuda_embed_forward(gy[0], gids, N, gt, NULL, C, 1.7f);
    cuda_embed_forward_bf16(gyb[1], gids, N, gt, NULL, C, 1.7f);
    fetch(h[0], gy[0], nc * 4);
    expect_bf16_copy("embedding as bf16", gyb[1], h[0], nc);
    for (int k = 0; k < 2; k++) {
        cuda_free(gy[k]), cuda_free(gr[k]), cuda_free(gdx[k]), cuda_free(gdw[k]);
        cuda_free(gyb[k]), free(h[k]), free(hb[k]);
    }
    cuda_free(gx), cuda_free(gw), cuda_free(gdy), cuda_free(gxb), cuda_free(gb), cuda_free(gm);
    cuda_free(gt), cuda_free(gids);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(b), free(xb), free(table), free(ids);
}

static void rmsnorm_matches_cpu(void **state)
{
    (void)state;
    rmsnorm_case(1, 63, 1);
    rmsnorm_case(7, 1000, 1);
    rmsnorm_case(33, 2053, 0);
    rmsnorm_case(300, 577, 1); /* more rows than the column sum's row groups */
    residual_bf16_case(5, 1000);
    residual_bf16_case(300, 577);
}

/* ---- gated activations and soft-cap ------------------------------------ */

typedef void (*act_fwd)(float *, const float *, const float *, size_t);
typedef void (*act_bwd)(float *, float *, const float *, const float *, const float *, size_t);
typedef void (*gpu_act_fwd)(float *, uint16_t *, int, int, const float *, const float *,
                            size_t);
typedef void (*gpu_act_bwd)(float *, float *, uint16_t *, uint16_t *, int, int, const float *,
                            const float *, const float *, size_t, int);

/* Each GPU kernel twice: with its bf16 copies (checked bit for bit against
 * its fp32 output) and without them (the same fp32 bits). */
static void act_case(const char *name, act_fwd cpu_f, act_bwd cpu_b, gpu_act_fwd gpu_f,
                     gpu_act_bwd gpu_b, size_t n)
{
    struct rng r;
    rng_seed(&r, n);
    float *g = fill(n, &r, 6.0f), *u = fill(n, &r, 2.0f), *dh = fill(n, &r, 1.0f);
    float *dg0 = fill(n, &r, 0.5f), *du0 = fill(n, &r, 0.5f);
    float *h = malloc(n * 4), *dg = dup(dg0, n), *du = dup(du0, n);
    cpu_f(h, g, u, n);
    cpu_b(dg, du, dh, g, u, n);
    float *gg = dev_copy(g, n * 4), *gu = dev_copy(u, n * 4), *gdh = dev_copy(dh, n * 4);
    float *gh = dev_zero(n * 4), *gdg = dev_copy(dg0, n * 4), *gdu = dev_copy(du0, n * 4);
    uint16_t *ghb = dev_zero(n * 2), *gdgb = dev_zero(n * 2), *gdub = dev_zero(n * 2);
    gpu_f(gh, ghb, 0, 0, gg, gu, n);
    gpu_b(gdg, gdu, gdgb, gdub, 0, 0, gdh, gg, gu, n, 1);
    float *out = malloc(n * 4), *plain = malloc(n * 4);
    char what[64];
    fetch(out, gh, n * 4);
    snprintf(what, sizeof what, "%s forward (n %zu)", name, n);
    expect_close(what, out, h, n);
    expect_bf16_copy(what, ghb, out, n);
    gpu_f(gh, NULL, 0, 0, gg, gu, n);
    fetch(plain, gh, n * 4);
    expect_same_bits(what, plain, out, n * 4, 4);
    /* the bf16 alone (no fp32 h): the same bf16 bits */
    cuda_zero(ghb, n * 2);
    gpu_f(NULL, ghb, 0, 0, gg, gu, n);
    snprintf(what, sizeof what, "%s forward, bf16 alone (n %zu)", name, n);
    expect_bf16_copy(what, ghb, out, n);
    fetch(out, gdg, n * 4);
    snprintf(what, sizeof what, "%s dg (n %zu)", name, n);
    expect_close(what, out, dg, n);
    expect_bf16_copy(what, gdgb, out, n);
    fetch(out, gdu, n * 4);
    snprintf(what, sizeof what, "%s du (n %zu)", name, n);
    expect_close(what, out, du, n);
    expect_bf16_copy(what, gdub, out, n);
    cuda_upload(gdu, du0, n * 4);
    gpu_b(gdg, gdu, NULL, NULL, 0, 0, gdh, gg, gu, n, 1);
    fetch(plain, gdu, n * 4);
    snprintf(what, sizeof what, "%s du without copies (n %zu)", name, n);
    expect_same_bits(what, plain, out, n * 4, 4);
    /* Written, not added (acc 0): the bits of adding into zeros, and dg
     * and du not read (NaN before). */
    float *nan = malloc(n * 4), *wg = malloc(n * 4), *wu = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        nan[i] = NAN;
    cuda_zero(gdg, n * 4);
    cuda_zero(gdu, n * 4);
    gpu_b(gdg, gdu, NULL, NULL, 0, 0, gdh, gg, gu, n, 1);
    fetch(wg, gdg, n * 4);
    fetch(wu, gdu, n * 4);
    cuda_upload(gdg, nan, n * 4);
    cuda_upload(gdu, nan, n * 4);
    cuda_zero(gdgb, n * 2);
    gpu_b(gdg, gdu, gdgb, NULL, 0, 0, gdh, gg, gu, n, 0);
    snprintf(what, sizeof what, "%s dg written (n %zu)", name, n);
    fetch(plain, gdg, n * 4);
    expect_same_bits(what, plain, wg, n * 4, 4);
    expect_bf16_copy(what, gdgb, wg, n);
    snprintf(what, sizeof what, "%s du written (n %zu)", name, n);
    fetch(plain, gdu, n * 4);
    expect_same_bits(what, plain, wu, n * 4, 4);
    /* The bf16 alone (change 1f: no fp32 dg, du): the same bf16 bits. */
    cuda_zero(gdgb, n * 2);
    cuda_zero(gdub, n * 2);
    gpu_b(NULL, NULL, gdgb, gdub, 0, 0, gdh, gg, gu, n, 0);
    snprintf(what, sizeof what, "%s dg, bf16 alone (n %zu)", name, n);
    expect_bf16_copy(what, gdgb, wg, n);
    snprintf(what, sizeof what, "%s du, bf16 alone (n %zu)", name, n);
    expect_bf16_copy(what, gdub, wu, n);
    free(nan), free(wg), free(wu);
    cuda_free(gg), cuda_free(gu), cuda_free(gdh), cuda_free(gh), cuda_free(gdg), cuda_free(gdu);
    cuda_free(ghb), cuda_free(gdgb), cuda_free(gdub);
    free(g), free(u), free(dh), free(dg0), free(du0), free(h), free(dg), free(du), free(out);
    free(plain);
}

/* Change 1g: the kernels that read g and u as bf16 (as the trainer keeps
 * them) give the fp32 kernels' bits on g and u rounded to bf16, forward and
 * backward, with and without the fp32 outputs, at a row stride. */
static void gated_bf16_case(int gelu, size_t n, int cols, int ld)
{
    struct rng r;
    rng_seed(&r, n + 7);
    float *g = fill(n, &r, 6.0f), *u = fill(n, &r, 2.0f), *dh = fill(n, &r, 1.0f);
    uint16_t *gb = malloc(n * 2), *ub = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        gb[i] = linear_f32_to_bf16(g[i]);
        ub[i] = linear_f32_to_bf16(u[i]);
        g[i] = linear_bf16_to_f32(gb[i]);
        u[i] = linear_bf16_to_f32(ub[i]);
    }
    size_t nb = ld > cols ? n / (size_t)cols * (size_t)ld : n; /* the bf16 rows' extent */
    float *dg = dev_copy(g, n * 4), *du = dev_copy(u, n * 4), *ddh = dev_copy(dh, n * 4);
    uint16_t *dgb16 = dev_copy(gb, n * 2), *dub16 = dev_copy(ub, n * 2);
    float *h1 = dev_zero(n * 4), *h2 = dev_zero(n * 4);
    float *g1 = dev_zero(n * 4), *u1 = dev_zero(n * 4);
    float *g2 = dev_zero(n * 4), *u2 = dev_zero(n * 4);
    uint16_t *b1 = dev_zero(nb * 2), *b2 = dev_zero(nb * 2), *c1 = dev_zero(nb * 2),
             *c2 = dev_zero(nb * 2);
    if (gelu)
        cuda_geglu_forward(h1, b1, cols, ld, dg, du, n);
    else
        cuda_swiglu_forward(h1, b1, cols, ld, dg, du, n);
    cuda_gated_forward_bf16(gelu, h2, b2, cols, ld, dgb16, dub16, n);
    char what[80];
    float *x1 = malloc(n * 4), *x2 = malloc(n * 4);
    uint16_t *y1 = malloc(nb * 2), *y2 = malloc(nb * 2);
    snprintf(what, sizeof what, "%s forward from bf16 (n %zu)", gelu ? "geglu" : "swiglu", n);
    fetch(x1, h1, n * 4), fetch(x2, h2, n * 4);
    expect_same_bits(what, x2, x1, n * 4, 4);
    fetch(y1, b1, nb * 2), fetch(y2, b2, nb * 2);
    expect_same_bits(what, y2, y1, nb * 2, 2);
    cuda_zero(b2, nb * 2);
    cuda_gated_forward_bf16(gelu, NULL, b2, cols, ld, dgb16, dub16, n);
    fetch(y2, b2, nb * 2);
    expect_same_bits(what, y2, y1, nb * 2, 2);
    if (gelu)
        cuda_geglu_backward(g1, u1, b1, c1, cols, ld, ddh, dg, du, n, 0);
    else
        cuda_swiglu_backward(g1, u1, b1, c1, cols, ld, ddh, dg, du, n, 0);
    cuda_gated_backward_bf16(gelu, g2, u2, b2, c2, cols, ld, ddh, dgb16, dub16, n, 0);
    /* dh as bf16 too (change 1l): the fp32-dh kernel's bits on dh rounded */
    {
        float *dhr = malloc(n * 4), *w1 = malloc(n * 4), *w2 = malloc(n * 4);
        uint16_t *dhb = malloc(n * 2), *v1 = malloc(nb * 2), *v2 = malloc(nb * 2);
        for (size_t i = 0; i < n; i++) {
            dhb[i] = linear_f32_to_bf16(dh[i]);
            dhr[i] = linear_bf16_to_f32(dhb[i]);
        }
        float *gdhr = dev_copy(dhr, n * 4), *g3 = dev_zero(n * 4), *u3 = dev_zero(n * 4);
        float *g4 = dev_zero(n * 4), *u4 = dev_zero(n * 4);
        uint16_t *gdhb = dev_copy(dhb, n * 2), *b3 = dev_zero(nb * 2), *b4 = dev_zero(nb * 2);
        cuda_gated_backward_bf16(gelu, g3, u3, b3, NULL, cols, ld, gdhr, dgb16, dub16, n, 0);
        cuda_gated_backward_bf16dh(gelu, g4, u4, b4, NULL, cols, ld, gdhb, dgb16, dub16, n, 0);
        snprintf(what, sizeof what, "%s backward, dh bf16 (n %zu)", gelu ? "geglu" : "swiglu", n);
        fetch(w1, g3, n * 4), fetch(w2, g4, n * 4);
        expect_same_bits(what, w2, w1, n * 4, 4);
        fetch(w1, u3, n * 4), fetch(w2, u4, n * 4);
        expect_same_bits(what, w2, w1, n * 4, 4);
        fetch(v1, b3, nb * 2), fetch(v2, b4, nb * 2);
        expect_same_bits(what, v2, v1, nb * 2, 2);
        cuda_free(gdhr), cuda_free(g3), cuda_free(u3), cuda_free(g4), cuda_free(u4);
        cuda_free(gdhb), cuda_free(b3), cuda_free(b4);
        free(dhr), free(w1), free(w2), free(dhb), free(v1), free(v2);
    }
    snprintf(what, sizeof what, "%s backward from bf16 (n %zu)", gelu ? "geglu" : "swiglu", n);
    fetch(x1, g1, n * 4), fetch(x2, g2, n * 4);
    expect_same_bits(what, x2, x1, n * 4, 4);
    fetch(x1, u1, n * 4), fetch(x2, u2, n * 4);
    expect_same_bits(what, x2, x1, n * 4, 4);
    cuda_zero(b2, nb * 2), cuda_zero(c2, nb * 2);
    cuda_gated_backward_bf16(gelu, NULL, NULL, b2, c2, cols, ld, ddh, dgb16, dub16, n, 0);
    fetch(y1, b1, nb * 2), fetch(y2, b2, nb * 2);
    expect_same_bits(what, y2, y1, nb * 2, 2);
    fetch(y1, c1, nb * 2), fetch(y2, c2, nb * 2);
    expect_same_bits(what, y2, y1, nb * 2, 2);
    cuda_free(dg), cuda_free(du), cuda_free(ddh), cuda_free(dgb16), cuda_free(dub16);
    cuda_free(h1), cuda_free(h2), cuda_free(g1), cuda_free(u1), cuda_free(g2), cuda_free(u2);
    cuda_free(b1), cuda_free(b2), cuda_free(c1), cuda_free(c2);
    free(g), free(u), free(dh), free(gb), free(ub), free(x1), free(x2), free(y1), free(y2);
}

static void gated_activations_match_cpu(void **state)
{
    (void)state;
    size_t sizes[] = {1, 255, 100003};
    for (size_t i = 0; i < 3; i++) {
        act_case("swiglu", ops_swiglu_forward, ops_swiglu_backward, cuda_swiglu_forward,
                 cuda_swiglu_backward, sizes[i]);
        act_case("geglu", ops_geglu_forward, ops_geglu_backward, cuda_geglu_forward,
                 cuda_geglu_backward, sizes[i]);
    }
    for (int gelu = 0; gelu < 2; gelu++) {
        gated_bf16_case(gelu, 255, 255, 0);
        gated_bf16_case(gelu, 97 * 40, 97, 120); /* rows of 97, 120 apart */
    }
}

static void softcap_matches_cpu(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 5);
    size_t n = 70001;
    float cap = 30.0f;
    float *x = fill(n, &r, 100.0f), *dx0 = fill(n, &r, 1.0f);
    float *y = dup(x, n), *dx = dup(dx0, n), *out = malloc(n * 4);
    ops_softcap(y, n, cap);
    ops_softcap_backward(dx, y, n, cap);
    float *gx = dev_copy(x, n * 4), *gdx = dev_copy(dx0, n * 4), *gy = dev_copy(y, n * 4);
    cuda_softcap(gx, n, cap);
    fetch(out, gx, n * 4);
    expect_close("softcap", out, y, n);
    /* the backward reads the CPU's capped values: 1 - (y/cap)^2 near the
     * cap would magnify an ulp of difference in y */
    cuda_softcap_backward(gdx, gy, n, cap);
    fetch(out, gdx, n * 4);
    expect_close("softcap backward", out, dx, n);
    cuda_free(gx), cuda_free(gdx), cuda_free(gy);
    free(x), free(dx0), free(y), free(dx), free(out);
}

/* ---- cross-entropy ----------------------------------------------------- */

/* M rows of V logits; the GPU's loss, hits and (with grad) gradient against
 * ops_xent_rows and ops_argmax_hits row by row. */
static void xent_case(int M, int V, int grad, int weighted)
{
    struct rng r;
    rng_seed(&r, (uint64_t)M * 7 + (uint64_t)V);
    size_t mv = (size_t)M * V;
    float *x = fill(mv, &r, 8.0f);
    int32_t *t = malloc((size_t)M * sizeof *t);
    float *w = malloc((size_t)M * sizeof *w), *wc = malloc((size_t)M * sizeof *wc);
    float dscale = 0.37f;
    for (int i = 0; i < M; i++) {
        t[i] = (int32_t)rng_below(&r, (uint64_t)V);
        w[i] = 0.25f + rng_uniform(&r);
        wc[i] = weighted ? dscale * w[i] : dscale;
        /* The top is raised by 1 only: a target with nearly all the
         * probability would leave its gradient p - 1 to cancellation, where
         * the CPU's own float sum of the row is the less exact side. */
        float *row = x + (size_t)i * V, top = row[0];
        for (int j = 1; j < V; j++)
            top = row[j] > top ? row[j] : top;
        if (i % 3 == 0) /* the target is the maximum: a hit */
            row[t[i]] = top + 1.0f;
        if (i % 3 == 1 && V > 1) { /* a tie at the top: only the lower id hits */
            int other = (t[i] + 1 + (int)rng_below(&r, (uint64_t)(V - 1))) % V;
            row[t[i]] = row[other] = top + 1.0f;
        }
    }
    float *ref = dup(x, mv);
    double *loss = malloc((size_t)M * sizeof *loss);
    int32_t *hits = malloc((size_t)M * sizeof *hits);
    for (int i = 0; i < M; i++)
        hits[i] = (int32_t)ops_argmax_hits(x + (size_t)i * V, t + i, 1, V);
    ops_xent_rows(ref, t, M, V, grad ? wc : NULL, loss);

    float *gx = dev_copy(x, mv * 4), *gw = dev_copy(w, (size_t)M * 4);
    int32_t *gt = dev_copy(t, (size_t)M * 4), *gh = dev_zero((size_t)M * 4);
    float *gl = dev_zero((size_t)M * 4);
    cuda_xent_rows(gx, gt, M, V, grad, dscale, weighted ? gw : NULL, gl, gh);
    float *hl = malloc((size_t)M * 4), *lossf = malloc((size_t)M * 4), *out = malloc(mv * 4);
    int32_t *hh = malloc((size_t)M * 4);
    fetch(hl, gl, (size_t)M * 4);
    fetch(hh, gh, (size_t)M * 4);
    fetch(out, gx, mv * 4);
    for (int i = 0; i < M; i++)
        lossf[i] = (float)loss[i];
    char what[96];
    snprintf(what, sizeof what, "xent loss (M %d, V %d)", M, V);
    expect_close(what, hl, lossf, (size_t)M);
    snprintf(what, sizeof what, "xent hits (M %d, V %d)", M, V);
    expect_same_bits(what, hh, hits, (size_t)M * 4, 4);
    int any = 0;
    for (int i = 0; i < M; i++)
        any += hits[i];
    assert_true(any > 0); /* the rows made to hit did */
    snprintf(what, sizeof what, "xent %s (M %d, V %d)", grad ? "gradient" : "logits kept", M, V);
    if (grad)
        expect_close(what, out, ref, mv);
    else
        expect_same_bits(what, out, x, mv * 4, 4);
    cuda_free(gx), cuda_free(gw), cuda_free(gt), cuda_free(gh), cuda_free(gl);
    free(x), free(t), free(w), free(wc), free(ref), free(loss), free(hits);
    free(hl), free(lossf), free(out), free(hh);
}

/* Change 1h: the loss kernel on bf16 logits (as the head's product writes
 * them) gives the fp32 kernel's losses and hits on the same logits rounded,
 * and its gradient written as bf16 has the bits of the fp32 gradient
 * rounded (the conversion pass it replaces). */
static void xent_bf16_case(int M, int V, int grad, int weighted)
{
    struct rng r;
    rng_seed(&r, (uint64_t)M * 11 + (uint64_t)V);
    size_t mv = (size_t)M * V;
    float *x = fill(mv, &r, 8.0f);
    uint16_t *xb = malloc(mv * 2), *want = malloc(mv * 2), *got = malloc(mv * 2);
    for (size_t i = 0; i < mv; i++) {
        xb[i] = linear_f32_to_bf16(x[i]);
        x[i] = linear_bf16_to_f32(xb[i]);
    }
    int32_t *t = malloc((size_t)M * sizeof *t);
    float *w = malloc((size_t)M * sizeof *w);
    for (int i = 0; i < M; i++) {
        t[i] = (int32_t)rng_below(&r, (uint64_t)V);
        w[i] = 0.25f + rng_uniform(&r);
        if (i % 2 == 0) { /* a hit: the target is raised to the top */
            x[(size_t)i * V + t[i]] = 9.0f;
            xb[(size_t)i * V + t[i]] = linear_f32_to_bf16(9.0f);
        }
    }
    float *gx = dev_copy(x, mv * 4), *gw = dev_copy(w, (size_t)M * 4);
    uint16_t *gxb = dev_copy(xb, mv * 2);
    int32_t *gt = dev_copy(t, (size_t)M * 4), *gh1 = dev_zero((size_t)M * 4),
            *gh2 = dev_zero((size_t)M * 4);
    float *gl1 = dev_zero((size_t)M * 4), *gl2 = dev_zero((size_t)M * 4);
    cuda_xent_rows(gx, gt, M, V, grad, 0.37f, weighted ? gw : NULL, gl1, gh1);
    cuda_xent_rows_bf16(gxb, gt, M, V, grad, 0.37f, weighted ? gw : NULL, gl2, gh2);
    float *l1 = malloc((size_t)M * 4), *l2 = malloc((size_t)M * 4), *out = malloc(mv * 4);
    int32_t *h1 = malloc((size_t)M * 4), *h2 = malloc((size_t)M * 4);
    fetch(l1, gl1, (size_t)M * 4), fetch(l2, gl2, (size_t)M * 4);
    fetch(h1, gh1, (size_t)M * 4), fetch(h2, gh2, (size_t)M * 4);
    fetch(out, gx, mv * 4), fetch(got, gxb, mv * 2);
    for (size_t i = 0; i < mv; i++)
        want[i] = grad ? linear_f32_to_bf16(out[i]) : xb[i];
    char what[96];
    snprintf(what, sizeof what, "bf16 xent loss (M %d, V %d)", M, V);
    expect_same_bits(what, l2, l1, (size_t)M * 4, 4);
    snprintf(what, sizeof what, "bf16 xent hits (M %d, V %d)", M, V);
    expect_same_bits(what, h2, h1, (size_t)M * 4, 4);
    snprintf(what, sizeof what, "bf16 xent %s (M %d, V %d)", grad ? "gradient" : "logits kept",
             M, V);
    expect_same_bits(what, got, want, mv * 2, 2);
    cuda_free(gx), cuda_free(gw), cuda_free(gxb), cuda_free(gt), cuda_free(gh1);
    cuda_free(gh2), cuda_free(gl1), cuda_free(gl2);
    free(x), free(xb), free(want), free(got), free(t), free(w), free(l1), free(l2), free(out);
    free(h1), free(h2);
}

static void xent_matches_cpu(void **state)
{
    (void)state;
    xent_case(6, 50257, 1, 1);
    xent_case(5, 50257, 1, 0);
    xent_case(37, 1000, 0, 0);
    xent_case(4, 3, 1, 1); /* fewer columns than threads */
    xent_bf16_case(6, 50257, 1, 1);
    xent_bf16_case(5, 1000, 1, 0);
    xent_bf16_case(7, 1000, 0, 0);
    xent_bf16_case(4, 3, 1, 1);
}

/* ---- embedding --------------------------------------------------------- */

static void embedding_matches_cpu(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 11);
    int V = 300, C = 257, n = 501;
    size_t vc = (size_t)V * C, nc = (size_t)n * C;
    float scale = sqrtf((float)C);
    float *tf = fill(vc, &r, 1.0f);
    uint16_t *tb = malloc(vc * sizeof *tb);
    for (size_t i = 0; i < vc; i++)
        tb[i] = linear_f32_to_bf16(tf[i] * 3.0f);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) /* repeats, and ids past EMB_PARTS */
        ids[i] = (int32_t)rng_below(&r, (uint64_t)V);
    /* model_embed: the row, times the scale */
    float *want_f = malloc(nc * 4), *want_b = malloc(nc * 4), *out = malloc(nc * 4);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < C; c++) {
            size_t s = (size_t)ids[i] * C + c;
            want_f[(size_t)i * C + c] = tf[s] * scale;
            want_b[(size_t)i * C + c] = linear_bf16_to_f32(tb[s]) * scale;
        }
    float *gtf = dev_copy(tf, vc * 4), *gout = dev_zero(nc * 4);
    uint16_t *gtb = dev_copy(tb, vc * 2);
    int32_t *gids = dev_copy(ids, (size_t)n * 4);
    cuda_embed_forward(gout, gids, n, gtf, NULL, C, scale);
    fetch(out, gout, nc * 4);
    expect_same_bits("embed forward, fp32 table", out, want_f, nc * 4, 4);
    cuda_embed_forward(gout, gids, n, NULL, gtb, C, scale);
    fetch(out, gout, nc * 4);
    expect_same_bits("embed forward, bf16 table", out, want_b, nc * 4, 4);

    /* model_pass.c's serial loop: rows in order, dw += d * sc */
    float *dout = fill(nc, &r, 1.0f), *dt0 = fill(vc, &r, 0.1f), *dt = dup(dt0, vc);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < C; c++)
            dt[(size_t)ids[i] * C + c] += dout[(size_t)i * C + c] * scale;
    float *gdout = dev_copy(dout, nc * 4), *gdt = dev_copy(dt0, vc * 4);
    float *hdt = malloc(vc * 4);
    cuda_embed_backward(gdt, gids, n, gdout, C, scale);
    fetch(hdt, gdt, vc * 4);
    expect_same_bits("embed backward", hdt, dt, vc * 4, 4);
    cuda_free(gtf), cuda_free(gout), cuda_free(gtb), cuda_free(gids), cuda_free(gdout);
    cuda_free(gdt);
    free(tf), free(tb), free(ids), free(want_f), free(want_b), free(out), free(dout), free(dt0);
    free(dt), free(hdt);
}

/* ---- elementwise and bias ---------------------------------------------- */

static void elementwise_and_bias_match_cpu(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 13);
    int N = 131, C = 77;
    size_t n = (size_t)N * C;
    float *a = fill(n, &r, 3.0f), *b = fill(n, &r, 3.0f), *bias = fill((size_t)C, &r, 1.0f);
    float *want = malloc(n * 4), *out = malloc(n * 4);
    float *ga = dev_copy(a, n * 4), *gb = dev_copy(b, n * 4), *gbias = dev_copy(bias, C * 4);
    float *gy = dev_zero(n * 4);

    ops_add(want, a, b, n);
    cuda_add(gy, ga, gb, n);
    fetch(out, gy, n * 4);
    expect_same_bits("add", out, want, n * 4, 4);
    cuda_add(ga, ga, gb, n); /* y aliasing a */
    fetch(out, ga, n * 4);
    expect_same_bits("add in place", out, want, n * 4, 4);

    ops_accumulate(want, b, n); /* want = a + 2b, ga holds a + b */
    cuda_accumulate(ga, gb, n);
    fetch(out, ga, n * 4);
    expect_same_bits("accumulate", out, want, n * 4, 4);

    for (size_t i = 0; i < n; i++)
        want[i] *= -0.75f;
    cuda_scale(ga, -0.75f, n);
    fetch(out, ga, n * 4);
    expect_same_bits("scale", out, want, n * 4, 4);

    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            want[(size_t)i * C + c] += bias[c];
    cuda_add_bias(ga, gbias, N, C);
    fetch(out, ga, n * 4);
    expect_same_bits("add_bias", out, want, n * 4, 4);

    /* linear_backward's bias gradient: column sums in row order */
    float *db = dup(bias, (size_t)C), *hdb = malloc(C * 4), *hdb2 = malloc(C * 4);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            db[c] += a[(size_t)i * C + c];
    float *gdb = dev_copy(bias, C * 4), *ga0 = dev_copy(a, n * 4);
    cuda_bias_backward(gdb, ga0, N, C);
    fetch(hdb, gdb, C * 4);
    expect_close("bias backward", hdb, db, (size_t)C);
    cuda_upload(gdb, bias, C * 4);
    cuda_bias_backward(gdb, ga0, N, C);
    fetch(hdb2, gdb, C * 4);
    expect_same_bits("bias backward, run twice", hdb2, hdb, C * 4, 4);

    cuda_zero(ga, n * 4 - 4); /* all but the last float */
    fetch(out, ga, n * 4);
    for (size_t i = 0; i + 1 < n; i++)
        assert_true(out[i] == 0.0f && !signbit(out[i]));
    assert_true(out[n - 1] == want[n - 1]);

    cuda_free(ga), cuda_free(gb), cuda_free(gbias), cuda_free(gy), cuda_free(gdb);
    cuda_free(ga0);
    free(a), free(b), free(bias), free(want), free(out), free(db), free(hdb), free(hdb2);
}

/* ---- bf16 -------------------------------------------------------------- */

/* LoRA folded into two padded matrices in one launch: scale B in its
 * columns, scale A under W, each value rounded as linear_f32_to_bf16
 * rounds scale times it; every other value of the matrices untouched.
 * The first fold writes A itself into its rows of a stacked A too (2c),
 * the second has none. */
static void lora_fold_writes_its_columns_and_rows(void **state)
{
    (void)state;
    enum { K = 2 };
    const int out[K] = {37, 5}, in[K] = {19, 70}, r[K] = {4, 3}, col0[K] = {19 + 4, 70};
    const float scale[K] = {2.0f, 0.3f};
    struct rng g;
    rng_seed(&g, 4242);
    struct cuda_lora_fold d[K];
    uint16_t *host[K], *dev[K];
    float *a[K], *b[K];
    size_t most = 0, n_as = (size_t)(r[0] + 2) * in[0];
    uint16_t *as_host = malloc(n_as * 2);
    assert_non_null(as_host);
    for (size_t i = 0; i < n_as; i++)
        as_host[i] = 0x7777;
    uint16_t *as_dev = dev_copy(as_host, n_as * 2);
    for (int k = 0; k < K; k++) {
        int ldw = col0[k] + r[k] + 5;
        size_t n = (size_t)(out[k] + r[k]) * ldw;
        host[k] = malloc(n * 2);
        assert_non_null(host[k]);
        for (size_t i = 0; i < n; i++)
            host[k][i] = 0x7777;
        dev[k] = dev_copy(host[k], n * 2);
        a[k] = fill((size_t)r[k] * in[k], &g, 1.0f);
        b[k] = fill((size_t)out[k] * r[k], &g, 1.0f);
        d[k] = (struct cuda_lora_fold){dev[k], dev_copy(a[k], (size_t)r[k] * in[k] * 4),
                                       dev_copy(b[k], (size_t)out[k] * r[k] * 4), ldw, col0[k],
                                       out[k], in[k], r[k], scale[k],
                                       k == 0 ? as_dev + in[0] : NULL}; /* past a row */
        size_t m = (size_t)r[k] * (out[k] + in[k]);
        most = m > most ? m : most;
    }
    struct cuda_lora_fold *dd = dev_copy(d, sizeof d);
    cuda_lora_fold(dd, K, most);
    for (int k = 0; k < K; k++) {
        int ldw = d[k].ldw;
        size_t n = (size_t)(out[k] + r[k]) * ldw;
        uint16_t *got = malloc(n * 2);
        assert_non_null(got);
        fetch(got, dev[k], n * 2);
        for (int o = 0; o < out[k]; o++)
            for (int j = 0; j < r[k]; j++)
                host[k][(size_t)o * ldw + col0[k] + j] =
                    linear_f32_to_bf16(scale[k] * b[k][(size_t)o * r[k] + j]);
        for (int j = 0; j < r[k]; j++)
            for (int c = 0; c < in[k]; c++)
                host[k][(size_t)(out[k] + j) * ldw + c] =
                    linear_f32_to_bf16(scale[k] * a[k][(size_t)j * in[k] + c]);
        expect_same_bits("lora fold", got, host[k], n * 2, 2);
        if (k == 0) { /* A's rows in the stack, the rows either side untouched */
            uint16_t *got_as = malloc(n_as * 2);
            assert_non_null(got_as);
            fetch(got_as, as_dev, n_as * 2);
            for (size_t i = 0; i < (size_t)r[0] * in[0]; i++)
                as_host[in[0] + i] = linear_f32_to_bf16(a[0][i]);
            expect_same_bits("stacked A", got_as, as_host, n_as * 2, 2);
            free(got_as);
        }
        free(got);
        cuda_free(dev[k]), cuda_free((void *)d[k].a), cuda_free((void *)d[k].b);
        free(host[k]), free(a[k]), free(b[k]);
    }
    cuda_free(dd);
    cuda_free(as_dev);
    free(as_host);
}

/* n bf16 values drawn from r (uniform in +-scale, rounded), and their
 * values as floats in *f (the caller frees both). */
static uint16_t *fill_bf16(size_t n, struct rng *r, float scale, float **f)
{
    uint16_t *h = malloc(n * 2 + 2);
    *f = malloc(n * sizeof(float) + 4);
    assert_non_null(h && *f);
    for (size_t i = 0; i < n; i++) {
        h[i] = linear_f32_to_bf16(scale * (2.0f * rng_uniform(r) - 1.0f));
        (*f)[i] = linear_bf16_to_f32(h[i]);
    }
    return h;
}

/* LoRA's dB and t = dy B in one pass (change 2e) against sums in double
 * on the same bf16 values: t rounded once (within a bf16 step of the
 * exact sum), written twice with the same bits and nothing else of its
 * rows touched; dB added into (fp32 tolerance). Shapes: r 1 to 64 (16
 * rounded up: zeros padding r), rows and columns off every block, row
 * strides wider than the rows and not multiples of 8 (the copies value by
 * value), one slice of column tiles and several (7680 x 600: five slices
 * of two tiles). Run twice: the same bits. */
static void lora_dbt_matches_cpu(void **state)
{
    (void)state;
    static const struct {
        int N, out, r, ldy, ldxa, ldt;
    } cases[] = {
        {1, 5, 1, 5, 1, 3},       {37, 70, 4, 75, 4, 4},    {300, 200, 16, 216, 48, 216},
        {600, 130, 40, 131, 41, 40}, {513, 64, 64, 64, 64, 70}, {7680, 600, 16, 608, 16, 16},
    };
    struct rng g;
    rng_seed(&g, 777);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int N = cases[c].N, out = cases[c].out, r = cases[c].r;
        int ldy = cases[c].ldy, ldxa = cases[c].ldxa, ldt = cases[c].ldt;
        float scale = 0.75f, *dyf, *bf, *xaf;
        uint16_t *dyh = fill_bf16((size_t)N * ldy, &g, 1.0f, &dyf);
        uint16_t *bh = fill_bf16((size_t)out * r, &g, 1.0f, &bf);
        uint16_t *xah = fill_bf16((size_t)N * ldxa, &g, 1.0f, &xaf);
        float *db0 = fill((size_t)out * r, &g, 1.0f);
        size_t nt = (size_t)N * ldt;
        uint16_t *t0 = malloc(nt * 2);
        assert_non_null(t0);
        for (size_t i = 0; i < nt; i++)
            t0[i] = 0x7777;
        uint16_t *dy = dev_copy(dyh, (size_t)N * ldy * 2), *B = dev_copy(bh, (size_t)out * r * 2);
        uint16_t *xa = dev_copy(xah, (size_t)N * ldxa * 2);
        float *scratch = dev_zero(cuda_lora_dbt_floats(N, out, r) * sizeof(float));
        uint16_t *tg[2][2];
        float *dbg[2], *db_got[2] = {malloc((size_t)out * r * 4), malloc((size_t)out * r * 4)};
        uint16_t *t_got[2][2];
        for (int run = 0; run < 2; run++) {
            dbg[run] = dev_copy(db0, (size_t)out * r * 4);
            for (int k = 0; k < 2; k++) {
                tg[run][k] = dev_copy(t0, nt * 2);
                t_got[run][k] = malloc(nt * 2);
            }
            cuda_lora_dbt(N, out, r, scale, dy, ldy, B, xa, ldxa, dbg[run], tg[run][0], ldt,
                          tg[run][1], ldt, scratch);
            fetch(db_got[run], dbg[run], (size_t)out * r * 4);
            for (int k = 0; k < 2; k++)
                fetch(t_got[run][k], tg[run][k], nt * 2);
        }
        float *db_want = malloc((size_t)out * r * 4), *t_want = malloc((size_t)N * r * 4);
        float *t_f = malloc((size_t)N * r * 4);
        assert_non_null(db_want && t_want && t_f);
        for (int o = 0; o < out; o++)
            for (int j = 0; j < r; j++) {
                double sum = 0.0;
                for (int n = 0; n < N; n++)
                    sum += (double)dyf[(size_t)n * ldy + o] * xaf[(size_t)n * ldxa + j];
                db_want[(size_t)o * r + j] = (float)(db0[(size_t)o * r + j] + scale * sum);
            }
        double worst = 0.0, ss = 0.0;
        for (int n = 0; n < N; n++)
            for (int j = 0; j < r; j++) {
                double sum = 0.0;
                for (int o = 0; o < out; o++)
                    sum += (double)dyf[(size_t)n * ldy + o] * bf[(size_t)o * r + j];
                t_want[(size_t)n * r + j] = (float)sum;
                t_f[(size_t)n * r + j] = linear_bf16_to_f32(t_got[0][0][(size_t)n * ldt + j]);
                ss += sum * sum;
            }
        double rms = sqrt(ss / ((double)N * r));
        for (size_t i = 0; i < (size_t)N * r; i++) {
            double err = fabs((double)t_f[i] - t_want[i]) / (fabs((double)t_want[i]) + 1e-3 * rms);
            worst = err > worst ? err : worst;
        }
        printf("lora dbt %d x %d, r %d: t within %.2e of the exact sum (a bf16 step 7.8e-3)\n",
               N, out, r, worst);
        assert_true(worst <= 8e-3);
        expect_close("lora dbt dB", db_got[0], db_want, (size_t)out * r);
        for (int n = 0; n < N; n++) /* past r in each row: untouched */
            for (int j = r; j < ldt; j++)
                assert_int_equal(t_got[0][0][(size_t)n * ldt + j], 0x7777);
        expect_same_bits("lora dbt t2", t_got[0][1], t_got[0][0], nt * 2, 2);
        expect_same_bits("lora dbt t again", t_got[1][0], t_got[0][0], nt * 2, 2);
        expect_same_bits("lora dbt dB again", db_got[1], db_got[0], (size_t)out * r * 4, 4);
        for (int run = 0; run < 2; run++) {
            cuda_free(dbg[run]);
            free(db_got[run]);
            for (int k = 0; k < 2; k++)
                cuda_free(tg[run][k]), free(t_got[run][k]);
        }
        cuda_free(dy), cuda_free(B), cuda_free(xa), cuda_free(scratch);
        free(dyh), free(bh), free(xah), free(dyf), free(bf), free(xaf), free(db0), free(t0);
        free(db_want), free(t_want), free(t_f);
    }
    assert_int_equal(cuda_lora_dbt_floats(8, 8, CUDA_LORA_DBT_MAX_R + 1), 0);
}

static void bf16_conversions_are_the_cpus(void **state)
{
    (void)state;
    static const uint32_t awkward[] = {
        0x00000000u, 0x80000000u,             /* +-0 */
        0x3f808000u, 0x3f818000u,             /* ties: to even, down and up */
        0x3f807fffu, 0x3f808001u,             /* either side of a tie */
        0x7f800000u, 0xff800000u,             /* +-Inf */
        0x7fc00000u, 0xffc00001u, 0x7f800001u, /* quiet and signalling NaNs */
        0x7fff8000u, 0x7f80ffffu,             /* NaNs that rounding would carry */
        0x00000001u, 0x00008000u, 0x00018000u, /* subnormals, ties among them */
        0x007fffffu, 0x807fffffu,             /* the largest subnormals */
        0x7f7fffffu, 0xff7fffffu,             /* the largest finite: round to Inf */
        0x7f7f7fffu, 0x3f800000u,
    };
    size_t na = sizeof awkward / sizeof awkward[0], n = na + 100000;
    float *x = malloc(n * 4);
    memcpy(x, awkward, na * 4);
    struct rng r;
    rng_seed(&r, 17);
    for (size_t i = na; i < n; i++) {
        uint32_t u = (uint32_t)rng_next(&r);
        memcpy(&x[i], &u, 4);
    }
    uint16_t *want = malloc(n * 2), *got = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        want[i] = linear_f32_to_bf16(x[i]);
    float *gx = dev_copy(x, n * 4);
    uint16_t *gh = dev_zero(n * 2);
    cuda_to_bf16(gh, gx, n);
    fetch(got, gh, n * 2);
    expect_same_bits("f32 to bf16", got, want, n * 2, 2);

    /* every bf16 value back to fp32 */
    uint16_t *all = malloc(65536 * 2);
    float *wf = malloc(65536 * 4), *gf = malloc(65536 * 4);
    for (uint32_t i = 0; i < 65536; i++) {
        all[i] = (uint16_t)i;
        wf[i] = linear_bf16_to_f32((uint16_t)i);
    }
    uint16_t *gall = dev_copy(all, 65536 * 2);
    float *gout = dev_zero(65536 * 4);
    cuda_from_bf16(gout, gall, 65536);
    fetch(gf, gout, 65536 * 4);
    expect_same_bits("bf16 to f32", gf, wf, 65536 * 4, 4);
    cuda_free(gx), cuda_free(gh), cuda_free(gall), cuda_free(gout);
    free(x), free(want), free(got), free(all), free(wf), free(gf);
}

/* ---- NF4 --------------------------------------------------------------- */

static void nf4_range_case(const struct cuda_nf4 *g, const struct nf4_tensor *t, size_t start,
                           size_t count, size_t dst_off)
{
    float *f = malloc(count * 4);
    uint16_t *want = malloc(count * 2), *got = malloc(count * 2);
    nf4_dequantize_range(t, start, count, f);
    for (size_t i = 0; i < count; i++)
        want[i] = linear_f32_to_bf16(f[i]);
    uint16_t *gd = dev_zero((count + dst_off) * 2);
    cuda_nf4_to_bf16(gd + dst_off, g, start, count);
    fetch(got, gd + dst_off, count * 2);
    char what[96];
    snprintf(what, sizeof what, "nf4 to bf16 [%zu, +%zu) at offset %zu", start, count, dst_off);
    expect_same_bits(what, got, want, count * 2, 2);
    cuda_free(gd);
    free(f), free(want), free(got);
}

static void nf4_matches_cpu(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 19);
    size_t n = 3 * NF4_GROUP_VALUES + 1000 + 37; /* three groups, a short one, an odd end */
    float *x = malloc(n * 4);
    for (size_t i = 0; i < n; i++) /* scales that differ block to block */
        x[i] = rng_normal(&r) * (0.01f + 0.05f * (float)((i / NF4_BLOCK) % 13));
    struct nf4_tensor *t = nf4_quantize(x, n);
    assert_non_null(t);
    struct cuda_nf4 g = nf4_to_device(t);
    nf4_range_case(&g, t, 0, n, 0);                      /* all of it */
    nf4_range_case(&g, t, 5 * NF4_BLOCK, 3 * NF4_BLOCK + 5, 0);
    nf4_range_case(&g, t, NF4_GROUP_VALUES, NF4_GROUP_VALUES, 0);
    nf4_range_case(&g, t, 7 * NF4_BLOCK, 1000, 3); /* a destination off 16 bytes */
    nf4_range_case(&g, t, (t->n_blocks - 1) * NF4_BLOCK, n - (t->n_blocks - 1) * NF4_BLOCK, 8);
    /* starts off the blocks (beyond the contract, which the trainer's row
     * chunks of a width not a multiple of 64 would need) */
    nf4_range_case(&g, t, 5 * NF4_BLOCK + 3, 300, 0);
    nf4_range_case(&g, t, 48 * 7, 48 * 20, 0);
    nf4_device_free(&g);
    nf4_free(t);
    free(x);
}

/* cuda_nf4_gemm against decode-then-product: W (rows x cols, the NF4
 * tensor's values, rows ldw = cols apart) decoded to bf16 as the CPU
 * decodes it (nf4_matches_cpu holds the GPU's decode to those bits), then
 * C = alpha A op(W) + beta C with fp32 sums in order along K, as
 * cuda_gemm_emu.cc sums. A (M,K) with row stride lda >= K. */
static void nf4_gemm_case(int tw, int M, int N, int K, int lda, float alpha, float beta)
{
    struct rng r;
    rng_seed(&r, (uint64_t)(M * 131 + N * 17 + K) * 2 + (uint64_t)tw);
    int rows = tw ? N : K, cols = tw ? K : N;
    size_t n = (size_t)rows * cols;
    float *x = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) /* scales that differ block to block */
        x[i] = rng_normal(&r) * (0.01f + 0.05f * (float)((i / NF4_BLOCK) % 13));
    struct nf4_tensor *t = nf4_quantize(x, n);
    assert_non_null(t);
    float *wf = malloc(n * 4 + 4);
    nf4_dequantize_range(t, 0, n, wf);
    for (size_t i = 0; i < n; i++) /* the bf16 a product reads */
        wf[i] = linear_bf16_to_f32(linear_f32_to_bf16(wf[i]));
    size_t na = (size_t)M * lda;
    uint16_t *ab = malloc(na * 2 + 2);
    for (size_t i = 0; i < na; i++)
        ab[i] = linear_f32_to_bf16(2.0f * rng_uniform(&r) - 1.0f);
    size_t nc = (size_t)M * N;
    float *c0 = fill(nc, &r, 1.0f), *want = dup(c0, nc), *got = malloc(nc * 4 + 4);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) {
                float w = tw ? wf[(size_t)j * cols + k] : wf[(size_t)k * cols + j];
                acc += linear_bf16_to_f32(ab[(size_t)i * lda + k]) * w;
            }
            float v = alpha * acc;
            float *c = &want[(size_t)i * N + j];
            *c = beta != 0.0f ? v + beta * *c : v;
        }
    struct cuda_nf4 g = nf4_to_device(t);
    uint16_t *ad = dev_copy(ab, na * 2);
    float *cd = dev_copy(c0, nc * 4);
    cuda_nf4_gemm(tw, M, N, K, alpha, ad, lda, &g, cols, beta, cd, N);
    fetch(got, cd, nc * 4);
    char what[128];
    snprintf(what, sizeof what, "nf4 product %s M %d N %d K %d (lda %d, beta %g)",
             tw ? "A W^T" : "A W", M, N, K, lda, (double)beta);
    expect_close(what, got, want, nc);
    /* the same inputs again: the same bits */
    float *again = malloc(nc * 4 + 4);
    assert_int_equal(cuda_upload(cd, c0, nc * 4), 0);
    cuda_nf4_gemm(tw, M, N, K, alpha, ad, lda, &g, cols, beta, cd, N);
    fetch(again, cd, nc * 4);
    expect_same_bits(what, again, got, nc * 4, 4);
    cuda_free(ad), cuda_free(cd);
    nf4_device_free(&g);
    nf4_free(t);
    free(x), free(wf), free(ab), free(c0), free(want), free(got), free(again);
}

/* The forward's y = x W^T (beta 0) and the input gradient's dx += dy W
 * (beta 1) at whole tiles (64 x 64, K steps of 32) and at edges in M, N
 * and K, rows of W that cross NF4 blocks (widths not multiples of 64), a
 * K of several steps with a tail, A's rows apart by more than K; runs
 * that take the kernel's whole-word loads (widths multiples of 8, lda of
 * 8) beside runs that cannot (the edges, odd widths). */
static void nf4_product_matches_decoded(void **state)
{
    (void)state;
    static const int shapes[][4] = {
        /* M, N, K, lda - K */
        {64, 64, 32, 0}, {1, 1, 1, 0}, {37, 70, 45, 0}, {130, 97, 200, 3},
        {5, 300, 17, 0}, {200, 24, 96, 0}, {64, 129, 65, 8}, {100, 80, 48, 0},
        {70, 40, 64, 8},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int tw = 0; tw < 2; tw++) {
            const int *sh = shapes[s];
            nf4_gemm_case(tw, sh[0], sh[1], sh[2], sh[2] + sh[3], 1.0f, tw ? 0.0f : 1.0f);
        }
    nf4_gemm_case(1, 33, 40, 70, 70, 0.5f, 1.0f); /* alpha and beta as cuda_gemm's */
    nf4_gemm_case(0, 33, 40, 70, 70, 2.0f, 0.0f);
}

/* ---- dropout ----------------------------------------------------------- */

static void dropout_case(float p, uint64_t seed, size_t e0, size_t n)
{
    struct rng r;
    rng_seed(&r, seed);
    float *x = fill(n, &r, 2.0f), *want = malloc(n * 4), *got = malloc(n * 4);
    struct linear_dropout d = {p, seed};
    size_t dropped = 0;
    for (size_t i = 0; i < n; i++) {
        float k = linear_dropout_keep(&d, e0 + i);
        dropped += k == 0.0f;
        want[i] = k * x[i];
    }
    float *gx = dev_copy(x, n * 4), *go = dev_zero(n * 4);
    cuda_dropout(go, gx, n, p, seed, e0);
    fetch(got, go, n * 4);
    char what[96];
    snprintf(what, sizeof what, "dropout p %g seed %llu e0 %zu", (double)p,
             (unsigned long long)seed, e0);
    expect_same_bits(what, got, want, n * 4, 4);
    if (p > 0.0f) /* the mask really drops about p of the values */
        assert_true(fabs((double)dropped / (double)n - (double)p) < 0.05);
    /* from x as bf16 (attention's output, change 1k): the bits of the fp32
     * kernel on x's values rounded */
    uint16_t *xb = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        xb[i] = linear_f32_to_bf16(x[i]);
        x[i] = linear_bf16_to_f32(xb[i]);
    }
    uint16_t *gxb = dev_copy(xb, n * 2);
    cuda_upload(gx, x, n * 4);
    cuda_dropout(go, gx, n, p, seed, e0);
    fetch(want, go, n * 4);
    cuda_dropout_bf16(go, gxb, n, p, seed, e0);
    fetch(got, go, n * 4);
    snprintf(what, sizeof what, "dropout from bf16, p %g seed %llu e0 %zu", (double)p,
             (unsigned long long)seed, e0);
    expect_same_bits(what, got, want, n * 4, 4);
    /* the seed read on the device (cuda_dropout_at: the trainer's, for
     * CUDA graphs) gives the same bits, from fp32 and from bf16 */
    uint64_t *gseed = dev_copy(&seed, sizeof seed);
    cuda_dropout_at(go, gx, n, p, gseed, e0);
    fetch(got, go, n * 4);
    snprintf(what, sizeof what, "dropout, seed on the device, p %g e0 %zu", (double)p, e0);
    expect_same_bits(what, got, want, n * 4, 4);
    cuda_dropout_bf16_at(go, gxb, n, p, gseed, e0);
    fetch(got, go, n * 4);
    expect_same_bits(what, got, want, n * 4, 4);
    cuda_free(gx), cuda_free(go), cuda_free(gxb), cuda_free(gseed);
    free(x), free(want), free(got), free(xb);
}

static void dropout_masks_are_the_cpus(void **state)
{
    (void)state;
    dropout_case(0.1f, 0x9e3779b97f4a7c15ULL, 0, 100003);
    dropout_case(0.05f, 42, 12345, 100003); /* an odd first element */
    dropout_case(0.5f, 7, ((size_t)1 << 33) + 1, 4097); /* elements past 2^32 */
    dropout_case(0.0f, 7, 0, 999);
}

/* ---- sum of squares and AdamW ------------------------------------------ */

static void sumsq_matches_cpu(void **state)
{
    (void)state;
    size_t sizes[] = {1, 4095, 4097, 5000003};
    struct rng r;
    rng_seed(&r, 23);
    for (size_t k = 0; k < 4; k++) {
        size_t n = sizes[k];
        float *g = fill(n, &r, 0.01f);
        double want = optim_grad_norm(g, n);
        want *= want;
        float *gg = dev_copy(g, n * 4);
        double *gs = dev_zero(sizeof(double));
        double got = 0.0, again = 0.0;
        cuda_sumsq(gs, gg, n);
        fetch(&got, gs, sizeof got);
        cuda_sumsq(gs, gg, n);
        fetch(&again, gs, sizeof again);
        if (!(fabs(got - want) <= RTOL * want))
            fail_msg("sumsq (n %zu): gpu %.17g cpu %.17g", n, got, want);
        expect_same_bits("sumsq, run twice", &again, &got, sizeof got, 8);
        cuda_free(gg), cuda_free(gs);
        free(g);
    }
}

static void adamw_is_the_cpus(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 29);
    size_t n = 100003, n_decay = 60001;
    float lr = 1e-3f, wd = 0.1f, gscale = 0.7f;
    float *p = fill(n, &r, 1.0f), *gp = dev_copy(p, n * 4);
    struct optim o;
    assert_int_equal(optim_init(&o, n, n_decay, wd), 0);
    float *gm = dev_zero(n * 4), *gv = dev_zero(n * 4), *gg = dev_zero(n * 4);
    float *hp = malloc(n * 4), *hm = malloc(n * 4), *hv = malloc(n * 4);
    for (int step = 0; step < 3; step++) {
        float *g = fill(n, &r, 0.05f);
        optim_adamw_step(&o, p, g, gscale, lr);
        cuda_upload(gg, g, n * 4);
        cuda_adamw(gp, gg, gm, gv, n, n_decay, gscale, lr, o.beta1, o.beta2, o.eps, wd, o.t);
        free(g);
    }
    fetch(hp, gp, n * 4);
    fetch(hm, gm, n * 4);
    fetch(hv, gv, n * 4);
    expect_same_bits("adamw m", hm, o.m, n * 4, 4);
    expect_same_bits("adamw v", hv, o.v, n * 4, 4);
    expect_same_bits("adamw p", hp, p, n * 4, 4);
    cuda_free(gp), cuda_free(gm), cuda_free(gv), cuda_free(gg);
    optim_free(&o);
    free(p), free(hp), free(hm), free(hv);
}

int main(void)
{
    if (cuda_device_count() == 0) {
        printf("skip: no GPU visible (cuda_device_count() is 0): test_cuda_ops checks the "
               "kernels only on a GPU\n");
        return 77;
    }
    if (cuda_ctx_open(0) != 0) {
        fprintf(stderr, "test_cuda_ops: %s\n", cuda_ctx_error());
        return 1;
    }
    printf("GPU: %s (compute capability %d.%d)\n", cuda_ctx_device()->name,
           cuda_ctx_device()->cc_major, cuda_ctx_device()->cc_minor);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rmsnorm_matches_cpu),
        cmocka_unit_test(gated_activations_match_cpu),
        cmocka_unit_test(softcap_matches_cpu),
        cmocka_unit_test(xent_matches_cpu),
        cmocka_unit_test(embedding_matches_cpu),
        cmocka_unit_test(elementwise_and_bias_match_cpu),
        cmocka_unit_test(bf16_conversions_are_the_cpus),
        cmocka_unit_test(lora_fold_writes_its_columns_and_rows),
        cmocka_unit_test(lora_dbt_matches_cpu),
        cmocka_unit_test(nf4_matches_cpu),
        cmocka_unit_test(nf4_product_matches_decoded),
        cmocka_unit_test(dropout_masks_are_the_cpus),
        cmocka_unit_test(sumsq_matches_cpu),
        cmocka_unit_test(adamw_is_the_cpus),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    cuda_ctx_close();
    return failed;
}
