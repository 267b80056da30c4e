/* job_view.h - what a job's view shows that comes from policy: the message
 * it reads at a moment, its time left (a range and its basis, and the
 * finish it implies) and what cancelling it now would cost. api/shapes.c
 * writes them as JSON and decides nothing itself; the rules are the scheduler's (sched/time_left.h)
 * and the ledger's (sched/ledger.h, docs/ledger.md).
 */
#ifndef ALALLO_CONTROL_JOB_VIEW_H
#define ALALLO_CONTROL_JOB_VIEW_H

#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"

struct job_view {
    /* Time left at the moment of the view. has_time_left is false when the
     * job has ended, has no steps, has nothing left by its estimate, or
     * the view could not be made (out of memory); the fields below it are
     * then 0, "estimate" and "". */
    bool has_time_left;
    double time_left_low_s;     /* the range's low end, seconds, down to a
                                   tenth (job_range_low_s)                 */
    double time_left_high_s;    /* its high end, up to a tenth             */
    char time_left_text[64];    /* job_time_left_range_text() of the range */
    const char *time_left_basis; /* "estimate", or tl_basis_name() of the
                                    running attempt's state (static)       */
    int64_t estimated_finish_s; /* Unix seconds: now + time_left_high_s,
                                   rounded up                             */
    /* What cancelling the job now would cost, net, in CONTROL_CURRENCY:
     * what an ended job was charged less what was refunded; otherwise the
     * ledger's settle of a cancel at this moment. 0 when the view could not
     * be made (out of memory). */
    double cancel_now;
};

/* Fills *out for job j at now_ms (milliseconds since the epoch). Never
 * fails: out of memory leaves the defaults described above. */
void control_job_view(const struct store_job *j, int64_t now_ms, struct job_view *out /* OUT */);

/* The message job j shows at now_ms: its stored one, except that a queued
 * job whose message is "Starting" and that no worker has claimed (no
 * active attempt) more than CONTROL_STARTING_GRACE_MS after its creation
 * reads "Waiting for capacity" (the help page's words). The result is
 * j->message or a static string; never NULL. */
#define CONTROL_STARTING_GRACE_MS 10000
const char *control_job_message(const struct store_job *j, int64_t now_ms);

#endif
