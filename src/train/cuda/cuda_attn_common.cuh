/* cuda_attn_common.cuh - what the two attention kernels share (the fp32
 * reference of cuda_attn.cu and the bf16 tensor-core one of
 * cuda_attn_tc.cu): where rows live, which pairs are visible, the score
 * and its derivative, and the block-wide vote that skips tiles no row can
 * see. One definition each, so the two paths mask and cap alike.
 */
#ifndef ALALLO_TRAIN_CUDA_ATTN_COMMON_CUH
#define ALALLO_TRAIN_CUDA_ATTN_COMMON_CUH

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/cuda/cuda_launch.cuh"

/* A caller broke the contract (not bad data: shapes the trainer chose). */
static inline void attn_check_shape(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "cuda_attn: %s\n", what);
        abort();
    }
}

/* Where a sequence's rows live: row r of sequence b, head h of n heads. */
__device__ __forceinline__ size_t row_at(int b, int T, int r, int n, int h, int hd)
{
    return (((size_t)b * T + r) * n + h) * hd;
}

/* Whether query row i may see key j: lo = seg[i] (0 without seg). */
__device__ __forceinline__ bool visible(int i, int j, int lo, int T)
{
    return i < T && j <= i && j >= lo;
}

/* The (scaled, capped) score that a visible pair gets, as ops.c makes it:
 * scale * q.k, then cap * tanh(s / cap) when cap > 0. */
__device__ __forceinline__ float score_of(float dot, float scale, float cap)
{
    float s = dot * scale;
    return cap > 0.0f ? cap * tanhf(s * (1.0f / cap)) : s;
}

/* d(loss)/d(q.k) from d(loss)/d(p) for one visible pair: dS = p (dp - D),
 * through the cap's derivative, times scale (ops.c's order of rounding
 * aside). */
__device__ __forceinline__ float dscore_of(float p, float dp, float D, float s, float scale,
                                           float cap)
{
    float ds = p * (dp - D) * scale;
    if (cap > 0.0f) {
        float t = s * (1.0f / cap);
        ds *= 1.0f - t * t;
    }
    return ds;
}

/* The first row of the example of row i of sequence b (0 without seg). */
__device__ __forceinline__ int seg_lo(const int32_t *seg, int b, int T, int i)
{
    return seg && i < T ? seg[(size_t)b * T + i] : 0;
}

/* Whether any pair of query rows [q0, q0+qn) and keys [k0, k0+kn) is
 * visible: a block-wide vote (the block has at least qn threads), which
 * also serves as a barrier. */
__device__ __forceinline__ bool tiles_meet(const int32_t *seg, int b, int T, int q0, int qn,
                                           int k0, int kn)
{
    int pred = 0;
    if ((int)threadIdx.x < qn) {
        int i = q0 + (int)threadIdx.x;
        int klast = min(k0 + kn - 1, T - 1);
        pred = i < T && i >= k0 && seg_lo(seg, b, T, i) <= klast;
    }
    return __syncthreads_or(pred) != 0;
}

/* The query tile a block of a (query tiles, ...) grid owns: the last tiles,
 * which see the most keys, first, so the long blocks start in the first
 * wave and the short ones fill in behind them. */
__device__ __forceinline__ int last_first(unsigned bx)
{
    return (int)(gridDim.x - 1 - bx);
}

/* Raises a kernel's dynamic shared-memory limit past the default 48 KB; a
 * failure stays as CUDA's last error, so the next cuda_ctx_sync reports it. */
template <typename K>
static void allow_smem(K kernel, size_t bytes)
{
    if (bytes > 48u * 1024u)
        (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)bytes);
}

#endif
