/* cuda_attn_tc.cu - causal grouped-query attention on tensor cores: the
 * bf16 path of cuda_attention_forward/backward (contract in cuda_ops.h;
 * cuda_attn.cu chooses it and keeps the fp32 kernels as its reference).
 *
 * The same flash-style walk as the fp32 kernels (online softmax, tiles no
 * row can see skipped whole, the packed-example rule and the cap applied
 * per element, no (T,T) array, no atomics), with every product on tensor
 * cores through wmma 16x16x16 fragments:
 *   - Q, K, V and dO are rounded to bf16 as their tiles are staged in
 *     shared memory (round to nearest even), the probabilities and dS as
 *     they are written for the second product;
 *   - products sum in fp32; scores, the softmax, its running max and sum,
 *     lse, D and the accumulated outputs stay fp32.
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
 * hd), the staged tiles padded with zeros past hd.
 *
 * Backward as the fp32 path: one kernel owns rows of dq (its accumulators
 * in fragments across the key tiles), another rows of dk and dv (across
 * the query tiles of each head of the group, heads in order), both
 * recomputing p from lse, so every sum runs in a fixed order and the same
 * GPU kind gives the same bits.
 */
#include <math.h>

#include <cuda_bf16.h>
#include <mma.h>

#include "train/cuda/cuda_attn_common.cuh"

extern "C" {
#include "train/cuda/cuda_attn_tc.h"
}

using namespace nvcuda;

#define TC_ROWS 64    /* rows a block owns, and the tile on the other side */
#define TC_THREADS 128 /* 4 warps of 16 rows */
#define WM 16         /* a fragment's edge */

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
    /* the output tile is written where the two score tiles were */
    static_assert(2 * S >= O, "an output tile must fit in the score tiles");
};

template <int HDMAX>
static size_t tile_h_bytes()
{
    return sizeof(bf16) * TC_ROWS * tc_ld<HDMAX>::H;
}
static size_t tile_s_bytes() { return sizeof(float) * TC_ROWS * (TC_ROWS + 4); }
static size_t tile_p_bytes() { return sizeof(bf16) * TC_ROWS * (TC_ROWS + 8); }

/* Rows [r0, r0+TC_ROWS) of head h (of n) as bf16 into a (TC_ROWS, ld)
 * shared tile, zeros past T and past hd up to HDMAX. */
template <int HDMAX>
__device__ __forceinline__ void stage(bf16 *dst, const float *src, int b, int T, int r0, int n,
                                      int h, int hd)
{
    const int ld = tc_ld<HDMAX>::H;
    for (int e = threadIdx.x; e < TC_ROWS * HDMAX; e += TC_THREADS) {
        int r = e / HDMAX, d = e % HDMAX;
        float x = r0 + r < T && d < hd ? src[row_at(b, T, r0 + r, n, h, hd) + d] : 0.0f;
        dst[r * ld + d] = __float2bfloat16_rn(x);
    }
}

/* C (16, TC_ROWS) of this warp = A (16, HDMAX) B^T, B held as (TC_ROWS,
 * HDMAX) rows (K or V, Q or dO staged): one score tile's rows, stored
 * row-major at c with stride ldc. */
