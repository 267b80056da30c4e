/* rowdot.c - fixed-order dot products in register tiles (see rowdot.h). */
#include "train/kernels/rowdot.h"

#include <stddef.h>
#include <string.h>

typedef float v8 __attribute__((vector_size(32)));

/* The lanes' sum in the fixed tree, then the tail a[k..n) b[k..n). */
static inline __attribute__((always_inline)) float finish(const v8 *s0, const v8 *s1,
                                                           const float *a, const float *b, int k,
                                                           int n)
{
    v8 t = *s0 + *s1;
    float s = ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
    for (; k < n; k++)
        s += a[k] * b[k];
    return s;
}

/* The 8 floats at p as a vector (a macro: a vector passed by value would
 * change the calling convention between the two builds below). */
#define load8(p) \
    __extension__({ \
        v8 v_; \
        memcpy(&v_, (p), sizeof v_); \
        v_; \
    })

/* Each function is built twice, for AVX2 and for any x86-64: the same
 * operations in the same order, so the same result on either. */
#define CLONES __attribute__((target_clones("avx2", "default")))

CLONES float rowdot(const float *a, const float *b, int n)
{
    v8 s0 = {0}, s1 = {0};
    int k = 0;
    for (; k + 16 <= n; k += 16) {
        s0 += load8(a + k) * load8(b + k);
        s1 += load8(a + k + 8) * load8(b + k + 8);
    }
    return finish(&s0, &s1, a, b, k, n);
}

/* Keeps v in a register: without it the compiler folds a loaded vector
 * into each product that uses it, loading it again, and the loads, not
 * the products, bound the speed. */
#define KEEP(v) __asm__("" : "+x"(v))

/* The tiles are AVX2 only (16 vector registers hold a tile); without AVX2
 * every output is one rowdot, the same numbers. */
#define AVX2 __attribute__((target("avx2")))

/* out[0..3] = rowdot(x, w_j) of x against four weight rows w, w + ws, ...;
 * the next four rows are fetched meanwhile. */
AVX2 static void tile4x1(const float *x, const float *w, size_t ws, int n, float *out)
{
    const float *w0 = w, *w1 = w + ws, *w2 = w + 2 * ws, *w3 = w + 3 * ws;
    v8 a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0}, c0 = {0}, c1 = {0}, d0 = {0}, d1 = {0};
    int k = 0;
    for (; k + 16 <= n; k += 16) {
        v8 x0 = load8(x + k), x1 = load8(x + k + 8);
        __builtin_prefetch(w0 + 4 * ws + k); /* the next block's weights */
        __builtin_prefetch(w1 + 4 * ws + k);
        __builtin_prefetch(w2 + 4 * ws + k);
        __builtin_prefetch(w3 + 4 * ws + k);
        KEEP(x0);
        KEEP(x1);
        a0 += x0 * load8(w0 + k);
        a1 += x1 * load8(w0 + k + 8);
        b0 += x0 * load8(w1 + k);
        b1 += x1 * load8(w1 + k + 8);
        c0 += x0 * load8(w2 + k);
        c1 += x1 * load8(w2 + k + 8);
        d0 += x0 * load8(w3 + k);
        d1 += x1 * load8(w3 + k + 8);
    }
    out[0] = finish(&a0, &a1, x, w0, k, n);
    out[1] = finish(&b0, &b1, x, w1, k, n);
    out[2] = finish(&c0, &c1, x, w2, k, n);
    out[3] = finish(&d0, &d1, x, w3, k, n);
}

typedef float v16 __attribute__((vector_size(64)));

#define AVX512 __attribute__((target("avx512f")))

/* tile4x1 with the 16 lanes of each dot product in one AVX-512 register:
 * lanes 0-7 are rowdot's first group and 8-15 its second, each still one
 * multiply then one add a step (C11 contracts nothing), so the same bits.
 * No software prefetch: on one row, where a decode step only streams the
 * weights, the hardware's own prefetch of four sequential rows reads
 * faster without it (bench/serve/rowdot_bw.sh: 1.08x to 1.17x the AVX2
 * tile's GB/s on the 1B shape's products, 2 threads of an AMD EPYC). */
AVX512 static void tile4x1_512(const float *x, const float *w, size_t ws, int n, float *out)
{
    const float *w0 = w, *w1 = w + ws, *w2 = w + 2 * ws, *w3 = w + 3 * ws;
    v16 a = {0}, b = {0}, c = {0}, d = {0};
    int k = 0;
    for (; k + 16 <= n; k += 16) {
        v16 xv, p;
        memcpy(&xv, x + k, sizeof xv);
        __asm__("" : "+v"(xv)); /* KEEP, in an AVX-512 register */
        memcpy(&p, w0 + k, sizeof p);
        a += xv * p;
        memcpy(&p, w1 + k, sizeof p);
        b += xv * p;
        memcpy(&p, w2 + k, sizeof p);
        c += xv * p;
        memcpy(&p, w3 + k, sizeof p);
        d += xv * p;
    }
    const v16 *acc[4] = {&a, &b, &c, &d};
    const float *rows[4] = {w0, w1, w2, w3};
    for (int j = 0; j < 4; j++) {
        v8 lo, hi;
        memcpy(&lo, acc[j], sizeof lo);
        memcpy(&hi, (const char *)acc[j] + sizeof lo, sizeof hi);
        out[j] = finish(&lo, &hi, x, rows[j], k, n);
    }
}

