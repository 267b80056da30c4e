/* ops_bench.c - times the kernels of train/cuda/cuda_ops.cu at the shapes
 * of a Llama-3.2-1B-class model (hidden 2048, MLP 8192, vocabulary 128256)
 * on 8192 tokens (batch 4 x 2048), and prints one JSON line per kernel:
 * milliseconds per call (CUDA events around `iters` calls after one
 * warm-up) and the bytes a call must move over that time, against the
 * H200's ~4.8 TB/s. Built and run by bench/gpu/ops_run.sh; without a GPU it
 * prints a `skip:` line and exits 77.
 *
 * The inputs are zeros (cuda_alloc zeroes them), which none of these
 * kernels is faster on, except the token ids: the embedding's gradient
 * takes distinct ids spread over the vocabulary, as a batch of text has.
 * The products that read NF4 (cuda_nf4_gemm: gate's forward, down's input
 * gradient) print their TFLOP/s too (zeros may run the tensor cores a
 * little cooler than text's activations). LoRA's one pass for dB and
 * dy B (cuda_lora_dbt, change 2e) runs at gate's shape (dy 8192 x 8192,
 * rank 16) beside the two products it replaces (cuBLASLt), whose bytes
 * count dy twice. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_gemm.h"
#include "train/cuda/cuda_ops.h"
#include "train/kernels/nf4.h"

#define C 2048
#define I 8192
#define V 128256
#define N 8192
#define XENT_ROWS 2048
#define PARAMS ((size_t)256 << 20) /* AdamW and the norm: 256M parameters */

static void *dev(size_t bytes)
{
    void *p = cuda_alloc(bytes, 1);
    if (!p) {
        fprintf(stderr, "ops_bench: %s\n", cuda_ctx_error());
        exit(1);
    }
    return p;
}

/* The kernel under test, as one call on the context's stream. */
struct op {
    const char *name, *shape;
    double bytes; /* moved per call, at the least */
    void (*call)(void);
    double flops; /* a product's, else 0 */
};

static float *a, *b, *c2, *d, *e, *f, *rstd, *w, *dw, *logits, *loss, *table;
static uint16_t *hb, *hb2, *hb3, *logits_b;
static int32_t *ids, *tgt, *hits;
static double *sumsq;
static struct cuda_nf4 q;

static void run_rmsnorm_fwd(void) { cuda_rmsnorm_forward(b, NULL, 0, rstd, a, w, N, C, 1e-5f); }
static void run_rmsnorm_bwd(void) { cuda_rmsnorm_backward(c2, NULL, 0, dw, b, a, w, rstd, N, C); }
static void run_swiglu_fwd(void) { cuda_swiglu_forward(c2, NULL, 0, 0, a, b, (size_t)N * I); }
static void run_swiglu_bwd(void)
{
    cuda_swiglu_backward(d, e, NULL, NULL, 0, 0, c2, a, b, (size_t)N * I, 1);
}
/* The same kernels writing the bf16 copy a product reads next (cuda_ops.h,
 * "bf16 copies"): against the plain kernel plus to_bf16's pass. */
static void run_rmsnorm_fwd_b(void) { cuda_rmsnorm_forward(b, hb, C, rstd, a, w, N, C, 1e-5f); }
static void run_swiglu_fwd_b(void) { cuda_swiglu_forward(c2, hb2, I, I, a, b, (size_t)N * I); }
static void run_swiglu_bwd_b(void)
{
    cuda_swiglu_backward(d, e, hb2, hb3, I, I, c2, a, b, (size_t)N * I, 1);
}
/* As the trainer runs them: the fp32 h not written (1b), dg and du
 * written rather than added into zeros (1c). */
