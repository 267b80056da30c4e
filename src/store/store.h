/* store.h - the control plane's state store: accounts, files, jobs,
 * attempts, events, training log lines, checkpoints, workers and the ledger.
 *
 * The interface is narrow on purpose: an opaque handle, plain structs in and
 * out, and no SQL outside the implementations: store_sqlite.c (embedded,
 * the default) and store_pg.c (PostgreSQL, for clusters), chosen by URL
 * (store_open_url). Every function is thread-safe.
 *
 * Durability: a function that writes returns only after its transaction has
 * committed and reached the disk (SQLite WAL, synchronous=FULL; PostgreSQL
 * synchronous_commit as the server is set, on by default). Concurrent job
 * creations are committed together in one transaction (group commit); each
 * caller still returns only after that commit is on disk.
 *
 * Lifecycle changes go through store_job_update(): it loads a job (and one
 * of its attempts), hands them to a caller's function under the store's
 * write lock, and writes back the job, the attempt and everything the
 * function queued in `struct store_writes`, all in one transaction. The
 * rules live in the caller (src/control/lifecycle.c); the store only makes them
 * atomic. On PostgreSQL, updates of different jobs run at once, and an
 * update whose transaction hits a serialization failure or a deadlock is
 * run again from the start, callback included: a callback must change
 * nothing but its job, its attempt and its writes (docs/store.md).
 *
 * Times are milliseconds since the Unix epoch. Strings are NUL-terminated
 * and fit their arrays; inputs longer than an array are refused with
 * ERR_INVALID, never cut silently.
 */
#ifndef ALALLO_STORE_STORE_H
#define ALALLO_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/ids.h"
#include "core/job.h"
#include "core/keys.h"

struct store;

#define STORE_NAME_MAX 128
#define STORE_PATH_MAX 1024
#define STORE_MESSAGE_MAX 512
#define STORE_JSON_SMALL 512
#define STORE_JSON_MAX 4096
#define STORE_LOG_LINE_MAX 1024
#define STORE_LIST_MAX 100 /* most rows one list call returns */
#define STORE_LEDGER_STATE_MAX 12288

struct store_account {
    char id[IDS_MAX];
    char name[STORE_NAME_MAX];
    int64_t created_ms;
};

struct store_file {
    char id[IDS_MAX];
    char account[IDS_MAX];
    char filename[256];
    int64_t bytes;
    char purpose[32];
    long examples;
    int64_t text_bytes; /* bytes of prompt/completion/content text */
    char path[STORE_PATH_MAX];
    int64_t created_ms;
    /* dataset_format_name: "chat", ..., "preference"; "" unknown. Sized for
     * the stored form "FORMAT from CONVERTED_FROM" a backend reads. */
    char format[56];
    /* "alpaca", "sharegpt", "alpaca+sharegpt" when the upload was converted
     * to chat form (dataset_check_converted_from); "" otherwise. Kept in the
     * files table's format column with the format ("chat from alpaca"), so
     * no column of its own: the dispatcher (store.c) joins and splits it. */
    char converted_from[24];
};

