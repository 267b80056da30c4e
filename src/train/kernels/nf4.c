/* nf4.c - NF4 quantization with double-quantized scales (see nf4.h). */
#include "train/kernels/nf4.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

const float nf4_levels[16] = {
    -1.0f,       -0.6961928f, -0.5250731f, -0.3949175f, -0.2844414f, -0.1847734f,
    -0.0910500f, 0.0f,        0.0795803f,  0.1609302f,  0.2461123f,  0.3379152f,
    0.4407098f,  0.5626170f,  0.7229568f,  1.0f,
};

int nf4_nearest(float v)
{
    if (v != v) /* NaN: zero */
        return 7;
    /* The level index is the number of midpoints between neighbouring
     * levels at or below v (ties go up): fifteen compares, no
     * data-dependent jumps. */
    int i = 0;
    for (int k = 0; k < 15; k++)
        i += v >= 0.5f * (nf4_levels[k] + nf4_levels[k + 1]);
    return i;
}

void nf4_free(struct nf4_tensor *t)
{
    if (!t)
        return;
    free(t->codes);
    free(t->scale_codes);
    free(t->group_mean);
    free(t->group_absmax);
    free(t);
}

size_t nf4_bytes(const struct nf4_tensor *t)
{
    return (t->n + 1) / 2 + t->n_blocks + 2 * t->n_groups * sizeof(float) + sizeof *t;
}

float nf4_block_scale(const struct nf4_tensor *t, size_t b)
{
    size_t g = b / NF4_SCALE_GROUP;
    return t->group_mean[g] + (float)t->scale_codes[b] * (t->group_absmax[g] / 127.0f);
}

struct nf4_tensor *nf4_create(size_t n)
{
    struct nf4_tensor *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->n = n;
    t->n_blocks = (n + NF4_BLOCK - 1) / NF4_BLOCK;
    t->n_groups = (t->n_blocks + NF4_SCALE_GROUP - 1) / NF4_SCALE_GROUP;
    t->codes = calloc((n + 1) / 2 + 1, 1);
    t->scale_codes = calloc(t->n_blocks + 1, 1);
    t->group_mean = calloc(t->n_groups + 1, sizeof(float));
    t->group_absmax = calloc(t->n_groups + 1, sizeof(float));
    if (!t->codes || !t->scale_codes || !t->group_mean || !t->group_absmax) {
        nf4_free(t);
        return NULL;
    }
    return t;
}

/* Encodes one group g from x (its values, starting at the group's first). */
static void encode_group(struct nf4_tensor *t, size_t g, const float *x)
{
    size_t b0 = g * NF4_SCALE_GROUP;
    size_t b1 = b0 + NF4_SCALE_GROUP < t->n_blocks ? b0 + NF4_SCALE_GROUP : t->n_blocks;
    float absmax[NF4_SCALE_GROUP];
    double mean = 0.0;
    for (size_t b = b0; b < b1; b++) {
        size_t s = b * NF4_BLOCK, e = s + NF4_BLOCK < t->n ? s + NF4_BLOCK : t->n;
        float m = 0.0f;
        for (size_t i = s; i < e; i++) {
            float a = fabsf(x[i - b0 * NF4_BLOCK]);
            if (a > m)
                m = a;
        }
        absmax[b - b0] = m;
        mean += m;
    }
    float gm = (float)(mean / (double)(b1 - b0));
    float ga = 0.0f;
    for (size_t b = b0; b < b1; b++)
        if (fabsf(absmax[b - b0] - gm) > ga)
            ga = fabsf(absmax[b - b0] - gm);
    t->group_mean[g] = gm;
    t->group_absmax[g] = ga;
    for (size_t b = b0; b < b1; b++) {
        float c = ga > 0.0f ? roundf((absmax[b - b0] - gm) / ga * 127.0f) : 0.0f;
        t->scale_codes[b] = (int8_t)(c > 127.0f ? 127 : c < -127.0f ? -127 : c);
    }
    /* Values are coded against the scale as it will be read back, so that
     * the scale's own rounding does not add to the error twice. */
    for (size_t b = b0; b < b1; b++) {
        float s = nf4_block_scale(t, b);
        float inv = s != 0.0f ? 1.0f / s : 0.0f;
        size_t e = (b + 1) * NF4_BLOCK < t->n ? (b + 1) * NF4_BLOCK : t->n;
        for (size_t i = b * NF4_BLOCK; i < e; i++) {
            int q = nf4_nearest(x[i - b0 * NF4_BLOCK] * inv);
            if (i % 2 == 0)
                t->codes[i / 2] = (uint8_t)(q << 4);
            else
                t->codes[i / 2] |= (uint8_t)q;
        }
    }
}

