/* calibration.h - how well the estimates of one account's finished jobs
 * held (GET /v1/estimates/calibration; docs/estimator.md, "Checking the
 * ranges"): over its newest succeeded jobs that had a range before they
 * started, how often the real time (creation to finish) and the price
 * paid fell inside the range shown, and how wide the ranges were. Reads
 * the store only. */
#ifndef ALALLO_CONTROL_CALIBRATION_H
#define ALALLO_CONTROL_CALIBRATION_H

#include "control/control.h"
#include "sched/calibration.h"

#define CALIBRATION_DEFAULT_JOBS 50
#define CALIBRATION_MAX_JOBS 100 /* STORE_LIST_MAX, the ?limit= cap */
/* The most jobs of the account read to find them (newest first). */
#define CALIBRATION_SCAN_MAX 1000

struct control_calibration {
    int window;                 /* the finished jobs asked for       */
    struct calib_summary time;  /* real time against the time range  */
    struct calib_summary price; /* price paid against the price range */
};

/* The calibration of `account` over its newest `window` (1..
 * CALIBRATION_MAX_JOBS) succeeded jobs with a range. */
enum alallo_err control_calibration(struct control *ctl, const char *account, int window,
                                    struct control_calibration *out /* OUT */);

#endif
