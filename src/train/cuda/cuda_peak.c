/* cuda_peak.c - the measured bf16 matrix rate (cuda_peak.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_gemm.h"
#include "train/cuda/cuda_peak.h"

/* Uniform in [-1, 1], as bf16 bits (truncated: any bf16 will do). */
static void fill_random(uint16_t *h, size_t count, uint64_t seed)
{
    for (size_t i = 0; i < count; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        float f = (float)((seed >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        h[i] = (uint16_t)(u >> 16);
    }
}

int cuda_peak_bf16(int n, int warmup, int iters, struct cuda_peak *out)
{
    memset(out, 0, sizeof *out);
    if (n < 256 || n > 32768 || n % 8 || warmup < 0 || iters < 1)
        return cuda_ctx_fail("peak: n %d (256 to 32768, a multiple of 8), %d warm-ups, %d "
                             "timed runs (at least 1)",
                             n, warmup, iters);
    size_t count = (size_t)n * n, bytes = count * sizeof(uint16_t);
    uint16_t *host = malloc(bytes);
    uint16_t *a = cuda_alloc(bytes, 0), *b = cuda_alloc(bytes, 0), *c = cuda_alloc(bytes, 1);
    cudaEvent_t t0 = NULL, t1 = NULL;
    int rc = -1;
    if (!host) {
        cuda_ctx_fail("peak: no host memory for %zu MiB", bytes >> 20);
        goto out;
    }
    if (!a || !b || !c)
        goto out;
    fill_random(host, count, 1);
    if (cuda_upload(a, host, bytes))
        goto out;
    fill_random(host, count, 2);
    if (cuda_upload(b, host, bytes))
        goto out;
    for (int i = 0; i < warmup; i++)
        if (cuda_gemm_bf16_out(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n))
            goto out;
    if (cuda_ctx_sync())
        goto out;
    cudaStream_t s = (cudaStream_t)cuda_ctx_stream();
    cudaError_t e = cudaEventCreate(&t0);
    if (e == cudaSuccess)
        e = cudaEventCreate(&t1);
    if (e == cudaSuccess)
        e = cudaEventRecord(t0, s);
    if (e != cudaSuccess) {
        cuda_ctx_fail("peak: CUDA events: %s", cudaGetErrorString(e));
        goto out;
    }
    for (int i = 0; i < iters; i++)
        if (cuda_gemm_bf16_out(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n))
            goto out;
    float ms = 0;
    e = cudaEventRecord(t1, s);
    if (e == cudaSuccess)
        e = cudaEventSynchronize(t1);
    if (e == cudaSuccess)
        e = cudaEventElapsedTime(&ms, t0, t1);
    if (e != cudaSuccess) {
        cuda_ctx_fail("peak: timing the products: %s", cudaGetErrorString(e));
        goto out;
    }
    if (cuda_ctx_sync())
        goto out;
    out->n = n;
    out->warmup = warmup;
    out->iters = iters;
    out->ms_per_product = (double)ms / iters;
    out->flops = 2.0 * (double)n * n * n / (out->ms_per_product * 1e-3);
    rc = 0;
out:
    if (t0)
        cudaEventDestroy(t0);
    if (t1)
        cudaEventDestroy(t1);
    cuda_free(a);
    cuda_free(b);
    cuda_free(c);
    free(host);
    return rc;
}
