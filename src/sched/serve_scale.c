/* serve_scale.c - how many serving engines each pool runs (see
 * serve_scale.h). */
#include "sched/serve_scale.h"

#include <assert.h>

/* Whether requests wait at every engine of every pool, enough to take a
 * slot: count engines, fresh of them heard from, waiting at those. */
static bool requests_wait(int count, int fresh, long waiting, const struct serve_scale_all *a)
{
    if (count == 0)
        return a->missed_ago_ms >= 0 && a->missed_ago_ms <= SERVE_SCALE_MISSED_MS;
    long per = a->training_queued > 0 ? SERVE_SCALE_BUSY_WITH_TRAINING : 1;
    return fresh >= count && waiting >= per * count;
}

/* Whether pool p's last engine has been idle long enough to go. */
static bool last_idle(const struct serve_scale_pool *p, const struct serve_scale_all *a)
{
    int64_t idle = a->idle_ms;
    if (a->training_queued > 0 && idle > SERVE_SCALE_IDLE_WITH_TRAINING_MS)
        idle = SERVE_SCALE_IDLE_WITH_TRAINING_MS;
    if (p->waiting > 0)
        return false;
    if (!p->last_fresh) /* asked for and never heard from: not serving */
        return p->changed_ago_ms >= SERVE_SCALE_START_MS;
    return p->last_idle_ms > 0 && p->last_idle_ms >= idle;
}

/* Whether pool a is a better place for one more engine than pool b. */
static bool cheaper(const struct serve_scale_pool *a, const struct serve_scale_pool *b)
{
    if (a->price_per_hour != b->price_per_hour)
        return a->price_per_hour < b->price_per_hour;
    return a->free_slots > b->free_slots;
}

struct serve_scale_step serve_scale_next(const struct serve_scale_pool *pools, int n,
                                         const struct serve_scale_all *all)
{
    struct serve_scale_step none = {-1, 0};
    int count = 0, fresh = 0;
    long waiting = 0;
    for (int i = 0; i < n; i++) {
        const struct serve_scale_pool *p = &pools[i];
        assert(0 <= p->min && p->min <= p->max);
        if (p->count < p->min)
            return (struct serve_scale_step){i, +1};
        if (p->count > p->max)
            return (struct serve_scale_step){i, -1};
        count += p->count;
        fresh += p->fresh;
        waiting += p->waiting;
    }
    if (all->changed_ago_ms >= 0 && all->changed_ago_ms < SERVE_SCALE_HOLD_MS)
        return none;
    if (requests_wait(count, fresh, waiting, all)) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (pools[i].count < pools[i].max && pools[i].free_slots > 0 &&
                (best < 0 || cheaper(&pools[i], &pools[best])))
                best = i;
        if (best >= 0)
            return (struct serve_scale_step){best, +1};
    }
    int dearest = -1;
    for (int i = 0; i < n; i++)
        if (pools[i].count > pools[i].min && last_idle(&pools[i], all) &&
            (dearest < 0 || pools[i].price_per_hour >= pools[dearest].price_per_hour))
            dearest = i;
    return dearest >= 0 ? (struct serve_scale_step){dearest, -1} : none;
}
