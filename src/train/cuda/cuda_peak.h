/* cuda_peak.h - the open GPU's dense bf16 matrix rate, measured the way
 * the figure is (a large cuBLASLt product on random data), for
 * `alallo bench train --device cuda` and the MFU it reports.
 */
#ifndef ALALLO_TRAIN_CUDA_PEAK_H
#define ALALLO_TRAIN_CUDA_PEAK_H

struct cuda_peak {
    int n;                 /* the product is n x n x n */
    int warmup, iters;     /* untimed runs first, then timed ones */
    double ms_per_product; /* mean of the timed runs (CUDA events) */
    double flops;          /* 2 n^3 / that time, per second */
};

/* Runs bf16 x bf16 -> bf16 products (fp32 accumulation, cuda_gemm.h) of
 * uniform random inputs in [-1, 1] on the open context: `warmup` untimed,
 * then `iters` timed back to back on the stream. n from 256 to 32768 and a
 * multiple of 8; needs 6 n^2 bytes of device memory, freed before it
 * returns. 0, or -1 with a reason in cuda_ctx_error(). */
int cuda_peak_bf16(int n, int warmup, int iters, struct cuda_peak *out /* OUT */);

#endif
