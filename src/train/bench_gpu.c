/* bench_gpu.c - `alallo bench train --device cuda [--size N]`: the GPU's
 * dense bf16 peak, measured by an N x N x N cuBLASLt product (default 8192,
 * 3 warm-ups, then 10 timed back to back: train/cuda/cuda_peak.h), with the
 * GPU's name and memory, as one JSON object like the CPU bench's:
 *
 *   {"device":"cuda","gpu":"NVIDIA H200","gpu_mem_bytes":...,
 *    "compute_capability":"9.0","sm_count":132,"peak_bf16_flops":7.9e14,
 *    "peak_method":"...","peak_ms_per_product":...,"gpu_mem_peak_bytes":...}
 *
 * The MFU of the GPU trainer is measured against this figure (the model's
 * timing joins here once the GPU trainer is wired). A CPU-only alallo
 * refuses with a clear line (exit 2); no visible GPU, or a GPU that fails,
 * exits 1 with CUDA's reason.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/cmd_args.h"
#include "train/train_cmds.h"
#ifdef ALALLO_HAVE_CUDA
#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_peak.h"
#endif

#define WARMUP 3
#define TIMED 10

int cmd_bench_gpu(int argc, char **argv)
{
    const char *device = cmd_arg_value(argc, argv, "--device");
    if (!device || strcmp(device, "cuda") != 0) {
        fputs("alallo bench train: --device must be cpu or cuda\n", stderr);
        return 2;
    }
    int n = 8192;
    if (cmd_int_opt("alallo bench train", argc, argv, "--size", 256, 32768, &n))
        return 2;
    if (n % 8) {
        fputs("alallo bench train: --size must be a multiple of 8\n", stderr);
        return 2;
    }
#ifndef ALALLO_HAVE_CUDA
    fputs("alallo bench train: --device cuda: this alallo was built without CUDA (it is built "
          "with the GPU backend where CMake finds nvcc: docs/trainer.md, \"GPU\")\n",
          stderr);
    return 2;
#else
    if (cuda_device_count() == 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        fprintf(stderr, "alallo bench train: --device cuda: no GPU is visible "
                        "(CUDA_VISIBLE_DEVICES=%s)\n",
                vis ? vis : "unset");
        return 1;
    }
    struct cuda_peak pk;
    if (cuda_ctx_open(0) < 0 || cuda_peak_bf16(n, WARMUP, TIMED, &pk) < 0) {
        fprintf(stderr, "alallo bench train: --device cuda: %s\n", cuda_ctx_error());
        cuda_ctx_close();
        return 1;
    }
    const struct cuda_device_info *d = cuda_ctx_device();
    char cc[16], method[160];
    snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
    snprintf(method, sizeof method,
             "cuBLASLt bf16 %dx%dx%d product, fp32 accumulation, random inputs: mean of %d "
             "after %d warm-ups",
             n, n, n, TIMED, WARMUP);
    json_t *j = json_pack("{ss ss sI ss si sf ss sf sI}", "device", "cuda", "gpu", d->name,
                          "gpu_mem_bytes", (json_int_t)d->total_bytes, "compute_capability", cc,
                          "sm_count", d->sm_count, "peak_bf16_flops", pk.flops, "peak_method",
                          method, "peak_ms_per_product", pk.ms_per_product,
                          "gpu_mem_peak_bytes", (json_int_t)cuda_mem_peak());
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6))
                : NULL;
    if (s)
        puts(s);
    free(s);
    json_decref(j);
    cuda_ctx_close();
    return s ? 0 : 1;
#endif
}
