/* ops.c - decoder layers, forward and backward (see ops.h). */
#include "train/model/ops.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/kernels/gemm.h"
#include "train/kernels/kern.h"

/* Below this many values an op runs on the calling thread: a parallel
 * region costs microseconds, and far more when the machine is busy. */
#define PAR_MIN 32768

/* Columns per task when a reduction runs down the rows of a matrix: each
 * task owns its columns, so the sum order is fixed whatever the threads. */
#define COL_CHUNK 64

void ops_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w,
                         int N, int C, float eps)
{
#pragma omp parallel for schedule(static) if ((long)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C;
        float *yr = y + (size_t)n * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++)
            ss += xr[c] * xr[c];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        rstd[n] = r;
#pragma omp simd
        for (int c = 0; c < C; c++)
            yr[c] = xr[c] * r * w[c];
    }
}

void ops_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x,
                          const float *w, const float *rstd, int N, int C)
{
    /* y_c = x_c r w_c with r = (mean(x^2)+eps)^-1/2, so
     * dx_c = r w_c dy_c - r^3 x_c / C * sum_j(w_j dy_j x_j). */
#pragma omp parallel for schedule(static) if ((long)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C;
        const float *dyr = dy + (size_t)n * C;
        float *dxr = dx + (size_t)n * C;
        float r = rstd[n];
        float dot = 0.0f;
        for (int c = 0; c < C; c++)
            dot += w[c] * dyr[c] * xr[c];
        float k = r * r * r * dot / (float)C;
#pragma omp simd
        for (int c = 0; c < C; c++)
            dxr[c] += r * w[c] * dyr[c] - k * xr[c];
    }
    if (!dw)
        return;
    int chunks = (C + COL_CHUNK - 1) / COL_CHUNK;
#pragma omp parallel for schedule(static) if ((long)N * C > PAR_MIN)
    for (int ch = 0; ch < chunks; ch++) {
        int c0 = ch * COL_CHUNK;
        int c1 = c0 + COL_CHUNK < C ? c0 + COL_CHUNK : C;
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)n * C;
            const float *dyr = dy + (size_t)n * C;
            float r = rstd[n];
#pragma omp simd
            for (int c = c0; c < c1; c++)
                dw[c] += dyr[c] * xr[c] * r;
        }
    }
}

void ops_rope_tables(float *cos_t, float *sin_t, int T, int hd, float theta,
                     const float *div)
{
    int half = hd / 2;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            /* Angles in double: at long positions float loses the phase. */
            double inv = pow((double)theta, -2.0 * i / (double)hd);
            if (div)
                inv /= (double)div[i];
            double a = (double)t * inv;
            cos_t[(size_t)t * half + i] = (float)cos(a);
            sin_t[(size_t)t * half + i] = (float)sin(a);
        }
    }
}

/* sign = +1 rotates by +angle (forward), -1 by -angle (the transpose).
 * seg (B*T, or NULL for all zero): row t of a sequence is at position
 * pos0 + t - seg[t], so packed examples each start again at position 0.
 * Only the first rot dims of each head of hd turn; the rest pass. */
