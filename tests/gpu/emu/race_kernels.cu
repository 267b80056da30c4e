/* race_kernels.cu (emulator only) - small kernels for the emulator's own
 * test (test_race.c): two with the barriers they need, and two with a race
 * planted, so that the shuffled order and the race detector
 * (emu_race.h) are shown to catch what they are for, and to pass what is
 * right.
 *
 * Each block (64 threads, two warps) puts x[i] in shared memory; thread t
 * then adds a neighbour's value: out[i] = x[i] + x[i - 1] within the
 * block (its first thread adds 0), or, in the warp kernels, x[i ^ 1] (same
 * warp) or x[i ^ 32] (the other warp).
 */
#include "train/cuda/cuda_launch.cuh"

#include "emu_race.h"

#include "race_kernels.h"

#define RACE_THREADS 64

/* planted: reads its left neighbour's word without waiting for it */
__global__ void left_sum(const float *x, float *out, int barrier)
{
    float *s = cuda_shared();
    unsigned t = threadIdx.x, i = blockIdx.x * RACE_THREADS + t;
    s[t] = x[i];
    if (barrier)
        __syncthreads();
    out[i] = s[t] + (t ? s[t - 1] : 0.0f);
}

/* xor_sum with mask 1: right with __syncwarp; with mask 32 it reads the
 * other warp's word, which __syncwarp does not order (planted) */
__global__ void xor_sum(const float *x, float *out, unsigned mask)
{
    float *s = cuda_shared();
    unsigned t = threadIdx.x, i = blockIdx.x * RACE_THREADS + t;
    s[t] = x[i];
    __syncwarp();
    out[i] = s[t] + s[t ^ mask];
}

extern "C" {

int race_kernel_run(enum race_kernel which, const float *x, float *out, int blocks)
{
    size_t bytes = (size_t)blocks * RACE_THREADS * sizeof(float);
    float *dx = (float *)cuda_alloc(bytes, 0), *dout = (float *)cuda_alloc(bytes, 0);
    if (!dx || !dout || cuda_upload(dx, x, bytes) < 0)
        return -1;
    size_t smem = RACE_THREADS * sizeof(float);
    switch (which) {
    case RACE_LEFT_SYNCED:
    case RACE_LEFT_PLANTED:
        cuda_launch(left_sum, dim3(blocks), dim3(RACE_THREADS), smem, (const float *)dx, dout,
                    which == RACE_LEFT_SYNCED);
        break;
    case RACE_WARP_SYNCED:
    case RACE_WARP_PLANTED:
        cuda_launch(xor_sum, dim3(blocks), dim3(RACE_THREADS), smem, (const float *)dx, dout,
                    which == RACE_WARP_SYNCED ? 1u : 32u);
        break;
    }
    int rc = cuda_ctx_sync() < 0 || cuda_download(out, dout, bytes) < 0 ? -1 : 0;
    cuda_free(dx);
    cuda_free(dout);
    return rc;
}

int race_kernel_watched(void) { return emu_race::watching(); }

} /* extern "C" */
