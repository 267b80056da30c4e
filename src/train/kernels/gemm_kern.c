/* gemm_kern.c - AVX-512 fp32 and AVX512-BF16 product kernels (gemm_kern.h).
 *
 * Blocking (fp32): the N side is cut into panels of NC columns; for each
 * block of K, B's panel is packed into NR-column strips (K-major,
 * zero-padded at the edges), and each strip stays in L1 while the MR-row
 * strips of A pass over it in a register-tile kernel (MR x NR = 8 x 32:
 * 16 zmm accumulators). A is read straight from its rows when op(A) is A;
 * a transposed or edge strip of A is copied first.
 *
 * Blocking (bf16): blocks of K outermost; A's rows are rounded to bf16
 * pairs once per block of K (MCB rows at a time) and meet every panel of
 * B, packed as pairs.
 *
 * Compiled for the plain x86-64 baseline: the kernels carry their own
 * target attributes and are only called when cpu_path says the CPU has
 * the instructions.
 */
#include "train/kernels/gemm_kern.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/kernels/nf4.h"

#define MR 8
#define NR 32
#define KC 256   /* fp32: K per block                     */
#define KC2 512  /* bf16: K per block (256 pairs)          */
#define NC 512   /* columns of B packed at once           */
#define MCB 256  /* bf16: rows of A rounded at once        */
#define MCF 256  /* fp32: rows of A (packed or not) per pass over a B panel */

/* Per-thread buffers: B panel (fp32: KC x NC floats; bf16: KC2 x NC
 * halves, the same bytes); A: MCF rows of fp32 strips (KC x MCF floats) or
 * MCB rows of bf16 pairs (KC2 x MCB halves), the same bytes. */
static _Thread_local float *bpack;
static _Thread_local float *apack;
/* bf16 with an NF4 B: one strip of B decoded (NR x KC2 halves, 32 KiB) */
static _Thread_local uint16_t *qstrip;

static int buffers(void)
{
    if (!bpack) {
        bpack = aligned_alloc(64, sizeof(float) * KC * NC);
        apack = aligned_alloc(64, sizeof(uint16_t) * KC2 * MCB);
        qstrip = aligned_alloc(64, sizeof(uint16_t) * KC2 * NR);
    }
    return bpack && apack && qstrip ? 0 : -1;
}

/* c = fma(alpha, acc, first ? beta c : c) for an edge tile (nr < NR or
 * mr < MR), the scalar twin of the kernels' stores. */
static void store_edge(const float *acc, int mr, int nr, float *c, long ldc, float alpha,
                       float beta, int first)
{
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float *p = c + i * ldc + j;
            float base = first ? (beta == 0.0f ? 0.0f : beta * *p) : *p;
            *p = fmaf(alpha, acc[i * NR + j], base);
        }
}

/* C = beta C, for a product with K = 0 (beta 0 never reads C). */
static void scale_c(int M, int N, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            C[(long)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(long)i * ldc + j];
}

/* ---- fp32 ---- */

/* c = fma(alpha, acc, first ? beta c : c) for a whole MR x NR tile; beta 0
 * on the first block never reads c. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
store_tile(__m512 acc[MR][2], float *c, long ldc, float alpha, float beta, int first)
{
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int i = 0; i < MR; i++)
        for (int h = 0; h < 2; h++) {
            float *p = c + i * ldc + 16 * h;
            __m512 base = !first ? _mm512_loadu_ps(p)
                          : beta == 0.0f ? _mm512_setzero_ps()
                                         : _mm512_mul_ps(vb, _mm512_loadu_ps(p));
            _mm512_storeu_ps(p, _mm512_fmadd_ps(va, acc[i][h], base));
        }
}

__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
tile_f32(int kc, const float *a, long rs, long cs, const float *bp, float *c, long ldc,
         float alpha, float beta, int first)
{
    __m512 acc[MR][2];
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
        const float *ak = a + k * cs;
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            __m512 ai = _mm512_set1_ps(ak[i * rs]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
        bp += NR;
    }
    store_tile(acc, c, ldc, alpha, beta, first);
}

/* A strip read in place: rows lda apart, K contiguous. */
__attribute__((target("avx512f"))) static void tile_f32_rows(int kc, const float *a, long lda,
                                                             const float *bp, float *c, long ldc,
                                                             float alpha, float beta, int first)
{
    tile_f32(kc, a, lda, 1, bp, c, ldc, alpha, beta, first);
}

