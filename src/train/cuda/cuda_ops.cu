/* cuda_ops.cu - the decoder's layers other than attention and RoPE as CUDA
 * kernels: RMSNorm, SwiGLU/GeGLU, soft-cap, cross-entropy rows, the token
 * embedding, elementwise helpers and bias, bf16 conversions, NF4 to bf16,
 * products that read an NF4 weight tile by tile, LoRA dropout, the
 * gradient's sum of squares and AdamW (contract in cuda_ops.h, second
 * section).
 *
 * Determinism. Every reduction has a fixed shape set by the constants
 * below, never by the device (its multiprocessor count) or by timing, and
 * no kernel uses floating-point atomics; so the same inputs on the same GPU
 * kind give the same bits. Changing a constant marked "sum order" changes
 * the bits of a run and so breaks exact resume across builds.
 *
 * Bit-exact twins. Where a kernel must give the CPU's bits (bf16 rounding,
 * NF4 values, dropout masks, the embedding's gradient, AdamW) its
 * arithmetic is written with the _rn intrinsics, which nvcc never fuses
 * into a multiply-add, in the order of the CPU code it mirrors; host-side
 * factors (AdamW's bias corrections, dropout's threshold) are computed on
 * the host by the same C as the CPU path. Build without --use_fast_math
 * and without -ftz=true: flushing subnormals would change those bits.
 *
 * Launches go on cuda_ctx_stream() and return at once; a launch error
 * surfaces at cuda_ctx_sync() (cudaGetLastError there). A call with nothing
 * to do launches nothing. Kernels follow cuda_launch.cuh's rules (launched
 * through cuda_launch, shared memory from cuda_shared()), so that the CPU
 * emulator of tests/gpu/emu/ runs them too.
 */
#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <mma.h>

#include "train/cuda/cuda_bf16.cuh"
#include "train/cuda/cuda_launch.cuh"

extern "C" {
#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_ops.h"
#include "train/kernels/nf4.h"
#include "train/model/optim.h"
}

using namespace nvcuda;

/* the tensor-core products' bf16 (wmma fragments' element type) */
typedef __nv_bfloat16 tc_bf16;

/* linear_f32_to_bf16 and its inverse on the device (cuda_bf16.cuh). */
#define bf16_to_f32 cuda_bf16_f32
#define f32_to_bf16 cuda_f32_bf16

static cudaStream_t stream(void)
{
    return (cudaStream_t)cuda_ctx_stream();
}

/* ---- launch shapes ------------------------------------------------------ */

/* Elementwise kernels: a grid-stride loop over at most EW_MAX_BLOCKS
 * blocks (each element's arithmetic is alone, so the shape is free). */
#define EW_THREADS 256
#define EW_MAX_BLOCKS 65536u

static unsigned ew_blocks(size_t n)
{
    size_t b = (n + EW_THREADS - 1) / EW_THREADS;
    return b > EW_MAX_BLOCKS ? EW_MAX_BLOCKS : (unsigned)b;
}

#define FOR_EACH(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                   \
         i += (size_t)gridDim.x * blockDim.x)

/* Per-row kernels (RMSNorm): one block per row. Sum order. */
#define ROW_THREADS 256
/* Cross-entropy: one block per row of logits. Sum order. */
#define XENT_THREADS 512
/* Column sums (RMSNorm's weight gradient, the bias gradient): a block owns
 * COLSUM_W columns (one per lane) and its COLSUM_G warps each walk every
 * COLSUM_G-th row in order; the warps' partial sums are then added in warp
 * order. Sum order. */
#define COLSUM_W 32
#define COLSUM_G 32
/* The embedding's gradient: table rows are split over EMB_PARTS blocks by
 * id modulo EMB_PARTS (every row of the table has one owner), each thread
 * owns a column and walks the batch's rows in order; ids are read in tiles
 * of EMB_TILE through shared memory. */
#define EMB_THREADS 256
#define EMB_PARTS 128
#define EMB_TILE 2048
/* The sum of squares: chunks of NORM_CHUNK values (a warp each, in float);
 * at most SUMSQ_BLOCKS blocks each own a contiguous run of chunks, each of
 * their SUMSQ_WARPS warps adds every SUMSQ_WARPS-th chunk sum of the run in
 * double, in order; then the warps' sums in warp order and the blocks'
 * sums in block order. Sum order. */
#define NORM_CHUNK 4096
#define SUMSQ_BLOCKS 1024
#define SUMSQ_WARPS 8

/* ---- reductions -------------------------------------------------------- */

/* Butterfly sum over a warp: every lane ends with the same bits (each step
 * adds the same two values, and addition commutes). */
__device__ static float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The sum of v over the block, returned to every thread: each warp's sum,
 * then every warp adds those in the same butterfly (so every thread holds
 * the same bits, and every thread reaches every shuffle). sh: 32 floats of
 * shared memory, free again on return. */
__device__ static float block_sum(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = warp_sum(lane < nw ? sh[lane] : 0.0f);
    __syncthreads();
    return v;
}

/* ---- RMSNorm ----------------------------------------------------------- */

/* yb (may be NULL) gets y as bf16, the bits cuda_to_bf16 gives, its rows
 * ldyb values apart; y may be NULL when yb is not (the bf16 alone). X:
 * fp32 x, or bf16 (the residual stream, change 1j). */
template <typename X>
__global__ static void rmsnorm_fwd_kernel(float *y, uint16_t *yb, int ldyb, float *rstd,
                                          const X *x, const float *w, int C, float eps)
{
    float *sh = cuda_shared(); /* 32 floats */
    const X *xr = x + (size_t)blockIdx.x * C;
    float *yr = y ? y + (size_t)blockIdx.x * C : NULL;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        ss += cuda_val_in(xr, c) * cuda_val_in(xr, c);
    ss = block_sum(ss, sh);
    float r = 1.0f / sqrtf(ss / (float)C + eps);
    if (threadIdx.x == 0)
        rstd[blockIdx.x] = r;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v = cuda_val_in(xr, c) * r * w[c];
        if (yr)
            yr[c] = v;
        if (yb)
            yb[(size_t)blockIdx.x * ldyb + c] = f32_to_bf16(v);
    }
}

template <typename X>
static void rmsnorm_fwd_launch(float *y, uint16_t *yb, int ldyb, float *rstd, const X *x,
                               const float *w, int N, int C, float eps)
{
    assert(y || yb);
    if (N <= 0 || C <= 0)
        return;
    cuda_launch(rmsnorm_fwd_kernel<X>, dim3(N), dim3(ROW_THREADS), 32 * sizeof(float), y, yb,
                ldyb > C ? ldyb : C, rstd, x, w, C, eps);
}

void cuda_rmsnorm_forward(float *y, uint16_t *yb, int ldyb, float *rstd, const float *x,
                          const float *w, int N, int C, float eps)
{
    rmsnorm_fwd_launch(y, yb, ldyb, rstd, x, w, N, C, eps);
}

void cuda_rmsnorm_forward_bf16(float *y, uint16_t *yb, int ldyb, float *rstd,
                               const uint16_t *x, const float *w, int N, int C, float eps)
{
    rmsnorm_fwd_launch(y, yb, ldyb, rstd, x, w, N, C, eps);
}

/* dx_c += r w_c dy_c - r^3 x_c / C * sum_j(w_j dy_j x_j), as ops.c; dxb
 * (may be NULL) gets the new dx as bf16, its rows lddxb apart. */
template <typename X>
__global__ static void rmsnorm_bwd_kernel(float *dx, uint16_t *dxb, int lddxb, const float *dy,
                                          const X *x, const float *w, const float *rstd, int C)
{
    float *sh = cuda_shared(); /* 32 floats */
    size_t off = (size_t)blockIdx.x * C;
    const X *xr = x + off;
    const float *dyr = dy + off;
    float *dxr = dx + off;
    float r = rstd[blockIdx.x];
    float dot = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dot += w[c] * dyr[c] * cuda_val_in(xr, c);
    dot = block_sum(dot, sh);
    float k = r * r * r * dot / (float)C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v = dxr[c] + (r * w[c] * dyr[c] - k * cuda_val_in(xr, c));
        dxr[c] = v;
        if (dxb)
            dxb[(size_t)blockIdx.x * lddxb + c] = f32_to_bf16(v);
    }
}

