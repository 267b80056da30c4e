/* cuda_peak_emu.cc - train/cuda/cuda_peak.h for the emulated build
 * (ALALLO_CUDA_EMU): the product runs through the emulator's cuda_gemm
 * stand-in on the CPU, at most 256 x 256 x 256 whatever n is asked (a
 * scalar loop: 8192^3 would take hours), and the figure is that product's
 * rate. It exists so that `alallo bench train --device cuda` runs its
 * path end to end in a test build; it says nothing of a GPU.
 */
#include <chrono>
#include <cstdint>
#include <vector>

extern "C" {
#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_gemm.h"
#include "train/cuda/cuda_peak.h"
}

extern "C" int cuda_peak_bf16(int n, int warmup, int iters, struct cuda_peak *out)
{
    if (n < 256 || n > 32768 || n % 8 != 0 || warmup < 0 || iters < 1)
        return cuda_ctx_fail("peak: n must be 256..32768 and a multiple of 8, iters >= 1");
    const int m = 256;
    std::vector<uint16_t> a((size_t)m * m, 0x3f80), b((size_t)m * m, 0x3f80), c((size_t)m * m);
    for (int i = 0; i < warmup; i++)
        cuda_gemm_bf16_out(0, 0, m, m, m, 1.0f, a.data(), m, b.data(), m, 0.0f, c.data(), m);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; i++)
        cuda_gemm_bf16_out(0, 0, m, m, m, 1.0f, a.data(), m, b.data(), m, 0.0f, c.data(), m);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out->n = m;
    out->warmup = warmup;
    out->iters = iters;
    out->ms_per_product = s * 1e3 / iters;
    out->flops = 2.0 * m * m * m * iters / (s > 0 ? s : 1e-9);
    return 0;
}
