/* cuda_attn_tc.cu - causal grouped-query attention on tensor cores: the
 * bf16 path of cuda_attention_forward/backward (contract in cuda_ops.h;
 * cuda_attn.cu chooses it and keeps the fp32 kernels as its reference).
 *
 * The same flash-style walk as the fp32 kernels (online softmax, tiles no
 * row can see skipped whole, the packed-example rule and the cap applied
 * per element, no (T,T) array, no atomics), laid out as FlashAttention-2:
 *   - every product is mma.sync m16n8k16 (bf16 in, fp32 sums;
 *     cuda_mma.cuh), whose fragment layout PTX documents, so a lane knows
 *     which rows and columns it holds;
 *   - the rows a block owns (Q forward, Q and dO for dq, K and V for dk
 *     and dv) are staged once and held in registers as A fragments; the
 *     scores, p, dP and dS of a tile, the running max and sum of each row
 *     and the accumulated outputs (O, dq, dk, dv) live in registers too: a
 *     row's max and sum are its lanes' columns and two shuffles across a
 *     quad, O is rescaled where it is, and p (dS) becomes the next
 *     product's A fragment where it is (the C of two 8-column tiles is the
 *     A of a 16-column step). Shared memory holds only the tiles walked;
 *   - those (K and V forward and for dq, Q and dO for dk and dv) are
 *     double-buffered: the next tile is copied from global memory
 *     asynchronously (cp.async, through __pipeline_memcpy_async) into the
 *     second pair of bf16 tiles while the warps multiply the first. The
 *     inputs are bf16 as the trainer keeps them (issue 36, change 1i: q,
 *     k and v as their products and rotary positions write them; dO as
 *     the kernel that makes D writes it), so a tile lands as the products
 *     read it, with no rounding pass between;
 *   - no bank conflicts: staged rows are padded so that a fragment's
 *     loads of a K, Q, V or dO tile fall on 32 distinct banks (tc_ld says
 *     how), and the softmax touches no shared memory at all;
 *   - sums in fp32; scores, the softmax, its running max and sum, lse, D
 *     and the accumulated outputs stay fp32, p and dS are rounded to bf16
 *     for their product.
 * So the results are those of bf16 inputs with fp32 sums, as PyTorch's
 * flash attention under bf16 autocast; tests/gpu/test_cuda_attn.c holds
 * them to 2e-2 of each tensor's magnitude against the CPU's fp32 run on
 * the same bf16-rounded inputs (the emulator saw at most 6.5e-3).
 *
 * Tiles: a block of 4 warps owns 64 rows (query rows forward and for dq,
 * key rows for dk and dv), 16 per warp (a lane: rows g and g + 8, g =
 * lane / 4), and walks tiles of 64 on the other side. The head dimension
 * is a template bound (32, 64, 128: the smallest holding hd), the staged
 * tiles padded with zeros past hd. Shared memory at bound 128: 68 KB (four
 * bf16 tiles of 64 rows of 136).
 *
 * Backward: 7 products, not FlashAttention-2's 5. FlashAttention-2 runs
 * one kernel over key tiles that adds each tile's dS K into dq with
 * floating-point atomics, in whatever order the blocks finish: different
 * bits from run to run, which this backend does not allow (the tests run
 * twice and compare bits, and a resumed run must repeat). So one kernel
 * owns rows of dq (across the key tiles), another rows of dk and dv
 * (across the query tiles of each head of the group, heads in order), both
 * recomputing S, P and dP: every sum runs in a fixed order and the same
 * GPU kind gives the same bits, for 2 products more (S and dP twice). The
 * dk/dv kernel computes S^T = K Q^T and dP^T = V dO^T, so that P^T and
 * dS^T are A fragments for dv += P^T dO and dk += dS^T Q as they stand.
 * Each kernel writes its gradient rows as fp32, or as the products read
 * them (struct attn_grad_out: bf16 rows of the caller's width, dq and dk
 * rotated back by their positions first; issue 36, change 1o).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_pipeline.h>

#include "train/cuda/cuda_attn_common.cuh"
#include "train/cuda/cuda_bf16.cuh"
#include "train/cuda/cuda_mma.cuh"

extern "C" {
#include "train/cuda/cuda_attn_tc.h"
}

#define TC_ROWS 64     /* rows a block owns, and the tile on the other side */
#define TC_THREADS 128 /* 4 warps of 16 rows */
#define WM 16          /* a warp's rows, and a product's K step */
#define NT (TC_ROWS / 8) /* 8-column tiles of a score tile */