/* out (C) += column sums of a (N,C), each term a[n][c] * x[n][c] * rstd[n]
 * when x is set (RMSNorm's dw), a[n][c] alone otherwise (a bias). Block
 * (COLSUM_W, COLSUM_G). */
template <typename X>
__global__ static void colsum_kernel(float *out, const float *a, const X *x, const float *rstd,
                                     int N, int C)
{
    float(*part)[COLSUM_W + 1] = (float(*)[COLSUM_W + 1])cuda_shared(); /* [COLSUM_G] */
    int lane = threadIdx.x, g = threadIdx.y;
    int c = blockIdx.x * COLSUM_W + lane;
    float s = 0.0f;
    if (c < C) {
#pragma unroll 4
        for (int n = g; n < N; n += COLSUM_G) {
            size_t i = (size_t)n * C + c;
            s += x ? a[i] * cuda_val_in(x, i) * rstd[n] : a[i];
        }
    }
    part[g][lane] = s;
    __syncthreads();
    if (g == 0 && c < C) {
        float t = 0.0f;
        for (int k = 0; k < COLSUM_G; k++)
            t += part[k][lane];
        out[c] += t;
    }
}

template <typename X>
static void colsum(float *out, const float *a, const X *x, const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0)
        return;
    dim3 block(COLSUM_W, COLSUM_G);
    cuda_launch(colsum_kernel<X>, dim3((C + COLSUM_W - 1) / COLSUM_W), dim3(block),
                COLSUM_G * (COLSUM_W + 1) * sizeof(float), out, a, x, rstd, N, C);
}

template <typename X>
static void rmsnorm_bwd_launch(float *dx, uint16_t *dxb, int lddxb, float *dw, const float *dy,
                               const X *x, const float *w, const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0)
        return;
    cuda_launch(rmsnorm_bwd_kernel<X>, dim3(N), dim3(ROW_THREADS), 32 * sizeof(float), dx, dxb,
                lddxb > C ? lddxb : C, dy, x, w, rstd, C);
    if (dw)
        colsum(dw, dy, x, rstd, N, C);
}

void cuda_rmsnorm_backward(float *dx, uint16_t *dxb, int lddxb, float *dw, const float *dy,
                           const float *x, const float *w, const float *rstd, int N, int C)
{
    rmsnorm_bwd_launch(dx, dxb, lddxb, dw, dy, x, w, rstd, N, C);
}

void cuda_rmsnorm_backward_bf16(float *dx, uint16_t *dxb, int lddxb, float *dw,
                                const float *dy, const uint16_t *x, const float *w,
                                const float *rstd, int N, int C)
{
    rmsnorm_bwd_launch(dx, dxb, lddxb, dw, dy, x, w, rstd, N, C);
}

/* ---- gated activations and soft-cap ------------------------------------ */

/* y[i] = v, and the bf16 copy (hb; dgb and dub; each may be NULL) gets v
 * as cuda_to_bf16 would, as rows of cols values ld apart (row i / cols).
 * y may be NULL (a forward's h kept as bf16 alone). */
__device__ __forceinline__ void put_rows(float *y, uint16_t *yb, size_t i, float v, size_t cols,
                                         size_t ld)
{
    if (y)
        y[i] = v;
    if (yb)
        yb[ld == cols ? i : i / cols * ld + i % cols] = f32_to_bf16(v);
}

template <typename T>
__global__ static void swiglu_fwd_kernel(float *h, uint16_t *hb, const T *g, const T *u, size_t n,
                                         size_t cols, size_t ld)
{
    FOR_EACH(i, n) {
        float x = cuda_val_in(g, i);
        float s = 1.0f / (1.0f + expf(-x));
        put_rows(h, hb, i, x * s * cuda_val_in(u, i), cols, ld);
    }
}

/* What a gated backward adds its term to: dg[i] (or du[i]) when acc, else
 * 0 (the kernel's output is then written, not read: as if zeroed first,
 * with the same bits, since 0 + v turns a -0 into +0 as the sum did). */
#define GATED_BASE(p, i) (acc ? (p)[i] : 0.0f)

/* T: g's and u's type; D: dh's (fp32, or bf16 as down's dX product writes
 * it on a 16-bit base: change 1l). */
template <typename T, typename D>
__global__ static void swiglu_bwd_kernel(float *dg, float *du, uint16_t *dgb, uint16_t *dub,
                                         const D *dhv, const T *g, const T *u, size_t n,
                                         size_t cols, size_t ld, int acc)
{
    FOR_EACH(i, n) {
        float x = cuda_val_in(g, i), ui = cuda_val_in(u, i), dh_i = cuda_val_in(dhv, i);
        float s = 1.0f / (1.0f + expf(-x));
        /* d silu/dx = s (1 + x (1 - s)) */
        put_rows(dg, dgb, i, GATED_BASE(dg, i) + dh_i * ui * s * (1.0f + x * (1.0f - s)), cols,
                 ld);
        put_rows(du, dub, i, GATED_BASE(du, i) + dh_i * x * s, cols, ld);
    }
}

/* GELU, tanh approximation, as ops.c. */
#define GELU_S 0.7978845608028654f
#define GELU_A 0.044715f

template <typename T>
__global__ static void geglu_fwd_kernel(float *h, uint16_t *hb, const T *g, const T *u, size_t n,
                                        size_t cols, size_t ld)
{
    FOR_EACH(i, n) {
        float x = cuda_val_in(g, i);
        float t = tanhf(GELU_S * (x + GELU_A * x * x * x));
        put_rows(h, hb, i, 0.5f * x * (1.0f + t) * cuda_val_in(u, i), cols, ld);
    }
}

template <typename T, typename D>
__global__ static void geglu_bwd_kernel(float *dg, float *du, uint16_t *dgb, uint16_t *dub,
                                        const D *dhv, const T *g, const T *u, size_t n,
                                        size_t cols, size_t ld, int acc)
{
    FOR_EACH(i, n) {
        float x = cuda_val_in(g, i), ui = cuda_val_in(u, i), dh_i = cuda_val_in(dhv, i);
        float t = tanhf(GELU_S * (x + GELU_A * x * x * x));
        float gelu = 0.5f * x * (1.0f + t);
        float dgelu = 0.5f * (1.0f + t) +
                      0.5f * x * (1.0f - t * t) * GELU_S * (1.0f + 3.0f * GELU_A * x * x);
        put_rows(dg, dgb, i, GATED_BASE(dg, i) + dh_i * ui * dgelu, cols, ld);
        put_rows(du, dub, i, GATED_BASE(du, i) + dh_i * gelu, cols, ld);
    }
}

/* The bf16 rows' shape: cols values a row (0: one row of n), ld apart. */
static void rows_of(size_t n, int cols, int ld, size_t *c, size_t *l)
{
    *c = cols > 0 ? (size_t)cols : n;
    *l = ld > cols ? (size_t)ld : *c;
}

template <typename T>
static void gated_forward(void (*k)(float *, uint16_t *, const T *, const T *, size_t, size_t,
                                    size_t),
                          float *h, uint16_t *hb, int cols, int ldhb, const T *g, const T *u,
                          size_t n)
{
    size_t c, l;
    assert(h || hb);
    rows_of(n, cols, ldhb, &c, &l);
    if (n)
        cuda_launch(k, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, h, hb, g, u, n, c, l);
}

template <typename T, typename D>
static void gated_backward(void (*k)(float *, float *, uint16_t *, uint16_t *, const D *,
                                     const T *, const T *, size_t, size_t, size_t, int),
                           float *dg, float *du, uint16_t *dgb, uint16_t *dub, int cols, int ldb,
                           const D *dh, const T *g, const T *u, size_t n, int acc)
{
    size_t c, l;
    assert((dg || (dgb && !acc)) && (du || (dub && !acc)));
    rows_of(n, cols, ldb, &c, &l);
    if (n)
        cuda_launch(k, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, dg, du, dgb, dub, dh, g, u, n, c,
                    l, acc ? 1 : 0);
}

void cuda_swiglu_forward(float *h, uint16_t *hb, int cols, int ldhb, const float *g,
                         const float *u, size_t n)
{
    gated_forward(swiglu_fwd_kernel<float>, h, hb, cols, ldhb, g, u, n);
}

void cuda_swiglu_backward(float *dg, float *du, uint16_t *dgb, uint16_t *dub, int cols, int ldb,
                          const float *dh, const float *g, const float *u, size_t n, int acc)
{
    gated_backward(swiglu_bwd_kernel<float, float>, dg, du, dgb, dub, cols, ldb, dh, g, u, n,
                   acc);
}

