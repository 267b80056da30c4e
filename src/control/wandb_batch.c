/* wandb_batch.c - one W&B post of a job (wandb_batch.h). */
#include "control/wandb_batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/job.h"

json_t *wandb_history_line(const struct store_event *ev)
{
    if (strcmp(ev->type, "metrics") != 0 || !ev->data[0])
        return NULL;
    json_t *d = json_loads(ev->data, 0, NULL);
    json_t *step = json_object_get(d, "step");
    if (!json_is_integer(step)) {
        json_decref(d);
        return NULL;
    }
    json_t *line = json_object();
    json_object_set_new(line, "_step", json_integer(json_integer_value(step)));
    json_object_set_new(line, "_timestamp", json_real((double)ev->created_ms / 1000.0));
    const char *k;
    json_t *v;
    json_object_foreach(d, k, v)
    {
        if (strcmp(k, "step") != 0 && json_is_number(v))
            json_object_set(line, k, v);
    }
    json_decref(d);
    char *s = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(line);
    json_t *out = s ? json_string(s) : NULL;
    free(s);
    return out;
}

bool wandb_batch_plan(const struct store_job *j, int64_t sent_seq, const struct store_event *ev,
                      int n, struct wandb_batch *out)
{
    out->lines = json_array();
    out->last_seq = sent_seq;
    out->complete = false;
    if (!out->lines)
        return false;
    int64_t horizon = j->event_seq;
    for (int i = n - 1; i >= 0; i--) { /* newest first: oldest first here */
        if (ev[i].seq <= sent_seq || ev[i].seq > horizon)
            continue;
        json_t *line = wandb_history_line(&ev[i]);
        if (line && json_array_append_new(out->lines, line) != 0)
            return false;
        if (ev[i].seq > out->last_seq)
            out->last_seq = ev[i].seq;
    }
    out->complete = job_status_is_terminal(j->status) && out->last_seq >= horizon;
    return true;
}

/* Appends segment seg, percent-encoded, and a '/' to out at *at. */
static bool put_segment(char *out, size_t cap, size_t *at, const char *seg)
{
    static const char HEX[] = "0123456789ABCDEF";
    if (!seg[0] || strcmp(seg, ".") == 0 || strcmp(seg, "..") == 0)
        return false;
    for (const unsigned char *p = (const unsigned char *)seg; *p; p++) {
        unsigned char c = *p;
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                     (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
        size_t need = plain ? 1 : 3;
        if (*at + need + 1 >= cap)
            return false;
        if (plain) {
            out[(*at)++] = (char)c;
        } else {
            out[(*at)++] = '%';
            out[(*at)++] = HEX[c >> 4];
            out[(*at)++] = HEX[c & 15];
        }
    }
    out[(*at)++] = '/';
    out[*at] = 0;
    return true;
}

bool wandb_stream_url(const char *base, const char *entity, const char *project, const char *run,
                      char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/files/", base);
    if (n < 0 || (size_t)n >= cap)
        return false;
    size_t at = (size_t)n;
    if (!put_segment(out, cap, &at, entity) || !put_segment(out, cap, &at, project) ||
        !put_segment(out, cap, &at, run))
        return false;
    n = snprintf(out + at, cap - at, "file_stream");
    return n >= 0 && (size_t)n < cap - at;
}
