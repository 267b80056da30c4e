/* linear.c - linear projections over fp32/bf16/NF4 weights with LoRA. */
#include "train/model/linear.h"

#include <stdbool.h>
#include <string.h>

#include "core/rng.h"
#include "train/kernels/gemm.h"
#include "train/model/ops.h"
#include "train/kernels/kern.h"

/* Columns per task for the bias gradient (a sum down the rows). */
#define COL_CHUNK 64

float linear_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t linear_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu))
        return (uint16_t)((u >> 16) | 0x40); /* keep NaN a NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

size_t linear_scratch_floats(int in)
{
    return (size_t)in * 16;
}

const float *linear_rows(const struct linear *l, int r0, int nr, float *buf)
{
    size_t start = (size_t)r0 * l->in, count = (size_t)nr * l->in;
    switch (l->kind) {
    case WK_F32:
        return l->w + start;
    case WK_BF16: {
        const uint16_t *src = l->wb + start;
        size_t blk = 65536, nb = (count + blk - 1) / blk;
#pragma omp parallel for schedule(static) if (nb > 1)
        for (size_t b = 0; b < nb; b++) {
            size_t s = b * blk;
            kern_bf16_to_f32(src + s, buf + s, count - s < blk ? count - s : blk);
        }
        return buf;
    }
    case WK_NF4:
        if (count > 65536)
            nf4_dequantize_parallel(l->wq, start, count, buf);
        else
            nf4_dequantize_range(l->wq, start, count, buf);
        return buf;
    }
    return NULL;
}

/* Rows of W that fit in the scratch at once. */
static int chunk_rows(const struct linear *l, const struct linear_scratch *s)
{
    if (l->kind == WK_F32 || gemm_has_bf16()) /* bf16 and NF4 products need no scratch */
        return l->out;
    size_t rows = s->deq_cap / (size_t)l->in;
    if (rows < 1)
        rows = 1;
    return rows > (size_t)l->out ? l->out : (int)rows;
}

/* On the avx512bf16 path every product with W takes bf16 inputs: a
 * frozen 16-bit or NF4 W as stored, a trained fp32 W rounded as packed. */
static bool bf16_products(const struct linear *l)
{
    (void)l;
    return gemm_has_bf16();
}

void linear_times_wt(const struct linear *l, int r0, int nr, const float *x, int ldx, int N,
                     float beta, float *y, int ldy, float *deq)
{
    if (bf16_products(l) && l->kind == WK_BF16) {
        gemm_bf16(0, 1, N, nr, l->in, 1.0f, x, ldx, l->wb + (size_t)r0 * l->in, NULL, l->in,
                  beta, y, ldy);
        return;
    }
    if (bf16_products(l) && l->kind == WK_NF4) { /* decoded as it is packed */
        struct gemm_nf4 q = {l->wq, (size_t)r0 * l->in};
        gemm_bf16_nf4(0, 1, N, nr, l->in, 1.0f, x, ldx, &q, l->in, beta, y, ldy);
        return;
    }
    const float *w = linear_rows(l, r0, nr, deq);
    if (bf16_products(l))
        gemm_bf16(0, 1, N, nr, l->in, 1.0f, x, ldx, NULL, w, l->in, beta, y, ldy);
    else
        gemm(0, 1, N, nr, l->in, 1.0f, x, ldx, w, l->in, beta, y, ldy);
}

void linear_times_w(const struct linear *l, int r0, int nr, const float *dy, int lddy, int N,
                    float beta, float *dx, float *deq)
{
    if (bf16_products(l) && l->kind == WK_BF16) {
        gemm_bf16(0, 0, N, l->in, nr, 1.0f, dy, lddy, l->wb + (size_t)r0 * l->in, NULL, l->in,
                  beta, dx, l->in);
        return;
    }
    if (bf16_products(l) && l->kind == WK_NF4) {
        struct gemm_nf4 q = {l->wq, (size_t)r0 * l->in};
        gemm_bf16_nf4(0, 0, N, l->in, nr, 1.0f, dy, lddy, &q, l->in, beta, dx, l->in);
        return;
    }
    const float *w = linear_rows(l, r0, nr, deq);
    if (bf16_products(l))
        gemm_bf16(0, 0, N, l->in, nr, 1.0f, dy, lddy, NULL, w, l->in, beta, dx, l->in);
    else
        gemm(0, 0, N, l->in, nr, 1.0f, dy, lddy, w, l->in, beta, dx, l->in);
}

void linear_weight_grad(const struct linear *l, int r0, int nr, const float *dy, int lddy,
                        const float *x, int N, float beta)
{
    float *dw = l->dw + (size_t)r0 * l->in;
    if (bf16_products(l))
        gemm_bf16(1, 0, nr, l->in, N, 1.0f, dy, lddy, NULL, x, l->in, beta, dw, l->in);
    else
        gemm(1, 0, nr, l->in, N, 1.0f, dy, lddy, x, l->in, beta, dw, l->in);
}

void linear_grad_touch(struct linear *l)
{
    if (l->dw && l->dw_fresh)
        ops_zero(l->dw, (size_t)l->out * l->in);
    l->dw_fresh = 0;
}

float linear_dropout_keep(const struct linear_dropout *d, size_t e)
{
    /* 32 bits of one 64-bit draw per element, two elements a draw */
    uint64_t word = rng_derive(d->seed, e >> 1);
    uint32_t u = (uint32_t)(e & 1 ? word >> 32 : word);
    uint32_t cut = (uint32_t)((double)d->p * 4294967296.0);
    return u < cut ? 0.0f : 1.0f / (1.0f - d->p);
}

