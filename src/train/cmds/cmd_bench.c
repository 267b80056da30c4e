/* cmd_bench.c - `alallo bench train`: trainer throughput on a real model
 * folder or a randomly initialised model of a named shape, with random
 * tokens. Prints one JSON object a shape (--shape tiny,base measures each in
 * turn, in one process): tokens_per_s, mfu, peak_rss_bytes (the process's,
 * so a later shape's holds the earlier ones'), the
 * CPU path that ran (train/cpu_path.h; --path or ALALLO_CPU_PATH, else
 * the best), the measured fp32 peak of that path (an FMA loop, AVX2 or
 * AVX-512, run on the same threads in the same process), on the
 * avx512bf16 and onednn paths also the bf16 dot-product peak, on the
 * onednn path oneDNN's own rate on a large bf16 product (on a CPU with
 * AMX, the tiles' rate, which the dot-product loop cannot show), and the
 * time per phase.
 *
 *   alallo bench train [--model DIR | --shape tiny|base|small|124m|1b[,...]] [--vocab V]
 *                      [--precision 16-bit|4-bit] [--adapter lora|full]
 *                      [--batch B] [--seq T] [--steps N] [--threads N]
 *                      [--lora-r R] [--path avx2|avx512|avx512bf16|onednn] [--losses]
 *                      [--lr LR]
 *   alallo bench train --device cuda [--size N]   (bench_gpu.c: the GPU's peak,
 *                      and with --shape or --model the GPU trainer's figures)
 *
 *   alallo bench gemm [--shape NAME] [--batch B] [--seq T] [--threads N]
 *                     [--path avx2|avx512|avx512bf16|onednn] [--reps R] [--hot]
 *                     (the step's fp32 products alone: bench_gemm below)
 *
 * --losses adds "losses": the loss of every step (the same batch each
 * step, so it falls as the model learns it), to compare paths' curves.
 *
 * step_s and tokens_per_s are the timed steps' mean; step_s_median and
 * tokens_per_s_median their median step, the figure a worker records at
 * its start (core/bench_speed.h), which one disturbed step does not move.
 *
 * MFU = model FLOPs per token x tokens / wall time / measured peak, with
 * full fine-tuning at 6N + 6 L d T FLOPs per token and LoRA at
 * 4 N_base + 6 N_lora; the first step (warm-up) is left out.
 */
#include <immintrin.h>
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/cmd_help.h"
#include "core/rng.h"
#include "train/cmds/train_cmds.h"
#include "train/cmds/bench_model.h"
#include "train/kernels/bigmem.h"
#include "train/cmds/cmd_args.h"
#include "train/kernels/cpu_path.h"
#include "train/kernels/omp_policy.h"
#include "train/kernels/onednn.h"
#include "train/kernels/gemm.h"
#include "train/model/model.h"
#include "train/formats/modelio.h"
#include "train/model/ops.h"
#include "train/model/optim.h"
#include "train/run/train_events.h"

/* User plus system CPU seconds of this process so far. */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

/* The 1-minute load average, or -1. */
static double loadavg(void)
{
    double l = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1.0;
        fclose(f);
    }
    return l;
}

/* FMA throughput of one thread for `iters` rounds: 12 independent
 * accumulators, each its own variable so that they stay in registers, keep
 * both FMA pipes busy through their latency. */
#define FMA12(op)                                                                          \
    do {                                                                                   \
        a0 = op(a0, x, y), a1 = op(a1, x, y), a2 = op(a2, x, y), a3 = op(a3, x, y);        \
        a4 = op(a4, x, y), a5 = op(a5, x, y), a6 = op(a6, x, y), a7 = op(a7, x, y);        \
        a8 = op(a8, x, y), a9 = op(a9, x, y), a10 = op(a10, x, y), a11 = op(a11, x, y);    \
    } while (0)

__attribute__((target("avx2,fma"))) static float fma_loop_avx2(long iters)
{
    __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(0.0f), a1 = _mm256_set1_ps(1.0f), a2 = _mm256_set1_ps(2.0f);
    __m256 a3 = _mm256_set1_ps(3.0f), a4 = _mm256_set1_ps(4.0f), a5 = _mm256_set1_ps(5.0f);
    __m256 a6 = _mm256_set1_ps(6.0f), a7 = _mm256_set1_ps(7.0f), a8 = _mm256_set1_ps(8.0f);
    __m256 a9 = _mm256_set1_ps(9.0f), a10 = _mm256_set1_ps(10.0f), a11 = _mm256_set1_ps(11.0f);
    for (long it = 0; it < iters; it++)
        FMA12(_mm256_fmadd_ps);
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
}