typedef __nv_bfloat16 bf16;

/* A staged bf16 row's stride: 8 past the head (16 bytes). A row is then
 * 20, 36 or 68 words, 4 times an odd number, so rows g = 0..7 start on 8
 * distinct multiples of 4 modulo 32 banks, and rows 2t (t = 0..3) on 4
 * distinct multiples of 8: the fragment loads below (hold_rows,
 * rows_by_rows_t: bank 4 odd g + t; accumulate: 8 odd t + g / 2) fall on
 * 32 distinct banks. */
template <int HDMAX>
struct tc_ld {
    static const int H = HDMAX + 8;
};

template <int HDMAX>
static size_t tile_h_bytes()
{
    return sizeof(bf16) * TC_ROWS * tc_ld<HDMAX>::H;
}

/* The four staged tiles at the start of shared memory: x[k] and y[k] the
 * pair a walk stages at its k-th buffer (K and V, or Q and dO). */
template <int HDMAX>
__device__ __forceinline__ void tile_pairs(bf16 *x[2], bf16 *y[2])
{
    const int n = TC_ROWS * tc_ld<HDMAX>::H;
    x[0] = (bf16 *)cuda_shared();
    y[0] = x[0] + n;
    x[1] = y[0] + n;
    y[1] = x[1] + n;
}

/* Elements a copy moves: 8, 4 or 2 (cp.async's 16, 8 or 4 bytes) where
 * hd and every array allow (each row then starts on that many bytes),
 * else 1 (plain loads). */
__device__ __forceinline__ int copy_step(int hd, const void *a, const void *b, const void *c,
                                         const void *d)
{
    uintptr_t any = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d;
    for (int step = 8; step > 1; step /= 2)
        if (hd % step == 0 && any % (2 * (uintptr_t)step) == 0)
            return step;
    return 1;
}

/* Stages rows [r0, r0+TC_ROWS) of head h (of n), hd bf16 each, into a
 * (TC_ROWS, tc_ld::H) tile: `step` values a copy (copy_step), copied
 * asynchronously (the caller commits the batch, and waits for it and a
 * barrier before any thread reads the tile) or, at step 1, loaded now;
 * zeros past T and from hd up to HDMAX, stored now. Every word up to
 * HDMAX of every row is written, so a tile staged over an old one leaves
 * nothing of it. */
template <int HDMAX>
__device__ __forceinline__ void stage(bf16 *dst, const uint16_t *src, int b, int T, int r0,
                                      int n, int h, int hd, int step)
{
    const int ld = tc_ld<HDMAX>::H;
    for (int e = threadIdx.x; e < TC_ROWS * HDMAX / step; e += TC_THREADS) {
        int r = e / (HDMAX / step), d = e % (HDMAX / step) * step;
        bf16 *to = dst + r * ld + d;
        if (r0 + r < T && d < hd) {
            const uint16_t *from = src + row_at(b, T, r0 + r, n, h, hd) + d;
            if (step > 1)
                __pipeline_memcpy_async(to, from, sizeof(bf16) * step);
            else
                memcpy(to, from, sizeof(bf16));
        } else {
            memset(to, 0, sizeof(bf16) * step);
        }
    }
}

/* ---- fragments (cuda_mma.cuh: lane l holds rows g = l / 4 and g + 8 of
 * its warp's 16, columns 2t and 2t + 1 of each 8, t = l % 4) */

/* Two floats rounded to the bf16 pair of one fragment word (the first in
 * the low half), and two staged bf16 as one (memcpy: the words are bf16
 * pairs to the compiler, not integers). */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}
__device__ __forceinline__ uint32_t word_of(const bf16 *p) /* p[0], p[1] */
{
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return u;
}
__device__ __forceinline__ uint32_t pair_of(const bf16 *lo, const bf16 *hi)
{
    uint16_t a, b;
    memcpy(&a, lo, sizeof a);
    memcpy(&b, hi, sizeof b);
    return (uint32_t)a | (uint32_t)b << 16;
}