struct store_job {
    int64_t seq; /* insertion order; set by the store */
    char id[IDS_MAX];
    char account[IDS_MAX];
    char name[STORE_NAME_MAX];
    char model[STORE_NAME_MAX];
    char training_file[IDS_MAX];
    char validation_file[IDS_MAX]; /* "" when none */
    char method[32];               /* "supervised" */
    char precision[16];            /* "16-bit" | "4-bit" */
    char goal[32];                 /* "lowest_cost" | "fastest_finish" */
    char adapter[16];              /* "lora" | "full" */
    char suffix[64];
    int n_epochs;
    int batch_size;
    double lr_multiplier;
    int64_t seed;
    long examples;
    int64_t tokens;       /* training tokens of one epoch (estimated at creation) */
    int64_t memory_bytes; /* memory the job needs on a worker */
    long max_steps;
    long steps_done;
    enum job_status status;
    char message[STORE_MESSAGE_MAX];
    char estimate[STORE_JSON_MAX]; /* JSON object, "" when none */
    /* The estimate's numbers, kept beside its text so that hot paths
     * (time left, limits, billing) need not parse it. 0 when unknown. */
    double est_low_s, est_high_s;             /* submit to finish */
    double est_train_low_s, est_train_high_s; /* training alone */
    double est_price_high;
    double price_charged;
    double price_refunded;
    char fine_tuned_model[256]; /* "" until it succeeds */
    int64_t created_ms, started_ms, finished_ms; /* 0 when not yet */
    char metadata[STORE_JSON_MAX];               /* JSON object or "" */
    int64_t fence;                               /* grows by one per attempt */
    char active_attempt[IDS_MAX];                /* "" when no attempt runs */
    char stop_reason[32]; /* "", "cancel", "move", "time_limit", "budget" */
    int64_t running_ms;   /* running time of ended attempts */
    int64_t run_started_ms; /* when the current attempt reported `started`; 0 if none */
    long run_start_step;    /* the step the current attempt started from */
    double train_loss;      /* latest reported; NAN-free: 0 when none */
    double first_loss;      /* of the job's first reported step; 0 when none */
    int64_t trained_tokens;
    int64_t log_seq;   /* lines in the training log so far */
    int64_t event_seq; /* events so far */
    int internal_failure; /* 1 when it failed on alallo's side (counted in /metrics) */
    /* The scheduler's state of the job, opaque to the store: its plan (the
     * estimate's nominal parts) and its ledger (src/control/sched_link.h). */
    char plan[STORE_JSON_SMALL];
    /* Further hyper-parameters as the API took them (api/job_request.h):
     * a JSON object, "" for the defaults; with the job's integrations
     * (core/integrations.h) it may pass STORE_JSON_SMALL. */
    char hyper[STORE_JSON_MAX];
    char ledger_state[STORE_LEDGER_STATE_MAX];
};

struct store_attempt {
    char id[IDS_MAX];
    char job[IDS_MAX];
    char worker[STORE_NAME_MAX];
    int64_t fence;
    char status[16]; /* "starting", "running", "ended" */
    long start_step, end_step;
    char reason[STORE_MESSAGE_MAX]; /* why it ended: "succeeded", "worker lost", ... */
    double price_per_hour;          /* the worker's rate when it started */
    int64_t started_ms, ended_ms;
    int64_t run_ms; /* time from `started` to its end (to its last report when its
                     * worker was lost): the billable span */
    int64_t events_applied; /* trainer events applied so far (resent ones are skipped) */
    double t_started; /* the trainer's clock (its events' `t`) at `started`; -1 before */
    double t_last;    /* the trainer's clock at its latest step report; -1 before */
    /* Attempts run by an engine (a Slurm job each; "" for registered workers). */
    char token_hash[KEYS_HASH_HEX];  /* hash of the attempt's own token, "" when none */
    char engine_id[32];              /* the engine's job id ("" before it is known)   */
    char engine_state[16];           /* "", "submitting", "pending", "running", "gone" */
    char engine_reason[STORE_MESSAGE_MAX]; /* why the engine holds it, in plain words */
    int64_t engine_running_ms;       /* when the engine began running it, 0 before   */
    int64_t heartbeat_ms;            /* the runner's latest heartbeat, 0 before       */
    char node[STORE_NAME_MAX];       /* the node the runner is on, "" before          */
    char resume_from[STORE_PATH_MAX]; /* the checkpoint it resumes from, "" for none  */
};

struct store_event {
    int64_t seq;
    char job[IDS_MAX];
    int64_t created_ms;
    char level[8]; /* "info", "warn", "error" */
    char type[16]; /* "message", "metrics" */
    char message[STORE_MESSAGE_MAX];
    char data[STORE_JSON_SMALL]; /* JSON object or "" */
};

struct store_log_line {
    int64_t seq;
    char attempt[IDS_MAX];
    char line[STORE_LOG_LINE_MAX];
};

struct store_checkpoint {
    char job[IDS_MAX];
    long step;
    char path[STORE_PATH_MAX];
    double train_loss;
    int64_t created_ms;
    /* the other metrics the trainer measured by then, a JSON object by
     * their OpenAI names ("valid_loss", "full_valid_loss", ...); "" none */
    char metrics[STORE_JSON_SMALL];
};

struct store_worker {
    char name[STORE_NAME_MAX];
    char resources[STORE_JSON_SMALL]; /* {"cpus","mem_bytes","accelerator"} */
    int cpus;
    int64_t mem_bytes;
    char class_[16];
    double price_per_hour;
    char state[16]; /* "active", "draining", "lost" */
    int64_t last_heartbeat_ms;
    char speed[STORE_JSON_SMALL]; /* {"tokens_per_s","flops"} */
    double tokens_per_s;          /* 0 when unknown */
    double flops;                 /* 0 when unknown */
    int64_t registered_ms;
};

