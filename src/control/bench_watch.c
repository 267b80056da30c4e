/* bench_watch.c - see bench_watch.h. */
#include "control/bench_watch.h"

#include "core/text.h"

static enum bench_verdict verdict(const struct bench_look *l)
{
    if (!l->wanted)
        return BENCH_UNWANTED;
    if (l->marked_ms > 0 && l->now_ms - l->marked_ms >= BENCH_RUN_MS)
        return BENCH_STALLED;
    if (l->marked_ms == 0 && l->running_since_ms > 0 &&
        l->now_ms - l->running_since_ms >= BENCH_START_MS)
        return BENCH_GHOST;
    if (l->now_ms - l->since_ms > BENCH_TIMEOUT_MS)
        return BENCH_TOO_LONG;
    return BENCH_WAIT;
}

enum bench_verdict bench_judge(const struct bench_look *l, char *why, size_t cap)
{
    enum bench_verdict v = verdict(l);
    if (!why || cap == 0)
        return v;
    switch (v) {
    case BENCH_WAIT:
        why[0] = '\0';
        break;
    case BENCH_GHOST:
        text_printf(why, cap,
                    "it was listed running for %lld s but its script never started (a ghost, "
                    "as a restarted controller can keep)",
                    (long long)((l->now_ms - l->running_since_ms) / 1000));
        break;
    case BENCH_STALLED:
        text_printf(why, cap, "it started %lld s ago and printed no speed",
                    (long long)((l->now_ms - l->marked_ms) / 1000));
        break;
    case BENCH_TOO_LONG:
        text_printf(why, cap, "it ran longer than %d min", BENCH_TIMEOUT_MS / 60000);
        break;
    case BENCH_UNWANTED:
        text_printf(why, cap, "no bench is wanted of the pool now");
        break;
    }
    return v;
}