template <int HDMAX>
__device__ __forceinline__ void rows_by_rows_t(float *c, int ldc, const bf16 *a, const bf16 *b)
{
    const int ld = tc_ld<HDMAX>::H;
    for (int n = 0; n < TC_ROWS / WM; n++) {
        frag_c acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < HDMAX / WM; kk++) {
            frag_a fa;
            frag_b_col fb;
            wmma::load_matrix_sync(fa, a + kk * WM, ld);
            wmma::load_matrix_sync(fb, b + n * WM * ld + kk * WM, ld);
            wmma::mma_sync(acc, fa, fb, acc);
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

/* ---- forward */

/* grid (query tiles, H, B). Shared: Q, K, V (bf16), the scores (fp32), p
 * (bf16) and the output rows (fp32), which are rescaled per row as the
 * running max moves and so live in shared memory, not in fragments. */
template <int HDMAX>
__global__ void __launch_bounds__(TC_THREADS)
    attn_tc_fwd_kernel(float *out, float *lse, const float *q, const float *k, const float *v,
                       const int32_t *seg, int T, int H, int KV, int hd, float scale, float cap)
{
    typedef tc_ld<HDMAX> L;
    bf16 *Qs = (bf16 *)cuda_shared();
    bf16 *Ks = Qs + TC_ROWS * L::H, *Vs = Ks + TC_ROWS * L::H;
    float *Ss = (float *)(Vs + TC_ROWS * L::H);
    bf16 *Ps = (bf16 *)(Ss + TC_ROWS * L::S);
    float *Os = (float *)(Ps + TC_ROWS * L::P);
    const int b = blockIdx.z, h = blockIdx.y, q0 = last_first(blockIdx.x) * TC_ROWS;
    const int kh = h / (H / KV);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = warp * WM + lane / 2, half = lane % 2; /* this lane's row, half of it */
    const int i = q0 + r;
    const int lo = seg_lo(seg, b, T, i);
    float *srow = Ss + r * L::S + half * (TC_ROWS / 2);
    bf16 *prow = Ps + r * L::P + half * (TC_ROWS / 2);
    float *orow = Os + r * L::O + half * (HDMAX / 2);

    stage<HDMAX>(Qs, q, b, T, q0, H, h, hd);
    for (int d = 0; d < HDMAX / 2; d++)
        orow[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    int klast = min(q0 + TC_ROWS - 1, T - 1);
    for (int k0 = 0; k0 <= klast; k0 += TC_ROWS) {
        if (!tiles_meet(seg, b, T, q0, TC_ROWS, k0, TC_ROWS))
            continue; /* the vote was the barrier: nothing staged is read */
        stage<HDMAX>(Ks, k, b, T, k0, KV, kh, hd);
        stage<HDMAX>(Vs, v, b, T, k0, KV, kh, hd);
        __syncthreads();

        rows_by_rows_t<HDMAX>(Ss + warp * WM * L::S, L::S, Qs + warp * WM * L::H, Ks);
        __syncwarp();
        float mt = -INFINITY;
        for (int j = 0; j < TC_ROWS / 2; j++) {
            int c = k0 + half * (TC_ROWS / 2) + j;
            float s = visible(i, c, lo, T) ? score_of(srow[j], scale, cap) : -INFINITY;
            srow[j] = s;
            mt = fmaxf(mt, s);
        }
        float mnew = fmaxf(m, fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1)));
        /* mnew is -inf only while the row has seen no key: keep o, l at 0 */
        float alpha = mnew == -INFINITY ? 1.0f : expf(m - mnew);
        float ps = 0.0f;
        for (int j = 0; j < TC_ROWS / 2; j++) {
            float p = srow[j] == -INFINITY ? 0.0f : expf(srow[j] - mnew);
            prow[j] = __float2bfloat16_rn(p);
            ps += p;
        }
        /* both lanes add the same two halves: the same bits in each */
        l = l * alpha + (ps + __shfl_xor_sync(0xffffffffu, ps, 1));
        m = mnew;
        for (int d = 0; d < HDMAX / 2; d++)
            orow[d] *= alpha;
        __syncwarp();

        frag_c acc[HDMAX / WM];
        for (int n = 0; n < HDMAX / WM; n++)
            wmma::load_matrix_sync(acc[n], Os + warp * WM * L::O + n * WM, L::O,
                                   wmma::mem_row_major);
        accumulate<HDMAX>(acc, Ps + warp * WM * L::P, Vs);
        for (int n = 0; n < HDMAX / WM; n++)
            wmma::store_matrix_sync(Os + warp * WM * L::O + n * WM, acc[n], L::O,
                                    wmma::mem_row_major);
        __syncwarp();
        /* the next tile's vote is the barrier before K and V change */
    }
    if (i >= T)
        return;
    float inv = 1.0f / l; /* l > 0: row i sees at least key i */
    float *o = out + row_at(b, T, i, H, h, hd);
    for (int d = half * (HDMAX / 2); d < (half + 1) * (HDMAX / 2) && d < hd; d++)
        o[d] = orow[d - half * (HDMAX / 2)] * inv;
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

/* dq rows. grid (query tiles, H, B). Shared: Q, dO, K, V (bf16), the
 * scores and dP (fp32), dS (bf16); the dq rows in fragments. */
template <int HDMAX>
__global__ void __launch_bounds__(TC_THREADS)
    attn_tc_dq_kernel(float *dq, const float *dout, const float *D, const float *lse,
                      const float *q, const float *k, const float *v, const int32_t *seg, int T,
                      int H, int KV, int hd, float scale, float cap)
{
    typedef tc_ld<HDMAX> L;
    bf16 *Qs = (bf16 *)cuda_shared();
    bf16 *Gs = Qs + TC_ROWS * L::H, *Ks = Gs + TC_ROWS * L::H, *Vs = Ks + TC_ROWS * L::H;
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

    stage<HDMAX>(Qs, q, b, T, q0, H, h, hd);
    stage<HDMAX>(Gs, dout, b, T, q0, H, h, hd);
    frag_c acc[HDMAX / WM];
    for (int n = 0; n < HDMAX / WM; n++)
        wmma::fill_fragment(acc[n], 0.0f);

    int klast = min(q0 + TC_ROWS - 1, T - 1);
    for (int k0 = 0; k0 <= klast; k0 += TC_ROWS) {
        if (!tiles_meet(seg, b, T, q0, TC_ROWS, k0, TC_ROWS))
            continue;
        stage<HDMAX>(Ks, k, b, T, k0, KV, kh, hd);
        stage<HDMAX>(Vs, v, b, T, k0, KV, kh, hd);
        __syncthreads();

        rows_by_rows_t<HDMAX>(Ss + warp * WM * L::S, L::S, Qs + warp * WM * L::H, Ks);
        rows_by_rows_t<HDMAX>(Pd + warp * WM * L::S, L::S, Gs + warp * WM * L::H, Vs);
        __syncwarp();
        for (int j = 0; j < TC_ROWS / 2; j++) {
            int c = c0 + j;
            float ds = 0.0f;
            if (visible(i, k0 + c, lo, T)) {
                float sc = score_of(Ss[r * L::S + c], scale, cap);
                ds = dscore_of(expf(sc - li), Pd[r * L::S + c], Di, sc, scale, cap);
            }
            Ds[r * L::P + c] = __float2bfloat16_rn(ds);
        }
        __syncwarp();
        accumulate<HDMAX>(acc, Ds + warp * WM * L::P, Ks);
    }
    __syncthreads(); /* the output rows overwrite other warps' score tiles */
    add_rows<HDMAX>(i < T ? dq + row_at(b, T, i, H, h, hd) : NULL, Ss, acc, warp, r, half, hd);
}

/* dk and dv rows of one KV head. grid (key tiles, KV, B). Shared: K, V,
 * Q, dO (bf16), S and dP transposed (key row, query column; fp32), p and
 * dS transposed (bf16), and the query tile's lse, D and first rows; the
 * dk and dv rows in fragments. Lane rows are key rows here. */
template <int HDMAX>
__global__ void __launch_bounds__(TC_THREADS)
    attn_tc_dkdv_kernel(float *dk, float *dv, const float *dout, const float *D,
                        const float *lse, const float *q, const float *k, const float *v,
                        const int32_t *seg, int T, int H, int KV, int hd, float scale,
                        float cap)
{
    typedef tc_ld<HDMAX> L;
    bf16 *Ks = (bf16 *)cuda_shared();
    bf16 *Vs = Ks + TC_ROWS * L::H, *Qs = Vs + TC_ROWS * L::H, *Gs = Qs + TC_ROWS * L::H;
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

    stage<HDMAX>(Ks, k, b, T, k0, KV, kh, hd);
    stage<HDMAX>(Vs, v, b, T, k0, KV, kh, hd);
    frag_c gk[HDMAX / WM], gv[HDMAX / WM];
    for (int n = 0; n < HDMAX / WM; n++) {
        wmma::fill_fragment(gk[n], 0.0f);
        wmma::fill_fragment(gv[n], 0.0f);
    }

    for (int h = kh * group; h < (kh + 1) * group; h++) {
        const size_t hrow = ((size_t)b * H + h) * T;
        /* query rows before k0 see none of these keys (k0 is a tile's first) */
        for (int q0 = k0; q0 < T; q0 += TC_ROWS) {
            if (!tiles_meet(seg, b, T, q0, TC_ROWS, k0, TC_ROWS))
                continue;
            stage<HDMAX>(Qs, q, b, T, q0, H, h, hd);
            stage<HDMAX>(Gs, dout, b, T, q0, H, h, hd);
            if (threadIdx.x < TC_ROWS) {
                int qi = q0 + (int)threadIdx.x;
                Ls[threadIdx.x] = qi < T ? lse[hrow + qi] : 0.0f;
                Drow[threadIdx.x] = qi < T ? D[hrow + qi] : 0.0f;
                Lo[threadIdx.x] = seg_lo(seg, b, T, qi);
            }
            __syncthreads();

            rows_by_rows_t<HDMAX>(St + warp * WM * L::S, L::S, Ks + warp * WM * L::H, Qs);
            rows_by_rows_t<HDMAX>(Pd + warp * WM * L::S, L::S, Vs + warp * WM * L::H, Gs);
            __syncwarp();
            for (int u = 0; u < TC_ROWS / 2; u++) {
                int x = x0 + u;
                float p = 0.0f, ds = 0.0f;
                if (visible(q0 + x, j, Lo[x], T)) {
                    float sc = score_of(St[c * L::S + x], scale, cap);
                    p = expf(sc - Ls[x]);
                    ds = dscore_of(p, Pd[c * L::S + x], Drow[x], sc, scale, cap);
                }
                Pt[c * L::P + x] = __float2bfloat16_rn(p);
                Dt[c * L::P + x] = __float2bfloat16_rn(ds);
            }
            __syncwarp();
            accumulate<HDMAX>(gv, Pt + warp * WM * L::P, Gs);
            accumulate<HDMAX>(gk, Dt + warp * WM * L::P, Qs);
            /* the next tile's vote is the barrier before Q and dO change */
        }
    }
    __syncthreads(); /* the output rows overwrite other warps' score tiles */
    int in = j < T;
    add_rows<HDMAX>(in ? dk + row_at(b, T, j, KV, kh, hd) : NULL, St, gk, warp, c, half, hd);
    add_rows<HDMAX>(in ? dv + row_at(b, T, j, KV, kh, hd) : NULL, St, gv, warp, c, half, hd);
}

/* ---- launches */

template <int HDMAX>
static size_t fwd_smem()
{
    return 3 * tile_h_bytes<HDMAX>() + tile_s_bytes() + tile_p_bytes() +
           sizeof(float) * TC_ROWS * tc_ld<HDMAX>::O;
}

template <int HDMAX>
static size_t dq_smem()
{
    return 4 * tile_h_bytes<HDMAX>() + 2 * tile_s_bytes() + tile_p_bytes();
}

template <int HDMAX>
static size_t dkdv_smem()
{
    return 4 * tile_h_bytes<HDMAX>() + 2 * tile_s_bytes() + 2 * tile_p_bytes() +
           3 * sizeof(float) * TC_ROWS;
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
