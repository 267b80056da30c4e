/* gpu_test.h - what every GPU test (tests/gpu/test_*.c) starts with: skip
 * with exit 77 and one clear line where no GPU is visible, else open the
 * context on GPU 0 and say which GPU runs the tests. Header-only, one
 * include per test binary. */
#ifndef ALALLO_TESTS_GPU_TEST_H
#define ALALLO_TESTS_GPU_TEST_H

#include <stdio.h>
#include <stdlib.h>

#include "train/cuda/cuda_ctx.h"

#define GPU_TEST_SKIP 77 /* CTest's SKIP_RETURN_CODE for tests/gpu */

/* 0 with the context open; GPU_TEST_SKIP with no GPU; 1 when a GPU is
 * there but will not open (a failure, not a skip). */
static inline int gpu_test_open(const char *test)
{
    if (cuda_device_count() == 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        printf("skip: no GPU visible to %s (CUDA_VISIBLE_DEVICES=%s)\n", test,
               vis ? vis : "(unset)");
        return GPU_TEST_SKIP;
    }
    if (cuda_ctx_open(0) < 0) {
        fprintf(stderr, "%s: %s\n", test, cuda_ctx_error());
        return 1;
    }
    const struct cuda_device_info *d = cuda_ctx_device();
    printf("%s on GPU 0: %s, %.1f GiB, compute capability %d.%d, %d SMs\n", test, d->name,
           (double)d->total_bytes / (1 << 30), d->cc_major, d->cc_minor, d->sm_count);
    return 0;
}

#endif
