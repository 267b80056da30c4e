/* bench/train/onednn_matmul.c - oneDNN's bf16 matmul (Debian's libdnnl
 * 2.6: AMX tiles where the CPU has them, else its AVX512-BF16 kernels) at
 * the products `alallo bench gemm` lists, for bench/train/onednn.sh to set
 * beside alallo's own bf16 products.
 *
 * usage: onednn_matmul THREADS TA,TB,M,N,K [...]
 * For each product: bf16 A and B (op(A) (M,K), op(B) (K,N), transposes
 * by strides), fp32 C, warm caches. Prints one JSON line per product: the
 * seconds of the matmul alone (`matmul_s`) and after rounding an fp32 A
 * to bf16, and B too for a weight's gradient (`with_rounding_s`: what the
 * trainer would pay with a bf16-stored weight), the implementation oneDNN
 * chose, and whether one thread and THREADS threads give the same bits
 * (`same_bits_1_vs_n`).
 *
 * build: cc -O2 -march=native -fopenmp onednn_matmul.c -ldnnl
 */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(x)                                                                   \
    do {                                                                           \
        dnnl_status_t s_ = (x);                                                    \
        if (s_ != dnnl_success) {                                                  \
            fprintf(stderr, "onednn_matmul: %s failed (%d)\n", #x, (int)s_);      \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

struct mm {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
    const char *impl;
};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Rounds n fp32 values to bf16, nearest even (finite inputs). */
static void round_bf16(const float *x, uint16_t *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        h[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

static void mm_make(struct mm *m, int ta, int tb, int M, int N, int K, uint16_t *A,
                    uint16_t *B, float *C)
{
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    dnnl_dims_t as = {ta ? 1 : K, ta ? M : 1}, bs = {tb ? 1 : N, tb ? K : 1}, cs = {N, 1};
    CHECK(dnnl_engine_create(&m->eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&m->st, m->eng, dnnl_stream_default_flags));
    CHECK(dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_bf16, as));
    CHECK(dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_bf16, bs));
    CHECK(dnnl_memory_desc_init_by_strides(&c, 2, cd, dnnl_f32, cs));
    dnnl_matmul_desc_t md;
    CHECK(dnnl_matmul_desc_init(&md, &a, &b, NULL, &c));
    CHECK(dnnl_primitive_desc_create(&m->pd, &md, NULL, m->eng, NULL));
    CHECK(dnnl_primitive_desc_query(m->pd, dnnl_query_impl_info_str, 0, &m->impl));
    CHECK(dnnl_primitive_create(&m->prim, m->pd));
    CHECK(dnnl_memory_create(&m->a, &a, m->eng, A));
    CHECK(dnnl_memory_create(&m->b, &b, m->eng, B));
    CHECK(dnnl_memory_create(&m->c, &c, m->eng, C));
}

static void mm_run(struct mm *m)
{
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, m->a}, {DNNL_ARG_WEIGHTS, m->b}, {DNNL_ARG_DST, m->c}};
    CHECK(dnnl_primitive_execute(m->prim, m->st, 3, args));
    CHECK(dnnl_stream_wait(m->st));
}

static void mm_free(struct mm *m)
{
    dnnl_memory_destroy(m->a);
    dnnl_memory_destroy(m->b);
    dnnl_memory_destroy(m->c);
    dnnl_primitive_destroy(m->prim);
    dnnl_primitive_desc_destroy(m->pd);
    dnnl_stream_destroy(m->st);
    dnnl_engine_destroy(m->eng);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: onednn_matmul THREADS TA,TB,M,N,K [...]\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    for (int i = 2; i < argc; i++) {
        int ta, tb, M, N, K;
        if (sscanf(argv[i], "%d,%d,%d,%d,%d", &ta, &tb, &M, &N, &K) != 5 || M < 1 || N < 1 ||
            K < 1) {
            fprintf(stderr, "onednn_matmul: bad product '%s'\n", argv[i]);
            return 2;
        }
        size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
        float *Af = malloc(na * sizeof(float)), *Bf = malloc(nb * sizeof(float));
        uint16_t *A = malloc(na * 2), *B = malloc(nb * 2);
        float *C = malloc(nc * sizeof(float)), *C1 = malloc(nc * sizeof(float));
        if (!Af || !Bf || !A || !B || !C || !C1)
            return 1;
        unsigned s = 12345u + (unsigned)i;
        for (size_t k = 0; k < na; k++)
            Af[k] = (float)((s = s * 1103515245u + 12345u) >> 8 & 0xffff) / 65536.0f - 0.5f;
        for (size_t k = 0; k < nb; k++)
            Bf[k] = (float)((s = s * 1103515245u + 12345u) >> 8 & 0xffff) / 65536.0f - 0.5f;
        round_bf16(Af, A, na);
        round_bf16(Bf, B, nb);
        int weight_grad = ta; /* the trainer's one product with op(A) = A^T */

        omp_set_num_threads(1);
        struct mm m1;
        mm_make(&m1, ta, tb, M, N, K, A, B, C1);
        mm_run(&m1);
        mm_free(&m1);

        omp_set_num_threads(threads);
        struct mm m;
        mm_make(&m, ta, tb, M, N, K, A, B, C);
        for (int w = 0; w < 2; w++)
            mm_run(&m);
        int reps = 0;
        double t0 = now(), t;
        do {
            mm_run(&m);
            reps++;
        } while ((t = now() - t0) < 0.3 || reps < 3);
        double matmul_s = t / reps;
        reps = 0;
        t0 = now();
        do {
#pragma omp parallel for schedule(static)
            for (int r = 0; r < threads; r++) {
                size_t a0 = na * r / threads, a1 = na * (r + 1) / threads;
                round_bf16(Af + a0, A + a0, a1 - a0);
                if (weight_grad) {
                    size_t b0 = nb * r / threads, b1 = nb * (r + 1) / threads;
                    round_bf16(Bf + b0, B + b0, b1 - b0);
                }
            }
            mm_run(&m);
            reps++;
        } while ((t = now() - t0) < 0.3 || reps < 3);
        printf("{\"ta\":%d,\"tb\":%d,\"M\":%d,\"N\":%d,\"K\":%d,\"threads\":%d,\"impl\":\"%s\","
               "\"matmul_s\":%.6g,\"with_rounding_s\":%.6g,\"same_bits_1_vs_n\":%s}\n",
               ta, tb, M, N, K, threads, m.impl, matmul_s, t / reps,
               memcmp(C, C1, nc * sizeof(float)) == 0 ? "true" : "false");
        mm_free(&m);
        free(Af);
        free(Bf);
        free(A);
        free(B);
        free(C);
        free(C1);
    }
    return 0;
}
