/* cuda_launch.cuh - how the backend's kernels launch and find their dynamic
 * shared memory, in one place, so that the CPU emulator of
 * tests/gpu/emu/ (which shadows this header and cuda_runtime.h) can run the
 * same kernel source on a machine with no GPU.
 *
 * A kernel written for the emulator as well: launches through cuda_launch
 * (never <<<...>>> directly), takes its dynamic shared memory from
 * cuda_shared() (no static __shared__ arrays), and reaches every barrier,
 * warp sync and shuffle with all the threads of its block (the emulator
 * runs warp-level operations as block-wide steps).
 */
#ifndef ALALLO_TRAIN_CUDA_LAUNCH_CUH
#define ALALLO_TRAIN_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>

extern "C" {
#include "train/cuda/cuda_ctx.h"
}
#include "train/cuda/cuda_walk.h"

/* kernel<<<grid, block, smem, the context's stream>>>(args...); a launch
 * error surfaces at the next cuda_ctx_sync(). While a walk is on
 * (cuda_walk.h), noted and not launched. */
template <typename... P, typename... A>
static inline void cuda_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                               A... args)
{
    if (cuda_launch_walked(kernel, grid, block, smem, args...))
        return;
    kernel<<<grid, block, smem, (cudaStream_t)cuda_ctx_stream()>>>(args...);
}

/* The block's dynamic shared memory (the launch's smem bytes), on 128
 * bytes (wmma's fragments need 32). */
__device__ __forceinline__ float *cuda_shared(void)
{
    extern __shared__ __align__(128) float cuda_shared_mem[];
    return cuda_shared_mem;
}

#endif
