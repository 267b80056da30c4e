/* test_kernel_threads.c - the kernels' looked-up-once state is safe for two
 * threads: both call cpu_path_flags() and nf4_dequantize_range() at once,
 * from the process's first call on, 1000 times each, and get the same
 * results as each other and as the definition. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/kernels/cpu_path.h"
#include "train/kernels/nf4.h"

#define ROUNDS 1000
#define N 300 /* more than one block, with a tail of odd length */

struct run {
    pthread_barrier_t *start;     /* IN: both threads begin together */
    const struct nf4_tensor *t;   /* IN: the tensor both decode */
    const float *want;            /* IN: its values, by the definition */
    char flags[128];              /* OUT: the first flags line seen */
    int flags_differed;           /* OUT: rounds whose line differed from the first */
    int pointer_differed;         /* OUT: rounds whose pointer differed from the first */
    int values_differed;          /* OUT: rounds whose values differed from the definition */
};

static void *run_rounds(void *arg)
{
    struct run *r = arg;
    float out[N];
    const char *first = NULL;
    pthread_barrier_wait(r->start);
    for (int i = 0; i < ROUNDS; i++) {
        const char *line = cpu_path_flags();
        if (!first) {
            first = line;
            snprintf(r->flags, sizeof r->flags, "%s", line);
        }
        r->pointer_differed += line != first;
        r->flags_differed += strcmp(line, r->flags) != 0;
        nf4_dequantize_range(r->t, 0, N, out);
        r->values_differed += memcmp(out, r->want, sizeof out) != 0;
    }
    return NULL;
}

static void two_threads_agree(void **state)
{
    (void)state;
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)((i * 37) % 101 - 50) / 25.0f;
    struct nf4_tensor *t = nf4_quantize(x, N);
    assert_non_null(t);
    float want[N]; /* the definition: level of the value's nibble times its block's scale */
    for (size_t i = 0; i < N; i++) {
        uint8_t c = t->codes[i / 2];
        int code = i % 2 == 0 ? c >> 4 : c & 15;
        want[i] = nf4_levels[code] * nf4_block_scale(t, i / NF4_BLOCK);
    }

    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
    struct run runs[2];
    pthread_t threads[2];
    for (int k = 0; k < 2; k++) {
        memset(&runs[k], 0, sizeof runs[k]);
        runs[k].start = &start;
        runs[k].t = t;
        runs[k].want = want;
        assert_int_equal(pthread_create(&threads[k], NULL, run_rounds, &runs[k]), 0);
    }
    for (int k = 0; k < 2; k++)
        assert_int_equal(pthread_join(threads[k], NULL), 0);
    pthread_barrier_destroy(&start);

    for (int k = 0; k < 2; k++) {
        assert_int_equal(runs[k].flags_differed, 0);
        assert_int_equal(runs[k].pointer_differed, 0);
        assert_int_equal(runs[k].values_differed, 0);
    }
    assert_string_equal(runs[0].flags, runs[1].flags);
    assert_string_equal(runs[0].flags, cpu_path_flags());
    nf4_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_threads_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
