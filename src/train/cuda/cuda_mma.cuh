/* cuda_mma.cuh - one tensor-core product whose fragment layout PTX
 * documents (mma.sync.m16n8k16, bf16 inputs, fp32 sums; sm_80+), for the
 * kernels that must know which row a fragment element is: the attention
 * forward keeps its scores, probabilities and output in registers and
 * takes each row's max and sum there, which wmma (whose layout is the
 * hardware's secret) does not allow. tests/gpu/emu/train/cuda/ shadows
 * this header with the CPU emulator's version (same layout, same
 * contract).
 *
 * Lane l of the warp, g = l / 4 and t = l % 4, holds (PTX ISA, "Matrix
 * Fragments for mma.m16n8k16 with floating point type"):
 *   A (16x16, row-major) a[0]: row g, columns 2t, 2t+1; a[1]: row g+8,
 *     the same columns; a[2], a[3]: as a[0], a[1], columns 2t+8, 2t+9;
 *   B (16x8) b[0]: rows 2t, 2t+1 of column g; b[1]: rows 2t+8, 2t+9;
 *   C, D (16x8, fp32) c[0], c[1]: row g, columns 2t, 2t+1; c[2], c[3]:
 *     row g+8, the same columns;
 * each a[] and b[] word two bf16, the lower column (or row) in the low
 * half. So the C of two neighbouring 8-column tiles is, rounded to bf16,
 * the A of a 16-column step: P goes from one product to the next without
 * leaving the registers.
 */
#ifndef ALALLO_TRAIN_CUDA_MMA_CUH
#define ALALLO_TRAIN_CUDA_MMA_CUH

#include <stdint.h>

/* c (16x8) += a (16x16) b (16x8), warp-wide. */
__device__ __forceinline__ void mma_16816(float *c, const uint32_t *a, const uint32_t *b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#endif
