/* store_writes.c - queueing rows for one store_job_update() transaction.
 * Shared by every store implementation. Arrays are allocated on first use
 * at their full (small) cap, so a callback never sees a partial append. */
#include "store/store_writes.h"

#include <stdlib.h>
#include <string.h>

static int copy_str(char *dst, size_t cap, const char *src)
{
    if (!src)
        src = "";
    size_t n = strlen(src);
    if (n >= cap)
        return -1;
    memcpy(dst, src, n + 1);
    return 0;
}

/* Makes room for one more row of `size` bytes in *arr; NULL when full. */
static void *slot(void **arr, int *n, size_t size)
{
    if (*n >= STORE_WRITES_CAP)
        return NULL;
    if (!*arr) {
        *arr = calloc(STORE_WRITES_CAP, size);
        if (!*arr)
            return NULL;
    }
    void *p = (char *)*arr + (size_t)(*n) * size;
    memset(p, 0, size);
    (*n)++;
    return p;
}

enum alallo_err store_writes_log(struct store_writes *w, const char *attempt, const char *line)
{
    struct store_log_line *l = slot((void **)&w->logs, &w->n_logs, sizeof *l);
    if (!l)
        return ERR_TOO_LARGE;
    if (copy_str(l->attempt, sizeof l->attempt, attempt)) {
        w->n_logs--;
        return ERR_INVALID;
    }
    /* A log line is one line: stop at the first newline, cut to the cap. */
    size_t n = 0;
    if (line)
        while (line[n] && line[n] != '\n' && line[n] != '\r' && n + 1 < sizeof l->line)
            n++;
    if (n)
        memcpy(l->line, line, n);
    l->line[n] = '\0';
    return ERR_OK;
}

enum alallo_err store_writes_event(struct store_writes *w, int64_t created_ms, const char *level,
                                   const char *type, const char *message, const char *data_json)
{
    struct store_event *e = slot((void **)&w->events, &w->n_events, sizeof *e);
    if (!e)
        return ERR_TOO_LARGE;
    e->created_ms = created_ms;
    if (copy_str(e->level, sizeof e->level, level) || copy_str(e->type, sizeof e->type, type) ||
        copy_str(e->message, sizeof e->message, message) ||
        copy_str(e->data, sizeof e->data, data_json)) {
        w->n_events--;
        return ERR_INVALID;
    }
    return ERR_OK;
}

enum alallo_err store_writes_checkpoint(struct store_writes *w, const struct store_checkpoint *c)
{
    struct store_checkpoint *d = slot((void **)&w->checkpoints, &w->n_checkpoints, sizeof *d);
    if (!d)
        return ERR_TOO_LARGE;
    *d = *c;
    return ERR_OK;
}

enum alallo_err store_writes_ledger(struct store_writes *w, const struct store_ledger_row *r)
{
    struct store_ledger_row *d = slot((void **)&w->ledger, &w->n_ledger, sizeof *d);
    if (!d)
        return ERR_TOO_LARGE;
    *d = *r;
    return ERR_OK;
}

enum alallo_err store_writes_calibration(struct store_writes *w,
                                         const struct store_calibration *k)
{
    struct store_calibration *d = slot((void **)&w->calibration, &w->n_calibration, sizeof *d);
    if (!d)
        return ERR_TOO_LARGE;
    *d = *k;
    return ERR_OK;
}

enum alallo_err store_writes_attempt(struct store_writes *w, const struct store_attempt *a)
{
    struct store_attempt *d = slot((void **)&w->attempts, &w->n_attempts, sizeof *d);
    if (!d)
        return ERR_TOO_LARGE;
    *d = *a;
    return ERR_OK;
}

enum alallo_err store_writes_webhook_event(struct store_writes *w,
                                           const struct store_webhook_event *ev)
{
    struct store_webhook_event *d =
        slot((void **)&w->webhook_events, &w->n_webhook_events, sizeof *d);
    if (!d)
        return ERR_TOO_LARGE;
    *d = *ev;
    return ERR_OK;
}

void store_writes_reset(struct store_writes *w)
{
    w->n_logs = w->n_events = w->n_checkpoints = w->n_ledger = w->n_attempts = 0;
    w->n_calibration = 0;
    w->n_webhook_events = 0;
}

void store_writes_free(struct store_writes *w)
{
    if (!w)
        return;
    free(w->logs);
    free(w->events);
    free(w->checkpoints);
    free(w->ledger);
    free(w->calibration);
    free(w->attempts);
    free(w->webhook_events);
    memset(w, 0, sizeof *w);
}

int store_writes_checkpoint_count(const struct store_writes *w) { return w->n_checkpoints; }

const struct store_checkpoint *store_writes_checkpoint_at(const struct store_writes *w, int i)
{
    return i >= 0 && i < w->n_checkpoints ? &w->checkpoints[i] : NULL;
}
