/* serve_scale.h - how many serving engines each pool runs, when the
 * operator gave a range (serve's --inference-pool POOL:MIN-MAX; docs/serving.md,
 * "Engines that follow the requests"): pure policy over what the engines
 * last reported and what the pool's slots are doing. control/engine.c
 * gathers the state each round and starts or stops one engine at a time.
 *
 * The rule, one engine at a time and never within SERVE_SCALE_HOLD_MS of
 * the last change (an engine takes that long to come up and report); with
 * several pools (--inference-pool given once per pool), their engines are
 * one fleet and the rule picks the pool (serve_scale_next below):
 *  - below MIN (a restart, a range widened): up to MIN; above MAX: down.
 *  - up by one, when below MAX and a slot of the pool is free (no
 *    attempt on it; a serving engine never stops a training job), on
 *    the cheapest such pool:
 *      - no engine runs and a request found none within
 *        SERVE_SCALE_MISSED_MS (scaled to zero, someone is asking);
 *      - every engine is up and requests wait at each: at least 1 waiting
 *        per engine, or SERVE_SCALE_BUSY_WITH_TRAINING per engine when
 *        training jobs are queued for slots too. A person waits on a
 *        request and nobody on a queued job's first minutes, so serving
 *        wins a free slot at a lower bar, but a few waiting requests do
 *        not keep a queued training job from it.
 *  - down by one, on the dearest pool above MIN where nothing waits and
 *    the engine that would stop (its last one) has had nothing to do for
 *    the idle time: the operator's (--inference-idle) or, with training
 *    jobs queued,
 *    SERVE_SCALE_IDLE_WITH_TRAINING_MS if shorter: an idle engine gives its
 *    slot back to training soon.
 *    An engine beyond MIN not heard from SERVE_SCALE_START_MS after it
 *    was asked for (its job cannot start, or it was lost) counts as idle:
 *    a slot is never held by an engine that does not serve.
 *  - else the same count.
 */
#ifndef ALALLO_SCHED_SERVE_SCALE_H
#define ALALLO_SCHED_SERVE_SCALE_H

#include <stdbool.h>
#include <stdint.h>

#define SERVE_SCALE_HOLD_MS 10000
#define SERVE_SCALE_MISSED_MS 60000
#define SERVE_SCALE_BUSY_WITH_TRAINING 4
#define SERVE_SCALE_IDLE_WITH_TRAINING_MS 30000
#define SERVE_SCALE_START_MS 120000

/* One pool's serving engines, as they are now. */
struct serve_scale_pool {
    int min, max;            /* the operator's range, 0 <= min <= max    */
    int count;               /* engines wanted now                       */
    int fresh;               /* of those, heard from lately              */
    long waiting;            /* requests waiting at the fresh engines    */
    bool last_fresh;         /* the last engine was heard from lately    */
    int64_t last_idle_ms;    /* how long it has had nothing to do; 0:
                              * busy, or not heard from lately           */
    int64_t changed_ago_ms;  /* since this pool's count last changed;
                              * < 0: never                               */
    int free_slots;          /* the pool's slots with no attempt, not
                              * held by an engine                        */
    double price_per_hour;   /* of one of its slots                      */
};

/* What all the pools share. */
struct serve_scale_all {
    int64_t missed_ago_ms;   /* since a request last found no engine;
                              * < 0: none did                            */
    int64_t changed_ago_ms;  /* since any pool's count last changed;
                              * < 0: never                               */
    long training_queued;    /* jobs queued or rescheduling              */
    int64_t idle_ms;         /* the operator's idle time                 */
};

/* The next change, one engine at a time: pool `pool` (an index of the
 * pools given) gains one engine (delta +1) or loses one (delta -1); pool
 * -1 and delta 0 for none. Across pools the engines are one fleet (the
 * API routes among all of them): requests that wait at every engine of
 * every pool, or a request that found none while none runs, add one to
 * the cheapest pool below its MAX with a free slot (ties: the one with
 * more free slots, then the first); an idle last engine of a pool above
 * its MIN stops, the dearest such pool first. A pool outside its range
 * comes back into it first, whatever the hold. */
struct serve_scale_step {
    int pool;
    int delta;
};

struct serve_scale_step serve_scale_next(const struct serve_scale_pool *pools, int n,
                                         const struct serve_scale_all *all);

#endif
