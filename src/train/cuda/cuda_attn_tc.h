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
/* Where the backward writes a gradient's rows (dq, dk or dv): fp32 rows
 * (B,T,n,hd) packed in f, or (f NULL) bf16 in b, each row ld values
 * apart, rotated back by the row's position first where cos is set
 * (cos and sin: the (T, hd/2) tables cuda_rope_backward reads; its
 * products and sums, rounded once: issue 36, change 1o; hd a multiple of
 * 16, so a lane holds both values of each rotated pair). */
struct attn_grad_out {
    float *f;
    uint16_t *b;
    int ld;
    int unused; /* 0: no padding, so a walk's bytes are all set (cuda_walk.h) */
    const float *cos, *sin;
};
void cuda_attn_tc_backward(struct attn_grad_out dq, struct attn_grad_out dk,
                           struct attn_grad_out dv, const float *D, const uint16_t *dout,
                           const float *lse, const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, const int32_t *seg, int B, int T, int H, int KV,
                           int hd, float scale, float cap);

#endif
