/* leadership.h - whether this `serve` leads the store it shares with
 * others, and where the leader answers (docs/operations.md, "High
 * availability").
 *
 * Only the leader runs scheduling passes, the ticker (lost workers, time
 * limits, start timeouts) and the local workers; a standby answers reads
 * from the store and forwards every other call to the leader (src/api), so
 * that the leader's in-memory caches see every write. Leadership is the
 * store's leader lock (store/leader_lock.h). A control without a
 * leadership (unit tests, one-process tools) always leads.
 *
 * Thread-safety: leadership_step (through control_leadership_step,
 * service.h) and leadership_close are called by one
 * thread (the server's watcher); control_leads and leadership_leader_url
 * from any.
 */
#ifndef ALALLO_CONTROL_LEADERSHIP_H
#define ALALLO_CONTROL_LEADERSHIP_H

#include <stdbool.h>
#include <stddef.h>

#include "control/control.h"

/* How often a standby tries the lock (and the leader checks it). */
#define LEADERSHIP_STEP_MS 500

/* Opens the leader lock of store `where` (a PostgreSQL URL or the data
 * folder) for ctl, which must be open with cfg.standby set; my_url is
 * where this process answers, written for the others when it leads.
 * Takes nothing yet. Returns 0 or -1 with err. */
int leadership_open(struct control *ctl, const char *where, const char *my_url, char *err,
                    size_t errcap);

enum leadership_change {
    LEADERSHIP_SAME,  /* still the leader, or still a standby */
    LEADERSHIP_TAKEN, /* this process has just become the leader */
    LEADERSHIP_LOST,  /* this process led and no longer does: stop */
};

/* Tries the lock once. On taking it, returns LEADERSHIP_TAKEN and the
 * caller makes this process the leader: control_leadership_step
 * (service.h) calls control_begin_leading, which reads the scheduler's
 * in-memory state afresh from the store, gives workers a fresh grace
 * period (their heartbeats went to a leader that is gone) and gives
 * cancelled jobs their partial models; then control_leads says true. On
 * losing it, control_leads says false before this returns. Also refreshes
 * the leader's URL that leadership_leader_url gives. */
enum leadership_change leadership_step(struct control *ctl);

/* Whether this process leads. */
bool control_leads(struct control *ctl);

/* The leader's URL as last read (at most LEADERSHIP_STEP_MS old), into
 * out. False when none is known or this process is the leader. */
bool leadership_leader_url(struct control *ctl, char *out /* OUT */, size_t cap);

/* Releases the lock (when held) and frees the leadership. */
void leadership_close(struct control *ctl);

#endif