struct store_ledger_row {
    int64_t seq;
    char account[IDS_MAX];
    char job[IDS_MAX];
    char attempt[IDS_MAX];
    char kind[8]; /* "charge" | "refund" */
    double amount;
    long steps;
    int64_t created_ms;
    long from_step, to_step; /* the steps (from, to] the row is for */
    char reason[64];         /* ledger_reason_text(), "" on rows written before it */
};

/* One actual/nominal pair of the estimator's calibration history (kind
 * "train": an attempt's training, a = its training; kind "job": a
 * succeeded job, a = its start, b = its training; kind "factor" (before,
 * "model"): an attempt's training against the plain FLOPs model, for
 * `model`; control/sched_link.h). Numbers are the estimator's enums
 * (src/sched/estimator.h). */
struct store_calibration {
    char kind[8];
    int method, class_, waited, goal;
    double actual_a, nominal_a, actual_b, nominal_b;
    int64_t created_ms;
    char model[STORE_NAME_MAX]; /* "" unless kind "factor" (or "model") */
};

/* Rows queued by a store_job_update() callback, written in its
 * transaction. Filled with the store_writes_* helpers; owned by the store. */
struct store_writes;

/* ---- opening ---------------------------------------------------------- */

enum store_kind { STORE_SQLITE, STORE_POSTGRESQL };

/* Which implementation `url` names: "postgresql://…" and "postgres://…"
 * (libpq URLs) are PostgreSQL; "sqlite:PATH" and a plain PATH are SQLite. */
enum store_kind store_url_kind(const char *url);

/* Opens the store `url` names (store_url_kind) and brings its schema up to
 * date, as store_open does. A SQLite PATH is a database file, or a folder
 * that holds (or will hold) alallo.db. A PostgreSQL database must exist;
 * its tables are created on first open. On error returns non-zero and
 * writes a one-line reason into err. */
enum alallo_err store_open_url(const char *url, struct store **out /* OUT */, char *err,
                               size_t errcap);

/* store_open_url migrating only up to `version` (see store_open_at). */
enum alallo_err store_open_url_at(const char *url, int version, struct store **out /* OUT */,
                                  char *err, size_t errcap);

/* "sqlite" or "postgresql". */
const char *store_backend_name(struct store *s);

/* Opens (creating if needed) the store at `path` (or any URL of
 * store_open_url) and brings its schema up to date, applying each missing migration in order in one transaction.
 * On error returns non-zero and writes a one-line reason into err. */
enum alallo_err store_open(const char *path, struct store **out /* OUT */, char *err,
                           size_t errcap);

/* Like store_open, but migrates only up to schema `version` (1..latest;
 * PostgreSQL: store_pg_first_version()..latest). For tests that prove later
 * migrations apply on top of old data. */
enum alallo_err store_open_at(const char *path, int version, struct store **out /* OUT */,
                              char *err, size_t errcap);

/* Closes the store; NULL is fine. */
void store_close(struct store *s);

/* The schema version the store is at (the number of migrations applied). */
int store_schema_version(struct store *s);

/* The newest schema version this build knows. */
int store_schema_latest(void);

/* ---- accounts --------------------------------------------------------- */

/* Creates an account named `name` whose API key hashes to `key_hash`.
 * ERR_CONFLICT when the name exists. */
enum alallo_err store_account_create(struct store *s, const char *name, const char *key_hash,
                                     struct store_account *out /* OUT, may be NULL */);
/* The account whose API key hashes to key_hash; ERR_NOT_FOUND when none.
 * A find is remembered for a few seconds (store/account_cache.h: an
 * account never changes, so that is still the store's answer). */
enum alallo_err store_account_by_key_hash(struct store *s, const char *key_hash,
                                          struct store_account *out /* OUT */);
enum alallo_err store_account_by_name(struct store *s, const char *name,
                                      struct store_account *out /* OUT */);

/* ---- files ------------------------------------------------------------ */

enum alallo_err store_file_insert(struct store *s, const struct store_file *f);

/* The file `id` of `account`; ERR_NOT_FOUND when absent or another's. */
enum alallo_err store_file_get(struct store *s, const char *account, const char *id,
                               struct store_file *out /* OUT */);

