/* serve_scale.c - how many serving engines a pool runs (see
 * serve_scale.h). */
#include "sched/serve_scale.h"

#include <assert.h>

/* Whether requests wait at every engine, enough to take a slot. */
static bool requests_wait(const struct serve_scale_state *s)
{
    if (s->count == 0)
        return s->missed_ago_ms >= 0 && s->missed_ago_ms <= SERVE_SCALE_MISSED_MS;
    long per = s->training_queued > 0 ? SERVE_SCALE_BUSY_WITH_TRAINING : 1;
    return s->fresh >= s->count && s->waiting >= per * s->count;
}

/* Whether the last engine has been idle long enough to go. */
static bool last_idle(const struct serve_scale_state *s)
{
    int64_t idle = s->idle_ms;
    if (s->training_queued > 0 && idle > SERVE_SCALE_IDLE_WITH_TRAINING_MS)
        idle = SERVE_SCALE_IDLE_WITH_TRAINING_MS;
    if (s->waiting > 0)
        return false;
    if (!s->last_fresh) /* asked for and never heard from: not serving */
        return s->changed_ago_ms >= SERVE_SCALE_START_MS;
    return s->last_idle_ms > 0 && s->last_idle_ms >= idle;
}

int serve_scale_want(const struct serve_scale_state *s)
{
    assert(0 <= s->min && s->min <= s->max);
    if (s->count < s->min)
        return s->min;
    if (s->count > s->max)
        return s->max;
    if (s->changed_ago_ms >= 0 && s->changed_ago_ms < SERVE_SCALE_HOLD_MS)
        return s->count;
    if (s->count < s->max && s->free_slots > 0 && requests_wait(s))
        return s->count + 1;
    if (s->count > s->min && last_idle(s))
        return s->count - 1;
    return s->count;
}
