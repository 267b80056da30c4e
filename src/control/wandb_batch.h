/* wandb_batch.h - what one W&B post of a job carries (wandb_forward.h):
 * the history lines of the job's metrics events after the cursor, the
 * cursor's next place, and whether the post ends the run.
 *
 * The job and its events are read one after the other, not in one
 * snapshot; a job's status and the events of that change are committed
 * together (store_job_update). So the batch takes only events up to the
 * job's own event count as read (the horizon): an event past it may belong
 * to a change, such as the job's end, that the job as read does not show,
 * and the cursor must not move past it before a read that shows that
 * change, or the run would never be marked complete. The run is complete
 * when the job as read has ended and the batch reaches its horizon.
 *
 * Also the URL of that post (wandb_stream_url), every path segment encoded.
 */
#ifndef ALALLO_CONTROL_WANDB_BATCH_H
#define ALALLO_CONTROL_WANDB_BATCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

struct wandb_batch {
    json_t *lines;    /* owned: history lines (JSON strings), oldest first */
    int64_t last_seq; /* the cursor's next sent_seq */
    bool complete;    /* this post marks the run complete */
};

/* Plans the post after cursor sent_seq for job j (as read before the
 * events) from ev[n] (newest first, as store_event_list gives them).
 * Returns false only when out of memory. The caller frees out->lines. */
bool wandb_batch_plan(const struct store_job *j, int64_t sent_seq, const struct store_event *ev,
                      int n, struct wandb_batch *out /* OUT */);

/* One history line of a metrics event: its numeric metrics by name,
 * _step and _timestamp (seconds); NULL for events without a step (e.g.
 * peak memory) or when out of memory. */
json_t *wandb_history_line(const struct store_event *ev);

/* The run's file_stream URL, BASE/files/ENTITY/PROJECT/RUN/file_stream,
 * into out[cap] with each of the three segments percent-encoded (every
 * byte but ASCII letters, digits, '-', '_', '.' and '~'). false when a
 * segment is empty, "." or ".." (it would not name itself in a path), or
 * the URL does not fit cap. */
bool wandb_stream_url(const char *base, const char *entity, const char *project, const char *run,
                      char *out /* OUT [cap] */, size_t cap);

#endif
