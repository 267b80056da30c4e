/* bench_gpu.c - `alallo bench train --device cuda [--size N]`: the GPU's
 * dense bf16 peak, measured by an N x N x N cuBLASLt product (default 8192,
 * 3 warm-ups, then 10 timed back to back: train/cuda/cuda_peak.h), with the
 * GPU's name and memory, as one JSON object like the CPU bench's:
 *
 *   {"device":"cuda","gpu":"NVIDIA H200","gpu_mem_bytes":...,
 *    "compute_capability":"9.0","sm_count":132,"peak_bf16_flops":7.9e14,
 *    "peak_method":"...","peak_ms_per_product":...,"gpu_mem_peak_bytes":...}
 *
 * With --shape or --model it also times the GPU trainer (cuda_train.h: the
 * pass, the gradient norm and AdamW, as `alallo train` runs them) on that
 * model with the CPU bench's options (bench_model.h: --precision, --adapter,
 * --batch, --seq, --steps, --lora-r, --lr), after the peak and in the same
 * process, and adds:
 *
 *   "shape","precision","adapter","batch","seq","steps","params",
 *   "trainable_params","tokens_per_s","step_s","flops_per_token","mfu",
 *   "attention" ("bf16" or "fp32": ALALLO_CUDA_ATTENTION),
 *   "lora" ("folded" or "each": ALALLO_CUDA_LORA and the base; LoRA only),
 *   "recompute" (true when the backward recomputes each layer:
 *   ALALLO_CUDA_RECOMPUTE, by default 4-bit LoRA; cuda_train.h),
 *   "graphs" ({"eager","captured","replayed","walk_s"}: the layers'
 *   parts run as they are, captured as CUDA graphs, replayed, and the
 *   host's seconds walking them; ALALLO_CUDA_GRAPHS, cuda_graph.h),
 *   "graphs_off" (why graphs stopped, when they did),
 *   "gpu_mem_train_peak_bytes","final_loss"
 *
 * MFU = model FLOPs per token (bench_flops_per_token) x tokens/s / the
 * bf16 peak just measured. The first WARMUP_STEPS steps are left out; the
 * clock stops after the last step's AdamW has finished on the GPU.
 *
 * A CPU-only alallo refuses with a clear line (exit 2); no visible GPU, or
 * a GPU that fails, exits 1 with CUDA's reason; a model the GPU trainer
 * does not run (cuda_train_open's refusals) exits 2 with its sentence.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "train/cmds/bench_model.h"
#include "train/cmds/cmd_args.h"
#include "train/cmds/train_cmds.h"
#ifdef ALALLO_HAVE_CUDA
#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_peak.h"
#include "train/cuda/cuda_train.h"
#endif

#define WARMUP 3
#define TIMED 10
#define WARMUP_STEPS 2 /* model steps left out of the timing */

#ifdef ALALLO_HAVE_CUDA
/* Times the GPU trainer on the model `o` names and adds the figures to j.
 * 0, or the exit status after printing one line. */
static int time_model(const struct bench_opts *o, double peak, json_t *j)
{
    char err[2048];
    struct bench_setup su;
    if (bench_setup_make(o, &su, err, sizeof err)) {
        fprintf(stderr, "alallo bench train: %s\n", err);
        return 1;
    }
    int user = 0;
    struct cuda_train *t = cuda_train_open(0, su.m, &su.opt, o->B, o->T, err, sizeof err,
                                           &user);
    if (!t) {
        fprintf(stderr, "alallo bench train: --device cuda: %s\n", err);
        bench_setup_free(&su);
        return user ? 2 : 1;
    }
    float dscale = 1.0f / (float)su.n_targets;
    double loss = 0.0, t0 = 0.0;
    int rc = 0;
    for (int s = 0; s < o->steps + WARMUP_STEPS && rc == 0; s++) {
        if (s == WARMUP_STEPS) {
            rc = cuda_ctx_sync();
            t0 = clock_mono_s();
        }
        size_t got = 0;
        double norm = 0.0;
        if (rc == 0)
            rc = cuda_train_pass(t, su.ids, su.mask, NULL, o->B, o->T, dscale, 1, 0.0f, 0, &loss,
                                 &got, NULL);
        if (rc == 0)
            rc = cuda_train_grad_norm(t, &norm);
        if (rc == 0)
            rc = cuda_train_adamw(t, optim_clip_factor(norm, 1.0f), o->lr);
    }
    if (rc == 0)
        rc = cuda_ctx_sync();
    double wall = clock_mono_s() - t0;
    if (rc != 0) {
        fprintf(stderr, "alallo bench train: --device cuda: %s\n", cuda_ctx_error());
        cuda_train_close(t);
        bench_setup_free(&su);
        return 1;
    }
    double tps = (double)o->B * o->T * o->steps / wall;
    double flops_tok = bench_flops_per_token(su.m, o);
    json_object_set_new(j, "shape", json_string(o->model_dir ? "model" : o->shape));
    json_object_set_new(j, "precision", json_string(o->precision));
    json_object_set_new(j, "adapter", json_string(o->adapter));
    json_object_set_new(j, "batch", json_integer(o->B));
    json_object_set_new(j, "seq", json_integer(o->T));
    json_object_set_new(j, "steps", json_integer(o->steps));
    json_object_set_new(j, "params", json_integer((json_int_t)model_config_params(&su.m->cfg)));
    json_object_set_new(j, "trainable_params", json_integer((json_int_t)su.m->n_train));
    json_object_set_new(j, "tokens_per_s", json_real(tps));
    json_object_set_new(j, "step_s", json_real(wall / o->steps));
    json_object_set_new(j, "flops_per_token", json_real(flops_tok));
    json_object_set_new(j, "mfu", json_real(tps * flops_tok / peak));
    json_object_set_new(j, "attention", json_string(cuda_train_attention(t)));
    if (cuda_train_lora(t))
        json_object_set_new(j, "lora", json_string(cuda_train_lora(t)));
    json_object_set_new(j, "recompute", json_boolean(cuda_train_recompute(t)));
    struct cuda_graph_stats gs;
    cuda_train_graph_stats(t, &gs);
    json_object_set_new(j, "graphs",
                        json_pack("{s:I,s:I,s:I,s:f}", "eager", (json_int_t)gs.eager, "captured",
                                  (json_int_t)gs.captures, "replayed", (json_int_t)gs.replays,
                                  "walk_s", gs.walk_s));
    if (gs.off[0])
        json_object_set_new(j, "graphs_off", json_string(gs.off));
    json_object_set_new(j, "gpu_mem_train_peak_bytes",
                        json_integer((json_int_t)cuda_train_peak_bytes(t)));
    json_object_set_new(j, "final_loss", json_real(loss / (double)su.n_targets));
    cuda_train_close(t);
    bench_setup_free(&su);
    return 0;
}
#endif

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
    int model = cmd_arg_value(argc, argv, "--shape") || cmd_arg_value(argc, argv, "--model");
    struct bench_opts bo;
    if (model && bench_opts_parse(argc, argv, &bo))
        return 2;
    if (model && bo.shape && strchr(bo.shape, ',')) {
        fputs("alallo bench train: --device cuda measures one shape at a time\n", stderr);
        return 2;
    }
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
    if (j && model) {
        int rc = time_model(&bo, pk.flops, j);
        if (rc) {
            json_decref(j);
            cuda_ctx_close();
            return rc;
        }
    }
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