__attribute__((target("avx512f"))) static float fma_loop_avx512(long iters)
{
    __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    __m512 a0 = _mm512_set1_ps(0.0f), a1 = _mm512_set1_ps(1.0f), a2 = _mm512_set1_ps(2.0f);
    __m512 a3 = _mm512_set1_ps(3.0f), a4 = _mm512_set1_ps(4.0f), a5 = _mm512_set1_ps(5.0f);
    __m512 a6 = _mm512_set1_ps(6.0f), a7 = _mm512_set1_ps(7.0f), a8 = _mm512_set1_ps(8.0f);
    __m512 a9 = _mm512_set1_ps(9.0f), a10 = _mm512_set1_ps(10.0f), a11 = _mm512_set1_ps(11.0f);
    for (long it = 0; it < iters; it++)
        FMA12(_mm512_fmadd_ps);
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return _mm512_reduce_add_ps(s);
}

/* bf16 dot products (vdpbf16ps: 32 multiply-adds each), as fma_loop. */
__attribute__((target("avx512f,avx512bf16"))) static float dp_loop_bf16(long iters)
{
    __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = x; /* pairs of 1.0 */
    __m512 a0 = _mm512_set1_ps(0.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
    __m512 a6 = a0, a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0;
    for (long it = 0; it < iters; it++)
        FMA12(_mm512_dpbf16_ps);
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return _mm512_reduce_add_ps(s);
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum peak_kind { PEAK_AVX2, PEAK_AVX512, PEAK_BF16 };

/* The fp32 FMA peak that bounds a path: AVX2 for avx2 (OpenBLAS's kernels
 * there are AVX2 ones whatever the CPU), AVX-512 for the others. */
static enum peak_kind path_peak(enum cpu_path p)
{
    return p == CPU_PATH_AVX2 ? PEAK_AVX2 : PEAK_AVX512;
}

/* Measured peak (FLOP/s) of `threads` cores for one kind of instruction;
 * *isa names it. Each thread's rate is taken over its own CPU time, not
 * wall time, so that other processes sharing the cores do not make the
 * peak look lower than the hardware's (which would inflate the MFU); the
 * rates of the threads are added up. The best of a few repetitions is
 * kept. */
static double measure_peak(int threads, enum peak_kind kind, const char **isa)
{
    static const char *const names[] = {"AVX2 FMA, per-thread CPU time",
                                        "AVX-512 FMA, per-thread CPU time",
                                        "AVX512-BF16 vdpbf16ps, per-thread CPU time"};
    int wide = kind != PEAK_AVX2;
    *isa = names[kind];
    long iters = 10000000 / (wide ? 2 : 1); /* ~25 ms per repetition */
    double flops = (double)iters * 12.0 * (wide ? 16 : 8) * 2.0 * (kind == PEAK_BF16 ? 2 : 1);
    double best = 0.0;
    volatile float sink = 0.0f;
    for (int rep = 0; rep < 4; rep++) {
        double total = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            double t0 = thread_cpu_s();
            float r = kind == PEAK_BF16  ? dp_loop_bf16(iters)
                      : kind == PEAK_AVX512 ? fma_loop_avx512(iters)
                                            : fma_loop_avx2(iters);
            double dt = thread_cpu_s() - t0;
            total += dt > 0.0 ? flops / dt : 0.0;
#pragma omp atomic
            sink += r;
        }
        if (total > best)
            best = total;
    }
    (void)sink;
    return best;
}

/* On the onednn path: oneDNN's bf16 matmul rate (FLOP/s) at a square
 * product of ONEDNN_PEAK_N, warm, wall time on the process's threads, the
 * best of five; the kernels it ran in *impl. 0 when it could not run. On
 * a CPU with AMX this is the reference the tiles reach, as the FMA and
 * dot-product loops are for the other paths. */
#define ONEDNN_PEAK_N 2048
static double measure_onednn_peak(const char **impl)
{
    const int n = ONEDNN_PEAK_N;
    size_t nn = (size_t)n * n;
    uint16_t *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b);
    float *c = malloc(nn * sizeof *c);
    double best = 0.0;
    *impl = "";
    for (size_t i = 0; a && b && c && i < nn; i++) {
        a[i] = (uint16_t)(0x3f80u + (i * 7u) % 64u); /* values in [1, 1.5) */
        b[i] = (uint16_t)(0xbf80u + (i * 13u) % 64u);
    }
    for (int rep = 0; a && b && c && rep < 6; rep++) {
        double t0 = clock_mono_s();
        if (onednn_gemm_bf16(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n))
            break;
        double dt = clock_mono_s() - t0;
        if (rep > 0 && dt > 0.0 && 2.0 * n * n * (double)n / dt > best)
            best = 2.0 * n * n * (double)n / dt;
    }
    if (best > 0.0)
        *impl = onednn_last_impl();
    free(a);
    free(b);
    free(c);
    return best;
}

