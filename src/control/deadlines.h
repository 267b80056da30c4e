/* deadlines.h - the goal finish_by while a job runs (docs/scheduler.md,
 * "Finish by"): the leader's ticker checks each running finish_by job
 * against its deadline and, by resched_on_deadline (src/sched/resched.h),
 *  - moves it, checkpoint first, when the worker it runs on would finish
 *    it after the deadline at the 90% level and a free worker would not
 *    (the pass then places it by its goal);
 *  - says once, with an event and a line in its log, when no capacity can
 *    finish it by the deadline any more: it then goes on at the fastest
 *    capacity (moving only for a real gain).
 * Both are judged on the attempt's own pace (time left's basis "pace",
 * after about 5% of its steps), never on the estimate it started with.
 * Owns nothing between calls.
 */
#ifndef ALALLO_CONTROL_DEADLINES_H
#define ALALLO_CONTROL_DEADLINES_H

#include <stdint.h>

#include "control/control.h"

/* The key of the job's stored settings (store_job.hyper) that records that
 * the job was said to be unable to meet its deadline (said once). */
#define DEADLINES_MISSED_KEY "finish_by_missed"

/* Checks every running finish_by job at now_ms (ticker, every fifth tick):
 * one read of the jobs in flight (store_waiting_each) finds them by their
 * plan's goal; only they are read in full. */
void control_deadlines_check(struct control *ctl, int64_t now_ms);

#endif