/* Files of `account`, newest first, after the file `after` (NULL: from the
 * newest), at most `limit` (<= STORE_LIST_MAX) into out[]. */
enum alallo_err store_file_list(struct store *s, const char *account, const char *after,
                                int limit, struct store_file *out /* OUT [limit] */,
                                int *n /* OUT */, bool *has_more /* OUT */);

/* Deletes the row; `out` gets it first (to remove its data). ERR_CONFLICT,
 * and nothing deleted, when a job of `account` that has not ended trains
 * or validates on it: checked in the transaction that deletes, so a job
 * insert racing the delete either commits first (and the delete is
 * refused) or finds the file gone. */
enum alallo_err store_file_delete(struct store *s, const char *account, const char *id,
                                  struct store_file *out /* OUT, may be NULL */);

/* ---- jobs ------------------------------------------------------------- */

/* Inserts a new job and its first event; returns once committed and on
 * disk. Concurrent calls share one transaction (group commit). Sets
 * job->seq. ERR_CONFLICT when the id exists; ERR_NOT_FOUND, and nothing
 * inserted, when its training or validation file is not (or no longer) a
 * file of its account, checked in the transaction that inserts it. */
enum alallo_err store_job_insert(struct store *s, struct store_job *job /* IN/OUT */,
                                 const struct store_event *first_event /* may be NULL */);

/* The job `id`; with `account` non-NULL only if it belongs to it. */
enum alallo_err store_job_get(struct store *s, const char *account, const char *id,
                              struct store_job *out /* OUT */);

/* The succeeded job of `account` whose fine_tuned_model is `model`. */
enum alallo_err store_job_by_model(struct store *s, const char *account, const char *model,
                                   struct store_job *out /* OUT */);

/* Jobs of `account`, newest first, after the job `after` (NULL: from the
 * newest); at most `limit` (1..STORE_LIST_MAX). ERR_NOT_FOUND when `after`
 * is not one of the account's jobs. */
enum alallo_err store_job_list(struct store *s, const char *account, const char *after,
                               int limit, struct store_job *out /* OUT [limit] */, int *n /* OUT */,
                               bool *has_more /* OUT */);

/* Succeeded jobs of `account` with a fine-tuned model, newest first. */
enum alallo_err store_job_list_models(struct store *s, const char *account, int limit,
                                      struct store_job *out /* OUT [limit] */, int *n /* OUT */);

/* counts[status] = jobs in each status (all accounts). */
enum alallo_err store_job_count_by_status(struct store *s, long counts[JOB_STATUS_COUNT]);

/* Ids of jobs in `status` (all accounts), oldest first, at most cap. */
enum alallo_err store_job_ids_in_status(struct store *s, enum job_status status,
                                        char (*ids)[IDS_MAX] /* OUT [cap] */, int cap,
                                        int *n /* OUT */);

/* A job that waits or runs, as a scheduling pass reads it: only the
 * fields the pass needs, so that it can read ten thousand in one query. */
struct store_waiting {
    char id[IDS_MAX];
    char account[IDS_MAX];
    char model[STORE_NAME_MAX];
    enum job_status status;
    char message[64];     /* the job's message, cut to fit */
    char stop_reason[32];
    bool running;         /* an attempt is active                         */
    int64_t created_ms;
    int64_t memory_bytes;
    int64_t tokens;       /* of one epoch                                 */
    long examples, max_steps, steps_done;
    int n_epochs, batch_size;
    char plan[STORE_JSON_SMALL];
    double est_high_s;    /* the upper end of its estimate, submit to finish; 0 none */
};

/* Calls fn once per job that is queued, re-scheduling, running or
 * cancelling (all accounts), oldest first, at most cap of them, in one
 * read. fn must not call the store. ERR_IO on a failed read (fn may have
 * been called for some rows). */
typedef void (*store_waiting_fn)(const struct store_waiting *row, void *ctx);
enum alallo_err store_waiting_each(struct store *s, int cap, store_waiting_fn fn, void *ctx);

/* One candidate per account for a worker with `mem_bytes` of memory: that
 * account's oldest job waiting to be claimed (queued or re-scheduling, no
 * active attempt) whose memory need fits. */
