/* cuda_attn_tc.cu - causal grouped-query attention on tensor cores: the
 * bf16 path of cuda_attention_forward/backward (contract in cuda_ops.h;
 * cuda_attn.cu chooses it and keeps the fp32 kernels as its reference).
 *
 * The same flash-style walk as the fp32 kernels (online softmax, tiles no
 * row can see skipped whole, the packed-example rule and the cap applied
 * per element, no (T,T) array, no atomics), with every product on tensor
 * cores through wmma 16x16x16 fragments, laid out as FlashAttention-2:
 *   - the tiles walked (K and V forward and for dq, Q and dO for dk and
 *     dv) are double-buffered: the next tile's rows are copied from global
 *     memory asynchronously (cp.async, through __pipeline_memcpy_async)
 *     while the warps multiply the current one. The callers' activations
 *     are still fp32, so a tile lands as fp32 (16-byte copies) and is
 *     rounded to bf16 (round to nearest even) into the tile the products
 *     read: the landing buffer and the bf16 tile are the two buffers. When
 *     the activations become bf16 the rounding pass goes and the landing
 *     buffer becomes the second bf16 tile;
 *   - the rows a block owns (Q forward and for dq, K and V for dk and dv;
 *     dO for dq) are staged once and then held in registers as matrix_a
 *     fragments; the output (O, dq, dk, dv) accumulates in fragments
 *     across the whole walk, and the running max and sum of each row in
 *     two registers of its lanes. O is rescaled in its fragments as the
 *     max moves (scale_rows): it goes through shared memory once, at the
 *     end;
 *   - the scores and p (and dP, dS) pass through shared memory between
 *     the products and the per-element work: wmma promises no layout of a
 *     fragment's elements, so a row's max needs them stored. The
 *     per-element passes walk their columns in an order rotated per lane
 *     (pair_col) so that no two lanes hit one bank;
 *   - products sum in fp32; scores, the softmax, its running max and sum,
 *     lse, D and the accumulated outputs stay fp32, p and dS are rounded
 *     to bf16 for their product.
 * So the results are those of bf16 inputs with fp32 sums, as PyTorch's
 * flash attention under bf16 autocast; tests/gpu/test_cuda_attn.c holds
 * them to 2e-2 of each tensor's magnitude against the CPU's fp32 run on
 * the same bf16-rounded inputs (the emulator saw at most 6.5e-3).
 *
 * Tiles: a block of 4 warps owns 64 rows (query rows forward and for dq,
 * key rows for dk and dv), 16 per warp, and walks tiles of 64 on the
 * other side. Per element work (masks, exp, dS) gives each row 2 lanes of
 * its warp, 32 columns each, so a row's max and sum are one shuffle. The
 * head dimension is a template bound (32, 64, 128: the smallest holding
 * hd), the staged tiles padded with zeros past hd. Shared memory at hd
 * 128: 128, 141 and 151 KB (forward, dq, dk and dv), under an A100's 163.
 *
 * Backward: 7 products, not FlashAttention-2's 5. FlashAttention-2 runs
 * one kernel over key tiles that adds each tile's dS K into dq with
 * floating-point atomics, in whatever order the blocks finish: different
 * bits from run to run, which this backend does not allow (the tests run
 * twice and compare bits, and a resumed run must repeat). So one kernel
 * owns rows of dq (its accumulators in fragments across the key tiles),
 * another rows of dk and dv (across the query tiles of each head of the
 * group, heads in order), both recomputing S, P and dP: every sum runs in
 * a fixed order and the same GPU kind gives the same bits, for 2 products
 * more (S and dP twice).
 */
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <mma.h>

#include "train/cuda/cuda_attn_common.cuh"

extern "C" {
#include "train/cuda/cuda_attn_tc.h"
}

using namespace nvcuda;

#define TC_ROWS 64     /* rows a block owns, and the tile on the other side */
#define TC_THREADS 128 /* 4 warps of 16 rows */
#define WM 16          /* a fragment's edge */

typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::matrix_a, WM, WM, WM, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, WM, WM, WM, bf16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, WM, WM, WM, bf16, wmma::col_major> frag_b_col;
typedef wmma::fragment<wmma::accumulator, WM, WM, WM, float> frag_c;

/* Row strides in shared memory, padded against bank conflicts and kept to
 * what wmma needs (a multiple of 16 bytes; every fragment's first element
 * on 32 bytes, which the region sizes below, all multiples of 32 bytes,
 * preserve). */
