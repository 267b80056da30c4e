/* cuda_attn.cu - rotary positions and causal grouped-query attention on the
 * GPU, forward and backward (contract in cuda_ops.h, first section; the
 * CPU twin is ops_rope_*_seg and ops_attention_*_seg in train/ops.c): the
 * entry points, which send attention to the tensor-core kernels of
 * cuda_attn_tc.cu when the bf16 path is chosen (the default), and the
 * fp32 kernels below, the reference, which run otherwise.
 *
 * Attention is flash-style: a thread block owns a tile of BQ query rows of
 * one head and walks the key tiles its rows can see, each staged in shared
 * memory, keeping a running max and sum per row (online softmax), so no
 * (T,T) array ever exists: memory is the inputs, out and lse. Tiles that
 * causality or the packed-example rule (row i sees keys seg[i]..i) hide
 * from every row of the block are skipped whole; the rest are masked per
 * element.
 *
 * Inputs: q, k, v and dout as bf16 (issue 36, change 1i), as the trainer
 * keeps them; the kernels here widen each value as they stage it and
 * compute in fp32.
 *
 * Backward, with no atomics: a small kernel first writes D = rowsum(dout *
 * out) per row and dout's bf16; then one kernel owns rows of dq (a block per query tile,
 * looping over key tiles) and another owns rows of dk and dv (a block per
 * key tile of a KV head, looping over the query tiles of each query head of
 * its group, heads in order, tiles in order). Both recompute p from lse.
 * Every sum runs in a fixed order, so the same inputs on the same GPU kind
 * give the same bits.
 *
 * Thread layout of every attention kernel: 128 threads, 4 per tile row
 * (rows 8w..8w+7 in warp w), each holding 8 of the tile's 32 columns of
 * scores (c = tx + 4j) and hd/4 of the row's output columns (d = tx + 4i),
 * so a row's reductions are shuffles within 4 lanes and a row's scores
 * pass between its threads through shared memory with only __syncwarp.
 * The head dimension is a template bound (32, 64, 128, 256: the smallest
 * that holds hd) so the accumulators stay in registers; hd itself is read
 * at run time.
 */
#include <stdio.h>
#include <stdlib.h>

#include "train/cuda/cuda_attn_common.cuh"
#include "train/cuda/cuda_bf16.cuh"

extern "C" {
#include "train/cuda/cuda_attn_tc.h"
#include "train/cuda/cuda_ops.h"
}

#define TILE 32             /* query and key rows per tile */
#define THREADS 128         /* 4 threads per tile row */
#define COLS (TILE / 4)     /* score columns per thread */
#define PSTRIDE (TILE + 1)  /* padded row of a (TILE,TILE) score tile */

/* ---- rotary positions */

/* sign +1 rotates by +angle (forward), -1 by -angle (its transpose). The
 * products round separately (no fused multiply-add), as the CPU's do. xb
 * (may be NULL) gets the rotated x as bf16. X: fp32 x, or bf16 (q and k
 * as their products write them: issue 36, change 1i). */
template <typename X>
__global__ void rope_kernel(X *x, uint16_t *xb, int ldxb, int B, int T, int nh, int hd,
                            const int32_t *seg, const float *cos_t, const float *sin_t, float sign)
{
    int half = hd / 2;
    size_t n = (size_t)B * T * nh * half;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(e % half);
        size_t rest = e / half;
        size_t bt = rest / nh;
        int t = (int)(bt % T) - (seg ? seg[bt] : 0);
        X *v = x + rest * hd;
        float a = cuda_val_in(v, (size_t)i), b = cuda_val_in(v, (size_t)(i + half));
        float c = cos_t[(size_t)t * half + i], s = sign * sin_t[(size_t)t * half + i];
        float lo = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        float hi = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
        cuda_val_out(v, (size_t)i, lo);
        cuda_val_out(v, (size_t)(i + half), hi);
        if (xb) { /* row bt of nh x hd values, ldxb apart */
            size_t o = bt * (size_t)ldxb + (rest % nh) * hd + i;
            xb[o] = cuda_f32_bf16(lo);
            xb[o + half] = cuda_f32_bf16(hi);
        }
    }
}