struct store_claim_candidate {
    char job[IDS_MAX];
    char account[IDS_MAX];
    int64_t seq;
};
enum alallo_err store_claim_candidates(struct store *s, int64_t mem_bytes,
                                       struct store_claim_candidate *out /* OUT [cap] */,
                                       int cap, int *n /* OUT */);

/* Called by store_job_update() under the write lock with the job, the
 * attempt (NULL when none was asked for) and the writes to queue. Returning
 * non-zero rolls everything back and makes store_job_update return it. */
typedef enum alallo_err (*store_job_fn)(struct store_job *job /* IN/OUT */,
                                        struct store_attempt *attempt /* IN/OUT or NULL */,
                                        struct store_writes *w, void *ctx);

/* Runs fn on job `id` (and its attempt `attempt_id`, when non-NULL; it must
 * belong to the job, else ERR_NOT_FOUND) in one transaction, then writes
 * the job, the attempt and the queued writes, and commits durably. */
enum alallo_err store_job_update(struct store *s, const char *id, const char *attempt_id,
                                 store_job_fn fn, void *ctx);

/* ---- writes queued by an update callback ------------------------------ */

/* Appends a training log line (cut at the first newline and to
 * STORE_LOG_LINE_MAX-1 bytes) of `attempt`. */
enum alallo_err store_writes_log(struct store_writes *w, const char *attempt, const char *line);
/* Appends an event; data_json may be NULL. */
enum alallo_err store_writes_event(struct store_writes *w, int64_t created_ms, const char *level,
                                   const char *type, const char *message, const char *data_json);
enum alallo_err store_writes_checkpoint(struct store_writes *w, const struct store_checkpoint *c);
enum alallo_err store_writes_ledger(struct store_writes *w, const struct store_ledger_row *r);
/* Appends a calibration pair. */
enum alallo_err store_writes_calibration(struct store_writes *w,
                                         const struct store_calibration *k);
/* Inserts (or replaces, by id) another attempt row, e.g. a new attempt. */
enum alallo_err store_writes_attempt(struct store_writes *w, const struct store_attempt *a);

/* ---- attempts, events, log, checkpoints ------------------------------- */

enum alallo_err store_attempt_get(struct store *s, const char *id,
                                  struct store_attempt *out /* OUT */);

/* Attempts of `job`, oldest first, at most cap. */
enum alallo_err store_attempt_list(struct store *s, const char *job,
                                   struct store_attempt *out /* OUT [cap] */, int cap,
                                   int *n /* OUT */);

/* Attempts on `worker` that have not ended, oldest first; with worker ""
 * those of every worker (by worker name, then oldest first). */
enum alallo_err store_attempt_list_open(struct store *s, const char *worker,
                                        struct store_attempt *out /* OUT [cap] */, int cap,
                                        int *n /* OUT */);

/* Events of `job`, newest first, older than event number `before_seq`
 * (0: from the newest), at most `limit`. */
enum alallo_err store_event_list(struct store *s, const char *job, int64_t before_seq, int limit,
                                 struct store_event *out /* OUT [limit] */, int *n /* OUT */,
                                 bool *has_more /* OUT */);

/* Log lines of `job` and `attempt` (NULL: of every attempt) with
 * seq > after_seq, oldest first, at most cap. */
enum alallo_err store_log_read(struct store *s, const char *job, const char *attempt,
                               int64_t after_seq, struct store_log_line *out /* OUT [cap] */,
                               int cap, int *n /* OUT */);

/* The attempt that wrote the job's newest log line; "" when none. */
enum alallo_err store_log_last_attempt(struct store *s, const char *job,
                                       char attempt[IDS_MAX] /* OUT */);

/* Checkpoints of `job`, newest first, at most cap. */
enum alallo_err store_checkpoint_list(struct store *s, const char *job,
                                      struct store_checkpoint *out /* OUT [cap] */, int cap,
                                      int *n /* OUT */);

/* The checkpoint of `job` at `step`; ERR_NOT_FOUND when none. */
enum alallo_err store_checkpoint_get(struct store *s, const char *job, long step,
                                     struct store_checkpoint *out /* OUT */);

/* ---- workers ---------------------------------------------------------- */

/* Inserts or replaces the declaration of worker w->name. */
enum alallo_err store_worker_put(struct store *s, const struct store_worker *w);
enum alallo_err store_worker_get(struct store *s, const char *name,
                                 struct store_worker *out /* OUT */);