template <int HDMAX>
struct tc_ld {
    static const int H = HDMAX + 8;     /* bf16: a staged Q, K, V or dO row */
    static const int S = TC_ROWS + 4;   /* fp32: a row of scores or dP */
    static const int P = TC_ROWS + 8;   /* bf16: a row of p or dS */
    static const int O = HDMAX + 4;     /* fp32: a row of an output tile */
    /* an output tile is written where the landing buffer was */
    static_assert(2 * HDMAX >= O, "an output tile must fit in the landing buffer");
};

template <int HDMAX>
static size_t tile_h_bytes()
{
    return sizeof(bf16) * TC_ROWS * tc_ld<HDMAX>::H;
}
static size_t tile_s_bytes() { return sizeof(float) * TC_ROWS * (TC_ROWS + 4); }
static size_t tile_p_bytes() { return sizeof(bf16) * TC_ROWS * (TC_ROWS + 8); }
/* the landing buffer: two (TC_ROWS, HDMAX) fp32 tiles, unpadded (only the
 * rounding pass reads it, a row's words in turn) */
template <int HDMAX>
static size_t landing_bytes()
{
    return 2 * sizeof(float) * TC_ROWS * HDMAX;
}

/* Starts copying rows [r0, r0+TC_ROWS) of head h (of n), hd floats each,
 * into raw (TC_ROWS, HDMAX) fp32 without waiting: 16 bytes a copy where
 * the rows allow (vec: hd a multiple of 4, arrays on 16 bytes), else 4.
 * Rows past T and columns past hd are not copied (land() writes zeros
 * there). The caller commits the batch. */
template <int HDMAX>
__device__ __forceinline__ void fetch(float *raw, const float *src, int b, int T, int r0, int n,
                                      int h, int hd, bool vec)
{
    const int step = vec ? 4 : 1;
    for (int e = threadIdx.x; e < TC_ROWS * HDMAX / step; e += TC_THREADS) {
        int r = e / (HDMAX / step), d = e % (HDMAX / step) * step;
        if (r0 + r < T && d < hd)
            __pipeline_memcpy_async(raw + r * HDMAX + d, src + row_at(b, T, r0 + r, n, h, hd) + d,
                                    sizeof(float) * step);
    }
}

/* The landed rows [r0, ...) rounded to bf16 into a (TC_ROWS, tc_ld::H)
 * tile, zeros past T and past hd up to HDMAX, two columns a step. Every
 * thread's copies must have landed: after __pipeline_wait_prior and a
 * barrier. */
template <int HDMAX>
__device__ __forceinline__ void land(bf16 *dst, const float *raw, int T, int r0, int hd)
{
    const int ld = tc_ld<HDMAX>::H;
    for (int e = threadIdx.x; e < TC_ROWS * HDMAX / 2; e += TC_THREADS) {
        int r = e / (HDMAX / 2), d = e % (HDMAX / 2) * 2;
        bool in = r0 + r < T;
        float x = in && d < hd ? raw[r * HDMAX + d] : 0.0f;
        float y = in && d + 1 < hd ? raw[r * HDMAX + d + 1] : 0.0f;
        *(__nv_bfloat162 *)(dst + r * ld + d) = __floats2bfloat162_rn(x, y);
    }
}

/* This warp's 16 rows of a staged tile as matrix_a fragments, one per 16
 * columns of the head: the rows the block owns stay in registers. */
template <int HDMAX>
__device__ __forceinline__ void hold_rows(frag_a *f, const bf16 *tile, int warp)
{
    const int ld = tc_ld<HDMAX>::H;
    for (int kk = 0; kk < HDMAX / WM; kk++)
        wmma::load_matrix_sync(f[kk], tile + warp * WM * ld + kk * WM, ld);
}

/* C (16, TC_ROWS) of this warp = A (16, HDMAX) B^T, A held in fragments,
 * B staged as (TC_ROWS, HDMAX) rows (K or V, Q or dO): one score tile's
 * rows, stored row-major at c with stride ldc. */
template <int HDMAX>
__device__ __forceinline__ void rows_by_rows_t(float *c, int ldc, const frag_a *a, const bf16 *b)
{
    const int ld = tc_ld<HDMAX>::H;
    for (int n = 0; n < TC_ROWS / WM; n++) {
        frag_c acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < HDMAX / WM; kk++) {
            frag_b_col fb;
            wmma::load_matrix_sync(fb, b + n * WM * ld + kk * WM, ld);
            wmma::mma_sync(acc, a[kk], fb, acc);
        }
        wmma::store_matrix_sync(c + n * WM, acc, ldc, wmma::mem_row_major);
    }
}

