/* webhook_events.c - the webhook events a job change raises
 * (webhook_events.h). */
#include "control/webhook_events.h"

#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/ids.h"

static const char *const known[] = {
    "fine_tuning.job.succeeded",  "fine_tuning.job.failed",
    "fine_tuning.job.cancelled",  "alallo.fine_tuning.job.status",
    "alallo.fine_tuning.job.checkpoint",
};

bool webhook_event_type_known(const char *type)
{
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(type, known[i]) == 0)
            return true;
    return false;
}

/* Queues one event whose data object is {"id": job, <data_rest>}. */
static enum alallo_err queue(struct store_writes *w, const struct store_job *job,
                             const char *type, const char *data_rest, int64_t now_ms)
{
    struct store_webhook_event ev = {0};
    ids_make(ev.event_id, sizeof ev.event_id, "evt_");
    snprintf(ev.type, sizeof ev.type, "%s", type);
    ev.created_ms = now_ms;
    int n = snprintf(ev.body, sizeof ev.body,
                     "{\"id\":\"%s\",\"object\":\"event\",\"created_at\":%lld,\"type\":\"%s\","
                     "\"data\":{\"id\":\"%s\"%s}}",
                     ev.event_id, (long long)(now_ms / 1000), type, job->id, data_rest);
    if (n < 0 || (size_t)n >= sizeof ev.body)
        return ERR_INTERNAL;
    return store_writes_webhook_event(w, &ev);
}

enum alallo_err webhook_events_hook(enum job_status before, const struct store_job *job,
                                    struct store_writes *w, void *ctx)
{
    (void)ctx;
    int64_t now = clock_now_ms();
    enum alallo_err e = ERR_OK;
    char rest[256];
    for (int i = 0; !e && i < store_writes_checkpoint_count(w); i++) {
        const struct store_checkpoint *k = store_writes_checkpoint_at(w, i);
        snprintf(rest, sizeof rest, ",\"step\":%ld,\"train_loss\":%.6g", k->step, k->train_loss);
        e = queue(w, job, "alallo.fine_tuning.job.checkpoint", rest, now);
    }
    if (e || job->status == before)
        return e;
    snprintf(rest, sizeof rest, ",\"status\":\"%s\",\"previous_status\":\"%s\"",
             job_status_name(job->status), job_status_name(before));
    e = queue(w, job, "alallo.fine_tuning.job.status", rest, now);
    const char *end = job->status == JOB_SUCCEEDED   ? "fine_tuning.job.succeeded"
                      : job->status == JOB_FAILED    ? "fine_tuning.job.failed"
                      : job->status == JOB_CANCELLED ? "fine_tuning.job.cancelled"
                                                     : NULL;
    if (!e && end)
        e = queue(w, job, end, "", now);
    return e;
}