enum alallo_err store_worker_list(struct store *s, struct store_worker *out /* OUT [cap] */,
                                  int cap, int *n /* OUT */);
enum alallo_err store_worker_heartbeat(struct store *s, const char *name, int64_t now_ms);
enum alallo_err store_worker_set_state(struct store *s, const char *name, const char *state);

/* Compare-and-set of worker `name`'s state: it becomes `to` only while it
 * is `from` and, when silent_before_ms > 0, only while its last heartbeat
 * is older than that (a worker that spoke since is not lost). ERR_CONFLICT
 * when the worker is not in that state (or spoke since), or is unknown;
 * nothing changes then. The one way the control layer moves a worker
 * between states, so that a decision made on a stale read never undoes a
 * newer one. */
enum alallo_err store_worker_change_state(struct store *s, const char *name, const char *from,
                                          const char *to, int64_t silent_before_ms);

/* ---- ledger ----------------------------------------------------------- */

/* Ledger rows of `account`, newest first, older than row `before_seq` (0:
 * from the newest), at most `limit`. */
enum alallo_err store_ledger_list(struct store *s, const char *account, int64_t before_seq,
                                  int limit, struct store_ledger_row *out /* OUT [limit] */,
                                  int *n /* OUT */, bool *has_more /* OUT */);

/* ---- calibration ------------------------------------------------------ */

/* The newest `cap` calibration pairs, oldest first. */
enum alallo_err store_calibration_list(struct store *s, int cap,
                                       struct store_calibration *out /* OUT [cap] */,
                                       int *n /* OUT */);

/* ---- webhooks --------------------------------------------------------- */

#define STORE_URL_MAX 1024
#define STORE_WEBHOOK_EVENTS_MAX 256
#define STORE_EVENT_TYPE_MAX 48
#define STORE_ANSWER_MAX 256

/* An endpoint an account registered (POST /v1/webhooks). */
struct store_webhook {
    char id[IDS_MAX];
    char account[IDS_MAX];
    char url[STORE_URL_MAX];
    /* event types it wants, comma-separated ("a,b"); "" for every type */
    char events[STORE_WEBHOOK_EVENTS_MAX];
    char secret[64]; /* "whsec_…" (core/webhook_sign.h) */
    int64_t created_ms;
};

/* States of a delivery. */
enum store_delivery_state { STORE_DELIVERY_PENDING = 0, STORE_DELIVERY_DONE = 1, STORE_DELIVERY_GAVE_UP = 2 };

/* One event to send to one webhook: a row of the outbox. */
struct store_delivery {
    int64_t seq; /* outbox order; set by the store */
    char event_id[IDS_MAX]; /* "evt_…", the body's id and the webhook-id header */
    char webhook[IDS_MAX];
    char account[IDS_MAX];
    char job[IDS_MAX];
    char type[STORE_EVENT_TYPE_MAX];
    char body[STORE_JSON_SMALL]; /* the event object, as sent */
    int attempts;
    int64_t next_ms;  /* when to try next (pending) */
    int last_status;  /* HTTP status of the latest try; 0: none or no answer */
    char last_answer[STORE_ANSWER_MAX]; /* its answer's start, or why none came */
    enum store_delivery_state state;
    int64_t created_ms, delivered_ms; /* delivered_ms: 0 until delivered */
};

/* An event a job update raises, to be put in the outbox of every webhook
 * of the job's account that wants its type (store_writes_webhook_event). */
struct store_webhook_event {
    char event_id[IDS_MAX];
    char type[STORE_EVENT_TYPE_MAX];
    char body[STORE_JSON_SMALL];
    int64_t created_ms;
};

/* Queues an event of the job being updated: in the update's transaction,
 * a delivery row is inserted for each webhook of the job's account whose
 * events filter is "" or names ev->type. */
enum alallo_err store_writes_webhook_event(struct store_writes *w,
                                           const struct store_webhook_event *ev);

/* Called by store_job_update() after each run of its callback, in the same
 * transaction, with the status the job had before and the job and writes
 * as the callback left them: where the control layer queues the webhook
 * events a change raises. Non-zero rolls the update back. */
typedef enum alallo_err (*store_job_hook_fn)(enum job_status before,
                                             const struct store_job *job,
                                             struct store_writes *w, void *ctx);

