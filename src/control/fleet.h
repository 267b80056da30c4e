/* fleet.h - a recent picture of the capacity: the workers that are not
 * lost, whether each is idle, and how many jobs wait. Estimates and job
 * creation read it on every call, so it is cached for FLEET_TTL_MS rather
 * than read from the store each time.
 */
#ifndef ALALLO_CONTROL_FLEET_H
#define ALALLO_CONTROL_FLEET_H

#include <stdbool.h>

#include "control/control.h"

#define FLEET_MAX 1024
#define FLEET_TTL_MS 500

struct fleet {
    struct store_worker workers[FLEET_MAX];
    bool idle[FLEET_MAX];
    int n;
    long waiting; /* queued and re-scheduling jobs */
};

struct fleet_cache *fleet_cache_new(void);
void fleet_cache_free(struct fleet_cache *c);

/* Copies the picture (refreshed when older than FLEET_TTL_MS) into out. */
void fleet_snapshot(struct control *ctl, struct fleet *out /* OUT */);

/* Makes the next snapshot read the store (a worker took work or ended
 * it). */
void fleet_invalidate(struct control *ctl);

/* Walks every open attempt alongside the workers: open[n] as
 * store_attempt_list_open(store, "", ...) gives them (by worker name), the
 * workers visited in name order (as store_worker_list gives them), *cursor
 * 0 at the start. Returns worker `name`'s attempt, or NULL when it runs
 * none. */
const struct store_attempt *fleet_attempt_of(const struct store_attempt *open, int n,
                                             int *cursor, const char *name);

/* The same, for a change of the fleet itself (a worker registered, came
 * back, was drained, taken back or lost): the latest pass's assignments
 * are forgotten too. */
void fleet_changed(struct control *ctl);

#endif
