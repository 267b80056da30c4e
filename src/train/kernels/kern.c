/* kern.c - vectorized elementwise loops (see kern.h).
 *
 * AdamW needs a vector square root, which GCC will not emit for sqrtf
 * unless math-errno is off for the whole compile; so its AVX2 form is
 * written with intrinsics and chosen at run time, and the portable form is
 * plain C. The other loops vectorize as written (target_clones). */
#include "train/kernels/kern.h"

#include <immintrin.h>
#include <float.h>
#include <math.h>
#include <string.h>

#define KERN __attribute__((target_clones("arch=x86-64-v3", "default")))

static void adamw_scalar(float *p, const float *g, float *m, float *v, size_t n, float gscale,
                         float b1, float b2, float step, float rc2, float eps, float decay)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) * rc2 + eps);
    }
}

/* The same arithmetic, 8 lanes at a time, in the same order per element
 * (no fused multiply-add, so every lane rounds as the scalar form does). */
__attribute__((target("avx2"))) static void adamw_avx2(float *p, const float *g, float *m,
                                                       float *v, size_t n, float gscale,
                                                       float b1, float b2, float step,
                                                       float rc2, float eps, float decay)
{
    __m256 vgs = _mm256_set1_ps(gscale), vb1 = _mm256_set1_ps(b1), vb2 = _mm256_set1_ps(b2);
    __m256 vc1 = _mm256_set1_ps(1.0f - b1), vc2 = _mm256_set1_ps(1.0f - b2);
    __m256 vst = _mm256_set1_ps(step), vrc = _mm256_set1_ps(rc2), veps = _mm256_set1_ps(eps);
    __m256 vdk = _mm256_set1_ps(decay);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), vgs);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(m + i)),
                                  _mm256_mul_ps(vc1, gi));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(v + i)),
                                  _mm256_mul_ps(_mm256_mul_ps(vc2, gi), gi));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        __m256 den = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), vrc), veps);
        __m256 upd = _mm256_div_ps(_mm256_mul_ps(vst, mi), den);
        _mm256_storeu_ps(p + i, _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p + i), vdk), upd));
    }
    adamw_scalar(p + i, g + i, m + i, v + i, n - i, gscale, b1, b2, step, rc2, eps, decay);
}

void kern_adamw(float *p, const float *g, float *m, float *v, size_t n, float gscale, float b1,
                float b2, float step, float rc2, float eps, float decay)
{
    if (__builtin_cpu_supports("avx2"))
        adamw_avx2(p, g, m, v, n, gscale, b1, b2, step, rc2, eps, decay);
    else
        adamw_scalar(p, g, m, v, n, gscale, b1, b2, step, rc2, eps, decay);
}

KERN float kern_sumsq(const float *g, size_t n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; i++)
        s += g[i] * g[i];
    return s;
}

KERN void kern_bf16_to_f32(const uint16_t *src, float *dst, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        dst[i] = f;
    }
}

/* exp(x) for 8 lanes, |relative error| < 2e-7 on the range the loss uses
 * (x <= 0): 2^n by the exponent bits times a degree-6 polynomial of the
 * remainder after n = round(x / ln 2). Below -87.3 the result is 0, as
 * expf's is to within a denormal, so a sum over a row is unchanged. */
__attribute__((target("avx2,fma"))) static __m256 exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.3f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, y);
}

static float max_scalar(const float *x, size_t n)
{
    float mx = -FLT_MAX;
    for (size_t i = 0; i < n; i++)
        if (x[i] > mx)
            mx = x[i];
    return mx;
}

__attribute__((target("avx2"))) static float max_avx2(const float *x, size_t n)
{
    __m256 acc = _mm256_set1_ps(-FLT_MAX);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_max_ps(acc, _mm256_loadu_ps(x + i));
    float lane[8];
    _mm256_storeu_ps(lane, acc);
    float mx = max_scalar(x + i, n - i);
    for (int k = 0; k < 8; k++)
        if (lane[k] > mx)
            mx = lane[k];
    return mx;
}

float kern_max(const float *x, size_t n)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? max_avx2(x, n)
                                                                           : max_scalar(x, n);
}

static float exp_sum_scalar(const float *x, float *out, size_t n, float shift)
{
    float sum = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float e = expf(x[i] - shift);
        if (out)
            out[i] = e;
        sum += e;
    }
    return sum;
}

/* Eight running sums, one per lane, added in lane order at the end: a
 * fixed order, so the same row gives the same bits every time. */