static void run_swiglu_fwd_bo(void) { cuda_swiglu_forward(NULL, hb2, I, I, a, b, (size_t)N * I); }
static void run_swiglu_bwd_w(void)
{
    cuda_swiglu_backward(d, e, hb2, hb3, I, I, c2, a, b, (size_t)N * I, 0);
}
static void run_xent(void) { cuda_xent_rows(logits, tgt, XENT_ROWS, V, 1, 1.0f, NULL, loss, hits); }
/* On bf16 logits, the gradient written over them as bf16 (change 1h). */
static void run_xent_b(void)
{
    cuda_xent_rows_bf16(logits_b, tgt, XENT_ROWS, V, 1, 1.0f, NULL, loss, hits);
}
static void run_to_bf16(void) { cuda_to_bf16(hb, a, (size_t)N * C); }
static void run_nf4(void) { cuda_nf4_to_bf16(hb, &q, 0, (size_t)I * C); }
/* y (N,I) = x (N,C) W^T, W (I,C): a gate or up projection forward */
static void run_nf4_gemm_fwd(void)
{
    cuda_nf4_gemm(1, N, I, C, 1.0f, (const uint16_t *)a, C, &q, C, 0.0f, c2, I);
}
/* dx (N,C) += dy (N,I) W, W (I,C): down's input gradient */
static void run_nf4_gemm_dx(void)
{
    cuda_nf4_gemm(0, N, C, I, 1.0f, (const uint16_t *)a, I, &q, C, 1.0f, b, C);
}
static void run_dropout(void) { cuda_dropout(b, a, (size_t)N * C, 0.1f, 42, 0); }
static void run_embed_fwd(void) { cuda_embed_forward(b, ids, N, table, NULL, C, 1.0f); }
static void run_embed_bwd(void) { cuda_embed_backward(table, ids, N, a, C, 1.0f); }
static void run_sumsq(void) { cuda_sumsq(sumsq, d, PARAMS); }
#define LR_R 16
static void run_lora_dbt(void)
{
    cuda_lora_dbt(N, I, LR_R, 2.0f, hb2, I, hb, hb3, LR_R, a, logits_b, LR_R, NULL, 0, d);
}
static void run_lora_two(void)
{
    cuda_gemm_bf16_out(0, 0, N, LR_R, I, 1.0f, hb2, I, hb, LR_R, 0.0f, logits_b, LR_R);
    cuda_gemm_bf16(1, 0, I, LR_R, N, 2.0f, hb2, I, hb3, LR_R, 1.0f, a, LR_R);
}
static void run_adamw(void)
{
    cuda_adamw(a, d, e, f, PARAMS, PARAMS / 2, 1.0f, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 3);
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 10;
    if (iters < 1)
        iters = 1;
    if (cuda_device_count() == 0) {
        printf("skip: no GPU visible to ops_bench (cuda_device_count() is 0)\n");
        return 77;
    }
    if (cuda_ctx_open(0) != 0) {
        fprintf(stderr, "ops_bench: %s\n", cuda_ctx_error());
        return 1;
    }
    size_t big = PARAMS > (size_t)N * I ? PARAMS : (size_t)N * I;
    a = dev(big * 4), b = dev(big * 4), c2 = dev((size_t)N * I * 4);
    d = dev(big * 4), e = dev(big * 4), f = dev(PARAMS * 4);
    rstd = dev(N * 4), w = dev(C * 4), dw = dev(C * 4);
    logits = dev((size_t)XENT_ROWS * V * 4), loss = dev(XENT_ROWS * 4);
    logits_b = dev((size_t)XENT_ROWS * V * 2);
    tgt = dev(XENT_ROWS * 4), hits = dev(XENT_ROWS * 4);
    hb2 = dev((size_t)N * I * 2), hb3 = dev((size_t)N * I * 2);
    hb = dev((size_t)I * C * 2), ids = dev(N * 4), table = dev((size_t)V * C * 4);
    sumsq = dev(sizeof *sumsq);
    size_t qn = (size_t)I * C;
    q.n = qn;
    q.n_blocks = (qn + NF4_BLOCK - 1) / NF4_BLOCK;
    q.n_groups = (q.n_blocks + NF4_SCALE_GROUP - 1) / NF4_SCALE_GROUP;
    q.codes = dev(qn / 2), q.scale_codes = dev(q.n_blocks);
    q.group_mean = dev(q.n_groups * 4), q.group_absmax = dev(q.n_groups * 4);

    int32_t *hid = malloc(N * sizeof *hid);
    if (!hid)
        return 1;
    for (int i = 0; i < N; i++)
        hid[i] = (int32_t)(((int64_t)i * 7919) % V);
    if (cuda_upload(ids, hid, N * sizeof *hid) != 0) {
        fprintf(stderr, "ops_bench: %s\n", cuda_ctx_error());
        return 1;
    }
    free(hid);

    double nc = (double)N * C, ni = (double)N * I, p = (double)PARAMS;
    const struct op ops[] = {
        {"rmsnorm_forward", "8192x2048", 2 * nc * 4, run_rmsnorm_fwd, 0.0},
        {"rmsnorm_backward+dw", "8192x2048", 6 * nc * 4, run_rmsnorm_bwd, 0.0},
        {"swiglu_forward", "8192x8192", 3 * ni * 4, run_swiglu_fwd, 0.0},
        {"swiglu_backward", "8192x8192", 7 * ni * 4, run_swiglu_bwd, 0.0},
        {"rmsnorm_forward+bf16", "8192x2048", 2 * nc * 4 + nc * 2, run_rmsnorm_fwd_b, 0.0},
        {"swiglu_forward+bf16", "8192x8192", 3 * ni * 4 + ni * 2, run_swiglu_fwd_b, 0.0},
        {"swiglu_backward+bf16", "8192x8192", 7 * ni * 4 + 2 * ni * 2, run_swiglu_bwd_b, 0.0},
        {"swiglu_forward_bf16_alone", "8192x8192", 2 * ni * 4 + ni * 2, run_swiglu_fwd_bo, 0.0},
        {"swiglu_backward+bf16_written", "8192x8192", 5 * ni * 4 + 2 * ni * 2, run_swiglu_bwd_w,
         0.0},
        {"xent_rows+grad", "2048x128256", 3.0 * XENT_ROWS * V * 4, run_xent, 0.0},
        {"xent_rows_bf16+grad", "2048x128256", 3.0 * XENT_ROWS * V * 2, run_xent_b, 0.0},
        {"to_bf16", "8192x2048", nc * 6, run_to_bf16, 0.0},
        {"nf4_to_bf16", "8192x2048", (double)I * C * 2.5, run_nf4, 0.0},
        {"nf4_gemm_forward", "8192x8192x2048", (double)I * C * 0.5625 + nc * 2 + ni * 4,
         run_nf4_gemm_fwd, 2.0 * N * I * C},
        {"nf4_gemm_dx", "8192x2048x8192", (double)I * C * 0.5625 + ni * 2 + nc * 8,
         run_nf4_gemm_dx, 2.0 * N * I * C},
        {"dropout", "8192x2048", nc * 8, run_dropout, 0.0},
        {"embed_forward", "8192x2048", nc * 8, run_embed_fwd, 0.0},
        {"embed_backward", "8192x2048", nc * 12, run_embed_bwd, 0.0},
        {"sumsq", "256M", p * 4, run_sumsq, 0.0},
        {"lora_dbt", "8192x8192r16", ni * 2 + (double)N * LR_R * 4 + (double)I * LR_R * 8,
         run_lora_dbt, 4.0 * ni * LR_R},
        {"lora_dy_b_and_db_two_products", "8192x8192r16", 2 * ni * 2 + (double)N * LR_R * 4,
         run_lora_two, 4.0 * ni * LR_R},
        {"adamw", "256M", p * 28, run_adamw, 0.0},
    };
    cudaStream_t s = (cudaStream_t)cuda_ctx_stream();
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    printf("{\"gpu\": \"%s\", \"iters\": %d}\n", cuda_ctx_device()->name, iters);
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        ops[k].call(); /* warm-up */
        cudaEventRecord(t0, s);
        for (int i = 0; i < iters; i++)
            ops[k].call();
        cudaEventRecord(t1, s);
        if (cuda_ctx_sync() != 0) {
            fprintf(stderr, "ops_bench: %s: %s\n", ops[k].name, cuda_ctx_error());
            return 1;
        }
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, t0, t1);
        double per = (double)ms / iters;
        printf("{\"op\": \"%s\", \"shape\": \"%s\", \"ms\": %.4f, \"GB_per_s\": %.0f",
               ops[k].name, ops[k].shape, per, ops[k].bytes / (per * 1e-3) / 1e9);
        if (ops[k].flops > 0.0)
            printf(", \"TFLOP_per_s\": %.1f", ops[k].flops / (per * 1e-3) / 1e12);
        printf("}\n");
    }
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    cuda_ctx_close();
    return 0;
}
