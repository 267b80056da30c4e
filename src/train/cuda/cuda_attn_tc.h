/* cuda_attn_tc.h - attention on tensor cores (train/cuda/cuda_attn_tc.cu),
 * inside the backend only: cuda_attention_forward/backward (cuda_ops.h)
 * call these when the bf16 path is chosen and hd <= CUDA_ATTN_TC_MAX_HD.
 * Same arguments and meanings as those two; the backward takes D =
 * rowsum(dout * out) (B,H,T) already computed and dout as bf16 (both as
 * attention's row-dot kernel writes them), and writes dq, dk, dv.
 * Shapes were checked by the caller.
 */
#ifndef ALALLO_TRAIN_CUDA_ATTN_TC_H
#define ALALLO_TRAIN_CUDA_ATTN_TC_H

#include <stdint.h>

#define CUDA_ATTN_TC_MAX_HD 128

void cuda_attn_tc_forward(uint16_t *out, uint16_t *outb, int ldo, float *lse,
                          const uint16_t *q, const uint16_t *k, const uint16_t *v,
                          const int32_t *seg, int B, int T, int H, int KV, int hd, float scale,
                          float cap);
void cuda_attn_tc_backward(float *dq, float *dk, float *dv, const float *D,
                           const uint16_t *dout, const float *lse, const uint16_t *q,
                           const uint16_t *k, const uint16_t *v, const int32_t *seg, int B,
                           int T, int H, int KV, int hd, float scale, float cap);

#endif
