/* clock.c - see clock.h. */
#include "core/clock.h"

#include <time.h>

int64_t clock_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double seconds_of(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double clock_mono_s(void)
{
    return seconds_of(CLOCK_MONOTONIC);
}

double clock_cpu_s(void)
{
    return seconds_of(CLOCK_PROCESS_CPUTIME_ID);
}

int64_t clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
