/* store_backend.h - what a store implementation (store_sqlite.c,
 * store_pg.c) gives the dispatcher (store.c); not for callers, which use
 * store.h only.
 *
 * Each implementation defines its own `struct store_impl` (its connections,
 * locks and group-commit queue) and one `struct store_ops` of functions
 * with the contracts of store.h, taking its impl in place of the store.
 * The dispatcher owns the `struct store` that pairs the two.
 */
#ifndef ALALLO_STORE_BACKEND_H
#define ALALLO_STORE_BACKEND_H

#include <stdarg.h>

#include "store/store.h"

struct store_impl;

struct store_ops {
    const char *name; /* "sqlite" | "postgresql" */
    void (*close)(struct store_impl *s);
    int (*schema_version)(struct store_impl *s);
    enum alallo_err (*account_create)(struct store_impl *s, const char *name, const char *key_hash, struct store_account *out);
    enum alallo_err (*account_by_key_hash)(struct store_impl *s, const char *key_hash, struct store_account *out);
    enum alallo_err (*account_by_name)(struct store_impl *s, const char *name, struct store_account *out);
    enum alallo_err (*file_insert)(struct store_impl *s, const struct store_file *f);
    enum alallo_err (*file_get)(struct store_impl *s, const char *account, const char *id, struct store_file *out);
    enum alallo_err (*file_list)(struct store_impl *s, const char *account, const char *after, int limit, struct store_file *out, int *n, bool *has_more);
    enum alallo_err (*file_delete)(struct store_impl *s, const char *account, const char *id, struct store_file *out);
    enum alallo_err (*job_insert)(struct store_impl *s, struct store_job *job, const struct store_event *first_event);
    enum alallo_err (*job_get)(struct store_impl *s, const char *account, const char *id, struct store_job *out);
    enum alallo_err (*job_by_model)(struct store_impl *s, const char *account, const char *model, struct store_job *out);
    enum alallo_err (*job_list)(struct store_impl *s, const char *account, const char *after, int limit, struct store_job *out, int *n, bool *has_more);
    enum alallo_err (*job_list_models)(struct store_impl *s, const char *account, int limit, struct store_job *out, int *n);
    enum alallo_err (*job_count_by_status)(struct store_impl *s, long counts[JOB_STATUS_COUNT]);
    enum alallo_err (*job_ids_in_status)(struct store_impl *s, enum job_status status, char (*ids)[IDS_MAX], int cap, int *n);
    enum alallo_err (*waiting_each)(struct store_impl *s, int cap, store_waiting_fn fn, void *ctx);
    enum alallo_err (*claim_candidates)(struct store_impl *s, int64_t mem_bytes, struct store_claim_candidate *out, int cap, int *n);
    enum alallo_err (*job_update)(struct store_impl *s, const char *id, const char *attempt_id, store_job_fn fn, void *ctx);
    enum alallo_err (*attempt_get)(struct store_impl *s, const char *id, struct store_attempt *out);
    enum alallo_err (*attempt_list)(struct store_impl *s, const char *job, struct store_attempt *out, int cap, int *n);
    enum alallo_err (*attempt_list_open)(struct store_impl *s, const char *worker, struct store_attempt *out, int cap, int *n);
    enum alallo_err (*event_list)(struct store_impl *s, const char *job, int64_t before_seq, int limit, struct store_event *out, int *n, bool *has_more);
    enum alallo_err (*log_read)(struct store_impl *s, const char *job, const char *attempt, int64_t after_seq, struct store_log_line *out, int cap, int *n);
    enum alallo_err (*log_last_attempt)(struct store_impl *s, const char *job, char attempt[IDS_MAX]);
    enum alallo_err (*checkpoint_list)(struct store_impl *s, const char *job, struct store_checkpoint *out, int cap, int *n);
    enum alallo_err (*checkpoint_get)(struct store_impl *s, const char *job, long step, struct store_checkpoint *out);
    enum alallo_err (*worker_put)(struct store_impl *s, const struct store_worker *w);
    enum alallo_err (*worker_get)(struct store_impl *s, const char *name, struct store_worker *out);
    enum alallo_err (*worker_list)(struct store_impl *s, struct store_worker *out, int cap, int *n);
    enum alallo_err (*worker_heartbeat)(struct store_impl *s, const char *name, int64_t now_ms);
    enum alallo_err (*worker_set_state)(struct store_impl *s, const char *name, const char *state);
    enum alallo_err (*worker_change_state)(struct store_impl *s, const char *name, const char *from, const char *to, int64_t silent_before_ms);
    enum alallo_err (*ledger_list)(struct store_impl *s, const char *account, int64_t before_seq, int limit, struct store_ledger_row *out, int *n, bool *has_more);
    enum alallo_err (*calibration_list)(struct store_impl *s, int cap, struct store_calibration *out, int *n);
    enum alallo_err (*setting_put)(struct store_impl *s, const char *account, const char *key, const char *value);
    enum alallo_err (*setting_get)(struct store_impl *s, const char *account, const char *key, char *out, size_t cap);
    enum alallo_err (*cursor_put)(struct store_impl *s, const char *job, const char *kind, int64_t sent_seq, int64_t sent_lines);
    enum alallo_err (*cursor_pending)(struct store_impl *s, const char *kind, struct store_cursor *out, int cap, int *n);
    enum alallo_err (*webhook_insert)(struct store_impl *s, const struct store_webhook *w, int cap);
    enum alallo_err (*webhook_list)(struct store_impl *s, const char *account, struct store_webhook *out, int cap, int *n);
    enum alallo_err (*webhook_get)(struct store_impl *s, const char *account, const char *id, struct store_webhook *out);
    enum alallo_err (*webhook_delete)(struct store_impl *s, const char *account, const char *id);
    enum alallo_err (*delivery_list)(struct store_impl *s, const char *webhook, struct store_delivery *out, int cap, int *n);
    enum alallo_err (*delivery_due)(struct store_impl *s, int64_t now_ms, struct store_delivery *out, int cap, int *n);
    enum alallo_err (*delivery_record)(struct store_impl *s, const struct store_delivery *d);
};

/* The SQLite file that "sqlite:PATH" or a plain PATH names (PATH/alallo.db
 * when PATH is a folder); -1 when it does not fit cap. */
int store_sqlite_file(const char *url, char *path /* OUT [cap] */, size_t cap);

/* Opens the SQLite database file `path`, migrated up to `version`. */
enum alallo_err store_sqlite_open_at(const char *path, int version,
                                     struct store_impl **out /* OUT */, char *err,
                                     size_t errcap);
extern const struct store_ops store_sqlite_ops;

/* Opens the PostgreSQL database at libpq URL `url`, migrated up to
 * `version` (its list starts at store_pg_first_version()). */
enum alallo_err store_pg_open_at(const char *url, int version, struct store_impl **out /* OUT */,
                                 char *err, size_t errcap);
extern const struct store_ops store_pg_ops;
/* The oldest schema version a PostgreSQL store can be opened at: its first
 * migration is the whole schema of that version. */
int store_pg_first_version(void);
/* The newest schema version of the PostgreSQL list (must equal
 * store_schema_latest(), the SQLite list's). */
int store_pg_latest(void);

/* The thread's last one-line error (store_last_error()), shared by both. */
extern _Thread_local char store_error_text[256];
void store_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