/* The onednn path's own figures, into j: what ran (oneDNN's version and
 * instruction set), its matmul rate, and with flops_s (the run's model
 * FLOP/s; 0 for none) the share of that rate the run reached. */
static void onednn_figures(json_t *j, double flops_s)
{
    const char *impl;
    double peak = measure_onednn_peak(&impl);
    char method[160];
    snprintf(method, sizeof method,
             "oneDNN bf16 matmul %dx%dx%d, warm, wall time (its kernels: %s)", ONEDNN_PEAK_N,
             ONEDNN_PEAK_N, ONEDNN_PEAK_N, impl);
    json_object_set_new(j, "cpu_path_detail", json_string(cpu_path_detail()));
    json_object_set_new(j, "peak_onednn_flops", json_real(peak));
    json_object_set_new(j, "peak_onednn_method", json_string(method));
    if (flops_s > 0.0 && peak > 0.0)
        json_object_set_new(j, "share_of_onednn_peak", json_real(flops_s / peak));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of the n > 0 step times in t (sorted in place): one step
 * slowed by a preemption or a page-in does not move it. */
static double median_step_s(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void cpu_name(char *out, size_t cap)
{
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c += 2;
                c[strcspn(c, "\n")] = '\0';
                snprintf(out, cap, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

/* Prints j as one compact line, its keys in order. */
static void print_line(const json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (text)
        puts(text);
    free(text);
}

/* What one shape's run measured, besides its JSON line. */
struct shape_run {
    json_t *j;          /* its line, less the figures against the peaks */
    double flops_s;     /* model FLOP/s */
};

/* Trains bo's model (bo->shape one shape, or bo->model_dir) for its steps
 * and fills *out. 0, or 1 after a line to stderr. */
static int train_one(const struct bench_opts *bo, int argc, char **argv, enum cpu_path path,
                     struct shape_run *out)
{
    const char *shape = bo->shape, *precision = bo->precision, *adapter = bo->adapter;
    const char *model_dir = bo->model_dir;
    int B = bo->B, T = bo->T, steps = bo->steps, threads = bo->threads;
    float lr = bo->lr;
    char err[2048];
    struct bench_setup su;
    if (bench_setup_make(bo, &su, err, sizeof err)) {
        fprintf(stderr, "alallo bench train: %s\n", err);
        return 1;
    }
    struct model *m = su.m;
    struct model_acts *a = model_acts_create(m, B, T);
    double *step_s = calloc((size_t)steps, sizeof *step_s);
    if (!a || !step_s) {
        fprintf(stderr, "alallo bench train: out of memory\n");
        free(step_s);
        model_acts_free(a);
        bench_setup_free(&su);
        return 1;
    }
    const int32_t *ids = su.ids;
    const uint8_t *mask = su.mask;
    struct optim *opt = &su.opt;
    size_t nt = su.n_targets, got;
    double t_opt = 0.0, t_start = 0.0, loss = 0.0, c_start = 0.0, load0 = loadavg();
    struct model_timing warm = {0};
    json_t *losses = json_array();
    for (int s = 0; s < steps; s++) {
        double t_step = clock_mono_s();
        if (s == 1) {
            /* the first step warms caches and pages in memory: left out */
            model_acts_timing(a, &warm);
            t_opt = 0.0;
            t_start = clock_mono_s();
            c_start = cpu_s();
        }
        model_grad_begin(m);
        loss = model_forward_backward(m, a, ids, mask, B, T, 1.0f / (float)nt, 1, &got) /
               (double)nt;
        json_array_append_new(losses, json_real(loss));
        double t0 = clock_mono_s();
        double norm = optim_grad_norm(m->grad, m->n_train);
        optim_adamw_step(opt, m->train, m->grad, optim_clip_factor(norm, 1.0f), lr);
        t_opt += clock_mono_s() - t0;
        step_s[s] = clock_mono_s() - t_step;
    }
    double wall = clock_mono_s() - t_start;
    double median_s = median_step_s(step_s + 1, steps - 1);
    free(step_s);
    /* Share of `threads` cores this process got while timing: well under 1
     * means other work on the machine took the rest, and the figures are
     * low by about that much. */
    double cpu_share = (cpu_s() - c_start) / (wall * threads);
    struct model_timing tm;
    model_acts_timing(a, &tm);
    tm.forward -= warm.forward;
    tm.head -= warm.head;
    tm.backward -= warm.backward;
    uint64_t rss = tev_peak_rss();
    double n_model = (double)model_config_params(&m->cfg);
    double flops_tok = bench_flops_per_token(m, bo);
    double tokens = (double)B * T * (steps - 1);
    double tps = tokens / wall;
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    /* mfu, peak_fp32_flops and peak_method are set once the peaks are in */
    json_t *j = json_pack(
        "{ss ss ss si si si si sI sI sf sf sf sf sf ss sI s{sf sf sf sf} sf sf ss sf sf}",
        "shape", model_dir ? "model" : shape, "precision", precision, "adapter", adapter,
        "batch", B, "seq", T, "steps", steps, "threads", threads, "params",
        (json_int_t)n_model, "trainable_params", (json_int_t)m->n_train, "tokens_per_s", tps,
        "step_s", wall / (steps - 1), "mfu", 0.0, "flops_per_token", flops_tok,
        "peak_fp32_flops", 0.0, "peak_method", "", "peak_rss_bytes", (json_int_t)rss,
        "phase_s", "forward", tm.forward / (steps - 1), "head_and_loss", tm.head / (steps - 1),
        "backward", tm.backward / (steps - 1), "optimizer", t_opt / (steps - 1),
        "param_bytes", (double)model_param_bytes(m), "final_loss", loss, "cpu", cpu,
        "cpu_share", cpu_share, "loadavg_at_start", load0);
    if (j) {
        json_object_set_new(j, "step_s_median", json_real(median_s));
        json_object_set_new(j, "tokens_per_s_median", json_real((double)B * T / median_s));
        json_object_set_new(j, "cpu_path", json_string(cpu_path_name(path)));
        json_object_set_new(j, "cpu_flags", json_string(cpu_path_flags()));
        if (cmd_has_flag(argc, argv, "--losses"))
            json_object_set_new(j, "losses", json_incref(losses));
        /* throughput per active parameter: comparable across dense and experts */
        double active = (double)model_config_active_params(&m->cfg);
        json_object_set_new(j, "active_params", json_integer((json_int_t)active));
        json_object_set_new(j, "active_param_tokens_per_s", json_real(tps * active));
    }
    json_decref(losses);
    model_acts_free(a);
    bench_setup_free(&su);
    out->j = j;
    out->flops_s = tps * flops_tok;
    return 0;
}

#define BENCH_SHAPES_MAX 4 /* shapes one `bench train` measures */

static int bench_train(int argc, char **argv)
{
    const char *device = cmd_arg_value(argc, argv, "--device");
    if (device && strcmp(device, "cpu") != 0)
        return cmd_bench_gpu(argc, argv);
    struct bench_opts bo;
    if (bench_opts_parse(argc, argv, &bo))
        return 2;
    int threads = bo.threads;
    gemm_set_threads(threads);
    char err[2048];
    if (cpu_path_init(cmd_arg_value(argc, argv, "--path"), err, sizeof err)) {
        fprintf(stderr, "alallo bench train: %s\n", err);
        return 2;
    }
    enum cpu_path path = cpu_path_current();
    /* The shapes of a list ("tiny,base"), each measured in turn in this
     * process: the peaks and the start-up are paid once (a worker's
     * start-up bench, core/bench_speed.h). */
    char names[BENCH_SHAPES_MAX][32];
    int n = 0;
    for (const char *p = bo.model_dir ? NULL : bo.shape; p && *p; n++) {
        size_t len = strcspn(p, ",");
        if (n == BENCH_SHAPES_MAX) {
            fprintf(stderr, "alallo bench train: at most %d shapes at once\n", BENCH_SHAPES_MAX);
            return 2;
        }
        snprintf(names[n], sizeof names[n], "%.*s", (int)len, p); /* checked: under 32 */
        p += len + (p[len] == ',');
    }
    if (bo.model_dir)
        n = 1;
    const char *isa0, *isa_bf16 = "";
    /* measured before and after the steps; the better of the two counts */
    double peak0 = measure_peak(threads, path_peak(path), &isa0);
    int bf16 = gemm_has_bf16();
    double peak_bf16 = bf16 ? measure_peak(threads, PEAK_BF16, &isa_bf16) : 0.0;
    /* Every shape is measured even when one fails (its reason on stderr):
     * the others' lines are printed, and the exit status is the failure's
     * (a worker keeps the bench's own shape's point, worker_speed.h). */
    struct shape_run runs[BENCH_SHAPES_MAX];
    memset(runs, 0, sizeof runs);
    int rc = 0, done = n;
    for (int i = 0; i < n; i++) {
        struct bench_opts one = bo;
        if (!bo.model_dir)
            one.shape = names[i];
        int r = train_one(&one, argc, argv, path, &runs[i]);
        if (r != 0) {
            runs[i].j = NULL;
            rc = rc ? rc : r;
        }
    }
    const char *isa;
    double peak = measure_peak(threads, path_peak(path), &isa);
    if (peak0 > peak)
        peak = peak0;
    if (bf16) {
        double again = measure_peak(threads, PEAK_BF16, &isa_bf16);
        if (again > peak_bf16)
            peak_bf16 = again;
    }
    json_t *onednn = path == CPU_PATH_ONEDNN && done > 0 ? json_object() : NULL;
    if (onednn)
        onednn_figures(onednn, 0.0);
    for (int i = 0; i < done; i++) {
        json_t *j = runs[i].j;
        if (!j)
            continue;
        json_object_set_new(j, "mfu", json_real(runs[i].flops_s / peak));
        json_object_set_new(j, "peak_fp32_flops", json_real(peak));
        json_object_set_new(j, "peak_method", json_string(isa));
        if (bf16) {
            json_object_set_new(j, "peak_bf16_flops", json_real(peak_bf16));
            json_object_set_new(j, "peak_bf16_method", json_string(isa_bf16));
            json_object_set_new(j, "mfu_of_bf16_peak", json_real(runs[i].flops_s / peak_bf16));
        }
        if (onednn) {
            json_object_update(j, onednn);
            double top = json_number_value(json_object_get(onednn, "peak_onednn_flops"));
            if (top > 0.0)
                json_object_set_new(j, "share_of_onednn_peak", json_real(runs[i].flops_s / top));
        }
        print_line(j);
        json_decref(j);
    }
    json_decref(onednn);
    return rc;
}

/* One matrix product of a training step, as linear.c calls it. */
struct bench_product {
    const char *name;
    int ta, tb, M, N, K;
    int per_step; /* how many a step runs (layers x linears of this size) */
};

/* Seconds for one call of p on fresh buffers, the best of `reps`, each
 * after writing `flush` bytes so that the operands come from memory as a
 * step's weights do (none when flush is 0); with bf16, as gemm_bf16 with
 * an fp32 B (full fine-tuning's products on the avx512bf16 path). */
static double time_product(const struct bench_product *p, int bf16, int reps, char *flush,
                           size_t flush_n)
{
    size_t na = (size_t)p->M * p->K, nb = (size_t)p->K * p->N, nc = (size_t)p->M * p->N;
    float *A = bigmem_calloc(na, sizeof(float)), *B = bigmem_calloc(nb, sizeof(float));
    float *C = bigmem_calloc(nc, sizeof(float));
    double best = -1.0;
    if (A && B && C) {
        for (size_t i = 0; i < na; i++)
            A[i] = (float)(i % 7) * 0.1f;
        for (size_t i = 0; i < nb; i++)
            B[i] = (float)(i % 5) * 0.1f;
        memset(C, 0, nc * sizeof(float));
        int lda = p->ta ? p->M : p->K, ldb = p->tb ? p->K : p->N;
        for (int r = -2; r < reps; r++) { /* two untimed calls first: warm threads */
            /* on every thread, as a step's work before a product keeps them
             * all busy (an idle virtual CPU takes milliseconds to come back) */
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < flush_n; i += 64)
                flush[i]++;
            double t0 = clock_mono_s();
            if (bf16)
                gemm_bf16(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, NULL, B, ldb, 0.0f, C,
                          p->N);
            else
                gemm(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, 0.0f, C, p->N);
            double dt = clock_mono_s() - t0;
            if (r >= 0 && (best < 0.0 || dt < best))
                best = dt;
        }
    }
    free(A), free(B), free(C);
    return best;
}

/* `alallo bench gemm`: the products of a full fine-tuning step at a named
 * shape (forward, input gradient and weight gradient of each linear, and
 * the head), each timed as the trainer runs it on the CPU path (fp32
 * through gemm(), or bf16 inputs through gemm_bf16() on avx512bf16), with
 * the caches flushed before each call unless --hot; efficiency against
 * the peak of those products measured in the same run (the path's FMA
 * peak, or the vdpbf16ps peak), and the step's products weighted by how
 * often a step runs them. */
static int bench_gemm(int argc, char **argv)
{
    static const char *const who = "alallo bench gemm";
    const char *shape = cmd_arg_value(argc, argv, "--shape");
    int threads = omp_get_num_procs(), B = 4, T = 64, reps = 8;
    int hot = cmd_has_flag(argc, argv, "--hot");
    if (cmd_int_opt(who, argc, argv, "--threads", 1, 1024, &threads) ||
        cmd_int_opt(who, argc, argv, "--batch", 1, 4096, &B) ||
        cmd_int_opt(who, argc, argv, "--seq", 1, 65536, &T) ||
        cmd_int_opt(who, argc, argv, "--reps", 1, 1000, &reps))
        return 2;
    struct model_config c;
    char err[256];
    shape = shape ? shape : "124m";
    if (model_config_shape(shape, bench_shape_vocab(shape), &c)) {
        fprintf(stderr, "%s: unknown shape '%s' (" BENCH_SHAPES ")\n", who, shape);
        return 2;
    }
    gemm_set_threads(threads);
    if (cpu_path_init(cmd_arg_value(argc, argv, "--path"), err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", who, err);
        return 2;
    }
    enum cpu_path path = cpu_path_current();
    int n = B * T, h = c.hidden, q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
    int in[] = {h, h, h, q, h, c.intermediate, h};
    int out[] = {q, kv, kv, h, c.intermediate, h, c.vocab};
    int count[] = {1, 1, 1, 1, 2, 1, 1};
    const char *lin[] = {"q", "k", "v", "o", "gate_up", "down", "head"};
    struct bench_product ps[3 * 7];
    int np = 0;
    for (int i = 0; i < 7; i++) {
        int per = i == 6 ? 1 : count[i] * c.n_layers;
        ps[np++] = (struct bench_product){lin[i], 0, 1, n, out[i], in[i], per}; /* y = x w^T */
        ps[np++] = (struct bench_product){lin[i], 0, 0, n, in[i], out[i], per}; /* dx = dy w */
        ps[np++] = (struct bench_product){lin[i], 1, 0, out[i], in[i], n, per}; /* dw = dy^T x */
    }
    size_t flush_n = hot ? 0 : (size_t)64 << 20;
    char *flush = flush_n ? calloc(1, flush_n) : NULL;
    if (flush_n && !flush) {
        fprintf(stderr, "%s: out of memory\n", who);
        return 1;
    }
    int bf16 = gemm_has_bf16();
    enum peak_kind kind = bf16 ? PEAK_BF16 : path_peak(path);
    const char *isa, *isa_fp32;
    double peak_fp32 = measure_peak(threads, path_peak(path), &isa_fp32);
    double peak = bf16 ? measure_peak(threads, kind, &isa) : peak_fp32;
    if (!bf16)
        isa = isa_fp32;
    static const char *const kinds[] = {"forward", "input_grad", "weight_grad"};
    json_t *j = json_object(), *rows = json_array();
    double trunk_s = 0.0, trunk_f = 0.0, head_s = 0.0, head_f = 0.0;
    for (int i = 0; i < np; i++) {
        const struct bench_product *p = &ps[i];
        double s = time_product(p, bf16, reps, flush, flush_n);
        if (s <= 0.0) {
            fprintf(stderr, "%s: out of memory\n", who);
            free(flush);
            json_decref(j);
            json_decref(rows);
            return 1;
        }
        double f = 2.0 * p->M * p->N * p->K;
        int is_head = strcmp(p->name, "head") == 0;
        *(is_head ? &head_s : &trunk_s) += s * p->per_step;
        *(is_head ? &head_f : &trunk_f) += f * p->per_step;
        json_t *r = json_object();
        json_object_set_new(r, "linear", json_string(p->name));
        json_object_set_new(r, "product", json_string(kinds[i % 3]));
        json_object_set_new(r, "ta", json_integer(p->ta));
        json_object_set_new(r, "tb", json_integer(p->tb));
        json_object_set_new(r, "M", json_integer(p->M));
        json_object_set_new(r, "N", json_integer(p->N));
        json_object_set_new(r, "K", json_integer(p->K));
        json_object_set_new(r, "seconds", json_real(s));
        json_object_set_new(r, "efficiency", json_real(f / s / peak));
        json_array_append_new(rows, r);
    }
    double peak1 = measure_peak(threads, kind, &isa);
    if (peak1 > peak) /* the better of the two counts, as in bench train */
        for (size_t i = 0; i < json_array_size(rows); i++) {
            json_t *r = json_array_get(rows, i);
            double e = json_real_value(json_object_get(r, "efficiency"));
            json_object_set_new(r, "efficiency", json_real(e * peak / peak1));
        }
    peak = peak > peak1 ? peak : peak1;
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    json_object_set_new(j, "shape", json_string(shape));
    json_object_set_new(j, "tokens", json_integer(n));
    json_object_set_new(j, "threads", json_integer(threads));
    json_object_set_new(j, "caches", json_string(hot ? "hot" : "flushed before each call"));
    json_object_set_new(j, "cpu_path", json_string(cpu_path_name(path)));
    json_object_set_new(j, "products_precision",
                        json_string(bf16 ? "bf16 inputs, fp32 accumulation" : "fp32"));
    json_object_set_new(j, "peak_flops", json_real(peak));
    json_object_set_new(j, "peak_method", json_string(isa));
    json_object_set_new(j, "peak_fp32_flops", json_real(bf16 ? peak_fp32 : peak));
    json_object_set_new(j, "trunk_efficiency", json_real(trunk_f / trunk_s / peak));
    json_object_set_new(j, "head_efficiency", json_real(head_f / head_s / peak));
    json_object_set_new(j, "step_products_s", json_real(trunk_s + head_s));
    json_object_set_new(j, "cpu", json_string(cpu));
    json_object_set_new(j, "cpu_flags", json_string(cpu_path_flags()));
    json_object_set_new(j, "loadavg_at_start", json_real(loadavg()));
    if (path == CPU_PATH_ONEDNN)
        onednn_figures(j, 0.0);
    json_object_set_new(j, "products", rows);
    print_line(j);
    free(flush);
    json_decref(j);
    return 0;
}

static void usage(FILE *f)
{
    fputs("usage: alallo bench train [--model DIR|--shape NAME[,NAME...]]"
          " [--precision 16-bit|4-bit] [--adapter lora|full] [--batch B] [--seq T]"
          " [--steps N] [--threads N]"
          " [--path avx2|avx512|avx512bf16|onednn]\n"
          "       alallo bench train --device cuda [--size N] [--shape NAME|--model DIR"
          " --precision ... --adapter ... --batch B --seq T --steps N]\n"
          "       alallo bench gemm [--shape NAME] [--batch B] [--seq T] [--threads N]"
          " [--path avx2|avx512|avx512bf16|onednn] [--reps R] [--hot]\n",
          f);
}

int cmd_bench(int argc, char **argv)
{
    if (cmd_help_asked(argc, argv)) {
        usage(stdout);
        return 0;
    }
    omp_policy_passive(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "train") == 0)
        return bench_train(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "gemm") == 0)
        return bench_gemm(argc - 1, argv + 1);
    usage(stderr);
    return 2;
}