static void rope_apply(float *x, int B, int T, int nh, int hd, int rot, int pos0,
                       const int32_t *seg, const float *cos_t, const float *sin_t, float sign)
{
    int half = rot / 2;
#pragma omp parallel for schedule(static) if ((long)B * T * nh * rot > PAR_MIN)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T + pos0 - (seg ? seg[bt] : 0);
        const float *cr = cos_t + (size_t)t * half;
        const float *sr = sin_t + (size_t)t * half;
        for (int h = 0; h < nh; h++) {
            float *v = x + ((size_t)bt * nh + h) * hd;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                float c = cr[i], s = sign * sr[i];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}

void ops_rope_forward(float *x, int B, int T, int nh, int hd, int rot, int pos0,
                      const float *cos_t, const float *sin_t)
{
    rope_apply(x, B, T, nh, hd, rot, pos0, NULL, cos_t, sin_t, 1.0f);
}

void ops_rope_backward(float *dx, int B, int T, int nh, int hd, int rot, int pos0,
                       const float *cos_t, const float *sin_t)
{
    rope_apply(dx, B, T, nh, hd, rot, pos0, NULL, cos_t, sin_t, -1.0f);
}

void ops_rope_forward_seg(float *x, int B, int T, int nh, int hd, int rot,
                          const int32_t *seg,
                          const float *cos_t, const float *sin_t)
{
    rope_apply(x, B, T, nh, hd, rot, 0, seg, cos_t, sin_t, 1.0f);
}

void ops_rope_backward_seg(float *dx, int B, int T, int nh, int hd, int rot,
                           const int32_t *seg,
                           const float *cos_t, const float *sin_t)
{
    rope_apply(dx, B, T, nh, hd, rot, 0, seg, cos_t, sin_t, -1.0f);
}

/* Causal softmax of row i of a (T,T) score block in place: entries
 * lo <= j <= i become probabilities, the rest zero (lo > 0: the row's
 * example starts at lo in a packed row). Returns the row's log-sum-exp. */
static float causal_softmax_row(float *p, int lo, int i, int T)
{
    float mx = -FLT_MAX;
    for (int j = 0; j < lo; j++)
        p[j] = 0.0f;
    for (int j = lo; j <= i; j++)
        if (p[j] > mx)
            mx = p[j];
    float sum = 0.0f;
    for (int j = lo; j <= i; j++) {
        p[j] = expf(p[j] - mx);
        sum += p[j];
    }
    float inv = 1.0f / sum;
    for (int j = lo; j <= i; j++)
        p[j] *= inv;
    for (int j = i + 1; j < T; j++)
        p[j] = 0.0f;
    return mx + logf(sum);
}

/* Attention runs per (sequence, head) as small matrix products, so that the
 * dot products go through sgemm's vector kernels instead of latency-bound
 * scalar sums; the masked upper triangle is computed and zeroed, which
 * costs less than it saves at the lengths trained here. The probabilities
 * are not kept: the backward pass recomputes them from q, k and each row's
 * log-sum-exp, one more (T,T,hd) product per head instead of (B,H,T,T)
 * floats per layer (600 MB for the 124m shape at batch 4 x 512). */
void ops_attention_forward(float *out, float *lse, const float *q, const float *k,
                           const float *v, int B, int T, int H, int KV, int hd, float scale,
                           float cap)
{
    ops_attention_forward_seg(out, lse, q, k, v, NULL, B, T, H, KV, hd, scale, cap);
}

void ops_attention_forward_seg(float *out, float *lse, const float *q, const float *k,
                               const float *v, const int32_t *seg, int B, int T, int H, int KV,
                               int hd, float scale, float cap)
{
    ops_attention_forward_win(out, lse, q, k, v, seg, 0, B, T, H, KV, hd, scale, cap);
}

/* The first row row i attends to: its example's start, or the window's. */
static int row_start(const int32_t *sb, int win, int i)
{
    int lo = sb ? sb[i] : 0;
    if (win > 0 && i - win + 1 > lo)
        lo = i - win + 1;
    return lo;
}

void ops_attention_forward_win(float *out, float *lse, const float *q, const float *k,
                               const float *v, const int32_t *seg, int win, int B, int T, int H,
                               int KV, int hd, float scale, float cap)
{
    int group = H / KV;
    int qs = H * hd, ks = KV * hd;
#pragma omp parallel if ((long)B * H * T * T * hd > PAR_MIN)
    {
        float *p = malloc(sizeof(float) * (size_t)T * T);
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < H; h++) {
                if (!p)
                    abort(); /* out of memory mid-step: nothing sane to return */
                int kh = h / group;
                const float *qb = q + (size_t)b * T * qs + (size_t)h * hd;
                const float *kb = k + (size_t)b * T * ks + (size_t)kh * hd;
                const float *vb = v + (size_t)b * T * ks + (size_t)kh * hd;
                float *l = lse + ((size_t)b * H + h) * T;
                /* S = scale Q K^T (T,T), then the causal softmax by rows */
                gemm(0, 1, T, T, hd, scale, qb, qs, kb, ks, 0.0f, p, T);
                if (cap > 0.0f)
                    ops_softcap(p, (size_t)T * T, cap);
                const int32_t *sb = seg ? seg + (size_t)b * T : NULL;
                for (int i = 0; i < T; i++)
                    l[i] = causal_softmax_row(p + (size_t)i * T, row_start(sb, win, i), i, T);
                /* O = P V (T,hd) */
                gemm(0, 0, T, hd, T, 1.0f, p, T, vb, ks, 0.0f,
                     out + (size_t)b * T * qs + (size_t)h * hd, qs);
            }
        }
        free(p);
    }
}

