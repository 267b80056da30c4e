/* store.c - the store's front door: picks an implementation by URL
 * (store_open_url) and forwards every function of store.h to it.
 *
 * "sqlite:PATH" or a plain PATH is the embedded SQLite store (PATH a
 * database file, or a folder that holds alallo.db); "postgresql://…" and
 * "postgres://…" are PostgreSQL (any libpq URL).
 */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "store/account_cache.h"
#include "store/store_backend.h"

struct store {
    const struct store_ops *ops;
    struct store_impl *impl;
    struct account_cache accounts; /* found by key hash: one query less per request */
    store_job_hook_fn hook;
    void *hook_ctx;
};

_Thread_local char store_error_text[256];

const char *store_last_error(void) { return store_error_text; }

void store_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(store_error_text, sizeof store_error_text, fmt, ap);
    va_end(ap);
}

enum store_kind store_url_kind(const char *url)
{
    if (!strncmp(url, "postgresql://", 13) || !strncmp(url, "postgres://", 11))
        return STORE_POSTGRESQL;
    return STORE_SQLITE;
}

int store_sqlite_file(const char *url, char *path, size_t cap)
{
    if (!strncmp(url, "sqlite:", 7))
        url += 7;
    struct stat st;
    int n;
    if (stat(url, &st) == 0 && S_ISDIR(st.st_mode))
        n = snprintf(path, cap, "%s/alallo.db", url);
    else
        n = snprintf(path, cap, "%s", url);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

enum alallo_err store_open_url_at(const char *url, int version, struct store **out, char *err,
                                  size_t errcap)
{
    *out = NULL;
    struct store *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errcap, "out of memory");
        return ERR_NOMEM;
    }
    enum alallo_err e;
    if (store_url_kind(url) == STORE_POSTGRESQL) {
        s->ops = &store_pg_ops;
        e = store_pg_open_at(url, version, &s->impl, err, errcap);
    } else {
        char path[STORE_PATH_MAX];
        s->ops = &store_sqlite_ops;
        if (store_sqlite_file(url, path, sizeof path)) {
            snprintf(err, errcap, "the store's path is too long");
            e = ERR_INVALID;
        } else {
            e = store_sqlite_open_at(path, version, &s->impl, err, errcap);
        }
    }
    if (e) {
        free(s);
        return e;
    }
    account_cache_init(&s->accounts);
    *out = s;
    return ERR_OK;
}

enum alallo_err store_open_url(const char *url, struct store **out, char *err, size_t errcap)
{
    return store_open_url_at(url, store_schema_latest(), out, err, errcap);
}

enum alallo_err store_open(const char *path, struct store **out, char *err, size_t errcap)
{
    return store_open_url_at(path, store_schema_latest(), out, err, errcap);
}

enum alallo_err store_open_at(const char *path, int version, struct store **out, char *err,
                              size_t errcap)
{
    return store_open_url_at(path, version, out, err, errcap);
}

void store_close(struct store *s)
{
    if (!s)
        return;
    s->ops->close(s->impl);
    account_cache_destroy(&s->accounts);
    free(s);
}

const char *store_backend_name(struct store *s) { return s->ops->name; }

int store_schema_version(struct store *s)
{
    return s->ops->schema_version(s->impl);
}

enum alallo_err store_account_create(struct store *s, const char *name, const char *key_hash, struct store_account *out)
{
    return s->ops->account_create(s->impl, name, key_hash, out);
}

