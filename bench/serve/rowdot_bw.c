/* rowdot_bw.c - how fast one decode row's products read their weights:
 * y = x W^T for one row x against 8 fp32 matrices of OUT x IN (past the
 * caches), on the machine's threads, for the engine's kernel
 * (rowdot_times_wt) and candidate kernels that keep its order of
 * operations (rowdot.h), in alternating rounds. Prints GB/s of weights
 * read, the median of ROUNDS, and checks every candidate's outputs are
 * the same bits as the engine's.
 *
 * Build and run: bench/serve/rowdot_bw.sh (it says the machine).
 */
#define _GNU_SOURCE
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "train/kernels/rowdot.h"

typedef float v8 __attribute__((vector_size(32)));
typedef float v16 __attribute__((vector_size(64)));

#define load8(p) __extension__({ v8 v_; memcpy(&v_, (p), sizeof v_); v_; })
#define load16(p) __extension__({ v16 v_; memcpy(&v_, (p), sizeof v_); v_; })

/* The fixed tree of rowdot.h from the two groups of 8 lanes. */
static inline __attribute__((always_inline)) float tree(v8 s0, v8 s1)
{
    v8 t = s0 + s1;
    return ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
}

/* One weight row at a time (one sequential stream), AVX2. */
__attribute__((target("avx2"))) static void rows_avx2(float *y, const float *x,
                                                       const float *w, int out, int in)
{
#pragma omp parallel for schedule(static)
    for (int o = 0; o < out; o++) {
        const float *r = w + (size_t)o * in;
        v8 s0 = {0}, s1 = {0};
        for (int k = 0; k < in; k += 16) {
            s0 += load8(x + k) * load8(r + k);
            s1 += load8(x + k + 8) * load8(r + k + 8);
        }
        y[o] = tree(s0, s1);
    }
}

/* One weight row at a time, the 16 lanes in one AVX-512 register. */
__attribute__((target("avx512f"))) static void rows_avx512(float *y, const float *x,
                                                           const float *w, int out, int in)
{
#pragma omp parallel for schedule(static)
    for (int o = 0; o < out; o++) {
        const float *r = w + (size_t)o * in;
        v16 s = {0};
        for (int k = 0; k < in; k += 16)
            s += load16(x + k) * load16(r + k);
        v8 lo, hi;
        memcpy(&lo, &s, 32);
        memcpy(&hi, (char *)&s + 32, 32);
        y[o] = tree(lo, hi);
    }
}

/* Four weight rows at a time, AVX2, as the engine's tile without its
 * software prefetch. */
__attribute__((target("avx2"))) static void tile4_avx2(float *y, const float *x,
                                                        const float *w, int out, int in)
{
#pragma omp parallel for schedule(static)
    for (int b = 0; b < out / 4; b++) {
        const float *r0 = w + (size_t)b * 4 * in, *r1 = r0 + in, *r2 = r1 + in, *r3 = r2 + in;
        v8 a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0}, c0 = {0}, c1 = {0}, d0 = {0}, d1 = {0};
        for (int k = 0; k < in; k += 16) {
            v8 x0 = load8(x + k), x1 = load8(x + k + 8);
            __asm__("" : "+x"(x0));
            __asm__("" : "+x"(x1));
            a0 += x0 * load8(r0 + k);
            a1 += x1 * load8(r0 + k + 8);
            b0 += x0 * load8(r1 + k);
            b1 += x1 * load8(r1 + k + 8);
            c0 += x0 * load8(r2 + k);
            c1 += x1 * load8(r2 + k + 8);
            d0 += x0 * load8(r3 + k);
            d1 += x1 * load8(r3 + k + 8);
        }
        y[b * 4] = tree(a0, a1);
        y[b * 4 + 1] = tree(b0, b1);
        y[b * 4 + 2] = tree(c0, c1);
        y[b * 4 + 3] = tree(d0, d1);
    }
}