/* A strip packed: ap[k * MR + i]. */
__attribute__((target("avx512f"))) static void tile_f32_packed(int kc, const float *ap,
                                                               const float *bp, float *c,
                                                               long ldc, float alpha, float beta,
                                                               int first)
{
    tile_f32(kc, ap, 1, MR, bp, c, ldc, alpha, beta, first);
}

/* 16 rows of B^T (16 columns j of op(B), K contiguous), 16 values of K
 * each, transposed in registers into bp[k * NR + j] for k < 16. */
__attribute__((target("avx512f"))) static void transpose16(const float *src, long ldb, float *bp)
{
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_ps(src + i * ldb);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* r[4q + s] holds, in each 128-bit lane L, rows 4q..4q+3 at k = 4L + s;
     * gather lane L of the four q into one vector for that k */
    for (int s = 0; s < 4; s++) {
        __m512 a = _mm512_shuffle_f32x4(r[s], r[4 + s], 0x44);     /* q0 L0 L1, q1 L0 L1 */
        __m512 b = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0x44); /* q2 L0 L1, q3 L0 L1 */
        __m512 c = _mm512_shuffle_f32x4(r[s], r[4 + s], 0xee);      /* q0 L2 L3, q1 L2 L3 */
        __m512 d = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0xee); /* q2 L2 L3, q3 L2 L3 */
        int ks = s;
        _mm512_store_ps(bp + (0 + ks) * NR, _mm512_shuffle_f32x4(a, b, 0x88));
        _mm512_store_ps(bp + (4 + ks) * NR, _mm512_shuffle_f32x4(a, b, 0xdd));
        _mm512_store_ps(bp + (8 + ks) * NR, _mm512_shuffle_f32x4(c, d, 0x88));
        _mm512_store_ps(bp + (12 + ks) * NR, _mm512_shuffle_f32x4(c, d, 0xdd));
    }
}

/* Packs op(B)[k0:k0+kc, j0:j0+nc] into NR-column strips. B is read in
 * its own order (row by row when op(B) = B; 16 rows at a time, along K,
 * when op(B) = B^T) so that the prefetcher follows few streams. */
__attribute__((target("avx512f"))) static void pack_b_f32(int tb, const float *B, long ldb,
                                                          int k0, int kc, int j0, int nc,
                                                          float *bp)
{
    int whole = nc / NR * NR;
    if (!tb) {
        for (int k = 0; k < kc; k++) {
            const float *src = B + (long)(k0 + k) * ldb + j0;
            for (int s = 0; s < whole; s += NR) {
                float *dst = bp + (size_t)(s / NR) * kc * NR + k * NR;
                _mm512_store_ps(dst, _mm512_loadu_ps(src + s));
                _mm512_store_ps(dst + 16, _mm512_loadu_ps(src + s + 16));
            }
        }
    } else {
        for (int s = 0; s < whole; s += NR) {
            float *strip = bp + (size_t)(s / NR) * kc * NR;
            const float *src = B + (long)(j0 + s) * ldb + k0;
            for (int h = 0; h < NR; h += 16) {
                int k = 0;
                for (; k + 16 <= kc; k += 16)
                    transpose16(src + (long)h * ldb + k, ldb, strip + k * NR + h);
                for (; k < kc; k++)
                    for (int j = h; j < h + 16; j++)
                        strip[k * NR + j] = src[(long)j * ldb + k];
            }
        }
    }
    if (whole == nc)
        return;
    /* the last, narrower strip, zero-padded */
    int nr = nc - whole;
    float *strip = bp + (size_t)(whole / NR) * kc * NR;
    for (int k = 0; k < kc; k++)
        for (int j = 0; j < NR; j++)
            strip[k * NR + j] = j >= nr ? 0.0f
                                : tb    ? B[(long)(j0 + whole + j) * ldb + k0 + k]
                                        : B[(long)(k0 + k) * ldb + j0 + whole + j];
}