void cuda_geglu_forward(float *h, uint16_t *hb, int cols, int ldhb, const float *g,
                        const float *u, size_t n)
{
    gated_forward(geglu_fwd_kernel<float>, h, hb, cols, ldhb, g, u, n);
}

void cuda_geglu_backward(float *dg, float *du, uint16_t *dgb, uint16_t *dub, int cols, int ldb,
                         const float *dh, const float *g, const float *u, size_t n, int acc)
{
    gated_backward(geglu_bwd_kernel<float, float>, dg, du, dgb, dub, cols, ldb, dh, g, u, n,
                   acc);
}

void cuda_gated_forward_bf16(int gelu, float *h, uint16_t *hb, int cols, int ldhb,
                             const uint16_t *g, const uint16_t *u, size_t n)
{
    gated_forward(gelu ? geglu_fwd_kernel<uint16_t> : swiglu_fwd_kernel<uint16_t>, h, hb, cols,
                  ldhb, g, u, n);
}

void cuda_gated_backward_bf16(int gelu, float *dg, float *du, uint16_t *dgb, uint16_t *dub,
                              int cols, int ldb, const float *dh, const uint16_t *g,
                              const uint16_t *u, size_t n, int acc)
{
    gated_backward(gelu ? geglu_bwd_kernel<uint16_t, float> : swiglu_bwd_kernel<uint16_t, float>,
                   dg, du, dgb, dub, cols, ldb, dh, g, u, n, acc);
}

void cuda_gated_backward_bf16dh(int gelu, float *dg, float *du, uint16_t *dgb, uint16_t *dub,
                                int cols, int ldb, const uint16_t *dh, const uint16_t *g,
                                const uint16_t *u, size_t n, int acc)
{
    gated_backward(gelu ? geglu_bwd_kernel<uint16_t, uint16_t>
                        : swiglu_bwd_kernel<uint16_t, uint16_t>,
                   dg, du, dgb, dub, cols, ldb, dh, g, u, n, acc);
}

__global__ static void softcap_kernel(float *x, size_t n, float cap, float inv)
{
    FOR_EACH(i, n)
        x[i] = cap * tanhf(x[i] * inv);
}

__global__ static void softcap_bwd_kernel(float *dx, const float *y, size_t n, float inv)
{
    FOR_EACH(i, n) {
        float t = y[i] * inv;
        dx[i] *= 1.0f - t * t;
    }
}

void cuda_softcap(float *x, size_t n, float cap)
{
    if (n)
        cuda_launch(softcap_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, x, n, cap, 1.0f / cap);
}

void cuda_softcap_backward(float *dx, const float *y, size_t n, float cap)
{
    if (n)
        cuda_launch(softcap_bwd_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, dx, y, n,
                    1.0f / cap);
}

/* ---- cross-entropy ----------------------------------------------------- */

/* ---- cross-entropy ----------------------------------------------------- */

/* A running softmax denominator: s = sum exp(x - m) over what was seen. */
struct lse_acc {
    float m, s;
};

__device__ static struct lse_acc lse_join(struct lse_acc a, struct lse_acc b)
{
    float m = fmaxf(a.m, b.m);
    struct lse_acc r = {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
    return r;
}

/* The greatest value and its lowest index. */
struct arg_max {
    float v;
    int i;
};

__device__ static struct arg_max argmax_join(struct arg_max a, struct arg_max b)
{
    return b.v > a.v || (b.v == a.v && b.i < a.i) ? b : a;
}

/* Row blockIdx.x of logits (V wide): each thread walks its columns (every
 * XENT_THREADS-th, in order) keeping an online max and sum and an arg-max;
 * warps join by shuffles, then warp 0 joins the warps in order. With
 * `grad` a second pass writes (softmax - onehot) * scale over the row.
 * T: fp32 logits, or bf16 as the head's product wrote them (change 1h):
 * the same fp32 arithmetic on each value read, the gradient rounded to
 * bf16 as it is written (the bits a pass rounding the fp32 gradient gave). */
template <typename T>
__global__ static void xent_kernel(T *logits, const int32_t *targets, int V, int grad,
                                   float dscale, const float *w, float *row_loss,
                                   int32_t *hits)
{
    struct lse_acc *sl = (struct lse_acc *)cuda_shared(); /* 32 of each */
    struct arg_max *sa = (struct arg_max *)(sl + 32);
    int r = blockIdx.x, lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    T *x = logits + (size_t)r * V;
    int t = targets[r];
    if (t < 0 || t >= V) { /* the caller validates targets; a bad one shows as a NaN loss */
        if (threadIdx.x == 0) {
            row_loss[r] = NAN;
            if (hits)
                hits[r] = 0;
        }
        return;
    }
    float xt = cuda_val_in(x, (size_t)t);
    struct lse_acc acc = {-FLT_MAX, 0.0f};
    struct arg_max best = {-INFINITY, INT32_MAX};
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float v = cuda_val_in(x, (size_t)j);
        if (v > acc.m) {
            acc.s = acc.s * expf(acc.m - v) + 1.0f;
            acc.m = v;
        } else {
            acc.s += expf(v - acc.m);
        }
        if (v > best.v) {
            best.v = v;
            best.i = j;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        struct lse_acc oa = {__shfl_down_sync(0xffffffffu, acc.m, o),
                             __shfl_down_sync(0xffffffffu, acc.s, o)};
        struct arg_max ob = {__shfl_down_sync(0xffffffffu, best.v, o),
                             __shfl_down_sync(0xffffffffu, best.i, o)};
        acc = lse_join(acc, oa);
        best = argmax_join(best, ob);
    }
    if (lane == 0) {
        sl[wp] = acc;
        sa[wp] = best;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int nw = (blockDim.x + 31) >> 5;
        for (int k = 1; k < nw; k++) {
            acc = lse_join(acc, sl[k]);
            best = argmax_join(best, sa[k]);
        }
        sl[0] = acc;
        row_loss[r] = acc.m + logf(acc.s) - xt;
        if (hits)
            hits[r] = best.i == t;
    }
    if (!grad)
        return;
    __syncthreads();
    acc = sl[0];
    float scale = w ? dscale * w[r] : dscale;
    float k = scale / acc.s;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = __fmul_rn(expf(cuda_val_in(x, (size_t)j) - acc.m), k);
        cuda_val_out(x, (size_t)j, j == t ? p - scale : p);
    }
}

template <typename T>
static void xent_launch(T *logits, const int32_t *targets, int M, int V, int grad, float dscale,
                        const float *w, float *row_loss, int32_t *hits)
{
    if (M <= 0 || V <= 0)
        return;
    cuda_launch(xent_kernel<T>, dim3(M), dim3(XENT_THREADS),
                32 * (sizeof(struct lse_acc) + sizeof(struct arg_max)), logits, targets, V, grad,
                dscale, w, row_loss, hits);
}

void cuda_xent_rows(float *logits, const int32_t *targets, int M, int V, int grad,
                    float dscale, const float *w, float *row_loss, int32_t *hits)
{
    xent_launch(logits, targets, M, V, grad, dscale, w, row_loss, hits);
}

void cuda_xent_rows_bf16(uint16_t *logits, const int32_t *targets, int M, int V, int grad,
                         float dscale, const float *w, float *row_loss, int32_t *hits)
{
    xent_launch(logits, targets, M, V, grad, dscale, w, row_loss, hits);
}

/* ---- token embedding --------------------------------------------------- */


/* Row i of out = row ids[i] of the table times scale; a negative id (the
 * caller validates ids) gives a zero row rather than a stray read. */
template <typename O>
__global__ static void embed_fwd_kernel(O *out, const int32_t *ids, size_t n, const float *tf,
                                        const uint16_t *tb, int C, float scale)
{
    FOR_EACH(e, n * (size_t)C) {
        size_t i = e / (size_t)C, c = e % (size_t)C;
        int32_t id = ids[i];
        float v = 0.0f;
        if (id >= 0) {
            size_t s = (size_t)id * C + c;
            v = tf ? tf[s] : bf16_to_f32(tb[s]);
        }
        cuda_val_out(out, e, __fmul_rn(v, scale));
    }
}