template <typename X>
static void rope_launch(X *x, uint16_t *xb, int ldxb, int B, int T, int nh, int hd,
                        const int32_t *seg, const float *cos_t, const float *sin_t, float sign)
{
    size_t n = (size_t)B * T * nh * (hd / 2);
    if (n == 0)
        return;
    size_t blocks = (n + 255) / 256;
    if (blocks > 65536)
        blocks = 65536; /* grid-stride beyond that */
    cuda_launch(rope_kernel<X>, dim3((unsigned)blocks), dim3(256), 0, x, xb,
                ldxb > nh * hd ? ldxb : nh * hd, B, T, nh, hd, seg, cos_t, sin_t, sign);
}

extern "C" void cuda_rope_forward(float *x, int B, int T, int nh, int hd, const int32_t *seg,
                                  const float *cos_t, const float *sin_t)
{
    rope_launch(x, (uint16_t *)NULL, 0, B, T, nh, hd, seg, cos_t, sin_t, 1.0f);
}

extern "C" void cuda_rope_forward_bf16(uint16_t *x, int B, int T, int nh, int hd,
                                       const int32_t *seg, const float *cos_t,
                                       const float *sin_t)
{
    rope_launch(x, (uint16_t *)NULL, 0, B, T, nh, hd, seg, cos_t, sin_t, 1.0f);
}

extern "C" void cuda_rope_backward(float *dx, uint16_t *dxb, int ldxb, int B, int T, int nh,
                                   int hd, const int32_t *seg, const float *cos_t,
                                   const float *sin_t)
{
    rope_launch(dx, dxb, ldxb, B, T, nh, hd, seg, cos_t, sin_t, -1.0f);
}

/* ---- pieces of the fp32 kernels (the shared ones: cuda_attn_common.cuh) */

/* Copies rows [r0, r0+TILE) of head h (of n), bf16 as the trainer keeps
 * them (issue 36, change 1i), into a (TILE, ld) shared fp32 tile, zeros
 * past T: coalesced along the head dimension. */
__device__ __forceinline__ void load_tile(float *dst, int ld, const uint16_t *src, int b, int T,
                                          int r0, int n, int h, int hd)
{
    for (int e = threadIdx.x; e < TILE * hd; e += THREADS) {
        int r = e / hd, d = e % hd;
        dst[r * ld + d] =
            r0 + r < T ? cuda_bf16_f32(src[row_at(b, T, r0 + r, n, h, hd) + d]) : 0.0f;
    }
}

__device__ __forceinline__ float quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

/* The same bits in all 4 lanes: addition is commutative, and each lane
 * adds the same pairs. */
__device__ __forceinline__ float quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* ---- forward */

/* grid (query tiles, H, B). Shared: Q, K, V tiles (TILE, hd+1) and the
 * probabilities (TILE, TILE+1). */
