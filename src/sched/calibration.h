/* calibration.h - how well past estimates held: over finished jobs, the
 * share whose real time (or price) fell inside the range shown before the
 * start, below it and above it, and how wide the ranges were (the median
 * of high / low). Pure: the caller gathers the samples (control/
 * calibration.c from the store, GET /v1/estimates/calibration). */
#ifndef ALALLO_SCHED_CALIBRATION_H
#define ALALLO_SCHED_CALIBRATION_H

#include <stddef.h>

/* One finished job's range and what really happened. */
struct calib_sample {
    double low, high; /* the range shown; low >= 0, high >= low */
    double actual;    /* what it took or cost                   */
};

struct calib_summary {
    size_t n;            /* samples counted (valid ranges)          */
    size_t inside;       /* low <= actual <= high                   */
    size_t below, above; /* actual < low, actual > high             */
    size_t n_ratio;      /* of them, those with low > 0             */
    double median_ratio; /* median of high / low over those; 0 when
                            n_ratio == 0                            */
};

/* Summarises the samples whose range is valid (finite, low >= 0, high >=
 * low, high > 0, actual finite and >= 0); others are skipped. A value
 * within `slack` (relative, e.g. 1e-6) of an end counts as inside, so an
 * amount rounded for display is not judged outside. A range whose low end
 * is 0 (a price under the shown unit, rounded down) is judged like any
 * other, but has no finite width: it is left out of the median. */
void calib_summarize(const struct calib_sample *s, size_t n, double slack,
                     struct calib_summary *out /* OUT */);

#endif
