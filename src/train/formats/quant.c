/* quant.c - ggml block formats: alallo's encoders and the decoders (quant.h). */
#include "train/formats/quant.h"

#include <math.h>
#include <string.h>

#include "train/formats/safetensors.h"

int quant_scheme_parse(const char *name, enum quant_scheme *out)
{
    if (!name)
        return -1;
    if (strcmp(name, "q8_0") == 0)
        *out = QSCHEME_Q8_0;
    else if (strcmp(name, "q4_0") == 0)
        *out = QSCHEME_Q4_0;
    else if (strcmp(name, "q4_k_m") == 0)
        *out = QSCHEME_Q4_K_M;
    else
        return -1;
    return 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

enum quant_role quant_role_of(const char *hf_name, int tied)
{
    if (strcmp(hf_name, "lm_head.weight") == 0 ||
        (tied && strcmp(hf_name, "model.embed_tokens.weight") == 0))
        return QROLE_OUTPUT;
    if (ends_with(hf_name, ".v_proj.weight"))
        return QROLE_ATTN_V;
    if (ends_with(hf_name, ".down_proj.weight"))
        return QROLE_FFN_DOWN;
    if (ends_with(hf_name, ".mlp.gate.weight"))
        return QROLE_ROUTER;
    return QROLE_OTHER;
}

uint32_t quant_scheme_file_type(enum quant_scheme s)
{
    switch (s) {
    case QSCHEME_Q8_0: return 7;
    case QSCHEME_Q4_0: return 2;
    default: return 15;
    }
}

size_t quant_block_values(enum quant_type t)
{
    switch (t) {
    case QUANT_Q4_0:
    case QUANT_Q8_0: return 32;
    case QUANT_Q4_K:
    case QUANT_Q6_K: return 256;
    default: return 1;
    }
}

size_t quant_block_bytes(enum quant_type t)
{
    switch (t) {
    case QUANT_Q4_0: return 18;
    case QUANT_Q8_0: return 34;
    case QUANT_Q4_K: return 144;
    case QUANT_Q6_K: return 210;
    default: return 2;
    }
}

size_t quant_row_bytes(enum quant_type t, size_t n)
{
    size_t b = quant_block_values(t);
    return n % b ? 0 : n / b * quant_block_bytes(t);
}

enum quant_type quant_pick(enum quant_scheme s, enum quant_role role, size_t cols)
{
    enum quant_type t = s == QSCHEME_Q8_0 ? QUANT_Q8_0 : s == QSCHEME_Q4_0 ? QUANT_Q4_0 : QUANT_Q4_K;
    if (s == QSCHEME_Q4_K_M && role != QROLE_OTHER && role != QROLE_ROUTER)
        t = QUANT_Q6_K;
    if (cols % quant_block_values(t) != 0)
        t = t == QUANT_Q4_K ? QUANT_Q4_0 : t == QUANT_Q6_K ? QUANT_Q8_0 : t;
    if (cols % quant_block_values(t) != 0)
        t = QUANT_F16;
    return t;
}

/* ---- helpers --------------------------------------------------------------- */

static int nearest(float x)
{
    return (int)lrintf(x);
}

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static void put_f16(unsigned char *p, float v)
{
    uint16_t h = st_f32_to_f16(v);
    p[0] = (unsigned char)(h & 0xff);
    p[1] = (unsigned char)(h >> 8);
}

static float get_f16(const unsigned char *p)
{
    return st_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* ---- Q8_0, Q4_0 ------------------------------------------------------------- */

static void q8_0_block(const float *x, unsigned char *o)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    put_f16(o, amax / 127.0f);
    float d = get_f16(o);
    for (int j = 0; j < 32; j++)
        o[2 + j] = (unsigned char)(int8_t)(d > 0.0f ? clampi(nearest(x[j] / d), -127, 127) : 0);
}

static void q4_0_block(const float *x, unsigned char *o)
{
    /* the signed value of largest magnitude maps to -8, so the range's far
     * end keeps a level */
    float max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > fabsf(max))
            max = x[j];
    put_f16(o, max / -8.0f);
    float d = get_f16(o);
    for (int j = 0; j < 16; j++) {
        int lo = d != 0.0f ? clampi(nearest(x[j] / d) + 8, 0, 15) : 8;
        int hi = d != 0.0f ? clampi(nearest(x[j + 16] / d) + 8, 0, 15) : 8;
        o[2 + j] = (unsigned char)(lo | hi << 4);
    }
}