template <typename O>
static void embed_fwd_launch(O *out, const int32_t *ids, int n, const float *tf,
                             const uint16_t *tb, int C, float scale)
{
    size_t total = (size_t)(n > 0 ? n : 0) * (size_t)(C > 0 ? C : 0);
    if (total)
        cuda_launch(embed_fwd_kernel<O>, dim3(ew_blocks(total)), dim3(EW_THREADS), 0, out, ids,
                    (size_t)n, tf, tb, C, scale);
}

void cuda_embed_forward(float *out, const int32_t *ids, int n, const float *tf,
                        const uint16_t *tb, int C, float scale)
{
    embed_fwd_launch(out, ids, n, tf, tb, C, scale);
}

void cuda_embed_forward_bf16(uint16_t *out, const int32_t *ids, int n, const float *tf,
                             const uint16_t *tb, int C, float scale)
{
    embed_fwd_launch(out, ids, n, tf, tb, C, scale);
}

/* Block (x, y) owns columns [x*EMB_THREADS, ...) of the table rows whose id
 * is y modulo EMB_PARTS; each thread adds its column of every such row of
 * dout, in row order, as model_pass.c's serial loop does (dw += d * sc,
 * unfused), so the bits are the CPU's. */
__global__ static void embed_bwd_kernel(float *dtable, const int32_t *ids, int n,
                                        const float *dout, int C, float scale)
{
    int32_t *tile = (int32_t *)cuda_shared(); /* EMB_TILE */
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int part = blockIdx.y;
    for (int i0 = 0; i0 < n; i0 += EMB_TILE) {
        int cnt = n - i0 < EMB_TILE ? n - i0 : EMB_TILE;
        __syncthreads();
        for (int k = threadIdx.x; k < cnt; k += blockDim.x)
            tile[k] = ids[i0 + k];
        __syncthreads();
        if (c >= C)
            continue;
        for (int k = 0; k < cnt; k++) {
            int32_t id = tile[k];
            if (id < 0 || id % EMB_PARTS != part)
                continue;
            float *d = dtable + (size_t)id * C + c;
            *d = __fadd_rn(*d, __fmul_rn(dout[(size_t)(i0 + k) * C + c], scale));
        }
    }
}

void cuda_embed_backward(float *dtable, const int32_t *ids, int n, const float *dout, int C,
                         float scale)
{
    if (n <= 0 || C <= 0)
        return;
    dim3 grid((C + EMB_THREADS - 1) / EMB_THREADS, EMB_PARTS);
    cuda_launch(embed_bwd_kernel, dim3(grid), dim3(EMB_THREADS), EMB_TILE * sizeof(int32_t), dtable,
                ids, n, dout, C, scale);
}

/* ---- elementwise and bias ---------------------------------------------- */

__global__ static void add_kernel(float *y, const float *a, const float *b, size_t n)
{
    FOR_EACH(i, n)
        y[i] = a[i] + b[i];
}

__global__ static void accumulate_kernel(float *y, const float *x, size_t n)
{
    FOR_EACH(i, n)
        y[i] += x[i];
}

__global__ static void scale_kernel(float *y, float s, size_t n)
{
    FOR_EACH(i, n)
        y[i] *= s;
}

__global__ static void add_bias_kernel(float *y, const float *bias, size_t n, int C)
{
    FOR_EACH(i, n)
        y[i] += bias[i % (size_t)C];
}

__global__ static void add_bias_bf16_kernel(uint16_t *yb, const float *y, const float *bias,
                                            size_t n, int C)
{
    FOR_EACH(i, n)
        yb[i] = f32_to_bf16(y[i] + bias[i % (size_t)C]);
}

__global__ static void add_bf16_kernel(uint16_t *y, const uint16_t *a, const float *b, size_t n)
{
    FOR_EACH(i, n)
        y[i] = f32_to_bf16(bf16_to_f32(a[i]) + b[i]);
}

void cuda_add_bf16(uint16_t *y, const uint16_t *a, const float *b, size_t n)
{
    if (n)
        cuda_launch(add_bf16_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, y, a, b, n);
}

void cuda_add(float *y, const float *a, const float *b, size_t n)
{
    if (n)
        cuda_launch(add_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, y, a, b, n);
}

void cuda_accumulate(float *y, const float *x, size_t n)
{
    if (n)
        cuda_launch(accumulate_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, y, x, n);
}

void cuda_scale(float *y, float s, size_t n)
{
    if (n)
        cuda_launch(scale_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, y, s, n);
}

void cuda_zero(void *y, size_t bytes)
{
    struct cuda_walk *w = cuda_ctx_walk();
    if (bytes && w) { /* noted, not queued (cuda_walk.h) */
        size_t item[2] = {(size_t)y, bytes};
        cuda_walk_note(w, CUDA_WALK_ZERO, item, sizeof item);
    } else if (bytes) {
        cudaMemsetAsync(y, 0, bytes, stream()); /* an error stays for cuda_ctx_sync */
    }
}

void cuda_add_bias(float *y, const float *bias, int N, int C)
{
    size_t n = (size_t)(N > 0 ? N : 0) * (size_t)(C > 0 ? C : 0);
    if (n)
        cuda_launch(add_bias_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, y, bias, n, C);
}

void cuda_add_bias_bf16(uint16_t *yb, const float *y, const float *bias, int N, int C)
{
    size_t n = (size_t)(N > 0 ? N : 0) * (size_t)(C > 0 ? C : 0);
    if (n)
        cuda_launch(add_bias_bf16_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, yb, y, bias,
                    n, C);
}

void cuda_bias_backward(float *dbias, const float *dy, int N, int C)
{
    colsum(dbias, dy, (const float *)NULL, NULL, N, C);
}

/* ---- bf16 -------------------------------------------------------------- */

__global__ static void to_bf16_kernel(uint16_t *dst, const float *src, size_t n)
{
    FOR_EACH(i, n)
        dst[i] = f32_to_bf16(src[i]);
}

__global__ static void from_bf16_kernel(float *dst, const uint16_t *src, size_t n)
{
    FOR_EACH(i, n)
        dst[i] = bf16_to_f32(src[i]);
}

__global__ static void to_bf16_rows_kernel(uint16_t *dst, size_t ldd, const float *src,
                                           size_t n, size_t cols)
{
    FOR_EACH(i, n)
        dst[i / cols * ldd + i % cols] = f32_to_bf16(src[i]);
}

void cuda_to_bf16_rows(uint16_t *dst, int ldd, const float *src, int rows, int cols)
{
    size_t n = (size_t)(rows > 0 ? rows : 0) * (size_t)(cols > 0 ? cols : 0);
    if (n)
        cuda_launch(to_bf16_rows_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, dst,
                    (size_t)(ldd > cols ? ldd : cols), src, n, (size_t)cols);
}

void cuda_to_bf16(uint16_t *dst, const float *src, size_t n)
{
    if (n)
        cuda_launch(to_bf16_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, dst, src, n);
}

void cuda_from_bf16(float *dst, const uint16_t *src, size_t n)
{
    if (n)
        cuda_launch(from_bf16_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, dst, src, n);
}

/* Block row blockIdx.y writes fold d[blockIdx.y]: scale B (out, r) into
 * columns [col0, col0 + r) of W's rows, then scale A (r, in) into the r
 * rows under W, each value rounded once, and A into as. */
__global__ static void lora_fold_kernel(const struct cuda_lora_fold *d)
{
    const struct cuda_lora_fold f = d[blockIdx.y];
    size_t nb = (size_t)f.out * f.r, n = nb + (size_t)f.r * f.in;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (i < nb) {
            size_t o = i / (size_t)f.r, j = i % (size_t)f.r;
            f.w[o * (size_t)f.ldw + (size_t)f.col0 + j] = f32_to_bf16(__fmul_rn(f.scale, f.b[i]));
        } else {
            size_t k = i - nb, j = k / (size_t)f.in, c = k % (size_t)f.in;
            f.w[((size_t)f.out + j) * f.ldw + c] = f32_to_bf16(__fmul_rn(f.scale, f.a[k]));
            if (f.as)
                f.as[k] = f32_to_bf16(f.a[k]);
        }
    }
}

void cuda_lora_fold(const struct cuda_lora_fold *d, int n, size_t most)
{
    if (n > 0 && most > 0)
        cuda_launch(lora_fold_kernel, dim3(ew_blocks(most) < 1024 ? ew_blocks(most) : 1024, n),
                    dim3(EW_THREADS), 0, d);
}

