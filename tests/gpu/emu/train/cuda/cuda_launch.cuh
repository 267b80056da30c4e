/* cuda_launch.cuh (emulator) - shadows src/train/cuda/cuda_launch.cuh: a
 * launch runs the kernel's blocks on the CPU (cuda_emu.cc), and
 * cuda_shared() is the running block's shared memory. Same contract (a
 * walk notes the launch, cuda_walk.h; a capture keeps it, cuda_emu.cc). */
#ifndef ALALLO_TRAIN_CUDA_LAUNCH_CUH
#define ALALLO_TRAIN_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>

extern "C" {
#include "train/cuda/cuda_ctx.h"
}
#include "train/cuda/cuda_walk.h"

template <typename... P, typename... A>
static inline void cuda_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                               A... args)
{
    if (cuda_launch_walked(kernel, grid, block, smem, args...))
        return;
    emu::run(reinterpret_cast<const void *>(kernel), grid, block, smem,
             [=]() { kernel(args...); });
}

static inline float *cuda_shared(void)
{
    return emu::shared();
}

#endif
