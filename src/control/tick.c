/* tick.c - see tick.h. */
#include "control/tick.h"

#include "control/deadlines.h"
#include "control/engine.h"
#include "control/leadership.h"
#include "control/lifecycle.h"
#include "control/sched_link.h"
#include "control/workers.h"

void control_tick(struct control *ctl, int64_t now_ms, long tick)
{
    if (!control_leads(ctl))
        return; /* the timers are the leader's (leadership.h) */
    if (tick % 2 == 0)
        engine_keep_slots(ctl);
    control_workers_check_lost(ctl, now_ms);
    if (tick % 5 == 0) {
        lifecycle_check_limits(ctl, now_ms);
        lifecycle_check_starts(ctl, now_ms);
        control_deadlines_check(ctl, now_ms);
        /* A pass also runs on every claim; this one keeps the waiting
         * jobs' messages true while no worker asks. */
        sched_link_pass(ctl, NULL, NULL);
    }
}