/* ---- LoRA's dB and dy B in one pass (change 2e) ------------------------- */

/* A block of DBT_THREADS (8 warps) owns CUDA_LORA_DBT_ROWS rows of dy and
 * a slice of its column tiles, DBT_CT columns each. Each tile of dy is
 * staged once and read by both products: t's share (the block's rows by
 * r, summed over the slice's columns) accumulates in the warps' fragments
 * across the tiles, each warp 32 rows; dB's share (the tile's columns by
 * r, summed over the block's rows) is stored at the tile's end, each warp
 * 16 columns by every other 16 of r. r is padded with zeros to rp, a
 * multiple of 16; so are the rows past N and the columns past out. The
 * tiles of dy and B are double-buffered: the next is copied
 * asynchronously (cp.async, 16 bytes a copy where the rows allow) while
 * the warps multiply the one before. The shares go to scratch, dB's by
 * block and t's by slice, and lora_dbt_sum_kernel adds them in order. */
#define DBT_THREADS 256
#define DBT_CT 64
#define DBT_LDY (DBT_CT + 8) /* bf16 stride of the staged dy tile (144 bytes) */
#define DBT_ROWS CUDA_LORA_DBT_ROWS
#define DBT_MAXJ (CUDA_LORA_DBT_MAX_R / 16)

struct dbt_shape {
    int rp;      /* r padded to a multiple of 16 */
    int blocks;  /* blocks of rows */
    int tiles;   /* column tiles of out */
    int per;     /* tiles a slice */
    int slices;
    int unused;  /* 0: no padding, so a walk's bytes are all set (cuda_walk.h) */
    size_t part; /* dB's shares: blocks x tiles DBT_CT x rp floats; t's follow */
};

/* A function of the shape alone (not of the GPU), so that every GPU sums
 * in the same order: slices enough for about 264 blocks in all. */
static struct dbt_shape dbt_shape(int N, int out, int r)
{
    struct dbt_shape s;
    s.unused = 0;
    s.rp = (r + 15) / 16 * 16;
    s.blocks = (N + DBT_ROWS - 1) / DBT_ROWS;
    s.tiles = (out + DBT_CT - 1) / DBT_CT;
    int want = (264 + s.blocks - 1) / s.blocks;
    if (want > s.tiles)
        want = s.tiles;
    s.per = (s.tiles + want - 1) / want;
    s.slices = (s.tiles + s.per - 1) / s.per;
    s.part = (size_t)s.blocks * s.tiles * DBT_CT * s.rp;
    return s;
}

/* rows [r0, r0 + rows) and columns [c0, c0 + cols) of src (rows lds
 * apart, rmax x cmax) into dst (rows ldd apart), zeros outside src; cols
 * a multiple of 8, each run of 8 one asynchronous 16-byte copy where vec
 * allows (landed at the thread's __pipeline_wait_prior), else stored. */
__device__ static void dbt_stage(uint16_t *dst, int ldd, const uint16_t *src, int lds, int r0,
                                 int rows, int rmax, int c0, int cols, int cmax, int vec)
{
    const int runs = cols / 8;
    for (int e = (int)threadIdx.x; e < rows * runs; e += DBT_THREADS) {
        int i = e / runs, c = e % runs * 8, gr = r0 + i, gc = c0 + c;
        uint16_t *d = dst + i * ldd + c;
        if (vec && gr < rmax && gc + 8 <= cmax) {
            __pipeline_memcpy_async(d, src + (size_t)gr * lds + gc, 16);
            continue;
        }
        for (int k = 0; k < 8; k++)
            d[k] = gr < rmax && gc + k < cmax ? src[(size_t)gr * lds + gc + k] : (uint16_t)0;
    }
}

/* grid (blocks, slices). vec: bit 0 dy, bit 1 B, bit 2 xa may be copied
 * in 16-byte runs. */
__global__ static void __launch_bounds__(DBT_THREADS)
    lora_dbt_kernel(int N, int out, int r, int rp, int tiles, int per, const uint16_t *dy,
                    int ldy, const uint16_t *B, const uint16_t *xa, int ldxa, float *part,
                    float *tpart, int vec)
{
    const int ldx = rp + 8, nj = rp / 16;
    uint16_t *Xs = (uint16_t *)cuda_shared(); /* (DBT_ROWS, ldx) */
    uint16_t *Ys[2], *Bs[2];                  /* (DBT_ROWS, DBT_LDY), (DBT_CT, ldx) */
    Ys[0] = Xs + DBT_ROWS * ldx;
    Ys[1] = Ys[0] + DBT_ROWS * DBT_LDY;
    Bs[0] = Ys[1] + DBT_ROWS * DBT_LDY;
    Bs[1] = Bs[0] + DBT_CT * ldx;
    const tc_bf16 *xt = (const tc_bf16 *)Xs;
    const int n0 = (int)blockIdx.x * DBT_ROWS, t0 = (int)blockIdx.y * per;
    const int t1 = t0 + per < tiles ? t0 + per : tiles;
    const int warp = (int)threadIdx.x / 32;
    dbt_stage(Xs, ldx, xa, ldxa, n0, DBT_ROWS, N, 0, rp, r, vec & 4);
    if (t0 < t1) {
        dbt_stage(Ys[0], DBT_LDY, dy, ldy, n0, DBT_ROWS, N, t0 * DBT_CT, DBT_CT, out, vec & 1);
        dbt_stage(Bs[0], ldx, B, r, t0 * DBT_CT, DBT_CT, out, 0, rp, r, vec & 2);
    }
    __pipeline_commit();
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> tacc[2][DBT_MAXJ];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < DBT_MAXJ; j++)
            wmma::fill_fragment(tacc[i][j], 0.0f);
    for (int tile = t0, cur = 0; tile < t1; tile++, cur ^= 1) {
        /* this tile (and xa) has landed, for every thread; every warp is
         * done with the other buffers (the tile before last) */
        __pipeline_wait_prior(0);
        __syncthreads();
        if (tile + 1 < t1) {
            int c1 = (tile + 1) * DBT_CT;
            dbt_stage(Ys[cur ^ 1], DBT_LDY, dy, ldy, n0, DBT_ROWS, N, c1, DBT_CT, out, vec & 1);
            dbt_stage(Bs[cur ^ 1], ldx, B, r, c1, DBT_CT, out, 0, rp, r, vec & 2);
        }
        __pipeline_commit();
        const tc_bf16 *yt = (const tc_bf16 *)Ys[cur], *bt = (const tc_bf16 *)Bs[cur];
        for (int kk = 0; kk < DBT_CT; kk += 16) { /* t += dy B over the tile */
            wmma::fragment<wmma::matrix_b, 16, 16, 16, tc_bf16, wmma::row_major> fb[DBT_MAXJ];
#pragma unroll
            for (int j = 0; j < DBT_MAXJ; j++)
                if (j < nj)
                    wmma::load_matrix_sync(fb[j], bt + kk * ldx + 16 * j, ldx);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, tc_bf16, wmma::row_major> fa;
                wmma::load_matrix_sync(fa, yt + (32 * warp + 16 * i) * DBT_LDY + kk, DBT_LDY);
#pragma unroll
                for (int j = 0; j < DBT_MAXJ; j++)
                    if (j < nj)
                        wmma::mma_sync(tacc[i][j], fa, fb[j], tacc[i][j]);
            }
        }
        const int cf = warp % 4; /* dB's share: dy^T xa over the block's rows */
        for (int j = warp / 4; j < nj; j += 2) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int k = 0; k < DBT_ROWS; k += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, tc_bf16, wmma::col_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, tc_bf16, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, yt + k * DBT_LDY + 16 * cf, DBT_LDY);
                wmma::load_matrix_sync(fb, xt + k * ldx + 16 * j, ldx);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            size_t at = (((size_t)blockIdx.x * tiles + tile) * DBT_CT + 16 * cf) * rp + 16 * j;
            wmma::store_matrix_sync(part + at, acc, rp, wmma::mem_row_major);
        }
    }
    size_t np = (size_t)gridDim.x * DBT_ROWS; /* t's share of the slice */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < DBT_MAXJ; j++)
            if (j < nj) {
                size_t row = (size_t)blockIdx.y * np + (size_t)n0 + 32 * warp + 16 * i;
                wmma::store_matrix_sync(tpart + row * rp + 16 * j, tacc[i][j], rp,
                                        wmma::mem_row_major);
            }
}

