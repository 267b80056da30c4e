/* cuda_gemm_emu.cc - train/cuda/cuda_gemm.h for the CPU emulator: the same
 * row-major contract (C (M,N) = alpha op(A) op(B) + beta C, A stored (K,M)
 * when ta, B stored (N,K) when tb), computed on the host with fp32 sums in
 * order along K, the bf16 inputs widened exactly and a bf16 output rounded
 * to nearest even. It stands in for cuBLASLt so that programs built on the
 * backend's host code (cuda_model.c and the rest) run under the emulator;
 * cuBLASLt itself is checked against this contract on the GPU
 * (tests/gpu/test_cuda_gemm.c). A product is queued as the emulator's
 * stream work is (emu::submit: at once, or kept by a capture).
 */
#include <cstdint>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" {
#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_gemm.h"
}

namespace {

float widen(uint16_t h)
{
    __nv_bfloat16 b;
    b.x = h;
    return __bfloat162float(b);
}
float widen(float f) { return f; }

template <typename In>
float dot(int ta, int tb, int K, const In *A, int lda, const In *B, int ldb, int i, int j)
{
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        float a = widen(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
        float b = widen(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
        acc += a * b;
    }
    return acc;
}

unsigned long calls[CUDA_GEMM_KINDS];

} // namespace

extern "C" unsigned long cuda_gemm_calls(enum cuda_gemm_kind kind)
{
    return kind >= 0 && kind < CUDA_GEMM_KINDS ? calls[kind] : 0;
}

extern "C" int cuda_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha,
                              const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                              float *C, int ldc)
{
    int r = cuda_gemm_args(ta, tb, M, N, K, lda, ldb, ldc, beta);
    if (r >= 0 && cuda_gemm_walked(CUDA_GEMM_BF16_F32, ta, tb, M, N, K, alpha, A, lda, B, ldb,
                                   beta, nullptr, C, ldc))
        return 0;
    if (r >= 0)
        calls[CUDA_GEMM_BF16_F32]++;
    if (r < 0 || r == CUDA_GEMM_NOTHING)
        return r < 0 ? -1 : 0; /* CUDA_GEMM_ZERO: the sums over no K are 0 */
    emu::submit([=]() {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float *c = &C[(size_t)i * ldc + j];
                float v = alpha * dot(ta, tb, K, A, lda, B, ldb, i, j);
                *c = beta != 0.0f ? v + beta * *c : v;
            }
    });
    return 0;
}

extern "C" int cuda_gemm_bf16_out(int ta, int tb, int M, int N, int K, float alpha,
                                  const uint16_t *A, int lda, const uint16_t *B, int ldb,
                                  float beta, uint16_t *C, int ldc)
{
    int r = cuda_gemm_args(ta, tb, M, N, K, lda, ldb, ldc, beta);
    if (r >= 0 && cuda_gemm_walked(CUDA_GEMM_BF16_BF16, ta, tb, M, N, K, alpha, A, lda, B, ldb,
                                   beta, nullptr, C, ldc))
        return 0;
    if (r >= 0)
        calls[CUDA_GEMM_BF16_BF16]++;
    if (r < 0 || r == CUDA_GEMM_NOTHING)
        return r < 0 ? -1 : 0; /* CUDA_GEMM_ZERO: the sums over no K are 0 */
    emu::submit([=]() {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                uint16_t *c = &C[(size_t)i * ldc + j];
                float v = alpha * dot(ta, tb, K, A, lda, B, ldb, i, j);
                if (beta != 0.0f)
                    v += beta * widen(*c);
                *c = __float2bfloat16_rn(v).x;
            }
    });
    return 0;
}

extern "C" int cuda_gemm_bf16_out_add(int ta, int tb, int M, int N, int K, float alpha,
                                      const uint16_t *A, int lda, const uint16_t *B, int ldb,
                                      const uint16_t *R, uint16_t *D, int ldc)
{
    int r = cuda_gemm_args(ta, tb, M, N, K, lda, ldb, ldc, 1.0f);
    if (r >= 0 && cuda_gemm_walked(CUDA_GEMM_BF16_BF16, ta, tb, M, N, K, alpha, A, lda, B, ldb,
                                   1.0f, R, D, ldc))
        return 0;
    if (r >= 0)
        calls[CUDA_GEMM_BF16_BF16]++;
    if (r < 0)
        return -1;
    emu::submit([=]() {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                size_t at = (size_t)i * ldc + j;
                float v = K > 0 ? alpha * dot(ta, tb, K, A, lda, B, ldb, i, j) : 0.0f;
                v += widen(R[at]);
                D[at] = __float2bfloat16_rn(v).x;
            }
    });
    return 0;
}

extern "C" int cuda_gemm_f32(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                             int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    int r = cuda_gemm_args(ta, tb, M, N, K, lda, ldb, ldc, beta);
    if (r >= 0 && cuda_gemm_walked(CUDA_GEMM_F32_F32, ta, tb, M, N, K, alpha, A, lda, B, ldb,
                                   beta, nullptr, C, ldc))
        return 0;
    if (r >= 0)
        calls[CUDA_GEMM_F32_F32]++;
    if (r < 0 || r == CUDA_GEMM_NOTHING)
        return r < 0 ? -1 : 0; /* CUDA_GEMM_ZERO: the sums over no K are 0 */
    emu::submit([=]() {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float *c = &C[(size_t)i * ldc + j];
                float v = alpha * dot(ta, tb, K, A, lda, B, ldb, i, j);
                *c = beta != 0.0f ? v + beta * *c : v;
            }
    });
    return 0;
}