/* ---- Q4_K --------------------------------------------------------------------- */

static void scale_min_k4(int s, const unsigned char *q, int *sc, int *m)
{
    if (s < 4) {
        *sc = q[s] & 63;
        *m = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 0xF) | ((q[s - 4] >> 6) << 4);
        *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
}

static void q4_k_block(const float *x, unsigned char *o)
{
    float scale[8], mins[8], max_scale = 0.0f, max_min = 0.0f;
    for (int s = 0; s < 8; s++) {
        float lo = 0.0f, hi = -INFINITY;
        for (int j = 0; j < 32; j++) {
            lo = fminf(lo, x[32 * s + j]);
            hi = fmaxf(hi, x[32 * s + j]);
        }
        scale[s] = (hi - lo) / 15.0f;
        mins[s] = -lo;
        max_scale = fmaxf(max_scale, scale[s]);
        max_min = fmaxf(max_min, mins[s]);
    }
    memset(o, 0, 144);
    put_f16(o, max_scale / 63.0f);
    put_f16(o + 2, max_min / 63.0f);
    float d = get_f16(o), dmin = get_f16(o + 2);
    unsigned char *sb = o + 4, *qs = o + 16;
    for (int s = 0; s < 8; s++) {
        /* a scale rounded up keeps the block's top value in range */
        int ls = d > 0.0f ? clampi((int)ceilf(scale[s] / d - 1e-4f), 0, 63) : 0;
        int lm = dmin > 0.0f ? clampi(nearest(mins[s] / dmin), 0, 63) : 0;
        if (s < 4) {
            sb[s] = (unsigned char)ls;
            sb[s + 4] = (unsigned char)lm;
        } else {
            sb[s + 4] = (unsigned char)((ls & 0xF) | (lm & 0xF) << 4);
            sb[s - 4] |= (unsigned char)((ls >> 4) << 6);
            sb[s] |= (unsigned char)((lm >> 4) << 6);
        }
    }
    for (int s = 0; s < 8; s++) {
        int sc, m;
        scale_min_k4(s, sb, &sc, &m);
        float step = d * (float)sc, off = dmin * (float)m;
        for (int j = 0; j < 32; j++) {
            int q = step > 0.0f ? clampi(nearest((x[32 * s + j] + off) / step), 0, 15) : 0;
            unsigned char *b = &qs[32 * (s / 2) + j];
            *b |= (unsigned char)(s % 2 ? q << 4 : q);
        }
    }
}

static void q4_k_dequant(const unsigned char *o, float *y)
{
    float d = get_f16(o), dmin = get_f16(o + 2);
    const unsigned char *sb = o + 4, *qs = o + 16;
    for (int s = 0; s < 8; s++) {
        int sc, m;
        scale_min_k4(s, sb, &sc, &m);
        float step = d * (float)sc, off = dmin * (float)m;
        for (int j = 0; j < 32; j++) {
            unsigned char b = qs[32 * (s / 2) + j];
            int q = s % 2 ? b >> 4 : b & 0xF;
            y[32 * s + j] = step * (float)q - off;
        }
    }
}

/* ---- Q6_K --------------------------------------------------------------------- */