/* out[i * 4 + j] = rowdot(x_i, w_j) for R (2 to 4) x rows x, x + xs, ...
 * and four weight rows w, w + ws, ...: 4R products, each one AVX-512
 * register of 16 lanes in rowdot's order (as tile4x1_512), so the same
 * bits as a row alone. Each weight and x vector loaded serves several
 * products, which makes a prompt's rows bound by the products rather than
 * the loads; the caller runs every row group of a prompt against one
 * block of four weight rows, so the block comes from memory once and from
 * the caches after. The accumulators are named, not an array: the
 * compiler keeps named vectors in registers, an array of them in memory. */

/* The four weight vectors of step k, kept in registers. */
#define W4(k) \
    v16 p0, p1, p2, p3; \
    memcpy(&p0, w + (k), sizeof p0); \
    memcpy(&p1, w + ws + (k), sizeof p1); \
    memcpy(&p2, w + 2 * ws + (k), sizeof p2); \
    memcpy(&p3, w + 3 * ws + (k), sizeof p3); \
    __asm__("" : "+v"(p0), "+v"(p1), "+v"(p2), "+v"(p3))

/* x row i's vector at step k times the four weight vectors, into s[0..3]. */
#define ROW4(i, k, s) \
    do { \
        v16 u_; \
        memcpy(&u_, x + (i) * xs + (k), sizeof u_); \
        __asm__("" : "+v"(u_)); \
        s##0 += u_ * p0; \
        s##1 += u_ * p1; \
        s##2 += u_ * p2; \
        s##3 += u_ * p3; \
    } while (0)

/* out[i * 4 + 0..3] from the accumulators s[0..3] of x row i. */
#define PUT4(i, s) \
    do { \
        const v16 *acc_[4] = {&s##0, &s##1, &s##2, &s##3}; \
        for (int j_ = 0; j_ < 4; j_++) { \
            v8 lo_, hi_; \
            memcpy(&lo_, acc_[j_], sizeof lo_); \
            memcpy(&hi_, (const char *)acc_[j_] + sizeof lo_, sizeof hi_); \
            out[(i) * 4 + j_] = finish(&lo_, &hi_, x + (i) * xs, w + j_ * ws, k, n); \
        } \
    } while (0)

/* The tile at R rows (a constant where it is inlined: the rows past R and
 * their accumulators drop out). */
static inline __attribute__((always_inline, target("avx512f"))) void
tile_rx4_512(const float *x, size_t xs, const float *w, size_t ws, int n, float *out, int R)
{
    v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
    v16 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, d0 = {0}, d1 = {0}, d2 = {0}, d3 = {0};
    int k = 0;
    for (; k + 16 <= n; k += 16) {
        W4(k);
        ROW4(0, k, a);
        ROW4(1, k, b);
        if (R > 2)
            ROW4(2, k, c);
        if (R > 3)
            ROW4(3, k, d);
    }
    PUT4(0, a);
    PUT4(1, b);
    if (R > 2)
        PUT4(2, c);
    if (R > 3)
        PUT4(3, d);
}

AVX512 static void tile4x4_512(const float *x, size_t xs, const float *w, size_t ws, int n,
                               float *out)
{
    tile_rx4_512(x, xs, w, ws, n, out, 4);
}

AVX512 static void tile3x4_512(const float *x, size_t xs, const float *w, size_t ws, int n,
                               float *out)
{
    tile_rx4_512(x, xs, w, ws, n, out, 3);
}

AVX512 static void tile2x4_512(const float *x, size_t xs, const float *w, size_t ws, int n,
                               float *out)
{
    tile_rx4_512(x, xs, w, ws, n, out, 2);
}

#undef W4
#undef ROW4
#undef PUT4

/* out[i * 2 + j] = rowdot(x_i, w_j) for x rows x, x + xs and weight rows w,
 * w + ws; with ahead > 0 the weights `ahead` floats on (the next block's)
 * are fetched meanwhile. */
AVX2 static void tile2x2(const float *x, size_t xs, const float *w, size_t ws, int n,
                         size_t ahead, float *out)
{
    const float *x0 = x, *x1 = x + xs, *w0 = w, *w1 = w + ws;
    v8 a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0}, c0 = {0}, c1 = {0}, d0 = {0}, d1 = {0};
    int k = 0;
    for (; k + 16 <= n; k += 16) {
        v8 p0 = load8(w0 + k), p1 = load8(w0 + k + 8);
        v8 q0 = load8(w1 + k), q1 = load8(w1 + k + 8);
        v8 u0 = load8(x0 + k), u1 = load8(x0 + k + 8);
        if (ahead) { /* the next block's weights, from memory meanwhile */
            __builtin_prefetch(w0 + ahead + k);
            __builtin_prefetch(w1 + ahead + k);
        }
        KEEP(p0);
        KEEP(p1);
        KEEP(q0);
        KEEP(q1);
        KEEP(u0);
        KEEP(u1);
        a0 += u0 * p0;
        a1 += u1 * p1;
        b0 += u0 * q0;
        b1 += u1 * q1;
        v8 v0 = load8(x1 + k), v1 = load8(x1 + k + 8);
        KEEP(v0);
        KEEP(v1);
        c0 += v0 * p0;
        c1 += v1 * p1;
        d0 += v0 * q0;
        d1 += v1 * q1;
    }
    out[0] = finish(&a0, &a1, x0, w0, k, n);
    out[1] = finish(&b0, &b1, x0, w1, k, n);
    out[2] = finish(&c0, &c1, x1, w0, k, n);
    out[3] = finish(&d0, &d1, x1, w1, k, n);
}

