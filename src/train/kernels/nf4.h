/* nf4.h - 4-bit NormalFloat weights with double-quantized block scales
 * (the QLoRA storage for a frozen base).
 *
 * A tensor of n values (row-major, flattened) is cut into blocks of
 * NF4_BLOCK = 64 values. Each block keeps one absmax scale; each value keeps
 * the index of the nearest of the 16 NF4 levels to value/scale, two per byte,
 * element 2j in the high nibble of byte j. The block scales are themselves
 * quantized (double quantization): their mean is subtracted, and the rest is
 * stored as int8 codes with one fp32 absmax per group of NF4_SCALE_GROUP = 256
 * blocks; the mean is per group too, so that a tensor can be encoded a group
 * at a time without holding all of it in fp32. Storage is ~4.13 bits per
 * value.
 *
 * Ownership: nf4_quantize allocates the tensor; nf4_free releases it.
 * Dequantization is thread-safe and allocates nothing.
 */
#ifndef ALALLO_TRAIN_NF4_H
#define ALALLO_TRAIN_NF4_H

#include <stddef.h>
#include <stdint.h>

#define NF4_BLOCK 64
#define NF4_SCALE_GROUP 256

/* The 16 NF4 levels, ascending, from -1 to 1 with an exact 0 at index 7. */
extern const float nf4_levels[16];

struct nf4_tensor {
    size_t n;              /* values */
    size_t n_blocks;       /* ceil(n / NF4_BLOCK) */
    size_t n_groups;       /* ceil(n_blocks / NF4_SCALE_GROUP) */
    uint8_t *codes;        /* (ceil(n/2)) two 4-bit level indices per byte */
    int8_t *scale_codes;   /* (n_blocks) quantized (scale - group_mean) */
    float *group_mean;     /* (n_groups) mean of the block scales of a group */
    float *group_absmax;   /* (n_groups) absmax of (scale - group_mean) */
};

/* Values per group: encoding works in whole groups. */
#define NF4_GROUP_VALUES ((size_t)NF4_BLOCK * NF4_SCALE_GROUP)

/* Quantizes n fp32 values. NULL on allocation failure. */
struct nf4_tensor *nf4_quantize(const float *x, size_t n);

/* An empty tensor of n values (all codes zero), to be filled by
 * nf4_encode. NULL on allocation failure. */
struct nf4_tensor *nf4_create(size_t n);
/* Encodes values [start, start+count) from x. start must be a multiple of
 * NF4_GROUP_VALUES and count a multiple of it too, unless the range ends at
 * n. Returns 0, or -1 when the range breaks that rule. */
int nf4_encode(struct nf4_tensor *t, size_t start, const float *x, size_t count);
void nf4_free(struct nf4_tensor *t); /* NULL is fine */

/* Bytes held by the tensor's arrays (for memory accounting). */
size_t nf4_bytes(const struct nf4_tensor *t);

/* The dequantized scale of block `b`. */
float nf4_block_scale(const struct nf4_tensor *t, size_t b);

/* Writes values [start, start+count) as fp32 into out (count values).
 * Runs on the calling thread only. */
void nf4_dequantize_range(const struct nf4_tensor *t, size_t start, size_t count, float *out);

/* As nf4_dequantize_range, split over OpenMP threads. */
void nf4_dequantize_parallel(const struct nf4_tensor *t, size_t start, size_t count,
                             float *out);

/* As nf4_dequantize_range over all threads, each value rounded to bf16
 * (nearest, ties to even): what a bf16 product reads. Needs avx512f and
 * avx512bf16 (the caller checks: train/cpu_path.h). */
void nf4_dequantize_bf16(const struct nf4_tensor *t, size_t start, size_t count, uint16_t *out);

/* As nf4_dequantize_bf16, on the calling thread only (what the bf16
 * product kernels call as they pack an NF4 weight: train/gemm.h). */
void nf4_dequantize_bf16_range(const struct nf4_tensor *t, size_t start, size_t count,
                               uint16_t *out);
/* Index of the NF4 level nearest to v (v is clamped to [-1, 1]). */
int nf4_nearest(float v);

#endif