void ops_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                            const float *lse, const float *q, const float *k,
                            const float *v, int B, int T, int H, int KV, int hd, float scale,
                            float cap)
{
    ops_attention_backward_seg(dq, dk, dv, dout, lse, q, k, v, NULL, B, T, H, KV, hd, scale,
                               cap);
}

void ops_attention_backward_seg(float *dq, float *dk, float *dv, const float *dout,
                                const float *lse, const float *q, const float *k,
                                const float *v, const int32_t *seg, int B, int T, int H, int KV,
                                int hd, float scale, float cap)
{
    ops_attention_backward_win(dq, dk, dv, dout, lse, q, k, v, seg, 0, B, T, H, KV, hd, scale,
                               cap);
}

void ops_attention_backward_win(float *dq, float *dk, float *dv, const float *dout,
                                const float *lse, const float *q, const float *k,
                                const float *v, const int32_t *seg, int win, int B, int T,
                                int H, int KV, int hd, float scale, float cap)
{
    int group = H / KV;
    int qs = H * hd, ks = KV * hd;
    /* One task per (sequence, key/value head): the query heads that share a
     * key/value head add into the same dk/dv rows, so they run in one task,
     * in head order, and the sums never race. */
#pragma omp parallel if ((long)B * H * T * T * hd > PAR_MIN)
    {
        float *p = malloc(sizeof(float) * (size_t)T * T);
        float *ds = malloc(sizeof(float) * (size_t)T * T);
        /* the capped scores, for the cap's derivative */
        float *sc = cap > 0.0f ? malloc(sizeof(float) * (size_t)T * T) : NULL;
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++) {
            for (int kh = 0; kh < KV; kh++) {
                if (!p || !ds || (cap > 0.0f && !sc))
                    abort(); /* out of memory mid-step: nothing sane to return */
                size_t ko = (size_t)b * T * ks + (size_t)kh * hd;
                const int32_t *sb = seg ? seg + (size_t)b * T : NULL;
                for (int h = kh * group; h < (kh + 1) * group; h++) {
                    size_t qo = (size_t)b * T * qs + (size_t)h * hd;
                    const float *l = lse + ((size_t)b * H + h) * T;
                    /* P again: exp(scale Q K^T - lse), causal */
                    gemm(0, 1, T, T, hd, scale, q + qo, qs, k + ko, ks, 0.0f, p, T);
                    if (sc) {
                        ops_softcap(p, (size_t)T * T, cap);
                        memcpy(sc, p, sizeof(float) * (size_t)T * T);
                    }
                    for (int i = 0; i < T; i++) {
                        float *pr = p + (size_t)i * T;
                        int lo = row_start(sb, win, i);
                        for (int j = 0; j < lo; j++)
                            pr[j] = 0.0f;
                        for (int j = lo; j <= i; j++)
                            pr[j] = expf(pr[j] - l[i]);
                        for (int j = i + 1; j < T; j++)
                            pr[j] = 0.0f;
                    }
                    /* dP = dO V^T (T,T) */
                    gemm(0, 1, T, T, hd, 1.0f, dout + qo, qs, v + ko, ks, 0.0f, ds, T);
                    /* dS = P (dP - rowsum(P dP)) * scale; zero above the diagonal */
                    for (int i = 0; i < T; i++) {
                        const float *pr = p + (size_t)i * T;
                        float *dr = ds + (size_t)i * T;
                        float dot = 0.0f;
                        for (int j = 0; j <= i; j++)
                            dot += pr[j] * dr[j];
                        /* pr is zero below the row's start (its example's, or
                         * its window's), so dr is too */
                        for (int j = 0; j <= i; j++)
                            dr[j] = pr[j] * (dr[j] - dot) * scale;
                        for (int j = i + 1; j < T; j++)
                            dr[j] = 0.0f;
                    }
                    if (sc)
                        ops_softcap_backward(ds, sc, (size_t)T * T, cap);
                    /* dQ += dS K, dK += dS^T Q, dV += P^T dO */
                    gemm(0, 0, T, hd, T, 1.0f, ds, T, k + ko, ks, 1.0f, dq + qo, qs);
                    gemm(1, 0, T, hd, T, 1.0f, ds, T, q + qo, qs, 1.0f, dk + ko, ks);
                    gemm(1, 0, T, hd, T, 1.0f, p, T, dout + qo, qs, 1.0f, dv + ko, ks);
                }
            }
        }
        free(p);
        free(ds);
        free(sc);
    }
}

