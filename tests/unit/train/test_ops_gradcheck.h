/* test_ops_gradcheck.h - finite-difference gradient checking for the
 * trainer's unit tests (header-only; included by test_*.c files).
 *
 * A test writes a loss function L(params) = sum_i w_i y_i (w fixed random
 * weights, y the op's output) summed in double, computes the analytic
 * gradient with the op's backward (dy = w), and calls gc_check, which moves
 * each checked parameter by +-h and compares the central difference.
 */
#ifndef ALALLO_TEST_GRADCHECK_H
#define ALALLO_TEST_GRADCHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/rng.h"

static inline void gc_fill(float *x, size_t n, struct rng *r, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * rng_normal(r);
}

static inline double gc_dot(const float *w, const float *y, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)w[i] * (double)y[i];
    return s;
}

/* Checks up to `max_checks` entries of param (spread over the array)
 * against grad. Returns the number of entries whose central difference
 * differs from the analytic value by more than atol + rtol*|value|,
 * printing each. */
static inline int gc_check(const char *what, double (*loss)(void *), void *ctx, float *param,
                           size_t n, const float *grad, int max_checks, double h, double atol,
                           double rtol)
{
    int bad = 0;
    size_t stride = n / (size_t)max_checks;
    if (stride < 1)
        stride = 1;
    double worst = 0.0;
    for (size_t i = 0; i < n; i += stride) {
        float save = param[i];
        param[i] = save + (float)h;
        double lp = loss(ctx);
        param[i] = save - (float)h;
        double lm = loss(ctx);
        param[i] = save;
        double hh = ((double)(save + (float)h) - (double)(save - (float)h));
        double num = (lp - lm) / hh;
        double err = fabs(num - (double)grad[i]);
        if (err > worst)
            worst = err;
        if (err > atol + rtol * fabs(num)) {
            if (bad < 5)
                fprintf(stderr, "%s[%zu]: analytic %.6g numeric %.6g\n", what, i,
                        (double)grad[i], num);
            bad++;
        }
    }
    fprintf(stderr, "%s: worst abs error %.3g\n", what, worst);
    return bad;
}

#endif