template <int HDMAX>
__global__ void __launch_bounds__(THREADS)
    attn_fwd_kernel(uint16_t *out, uint16_t *outb, int ldo, float *lse, const uint16_t *q,
                    const uint16_t *k, const uint16_t *v, const int32_t *seg, int T, int H,
                    int KV, int hd, float scale, float cap)
{
    float *sm = cuda_shared();
    const int ld = hd + 1;
    float *Qs = sm, *Ks = Qs + TILE * ld, *Vs = Ks + TILE * ld, *Ps = Vs + TILE * ld;
    const int b = blockIdx.z, h = blockIdx.y, q0 = last_first(blockIdx.x) * TILE;
    const int kh = h / (H / KV);
    const int r = threadIdx.x / 4, tx = threadIdx.x % 4;
    const int i = q0 + r;
    const int lo = seg_lo(seg, b, T, i);

    load_tile(Qs, ld, q, b, T, q0, H, h, hd);
    float o[HDMAX / 4];
#pragma unroll
    for (int u = 0; u < HDMAX / 4; u++)
        o[u] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    int klast = min(q0 + TILE - 1, T - 1);
    for (int k0 = 0; k0 <= klast; k0 += TILE) {
        if (!tiles_meet(seg, b, T, q0, TILE, k0, TILE))
            continue; /* the vote was the barrier: nothing staged is read */
        load_tile(Ks, ld, k, b, T, k0, KV, kh, hd);
        load_tile(Vs, ld, v, b, T, k0, KV, kh, hd);
        __syncthreads();

        float s[COLS];
#pragma unroll
        for (int j = 0; j < COLS; j++)
            s[j] = 0.0f;
        for (int d = 0; d < hd; d++) {
            float qd = Qs[r * ld + d];
#pragma unroll
            for (int j = 0; j < COLS; j++)
                s[j] += qd * Ks[(tx + 4 * j) * ld + d];
        }
        float mt = -INFINITY;
#pragma unroll
        for (int j = 0; j < COLS; j++) {
            int c = tx + 4 * j;
            s[j] = visible(i, k0 + c, lo, T) ? score_of(s[j], scale, cap) : -INFINITY;
            mt = fmaxf(mt, s[j]);
        }
        float mnew = fmaxf(m, quad_max(mt));
        /* mnew is -inf only while the row has seen no key: keep o, l at 0 */
        float alpha = mnew == -INFINITY ? 1.0f : expf(m - mnew);
        float ps = 0.0f;
#pragma unroll
        for (int j = 0; j < COLS; j++) {
            float p = s[j] == -INFINITY ? 0.0f : expf(s[j] - mnew);
            Ps[r * PSTRIDE + tx + 4 * j] = p;
            ps += p;
        }
        l = l * alpha + quad_sum(ps);
        m = mnew;
        __syncwarp(); /* a row's 4 threads are in one warp */
#pragma unroll
        for (int u = 0; u < HDMAX / 4; u++)
            o[u] *= alpha;
        for (int c = 0; c < TILE; c++) {
            float p = Ps[r * PSTRIDE + c];
#pragma unroll
            for (int u = 0; u < HDMAX / 4; u++) {
                int d = tx + 4 * u;
                if (d < hd)
                    o[u] += p * Vs[c * ld + d];
            }
        }
    }
    if (i >= T)
        return;
    float inv = 1.0f / l; /* l > 0: row i sees at least key i */
    size_t orow = row_at(b, T, i, H, h, hd);
    size_t brow = ((size_t)b * T + i) * (size_t)ldo + (size_t)h * hd;
#pragma unroll
    for (int u = 0; u < HDMAX / 4; u++) {
        int d = tx + 4 * u;
        if (d < hd) {
            float val = o[u] * inv;
            if (out)
                out[orow + d] = cuda_f32_bf16(val);
            if (outb)
                outb[brow + d] = cuda_f32_bf16(val);
        }
    }
    if (tx == 0)
        lse[((size_t)b * H + h) * T + i] = m + logf(l);
}

/* ---- backward */

/* D (B,H,T) = rowsum(dout * out): one warp per row, lanes summed by a fixed
 * butterfly; doutb gets dout as bf16 for the kernels after it (the pass
 * reads dout anyway: change 1i). */
__global__ void attn_rowdot_kernel(float *D, uint16_t *doutb, const float *dout,
                                   const uint16_t *out, int B, int T, int H, int hd)
{
    size_t rows = (size_t)B * H * T;
    size_t warps = (size_t)gridDim.x * blockDim.x / 32;
    int lane = threadIdx.x % 32;
    for (size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < rows; w += warps) {
        int i = (int)(w % T);
        int h = (int)(w / T % H);
        int b = (int)(w / ((size_t)T * H));
        size_t o = row_at(b, T, i, H, h, hd);
        float acc = 0.0f;
        for (int d = lane; d < hd; d += 32) {
            acc += dout[o + d] * cuda_bf16_f32(out[o + d]);
            doutb[o + d] = cuda_f32_bf16(dout[o + d]);
        }
        for (int x = 16; x > 0; x /= 2)
            acc += __shfl_xor_sync(0xffffffffu, acc, x);
        if (lane == 0)
            D[w] = acc;
    }
}

