/* cuda_runtime.h (emulator) - just enough of CUDA's runtime header for the
 * backend's kernels (the .cu files of src/train/cuda/) to compile as C++ with g++ and
 * run on the CPU under the emulator of cuda_emu.cc. Put this folder first
 * on the include path; it shadows the real header and
 * train/cuda/cuda_launch.cuh.
 *
 * Every thread of a block is a fiber: __syncthreads is a block barrier,
 * __syncwarp and the shuffles wait for the 32 lanes of the warp, and a
 * barrier some threads can never reach is reported and aborts the run
 * (a hang on a GPU). Shared memory is a fresh allocation of exactly the
 * launch's bytes per block, and device arrays are host allocations, both
 * filled with NaN (a read of an unwritten word shows) between guard zones
 * that catch a write past either end (AddressSanitizer, with EMU_SAN=1,
 * catches reads too).
 * Arithmetic is the host's: results match a GPU's to rounding, not bits.
 */
#ifndef ALALLO_EMU_CUDA_RUNTIME_H
#define ALALLO_EMU_CUDA_RUNTIME_H

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

typedef struct emu_stream *cudaStream_t;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

namespace emu {
const dim3 &thread_idx();
const dim3 &block_idx();
const dim3 &block_dim();
const dim3 &grid_dim();
void sync_block();
int sync_block_or(int pred);
void sync_warp();
float shfl_xor(unsigned mask, float v, int lane_mask);
float *shared();
/* This thread's lane in its warp (the wmma emulation's, mma.h). */
unsigned lane_id();
cudaError_t set_smem_limit(const void *kernel, int bytes);
/* Runs body once per thread of every block, blocks one after another. */
void run(const void *kernel, dim3 grid, dim3 block, size_t smem, std::function<void()> body);
} // namespace emu

template <typename K>
static inline cudaError_t cudaFuncSetAttribute(K kernel, cudaFuncAttribute attr, int value)
{
    (void)attr;
    return emu::set_smem_limit(reinterpret_cast<const void *>(kernel), value);
}

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define threadIdx (emu::thread_idx())
#define blockIdx (emu::block_idx())
#define blockDim (emu::block_dim())
#define gridDim (emu::grid_dim())
#define __syncthreads() emu::sync_block()
#define __syncthreads_or(p) emu::sync_block_or(p)
#define __syncwarp(...) emu::sync_warp()
#define __shfl_xor_sync(mask, v, m) emu::shfl_xor((mask), (v), (m))

static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
using std::max;
using std::min;

#endif