/* Packs op(A)[i0:i0+mr, k0:k0+kc] as ap[k * MR + i], zero rows past mr. */
__attribute__((target("avx512f"))) static void pack_a_f32(int ta, const float *A, long lda,
                                                          int i0, int mr, int k0, int kc,
                                                          float *ap)
{
    if (ta && mr == MR) {
        for (int k = 0; k < kc; k++)
            _mm256_store_ps(ap + k * MR, _mm256_loadu_ps(A + (long)(k0 + k) * lda + i0));
        return;
    }
    for (int k = 0; k < kc; k++)
        for (int i = 0; i < MR; i++)
            ap[k * MR + i] = i >= mr ? 0.0f
                             : ta    ? A[(long)(k0 + k) * lda + i0 + i]
                                     : A[(long)(i0 + i) * lda + k0 + k];
}

void gemm_kern_f32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (buffers() != 0)
        abort();
    float edge[MR * NR] __attribute__((aligned(64)));
    if (K <= 0) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    /* Each strip of B (KC x NR, 32 KiB) stays in L1 while the strips of A
     * (MCF rows of them, from L2) pass over it. */
    for (int jc = 0; jc < N; jc += NC) {
        int nc = N - jc < NC ? N - jc : NC;
        for (int pc = 0; pc < K; pc += KC) {
            int kc = K - pc < KC ? K - pc : KC;
            int first = pc == 0;
            pack_b_f32(tb, B, ldb, pc, kc, jc, nc, bpack);
            for (int mc = 0; mc < M; mc += MCF) {
                int mcn = M - mc < MCF ? M - mc : MCF;
                for (int ic = 0; ic < mcn; ic += MR) {
                    int mr = mcn - ic < MR ? mcn - ic : MR;
                    if (ta || mr < MR)
                        pack_a_f32(ta, A, lda, mc + ic, mr, pc, kc,
                                   apack + (size_t)(ic / MR) * kc * MR);
                }
                for (int s = 0; s < nc; s += NR) {
                    int nr = nc - s < NR ? nc - s : NR;
                    const float *bp = bpack + (size_t)(s / NR) * kc * NR;
                    for (int ic = 0; ic < mcn; ic += MR) {
                        int mr = mcn - ic < MR ? mcn - ic : MR;
                        const float *ap = apack + (size_t)(ic / MR) * kc * MR;
                        const float *ar = A + (long)(mc + ic) * lda + pc;
                        int packed = ta || mr < MR;
                        float *c = C + (long)(mc + ic) * ldc + jc + s;
                        int whole = mr == MR && nr == NR;
                        float *dst = whole ? c : edge;
                        long ldd = whole ? ldc : NR;
                        float al = whole ? alpha : 1.0f, be = whole ? beta : 0.0f;
                        int fi = whole ? first : 1;
                        if (packed)
                            tile_f32_packed(kc, ap, bp, dst, ldd, al, be, fi);
                        else
                            tile_f32_rows(kc, ar, lda, bp, dst, ldd, al, be, fi);
                        if (!whole)
                            store_edge(edge, mr, nr, c, ldc, alpha, beta, first);
                    }
                }
            }
        }
    }
}

/* ---- bf16 ---- */

/* One bf16 pair (lo = element k, hi = element k+1) in a 32-bit word. */
typedef uint32_t pair_t;

__attribute__((target("avx512f,avx512bf16"))) static void
tile_bf16(int kp, const pair_t *ap, const pair_t *bp, float *c, long ldc, float alpha,
          float beta, int first)
{
    __m512 acc[MR][2];
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int k = 0; k < kp; k++) {
        __m512bh b0 = (__m512bh)_mm512_load_si512((const void *)bp);
        __m512bh b1 = (__m512bh)_mm512_load_si512((const void *)(bp + 16));
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            __m512bh ai = (__m512bh)_mm512_set1_epi32((int)ap[i]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
        }
        ap += MR;
        bp += NR;
    }
    store_tile(acc, c, ldc, alpha, beta, first);
}

/* 16 floats at x (n valid, the rest zero) and 16 more at x + 16 as 16 bf16
 * pairs, rounded to nearest even. */