/* dq rows. grid (query tiles, H, B). Shared: Q, dO, K, V tiles (TILE, hd+1)
 * and dS (TILE, TILE+1). */
template <int HDMAX>
__global__ void __launch_bounds__(THREADS)
    attn_bwd_dq_kernel(float *dq, const uint16_t *dout, const float *D, const float *lse,
                       const uint16_t *q, const uint16_t *k, const uint16_t *v,
                       const int32_t *seg, int T, int H, int KV, int hd, float scale, float cap)
{
    float *sm = cuda_shared();
    const int ld = hd + 1;
    float *Qs = sm, *Os = Qs + TILE * ld, *Ks = Os + TILE * ld, *Vs = Ks + TILE * ld;
    float *Ss = Vs + TILE * ld;
    const int b = blockIdx.z, h = blockIdx.y, q0 = last_first(blockIdx.x) * TILE;
    const int kh = h / (H / KV);
    const int r = threadIdx.x / 4, tx = threadIdx.x % 4;
    const int i = q0 + r;
    const int lo = seg_lo(seg, b, T, i);
    const size_t hrow = ((size_t)b * H + h) * T;
    const float li = i < T ? lse[hrow + i] : 0.0f;
    const float Di = i < T ? D[hrow + i] : 0.0f;

    load_tile(Qs, ld, q, b, T, q0, H, h, hd);
    load_tile(Os, ld, dout, b, T, q0, H, h, hd);
    float acc[HDMAX / 4];
#pragma unroll
    for (int u = 0; u < HDMAX / 4; u++)
        acc[u] = 0.0f;

    int klast = min(q0 + TILE - 1, T - 1);
    for (int k0 = 0; k0 <= klast; k0 += TILE) {
        if (!tiles_meet(seg, b, T, q0, TILE, k0, TILE))
            continue;
        load_tile(Ks, ld, k, b, T, k0, KV, kh, hd);
        load_tile(Vs, ld, v, b, T, k0, KV, kh, hd);
        __syncthreads();

        float s[COLS], dp[COLS];
#pragma unroll
        for (int j = 0; j < COLS; j++)
            s[j] = dp[j] = 0.0f;
        for (int d = 0; d < hd; d++) {
            float qd = Qs[r * ld + d], od = Os[r * ld + d];
#pragma unroll
            for (int j = 0; j < COLS; j++) {
                s[j] += qd * Ks[(tx + 4 * j) * ld + d];
                dp[j] += od * Vs[(tx + 4 * j) * ld + d];
            }
        }
#pragma unroll
        for (int j = 0; j < COLS; j++) {
            int c = tx + 4 * j;
            float ds = 0.0f;
            if (visible(i, k0 + c, lo, T)) {
                float sc = score_of(s[j], scale, cap);
                ds = dscore_of(expf(sc - li), dp[j], Di, sc, scale, cap);
            }
            Ss[r * PSTRIDE + c] = ds;
        }
        __syncwarp();
        for (int c = 0; c < TILE; c++) {
            float ds = Ss[r * PSTRIDE + c];
#pragma unroll
            for (int u = 0; u < HDMAX / 4; u++) {
                int d = tx + 4 * u;
                if (d < hd)
                    acc[u] += ds * Ks[c * ld + d];
            }
        }
    }
    if (i >= T)
        return;
    float *g = dq + row_at(b, T, i, H, h, hd);
#pragma unroll
    for (int u = 0; u < HDMAX / 4; u++) {
        int d = tx + 4 * u;
        if (d < hd)
            g[d] = acc[u]; /* written: the row is this thread's alone */
    }
}

/* dk and dv rows of one KV head. grid (key tiles, KV, B). Shared: K, V,
 * Q, dO tiles (TILE, hd+1), P and dS transposed (key row, query column:
 * TILE, TILE+1), and the query tile's lse and D. Thread rows are key rows
 * here. */
