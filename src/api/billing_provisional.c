/* billing_provisional.c - the money rules of the header over attempts. */
#include "api/billing_provisional.h"

#include <stdlib.h>
#include <string.h>

#define MAX_ATTEMPTS 64

static int by_fence(const void *a, const void *b)
{
    int64_t x = ((const struct store_attempt *)a)->fence;
    int64_t y = ((const struct store_attempt *)b)->fence;
    return (x > y) - (x < y);
}

/* Cost of the steps that made it into the final model (up to `final`). */
static double steps_cost(const struct store_attempt *a, int n, long final, long *steps)
{
    double cost = 0;
    *steps = 0;
    for (int i = 0; i < n; i++) {
        long ran = a[i].end_step - a[i].start_step;
        if (ran <= 0 || a[i].run_ms <= 0)
            continue;
        /* Steps past where the next attempt that ran resumed were lost. */
        long keep_to = a[i].end_step < final ? a[i].end_step : final;
        for (int k = i + 1; k < n; k++) {
            if (a[k].end_step > a[k].start_step) {
                if (a[k].start_step < keep_to)
                    keep_to = a[k].start_step;
                break;
            }
        }
        long kept = keep_to - a[i].start_step;
        if (kept <= 0)
            continue;
        double ms_per_step = (double)a[i].run_ms / (double)ran;
        cost += a[i].price_per_hour * ms_per_step * (double)kept / 3.6e6;
        *steps += kept;
    }
    return cost;
}

void billing_settle_provisional(const struct store_job *j, const struct store_attempt *history,
                                int n_history, const struct store_attempt *current,
                                int64_t now_ms, struct bill *out)
{
    (void)now_ms;
    memset(out, 0, sizeof *out);
    if (j->status != JOB_SUCCEEDED && j->status != JOB_CANCELLED)
        return; /* failed and stopped jobs cost nothing */
    struct store_attempt a[MAX_ATTEMPTS];
    int n = 0;
    for (int i = 0; i < n_history && n < MAX_ATTEMPTS; i++)
        if (!current || strcmp(history[i].id, current->id) != 0)
            a[n++] = history[i];
    if (current && n < MAX_ATTEMPTS)
        a[n++] = *current;
    qsort(a, (size_t)n, sizeof a[0], by_fence);

    if (j->status == JOB_CANCELLED) {
        double high_s = j->est_high_s;
        if (high_s > 0 && (double)j->running_ms / 1000.0 > high_s)
            return; /* ran past the upper end of its estimate: free */
    }
    long steps;
    double cost = steps_cost(a, n, j->steps_done, &steps);
    out->charge = cost - j->price_charged + j->price_refunded;
    if (out->charge < 0)
        out->charge = 0;
    out->steps = steps;
    if (j->status == JOB_SUCCEEDED) {
        double cap = j->est_price_high;
        if (cap > 0 && out->charge > cap)
            out->refund = out->charge - cap;
    }
}