__attribute__((target("avx512f,avx512bf16"))) static void pairs16(const float *x, int n,
                                                                  pair_t *out)
{
    __mmask16 m0 = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
    int n1 = n - 16;
    __mmask16 m1 = (__mmask16)(n1 >= 16 ? 0xffff : n1 <= 0 ? 0 : (1u << n1) - 1);
    __m512 lo = _mm512_maskz_loadu_ps(m0, x), hi = _mm512_maskz_loadu_ps(m1, x + 16);
    _mm512_storeu_si512((void *)out, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

/* One fp32 value as bf16, the same rounding as pairs16. */
__attribute__((target("avx512f,avx512bf16"))) static uint16_t one_bf16(float x)
{
    pair_t p[16];
    float v[32] = {x};
    pairs16(v, 1, p);
    return (uint16_t)(p[0] & 0xffff);
}

/* A row of n fp32 values (stride 1) as n/2 pairs written dst[q * stride]. */
static void row_pairs(const float *x, int n, pair_t *dst, int stride)
{
    pair_t tmp[16];
    for (int k = 0; k < n; k += 32) {
        int m = n - k < 32 ? n - k : 32;
        pairs16(x + k, m, tmp);
        for (int q = 0; q < (m + 1) / 2; q++)
            dst[(size_t)(k / 2 + q) * stride] = tmp[q];
    }
}

static pair_t make_pair(uint16_t lo, uint16_t hi)
{
    return (pair_t)lo | (pair_t)hi << 16;
}

/* op(A) = A^T: rows k and k+1 of the stored A give the pairs of MR
 * columns at once (masked past mr), rounded as pairs16 rounds. */
__attribute__((target("avx512f,avx512bf16"))) static void
pack_at_bf16(const float *A, long lda, int i0, int mr, int k0, int kc, pair_t *ap)
{
    __mmask16 m = (__mmask16)((1u << mr) - 1);
    for (int q = 0; q < (kc + 1) / 2; q++) {
        const float *r = A + (long)(k0 + 2 * q) * lda + i0;
        __m256bh lo = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r));
        __m512i v = _mm512_cvtepu16_epi32((__m256i)lo);
        if (2 * q + 1 < kc) {
            __m256bh hi = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r + lda));
            v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)hi), 16));
        }
        _mm512_mask_storeu_epi32(ap + (size_t)q * MR, 0xff, v);
    }
}

/* A already in bf16 (rows lda apart): each pair is two neighbours of a
 * row, copied; the last one alone when kc is odd. */
static void pack_ah_bf16(const uint16_t *Ah, long lda, int i0, int mr, int k0, int kc,
                         pair_t *ap)
{
    int kp = (kc + 1) / 2;
    for (int i = 0; i < MR; i++) {
        const uint16_t *r = Ah + (long)(i0 + i) * lda + k0;
        for (int q = 0; q < kp; q++)
            ap[q * MR + i] = i >= mr          ? 0
                             : 2 * q + 1 < kc ? make_pair(r[2 * q], r[2 * q + 1])
                                              : r[2 * q];
    }
}

/* op(A)[i0:i0+mr, k0:k0+kc] as ap[kp * MR + i], zero past mr and kc; from
 * the bf16 Ah when there is one. */
static void pack_a_bf16(int ta, const float *A, const uint16_t *Ah, long lda, int i0, int mr,
                        int k0, int kc, pair_t *ap)
{
    if (Ah) {
        pack_ah_bf16(Ah, lda, i0, mr, k0, kc, ap);
        return;
    }
    if (ta) {
        pack_at_bf16(A, lda, i0, mr, k0, kc, ap);
        return;
    }
    int kp = (kc + 1) / 2;
    for (int i = 0; i < MR; i++) {
        if (i >= mr) {
            for (int q = 0; q < kp; q++)
                ap[q * MR + i] = 0;
        } else {
            row_pairs(A + (long)(i0 + i) * lda + k0, kc, ap + i, MR);
        }
    }
}

/* 16 columns of row r of B as bf16 (n valid, the rest zero). */
__attribute__((target("avx512f,avx512bf16"))) static __m256i
row16_bf16(const uint16_t *Bh, const float *Bf, long at, int n)
{
    if (Bf) {
        __mmask16 m = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
        return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, Bf + at));
    }
    if (n >= 16)
        return _mm256_loadu_si256((const void *)(Bh + at));
    uint16_t t[16] = {0};
    memcpy(t, Bh + at, sizeof(uint16_t) * (size_t)n);
    return _mm256_loadu_si256((const void *)t);
}