template <int HDMAX>
__global__ void __launch_bounds__(THREADS)
    attn_bwd_dkdv_kernel(float *dk, float *dv, const uint16_t *dout, const float *D,
                         const float *lse, const uint16_t *q, const uint16_t *k,
                         const uint16_t *v,
                         const int32_t *seg, int T, int H, int KV, int hd, float scale,
                         float cap)
{
    float *sm = cuda_shared();
    const int ld = hd + 1;
    float *Ks = sm, *Vs = Ks + TILE * ld, *Qs = Vs + TILE * ld, *Os = Qs + TILE * ld;
    float *Ps = Os + TILE * ld, *Ss = Ps + TILE * PSTRIDE;
    float *Ls = Ss + TILE * PSTRIDE, *Ds = Ls + TILE;
    int *Lo = (int *)(Ds + TILE);
    const int b = blockIdx.z, kh = blockIdx.y, k0 = blockIdx.x * TILE;
    const int group = H / KV;
    const int c = threadIdx.x / 4, tx = threadIdx.x % 4;
    const int j = k0 + c; /* this thread's key row */

    load_tile(Ks, ld, k, b, T, k0, KV, kh, hd);
    load_tile(Vs, ld, v, b, T, k0, KV, kh, hd);
    float gk[HDMAX / 4], gv[HDMAX / 4];
#pragma unroll
    for (int u = 0; u < HDMAX / 4; u++)
        gk[u] = gv[u] = 0.0f;

    for (int h = kh * group; h < (kh + 1) * group; h++) {
        const size_t hrow = ((size_t)b * H + h) * T;
        /* query rows before k0 see none of these keys */
        for (int q0 = k0 / TILE * TILE; q0 < T; q0 += TILE) {
            if (!tiles_meet(seg, b, T, q0, TILE, k0, TILE))
                continue;
            load_tile(Qs, ld, q, b, T, q0, H, h, hd);
            load_tile(Os, ld, dout, b, T, q0, H, h, hd);
            if (threadIdx.x < TILE) {
                int i = q0 + (int)threadIdx.x;
                Ls[threadIdx.x] = i < T ? lse[hrow + i] : 0.0f;
                Ds[threadIdx.x] = i < T ? D[hrow + i] : 0.0f;
                Lo[threadIdx.x] = seg_lo(seg, b, T, i);
            }
            __syncthreads();

            float s[COLS], dp[COLS];
#pragma unroll
            for (int x = 0; x < COLS; x++)
                s[x] = dp[x] = 0.0f;
            for (int d = 0; d < hd; d++) {
                float kd = Ks[c * ld + d], vd = Vs[c * ld + d];
#pragma unroll
                for (int x = 0; x < COLS; x++) {
                    s[x] += Qs[(tx + 4 * x) * ld + d] * kd;
                    dp[x] += Os[(tx + 4 * x) * ld + d] * vd;
                }
            }
#pragma unroll
            for (int x = 0; x < COLS; x++) {
                int r = tx + 4 * x;
                float p = 0.0f, ds = 0.0f;
                if (visible(q0 + r, j, Lo[r], T)) {
                    float sc = score_of(s[x], scale, cap);
                    p = expf(sc - Ls[r]);
                    ds = dscore_of(p, dp[x], Ds[r], sc, scale, cap);
                }
                Ps[c * PSTRIDE + r] = p;
                Ss[c * PSTRIDE + r] = ds;
            }
            __syncwarp();
            for (int r = 0; r < TILE; r++) {
                float p = Ps[c * PSTRIDE + r], ds = Ss[c * PSTRIDE + r];
#pragma unroll
                for (int u = 0; u < HDMAX / 4; u++) {
                    int d = tx + 4 * u;
                    if (d < hd) {
                        gv[u] += p * Os[r * ld + d];
                        gk[u] += ds * Qs[r * ld + d];
                    }
                }
            }
            /* the next tile's vote is the barrier before Q and dO change */
        }
    }
    if (j >= T)
        return;
    float *ok = dk + row_at(b, T, j, KV, kh, hd), *ov = dv + row_at(b, T, j, KV, kh, hd);
#pragma unroll
    for (int u = 0; u < HDMAX / 4; u++) {
        int d = tx + 4 * u;
        if (d < hd) { /* written: the row is this thread's alone */
            ok[d] = gk[u];
            ov[d] = gv[u];
        }
    }
}

