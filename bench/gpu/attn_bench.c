/* attn_bench.c - times the GPU attention kernels (train/cuda/cuda_attn.cu)
 * forward and backward on the shapes, causal, on bf16 q, k and v
 * as the trainer keeps them (fp32 dO and output), and prints one
 * JSON line per shape: milliseconds per call and TFLOP/s counting the
 * useful causal products (forward 2*B*H*T*T*hd, backward 2.5 times that),
 * against the device's fp32 rate, not its bf16 tensor-core peak.
 *
 * Usage: attn_bench [iterations]   (bench/gpu/run.sh builds and runs it)
 * Exits 77 with a `skip:` line when no GPU is visible.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_ops.h"

struct shape {
    const char *name;
    int B, T, H, KV, hd;
};

static const struct shape shapes[] = {
    {"llama-1b-ctx2048", 4, 2048, 32, 8, 64},
    {"124m-ctx1024", 8, 1024, 12, 12, 64},
    {"hd128-ctx4096", 1, 4096, 32, 8, 128},
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *dev_random(size_t n, uint64_t seed);

/* n random values in [-1, 1) as bf16 (each float's top half) */
static uint16_t *dev_random_bf16(size_t n, uint64_t seed)
{
    float *f = dev_random(n, seed), *h = malloc(sizeof(float) * n);
    uint16_t *b = malloc(sizeof(uint16_t) * n), *d = cuda_alloc(sizeof(uint16_t) * n, 0);
    if (!h || !b || !d || cuda_download(h, f, sizeof(float) * n) < 0) {
        fprintf(stderr, "attn_bench: out of memory for %zu values: %s\n", n, cuda_ctx_error());
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &h[i], sizeof u);
        b[i] = (uint16_t)(u >> 16);
    }
    if (cuda_upload(d, b, sizeof(uint16_t) * n) < 0) {
        fprintf(stderr, "attn_bench: %s\n", cuda_ctx_error());
        exit(1);
    }
    cuda_free(f);
    free(h);
    free(b);
    return d;
}

static float *dev_random(size_t n, uint64_t seed)
{
    float *h = malloc(sizeof(float) * n);
    float *d = cuda_alloc(sizeof(float) * n, 0);
    if (!h || !d) {
        fprintf(stderr, "attn_bench: out of memory for %zu floats: %s\n", n, cuda_ctx_error());
        exit(1);
    }
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        h[i] = (float)((s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
    }
    if (cuda_upload(d, h, sizeof(float) * n) < 0) {
        fprintf(stderr, "attn_bench: %s\n", cuda_ctx_error());
        exit(1);
    }
    free(h);
    return d;
}

static void sync_or_die(void)
{
    if (cuda_ctx_sync() < 0) {
        fprintf(stderr, "attn_bench: %s\n", cuda_ctx_error());
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 10;
    if (iters < 1)
        iters = 1;
    if (cuda_device_count() == 0) {
        printf("skip: no GPU visible (cuda_device_count() is 0); attn_bench needs an NVIDIA "
               "GPU\n");
        return 77;
    }
    if (cuda_ctx_open(0) < 0) {
        fprintf(stderr, "attn_bench: %s\n", cuda_ctx_error());
        return 1;
    }
    const char *gpu = cuda_ctx_device()->name;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const struct shape *p = &shapes[s];
        size_t nq = (size_t)p->B * p->T * p->H * p->hd, nk = (size_t)p->B * p->T * p->KV * p->hd;
        size_t nl = (size_t)p->B * p->H * p->T;
        uint16_t *q = dev_random_bf16(nq, 1), *k = dev_random_bf16(nk, 2);
        uint16_t *v = dev_random_bf16(nk, 3), *doutb = dev_random_bf16(nq, 11);
        uint16_t *out = dev_random_bf16(nq, 5); /* attention's output is bf16 (change 1k) */
        float *dout = dev_random(nq, 4), *lse = dev_random(nl, 6);
        float *dq = dev_random(nq, 7), *dk = dev_random(nk, 8), *dv = dev_random(nk, 9);
        float *scratch = dev_random(nl, 10);
        float scale = 1.0f / 8.0f;
        /* one untimed call of each: the first launch loads the module */
        cuda_attention_forward(out, NULL, 0, lse, q, k, v, NULL, p->B, p->T, p->H, p->KV, p->hd,
                               scale, 0);
        cuda_attention_backward(dq, dk, dv, scratch, doutb, dout, out, lse, q, k, v, NULL, p->B,
                                p->T, p->H, p->KV, p->hd, scale, 0);
        sync_or_die();
        double t0 = now_s();
        for (int i = 0; i < iters; i++)
            cuda_attention_forward(out, NULL, 0, lse, q, k, v, NULL, p->B, p->T, p->H, p->KV, p->hd,
                                   scale, 0);
        sync_or_die();
        double t1 = now_s();
        for (int i = 0; i < iters; i++)
            cuda_attention_backward(dq, dk, dv, scratch, doutb, dout, out, lse, q, k, v, NULL,
                                    p->B, p->T, p->H, p->KV, p->hd, scale, 0);
        sync_or_die();
        double t2 = now_s();
        double fwd = (t1 - t0) / iters, bwd = (t2 - t1) / iters;
        double flop = 2.0 * p->B * p->H * (double)p->T * p->T * p->hd;
        printf("{\"bench\":\"attention\",\"gpu\":\"%s\",\"shape\":\"%s\",\"B\":%d,\"T\":%d,"
               "\"H\":%d,\"KV\":%d,\"hd\":%d,\"iters\":%d,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,"
               "\"fwd_tflops\":%.2f,\"bwd_tflops\":%.2f}\n",
               gpu, p->name, p->B, p->T, p->H, p->KV, p->hd, iters, fwd * 1e3, bwd * 1e3,
               flop / fwd * 1e-12, 2.5 * flop / bwd * 1e-12);
        fflush(stdout);
        void *all[] = {q, k, v, doutb, dout, out, lse, dq, dk, dv, scratch};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            cuda_free(all[i]);
    }
    cuda_ctx_close();
    return 0;
}