/* Strip of op(B) = B (K,N) stored by rows: pairs interleave rows r, r+1. */
__attribute__((target("avx512f,avx512bf16"))) static void
pack_b_rows_bf16(const uint16_t *Bh, const float *Bf, long ldb, int k0, int kc, long col, int nr,
                 pair_t *bp)
{
    int kp = (kc + 1) / 2;
    for (int h = 0; h < NR; h += 16) {
        int n = nr - h;
        for (int q = 0; q < kp; q++) {
            __m512i v = _mm512_setzero_si512();
            if (n > 0) {
                long r = k0 + 2 * q;
                __m512i lo = _mm512_cvtepu16_epi32(row16_bf16(Bh, Bf, r * ldb + col + h, n));
                v = lo;
                if (2 * q + 1 < kc) {
                    __m512i hi =
                        _mm512_cvtepu16_epi32(row16_bf16(Bh, Bf, (r + 1) * ldb + col + h, n));
                    v = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
                }
            }
            _mm512_store_si512((void *)(bp + (size_t)q * NR + h), v);
        }
    }
}

/* A whole strip of op(B) = B^T (NR rows of B, K contiguous): the pairs of
 * each row are 32-bit words, transposed 16 x 16 at a time (an fp32 B is
 * rounded to pairs first, 16 rows x 16 pairs through `tmp`). */
static void pack_b_cols_bf16(const uint16_t *Bh, const float *Bf, long ldb, int k0, int kc,
                             long col, pair_t *bp)
{
    int kp = (kc + 1) / 2, q = 0;
    pair_t tmp[16 * 16] __attribute__((aligned(64)));
    for (; 2 * (q + 16) <= kc; q += 16)
        for (int h = 0; h < NR; h += 16) {
            if (Bf) {
                for (int j = 0; j < 16; j++)
                    pairs16(Bf + (col + h + j) * ldb + k0 + 2 * q, 32, tmp + 16 * j);
                transpose16((const float *)tmp, 16, (float *)bp + (size_t)q * NR + h);
            } else {
                const uint16_t *src = Bh + (col + h) * ldb + k0 + 2 * q;
                transpose16((const float *)src, ldb / 2, (float *)bp + (size_t)q * NR + h);
            }
        }
    for (; q < kp; q++) /* the last pairs, one at a time */
        for (int j = 0; j < NR; j++) {
            long at = (col + j) * ldb + k0 + 2 * q;
            int two = 2 * q + 1 < kc;
            uint16_t lo = Bh ? Bh[at] : one_bf16(Bf[at]);
            uint16_t hi = !two ? 0 : Bh ? Bh[at + 1] : one_bf16(Bf[at + 1]);
            bp[(size_t)q * NR + j] = make_pair(lo, hi);
        }
}

/* The strip op(B)[k0:k0+kc, col:col+nr] of an NF4 B decoded into qstrip,
 * laid out as the stored B would hold it: NR rows of kc (ld KC2) when tb,
 * kc rows of nr (ld NR) when not. Returns the leading dimension. */
static long decode_strip(int tb, const struct gemm_nf4 *Bq, long ldb, int k0, int kc, long col,
                         int nr)
{
    if (tb) {
        for (int j = 0; j < nr; j++)
            nf4_dequantize_bf16_range(Bq->t, Bq->base + (size_t)(col + j) * ldb + k0,
                                      (size_t)kc, qstrip + (size_t)j * KC2);
        return KC2;
    }
    for (int r = 0; r < kc; r++)
        nf4_dequantize_bf16_range(Bq->t, Bq->base + (size_t)(k0 + r) * ldb + col, (size_t)nr,
                                  qstrip + (size_t)r * NR);
    return NR;
}

/* op(B)[k0:k0+kc, j0:j0+nc] into NR-column strips of pairs:
 * bp[kp * NR + j]. An NF4 B is decoded a strip at a time into qstrip and
 * packed from there as a bf16 one. */
static void pack_b_bf16(int tb, const uint16_t *Bh, const float *Bf, const struct gemm_nf4 *Bq,
                        long ldb, int k0, int kc, int j0, int nc, pair_t *bp)
{
    int kp = (kc + 1) / 2;
    for (int s = 0; s < nc; s += NR, bp += (size_t)kp * NR) {
        int nr = nc - s < NR ? nc - s : NR;
        const uint16_t *h = Bh;
        long ld = ldb, col = j0 + s;
        int k = k0;
        if (Bq) {
            ld = decode_strip(tb, Bq, ldb, k0, kc, col, nr);
            h = qstrip;
            k = 0;
            col = 0;
        }
        if (!tb) {
            pack_b_rows_bf16(h, Bf, ld, k, kc, col, nr, bp);
            continue;
        }
        if (nr == NR && (Bf || ld % 2 == 0)) {
            pack_b_cols_bf16(h, Bf, ld, k, kc, col, bp);
            continue;
        }
        for (int j = 0; j < NR; j++) {
            if (j >= nr) {
                for (int q = 0; q < kp; q++)
                    bp[q * NR + j] = 0;
                continue;
            }
            if (Bf) {
                row_pairs(Bf + (col + j) * ld + k, kc, bp + j, NR);
                continue;
            }
            const uint16_t *src = h + (col + j) * ld + k;
            int whole = kc / 2;
            for (int q = 0; q < whole; q++)
                memcpy(&bp[q * NR + j], src + 2 * q, sizeof(pair_t));
            if (kc & 1)
                bp[whole * NR + j] = src[kc - 1];
        }
    }
}