/* This warp's 16 rows of a staged tile as A fragments, one per 16 columns
 * of the head: the rows a block owns stay in registers. */
template <int HDMAX>
__device__ __forceinline__ void hold_rows(uint32_t (*a)[4], const bf16 *tile, int warp, int g,
                                          int t)
{
    const int ld = tc_ld<HDMAX>::H;
    for (int kk = 0; kk < HDMAX / WM; kk++) {
        const bf16 *row = tile + (warp * WM + g) * ld + kk * WM + 2 * t;
        a[kk][0] = word_of(row);
        a[kk][1] = word_of(row + 8 * ld);
        a[kk][2] = word_of(row + 8);
        a[kk][3] = word_of(row + 8 * ld + 8);
    }
}

/* The two row tiles a block owns (Q forward with nothing in s1; Q and dO
 * for dq; K and V for dk and dv): rows [r0, r0+TC_ROWS) of head h (of n)
 * of src0 and src1 staged into s0 and s1 (the second buffers of the walked
 * tiles, which the walk's first tile does not use) and held in this
 * warp's A fragments a0 and a1. Every thread of the block calls it. */
template <int HDMAX>
__device__ __forceinline__ void hold_two(uint32_t (*a0)[4], uint32_t (*a1)[4], bf16 *s0,
                                         bf16 *s1, const uint16_t *src0, const uint16_t *src1,
                                         int b, int T, int r0, int n, int h, int hd, int step,
                                         int warp, int g, int t)
{
    stage<HDMAX>(s0, src0, b, T, r0, n, h, hd, step);
    if (src1)
        stage<HDMAX>(s1, src1, b, T, r0, n, h, hd, step);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    hold_rows<HDMAX>(a0, s0, warp, g, t);
    if (src1)
        hold_rows<HDMAX>(a1, s1, warp, g, t);
}

/* c[n] (16, 8 a tile, NT tiles) = A (16, HDMAX) X^T, A held, X staged as
 * (TC_ROWS, HDMAX) rows: B's column j is X's row j (K or V forward and for
 * dq, Q or dO for dk/dv); the scores' (or dP's) rows of this warp. */
template <int HDMAX>
__device__ __forceinline__ void rows_by_rows_t(float (*c)[4], const uint32_t (*a)[4],
                                               const bf16 *x, int g, int t)
{
    const int ld = tc_ld<HDMAX>::H;
    for (int n = 0; n < NT; n++) {
        c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
        const bf16 *row = x + (n * 8 + g) * ld + 2 * t;
        for (int kk = 0; kk < HDMAX / WM; kk++) {
            uint32_t b[2] = {word_of(row + kk * WM), word_of(row + kk * WM + 8)};
            mma_16816(c[n], a[kk], b);
        }
    }
}

/* acc (16, HDMAX as HDMAX / 8 tiles) += P X, P (16, TC_ROWS) this warp's
 * rows in c's layout (the scores' tiles, rewritten in place: p, dS),
 * X staged (TC_ROWS, HDMAX). The C of tiles 2kk and 2kk + 1 is, rounded to
 * bf16, P's A fragment for columns 16kk..16kk+15; B's rows are X's rows
 * (lanes g and g + 1 read one word). */
template <int HDMAX>
__device__ __forceinline__ void accumulate(float (*acc)[4], const float (*p)[4], const bf16 *x,
                                           int g, int t)
{
    const int ld = tc_ld<HDMAX>::H;
    for (int kk = 0; kk < TC_ROWS / WM; kk++) {
        uint32_t pa[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]),
                          pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                          pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                          pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
        const bf16 *col = x + (kk * WM + 2 * t) * ld + g;
        for (int n = 0; n < HDMAX / 8; n++) {
            const bf16 *e = col + n * 8;
            uint32_t b[2] = {pair_of(e, e + ld), pair_of(e + 8 * ld, e + 9 * ld)};
            mma_16816(acc[n], pa, b);
        }
    }
}