/* Four weight rows at a time, AVX-512, no software prefetch. */
__attribute__((target("avx512f"))) static void tile4_avx512(float *y, const float *x,
                                                            const float *w, int out, int in)
{
#pragma omp parallel for schedule(static)
    for (int b = 0; b < out / 4; b++) {
        const float *r0 = w + (size_t)b * 4 * in, *r1 = r0 + in, *r2 = r1 + in, *r3 = r2 + in;
        v16 a = {0}, c = {0}, d = {0}, e = {0};
        for (int k = 0; k < in; k += 16) {
            v16 xv = load16(x + k);
            __asm__("" : "+v"(xv));
            a += xv * load16(r0 + k);
            c += xv * load16(r1 + k);
            d += xv * load16(r2 + k);
            e += xv * load16(r3 + k);
        }
        v16 *acc[4] = {&a, &c, &d, &e};
        for (int j = 0; j < 4; j++) {
            v8 lo, hi;
            memcpy(&lo, acc[j], 32);
            memcpy(&hi, (char *)acc[j] + 32, 32);
            y[b * 4 + j] = tree(lo, hi);
        }
    }
}

/* Eight weight rows at a time, AVX-512, no software prefetch. */
__attribute__((target("avx512f"))) static void tile8_avx512(float *y, const float *x,
                                                            const float *w, int out, int in)
{
#pragma omp parallel for schedule(static)
    for (int b = 0; b < out / 8; b++) {
        const float *r = w + (size_t)b * 8 * in;
        v16 acc[8] = {{0}};
        for (int k = 0; k < in; k += 16) {
            v16 xv = load16(x + k);
            __asm__("" : "+v"(xv));
            for (int j = 0; j < 8; j++)
                acc[j] += xv * load16(r + (size_t)j * in + k);
        }
        for (int j = 0; j < 8; j++) {
            v8 lo, hi;
            memcpy(&lo, &acc[j], 32);
            memcpy(&hi, (char *)&acc[j] + 32, 32);
            y[b * 8 + j] = tree(lo, hi);
        }
    }
}

/* The fixed tree of the 16 lanes of one AVX-512 accumulator. */
__attribute__((target("avx512f"))) static inline float lanes(v16 s)
{
    v8 lo, hi;
    memcpy(&lo, &s, 32);
    memcpy(&hi, (char *)&s + 32, 32);
    return tree(lo, hi);
}

/* One row's dot product alone, one accumulator (rows_avx512's loop). */
__attribute__((target("avx512f"))) static float alone(const float *x, const float *r, int in)
{
    v16 s = {0};
    for (int k = 0; k < in; k += 16)
        s += load16(x + k) * load16(r + k);
    return lanes(s);
}

/* Dot products of x with four rows r, r + rs, r + 2 rs, r + 3 rs into
 * y[0], y[ys], y[2 ys], y[3 ys], AVX-512, rowdot's order. */
__attribute__((target("avx512f"))) static inline void dot4(float *y, size_t ys,
                                                           const float *x, const float *r,
                                                           size_t rs, int in)
{
    v16 a = {0}, c = {0}, d = {0}, e = {0};
    for (int k = 0; k < in; k += 16) {
        v16 xv = load16(x + k);
        __asm__("" : "+v"(xv));
        a += xv * load16(r + k);
        c += xv * load16(r + rs + k);
        d += xv * load16(r + 2 * rs + k);
        e += xv * load16(r + 3 * rs + k);
    }
    y[0] = lanes(a);
    y[ys] = lanes(c);
    y[2 * ys] = lanes(d);
    y[3 * ys] = lanes(e);
}

/* This thread's share [lo, hi) of out outputs. */
static void share(int out, int *lo, int *hi)
{
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    *lo = (int)((long)out * t / nt);
    *hi = (int)((long)out * (t + 1) / nt);
}

/* Four weight rows at a time, but each thread's rows split into four
 * quarters, a tile taking one row of each: four long sequential streams
 * a thread instead of four that jump at every block. */