int nf4_encode(struct nf4_tensor *t, size_t start, const float *x, size_t count)
{
    if (start % NF4_GROUP_VALUES || start > t->n || count > t->n - start)
        return -1;
    if (count % NF4_GROUP_VALUES && start + count != t->n)
        return -1;
    size_t g0 = start / NF4_GROUP_VALUES;
    size_t g1 = (start + count + NF4_GROUP_VALUES - 1) / NF4_GROUP_VALUES;
#pragma omp parallel for schedule(static)
    for (size_t g = g0; g < g1; g++)
        encode_group(t, g, x + (g - g0) * NF4_GROUP_VALUES);
    return 0;
}

struct nf4_tensor *nf4_quantize(const float *x, size_t n)
{
    struct nf4_tensor *t = nf4_create(n);
    if (t && nf4_encode(t, 0, x, n) != 0) {
        nf4_free(t);
        return NULL;
    }
    return t;
}

/* Whole halves of a block (32 values from byte c, `halves` of them) with
 * AVX-512: the 16 scaled levels sit in one register and each nibble picks
 * its lane; the values are the scalar loop's (the same products, looked
 * up). */
__attribute__((target("avx512f"))) static void block_avx512(const uint8_t *c, const float *lv,
                                                            int halves, float *out)
{
    __m512 table = _mm512_loadu_ps(lv);
    const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22,
                                            7, 23);
    const __m512i second = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14,
                                             30, 15, 31);
    for (int h = 0; h < halves; h++) {
        __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c + 16 * h)));
        __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
        __m512 lo = _mm512_permutexvar_ps(_mm512_and_si512(bytes, _mm512_set1_epi32(15)), table);
        /* element 2j is byte j's high nibble, 2j+1 its low one */
        _mm512_storeu_ps(out + 32 * h, _mm512_permutex2var_ps(hi, first, lo));
        _mm512_storeu_ps(out + 32 * h + 16, _mm512_permutex2var_ps(hi, second, lo));
    }
}

/* Whether the CPU runs block_avx512: looked up once per process, whichever
 * thread dequantizes first (pthread_once), so threads never race on it. */
static pthread_once_t wide_once = PTHREAD_ONCE_INIT;
static bool wide_cpu;

static void look_up_wide(void)
{
    __builtin_cpu_init();
    wide_cpu = __builtin_cpu_supports("avx512f") != 0;
}

void nf4_dequantize_range(const struct nf4_tensor *t, size_t start, size_t count, float *out)
{
    pthread_once(&wide_once, look_up_wide);
    const bool wide = wide_cpu;
    size_t i = start, end = start + count;
    while (i < end) {
        size_t b = i / NF4_BLOCK;
        size_t be = (b + 1) * NF4_BLOCK < end ? (b + 1) * NF4_BLOCK : end;
        float s = nf4_block_scale(t, b);
        float lv[16];
        for (int k = 0; k < 16; k++)
            lv[k] = nf4_levels[k] * s;
        if (wide && i % 32 == 0 && be - i >= 32) { /* whole halves of the block */
            int halves = (int)((be - i) / 32);
            block_avx512(t->codes + i / 2, lv, halves, out);
            out += 32 * halves;
            i += 32 * (size_t)halves;
            if (i == be)
                continue;
        }
        if (i % 2 == 1) {
            *out++ = lv[t->codes[i / 2] & 15];
            i++;
        }
        /* Whole bytes: two values each. */
        const uint8_t *c = t->codes + i / 2;
        size_t pairs = (be - i) / 2;
        for (size_t p = 0; p < pairs; p++) {
            out[2 * p] = lv[c[p] >> 4];
            out[2 * p + 1] = lv[c[p] & 15];
        }
        out += 2 * pairs;
        i += 2 * pairs;
        if (i < be) {
            *out++ = lv[t->codes[i / 2] >> 4];
            i++;
        }
    }
}

