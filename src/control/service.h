/* service.h - the control layer of one `alallo serve` opened and closed,
 * and the lead taken (docs/architecture.md).
 *
 * These sit above every other file of src/control: they make the catalog
 * and the scheduler's link, stop the engine, and on taking the lead read
 * the scheduler afresh, wake the workers and repair partial models. The
 * state they open is control.h's; the ticker is tick.h.
 */
#ifndef ALALLO_CONTROL_SERVICE_H
#define ALALLO_CONTROL_SERVICE_H

#include <stddef.h>

#include "control/control.h"
#include "control/leadership.h"
#include "store/store.h"

/* Makes the catalog and the scheduler's link over an open
 * store (which the control then owns) and replays the calibration history.
 * cfg and alallo_bin must be set. Unless cfg.standby, this process then
 * leads at once (control_begin_leading); a standby writes nothing.
 * Returns 0, or -1 with a reason in err (everything it made is freed; the
 * store is left open). */
int control_open(struct control *ctl, struct store *store, char *err, size_t errcap);

/* Makes this process the leader: what it remembers of the scheduler is
 * read afresh from the store (sched_link_reload), workers the store knows
 * get a fresh grace period (they could not reach a leader that was not
 * running), cancelled jobs charged without their partial model get it
 * (lifecycle_repair_partial_models); then ctl->leading is set. */
void control_begin_leading(struct control *ctl);

/* One step of the leadership (leadership_step), and on LEADERSHIP_TAKEN
 * the lead taken (control_begin_leading) before it returns, so that
 * control_leads says true once this says LEADERSHIP_TAKEN. */
enum leadership_change control_leadership_step(struct control *ctl);

/* Frees what control_open made and closes the store. */
void control_close(struct control *ctl);

#endif