/* dB += scale (its shares in block order), t (and t2) = its shares in
 * slice order, rounded once. */
__global__ static void lora_dbt_sum_kernel(int N, int out, int r, struct dbt_shape s, float scale,
                                           const float *part, const float *tpart, float *dB,
                                           uint16_t *t, int ldt, uint16_t *t2, int ldt2)
{
    size_t nb = (size_t)out * r, n = nb + (size_t)N * r;
    size_t outp = (size_t)s.tiles * DBT_CT, np = (size_t)s.blocks * DBT_ROWS;
    FOR_EACH(i, n) {
        if (i < nb) {
            size_t o = i / (size_t)r, j = i % (size_t)r;
            float sum = 0.0f;
            for (int b = 0; b < s.blocks; b++)
                sum = __fadd_rn(sum, part[((size_t)b * outp + o) * s.rp + j]);
            dB[i] = __fadd_rn(__fmul_rn(scale, sum), dB[i]);
        } else {
            size_t k = i - nb, row = k / (size_t)r, j = k % (size_t)r;
            float sum = 0.0f;
            for (int q = 0; q < s.slices; q++)
                sum = __fadd_rn(sum, tpart[((size_t)q * np + row) * s.rp + j]);
            uint16_t v = f32_to_bf16(sum);
            t[row * (size_t)ldt + j] = v;
            if (t2)
                t2[row * (size_t)ldt2 + j] = v;
        }
    }
}

size_t cuda_lora_dbt_floats(int N, int out, int r)
{
    if (N <= 0 || out <= 0 || r <= 0 || r > CUDA_LORA_DBT_MAX_R)
        return 0;
    struct dbt_shape s = dbt_shape(N, out, r);
    return s.part + (size_t)s.slices * s.blocks * DBT_ROWS * s.rp;
}

static int on16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

void cuda_lora_dbt(int N, int out, int r, float scale, const uint16_t *dy, int ldy,
                   const uint16_t *B, const uint16_t *xa, int ldxa, float *dB, uint16_t *t,
                   int ldt, uint16_t *t2, int ldt2, float *scratch)
{
    if (N <= 0)
        return;
    assert(out >= 1 && r >= 1 && r <= CUDA_LORA_DBT_MAX_R);
    struct dbt_shape s = dbt_shape(N, out, r);
    size_t ldx = (size_t)s.rp + 8; /* two tiles of dy and of B, and xa's rows */
    size_t smem = sizeof(uint16_t) * (2 * (size_t)DBT_ROWS * DBT_LDY + (size_t)DBT_ROWS * ldx +
                                      2 * (size_t)DBT_CT * ldx);
    if (smem > 48u * 1024u) /* a failure stays as the last error, for cuda_ctx_sync */
        (void)cudaFuncSetAttribute(lora_dbt_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem);
    int vec = (ldy % 8 == 0 && on16(dy)) | (r % 8 == 0 && on16(B)) << 1 |
              (ldxa % 8 == 0 && on16(xa)) << 2;
    float *part = scratch, *tpart = scratch + s.part;
    cuda_launch(lora_dbt_kernel, dim3((unsigned)s.blocks, (unsigned)s.slices), dim3(DBT_THREADS),
                smem, N, out, r, s.rp, s.tiles, s.per, dy, ldy, B, xa, ldxa, part, tpart, vec);
    size_t n = (size_t)out * r + (size_t)N * r;
    cuda_launch(lora_dbt_sum_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, N, out, r, s, scale,
                (const float *)part, (const float *)tpart, dB, t, ldt, t2, ldt2);
}

__global__ static void copy_cols_kernel(uint16_t *dst, int ldd, const uint16_t *src, int lds,
                                        int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    FOR_EACH(i, n) {
        size_t o = i / (size_t)cols, j = i % (size_t)cols;
        dst[o * (size_t)ldd + j] = src[o * (size_t)lds + j];
    }
}

void cuda_copy_cols(uint16_t *dst, int ldd, const uint16_t *src, int lds, int rows, int cols)
{
    size_t n = (size_t)(rows > 0 ? rows : 0) * (size_t)(cols > 0 ? cols : 0);
    if (n)
        cuda_launch(copy_cols_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, dst, ldd, src, lds,
                    rows, cols);
}


/* ---- NF4 --------------------------------------------------------------- */

/* The 16 levels, passed by value from nf4_levels (one table, the CPU's). */
struct nf4_table {
    float v[16];
};

/* nf4_block_scale's value, unfused: mean + code * (absmax / 127). */
__device__ static float nf4_scale(const int8_t *scale_codes, const float *group_mean,
                                  const float *group_absmax, size_t b)
{
    size_t g = b / NF4_SCALE_GROUP;
    return __fadd_rn(group_mean[g],
                     __fmul_rn((float)scale_codes[b], __fdiv_rn(group_absmax[g], 127.0f)));
}

/* Each thread decodes an octet, values [start + 8o, +8) of the range; each
 * value is level * block scale, as nf4_dequantize_range's table holds it,
 * then rounded to bf16. `vec`: start is a multiple of 8 (so an octet never
 * straddles two blocks), the codes are 4-byte and dst 16-byte aligned, so
 * a whole octet loads its 4 code bytes and stores its 8 values at once.
 * Otherwise (any start: the contract asks for a multiple of NF4_BLOCK, but
 * nothing here needs it) each value finds its own block. */
__global__ static void nf4_bf16_kernel(uint16_t *dst, const uint8_t *codes,
                                       const int8_t *scale_codes, const float *group_mean,
                                       const float *group_absmax, size_t start, size_t count,
                                       struct nf4_table lv, int vec)
{
    float *level = cuda_shared(); /* 16 */
#pragma unroll
    for (int k = 0; k < 16; k++)
        if ((int)threadIdx.x == k)
            level[k] = lv.v[k];
    __syncthreads();
    size_t octets = (count + 7) / 8;
    FOR_EACH(o, octets) {
        size_t e0 = start + 8 * o;
        size_t m = count - 8 * o < 8 ? count - 8 * o : 8;
        uint16_t *out = dst + 8 * o;
        if (vec && m == 8) {
            float s = nf4_scale(scale_codes, group_mean, group_absmax, e0 / NF4_BLOCK);
            uint32_t word = *(const uint32_t *)(codes + e0 / 2);
            uint32_t h[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                uint32_t byte = (word >> (8 * j)) & 0xffu;
                uint32_t hi = f32_to_bf16(__fmul_rn(level[byte >> 4], s));
                uint32_t lo = f32_to_bf16(__fmul_rn(level[byte & 15u], s));
                h[j] = hi | lo << 16; /* element 2j first: the lower half */
            }
            *(uint4 *)out = make_uint4(h[0], h[1], h[2], h[3]);
            continue;
        }
        for (size_t j = 0; j < m; j++) {
            size_t e = e0 + j;
            float s = nf4_scale(scale_codes, group_mean, group_absmax, e / NF4_BLOCK);
            uint8_t byte = codes[e / 2];
            unsigned q = e & 1 ? byte & 15u : (unsigned)byte >> 4;
            out[j] = f32_to_bf16(__fmul_rn(level[q], s));
        }
    }
}

void cuda_nf4_to_bf16(uint16_t *dst, const struct cuda_nf4 *t, size_t start, size_t count)
{
    if (!count)
        return;
    struct nf4_table lv;
    for (int k = 0; k < 16; k++)
        lv.v[k] = nf4_levels[k];
    const uint8_t *c0 = t->codes + start / 2;
    int vec = start % 8 == 0 && ((uintptr_t)c0 & 3u) == 0 && ((uintptr_t)dst & 15u) == 0;
    cuda_launch(nf4_bf16_kernel, dim3(ew_blocks((count + 7) / 8)), dim3(EW_THREADS),
                16 * sizeof(float), dst, t->codes, t->scale_codes, t->group_mean, t->group_absmax,
                start, count, lv, vec);
}

/* ---- NF4 inside the product -------------------------------------------- */

