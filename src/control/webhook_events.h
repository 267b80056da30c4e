/* webhook_events.h - the webhook events a job change raises, queued in
 * the change's own transaction (the store's job hook, store_set_job_hook),
 * so that an acknowledged change always has its events in the outbox and
 * a rolled-back one has none.
 *
 * Events, in OpenAI's shape {id: "evt_…", object: "event", created_at
 * (Unix seconds), type, data: {id: job id, …}}:
 *   alallo.fine_tuning.job.status      every status change (data: status, previous_status)
 *   fine_tuning.job.succeeded|failed|cancelled   the end, after the status event
 *   alallo.fine_tuning.job.checkpoint  each checkpoint written (data: step, train_loss)
 */
#ifndef ALALLO_CONTROL_WEBHOOK_EVENTS_H
#define ALALLO_CONTROL_WEBHOOK_EVENTS_H

#include "store/store.h"

/* True when `type` is one of the event types above. */
bool webhook_event_type_known(const char *type);

/* The store's job hook (store_job_hook_fn): queues the events of the
 * change from `before` to job->status and of the checkpoints in w. */
enum alallo_err webhook_events_hook(enum job_status before, const struct store_job *job,
                                    struct store_writes *w, void *ctx);

#endif