/* Writes this lane's columns of rows u = 0, 1 (rows g, g + 8) of acc to
 * the global rows dst[u] (NULL: past T), d < hd: each row is one
 * block's alone, and what it held is never read (change 1e). */
template <int HDMAX>
__device__ __forceinline__ void store_rows(float *const dst[2], const float (*acc)[4], int t,
                                           int hd)
{
    for (int u = 0; u < 2; u++) {
        if (!dst[u])
            continue;
        for (int n = 0; n < HDMAX / 8; n++)
            for (int e = 0; e < 2; e++) {
                int d = n * 8 + 2 * t + e;
                if (d < hd)
                    dst[u][d] = acc[n][2 * u + e];
            }
    }
}

/* A lane's two rows (rows[u], past T: none) of head h (of n) into o:
 * store_rows' values, or bf16 rows ld apart, rotated back first where
 * o.cos is set (rope_kernel's sign -1 arithmetic: pair (i, i + hd/2)
 * at the row's position; hd a multiple of 16, so the pair's second value
 * is this lane's too, 8-column tile hd/16 further on). */
template <int HDMAX>
__device__ __forceinline__ void store_grad(const struct attn_grad_out &o, int b, int T,
                                           const int rows[2], int n, int h, int hd,
                                           const int32_t *seg, const float (*acc)[4], int t)
{
    const int NO = HDMAX / 8, half = hd / 2;
    if (o.f) {
        float *const dst[2] = {rows[0] < T ? o.f + row_at(b, T, rows[0], n, h, hd) : NULL,
                               rows[1] < T ? o.f + row_at(b, T, rows[1], n, h, hd) : NULL};
        store_rows<HDMAX>(dst, acc, t, hd);
        return;
    }
    for (int u = 0; u < 2; u++) {
        if (rows[u] >= T)
            continue;
        size_t bt = (size_t)b * T + rows[u];
        uint16_t *dst = o.b + bt * (size_t)o.ld + (size_t)h * hd;
        int pos = rows[u] - (seg ? seg[bt] : 0);
#pragma unroll
        for (int m = 0; m < NO; m++)
            for (int e = 0; e < 2; e++) {
                int d = m * 8 + 2 * t + e;
                float val = acc[m][2 * u + e];
                if (d >= hd || (o.cos && d >= half))
                    continue;
                if (!o.cos) {
                    dst[d] = cuda_f32_bf16(val);
                    continue;
                }
                float w = 0.0f; /* the pair's second value, tile half / 8 on */
#pragma unroll
                for (int k = 0; k < NO; k++)
                    if (k * 8 == m * 8 + half)
                        w = acc[k][2 * u + e];
                float c = o.cos[(size_t)pos * half + d], s = -o.sin[(size_t)pos * half + d];
                float lo = __fsub_rn(__fmul_rn(val, c), __fmul_rn(w, s));
                float hi = __fadd_rn(__fmul_rn(w, c), __fmul_rn(val, s));
                dst[d] = cuda_f32_bf16(lo);
                dst[d + half] = cuda_f32_bf16(hi);
            }
    }
}

/* The first tile from t on (a tile's first row, up to last) that meets the
 * query tile q0 (key tiles; keys = 1) or the key tile k0 (query tiles;
 * keys = 0); past last if none. Each try is a vote, so a barrier. */
__device__ __forceinline__ int next_meeting(const int32_t *seg, int b, int T, int fixed, int t,
                                           int last, int keys)
{
    while (t <= last && !(keys ? tiles_meet(seg, b, T, fixed, TC_ROWS, t, TC_ROWS)
                               : tiles_meet(seg, b, T, t, TC_ROWS, fixed, TC_ROWS)))
        t += TC_ROWS;
    return t;
}

/* ---- forward */

/* grid (query tiles, H, B). Shared: K and V (bf16), two of each; nothing
 * else. Q (A fragments), the scores, p, O and each row's max and sum stay
 * in registers: a row's max and sum are the lane's 16 columns and two
 * shuffles across its quad, p becomes P V's A fragments where it is, and
 * O is rescaled where it is. */