/* ---- launches */

static size_t fwd_smem(int hd)
{
    return sizeof(float) * ((size_t)3 * TILE * (hd + 1) + (size_t)TILE * PSTRIDE);
}

static size_t dq_smem(int hd)
{
    return sizeof(float) * ((size_t)4 * TILE * (hd + 1) + (size_t)TILE * PSTRIDE);
}

static size_t dkdv_smem(int hd)
{
    return sizeof(float) * ((size_t)4 * TILE * (hd + 1) + (size_t)2 * TILE * PSTRIDE +
                            (size_t)3 * TILE);
}

/* ---- which kernels run */

static enum cuda_attn_kind attn_kind = CUDA_ATTN_BF16;

extern "C" void cuda_attention_use(enum cuda_attn_kind kind)
{
    attn_kind = kind;
}

extern "C" enum cuda_attn_kind cuda_attention_kind(int hd)
{
    return attn_kind == CUDA_ATTN_BF16 && hd <= CUDA_ATTN_TC_MAX_HD ? CUDA_ATTN_BF16
                                                                   : CUDA_ATTN_FP32;
}

static void check_attn(int B, int T, int H, int KV, int hd)
{
    attn_check_shape(B >= 0 && T >= 0, "attention: negative batch or length");
    attn_check_shape(hd >= 1 && hd <= 256, "attention: head dimension must be 1..256");
    attn_check_shape(KV >= 1 && H >= KV && H % KV == 0,
                "attention: query heads must be a multiple of key/value heads");
}

template <int HDMAX>
static void fwd_launch(uint16_t *out, uint16_t *outb, int ldo, float *lse, const uint16_t *q,
                       const uint16_t *k, const uint16_t *v, const int32_t *seg, int B, int T,
                       int H, int KV, int hd, float scale, float cap)
{
    size_t smem = fwd_smem(hd);
    allow_smem(attn_fwd_kernel<HDMAX>, smem);
    dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)H, (unsigned)B);
    cuda_launch(attn_fwd_kernel<HDMAX>, grid, dim3(THREADS), smem, out, outb, ldo, lse, q, k, v,
                seg, T, H, KV, hd, scale, cap);
}

