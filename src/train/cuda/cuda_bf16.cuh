/* cuda_bf16.cuh - fp32 <-> bf16 on the device, bit for bit as the CPU's
 * linear_f32_to_bf16 / linear_bf16_to_f32 (round to nearest, ties to even,
 * NaN kept a NaN), in one place for every kernel that writes bf16: the
 * conversions of cuda_ops.cu and the kernels that write a bf16 copy of
 * their output beside the fp32 one (RMSNorm, the gated activations,
 * rotary positions' backward, attention's output), so that a fused copy
 * has the bits a separate cuda_to_bf16 pass would give.
 */
#ifndef ALALLO_TRAIN_CUDA_BF16_CUH
#define ALALLO_TRAIN_CUDA_BF16_CUH

#include <stdint.h>

#include <cuda_runtime.h>

__device__ __forceinline__ float cuda_bf16_f32(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ uint16_t cuda_f32_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu))
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* A value of an array that is fp32, or bf16 (issue 36's changes keep more
 * of the activations so), read as fp32 and written back rounded: for the
 * kernels templated on an array's type. */
__device__ __forceinline__ float cuda_val_in(const float *p, size_t i)
{
    return p[i];
}

__device__ __forceinline__ float cuda_val_in(const uint16_t *p, size_t i)
{
    return cuda_bf16_f32(p[i]);
}

__device__ __forceinline__ void cuda_val_out(float *p, size_t i, float v)
{
    p[i] = v;
}

__device__ __forceinline__ void cuda_val_out(uint16_t *p, size_t i, float v)
{
    p[i] = cuda_f32_bf16(v);
}

#endif
