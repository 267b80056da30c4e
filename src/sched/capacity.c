/* capacity.c - worker classes and states, pace and price of a job on a
 * worker. */
#include "sched/capacity.h"

#include <math.h>
#include <string.h>

static const char *const class_names[WORKER_CLASS_COUNT] = {"on-demand", "spot"};

/* Used for a worker that has not measured itself: slow on purpose. */
#define UNMEASURED_FLOPS_PER_CPU 1e9

const char *capacity_class_name(enum worker_class c)
{
    if ((int)c < 0 || c >= WORKER_CLASS_COUNT)
        return NULL;
    return class_names[c];
}

bool capacity_class_parse(const char *s, enum worker_class *out)
{
    if (!s)
        return false;
    for (int i = 0; i < WORKER_CLASS_COUNT; i++) {
        if (strcmp(s, class_names[i]) == 0) {
            *out = (enum worker_class)i;
            return true;
        }
    }
    return false;
}

double capacity_flops_from_reference(double tokens_per_s, double flops_per_token)
{
    if (!(tokens_per_s > 0) || !(flops_per_token > 0))
        return 0;
    return tokens_per_s * flops_per_token;
}

bool capacity_may_run(const struct sched_worker *w)
{
    return w->state != WORKER_LOST || (w->silent_s > 0 && w->silent_s < CAPACITY_RETURN_GRACE_S);
}

double capacity_worker_flops(const struct sched_worker *w)
{
    if (w->flops > 0 && isfinite(w->flops))
        return w->flops;
    int cpus = w->cpus > 0 ? w->cpus : 1;
    return UNMEASURED_FLOPS_PER_CPU * cpus;
}

void capacity_correct_speed(struct sched_worker *w, double log_slower)
{
    if (!isfinite(log_slower))
        log_slower = 0;
    double f = exp(-log_slower);
    if (w->flops > 0 && isfinite(w->flops))
        w->flops *= f;
    if (w->small_flops > 0 && isfinite(w->small_flops))
        w->small_flops *= f;
    w->speed_log = log_slower;
}

double capacity_worker_flops_for(const struct sched_worker *w, double params)
{
    double f = capacity_worker_flops(w);
    double lo = w->small_params, hi = w->bench_params, lo_f = w->small_flops;
    bool curve = lo > 0 && hi > lo && lo_f > 0 && isfinite(hi) && isfinite(lo_f) &&
                 w->flops > 0 && isfinite(w->flops);
    if (!curve || !(params > 0) || params >= hi)
        return f;
    /* Between the two points in logs; below the small one, its figure. */
    double x = log(params / lo) / log(hi / lo);
    if (x < 0)
        x = 0;
    double ratio = exp((1 - x) * log(lo_f / w->flops));
    if (ratio > 1)
        ratio = 1;
    if (ratio < CAPACITY_SMALL_RATIO_MIN)
        ratio = CAPACITY_SMALL_RATIO_MIN;
    return f * ratio;
}

double capacity_train_seconds(double work_flops, double params, const struct sched_worker *w)
{
    if (!(work_flops > 0))
        return 0;
    return work_flops / capacity_worker_flops_for(w, params);
}

double capacity_pace_tokens_per_s(double flops_per_token, const struct sched_worker *w)
{
    if (!(flops_per_token > 0))
        return 0;
    return capacity_worker_flops(w) / flops_per_token;
}

int64_t capacity_price_micros(double price_per_hour, double seconds)
{
    if (!(price_per_hour > 0) || !(seconds > 0))
        return 0;
    double micros = price_per_hour * seconds / 3600.0 * 1e6;
    if (micros > 9e18) /* beyond any real bill; keeps the conversion defined */
        micros = 9e18;
    return (int64_t)llround(micros);
}