static void kern_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                      const uint16_t *Ah, int lda, const uint16_t *Bh, const float *Bf,
                      const struct gemm_nf4 *Bq, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (buffers() != 0)
        abort();
    float edge[MR * NR] __attribute__((aligned(64)));
    if (K <= 0) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    /* Blocks of K outermost: A's rows (MCB at a time) are rounded to bf16
     * once per block of K, and meet every panel of B. */
    pair_t *bp = (pair_t *)bpack, *ap = (pair_t *)apack;
    for (int pc = 0; pc < K; pc += KC2) {
        int kc = K - pc < KC2 ? K - pc : KC2, kp = (kc + 1) / 2;
        int first = pc == 0;
        for (int mc = 0; mc < M; mc += MCB) {
            int mcn = M - mc < MCB ? M - mc : MCB;
            for (int ic = 0; ic < mcn; ic += MR) {
                int mr = mcn - ic < MR ? mcn - ic : MR;
                pack_a_bf16(ta, A, Ah, lda, mc + ic, mr, pc, kc,
                            ap + (size_t)(ic / MR) * kp * MR);
            }
            for (int jc = 0; jc < N; jc += NC) {
                int nc = N - jc < NC ? N - jc : NC;
                pack_b_bf16(tb, Bh, Bf, Bq, ldb, pc, kc, jc, nc, bp);
                for (int ic = 0; ic < mcn; ic += MR) {
                    int mr = mcn - ic < MR ? mcn - ic : MR;
                    const pair_t *a = ap + (size_t)(ic / MR) * kp * MR;
                    for (int s = 0; s < nc; s += NR) {
                        int nr = nc - s < NR ? nc - s : NR;
                        const pair_t *b = bp + (size_t)(s / NR) * kp * NR;
                        float *c = C + (long)(mc + ic) * ldc + jc + s;
                        if (mr == MR && nr == NR) {
                            tile_bf16(kp, a, b, c, ldc, alpha, beta, first);
                        } else {
                            tile_bf16(kp, a, b, edge, NR, 1.0f, 0.0f, 1);
                            store_edge(edge, mr, nr, c, ldc, alpha, beta, first);
                        }
                    }
                }
            }
        }
    }
}

void gemm_kern_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const uint16_t *Bh, const float *Bf, const struct gemm_nf4 *Bq, int ldb,
                    float beta, float *C, int ldc)
{
    kern_bf16(ta, tb, M, N, K, alpha, A, NULL, lda, Bh, Bf, Bq, ldb, beta, C, ldc);
}

void gemm_kern_bf16_ah(int M, int N, int K, float alpha, const uint16_t *Ah, int lda,
                       int tb, const uint16_t *Bh, const float *Bf, const struct gemm_nf4 *Bq,
                       int ldb, float beta, float *C, int ldc)
{
    kern_bf16(0, tb, M, N, K, alpha, NULL, Ah, lda, Bh, Bf, Bq, ldb, beta, C, ldc);
}

__attribute__((target("avx512f,avx512bf16"))) void
gemm_kern_round_bf16(const float *x, int ldx, int rows, int cols, uint16_t *out, int ldo)
{
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j += 16) {
            int n = cols - j < 16 ? cols - j : 16;
            __mmask16 m = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
            __m512 v = _mm512_maskz_loadu_ps(m, x + (long)i * ldx + j);
            __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
            if (n == 16) {
                _mm256_storeu_si256((void *)(out + (long)i * ldo + j), h);
            } else {
                uint16_t t[16];
                _mm256_storeu_si256((void *)t, h);
                memcpy(out + (long)i * ldo + j, t, sizeof(uint16_t) * (size_t)n);
            }
        }
}