/* cuda_nf4_gemm's tiles: a block of NQ_THREADS (8 warps) owns NQ_BM x
 * NQ_BN of C, each warp 32 x 32 of it (2 x 2 fragments), and walks K in
 * steps of NQ_K: it stages A's (NQ_BM, NQ_K) tile and W's (NQ_K, NQ_BN)
 * tile, decoded from NF4 to bf16 as it is read, in shared memory, then
 * multiplies them on the tensor cores. The taller A tile halves the
 * decoding per product against a square 64 tile: every value of W decoded
 * serves 128 rows of A. Zeros pad the staged tiles past M, N and K (they
 * add nothing to a sum). Each fragment's sum runs along K in order, its
 * accumulator kept across the steps; the emulator's wmma sums in the same
 * order as cuda_gemm_emu.cc, so there the result is decode-then-product's
 * to the bit. */
#define NQ_BM 128
#define NQ_BN 64
#define NQ_K 32
#define NQ_THREADS 256
#define NQ_LD (NQ_K + 8)   /* bf16 stride of a staged row (80 bytes) */
#define NQ_LDC (NQ_BN + 4) /* fp32 stride of the output tile */
#define NQ_RUN_A (NQ_BM * NQ_K / NQ_THREADS) /* 16 values a thread copies of A */
#define NQ_RUN_W (NQ_BN * NQ_K / NQ_THREADS) /* 8 it decodes of W */
/* Shared memory: the 16 levels, then As and Ws, where the output tile is
 * written once the K steps are done. */
#define NQ_LEVELS_BYTES 128 /* 16 floats, padded so that As starts on 128 bytes */
#define NQ_STAGE_BYTES (2 * (NQ_BM + NQ_BN) * NQ_LD)
#define NQ_OUT_BYTES (4 * NQ_BM * NQ_LDC)
#define NQ_SMEM (NQ_LEVELS_BYTES + (NQ_STAGE_BYTES > NQ_OUT_BYTES ? NQ_STAGE_BYTES : NQ_OUT_BYTES))

/* A's tile (rows [m0, +NQ_BM), columns [k0, +NQ_K)) into As (NQ_BM,
 * NQ_LD): each thread a run of NQ_RUN_A values of one row, copied as two
 * 16-byte words when `vec` (A on 16 bytes, lda a multiple of 8) and the
 * run lies inside A, else value by value. */
__device__ static void nq_stage_a(tc_bf16 *As, const uint16_t *A, int lda, int M, int K, int m0,
                                  int k0, int vec)
{
    const int per_row = NQ_K / NQ_RUN_A;
    int r = (int)threadIdx.x / per_row, c0 = (int)threadIdx.x % per_row * NQ_RUN_A;
    int gi = m0 + r;
    if (vec && gi < M && k0 + c0 + NQ_RUN_A <= K) {
        const uint4 *src = (const uint4 *)(A + (size_t)gi * lda + k0 + c0);
        uint4 *dst = (uint4 *)(As + r * NQ_LD + c0);
        dst[0] = src[0];
        dst[1] = src[1];
        return;
    }
    for (int c = c0; c < c0 + NQ_RUN_A; c++) {
        int gk = k0 + c;
        float v = gi < M && gk < K ? bf16_to_f32(A[(size_t)gi * lda + gk]) : 0.0f;
        As[r * NQ_LD + c] = __float2bfloat16_rn(v); /* exact: v is a bf16 value */
    }
}

/* W's tile into Ws (NQ_BN, NQ_LD) as B's columns: Ws[n][k] = op(W)(k0+k,
 * n0+n), each value decoded as nf4_bf16_kernel decodes it (level * block
 * scale, rounded to bf16). Each thread decodes a run of NQ_RUN_W values
 * along W's stored rows. A run inside W that starts on 8 values (so
 * inside one NF4 block) with its 4 code bytes on 4 bytes (ldw a multiple
 * of 8 gives both) takes one scale and one 4-byte load, and when tw is
 * stored as one 16-byte word; otherwise each value finds its own block,
 * the scale computed again only when the block changes. tw: W stored
 * (N, K) (C = A W^T); else (K, N). */
__device__ static void nq_stage_w(tc_bf16 *Ws, const struct cuda_nf4 w, int ldw, int tw, int N,
                                  int K, int n0, int k0, const float *level)
{
    /* the stored tile: rows x cols, rows along n when tw, along k when not */
    int cols = tw ? NQ_K : NQ_BN;
    int per_row = cols / NQ_RUN_W;
    int r = (int)threadIdx.x / per_row, c0 = (int)threadIdx.x % per_row * NQ_RUN_W;
    int gr = (tw ? n0 : k0) + r, rows_all = tw ? N : K, cols_all = tw ? K : N;
    int gc0 = (tw ? k0 : n0) + c0;
    size_t e0 = (size_t)gr * ldw + (size_t)gc0;
    if (gr < rows_all && gc0 + NQ_RUN_W <= cols_all && e0 % NQ_RUN_W == 0 &&
        ((uintptr_t)(w.codes + e0 / 2) & 3u) == 0) {
        float s = nf4_scale(w.scale_codes, w.group_mean, w.group_absmax, e0 / NF4_BLOCK);
        uint32_t word = *(const uint32_t *)(w.codes + e0 / 2);
        uint32_t h[NQ_RUN_W / 2];
#pragma unroll
        for (int j = 0; j < NQ_RUN_W / 2; j++) {
            uint32_t byte = (word >> (8 * j)) & 0xffu;
            uint32_t hi = f32_to_bf16(__fmul_rn(level[byte >> 4], s));
            uint32_t lo = f32_to_bf16(__fmul_rn(level[byte & 15u], s));
            h[j] = hi | lo << 16; /* value 2j first: the lower half */
        }
        if (tw) {
            *(uint4 *)(Ws + r * NQ_LD + c0) = make_uint4(h[0], h[1], h[2], h[3]);
        } else {
            uint16_t *col = (uint16_t *)Ws + c0 * NQ_LD + r; /* Ws[c0 + c][r] */
#pragma unroll
            for (int j = 0; j < NQ_RUN_W / 2; j++) {
                col[(2 * j) * NQ_LD] = (uint16_t)(h[j] & 0xffffu);
                col[(2 * j + 1) * NQ_LD] = (uint16_t)(h[j] >> 16);
            }
        }
        return;
    }
    size_t blk = (size_t)-1;
    float s = 0.0f;
    for (int c = 0; c < NQ_RUN_W; c++) {
        float v = 0.0f;
        if (gr < rows_all && gc0 + c < cols_all) {
            size_t e = e0 + (size_t)c;
            if (e / NF4_BLOCK != blk) {
                blk = e / NF4_BLOCK;
                s = nf4_scale(w.scale_codes, w.group_mean, w.group_absmax, blk);
            }
            uint8_t byte = w.codes[e / 2];
            unsigned q = e & 1 ? byte & 15u : (unsigned)byte >> 4;
            v = __fmul_rn(level[q], s);
        }
        int n = tw ? r : c0 + c, k = tw ? c0 + c : r;
        Ws[n * NQ_LD + k] = __float2bfloat16_rn(v);
    }
}

/* grid (N tiles, M tiles). vec_a: A's rows can be copied in 16-byte
 * words (nq_stage_a). */
__global__ static void __launch_bounds__(NQ_THREADS)
    nf4_gemm_kernel(int tw, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                    const struct cuda_nf4 w, int ldw, float beta, float *C, int ldc,
                    struct nf4_table lv, int vec_a)
{
    float *level = cuda_shared();
    tc_bf16 *As = (tc_bf16 *)((char *)level + NQ_LEVELS_BYTES);
    tc_bf16 *Ws = As + NQ_BM * NQ_LD;
    float *Cs = (float *)As; /* after the last step */
#pragma unroll
    for (int k = 0; k < 16; k++)
        if ((int)threadIdx.x == k)
            level[k] = lv.v[k];
    __syncthreads();
    int m0 = (int)blockIdx.y * NQ_BM, n0 = (int)blockIdx.x * NQ_BN;
    int warp = (int)threadIdx.x / 32;
    int wm = warp / 2 * 32, wn = warp % 2 * 32; /* the warp's 32 x 32 of the tile */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);
    for (int k0 = 0; k0 < K; k0 += NQ_K) {
        nq_stage_a(As, A, lda, M, K, m0, k0, vec_a);
        nq_stage_w(Ws, w, ldw, tw, N, K, n0, k0, level);
        __syncthreads();
        for (int kk = 0; kk < NQ_K; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, tc_bf16, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, tc_bf16, wmma::col_major> fb[2];
            for (int i = 0; i < 2; i++)
                wmma::load_matrix_sync(fa[i], As + (wm + 16 * i) * NQ_LD + kk, NQ_LD);
            for (int j = 0; j < 2; j++)
                wmma::load_matrix_sync(fb[j], Ws + (wn + 16 * j) * NQ_LD + kk, NQ_LD);
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++)
                    wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads(); /* the tiles are staged again, or Cs written over them */
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(Cs + (wm + 16 * i) * NQ_LDC + wn + 16 * j, acc[i][j], NQ_LDC,
                                    wmma::mem_row_major);
    __syncthreads();
    /* as cuda_gemm's contract: alpha times the sum, plus beta C unless
     * beta is 0 (C is then not read) */
    for (int e = threadIdx.x; e < NQ_BM * NQ_BN; e += NQ_THREADS) {
        int r = e / NQ_BN, c = e % NQ_BN;
        if (m0 + r >= M || n0 + c >= N)
            continue;
        float *out = &C[(size_t)(m0 + r) * ldc + n0 + c];
        float v = __fmul_rn(alpha, Cs[r * NQ_LDC + c]);
        *out = beta != 0.0f ? __fadd_rn(v, __fmul_rn(beta, *out)) : v;
    }
}