extern "C" void cuda_attention_forward(uint16_t *out, uint16_t *outb, int ldo, float *lse,
                                       const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                       const int32_t *seg, int B, int T, int H, int KV, int hd,
                                       float scale, float cap)
{
    check_attn(B, T, H, KV, hd);
    if (B == 0 || T == 0)
        return;
    if (ldo < H * hd)
        ldo = H * hd;
    if (cuda_attention_kind(hd) == CUDA_ATTN_BF16) {
        cuda_attn_tc_forward(out, outb, ldo, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
        return;
    }
    if (hd <= 32)
        fwd_launch<32>(out, outb, ldo, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
    else if (hd <= 64)
        fwd_launch<64>(out, outb, ldo, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
    else if (hd <= 128)
        fwd_launch<128>(out, outb, ldo, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
    else
        fwd_launch<256>(out, outb, ldo, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
}

template <int HDMAX>
static void bwd_launch(float *dq, float *dk, float *dv, const float *D, const uint16_t *dout,
                       const float *lse, const uint16_t *q, const uint16_t *k,
                       const uint16_t *v, const int32_t *seg, int B, int T, int H, int KV,
                       int hd, float scale, float cap)
{
    unsigned tiles = (unsigned)((T + TILE - 1) / TILE);
    size_t smem = dq_smem(hd);
    allow_smem(attn_bwd_dq_kernel<HDMAX>, smem);
    cuda_launch(attn_bwd_dq_kernel<HDMAX>, dim3(tiles, (unsigned)H, (unsigned)B), dim3(THREADS),
                smem, dq, dout, D, lse, q, k, v, seg, T, H, KV, hd, scale, cap);
    smem = dkdv_smem(hd);
    allow_smem(attn_bwd_dkdv_kernel<HDMAX>, smem);
    cuda_launch(attn_bwd_dkdv_kernel<HDMAX>, dim3(tiles, (unsigned)KV, (unsigned)B),
                dim3(THREADS), smem, dk, dv, dout, D, lse, q, k, v, seg, T, H, KV, hd, scale, cap);
}

/* D = rowsum(dout * out) into scratch, dout's bf16 into doutb. */
static void rowdot(float *scratch, uint16_t *doutb, const float *dout, const uint16_t *out, int B,
                   int T, int H, int hd)
{
    size_t rows = (size_t)B * H * T;
    size_t blocks = (rows + 7) / 8; /* 8 warps of 256 threads */
    if (blocks > 65536)
        blocks = 65536;
    cuda_launch(attn_rowdot_kernel, dim3((unsigned)blocks), dim3(256), 0, scratch, doutb, dout,
                out, B, T, H, hd);
}

extern "C" int cuda_attention_bf16_grads(int hd)
{
    return cuda_attention_kind(hd) == CUDA_ATTN_BF16 && hd % 16 == 0;
}

extern "C" void cuda_attention_backward_bf16(uint16_t *dq, int ldq, uint16_t *dk, int ldk,
                                             uint16_t *dv, int ldv, float *scratch,
                                             uint16_t *doutb, const float *dout,
                                             const uint16_t *out, const float *lse,
                                             const uint16_t *q, const uint16_t *k,
                                             const uint16_t *v, const int32_t *seg, int B, int T,
                                             int H, int KV, int hd, float scale, float cap,
                                             const float *cos_t, const float *sin_t)
{
    check_attn(B, T, H, KV, hd);
    attn_check_shape(cuda_attention_bf16_grads(hd),
                     "attention: bf16 gradients need the tensor cores and hd a multiple of 16");
    attn_check_shape(ldq >= H * hd && ldk >= KV * hd && ldv >= KV * hd,
                     "attention: a bf16 gradient's rows overlap");
    if (B == 0 || T == 0)
        return;
    rowdot(scratch, doutb, dout, out, B, T, H, hd);
    struct attn_grad_out gq = {NULL, dq, ldq, 0, cos_t, sin_t};
    struct attn_grad_out gk = {NULL, dk, ldk, 0, cos_t, sin_t};
    struct attn_grad_out gv = {NULL, dv, ldv, 0, NULL, NULL};
    cuda_attn_tc_backward(gq, gk, gv, scratch, doutb, lse, q, k, v, seg, B, T, H, KV, hd, scale,
                          cap);
}

extern "C" void cuda_attention_backward(float *dq, float *dk, float *dv, float *scratch,
                                        uint16_t *doutb, const float *dout, const uint16_t *out,
                                        const float *lse, const uint16_t *q, const uint16_t *k,
                                        const uint16_t *v, const int32_t *seg, int B, int T,
                                        int H, int KV, int hd, float scale, float cap)
{
    check_attn(B, T, H, KV, hd);
    if (B == 0 || T == 0)
        return;
    rowdot(scratch, doutb, dout, out, B, T, H, hd);
    if (cuda_attention_kind(hd) == CUDA_ATTN_BF16) {
        struct attn_grad_out gq = {dq, NULL, 0, 0, NULL, NULL}, gk = {dk, NULL, 0, 0, NULL, NULL};
        struct attn_grad_out gv = {dv, NULL, 0, 0, NULL, NULL};
        cuda_attn_tc_backward(gq, gk, gv, scratch, doutb, lse, q, k, v, seg, B, T, H, KV, hd,
                              scale, cap);
        return;
    }
    if (hd <= 32)
        bwd_launch<32>(dq, dk, dv, scratch, doutb, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
    else if (hd <= 64)
        bwd_launch<64>(dq, dk, dv, scratch, doutb, lse, q, k, v, seg, B, T, H, KV, hd, scale, cap);
    else if (hd <= 128)
        bwd_launch<128>(dq, dk, dv, scratch, doutb, lse, q, k, v, seg, B, T, H, KV, hd, scale,
                        cap);
    else
        bwd_launch<256>(dq, dk, dv, scratch, doutb, lse, q, k, v, seg, B, T, H, KV, hd, scale,
                        cap);
}