/* Sets the hook (NULL: none). Call before the store is shared. */
void store_set_job_hook(struct store *s, store_job_hook_fn fn, void *ctx);

/* The checkpoints the current update has queued so far (for the hook). */
int store_writes_checkpoint_count(const struct store_writes *w);
const struct store_checkpoint *store_writes_checkpoint_at(const struct store_writes *w, int i);

/* Inserts w (its id, account, url, events, secret and created_ms set)
 * unless its account already has `cap` webhooks: then ERR_CONFLICT and
 * nothing is written. The count and the insert are one atomic step, so
 * concurrent inserts of one account never pass the cap together. */
enum alallo_err store_webhook_insert(struct store *s, const struct store_webhook *w, int cap);

/* Webhooks of `account`, oldest first, at most cap. */
enum alallo_err store_webhook_list(struct store *s, const char *account,
                                   struct store_webhook *out /* OUT [cap] */, int cap,
                                   int *n /* OUT */);

/* The webhook `id`; with `account` non-NULL only if it belongs to it. */
enum alallo_err store_webhook_get(struct store *s, const char *account, const char *id,
                                  struct store_webhook *out /* OUT */);

/* Deletes the webhook `id` of `account` and its deliveries (those not yet
 * sent are dropped). ERR_NOT_FOUND when absent or another's. */
enum alallo_err store_webhook_delete(struct store *s, const char *account, const char *id);

/* Deliveries of webhook `webhook`, newest first, at most cap. */
enum alallo_err store_delivery_list(struct store *s, const char *webhook,
                                    struct store_delivery *out /* OUT [cap] */, int cap,
                                    int *n /* OUT */);

/* Pending deliveries due by now_ms that are each the oldest pending one of
 * their (webhook, job): sending only these keeps a job's events in order
 * at each endpoint. Oldest first, at most cap. */
enum alallo_err store_delivery_due(struct store *s, int64_t now_ms,
                                   struct store_delivery *out /* OUT [cap] */, int cap,
                                   int *n /* OUT */);

/* Records a try of delivery `seq`: its attempts, last_status,
 * last_answer, state, next_ms and delivered_ms as d holds them. */
enum alallo_err store_delivery_record(struct store *s, const struct store_delivery *d);

/* ---- account settings and integration cursors (schema 13) ------------ */

#define STORE_SETTING_MAX 256 /* longest setting value, NUL included */

/* Sets account `account`'s setting `key` (e.g. "wandb_api_key") to
 * `value` ("" removes it), durably. ERR_INVALID when value does not fit
 * STORE_SETTING_MAX. Settings may be secrets: the store never logs them. */
enum alallo_err store_account_setting_put(struct store *s, const char *account, const char *key,
                                          const char *value);
/* Account `account`'s setting `key` into out[cap]; ERR_NOT_FOUND when unset. */
enum alallo_err store_account_setting_get(struct store *s, const char *account, const char *key,
                                          char *out /* OUT [cap] */, size_t cap);

/* A job's progress in forwarding its events to integration `kind`
 * ("wandb"): every event with seq <= sent_seq has been delivered. */
struct store_cursor {
    char job[IDS_MAX];
    char account[IDS_MAX];
    int64_t sent_seq;
    int64_t event_seq;  /* the job's events so far */
    int64_t sent_lines; /* the integration's own count (W&B: history lines sent) */
};
/* The sent_seq of a cursor whose forwarding stopped for good (the
 * forwarder's last try): no event is ever past it, so it is never pending. */
#define STORE_CURSOR_STOPPED INT64_MAX
/* Sets the cursor of (job, kind) to sent_seq and sent_lines, creating it when absent. A
 * cursor row may exist before its job does (it is made first, so that a
 * crash between the two loses no forwarding); pending ignores such rows. */
enum alallo_err store_cursor_put(struct store *s, const char *job, const char *kind,
                                 int64_t sent_seq, int64_t sent_lines);
/* Cursors of `kind` whose job has events past them, at most cap, in turns
 * between accounts: every account's oldest such job (oldest first), then
 * every account's second, and so on; so however many jobs one account has
 * pending, another's are among the first. */
enum alallo_err store_cursor_pending(struct store *s, const char *kind,
                                     struct store_cursor *out /* OUT [cap] */, int cap,
                                     int *n /* OUT */);

/* The last one-line reason of a failed store call on this thread. */
const char *store_last_error(void);

#endif