void cuda_nf4_gemm(int tw, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                   const struct cuda_nf4 *w, int ldw, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0 || (K <= 0 && beta == 1.0f))
        return;
    struct nf4_table lv;
    for (int k = 0; k < 16; k++)
        lv.v[k] = nf4_levels[k];
    int vec_a = lda % 8 == 0 && ((uintptr_t)A & 15u) == 0;
    cuda_launch(nf4_gemm_kernel, dim3((unsigned)((N + NQ_BN - 1) / NQ_BN),
                                      (unsigned)((M + NQ_BM - 1) / NQ_BM)),
                dim3(NQ_THREADS), (size_t)NQ_SMEM, tw, M, N, K, alpha, A, lda, *w, ldw, beta, C,
                ldc, lv, vec_a);
}

/* ---- LoRA dropout ------------------------------------------------------ */

/* core/rng.c's splitmix64 and rng_derive, bit for bit. */
__device__ static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

__device__ static uint64_t rng_derive_dev(uint64_t seed, uint64_t stream_no)
{
    uint64_t x = seed ^ (stream_no * 0xd1b54a32d192ed03ULL);
    splitmix64(&x);
    return splitmix64(&x);
}

/* linear_dropout_keep's draw: 32 bits of one 64-bit draw per element, two
 * elements a draw; dropped below `cut`, else scaled by `keep`. */
template <typename X>
__global__ static void dropout_kernel(float *x_out, const X *x, size_t n, uint64_t seed,
                                      const uint64_t *seed_at, size_t e0, uint32_t cut,
                                      float keep)
{
    if (seed_at)
        seed = *seed_at;
    FOR_EACH(i, n) {
        size_t e = e0 + i;
        uint64_t word = rng_derive_dev(seed, (uint64_t)(e >> 1));
        uint32_t u = (uint32_t)(e & 1 ? word >> 32 : word);
        x_out[i] = __fmul_rn(u < cut ? 0.0f : keep, cuda_val_in(x, i));
    }
}

template <typename X>
static void dropout_launch(float *x_out, const X *x, size_t n, float p, uint64_t seed,
                           const uint64_t *seed_at, size_t e0)
{
    if (!n)
        return;
    if (p >= 1.0f) { /* outside the contract's [0, 1): everything dropped */
        cuda_zero(x_out, n * sizeof(float));
        return;
    }
    /* as linear_dropout_keep computes them, on the host */
    uint32_t cut = p > 0.0f ? (uint32_t)((double)p * 4294967296.0) : 0;
    float keep = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    cuda_launch(dropout_kernel<X>, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, x_out, x, n, seed,
                seed_at, e0, cut, keep);
}

void cuda_dropout(float *x_out, const float *x, size_t n, float p, uint64_t seed, size_t e0)
{
    dropout_launch(x_out, x, n, p, seed, (const uint64_t *)NULL, e0);
}

void cuda_dropout_bf16(float *x_out, const uint16_t *x, size_t n, float p, uint64_t seed,
                       size_t e0)
{
    dropout_launch(x_out, x, n, p, seed, (const uint64_t *)NULL, e0);
}

void cuda_dropout_at(float *x_out, const float *x, size_t n, float p, const uint64_t *seed,
                     size_t e0)
{
    dropout_launch(x_out, x, n, p, 0, seed, e0);
}

void cuda_dropout_bf16_at(float *x_out, const uint16_t *x, size_t n, float p,
                          const uint64_t *seed, size_t e0)
{
    dropout_launch(x_out, x, n, p, 0, seed, e0);
}

/* ---- gradient norm and AdamW ------------------------------------------- */

/* Each block's share of the sum of squares, written by sumsq_blocks_kernel
 * and read by sumsq_total_kernel on the same stream. */
__device__ static double sumsq_part[SUMSQ_BLOCKS];

/* Block b owns chunks [b*per, (b+1)*per); warp w takes every SUMSQ_WARPS-th
 * of them in order, each chunk summed in float (lane-strided, then a
 * butterfly) and added to the warp's double; the warps' doubles are added
 * in warp order. */
__global__ static void sumsq_blocks_kernel(const float *g, size_t n, size_t per)
{
    double *wsum = (double *)cuda_shared(); /* SUMSQ_WARPS */
    int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    size_t chunks = (n + NORM_CHUNK - 1) / NORM_CHUNK;
    size_t c0 = blockIdx.x * per, c1 = c0 + per < chunks ? c0 + per : chunks;
    double acc = 0.0;
    /* rounds of SUMSQ_WARPS chunks, so that every warp takes every round */
    for (size_t cr = c0; cr < c1; cr += SUMSQ_WARPS) {
        size_t c = cr + wp;
        size_t s = c * NORM_CHUNK, e = c < c1 ? (s + NORM_CHUNK < n ? s + NORM_CHUNK : n) : s;
        float f = 0.0f;
#pragma unroll 8
        for (size_t i = s + lane; i < e; i += 32)
            f += g[i] * g[i];
        f = warp_sum(f);
        if (c < c1)
            acc += (double)f;
    }
    if (lane == 0)
        wsum[wp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int k = 0; k < SUMSQ_WARPS; k++)
            t += wsum[k];
        sumsq_part[blockIdx.x] = t;
    }
}

__global__ static void sumsq_total_kernel(double *out, int blocks)
{
    double t = 0.0;
    for (int b = 0; b < blocks; b++)
        t += sumsq_part[b];
    *out = t;
}

void cuda_sumsq(double *out, const float *g, size_t n)
{
    size_t chunks = (n + NORM_CHUNK - 1) / NORM_CHUNK;
    if (!chunks) {
        cuda_zero(out, sizeof *out);
        return;
    }
    size_t per = (chunks + SUMSQ_BLOCKS - 1) / SUMSQ_BLOCKS;
    int blocks = (int)((chunks + per - 1) / per);
    cuda_launch(sumsq_blocks_kernel, dim3(blocks), dim3(SUMSQ_WARPS * 32),
                SUMSQ_WARPS * sizeof(double), g, n, per);
    cuda_launch(sumsq_total_kernel, dim3(1), dim3(1), 0, out, blocks);
}

/* kern.c's adamw_scalar, operation for operation, unfused. */
__global__ static void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n,
                                    size_t n_decay, float gscale, float b1, float b2,
                                    float step, float rc2, float eps, float decay)
{
    FOR_EACH(i, n) {
        float dk = i < n_decay ? decay : 1.0f;
        float gi = __fmul_rn(g[i], gscale);
        float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(__fsub_rn(1.0f, b1), gi));
        float vi =
            __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, b2), gi), gi));
        m[i] = mi;
        v[i] = vi;
        float den = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), rc2), eps);
        p[i] = __fsub_rn(__fmul_rn(p[i], dk), __fdiv_rn(__fmul_rn(step, mi), den));
    }
}

void cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, size_t n_decay,
                float gscale, float lr, float beta1, float beta2, float eps, float wd,
                uint64_t t)
{
    if (!n)
        return;
    float step, rc2, decay;
    optim_adamw_factors(t, beta1, beta2, lr, wd, &step, &rc2, &decay);
    cuda_launch(adamw_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, p, g, m, v, n,
                n_decay < n ? n_decay : n, gscale, beta1, beta2, step, rc2, eps, decay);
}
