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
#include <cstring>
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
float shfl_down(unsigned mask, float v, int delta);
float *shared();
/* This thread's lane in its warp (the wmma emulation's, mma.h). */
unsigned lane_id();
cudaError_t set_smem_limit(const void *kernel, int bytes);
/* Runs body once per thread of every block, blocks one after another
 * (kept for later while a capture is on, cuda_emu.cc). */
void run(const void *kernel, dim3 grid, dim3 block, size_t smem, std::function<void()> body);
/* The stream's other work (fills, copies, the products' stand-in): run at
 * once, or kept while a capture is on, as a graph's node. */
void submit(std::function<void()> work);
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

/* A shuffle down the warp: lane l gets lane l + delta's v (its own past
 * the warp's end), for 4-byte values. */
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T v, int delta)
{
    static_assert(sizeof(T) == 4, "the emulator shuffles 4-byte values");
    float f;
    memcpy(&f, &v, 4);
    f = emu::shfl_down(mask, f, delta);
    memcpy(&v, &f, 4);
    return v;
}

/* float2 as CUDA's: 8 bytes on 8 (the kernels read score pairs with it) */
struct alignas(8) float2 {
    float x, y;
};
static inline float2 make_float2(float x, float y) { return float2{x, y}; }

struct uint4 {
    unsigned x, y, z, w;
};
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
    return uint4{x, y, z, w};
}
static inline float __uint_as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t __float_as_uint(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Device memory is host memory: the stream's copies and fills run at once
 * (or when a captured graph replays). */
enum cudaMemcpyKind { cudaMemcpyDeviceToDevice = 3 };
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    (void)s;
    emu::submit([=]() { memset(p, v, n); });
    return cudaSuccess;
}

static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
using std::max;
using std::min;

#endif