/* Where value i (< 256) of a Q6_K block keeps its bits. */
static void q6_k_place(int i, int *ql, int *ql_shift, int *qh, int *qh_shift)
{
    int half = i / 128, r = i % 128, k = r / 32, l = r % 32;
    *ql = 64 * half + l + 32 * (k & 1);
    *ql_shift = k >= 2 ? 4 : 0;
    *qh = 32 * half + l;
    *qh_shift = 2 * k;
}

static void q6_k_block(const float *x, unsigned char *o)
{
    float scale[16], max_scale = 0.0f;
    for (int g = 0; g < 16; g++) {
        float amax = 0.0f;
        for (int j = 0; j < 16; j++)
            amax = fmaxf(amax, fabsf(x[16 * g + j]));
        scale[g] = amax / 31.0f;
        max_scale = fmaxf(max_scale, scale[g]);
    }
    memset(o, 0, 210);
    unsigned char *ql = o, *qh = o + 128, *sc = o + 192;
    put_f16(o + 208, max_scale / 127.0f);
    float d = get_f16(o + 208);
    for (int g = 0; g < 16; g++) {
        int ls = d > 0.0f ? clampi((int)ceilf(scale[g] / d - 1e-4f), 0, 127) : 0;
        sc[g] = (unsigned char)(int8_t)ls;
        float step = d * (float)ls;
        for (int j = 0; j < 16; j++) {
            int i = 16 * g + j;
            int q = (step > 0.0f ? clampi(nearest(x[i] / step), -32, 31) : 0) + 32;
            int a, as, b, bs;
            q6_k_place(i, &a, &as, &b, &bs);
            ql[a] |= (unsigned char)((q & 0xF) << as);
            qh[b] |= (unsigned char)((q >> 4) << bs);
        }
    }
}

static void q6_k_dequant(const unsigned char *o, float *y)
{
    const unsigned char *ql = o, *qh = o + 128;
    const int8_t *sc = (const int8_t *)(o + 192);
    float d = get_f16(o + 208);
    for (int i = 0; i < 256; i++) {
        int a, as, b, bs;
        q6_k_place(i, &a, &as, &b, &bs);
        int q = ((ql[a] >> as) & 0xF) | ((qh[b] >> bs) & 3) << 4;
        y[i] = d * (float)sc[i / 16] * (float)(q - 32);
    }
}

/* ---- rows --------------------------------------------------------------------- */

void quant_row(enum quant_type t, const float *x, size_t n, void *out)
{
    unsigned char *o = out;
    size_t bv = quant_block_values(t), bb = quant_block_bytes(t);
    for (size_t b = 0; b < n / bv; b++, x += bv, o += bb) {
        switch (t) {
        case QUANT_Q8_0: q8_0_block(x, o); break;
        case QUANT_Q4_0: q4_0_block(x, o); break;
        case QUANT_Q4_K: q4_k_block(x, o); break;
        case QUANT_Q6_K: q6_k_block(x, o); break;
        default: put_f16(o, x[0]); break;
        }
    }
}

void quant_dequant_row(enum quant_type t, const void *in, size_t n, float *y)
{
    const unsigned char *o = in;
    size_t bv = quant_block_values(t), bb = quant_block_bytes(t);
    for (size_t b = 0; b < n / bv; b++, y += bv, o += bb) {
        switch (t) {
        case QUANT_Q8_0: {
            float d = get_f16(o);
            for (int j = 0; j < 32; j++)
                y[j] = d * (float)(int8_t)o[2 + j];
            break;
        }
        case QUANT_Q4_0: {
            float d = get_f16(o);
            for (int j = 0; j < 16; j++) {
                y[j] = d * (float)((o[2 + j] & 0xF) - 8);
                y[j + 16] = d * (float)((o[2 + j] >> 4) - 8);
            }
            break;
        }
        case QUANT_Q4_K: q4_k_dequant(o, y); break;
        case QUANT_Q6_K: q6_k_dequant(o, y); break;
        default: y[0] = get_f16(o); break;
        }
    }
}