__attribute__((target("avx2,fma"))) static float exp_sum_avx2(const float *x, float *out,
                                                              size_t n, float shift)
{
    __m256 vs = _mm256_set1_ps(shift), acc = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
        if (out)
            _mm256_storeu_ps(out + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float lane[8];
    _mm256_storeu_ps(lane, acc);
    float sum = 0.0f;
    for (int k = 0; k < 8; k++)
        sum += lane[k];
    for (; i < n; i++) {
        float tail[8] = {0}, res[8];
        tail[0] = x[i] - shift;
        _mm256_storeu_ps(res, exp8(_mm256_loadu_ps(tail)));
        if (out)
            out[i] = res[0];
        sum += res[0];
    }
    return sum;
}

float kern_exp_sum(const float *x, float *out, size_t n, float shift)
{
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return exp_sum_avx2(x, out, n, shift);
    return exp_sum_scalar(x, out, n, shift);
}

static void swiglu_fwd_scalar(float *h, const float *g, const float *u, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = g[i];
        float s = 1.0f / (1.0f + expf(-x));
        h[i] = x * s * u[i];
    }
}

static void swiglu_bwd_scalar(float *dg, float *du, const float *dh, const float *g,
                              const float *u, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = g[i];
        float s = 1.0f / (1.0f + expf(-x));
        float silu = x * s;
        /* d silu/dx = s (1 + x (1 - s)) */
        dg[i] += dh[i] * u[i] * s * (1.0f + x * (1.0f - s));
        du[i] += dh[i] * silu;
    }
}

/* sigmoid(x) = 1 / (1 + exp(-x)) on 8 lanes. */
__attribute__((target("avx2,fma"))) static __m256 sigmoid8(__m256 x)
{
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(one, _mm256_add_ps(one, e));
}

/* The tail of n % 8 goes through the same lanes (zero padded), so every
 * element gets the same arithmetic wherever it sits. */
__attribute__((target("avx2,fma"))) static void swiglu_fwd_avx2(float *h, const float *g,
                                                                const float *u, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        size_t k = n - i < 8 ? n - i : 8;
        float gb[8] = {0}, ub[8] = {0}, hb[8];
        const float *gp = g + i, *up = u + i;
        if (k < 8) {
            memcpy(gb, gp, k * sizeof(float));
            memcpy(ub, up, k * sizeof(float));
            gp = gb;
            up = ub;
        }
        __m256 x = _mm256_loadu_ps(gp);
        __m256 y = _mm256_mul_ps(_mm256_mul_ps(x, sigmoid8(x)), _mm256_loadu_ps(up));
        if (k == 8) {
            _mm256_storeu_ps(h + i, y);
        } else {
            _mm256_storeu_ps(hb, y);
            memcpy(h + i, hb, k * sizeof(float));
        }
    }
}

__attribute__((target("avx2,fma"))) static void swiglu_bwd_avx2(float *dg, float *du,
                                                                const float *dh, const float *g,
                                                                const float *u, size_t n)
{
    __m256 one = _mm256_set1_ps(1.0f);
    for (size_t i = 0; i < n; i += 8) {
        size_t k = n - i < 8 ? n - i : 8;
        float b[5][8] = {{0}};
        const float *gp = g + i, *up = u + i, *hp = dh + i;
        float *dgp = dg + i, *dup = du + i;
        if (k < 8) {
            memcpy(b[0], gp, k * sizeof(float));
            memcpy(b[1], up, k * sizeof(float));
            memcpy(b[2], hp, k * sizeof(float));
            memcpy(b[3], dgp, k * sizeof(float));
            memcpy(b[4], dup, k * sizeof(float));
            gp = b[0];
            up = b[1];
            hp = b[2];
            dgp = b[3];
            dup = b[4];
        }
        __m256 x = _mm256_loadu_ps(gp), s = sigmoid8(x), d = _mm256_loadu_ps(hp);
        /* d silu/dx = s (1 + x (1 - s)) */
        __m256 ds = _mm256_mul_ps(s, _mm256_add_ps(one, _mm256_mul_ps(x, _mm256_sub_ps(one, s))));
        __m256 a = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_loadu_ps(up)), ds);
        _mm256_storeu_ps(dgp, _mm256_add_ps(_mm256_loadu_ps(dgp), a));
        _mm256_storeu_ps(dup, _mm256_add_ps(_mm256_loadu_ps(dup),
                                            _mm256_mul_ps(d, _mm256_mul_ps(x, s))));
        if (k < 8) {
            memcpy(dg + i, b[3], k * sizeof(float));
            memcpy(du + i, b[4], k * sizeof(float));
        }
    }
}

void kern_swiglu_forward(float *h, const float *g, const float *u, size_t n)
{
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        swiglu_fwd_avx2(h, g, u, n);
    else
        swiglu_fwd_scalar(h, g, u, n);
}

void kern_swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u,
                          size_t n)
{
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        swiglu_bwd_avx2(dg, du, dh, g, u, n);
    else
        swiglu_bwd_scalar(dg, du, dh, g, u, n);
}