__attribute__((target("avx512f"))) static void quarters_avx512(float *y, const float *x,
                                                               const float *w, int out, int in)
{
#pragma omp parallel
    {
        int lo, hi;
        share(out, &lo, &hi);
        int q = (hi - lo) / 4;
        for (int b = 0; b < q; b++)
            dot4(y + lo + b, (size_t)q, x, w + (size_t)(lo + b) * in, (size_t)q * in, in);
        for (int o = lo + 4 * q; o < hi; o++) /* the rows left over */
            y[o] = alone(x, w + (size_t)o * in, in);
    }
}

/* Blocks of four contiguous rows taken from two halves of a thread's rows
 * at once: eight rows in flight in two runs of four contiguous rows. */
__attribute__((target("avx512f"))) static void halves_avx512(float *y, const float *x,
                                                             const float *w, int out, int in)
{
#pragma omp parallel
    {
        int lo, hi;
        share(out, &lo, &hi);
        int q = (hi - lo) / 8 * 4; /* rows in each half, a multiple of 4 */
        for (int b = 0; b < q; b += 4) {
            dot4(y + lo + b, 1, x, w + (size_t)(lo + b) * in, (size_t)in, in);
            dot4(y + lo + q + b, 1, x, w + (size_t)(lo + q + b) * in, (size_t)in, in);
        }
        for (int o = lo + 2 * q; o < hi; o++)
            y[o] = alone(x, w + (size_t)o * in, in);
    }
}

/* Each thread's rows in two halves, a row of each at a time: two
 * streams a thread, two accumulators. */
__attribute__((target("avx512f"))) static void twos_avx512(float *y, const float *x,
                                                           const float *w, int out, int in)
{
#pragma omp parallel
    {
        int lo, hi;
        share(out, &lo, &hi);
        int q = (hi - lo) / 2;
        for (int b = 0; b < q; b++) {
            const float *r = w + (size_t)(lo + b) * in, *r2 = r + (size_t)q * in;
            v16 a = {0}, c = {0};
            for (int k = 0; k < in; k += 16) {
                v16 xv = load16(x + k);
                __asm__("" : "+v"(xv));
                a += xv * load16(r + k);
                c += xv * load16(r2 + k);
            }
            y[lo + b] = lanes(a);
            y[lo + q + b] = lanes(c);
        }
        for (int o = lo + 2 * q; o < hi; o++)
            y[o] = alone(x, w + (size_t)o * in, in);
    }
}

/* The weights again, each block of four rows interleaved 16 floats at a
 * time (row 0's k 0-15, row 1's, row 2's, row 3's, row 0's k 16-31, ...):
 * made once by main, found from w by its offset from w_base. */
static const float *w_base, *w_inter;

static void interleave4(float *dst, const float *w, size_t rows, int in)
{
    for (size_t b = 0; b < rows / 4; b++)
        for (int c = 0; c < in / 16; c++)
            for (int j = 0; j < 4; j++)
                memcpy(dst + (b * 4 * (size_t)in) + ((size_t)c * 4 + (size_t)j) * 16,
                       w + (b * 4 + (size_t)j) * (size_t)in + (size_t)c * 16, 64);
}

/* Four rows at a time from the interleaved copy: one sequential stream a
 * thread, four accumulators, each row still in rowdot's order. */
__attribute__((target("avx512f"))) static void inter_avx512(float *y, const float *x,
                                                            const float *w, int out, int in)
{
    const float *iw = w_inter + (w - w_base);
#pragma omp parallel for schedule(static)
    for (int b = 0; b < out / 4; b++) {
        const float *p = iw + (size_t)b * 4 * in;
        v16 a = {0}, c = {0}, d = {0}, e = {0};
        for (int k = 0; k < in; k += 16, p += 64) {
            v16 xv = load16(x + k);
            __asm__("" : "+v"(xv));
            a += xv * load16(p);
            c += xv * load16(p + 16);
            d += xv * load16(p + 32);
            e += xv * load16(p + 48);
        }
        y[b * 4] = lanes(a);
        y[b * 4 + 1] = lanes(c);
        y[b * 4 + 2] = lanes(d);
        y[b * 4 + 3] = lanes(e);
    }
}