template <int HDMAX>
__global__ void __launch_bounds__(TC_THREADS)
    attn_tc_fwd_kernel(uint16_t *out, uint16_t *outb, int ldo, float *lse, const uint16_t *q,
                       const uint16_t *k, const uint16_t *v, const int32_t *seg, int T, int H,
                       int KV, int hd, float scale, float cap)
{
    const int NO = HDMAX / 8; /* 8-column tiles of O */
    bf16 *Ks[2], *Vs[2];
    tile_pairs<HDMAX>(Ks, Vs);
    const int b = blockIdx.z, h = blockIdx.y, q0 = last_first(blockIdx.x) * TC_ROWS;
    const int kh = h / (H / KV);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int ri[2] = {q0 + warp * WM + g, q0 + warp * WM + g + 8}; /* this lane's rows */
    const int lo[2] = {seg_lo(seg, b, T, ri[0]), seg_lo(seg, b, T, ri[1])};
    const int step = copy_step(hd, q, k, v, q);

    /* Q is staged in K's second buffer, and stays in A fragments */
    uint32_t qa[HDMAX / WM][4];
    hold_two<HDMAX>(qa, NULL, Ks[1], NULL, q, NULL, b, T, q0, H, h, hd, step, warp, g, t);

    int klast = min(q0 + TC_ROWS - 1, T - 1);
    int k0 = next_meeting(seg, b, T, q0, 0, klast, 1);
    if (k0 <= klast) {
        stage<HDMAX>(Ks[0], k, b, T, k0, KV, kh, hd, step);
        stage<HDMAX>(Vs[0], v, b, T, k0, KV, kh, hd, step);
    }
    __pipeline_commit();
    float o[NO][4];
    for (int n = 0; n < NO; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int cur = 0; k0 <= klast; cur ^= 1) {
        __pipeline_wait_prior(0);
        /* tile k0 has landed in buffer cur, every warp holds Q, and no warp
         * reads the other buffer any more (its tile was the last one) */
        __syncthreads();
        int kn = next_meeting(seg, b, T, q0, k0 + TC_ROWS, klast, 1);
        if (kn <= klast) { /* lands while this tile is multiplied */
            stage<HDMAX>(Ks[cur ^ 1], k, b, T, kn, KV, kh, hd, step);
            stage<HDMAX>(Vs[cur ^ 1], v, b, T, kn, KV, kh, hd, step);
        }
        __pipeline_commit();

        float s[NT][4];
        rows_by_rows_t<HDMAX>(s, qa, Ks[cur], g, t);
        float mt[2] = {-INFINITY, -INFINITY};
        for (int n = 0; n < NT; n++)
            for (int e = 0; e < 4; e++) {
                int u = e / 2, c = k0 + n * 8 + 2 * t + e % 2;
                float x = visible(ri[u], c, lo[u], T) ? score_of(s[n][e], scale, cap) : -INFINITY;
                s[n][e] = x;
                mt[u] = fmaxf(mt[u], x);
            }
        float alpha[2], ps[2] = {0.0f, 0.0f};
        for (int u = 0; u < 2; u++) {
            mt[u] = fmaxf(mt[u], __shfl_xor_sync(0xffffffffu, mt[u], 1));
            mt[u] = fmaxf(mt[u], __shfl_xor_sync(0xffffffffu, mt[u], 2));
            float mnew = fmaxf(m[u], mt[u]);
            /* mnew is -inf only while the row has seen no key: keep o, l at 0 */
            alpha[u] = mnew == -INFINITY ? 1.0f : expf(m[u] - mnew);
            m[u] = mnew;
        }
        for (int n = 0; n < NT; n++)
            for (int e = 0; e < 4; e++) {
                int u = e / 2;
                float p = s[n][e] == -INFINITY ? 0.0f : expf(s[n][e] - m[u]);
                s[n][e] = p;
                ps[u] += p;
            }
        for (int u = 0; u < 2; u++) {
            /* a butterfly over the quad: a + b is b + a, so the same bits in
             * each of the four lanes */
            ps[u] += __shfl_xor_sync(0xffffffffu, ps[u], 1);
            ps[u] += __shfl_xor_sync(0xffffffffu, ps[u], 2);
            l[u] = l[u] * alpha[u] + ps[u];
        }
        for (int n = 0; n < NO; n++) {
            o[n][0] *= alpha[0];
            o[n][1] *= alpha[0];
            o[n][2] *= alpha[1];
            o[n][3] *= alpha[1];
        }
        accumulate<HDMAX>(o, s, Vs[cur], g, t);
        k0 = kn;
        /* the next tile's wait and barrier come before its buffers change */
    }
    for (int u = 0; u < 2; u++) {
        if (ri[u] >= T)
            continue;
        float inv = 1.0f / l[u]; /* l > 0: row i sees at least key i */
        size_t dst = row_at(b, T, ri[u], H, h, hd);
        size_t bdst = ((size_t)b * T + ri[u]) * (size_t)ldo + (size_t)h * hd;
        for (int n = 0; n < NO; n++)
            for (int e = 0; e < 2; e++) {
                int d = n * 8 + 2 * t + e;
                if (d < hd) {
                    float val = o[n][2 * u + e] * inv;
                    if (out)
                        out[dst + d] = cuda_f32_bf16(val);
                    if (outb)
                        outb[bdst + d] = cuda_f32_bf16(val);
                }
            }
        if (t == 0)
            lse[((size_t)b * H + h) * T + ri[u]] = m[u] + logf(l[u]);
    }
}