/* y[i * out + o + j] = row i's dot with weight row j of wo, plus o + j's
 * bias. */
static void put(float *y, int out, int i, int o, int j, float dot, const float *bias)
{
    y[(size_t)i * out + o + j] = dot + (bias ? bias[o + j] : 0.0f);
}

/* Outputs [o, o + m) (m <= 4) of every row, in tiles when `tiles`: on
 * AVX-512 (tiles 2) two to four rows at a time by the four weight rows (a
 * lone row one by four); on AVX2 (tiles 1) two rows by two weight rows,
 * then one row by four. */
static void block(float *y, const float *x, int n, const float *w, const float *bias, int out,
                  int in, int o, int m, int tiles)
{
    float t[16];
    const float *wo = w + (size_t)o * in;
    int i = 0;
    if (tiles > 1 && m == 4 && n > 1) {
        /* groups of 2 to 4 rows, as even as they come: a lone row left
         * over would load as much as a group for a quarter of its work */
        int groups = (n + 3) / 4;
        for (int g = 0; g < groups; g++) {
            int rows = n / groups + (g < n % groups);
            const float *xg = x + (size_t)i * in;
            if (rows == 4)
                tile4x4_512(xg, (size_t)in, wo, (size_t)in, in, t);
            else if (rows == 3)
                tile3x4_512(xg, (size_t)in, wo, (size_t)in, in, t);
            else
                tile2x4_512(xg, (size_t)in, wo, (size_t)in, in, t);
            for (int a = 0; a < rows; a++)
                for (int b = 0; b < 4; b++)
                    put(y, out, i + a, o, b, t[a * 4 + b], bias);
            i += rows;
        }
    }
    int first = i; /* rows [first, n) are left */
    int pairs = tiles == 1 || (tiles > 1 && m != 4) ? m / 2 * 2 : 0; /* outputs two by two */
    for (; pairs && i + 2 <= n; i += 2)
        for (int j = 0; j < pairs; j += 2) {
            tile2x2(x + (size_t)i * in, (size_t)in, wo + (size_t)j * in, (size_t)in, in,
                    i == first ? (size_t)4 * in : 0, t);
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++)
                    put(y, out, i + a, o, j + b, t[a * 2 + b], bias);
        }
    for (int r = first; r < n; r++) {
        int j = r < i ? pairs : 0; /* rows [first, i) have their pairs done */
        if (tiles && j == 0 && m == 4) {
            if (tiles > 1)
                tile4x1_512(x + (size_t)r * in, wo, (size_t)in, in, t);
            else
                tile4x1(x + (size_t)r * in, wo, (size_t)in, in, t);
            for (j = 0; j < 4; j++)
                put(y, out, r, o, j, t[j], bias);
        }
        for (; j < m; j++)
            put(y, out, r, o, j, rowdot(x + (size_t)r * in, wo + (size_t)j * in, in), bias);
    }
}

void rowdot_times_wt(float *y, const float *x, int n, const float *w, const float *bias,
                     int out, int in)
{
    int blocks = (out + 3) / 4;
    /* 0: rowdot alone; 1: the AVX2 tiles; 2: one row's tile on AVX-512 */
    int tiles = !__builtin_cpu_supports("avx2") ? 0 : __builtin_cpu_supports("avx512f") ? 2 : 1;
#pragma omp parallel for schedule(static) if ((long)out * in * n > 65536)
    for (int b = 0; b < blocks; b++) {
        int o = b * 4;
        block(y, x, n, w, bias, out, in, o, out - o < 4 ? out - o : 4, tiles);
    }
}
