/* fleet.c - the fleet view over the scheduler's snapshot (fleet.h). */
#include "control/fleet.h"

#include <string.h>

void fleet_snapshot(struct control *ctl, struct fleet *out)
{
    memset(out, 0, sizeof *out);
    double now = (double)clock_now_ms() / 1000.0;
    struct sched_worker *all = out->workers; /* filtered in place */
    int n = sched_link_fleet(ctl, now, all, FLEET_MAX);
    for (int i = 0; i < n; i++) {
        if (all[i].state == WORKER_LOST)
            continue;
        out->workers[out->n] = all[i];
        out->idle[out->n] = all[i].running_attempt == 0 && all[i].state == WORKER_ACTIVE;
        out->n++;
    }
}

void fleet_invalidate(struct control *ctl)
{
    sched_link_invalidate(ctl->sched);
}

void fleet_changed(struct control *ctl)
{
    fleet_invalidate(ctl);
    sched_link_forget_pass(ctl->sched);
}