/* ---- backward */

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

/* dq rows. grid (query tiles, H, B). Shared: K and V (bf16), two of
 * each. Q and dO (A fragments), S, dP, dS and the dq rows in registers, as
 * the forward's. */
template <int HDMAX>
__global__ void __launch_bounds__(TC_THREADS)
    attn_tc_dq_kernel(struct attn_grad_out gq, const uint16_t *dout, const float *D,
                      const float *lse,
                      const uint16_t *q, const uint16_t *k, const uint16_t *v,
                      const int32_t *seg, int T, int H, int KV, int hd, float scale, float cap)
{
    const int NO = HDMAX / 8;
    bf16 *Ks[2], *Vs[2];
    tile_pairs<HDMAX>(Ks, Vs);
    const int b = blockIdx.z, h = blockIdx.y, q0 = last_first(blockIdx.x) * TC_ROWS;
    const int kh = h / (H / KV);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int ri[2] = {q0 + warp * WM + g, q0 + warp * WM + g + 8};
    const int lo[2] = {seg_lo(seg, b, T, ri[0]), seg_lo(seg, b, T, ri[1])};
    const size_t hrow = ((size_t)b * H + h) * T;
    float li[2], Di[2];
    for (int u = 0; u < 2; u++) {
        li[u] = ri[u] < T ? lse[hrow + ri[u]] : 0.0f;
        Di[u] = ri[u] < T ? D[hrow + ri[u]] : 0.0f;
    }
    const int step = copy_step(hd, q, dout, k, v);

    /* Q and dO are staged in the second buffers, and stay in fragments */
    uint32_t qa[HDMAX / WM][4], ga[HDMAX / WM][4];
    hold_two<HDMAX>(qa, ga, Ks[1], Vs[1], q, dout, b, T, q0, H, h, hd, step, warp, g, t);

    int klast = min(q0 + TC_ROWS - 1, T - 1);
    int k0 = next_meeting(seg, b, T, q0, 0, klast, 1);
    if (k0 <= klast) {
        stage<HDMAX>(Ks[0], k, b, T, k0, KV, kh, hd, step);
        stage<HDMAX>(Vs[0], v, b, T, k0, KV, kh, hd, step);
    }
    __pipeline_commit();
    float acc[NO][4];
    for (int n = 0; n < NO; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    for (int cur = 0; k0 <= klast; cur ^= 1) {
        __pipeline_wait_prior(0);
        __syncthreads(); /* as forward: cur has landed, the other buffer is free */
        int kn = next_meeting(seg, b, T, q0, k0 + TC_ROWS, klast, 1);
        if (kn <= klast) {
            stage<HDMAX>(Ks[cur ^ 1], k, b, T, kn, KV, kh, hd, step);
            stage<HDMAX>(Vs[cur ^ 1], v, b, T, kn, KV, kh, hd, step);
        }
        __pipeline_commit();

        float s[NT][4], dp[NT][4];
        rows_by_rows_t<HDMAX>(s, qa, Ks[cur], g, t);
        rows_by_rows_t<HDMAX>(dp, ga, Vs[cur], g, t);
        for (int n = 0; n < NT; n++)
            for (int e = 0; e < 4; e++) {
                int u = e / 2, c = k0 + n * 8 + 2 * t + e % 2;
                s[n][e] = ds_at(ri[u], c, lo[u], T, s[n][e], dp[n][e], li[u], Di[u], scale, cap);
            }
        accumulate<HDMAX>(acc, s, Ks[cur], g, t); /* dq += dS K */
        k0 = kn;
    }
    store_grad<HDMAX>(gq, b, T, ri, H, h, hd, seg, acc, t);
}

/* dk and dv rows of one KV head. grid (key tiles, KV, B). Shared: Q and
 * dO (bf16), two of each, and the query tile's lse, D and first rows. K
 * and V (A fragments), S^T and dP^T (key rows, query columns: so P^T and
 * dS^T are A fragments where they are) and the dk and dv rows in
 * registers. Lane rows are key rows here. */
template <int HDMAX>
__global__ void __launch_bounds__(TC_THREADS)
    attn_tc_dkdv_kernel(struct attn_grad_out gk, struct attn_grad_out gv, const uint16_t *dout,
                        const float *D,
                        const float *lse, const uint16_t *q, const uint16_t *k,
                        const uint16_t *v, const int32_t *seg, int T, int H, int KV, int hd,
                        float scale, float cap)
{
    typedef tc_ld<HDMAX> L;
    const int NO = HDMAX / 8;
    bf16 *Qs[2], *Gs[2];
    tile_pairs<HDMAX>(Qs, Gs);
    float *Ls = (float *)(Gs[1] + TC_ROWS * L::H), *Drow = Ls + TC_ROWS;
    int *Lo = (int *)(Drow + TC_ROWS);
    const int b = blockIdx.z, kh = blockIdx.y, k0 = blockIdx.x * TC_ROWS;
    const int group = H / KV;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int cj[2] = {k0 + warp * WM + g, k0 + warp * WM + g + 8}; /* this lane's key rows */
    const int step = copy_step(hd, q, dout, k, v);

    /* K and V are staged in the second buffers, and stay in fragments */
    uint32_t ka[HDMAX / WM][4], va[HDMAX / WM][4];
    hold_two<HDMAX>(ka, va, Qs[1], Gs[1], k, v, b, T, k0, KV, kh, hd, step, warp, g, t);
    float ak[NO][4], av[NO][4]; /* dk, dv */
    for (int n = 0; n < NO; n++)
        for (int e = 0; e < 4; e++)
            ak[n][e] = av[n][e] = 0.0f;

    /* The walk: every head of the group in order, and in each the query
     * tiles that meet this key tile (the same in every head: seg is per
     * sequence). Query rows before k0 see none of these keys (k0 is a
     * tile's first). The vote is a barrier, as forward: every warp holds K
     * and V before Q and dO are staged in the first buffers. */
    const int qfirst = next_meeting(seg, b, T, k0, k0, T - 1, 0);
    int h = kh * group, q0 = qfirst;
    const int hend = (kh + 1) * group;
    if (q0 < T) {
        stage<HDMAX>(Qs[0], q, b, T, q0, H, h, hd, step);
        stage<HDMAX>(Gs[0], dout, b, T, q0, H, h, hd, step);
    } else {
        h = hend; /* no query row sees these keys (only past T) */
    }
    __pipeline_commit();

    for (int cur = 0; h < hend; cur ^= 1) {
        const size_t hrow = ((size_t)b * H + h) * T;
        __pipeline_wait_prior(0);
        /* Q, dO of (h, q0) have landed in buffer cur; no warp reads the
         * other buffer, or the last tile's lse, D and first rows */
        __syncthreads();
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
            stage<HDMAX>(Qs[cur ^ 1], q, b, T, qn, H, hn, hd, step);
            stage<HDMAX>(Gs[cur ^ 1], dout, b, T, qn, H, hn, hd, step);
        }
        __pipeline_commit();

        float st[NT][4], dpt[NT][4]; /* S^T, dP^T; then P^T, dS^T in place */
        rows_by_rows_t<HDMAX>(st, ka, Qs[cur], g, t);
        rows_by_rows_t<HDMAX>(dpt, va, Gs[cur], g, t);
        for (int n = 0; n < NT; n++)
            for (int e = 0; e < 4; e++) {
                /* the lanes of a quad read one query's lse, D, first row:
                 * one word each, 4 words on 4 banks */
                int u = e / 2, x = n * 8 + 2 * t + e % 2;
                float p = 0.0f, ds = 0.0f;
                if (visible(q0 + x, cj[u], Lo[x], T)) {
                    float sc = score_of(st[n][e], scale, cap);
                    p = expf(sc - Ls[x]);
                    ds = dscore_of(p, dpt[n][e], Drow[x], sc, scale, cap);
                }
                st[n][e] = p;
                dpt[n][e] = ds;
            }
        accumulate<HDMAX>(av, st, Gs[cur], g, t);  /* dv += P^T dO */
        accumulate<HDMAX>(ak, dpt, Qs[cur], g, t); /* dk += dS^T Q */
        h = hn;
        q0 = qn;
        /* the next tile's wait and barrier come before its buffers change */
    }
    store_grad<HDMAX>(gk, b, T, cj, KV, kh, hd, seg, ak, t);
    store_grad<HDMAX>(gv, b, T, cj, KV, kh, hd, seg, av, t);
}

