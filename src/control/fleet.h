/* fleet.h - the capacity as the API shows it (/metrics, the models list)
 * and the one way to say that it changed.
 *
 * There is one cached picture of the fleet: the snapshot that estimates
 * read (sched_link.h, at most a second old). A fleet view is taken from
 * it; a change of a worker or of its work invalidates it here.
 */
#ifndef ALALLO_CONTROL_FLEET_H
#define ALALLO_CONTROL_FLEET_H

#include <stdbool.h>

#include "control/control.h"
#include "control/sched_link.h"

#define FLEET_MAX SCHED_LINK_WORKERS

/* The workers that are not lost, with whether each is idle (active and
 * running nothing). */
struct fleet {
    struct sched_worker workers[FLEET_MAX];
    bool idle[FLEET_MAX];
    int n;
};

/* Copies the picture into out. */
void fleet_snapshot(struct control *ctl, struct fleet *out /* OUT */);

/* Makes the next snapshot read the store (a worker took work or ended
 * it). */
void fleet_invalidate(struct control *ctl);

/* The same, for a change of the fleet itself (a worker registered, came
 * back, was drained, taken back or lost): the latest pass's assignments
 * are forgotten too. */
void fleet_changed(struct control *ctl);

#endif