void ops_softcap(float *x, size_t n, float cap)
{
    float inv = 1.0f / cap;
    for (size_t i = 0; i < n; i++)
        x[i] = cap * tanhf(x[i] * inv);
}

void ops_softcap_backward(float *dx, const float *y, size_t n, float cap)
{
    float inv = 1.0f / cap;
    for (size_t i = 0; i < n; i++) {
        float t = y[i] * inv;
        dx[i] *= 1.0f - t * t;
    }
}

/* GELU, tanh approximation: 0.5 x (1 + tanh(s (x + 0.044715 x^3))),
 * s = sqrt(2/pi), and its derivative. */
#define GELU_S 0.7978845608028654f
#define GELU_A 0.044715f

void ops_geglu_forward(float *h, const float *g, const float *u, size_t n)
{
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = g[i];
        float t = tanhf(GELU_S * (x + GELU_A * x * x * x));
        h[i] = 0.5f * x * (1.0f + t) * u[i];
    }
}

void ops_geglu_backward(float *dg, float *du, const float *dh, const float *g,
                        const float *u, size_t n)
{
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = g[i];
        float t = tanhf(GELU_S * (x + GELU_A * x * x * x));
        float gelu = 0.5f * x * (1.0f + t);
        float dgelu = 0.5f * (1.0f + t) +
                      0.5f * x * (1.0f - t * t) * GELU_S * (1.0f + 3.0f * GELU_A * x * x);
        dg[i] += dh[i] * u[i] * dgelu;
        du[i] += dh[i] * gelu;
    }
}

/* Cut in fixed blocks of SWIGLU_BLOCK (elementwise, so the cut never changes
 * a result). */
#define SWIGLU_BLOCK 16384

void ops_swiglu_forward(float *h, const float *g, const float *u, size_t n)
{
    size_t nb = (n + SWIGLU_BLOCK - 1) / SWIGLU_BLOCK;
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t b = 0; b < nb; b++) {
        size_t s = b * SWIGLU_BLOCK, k = n - s < SWIGLU_BLOCK ? n - s : SWIGLU_BLOCK;
        kern_swiglu_forward(h + s, g + s, u + s, k);
    }
}

void ops_swiglu_backward(float *dg, float *du, const float *dh, const float *g,
                         const float *u, size_t n)
{
    size_t nb = (n + SWIGLU_BLOCK - 1) / SWIGLU_BLOCK;
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t b = 0; b < nb; b++) {
        size_t s = b * SWIGLU_BLOCK, k = n - s < SWIGLU_BLOCK ? n - s : SWIGLU_BLOCK;
        kern_swiglu_backward(dg + s, du + s, dh + s, g + s, u + s, k);
    }
}

/* Rows per block of the loss sum: per-row losses of one block are kept on
 * the stack and then added in row order. */
