/* tick.h - the server's ticker: the timers of the control layer, run by
 * `alallo serve` about once a second (app/cmd_serve.c) and only acted on
 * by the leader (leadership.h).
 */
#ifndef ALALLO_CONTROL_TICK_H
#define ALALLO_CONTROL_TICK_H

#include <stdint.h>

#include "control/control.h"

/* The server's ticker, called about once a second (tick counts them):
 * an engine's slots kept alive every second tick (engine.h); lost workers
 * every tick (workers.h); limits, start timeouts (lifecycle.h), the
 * deadlines of finish_by jobs (deadlines.h) and a
 * scheduling pass (sched_link.h) every fifth. Does nothing in a process
 * that does not lead (leadership.h). */
void control_tick(struct control *ctl, int64_t now_ms, long tick);

#endif
