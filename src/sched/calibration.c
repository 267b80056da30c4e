/* calibration.c - how well past estimates held (calibration.h). */
#include "sched/calibration.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void calib_summarize(const struct calib_sample *s, size_t n, double slack,
                     struct calib_summary *out)
{
    memset(out, 0, sizeof *out);
    double *ratios = n ? malloc(n * sizeof *ratios) : NULL;
    for (size_t i = 0; i < n; i++) {
        const struct calib_sample *x = &s[i];
        if (!isfinite(x->low) || !isfinite(x->high) || !isfinite(x->actual) || !(x->low >= 0) ||
            !(x->high > 0) || x->high < x->low || x->actual < 0)
            continue;
        if (x->actual < x->low * (1.0 - slack))
            out->below++;
        else if (x->actual > x->high * (1.0 + slack))
            out->above++;
        else
            out->inside++;
        if (ratios && x->low > 0)
            ratios[out->n_ratio++] = x->high / x->low;
        out->n++;
    }
    if (ratios && out->n_ratio > 0) {
        qsort(ratios, out->n_ratio, sizeof *ratios, cmp_double);
        size_t m = out->n_ratio / 2;
        out->median_ratio =
            out->n_ratio % 2 ? ratios[m] : 0.5 * (ratios[m - 1] + ratios[m]);
    }
    free(ratios);
}