#define XENT_BLOCK 256

/* Both loss paths use these same kernels, so the loss with and without the
 * backward pass is the same number to the bit. */
static float row_lse(const float *row, int V)
{
    float mx = kern_max(row, (size_t)V);
    return mx + logf(kern_exp_sum(row, NULL, (size_t)V, mx));
}

double ops_xent_forward_backward(float *logits, const int32_t *targets, int M, int V,
                                 float dscale)
{
    double total = 0.0;
    double part[XENT_BLOCK];
    for (int m0 = 0; m0 < M; m0 += XENT_BLOCK) {
        int mn = M - m0 < XENT_BLOCK ? M - m0 : XENT_BLOCK;
#pragma omp parallel for schedule(static) if ((long)mn * V > PAR_MIN)
        for (int r = 0; r < mn; r++) {
            float *row = logits + (size_t)(m0 + r) * V;
            int t = targets[m0 + r];
            float mx = kern_max(row, (size_t)V);
            float xt = row[t];
            /* one exp per logit: kept in place, then scaled to the gradient */
            float sum = kern_exp_sum(row, row, (size_t)V, mx);
            part[r] = (double)(mx + logf(sum) - xt);
            float k = dscale / sum;
#pragma omp simd
            for (int j = 0; j < V; j++)
                row[j] *= k;
            row[t] -= dscale;
        }
        for (int r = 0; r < mn; r++)
            total += part[r];
    }
    return total;
}

void ops_xent_rows(float *logits, const int32_t *targets, int M, int V, const float *w,
                   double *row_loss)
{
#pragma omp parallel for schedule(static) if ((long)M * V > PAR_MIN)
    for (int r = 0; r < M; r++) {
        float *row = logits + (size_t)r * V;
        int t = targets[r];
        float mx = kern_max(row, (size_t)V);
        float xt = row[t];
        if (!w) {
            row_loss[r] = (double)(row_lse(row, V) - xt);
            continue;
        }
        float sum = kern_exp_sum(row, row, (size_t)V, mx);
        row_loss[r] = (double)(mx + logf(sum) - xt);
        float k = w[r] / sum;
#pragma omp simd
        for (int j = 0; j < V; j++)
            row[j] *= k;
        row[t] -= w[r];
    }
}

size_t ops_argmax_hits(const float *logits, const int32_t *targets, int M, int V)
{
    /* the target is the first index of the row's maximum */
    size_t hits = 0;
#pragma omp parallel for schedule(static) reduction(+ : hits) if ((long)M * V > PAR_MIN)
    for (int r = 0; r < M; r++) {
        const float *x = logits + (size_t)r * V;
        int t = targets[r];
        if (t < 0 || t >= V)
            continue;
        float top = kern_max(x, (size_t)V);
        hits += x[t] == top && (t == 0 || kern_max(x, (size_t)t) < top);
    }
    return hits;
}

double ops_xent_forward(const float *logits, const int32_t *targets, int M, int V)
{
    double total = 0.0;
    double part[XENT_BLOCK];
    for (int m0 = 0; m0 < M; m0 += XENT_BLOCK) {
        int mn = M - m0 < XENT_BLOCK ? M - m0 : XENT_BLOCK;
#pragma omp parallel for schedule(static) if ((long)mn * V > PAR_MIN)
        for (int r = 0; r < mn; r++) {
            const float *row = logits + (size_t)(m0 + r) * V;
            part[r] = (double)(row_lse(row, V) - row[targets[m0 + r]]);
        }
        for (int r = 0; r < mn; r++)
            total += part[r];
    }
    return total;
}

void ops_add(float *y, const float *a, const float *b, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

void ops_accumulate(float *y, const float *x, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

void ops_zero(float *y, size_t n)
{
    size_t chunk = 1u << 16, nc = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t c = 0; c < nc; c++) {
        size_t s = c * chunk;
        memset(y + s, 0, sizeof(float) * (n - s < chunk ? n - s : chunk));
    }
}
