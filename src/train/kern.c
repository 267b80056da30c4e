/* kern.c - vectorized elementwise loops (see kern.h).
 *
 * AdamW needs a vector square root, which GCC will not emit for sqrtf
 * unless math-errno is off for the whole compile; so its AVX2 form is
 * written with intrinsics and chosen at run time, and the portable form is
 * plain C. The other loops vectorize as written (target_clones). */
#include "train/kern.h"

#include <immintrin.h>
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
