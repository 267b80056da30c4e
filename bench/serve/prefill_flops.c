/* prefill_flops.c - how fast a prompt's rows go through one product:
 * y = x W^T for N rows x against fp32 matrices of OUT x IN (1B-class
 * shapes, past the caches), on the machine's threads, by the engine's
 * fixed-order kernel (rowdot_times_wt, train/kernels/rowdot.h) and by the
 * trainer's product (gemm, the CPU path generation runs: avx512 where the
 * CPU has it, else OpenBLAS), in alternating rounds. Prints GFLOP/s, the
 * median of ROUNDS, and checks that every row's outputs from
 * rowdot_times_wt are the bits that row gets alone.
 *
 * Build and run: bench/serve/prefill_flops.sh (it says the machine).
 */
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/kernels/cpu_path.h"
#include "train/kernels/gemm.h"
#include "train/kernels/rowdot.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: prefill_flops OUT IN MATS ROWS ROUNDS\n");
        return 2;
    }
    int out = atoi(argv[1]), in = atoi(argv[2]), mats = atoi(argv[3]), n = atoi(argv[4]);
    int rounds = atoi(argv[5]);
    gemm_set_threads(omp_get_max_threads());
    size_t per = (size_t)out * in;
    float *w = malloc(per * mats * sizeof *w), *x = malloc((size_t)n * in * sizeof *x);
    float *y = malloc((size_t)n * out * sizeof *y), *one = malloc((size_t)out * sizeof *one);
    if (!w || !x || !y || !one)
        return 1;
    srand(1);
    for (size_t i = 0; i < per * mats; i++)
        w[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t i = 0; i < (size_t)n * in; i++)
        x[i] = (float)rand() / RAND_MAX - 0.5f;
    /* every row's bits as it gets them alone */
    rowdot_times_wt(y, x, n, w, NULL, out, in);
    for (int i = 0; i < n; i++) {
        rowdot_times_wt(one, x + (size_t)i * in, 1, w, NULL, out, in);
        if (memcmp(one, y + (size_t)i * out, (size_t)out * sizeof *one)) {
            fprintf(stderr, "row %d of %d: not the bits it gets alone\n", i, n);
            return 1;
        }
    }
    double *t[2];
    t[0] = calloc(rounds, sizeof(double));
    t[1] = calloc(rounds, sizeof(double));
    double flops = 2.0 * per * mats * n;
    for (int r = 0; r < rounds; r++)
        for (int way = 0; way < 2; way++) {
            int k = (r & 1) ? 1 - way : way; /* alternate who goes first */
            double t0 = now();
            for (int m = 0; m < mats; m++) {
                const float *wm = w + per * m;
                if (k == 0)
                    rowdot_times_wt(y, x, n, wm, NULL, out, in);
                else
                    gemm(0, 1, n, out, in, 1.0f, x, in, wm, in, 0.0f, y, out);
            }
            t[k][r] = now() - t0;
        }
    qsort(t[0], rounds, sizeof(double), cmp);
    qsort(t[1], rounds, sizeof(double), cmp);
    double a = flops / t[0][rounds / 2] / 1e9, b = flops / t[1][rounds / 2] / 1e9;
    printf("%6d x %-6d rows %4d  rowdot_times_wt %6.1f GFLOP/s  gemm (%s) %6.1f GFLOP/s  ratio %.2f\n",
           out, in, n, a, cpu_path_name(cpu_path_current()), b, a / b);
    return 0;
}
