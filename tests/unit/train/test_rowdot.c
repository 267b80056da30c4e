/* test_rowdot.c - the decode path's products (train/kernels/rowdot.h): a
 * row's outputs are the same bits whatever the number of rows beside it
 * (1 to 13 and 21: on AVX2 the tiles of two rows and the odd row, on
 * AVX-512 groups of two to four rows, a prompt's 21 as 4+4+4+3+3+3, and the
 * lone row), whatever the outputs'
 * count (the tiles of two and four outputs and what is left) and the
 * width (the 16-lane part and the tail), with a bias or none; and each is
 * the dot product, to float precision. A lone row large enough for the
 * threads gets rowdot's bits at any thread count, also where a thread's
 * share is less than a tile. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "train/kernels/rowdot.h"

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f - 0.5f;
}

static void batch_equals_alone(void **state)
{
    (void)state;
    const int ins[] = {1, 15, 16, 17, 37, 768, 773};
    const int outs[] = {1, 2, 3, 4, 5, 7, 9, 64};
    const int rows[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 21};
    uint32_t seed = 7;
    for (size_t a = 0; a < sizeof ins / sizeof ins[0]; a++)
        for (size_t b = 0; b < sizeof outs / sizeof outs[0]; b++)
            for (size_t c = 0; c < sizeof rows / sizeof rows[0]; c++) {
                int n = rows[c];
                int in = ins[a], out = outs[b];
                float *x = malloc(sizeof(float) * (size_t)n * in);
                float *w = malloc(sizeof(float) * (size_t)out * in);
                float *bias = malloc(sizeof(float) * (size_t)out);
                float *y = malloc(sizeof(float) * (size_t)n * out);
                float *one = malloc(sizeof(float) * (size_t)out);
                assert_non_null(x);
                assert_non_null(w);
                assert_non_null(bias);
                assert_non_null(y);
                assert_non_null(one);
                for (int i = 0; i < n * in; i++)
                    x[i] = frand(&seed);
                for (int i = 0; i < out * in; i++)
                    w[i] = frand(&seed);
                for (int i = 0; i < out; i++)
                    bias[i] = frand(&seed);
                const float *bs = n % 2 ? bias : NULL;
                rowdot_times_wt(y, x, n, w, bs, out, in);
                for (int i = 0; i < n; i++) {
                    rowdot_times_wt(one, x + (size_t)i * in, 1, w, bs, out, in);
                    assert_memory_equal(one, y + (size_t)i * out, sizeof(float) * (size_t)out);
                    for (int o = 0; o < out; o++) {
                        float d = rowdot(x + (size_t)i * in, w + (size_t)o * in, in) +
                                  (bs ? bs[o] : 0.0f);
                        assert_memory_equal(&d, &y[(size_t)i * out + o], sizeof d);
                        double ref = bs ? bs[o] : 0.0;
                        for (int k = 0; k < in; k++)
                            ref += (double)x[(size_t)i * in + k] * w[(size_t)o * in + k];
                        assert_float_equal(y[(size_t)i * out + o], ref, 1e-4 * (1 + sqrt(in)));
                    }
                }
                free(x);
                free(w);
                free(bias);
                free(y);
                free(one);
            }
}

static void one_row_any_threads(void **state)
{
    (void)state;
    const int shapes[][2] = {{257, 768}, {1000, 773}, {4099, 64}, {5, 20000}, {9, 16384}};
    uint32_t seed = 11;
    int threads0 = omp_get_max_threads();
    for (size_t a = 0; a < sizeof shapes / sizeof shapes[0]; a++) {
        int out = shapes[a][0], in = shapes[a][1];
        float *x = malloc(sizeof(float) * (size_t)in);
        float *w = malloc(sizeof(float) * (size_t)out * in);
        float *bias = malloc(sizeof(float) * (size_t)out);
        float *y = malloc(sizeof(float) * (size_t)out);
        assert_non_null(x);
        assert_non_null(w);
        assert_non_null(bias);
        assert_non_null(y);
        for (int k = 0; k < in; k++)
            x[k] = frand(&seed);
        for (size_t i = 0; i < (size_t)out * in; i++)
            w[i] = frand(&seed);
        for (int o = 0; o < out; o++)
            bias[o] = frand(&seed);
        for (int threads = 1; threads <= 3; threads++) {
            omp_set_num_threads(threads);
            const float *bs = threads == 2 ? NULL : bias;
            memset(y, 0xff, sizeof(float) * (size_t)out); /* NaNs: every output written */
            rowdot_times_wt(y, x, 1, w, bs, out, in);
            for (int o = 0; o < out; o++) {
                float d = rowdot(x, w + (size_t)o * in, in) + (bs ? bs[o] : 0.0f);
                assert_memory_equal(&d, &y[o], sizeof d);
            }
        }
        free(x);
        free(w);
        free(bias);
        free(y);
    }
    omp_set_num_threads(threads0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(batch_equals_alone),
        cmocka_unit_test(one_row_any_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