static int64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Every authenticated request asks this: a recent find is answered from
 * memory (account_cache.h says why that is the store's answer). */
enum alallo_err store_account_by_key_hash(struct store *s, const char *key_hash, struct store_account *out)
{
    int64_t now = monotonic_ms();
    if (account_cache_get(&s->accounts, key_hash, now, out))
        return ERR_OK;
    enum alallo_err e = s->ops->account_by_key_hash(s->impl, key_hash, out);
    if (!e)
        account_cache_put(&s->accounts, key_hash, out, now);
    return e;
}

enum alallo_err store_account_by_name(struct store *s, const char *name, struct store_account *out)
{
    return s->ops->account_by_name(s->impl, name, out);
}

/* A file's format column holds "FORMAT from CONVERTED_FROM" when the upload
 * was converted (schema 10 has no column of its own for it, and a format
 * never contains a space), else FORMAT alone: joined here on the way in and
 * split on the way out, the same for every backend. */
#define FORMAT_FROM " from "

static void file_format_split(struct store_file *f)
{
    char *from = strstr(f->format, FORMAT_FROM);
    f->converted_from[0] = '\0';
    if (!from)
        return;
    snprintf(f->converted_from, sizeof f->converted_from, "%s", from + strlen(FORMAT_FROM));
    *from = '\0';
}

enum alallo_err store_file_insert(struct store *s, const struct store_file *f)
{
    if (!f->converted_from[0])
        return s->ops->file_insert(s->impl, f);
    struct store_file joined = *f;
    int len = snprintf(joined.format, sizeof joined.format, "%s" FORMAT_FROM "%s", f->format,
                       f->converted_from);
    if (len < 0 || (size_t)len >= sizeof joined.format || strstr(f->format, FORMAT_FROM))
        return ERR_INVALID;
    return s->ops->file_insert(s->impl, &joined);
}

enum alallo_err store_file_get(struct store *s, const char *account, const char *id, struct store_file *out)
{
    enum alallo_err e = s->ops->file_get(s->impl, account, id, out);
    if (!e)
        file_format_split(out);
    return e;
}

enum alallo_err store_file_list(struct store *s, const char *account, const char *after, int limit, struct store_file *out, int *n, bool *has_more)
{
    enum alallo_err e = s->ops->file_list(s->impl, account, after, limit, out, n, has_more);
    for (int i = 0; !e && i < *n; i++)
        file_format_split(&out[i]);
    return e;
}

enum alallo_err store_file_delete(struct store *s, const char *account, const char *id, struct store_file *out)
{
    enum alallo_err e = s->ops->file_delete(s->impl, account, id, out);
    if (!e && out)
        file_format_split(out);
    return e;
}

enum alallo_err store_job_insert(struct store *s, struct store_job *job, const struct store_event *first_event)
{
    return s->ops->job_insert(s->impl, job, first_event);
}

enum alallo_err store_job_get(struct store *s, const char *account, const char *id, struct store_job *out)
{
    return s->ops->job_get(s->impl, account, id, out);
}

enum alallo_err store_job_by_model(struct store *s, const char *account, const char *model, struct store_job *out)
{
    return s->ops->job_by_model(s->impl, account, model, out);
}

enum alallo_err store_job_list(struct store *s, const char *account, const char *after, int limit, struct store_job *out, int *n, bool *has_more)
{
    return s->ops->job_list(s->impl, account, after, limit, out, n, has_more);
}

enum alallo_err store_job_list_models(struct store *s, const char *account, int limit, struct store_job *out, int *n)
{
    return s->ops->job_list_models(s->impl, account, limit, out, n);
}

enum alallo_err store_job_count_by_status(struct store *s, long counts[JOB_STATUS_COUNT])
{
    return s->ops->job_count_by_status(s->impl, counts);
}

enum alallo_err store_job_ids_in_status(struct store *s, enum job_status status, char (*ids)[IDS_MAX], int cap, int *n)
{
    return s->ops->job_ids_in_status(s->impl, status, ids, cap, n);
}

enum alallo_err store_waiting_each(struct store *s, int cap, store_waiting_fn fn, void *ctx)
{
    return s->ops->waiting_each(s->impl, cap, fn, ctx);
}

enum alallo_err store_claim_candidates(struct store *s, int64_t mem_bytes, struct store_claim_candidate *out, int cap, int *n)
{
    return s->ops->claim_candidates(s->impl, mem_bytes, out, cap, n);
}

void store_set_job_hook(struct store *s, store_job_hook_fn fn, void *ctx)
{
    s->hook = fn;
    s->hook_ctx = ctx;
}

/* The caller's callback, then the hook, as one callback. */
struct hooked {
    struct store *s;
    store_job_fn fn;
    void *ctx;
};

static enum alallo_err hooked_cb(struct store_job *job, struct store_attempt *att,
                                 struct store_writes *w, void *ctx)
{
    struct hooked *h = ctx;
    enum job_status before = job->status;
    enum alallo_err e = h->fn(job, att, w, h->ctx);
    if (!e)
        e = h->s->hook(before, job, w, h->s->hook_ctx);
    return e;
}

enum alallo_err store_job_update(struct store *s, const char *id, const char *attempt_id, store_job_fn fn, void *ctx)
{
    if (!s->hook)
        return s->ops->job_update(s->impl, id, attempt_id, fn, ctx);
    struct hooked h = {s, fn, ctx};
    return s->ops->job_update(s->impl, id, attempt_id, hooked_cb, &h);
}

enum alallo_err store_attempt_get(struct store *s, const char *id, struct store_attempt *out)
{
    return s->ops->attempt_get(s->impl, id, out);
}

enum alallo_err store_attempt_list(struct store *s, const char *job, struct store_attempt *out, int cap, int *n)
{
    return s->ops->attempt_list(s->impl, job, out, cap, n);
}

enum alallo_err store_attempt_list_open(struct store *s, const char *worker, struct store_attempt *out, int cap, int *n)
{
    return s->ops->attempt_list_open(s->impl, worker, out, cap, n);
}

enum alallo_err store_event_list(struct store *s, const char *job, int64_t before_seq, int limit, struct store_event *out, int *n, bool *has_more)
{
    return s->ops->event_list(s->impl, job, before_seq, limit, out, n, has_more);
}

enum alallo_err store_log_read(struct store *s, const char *job, const char *attempt, int64_t after_seq, struct store_log_line *out, int cap, int *n)
{
    return s->ops->log_read(s->impl, job, attempt, after_seq, out, cap, n);
}

enum alallo_err store_log_last_attempt(struct store *s, const char *job, char attempt[IDS_MAX])
{
    return s->ops->log_last_attempt(s->impl, job, attempt);
}

enum alallo_err store_checkpoint_list(struct store *s, const char *job, struct store_checkpoint *out, int cap, int *n)
{
    return s->ops->checkpoint_list(s->impl, job, out, cap, n);
}

enum alallo_err store_checkpoint_get(struct store *s, const char *job, long step, struct store_checkpoint *out)
{
    return s->ops->checkpoint_get(s->impl, job, step, out);
}

enum alallo_err store_worker_put(struct store *s, const struct store_worker *w)
{
    return s->ops->worker_put(s->impl, w);
}

enum alallo_err store_worker_get(struct store *s, const char *name, struct store_worker *out)
{
    return s->ops->worker_get(s->impl, name, out);
}

enum alallo_err store_worker_list(struct store *s, struct store_worker *out, int cap, int *n)
{
    return s->ops->worker_list(s->impl, out, cap, n);
}

enum alallo_err store_worker_heartbeat(struct store *s, const char *name, int64_t now_ms)
{
    return s->ops->worker_heartbeat(s->impl, name, now_ms);
}

enum alallo_err store_worker_set_state(struct store *s, const char *name, const char *state)
{
    return s->ops->worker_set_state(s->impl, name, state);
}

enum alallo_err store_worker_change_state(struct store *s, const char *name, const char *from, const char *to, int64_t silent_before_ms)
{
    return s->ops->worker_change_state(s->impl, name, from, to, silent_before_ms);
}

enum alallo_err store_ledger_list(struct store *s, const char *account, int64_t before_seq, int limit, struct store_ledger_row *out, int *n, bool *has_more)
{
    return s->ops->ledger_list(s->impl, account, before_seq, limit, out, n, has_more);
}

enum alallo_err store_calibration_list(struct store *s, int cap, struct store_calibration *out, int *n)
{
    return s->ops->calibration_list(s->impl, cap, out, n);
}

enum alallo_err store_webhook_insert(struct store *s, const struct store_webhook *w, int cap)
{
    return s->ops->webhook_insert(s->impl, w, cap);
}

enum alallo_err store_webhook_list(struct store *s, const char *account, struct store_webhook *out, int cap, int *n)
{
    return s->ops->webhook_list(s->impl, account, out, cap, n);
}

enum alallo_err store_webhook_get(struct store *s, const char *account, const char *id, struct store_webhook *out)
{
    return s->ops->webhook_get(s->impl, account, id, out);
}

enum alallo_err store_webhook_delete(struct store *s, const char *account, const char *id)
{
    return s->ops->webhook_delete(s->impl, account, id);
}

enum alallo_err store_delivery_list(struct store *s, const char *webhook, struct store_delivery *out, int cap, int *n)
{
    return s->ops->delivery_list(s->impl, webhook, out, cap, n);
}

enum alallo_err store_delivery_due(struct store *s, int64_t now_ms, struct store_delivery *out, int cap, int *n)
{
    return s->ops->delivery_due(s->impl, now_ms, out, cap, n);
}

enum alallo_err store_delivery_record(struct store *s, const struct store_delivery *d)
{
    return s->ops->delivery_record(s->impl, d);
}

enum alallo_err store_account_setting_put(struct store *s, const char *account, const char *key,
                                          const char *value)
{
    if (strlen(value) >= STORE_SETTING_MAX)
        return ERR_INVALID;
    return s->ops->setting_put(s->impl, account, key, value);
}

enum alallo_err store_account_setting_get(struct store *s, const char *account, const char *key,
                                          char *out, size_t cap)
{
    return s->ops->setting_get(s->impl, account, key, out, cap);
}

enum alallo_err store_cursor_put(struct store *s, const char *job, const char *kind,
                                 int64_t sent_seq, int64_t sent_lines)
{
    return s->ops->cursor_put(s->impl, job, kind, sent_seq, sent_lines);
}

enum alallo_err store_cursor_pending(struct store *s, const char *kind, struct store_cursor *out,
                                     int cap, int *n)
{
    *n = 0;
    if (cap < 1)
        return ERR_INVALID;
    return s->ops->cursor_pending(s->impl, kind, out, cap, n);
}