static void engine(float *y, const float *x, const float *w, int out, int in)
{
    rowdot_times_wt(y, x, 1, w, NULL, out, in);
}

typedef void (*kernel)(float *, const float *, const float *, int, int);

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int out = argc > 1 ? atoi(argv[1]) : 8192, in = argc > 2 ? atoi(argv[2]) : 2048;
    int mats = argc > 3 ? atoi(argv[3]) : 8, rounds = argc > 4 ? atoi(argv[4]) : 15;
    if (out % 8 || in % 16 || mats < 1 || rounds < 1) {
        fprintf(stderr, "usage: rowdot_bw [OUT (x8)] [IN (x16)] [MATRICES] [ROUNDS]\n");
        return 2;
    }
    size_t per = (size_t)out * in, bytes = per * mats * sizeof(float);
    float *w = aligned_alloc(1 << 21, (bytes + (1 << 21) - 1) & ~(size_t)((1 << 21) - 1));
    float *x = aligned_alloc(64, (size_t)in * sizeof(float));
    float *ref = malloc((size_t)out * mats * sizeof(float));
    float *y = malloc((size_t)out * mats * sizeof(float));
    if (!w || !x || !ref || !y)
        return 1;
    madvise(w, bytes, MADV_HUGEPAGE); /* as the engine's weights (bigmem.h) */
    unsigned s = 1;
    for (size_t i = 0; i < per * mats; i++) {
        s = s * 1664525u + 1013904223u;
        w[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    for (int k = 0; k < in; k++)
        x[k] = sinf((float)k);
    float *wi = aligned_alloc(1 << 21, (bytes + (1 << 21) - 1) & ~(size_t)((1 << 21) - 1));
    if (!wi)
        return 1;
    madvise(wi, bytes, MADV_HUGEPAGE);
    interleave4(wi, w, (size_t)out * mats, in);
    w_base = w;
    w_inter = wi;
    static const char *names[] = {"engine",       "rows_avx2",    "rows_avx512",
                                  "tile4_avx2",   "tile4_avx512", "tile8_avx512",
                                  "quarters_512", "halves_512",   "twos_512",
                                  "inter_512"};
    kernel ks[] = {engine, rows_avx2, rows_avx512, tile4_avx2, tile4_avx512, tile8_avx512,
                   quarters_avx512, halves_avx512, twos_avx512,
                   inter_avx512};
    int nk = (int)(sizeof ks / sizeof ks[0]);
    int have512 = __builtin_cpu_supports("avx512f");
    double *t = calloc((size_t)nk * rounds, sizeof *t);
    for (int m = 0; m < mats; m++)
        engine(ref + (size_t)m * out, x, w + per * m, out, in);
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < nk; k++) {
            if (!have512 && strstr(names[k], "512"))
                continue;
            double t0 = now_s();
            for (int m = 0; m < mats; m++)
                ks[k](y + (size_t)m * out, x, w + per * m, out, in);
            t[k * rounds + r] = now_s() - t0;
            if (r == 0 && memcmp(y, ref, (size_t)out * mats * sizeof(float)) != 0) {
                fprintf(stderr, "%s: outputs differ from the engine's\n", names[k]);
                return 1;
            }
        }
    printf("threads %d, %d matrices of %d x %d (%.0f MB), %d rounds, median\n",
           omp_get_max_threads(), mats, out, in, bytes / 1e6, rounds);
    double base = 0;
    for (int k = 0; k < nk; k++) {
        if (!have512 && strstr(names[k], "512"))
            continue;
        qsort(t + k * rounds, (size_t)rounds, sizeof *t, cmp);
        double med = t[k * rounds + rounds / 2];
        if (k == 0)
            base = med;
        printf("%-14s %6.1f GB/s  %5.2fx the engine's speed\n", names[k], bytes / med / 1e9,
               base / med);
    }
    return 0;
}