static bool dropping(const struct linear *l, const struct linear_scratch *s)
{
    return l->r > 0 && s->dropout.p > 0.0f;
}

/* out (N,in) = v * keep/(1-p) (add: out += instead of =). */
static void apply_dropout(const struct linear_dropout *d, float *out, const float *v, int N,
                          int in, bool add)
{
#pragma omp parallel for schedule(static) if ((long)N * in > 32768)
    for (int n = 0; n < N; n++) {
        size_t row = (size_t)n * in;
        for (int i = 0; i < in; i++) {
            float k = linear_dropout_keep(d, row + i) * v[row + i];
            out[row + i] = add ? out[row + i] + k : k;
        }
    }
}

void linear_forward(const struct linear *l, float *y, const float *x, int N, float *xa,
                    struct linear_scratch *s)
{
    int step = chunk_rows(l, s);
    for (int r0 = 0; r0 < l->out; r0 += step) {
        int nr = l->out - r0 < step ? l->out - r0 : step;
        /* y[:, r0:r0+nr] = x (N,in) . w^T (in,nr) */
        linear_times_wt(l, r0, nr, x, l->in, N, 0.0f, y + r0, l->out, s->deq);
    }
    if (l->bias) {
#pragma omp parallel for schedule(static) if ((long)N * l->out > 32768)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < l->out; o++)
                y[(size_t)n * l->out + o] += l->bias[o];
    }
    if (l->r > 0) {
        if (dropping(l, s)) {
            apply_dropout(&s->dropout, s->drop, x, N, l->in, false);
            x = s->drop;
        }
        /* xa = x' A^T (N,r); y += scale xa B^T */
        gemm(0, 1, N, l->r, l->in, 1.0f, x, l->in,
                    l->la, l->in, 0.0f, xa, l->r);
        gemm(0, 1, N, l->out, l->r, l->scale, xa,
                    l->r, l->lb, l->r, 1.0f, y, l->out);
    }
}

void linear_backward(struct linear *l, float *dx, const float *dy, const float *x,
                     const float *xa, int N, struct linear_scratch *s)
{
    if (dx || l->dw) {
        int step = chunk_rows(l, s);
        for (int r0 = 0; r0 < l->out; r0 += step) {
            int nr = l->out - r0 < step ? l->out - r0 : step;
            if (dx) /* dx (N,in) += dy[:, r0:r0+nr] (N,nr) . w (nr,in) */
                linear_times_w(l, r0, nr, dy + r0, l->out, N, 1.0f, dx, s->deq);
            if (l->dw) /* dw[r0:r0+nr] (nr,in) (+)= dy[:, r0:]^T (nr,N) . x (N,in) */
                linear_weight_grad(l, r0, nr, dy + r0, l->out, x, N,
                                   l->dw_fresh ? 0.0f : 1.0f);
        }
        l->dw_fresh = 0;
    }
    if (l->dbias) {
        int chunks = (l->out + COL_CHUNK - 1) / COL_CHUNK;
#pragma omp parallel for schedule(static) if ((long)N * l->out > 32768)
        for (int ch = 0; ch < chunks; ch++) {
            int c0 = ch * COL_CHUNK;
            int c1 = c0 + COL_CHUNK < l->out ? c0 + COL_CHUNK : l->out;
            for (int n = 0; n < N; n++)
                for (int c = c0; c < c1; c++)
                    l->dbias[c] += dy[(size_t)n * l->out + c];
        }
    }
    if (l->r > 0) {
        float *t = s->tmp; /* (N,r) = dy B */
        gemm(0, 0, N, l->r, l->out, 1.0f, dy,
                    l->out, l->lb, l->r, 0.0f, t, l->r);
        if (l->dlb) /* dB (out,r) += scale dy^T xa */
            gemm(1, 0, l->out, l->r, N, l->scale, dy,
                        l->out, xa, l->r, 1.0f, l->dlb, l->r);
        bool drop = dropping(l, s);
        if (l->dla) { /* dA (r,in) += scale t^T x' */
            if (drop)
                apply_dropout(&s->dropout, s->drop, x, N, l->in, false);
            gemm(1, 0, l->r, l->in, N, l->scale, t,
                        l->r, drop ? s->drop : x, l->in, 1.0f, l->dla, l->in);
        }
        if (dx && drop) { /* dx += (scale t A) * keep/(1-p) */
            gemm(0, 0, N, l->in, l->r, l->scale, t,
                        l->r, l->la, l->in, 0.0f, s->drop, l->in);
            apply_dropout(&s->dropout, dx, s->drop, N, l->in, true);
        } else if (dx) { /* dx += scale t A */
            gemm(0, 0, N, l->in, l->r, l->scale, t,
                        l->r, l->la, l->in, 1.0f, dx, l->in);
        }
    }
}

void linear_merged_weight(const struct linear *l, float *w_out)
{
    const float *w = linear_rows(l, 0, l->out, w_out);
    if (w != w_out)
        memcpy(w_out, w, sizeof(float) * (size_t)l->out * l->in);
    linear_add_adapter(l, w_out);
}

void linear_add_adapter(const struct linear *l, float *w)
{
    if (l->r > 0)
        gemm(0, 0, l->out, l->in, l->r, l->scale,
                    l->lb, l->r, l->la, l->in, 1.0f, w, l->in);
}
