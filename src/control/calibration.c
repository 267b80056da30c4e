/* calibration.c - how well one account's estimates held (calibration.h). */
#include "control/calibration.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* The price range of a job's estimate text; false when it had none. */
static bool price_range(const char *estimate, double *low, double *high)
{
    json_t *e = estimate[0] ? json_loads(estimate, 0, NULL) : NULL;
    json_t *p = json_object_get(e, "price");
    bool ok = json_is_number(json_object_get(p, "low")) &&
              json_is_number(json_object_get(p, "high"));
    if (ok) {
        *low = json_number_value(json_object_get(p, "low"));
        *high = json_number_value(json_object_get(p, "high"));
    }
    json_decref(e);
    return ok;
}

enum alallo_err control_calibration(struct control *ctl, const char *account, int window,
                                    struct control_calibration *out)
{
    memset(out, 0, sizeof *out);
    if (window < 1 || window > CALIBRATION_MAX_JOBS)
        return ERR_INVALID;
    out->window = window;
    struct store_job *page = calloc(STORE_LIST_MAX, sizeof *page);
    struct calib_sample *t = calloc((size_t)window, sizeof *t);
    struct calib_sample *p = calloc((size_t)window, sizeof *p);
    enum alallo_err e = page && t && p ? ERR_OK : ERR_NOMEM;
    size_t n = 0;
    char after[IDS_MAX] = "";
    bool more = true;
    for (int read = 0; !e && more && n < (size_t)window && read < CALIBRATION_SCAN_MAX;) {
        int got = 0;
        e = store_job_list(ctl->store, account, after[0] ? after : NULL, STORE_LIST_MAX, page,
                           &got, &more);
        for (int i = 0; !e && i < got && n < (size_t)window; i++) {
            const struct store_job *j = &page[i];
            double lo, hi;
            if (j->status != JOB_SUCCEEDED || !(j->est_high_s > 0) || j->finished_ms <= 0 ||
                !price_range(j->estimate, &lo, &hi))
                continue;
            t[n] = (struct calib_sample){j->est_low_s, j->est_high_s,
                                         (double)(j->finished_ms - j->created_ms) / 1000.0};
            p[n] = (struct calib_sample){lo, hi, j->price_charged - j->price_refunded};
            n++;
        }
        if (got > 0)
            memcpy(after, page[got - 1].id, sizeof after);
        read += got;
        if (got == 0)
            break;
    }
    if (!e) {
        /* The time range is shown to a tenth of a second and the price to
         * four decimals (rounded outwards): a value at a shown end is
         * inside. */
        calib_summarize(t, n, 1e-6, &out->time);
        calib_summarize(p, n, 1e-6, &out->price);
    }
    free(page);
    free(t);
    free(p);
    return e;
}
