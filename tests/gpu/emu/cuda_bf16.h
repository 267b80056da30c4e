/* cuda_bf16.h (emulator) - the bf16 type (and its pair) and the conversions the
 * backend's kernels use, for the CPU emulator (cuda_runtime.h beside this
 * says how): round to nearest even, as the GPU's __float2bfloat16_rn. */
#ifndef ALALLO_EMU_CUDA_BF16_H
#define ALALLO_EMU_CUDA_BF16_H

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
    uint16_t x;
};

static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) { /* NaN stays NaN */
        h.x = (uint16_t)((u >> 16) | 0x40u);
        return h;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    h.x = (uint16_t)(u >> 16);
    return h;
}

/* two bf16 in one 4-byte word, x first (the lower address), as CUDA's */
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b)
{
    return __nv_bfloat162{__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}

static inline float __bfloat162float(__nv_bfloat16 h)
{
    uint32_t u = (uint32_t)h.x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
