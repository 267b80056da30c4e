/* wandb_forward.h - sends each job's metrics to a W&B-compatible server
 * (docs/integrations.md): the leader's thread that forwards the `metrics`
 * events of jobs with a W&B integration (core/integrations.h).
 *
 * Per job, the run is made (or found) with GraphQL `upsertBucket` at
 * BASE/graphql, then each metrics event becomes one line of the run's
 * `wandb-history.jsonl` posted to BASE/files/ENTITY/PROJECT/RUN/file_stream
 * at the line offset already sent; the last post of an ended job says
 * `complete`. Every call authenticates as `api:KEY` with the account's key
 * (store setting "wandb_api_key"), which is never logged.
 *
 * Delivery is at least once: the job's cursor (store_cursor_put: the event
 * sequence and history lines sent) moves only after the server took the
 * lines, so after a crash the lines since the cursor are posted again at
 * the same offset. A failed call is retried with back-off (1 s doubling to
 * 60 s) per job; other jobs go on meanwhile. A job has a last try (the 5th
 * refusal in a row, or the 30th failure of any kind): then an event on the
 * job says why and its cursor stops for good. Pending jobs are taken in
 * turns between accounts (store_cursor_pending), so one account's stuck
 * jobs never hold up another's. Only the leader forwards (control_leads).
 */
#ifndef ALALLO_CONTROL_WANDB_FORWARD_H
#define ALALLO_CONTROL_WANDB_FORWARD_H

#include <stddef.h>

#include "control/control.h"

#define WANDB_DEFAULT_URL "https://api.wandb.ai"

struct wandb_forward;

/* Starts the forwarding thread over ctl (which must outlive it) for the
 * server at base_url (no trailing slash needed). Returns 0, or -1 with a
 * reason in err. */
int wandb_forward_start(struct control *ctl, const char *base_url,
                        struct wandb_forward **out /* OUT */, char *err, size_t errcap);

/* Stops and frees the thread (waits for a call in flight, at most its
 * timeout); NULL is fine. */
void wandb_forward_stop(struct wandb_forward *f);

#endif