/* acc[n] += P (16, TC_ROWS) of this warp times the staged (TC_ROWS, HDMAX)
 * rows of x, for every 16 columns n of the head. */
template <int HDMAX>
__device__ __forceinline__ void accumulate(frag_c *acc, const bf16 *p, const bf16 *x)
{
    const int ldp = tc_ld<HDMAX>::P, ldx = tc_ld<HDMAX>::H;
    for (int kk = 0; kk < TC_ROWS / WM; kk++) {
        frag_a fa;
        wmma::load_matrix_sync(fa, p + kk * WM, ldp);
        for (int n = 0; n < HDMAX / WM; n++) {
            frag_b_row fb;
            wmma::load_matrix_sync(fb, x + kk * WM * ldx + n * WM, ldx);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

/* The per-element passes: lane l of a warp has row l / 2 of the warp's 16
 * and half l % 2 of its 64 columns, and walks that half two columns at a
 * step (a float2 of scores, a bf16 pair of p). At step t it takes pair
 * (t + l % 2 + 2 (l / 16)) % 16, not pair t. Why: with row strides of 68
 * words (scores) and 36 (p), rows r and r + 8 of a warp and the two halves
 * of a row start on the same bank, so a walk in step (the first version's)
 * put the 32 lanes on 8 banks, a 4-way conflict. Rotated, the float2s of
 * each half-warp (8-byte accesses are served a half-warp at a time) fall
 * on 16 distinct bank pairs, and the bf16 pairs of the warp on 32 distinct
 * banks. Returns the first column of the pair, within the half. */
__device__ __forceinline__ int pair_col(int t, int lane)
{
    return 2 * ((t + lane % 2 + 2 * (lane / 16)) % 16);
}

/* Multiplies each row of this warp's accumulators acc (16, HDMAX) by f,
 * the value its two lanes hold. wmma promises no map from a fragment's
 * elements to rows, so f goes through rs, a (16, 16) fp32 tile of this
 * warp holding f across each row, loaded as an accumulator: fragments of
 * one type share one map (the CUDA guide's rule for element-wise work on
 * fragments), so its element e is the factor of element e of every acc.
 * Written column-major, lane (row r, half c) writing columns 2j + c: word
 * 16 (2j + c) + r, the 32 lanes on 32 banks. */
template <int HDMAX>
__device__ __forceinline__ void scale_rows(frag_c *acc, float *rs, float f, int lane)
{
    for (int j = 0; j < WM / 2; j++)
        rs[(2 * j + lane % 2) * WM + lane / 2] = f;
    __syncwarp();
    frag_c fs;
    wmma::load_matrix_sync(fs, rs, WM, wmma::mem_col_major);
    for (int n = 0; n < HDMAX / WM; n++)
        for (int e = 0; e < fs.num_elements; e++)
            acc[n].x[e] *= fs.x[e];
    __syncwarp(); /* every lane has read rs before it is written again */
}

/* The first tile from t on (a tile's first row, up to last) that meets the
 * query tile q0 (key tiles; keys = 0) or the key tile k0 (query tiles;
 * keys = 1); past last if none. Each try is a vote, so a barrier. */
__device__ __forceinline__ int next_meeting(const int32_t *seg, int b, int T, int fixed, int t,
                                           int last, int keys)
{
    while (t <= last && !(keys ? tiles_meet(seg, b, T, fixed, TC_ROWS, t, TC_ROWS)
                               : tiles_meet(seg, b, T, t, TC_ROWS, fixed, TC_ROWS)))
        t += TC_ROWS;
    return t;
}

/* ---- forward */

/* grid (query tiles, H, B). Shared: the landing buffer for K and V, K and
 * V (bf16), the scores (fp32), p (bf16) and a row-factor tile a warp
 * (scale_rows). Q and the output rows live in fragments. */
template <int HDMAX>
__global__ void __launch_bounds__(TC_THREADS)
    attn_tc_fwd_kernel(float *out, float *lse, const float *q, const float *k, const float *v,
                       const int32_t *seg, int T, int H, int KV, int hd, float scale, float cap)
{
    typedef tc_ld<HDMAX> L;
    float *raw = cuda_shared(); /* K's landing rows, then V's */
    bf16 *Ks = (bf16 *)(raw + 2 * TC_ROWS * HDMAX), *Vs = Ks + TC_ROWS * L::H;
    float *Ss = (float *)(Vs + TC_ROWS * L::H);
    bf16 *Ps = (bf16 *)(Ss + TC_ROWS * L::S);
    float *Rs = (float *)(Ps + TC_ROWS * L::P);
    const int b = blockIdx.z, h = blockIdx.y, q0 = last_first(blockIdx.x) * TC_ROWS;
    const int kh = h / (H / KV);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = warp * WM + lane / 2, half = lane % 2; /* this lane's row, half of it */
    const int i = q0 + r;
    const int lo = seg_lo(seg, b, T, i);
    const bool vec = hd % 4 == 0 && (uintptr_t)q % 16 == 0 && (uintptr_t)k % 16 == 0 &&
                     (uintptr_t)v % 16 == 0;
    float *srow = Ss + r * L::S + half * (TC_ROWS / 2);
    bf16 *prow = Ps + r * L::P + half * (TC_ROWS / 2);
    float *rs = Rs + warp * WM * WM;

    /* Q lands through K's buffers, and stays in fragments */
    fetch<HDMAX>(raw, q, b, T, q0, H, h, hd, vec);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    land<HDMAX>(Ks, raw, T, q0, hd);
    __syncthreads();
    frag_a qf[HDMAX / WM];
    hold_rows<HDMAX>(qf, Ks, warp);

    int klast = min(q0 + TC_ROWS - 1, T - 1);
    /* the vote is the barrier: every warp holds Q before K lands in Ks */
    int k0 = next_meeting(seg, b, T, q0, 0, klast, 1);
    if (k0 <= klast) {
        fetch<HDMAX>(raw, k, b, T, k0, KV, kh, hd, vec);
        fetch<HDMAX>(raw + TC_ROWS * HDMAX, v, b, T, k0, KV, kh, hd, vec);
    }
    __pipeline_commit();
    frag_c o[HDMAX / WM];
    for (int n = 0; n < HDMAX / WM; n++)
        wmma::fill_fragment(o[n], 0.0f);
    float m = -INFINITY, l = 0.0f;

    while (k0 <= klast) {
        __pipeline_wait_prior(0);
        __syncthreads(); /* tile k0 has landed, and no warp reads the last K, V */
        land<HDMAX>(Ks, raw, T, k0, hd);
        land<HDMAX>(Vs, raw + TC_ROWS * HDMAX, T, k0, hd);
        __syncthreads(); /* the landing buffer is free */
        int kn = next_meeting(seg, b, T, q0, k0 + TC_ROWS, klast, 1);
        if (kn <= klast) { /* lands while this tile is multiplied */
            fetch<HDMAX>(raw, k, b, T, kn, KV, kh, hd, vec);
            fetch<HDMAX>(raw + TC_ROWS * HDMAX, v, b, T, kn, KV, kh, hd, vec);
        }
        __pipeline_commit();

        rows_by_rows_t<HDMAX>(Ss + warp * WM * L::S, L::S, qf, Ks);
        __syncwarp();
        float mt = -INFINITY;
        for (int t = 0; t < TC_ROWS / 4; t++) {
            int x = pair_col(t, lane), c = k0 + half * (TC_ROWS / 2) + x;
            float2 s = *(float2 *)(srow + x);
            s.x = visible(i, c, lo, T) ? score_of(s.x, scale, cap) : -INFINITY;
            s.y = visible(i, c + 1, lo, T) ? score_of(s.y, scale, cap) : -INFINITY;
            *(float2 *)(srow + x) = s;
            mt = fmaxf(mt, fmaxf(s.x, s.y));
        }
        float mnew = fmaxf(m, fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1)));
        /* mnew is -inf only while the row has seen no key: keep o, l at 0 */
        float alpha = mnew == -INFINITY ? 1.0f : expf(m - mnew);
        float ps = 0.0f;
        for (int t = 0; t < TC_ROWS / 4; t++) {
            int x = pair_col(t, lane);
            float2 s = *(float2 *)(srow + x);
            float p0 = s.x == -INFINITY ? 0.0f : expf(s.x - mnew);
            float p1 = s.y == -INFINITY ? 0.0f : expf(s.y - mnew);
            *(__nv_bfloat162 *)(prow + x) = __floats2bfloat162_rn(p0, p1);
            ps += p0;
            ps += p1;
        }
        /* both lanes add the same two halves: the same bits in each */
        l = l * alpha + (ps + __shfl_xor_sync(0xffffffffu, ps, 1));
        m = mnew;
        scale_rows<HDMAX>(o, rs, alpha, lane); /* its warp syncs publish p too */
        accumulate<HDMAX>(o, Ps + warp * WM * L::P, Vs);
        k0 = kn;
        /* the next tile's wait and barrier come before K and V change */
    }
    /* l > 0 where i < T: row i sees at least key i */
    scale_rows<HDMAX>(o, rs, l > 0.0f ? 1.0f / l : 0.0f, lane);
    /* the output rows leave through the landing buffer: the last tile
     * fetched nothing, and every thread is past its rounding pass */
    float *Os = raw;
    for (int n = 0; n < HDMAX / WM; n++)
        wmma::store_matrix_sync(Os + warp * WM * L::O + n * WM, o[n], L::O, wmma::mem_row_major);
    __syncwarp();
    if (i >= T)
        return;
    const float *orow = Os + r * L::O;
    float *dst = out + row_at(b, T, i, H, h, hd);
    for (int d = half * (HDMAX / 2); d < (half + 1) * (HDMAX / 2) && d < hd; d++)
        dst[d] = orow[d];
    if (half == 0)
        lse[((size_t)b * H + h) * T + i] = m + logf(l);
}

/* ---- backward */

/* Writes this warp's accumulators (16, HDMAX) to shared w (stride
 * tc_ld::O) and adds each lane's half row into g's row (global), d < hd. */
template <int HDMAX>
__device__ __forceinline__ void add_rows(float *g, float *w, frag_c *acc, int warp, int r,
                                         int half, int hd)
{
    const int ld = tc_ld<HDMAX>::O;
    for (int n = 0; n < HDMAX / WM; n++)
        wmma::store_matrix_sync(w + warp * WM * ld + n * WM, acc[n], ld, wmma::mem_row_major);
    __syncwarp();
    if (g) {
        const float *wrow = w + r * ld;
        for (int d = half * (HDMAX / 2); d < (half + 1) * (HDMAX / 2) && d < hd; d++)
            g[d] += wrow[d];
    }
    __syncwarp(); /* before w is written again */
}

/* dS of one pair: 0 where query row i cannot see key j; p recomputed from
 * row i's lse li. */
__device__ __forceinline__ float ds_at(int i, int j, int lo, int T, float dot, float dp,
                                       float li, float Di, float scale, float cap)
{
    if (!visible(i, j, lo, T))
        return 0.0f;
    float sc = score_of(dot, scale, cap);
    return dscore_of(expf(sc - li), dp, Di, sc, scale, cap);
}

/* dq rows. grid (query tiles, H, B). Shared: the landing buffer for K and
 * V, K and V (bf16), the scores and dP (fp32), dS (bf16); Q, dO and the dq
 * rows in fragments. */
template <int HDMAX>
__global__ void __launch_bounds__(TC_THREADS)
    attn_tc_dq_kernel(float *dq, const float *dout, const float *D, const float *lse,
                      const float *q, const float *k, const float *v, const int32_t *seg, int T,
                      int H, int KV, int hd, float scale, float cap)
{
    typedef tc_ld<HDMAX> L;
    float *raw = cuda_shared();
    bf16 *Ks = (bf16 *)(raw + 2 * TC_ROWS * HDMAX), *Vs = Ks + TC_ROWS * L::H;
    float *Ss = (float *)(Vs + TC_ROWS * L::H), *Pd = Ss + TC_ROWS * L::S;
    bf16 *Ds = (bf16 *)(Pd + TC_ROWS * L::S);
    const int b = blockIdx.z, h = blockIdx.y, q0 = last_first(blockIdx.x) * TC_ROWS;
    const int kh = h / (H / KV);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = warp * WM + lane / 2, half = lane % 2;
    const int i = q0 + r;
    const int lo = seg_lo(seg, b, T, i);
    const size_t hrow = ((size_t)b * H + h) * T;
    const float li = i < T ? lse[hrow + i] : 0.0f;
    const float Di = i < T ? D[hrow + i] : 0.0f;
    const int c0 = half * (TC_ROWS / 2);
    const bool vec = hd % 4 == 0 && (uintptr_t)q % 16 == 0 && (uintptr_t)dout % 16 == 0 &&
                     (uintptr_t)k % 16 == 0 && (uintptr_t)v % 16 == 0;
    const float *srow = Ss + r * L::S + c0, *dprow = Pd + r * L::S + c0;
    bf16 *dsrow = Ds + r * L::P + c0;

    /* Q and dO land through K's and V's buffers, and stay in fragments */
    fetch<HDMAX>(raw, q, b, T, q0, H, h, hd, vec);
    fetch<HDMAX>(raw + TC_ROWS * HDMAX, dout, b, T, q0, H, h, hd, vec);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    land<HDMAX>(Ks, raw, T, q0, hd);
    land<HDMAX>(Vs, raw + TC_ROWS * HDMAX, T, q0, hd);
    __syncthreads();
    frag_a qf[HDMAX / WM], gf[HDMAX / WM];
    hold_rows<HDMAX>(qf, Ks, warp);
    hold_rows<HDMAX>(gf, Vs, warp);

    int klast = min(q0 + TC_ROWS - 1, T - 1);
    int k0 = next_meeting(seg, b, T, q0, 0, klast, 1); /* a barrier, as forward */
    if (k0 <= klast) {
        fetch<HDMAX>(raw, k, b, T, k0, KV, kh, hd, vec);
        fetch<HDMAX>(raw + TC_ROWS * HDMAX, v, b, T, k0, KV, kh, hd, vec);
    }
    __pipeline_commit();
    frag_c acc[HDMAX / WM];
    for (int n = 0; n < HDMAX / WM; n++)
        wmma::fill_fragment(acc[n], 0.0f);

    while (k0 <= klast) {
        __pipeline_wait_prior(0);
        __syncthreads();
        land<HDMAX>(Ks, raw, T, k0, hd);
        land<HDMAX>(Vs, raw + TC_ROWS * HDMAX, T, k0, hd);
        __syncthreads();
        int kn = next_meeting(seg, b, T, q0, k0 + TC_ROWS, klast, 1);
        if (kn <= klast) {
            fetch<HDMAX>(raw, k, b, T, kn, KV, kh, hd, vec);
            fetch<HDMAX>(raw + TC_ROWS * HDMAX, v, b, T, kn, KV, kh, hd, vec);
        }
        __pipeline_commit();

        rows_by_rows_t<HDMAX>(Ss + warp * WM * L::S, L::S, qf, Ks);
        rows_by_rows_t<HDMAX>(Pd + warp * WM * L::S, L::S, gf, Vs);
        __syncwarp();
        for (int t = 0; t < TC_ROWS / 4; t++) {
            int x = pair_col(t, lane), c = k0 + c0 + x;
            float2 s = *(const float2 *)(srow + x), dp = *(const float2 *)(dprow + x);
            float d0 = ds_at(i, c, lo, T, s.x, dp.x, li, Di, scale, cap);
            float d1 = ds_at(i, c + 1, lo, T, s.y, dp.y, li, Di, scale, cap);
            *(__nv_bfloat162 *)(dsrow + x) = __floats2bfloat162_rn(d0, d1);
        }
        __syncwarp();
        accumulate<HDMAX>(acc, Ds + warp * WM * L::P, Ks);
        k0 = kn;
    }
    /* through the landing buffer, idle now (as forward) */
    add_rows<HDMAX>(i < T ? dq + row_at(b, T, i, H, h, hd) : NULL, raw, acc, warp, r, half, hd);
}

/* dk and dv rows of one KV head. grid (key tiles, KV, B). Shared: the
 * landing buffer for Q and dO, Q and dO (bf16), S and dP transposed (key
 * row, query column; fp32), p and dS transposed (bf16), and the query
 * tile's lse, D and first rows; K, V and the dk and dv rows in fragments.
 * Lane rows are key rows here. */
template <int HDMAX>
__global__ void __launch_bounds__(TC_THREADS)
    attn_tc_dkdv_kernel(float *dk, float *dv, const float *dout, const float *D,
                        const float *lse, const float *q, const float *k, const float *v,
                        const int32_t *seg, int T, int H, int KV, int hd, float scale,
                        float cap)
{
    typedef tc_ld<HDMAX> L;
    float *raw = cuda_shared(); /* Q's landing rows, then dO's */
    bf16 *Qs = (bf16 *)(raw + 2 * TC_ROWS * HDMAX), *Gs = Qs + TC_ROWS * L::H;
    float *St = (float *)(Gs + TC_ROWS * L::H), *Pd = St + TC_ROWS * L::S;
    bf16 *Pt = (bf16 *)(Pd + TC_ROWS * L::S), *Dt = Pt + TC_ROWS * L::P;
    float *Ls = (float *)(Dt + TC_ROWS * L::P), *Drow = Ls + TC_ROWS;
    int *Lo = (int *)(Drow + TC_ROWS);
    const int b = blockIdx.z, kh = blockIdx.y, k0 = blockIdx.x * TC_ROWS;
    const int group = H / KV;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int c = warp * WM + lane / 2, half = lane % 2; /* this lane's key row */
    const int j = k0 + c;
    const int x0 = half * (TC_ROWS / 2);
    const bool vec = hd % 4 == 0 && (uintptr_t)q % 16 == 0 && (uintptr_t)dout % 16 == 0 &&
                     (uintptr_t)k % 16 == 0 && (uintptr_t)v % 16 == 0;
    const float *srow = St + c * L::S + x0, *dprow = Pd + c * L::S + x0;
    bf16 *prow = Pt + c * L::P + x0, *dsrow = Dt + c * L::P + x0;

    /* K and V land through Q's and dO's buffers, and stay in fragments */
    fetch<HDMAX>(raw, k, b, T, k0, KV, kh, hd, vec);
    fetch<HDMAX>(raw + TC_ROWS * HDMAX, v, b, T, k0, KV, kh, hd, vec);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    land<HDMAX>(Qs, raw, T, k0, hd);
    land<HDMAX>(Gs, raw + TC_ROWS * HDMAX, T, k0, hd);
    __syncthreads();
    frag_a kf[HDMAX / WM], vf[HDMAX / WM];
    hold_rows<HDMAX>(kf, Qs, warp);
    hold_rows<HDMAX>(vf, Gs, warp);
    frag_c gk[HDMAX / WM], gv[HDMAX / WM];
    for (int n = 0; n < HDMAX / WM; n++) {
        wmma::fill_fragment(gk[n], 0.0f);
        wmma::fill_fragment(gv[n], 0.0f);
    }

    /* The walk: every head of the group in order, and in each the query
     * tiles that meet this key tile (the same in every head: seg is per
     * sequence). Query rows before k0 see none of these keys (k0 is a
     * tile's first). The vote is a barrier, as forward. */
    const int qfirst = next_meeting(seg, b, T, k0, k0, T - 1, 0);
    int h = kh * group, q0 = qfirst;
    const int hend = (kh + 1) * group;
    if (q0 < T) {
        fetch<HDMAX>(raw, q, b, T, q0, H, h, hd, vec);
        fetch<HDMAX>(raw + TC_ROWS * HDMAX, dout, b, T, q0, H, h, hd, vec);
    } else {
        h = hend; /* no query row sees these keys (only past T) */
    }
    __pipeline_commit();

    while (h < hend) {
        const size_t hrow = ((size_t)b * H + h) * T;
        __pipeline_wait_prior(0);
        __syncthreads(); /* Q, dO of (h, q0) have landed; no warp reads the last ones */
        land<HDMAX>(Qs, raw, T, q0, hd);
        land<HDMAX>(Gs, raw + TC_ROWS * HDMAX, T, q0, hd);
        if (threadIdx.x < TC_ROWS) {
            int qi = q0 + (int)threadIdx.x;
            Ls[threadIdx.x] = qi < T ? lse[hrow + qi] : 0.0f;
            Drow[threadIdx.x] = qi < T ? D[hrow + qi] : 0.0f;
            Lo[threadIdx.x] = seg_lo(seg, b, T, qi);
        }
        __syncthreads();
        int hn = h, qn = next_meeting(seg, b, T, k0, q0 + TC_ROWS, T - 1, 0);
        if (qn >= T) {
            hn = h + 1;
            qn = qfirst;
        }
        if (hn < hend) {
            fetch<HDMAX>(raw, q, b, T, qn, H, hn, hd, vec);
            fetch<HDMAX>(raw + TC_ROWS * HDMAX, dout, b, T, qn, H, hn, hd, vec);
        }
        __pipeline_commit();

        rows_by_rows_t<HDMAX>(St + warp * WM * L::S, L::S, kf, Qs);
        rows_by_rows_t<HDMAX>(Pd + warp * WM * L::S, L::S, vf, Gs);
        __syncwarp();
        for (int t = 0; t < TC_ROWS / 4; t++) {
            int x = pair_col(t, lane), xa = x0 + x;
            float2 s = *(const float2 *)(srow + x), dp = *(const float2 *)(dprow + x);
            float p[2] = {0.0f, 0.0f}, ds[2] = {0.0f, 0.0f};
            float sv[2] = {s.x, s.y}, dpv[2] = {dp.x, dp.y};
            for (int u = 0; u < 2; u++) {
                if (visible(q0 + xa + u, j, Lo[xa + u], T)) {
                    float sc = score_of(sv[u], scale, cap);
                    p[u] = expf(sc - Ls[xa + u]);
                    ds[u] = dscore_of(p[u], dpv[u], Drow[xa + u], sc, scale, cap);
                }
            }
            *(__nv_bfloat162 *)(prow + x) = __floats2bfloat162_rn(p[0], p[1]);
            *(__nv_bfloat162 *)(dsrow + x) = __floats2bfloat162_rn(ds[0], ds[1]);
        }
        __syncwarp();
        accumulate<HDMAX>(gv, Pt + warp * WM * L::P, Gs);
        accumulate<HDMAX>(gk, Dt + warp * WM * L::P, Qs);
        h = hn;
        q0 = qn;
        /* the next tile's wait and barrier come before Q and dO change */
    }
    /* through the landing buffer, idle now (as forward) */
    int in = j < T;
    add_rows<HDMAX>(in ? dk + row_at(b, T, j, KV, kh, hd) : NULL, raw, gk, warp, c, half, hd);
    add_rows<HDMAX>(in ? dv + row_at(b, T, j, KV, kh, hd) : NULL, raw, gv, warp, c, half, hd);
}

/* ---- launches */

template <int HDMAX>
static size_t fwd_smem()
{
    return landing_bytes<HDMAX>() + 2 * tile_h_bytes<HDMAX>() + tile_s_bytes() + tile_p_bytes() +
           sizeof(float) * (TC_THREADS / 32) * WM * WM;
}

template <int HDMAX>
static size_t dq_smem()
{
    return landing_bytes<HDMAX>() + 2 * tile_h_bytes<HDMAX>() + 2 * tile_s_bytes() +
           tile_p_bytes();
}

template <int HDMAX>
static size_t dkdv_smem()
{
    return landing_bytes<HDMAX>() + 2 * tile_h_bytes<HDMAX>() + 2 * tile_s_bytes() +
           2 * tile_p_bytes() + 3 * sizeof(float) * TC_ROWS;
}

template <int HDMAX>
static void fwd_launch(float *out, float *lse, const float *q, const float *k, const float *v,
                       const int32_t *seg, int B, int T, int H, int KV, int hd, float scale,
                       float cap)
{
    size_t smem = fwd_smem<HDMAX>();
    allow_smem(attn_tc_fwd_kernel<HDMAX>, smem);
    dim3 grid((unsigned)((T + TC_ROWS - 1) / TC_ROWS), (unsigned)H, (unsigned)B);
    cuda_launch(attn_tc_fwd_kernel<HDMAX>, grid, dim3(TC_THREADS), smem, out, lse, q, k, v, seg,
                T, H, KV, hd, scale, cap);
}

template <int HDMAX>
static void bwd_launch(float *dq, float *dk, float *dv, const float *D, const float *dout,
                       const float *lse, const float *q, const float *k, const float *v,
                       const int32_t *seg, int B, int T, int H, int KV, int hd, float scale,
                       float cap)
{
    unsigned tiles = (unsigned)((T + TC_ROWS - 1) / TC_ROWS);
    size_t smem = dq_smem<HDMAX>();
    allow_smem(attn_tc_dq_kernel<HDMAX>, smem);
    cuda_launch(attn_tc_dq_kernel<HDMAX>, dim3(tiles, (unsigned)H, (unsigned)B),
                dim3(TC_THREADS), smem, dq, dout, D, lse, q, k, v, seg, T, H, KV, hd, scale,
                cap);
    smem = dkdv_smem<HDMAX>();
    allow_smem(attn_tc_dkdv_kernel<HDMAX>, smem);
    cuda_launch(attn_tc_dkdv_kernel<HDMAX>, dim3(tiles, (unsigned)KV, (unsigned)B),
                dim3(TC_THREADS), smem, dk, dv, dout, D, lse, q, k, v, seg, T, H, KV, hd, scale,
                cap);
}

extern "C" void cuda_attn_tc_forward(float *out, float *lse, const float *q, const float *k,
                                     const float *v, const int32_t *seg, int B, int T, int H,
                                     int KV, int hd, float scale, float cap)
{
    attn_check_shape(hd >= 1 && hd <= CUDA_ATTN_TC_MAX_HD,
                     "attention on tensor cores: head dimension must be 1..128");
    if (hd <= 32)
        fwd_launch<32>(out, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
    else if (hd <= 64)
        fwd_launch<64>(out, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
    else
        fwd_launch<128>(out, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
}

extern "C" void cuda_attn_tc_backward(float *dq, float *dk, float *dv, const float *D,
                                      const float *dout, const float *lse, const float *q,
                                      const float *k, const float *v, const int32_t *seg, int B,
                                      int T, int H, int KV, int hd, float scale, float cap)
{
    attn_check_shape(hd >= 1 && hd <= CUDA_ATTN_TC_MAX_HD,
                     "attention on tensor cores: head dimension must be 1..128");
    if (hd <= 32)
        bwd_launch<32>(dq, dk, dv, D, dout, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
    else if (hd <= 64)
        bwd_launch<64>(dq, dk, dv, D, dout, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
    else
        bwd_launch<128>(dq, dk, dv, D, dout, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
}