/* n <= 64 fp32 values as bf16, rounded to nearest even (vcvtneps2bf16). */
__attribute__((target("avx512f,avx512bf16"))) static void to_bf16(const float *x, size_t n,
                                                                   uint16_t *out)
{
    for (size_t k = 0; k < n; k += 16) {
        size_t m = n - k < 16 ? n - k : 16;
        __mmask16 mask = (__mmask16)(m == 16 ? 0xffff : (1u << m) - 1);
        __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x + k));
        uint16_t tmp[16];
        _mm256_storeu_si256((__m256i *)tmp, h);
        memcpy(out + k, tmp, m * sizeof *out);
    }
}

/* Values [start, start + 32 * halves) straight to bf16 (start a multiple
 * of 32, in range): the scaled levels are the scalar loop's products
 * (one fp32 multiply each, in a register), rounded as to_bf16 rounds. */
__attribute__((target("avx512f,avx512bf16"))) static void
halves_bf16(const struct nf4_tensor *t, size_t start, size_t halves, uint16_t *out)
{
    const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22,
                                            7, 23);
    const __m512i second = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14,
                                             30, 15, 31);
    const __m512 levels = _mm512_loadu_ps(nf4_levels);
    size_t b = SIZE_MAX;
    __m512 table = levels;
    for (size_t h = 0; h < halves; h++) {
        size_t at = start + 32 * h;
        if (at / NF4_BLOCK != b) {
            b = at / NF4_BLOCK;
            table = _mm512_mul_ps(levels, _mm512_set1_ps(nf4_block_scale(t, b)));
        }
        __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(t->codes + at / 2)));
        __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
        __m512 lo = _mm512_permutexvar_ps(_mm512_and_si512(bytes, _mm512_set1_epi32(15)), table);
        __m512 v0 = _mm512_permutex2var_ps(hi, first, lo);
        __m512 v1 = _mm512_permutex2var_ps(hi, second, lo);
        _mm512_storeu_si512((void *)(out + 32 * h), (__m512i)_mm512_cvtne2ps_pbh(v1, v0));
    }
}

void nf4_dequantize_bf16_range(const struct nf4_tensor *t, size_t start, size_t count,
                               uint16_t *out)
{
    if (start % 32 == 0 && count >= 32) { /* whole halves of blocks, in registers */
        size_t halves = count / 32;
        halves_bf16(t, start, halves, out);
        start += 32 * halves;
        out += 32 * halves;
        count -= 32 * halves;
    }
    float tmp[NF4_BLOCK];
    /* a block (or the part of one in range) at a time, through tmp */
    for (size_t i = 0; i < count;) {
        size_t at = start + i, end = (at / NF4_BLOCK + 1) * NF4_BLOCK - start;
        size_t n = (end < count ? end : count) - i;
        nf4_dequantize_range(t, at, n, tmp);
        to_bf16(tmp, n, out + i);
        i += n;
    }
}

void nf4_dequantize_bf16(const struct nf4_tensor *t, size_t start, size_t count, uint16_t *out)
{
    size_t chunk = 64 * NF4_BLOCK;
    size_t nchunks = (count + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (size_t c = 0; c < nchunks; c++) {
        size_t s = c * chunk, e = s + chunk < count ? s + chunk : count;
        nf4_dequantize_bf16_range(t, start + s, e - s, out + s);
    }
}

void nf4_dequantize_parallel(const struct nf4_tensor *t, size_t start, size_t count,
                             float *out)
{
    /* Chunks of whole blocks so that each value is decoded once. */
    size_t chunk = 64 * NF4_BLOCK;
    size_t nchunks = (count + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        size_t s = c * chunk;
        size_t k = s + chunk < count ? chunk : count - s;
        nf4_dequantize_range(t, start + s, k, out + s);
    }
}