/* ---- launches */

/* four staged tiles (two of each walked input); dk/dv adds the query
 * tile's lse, D and first rows */
template <int HDMAX>
static size_t fwd_smem()
{
    return 4 * tile_h_bytes<HDMAX>();
}

template <int HDMAX>
static size_t dkdv_smem()
{
    return 4 * tile_h_bytes<HDMAX>() + 3 * sizeof(float) * TC_ROWS;
}

template <int HDMAX>
static void fwd_launch(uint16_t *out, uint16_t *outb, int ldo, float *lse, const uint16_t *q,
                       const uint16_t *k, const uint16_t *v, const int32_t *seg, int B, int T,
                       int H, int KV, int hd, float scale, float cap)
{
    size_t smem = fwd_smem<HDMAX>();
    allow_smem(attn_tc_fwd_kernel<HDMAX>, smem);
    dim3 grid((unsigned)((T + TC_ROWS - 1) / TC_ROWS), (unsigned)H, (unsigned)B);
    cuda_launch(attn_tc_fwd_kernel<HDMAX>, grid, dim3(TC_THREADS), smem, out, outb, ldo, lse, q,
                k, v, seg, T, H, KV, hd, scale, cap);
}

template <int HDMAX>
static void bwd_launch(struct attn_grad_out dq, struct attn_grad_out dk, struct attn_grad_out dv,
                       const float *D, const uint16_t *dout,
                       const float *lse, const uint16_t *q, const uint16_t *k,
                       const uint16_t *v, const int32_t *seg, int B, int T, int H, int KV,
                       int hd, float scale, float cap)
{
    unsigned tiles = (unsigned)((T + TC_ROWS - 1) / TC_ROWS);
    size_t smem = fwd_smem<HDMAX>();
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

extern "C" void cuda_attn_tc_forward(uint16_t *out, uint16_t *outb, int ldo, float *lse,
                                     const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                     const int32_t *seg, int B, int T, int H, int KV, int hd,
                                     float scale, float cap)
{
    attn_check_shape(hd >= 1 && hd <= CUDA_ATTN_TC_MAX_HD,
                     "attention on tensor cores: head dimension must be 1..128");
    if (hd <= 32)
        fwd_launch<32>(out, outb, ldo, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
    else if (hd <= 64)
        fwd_launch<64>(out, outb, ldo, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
    else
        fwd_launch<128>(out, outb, ldo, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
}

extern "C" void cuda_attn_tc_backward(struct attn_grad_out dq, struct attn_grad_out dk,
                                      struct attn_grad_out dv, const float *D,
                                      const uint16_t *dout, const float *lse, const uint16_t *q,
                                      const uint16_t *k, const uint16_t *v, const int32_t *seg,
                                      int B, int T, int H, int KV, int hd, float scale,
                                      float cap)
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
