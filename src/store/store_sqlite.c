/* store_sqlite.c - the store (store.h) on SQLite.
 *
 * One writer connection behind a mutex and a small pool of reader
 * connections: WAL lets readers run while the writer commits. Every
 * connection runs with synchronous=FULL, so a COMMIT returns only after the
 * WAL is fsynced. Statements are prepared once per connection and reused.
 *
 * Group commit: store_job_insert() queues its job; the first caller that
 * finds no commit in progress becomes the leader, takes every queued job,
 * writes them in one transaction (a savepoint each, so one bad row fails
 * alone) and wakes the others after the COMMIT. Nobody returns before the
 * commit that holds their job is on disk.
 */
#include "store/store.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/store_backend.h"
#include "store/store_columns.h"
#include "store/store_group.h"
#include "store/store_writes.h"

#define READERS 8

/* ---- errors ----------------------------------------------------------- */

static void set_error(const char *what, sqlite3 *db)
{
    store_set_error("store: %s: %s", what, db ? sqlite3_errmsg(db) : "error");
}

/* Maps an SQLite result to the control plane's error. */
static enum alallo_err from_sqlite(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return ERR_OK;
    case SQLITE_CONSTRAINT:
        return ERR_CONFLICT;
    case SQLITE_NOMEM:
        return ERR_NOMEM;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return ERR_UNAVAILABLE;
    case SQLITE_TOOBIG:
        return ERR_TOO_LARGE;
    default:
        return ERR_IO;
    }
}

/* ---- schema ----------------------------------------------------------- */

/* Each entry is one migration; they run in order, each with the
 * schema_version update in one transaction. Never edit a released entry:
 * add a new one. */
static const char *const migrations[] = {
    /* 1: accounts, files, jobs, attempts, events, log, checkpoints, workers */
    "CREATE TABLE accounts(id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
    " key_hash TEXT NOT NULL UNIQUE, created INTEGER NOT NULL);"
    "CREATE TABLE files(seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,"
    " account TEXT NOT NULL, filename TEXT NOT NULL, bytes INTEGER NOT NULL,"
    " purpose TEXT NOT NULL, examples INTEGER NOT NULL, text_bytes INTEGER NOT NULL,"
    " path TEXT NOT NULL, created INTEGER NOT NULL);"
    "CREATE INDEX files_account ON files(account, seq);"
    "CREATE TABLE jobs(seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,"
    " account TEXT NOT NULL, name TEXT NOT NULL, model TEXT NOT NULL,"
    " training_file TEXT NOT NULL, validation_file TEXT NOT NULL, method TEXT NOT NULL,"
    " precision TEXT NOT NULL, goal TEXT NOT NULL, adapter TEXT NOT NULL,"
    " suffix TEXT NOT NULL, n_epochs INTEGER NOT NULL, batch_size INTEGER NOT NULL,"
    " lr_multiplier REAL NOT NULL, seed INTEGER NOT NULL, examples INTEGER NOT NULL,"
    " tokens INTEGER NOT NULL, memory_bytes INTEGER NOT NULL, max_steps INTEGER NOT NULL,"
    " steps_done INTEGER NOT NULL, status TEXT NOT NULL, message TEXT NOT NULL,"
    " estimate TEXT NOT NULL, price_charged REAL NOT NULL, price_refunded REAL NOT NULL,"
    " fine_tuned_model TEXT NOT NULL, created INTEGER NOT NULL, started INTEGER NOT NULL,"
    " finished INTEGER NOT NULL, metadata TEXT NOT NULL, fence INTEGER NOT NULL,"
    " active_attempt TEXT NOT NULL, stop_reason TEXT NOT NULL, running_ms INTEGER NOT NULL,"
    " run_started_ms INTEGER NOT NULL, run_start_step INTEGER NOT NULL,"
    " train_loss REAL NOT NULL, trained_tokens INTEGER NOT NULL, log_seq INTEGER NOT NULL,"
    " event_seq INTEGER NOT NULL, internal_failure INTEGER NOT NULL);"
    "CREATE INDEX jobs_account ON jobs(account, seq);"
    "CREATE INDEX jobs_status ON jobs(status);"
    "CREATE INDEX jobs_model ON jobs(fine_tuned_model) WHERE fine_tuned_model <> '';"
    "CREATE INDEX jobs_waiting ON jobs(account, seq)"
    " WHERE status IN ('queued','re-scheduling') AND active_attempt = '';"
    "CREATE TABLE attempts(id TEXT PRIMARY KEY, job TEXT NOT NULL, worker TEXT NOT NULL,"
    " fence INTEGER NOT NULL, status TEXT NOT NULL, start_step INTEGER NOT NULL,"
    " end_step INTEGER NOT NULL, reason TEXT NOT NULL, price_per_hour REAL NOT NULL,"
    " started INTEGER NOT NULL, ended INTEGER NOT NULL, run_ms INTEGER NOT NULL);"
    "CREATE INDEX attempts_job ON attempts(job, fence);"
    "CREATE INDEX attempts_open ON attempts(worker) WHERE status <> 'ended';"
    "CREATE TABLE events(job TEXT NOT NULL, seq INTEGER NOT NULL, created INTEGER NOT NULL,"
    " level TEXT NOT NULL, type TEXT NOT NULL, message TEXT NOT NULL, data TEXT NOT NULL,"
    " PRIMARY KEY(job, seq)) WITHOUT ROWID;"
    "CREATE TABLE log_lines(job TEXT NOT NULL, seq INTEGER NOT NULL, attempt TEXT NOT NULL,"
    " line TEXT NOT NULL, PRIMARY KEY(job, seq)) WITHOUT ROWID;"
    "CREATE INDEX log_attempt ON log_lines(job, attempt, seq);"
    "CREATE TABLE checkpoints(job TEXT NOT NULL, step INTEGER NOT NULL, path TEXT NOT NULL,"
    " train_loss REAL NOT NULL, created INTEGER NOT NULL, PRIMARY KEY(job, step)) WITHOUT ROWID;"
    "CREATE TABLE workers(name TEXT PRIMARY KEY, resources TEXT NOT NULL, cpus INTEGER NOT NULL,"
    " mem_bytes INTEGER NOT NULL, class TEXT NOT NULL, price_per_hour REAL NOT NULL,"
    " state TEXT NOT NULL, last_heartbeat INTEGER NOT NULL, speed TEXT NOT NULL,"
    " tokens_per_s REAL NOT NULL, flops REAL NOT NULL, registered INTEGER NOT NULL);",
    /* 2: the billing ledger */
    "CREATE TABLE ledger(seq INTEGER PRIMARY KEY AUTOINCREMENT, account TEXT NOT NULL,"
    " job TEXT NOT NULL, attempt TEXT NOT NULL, kind TEXT NOT NULL"
    " CHECK(kind IN ('charge','refund')), amount REAL NOT NULL, steps INTEGER NOT NULL,"
    " created INTEGER NOT NULL);"
    "CREATE INDEX ledger_account ON ledger(account, seq);",
    /* 3: the estimate's numbers as columns, filled from its JSON */
    "ALTER TABLE jobs ADD COLUMN est_low_s REAL NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN est_high_s REAL NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN est_train_low_s REAL NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN est_train_high_s REAL NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN est_price_high REAL NOT NULL DEFAULT 0;"
    "UPDATE jobs SET est_low_s = coalesce(json_extract(estimate, '$.time.low_s'), 0),"
    " est_high_s = coalesce(json_extract(estimate, '$.time.high_s'), 0),"
    " est_train_low_s = coalesce(json_extract(estimate, '$.training.low_s'), 0),"
    " est_train_high_s = coalesce(json_extract(estimate, '$.training.high_s'), 0),"
    " est_price_high = coalesce(json_extract(estimate, '$.price.high'), 0)"
    " WHERE json_valid(estimate);",
    /* 4: how many trainer events of an attempt were applied, so that a
     * batch a worker sends again is not applied twice */
    "ALTER TABLE attempts ADD COLUMN events_applied INTEGER NOT NULL DEFAULT 0;",
    /* 5: the scheduler's state: the job's plan and ledger (opaque texts of
     * src/control/sched_link.c), the trainer clock of attempts, ledger rows
     * with their steps and reason, and the calibration history */
    "ALTER TABLE jobs ADD COLUMN plan TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE jobs ADD COLUMN ledger_state TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE attempts ADD COLUMN t_started REAL NOT NULL DEFAULT -1;"
    "ALTER TABLE attempts ADD COLUMN t_last REAL NOT NULL DEFAULT -1;"
    "ALTER TABLE ledger ADD COLUMN from_step INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE ledger ADD COLUMN to_step INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE ledger ADD COLUMN reason TEXT NOT NULL DEFAULT '';"
    "CREATE TABLE calibration(seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,"
    " method INTEGER NOT NULL, class INTEGER NOT NULL, waited INTEGER NOT NULL,"
    " goal INTEGER NOT NULL, actual_a REAL NOT NULL, nominal_a REAL NOT NULL,"
    " actual_b REAL NOT NULL, nominal_b REAL NOT NULL, created INTEGER NOT NULL);",
    /* 6: the model a calibration pair is about (kind "model": how fast that
     * model trains against the FLOPs model) */
    "ALTER TABLE calibration ADD COLUMN model TEXT NOT NULL DEFAULT '';",
    /* 7: the jobs a scheduling pass reads (waiting and running), oldest
     * first, without a sort */
    "CREATE INDEX jobs_active ON jobs(seq)"
    " WHERE status IN ('queued','re-scheduling','running','cancelling');",
    /* 8: the training loss of the job's first step, to tell at the end
     * whether it learned (0: none reported) */
    "ALTER TABLE jobs ADD COLUMN first_loss REAL NOT NULL DEFAULT 0;",
    /* 9: attempts run by an engine (a Slurm job per attempt): the hash of
     * the attempt's own token, the engine's job id and state, why the
     * engine holds it, when it began running there, the runner's latest
     * heartbeat and node, and the checkpoint the attempt resumes from */
    "ALTER TABLE attempts ADD COLUMN token_hash TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE attempts ADD COLUMN engine_id TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE attempts ADD COLUMN engine_state TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE attempts ADD COLUMN engine_reason TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE attempts ADD COLUMN engine_running INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE attempts ADD COLUMN heartbeat INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE attempts ADD COLUMN node TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE attempts ADD COLUMN resume_from TEXT NOT NULL DEFAULT '';",
    /* 10: the job's further hyper-parameters (context, packing, LoRA, the
     * schedule, train_on_inputs, DPO), a JSON object ('' for older jobs:
     * the defaults); a file's format (dataset_format_name; '' for older
     * files: not preference pairs, which did not exist) */
    "ALTER TABLE jobs ADD COLUMN hyper TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE files ADD COLUMN format TEXT NOT NULL DEFAULT '';",
    /* 11: a checkpoint's validation metrics,
     * a JSON object ('' for none) */
    "ALTER TABLE checkpoints ADD COLUMN metrics TEXT NOT NULL DEFAULT '';",
    /* 12: webhooks an account registered, and the outbox of their
     * deliveries (state 0 pending, 1 delivered, 2 given up); the partial
     * index finds each (webhook, job)'s oldest pending one */
    "CREATE TABLE webhooks(seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,"
    " account TEXT NOT NULL, url TEXT NOT NULL, events TEXT NOT NULL, secret TEXT NOT NULL,"
    " created INTEGER NOT NULL);"
    "CREATE INDEX webhooks_account ON webhooks(account, seq);"
    "CREATE TABLE deliveries(seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL,"
    " webhook TEXT NOT NULL, account TEXT NOT NULL, job TEXT NOT NULL, type TEXT NOT NULL,"
    " body TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, next_try INTEGER NOT NULL,"
    " last_status INTEGER NOT NULL DEFAULT 0, last_answer TEXT NOT NULL DEFAULT '',"
    " state INTEGER NOT NULL DEFAULT 0, created INTEGER NOT NULL,"
    " delivered INTEGER NOT NULL DEFAULT 0, UNIQUE(webhook, event_id));"
    "CREATE INDEX deliveries_webhook ON deliveries(webhook, seq);"
    "CREATE INDEX deliveries_pending ON deliveries(webhook, job, seq) WHERE state = 0;",
    /* 13: an account's settings (the W&B API key) and each job's progress
     * in forwarding its events to an integration (docs/integrations.md) */
    "CREATE TABLE account_settings(account TEXT NOT NULL, key TEXT NOT NULL,"
    " value TEXT NOT NULL, PRIMARY KEY(account, key));"
    "CREATE TABLE integration_cursors(job TEXT NOT NULL, kind TEXT NOT NULL,"
    " sent_seq INTEGER NOT NULL, sent_lines INTEGER NOT NULL, PRIMARY KEY(job, kind));",
    /* 14: each endpoint's oldest pending delivery in one step, for the
     * sender's turns between endpoints (DLV_DUE_SQL) */
    "CREATE INDEX deliveries_heads ON deliveries(webhook, seq) WHERE state = 0;",
};
#define MIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

int store_schema_latest(void) { return MIGRATIONS; }

/* ---- statements ------------------------------------------------------- */

#define JOB_Q10 "?,?,?,?,?,?,?,?,?,?,"

enum sql_id {
    S_BEGIN,
    S_COMMIT,
    S_ROLLBACK,
    S_SAVEPOINT,
    S_RELEASE,
    S_ROLLBACK_TO,
    S_ACC_INSERT,
    S_ACC_BY_HASH,
    S_ACC_BY_NAME,
    S_FILE_INSERT,
    S_FILE_GET,
    S_FILE_LIST,
    S_FILE_LIST_AFTER,
    S_FILE_DELETE,
    S_FILE_IN_USE,
    S_FILE_EXISTS,
    S_JOB_INSERT,
    S_JOB_UPDATE,
    S_JOB_GET,
    S_JOB_GET_ACC,
    S_JOB_BY_MODEL,
    S_JOB_SEQ_ACC,
    S_JOB_LIST,
    S_JOB_LIST_AFTER,
    S_JOB_LIST_MODELS,
    S_JOB_COUNTS,
    S_JOB_IDS_STATUS,
    S_CLAIM,
    S_WAITING,
    S_ATT_PUT,
    S_ATT_GET,
    S_ATT_LIST,
    S_ATT_OPEN,
    S_EV_INSERT,
    S_EV_LIST,
    S_LOG_INSERT,
    S_LOG_READ,
    S_SET_PUT,
    S_SET_DEL,
    S_SET_GET,
    S_CUR_PUT,
    S_CUR_PENDING,
    S_LOG_READ_ALL,
    S_LOG_LAST,
    S_CK_PUT,
    S_CK_LIST,
    S_CK_GET,
    S_W_PUT,
    S_W_GET,
    S_W_LIST,
    S_W_HB,
    S_W_STATE,
    S_W_CHANGE,
    S_LED_INSERT,
    S_LED_LIST,
    S_CAL_INSERT,
    S_CAL_LIST,
    S_WH_INSERT,
    S_WH_LIST,
    S_WH_GET,
    S_WH_GET_ACC,
    S_WH_DELETE,
    S_WH_DELETE_DLV,
    S_DLV_ENQUEUE,
    S_DLV_LIST,
    S_DLV_DUE,
    S_DLV_RECORD,
    S_COUNT
};

static const char *const sql_text[S_COUNT] = {
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    [S_SAVEPOINT] = "SAVEPOINT one",
    [S_RELEASE] = "RELEASE one",
    [S_ROLLBACK_TO] = "ROLLBACK TO one",
    [S_ACC_INSERT] = "INSERT INTO accounts(id, name, key_hash, created) VALUES(?,?,?,?)",
    [S_ACC_BY_HASH] = "SELECT id, name, created FROM accounts WHERE key_hash = ?",
    [S_ACC_BY_NAME] = "SELECT id, name, created FROM accounts WHERE name = ?",
    [S_FILE_INSERT] = "INSERT INTO files(" FILE_COLS ") VALUES(?,?,?,?,?,?,?,?,?,?)",
    [S_FILE_GET] = "SELECT " FILE_COLS " FROM files WHERE id = ? AND account = ?",
    [S_FILE_LIST] = "SELECT " FILE_COLS " FROM files WHERE account = ? ORDER BY seq DESC LIMIT ?",
    [S_FILE_LIST_AFTER] = "SELECT " FILE_COLS " FROM files WHERE account = ?1 AND seq <"
                          " (SELECT seq FROM files WHERE id = ?2 AND account = ?1)"
                          " ORDER BY seq DESC LIMIT ?3",
    [S_FILE_DELETE] = "DELETE FROM files WHERE id = ? AND account = ?",
    [S_FILE_IN_USE] = "SELECT 1 FROM jobs WHERE account = ?1 AND (training_file = ?2 OR"
                      " validation_file = ?2) AND status NOT IN ('succeeded','failed','cancelled')"
                      " LIMIT 1",
    [S_FILE_EXISTS] = "SELECT 1 FROM files WHERE account = ?1 AND id = ?2",
    [S_JOB_INSERT] = "INSERT INTO jobs(" JOB_COLS ") VALUES(" JOB_Q10 JOB_Q10 JOB_Q10 JOB_Q10
                     "?,?,?,?,?,?,?,?,?,?)",
    [S_JOB_UPDATE] = "UPDATE jobs SET (" JOB_COLS ") = (" JOB_Q10 JOB_Q10 JOB_Q10 JOB_Q10
                     "?,?,?,?,?,?,?,?,?,?) WHERE seq = ?",
    [S_JOB_GET] = JOB_SELECT "WHERE id = ?",
    [S_JOB_GET_ACC] = JOB_SELECT "WHERE id = ? AND account = ?",
    [S_JOB_BY_MODEL] = JOB_SELECT "WHERE fine_tuned_model = ? AND account = ? AND"
                                  " fine_tuned_model <> ''",
    [S_JOB_SEQ_ACC] = "SELECT seq FROM jobs WHERE id = ? AND account = ?",
    [S_JOB_LIST] = JOB_SELECT "WHERE account = ? ORDER BY seq DESC LIMIT ?",
    [S_JOB_LIST_AFTER] = JOB_SELECT "WHERE account = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
    [S_JOB_LIST_MODELS] = JOB_SELECT "WHERE account = ? AND fine_tuned_model <> ''"
                                     " ORDER BY seq DESC LIMIT ?",
    [S_JOB_COUNTS] = "SELECT status, COUNT(*) FROM jobs GROUP BY status",
    [S_JOB_IDS_STATUS] = "SELECT id FROM jobs WHERE status = ? ORDER BY seq LIMIT ?",
    [S_WAITING] = "SELECT " WAITING_COLS " FROM jobs INDEXED BY jobs_active"
                  " WHERE status IN ('queued','re-scheduling','running','cancelling')"
                  " ORDER BY seq LIMIT ?",
    [S_CLAIM] = "SELECT id, account, MIN(seq) FROM jobs INDEXED BY jobs_waiting"
                " WHERE status IN ('queued','re-scheduling') AND active_attempt = ''"
                " AND memory_bytes <= ? GROUP BY account",
    [S_ATT_PUT] = "INSERT OR REPLACE INTO attempts(" ATT_COLS ")"
                  " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    [S_ATT_GET] = "SELECT " ATT_COLS " FROM attempts WHERE id = ?",
    [S_ATT_LIST] = "SELECT " ATT_COLS " FROM attempts WHERE job = ? ORDER BY fence LIMIT ?",
    [S_ATT_OPEN] = "SELECT " ATT_COLS " FROM attempts INDEXED BY attempts_open"
                   " WHERE status <> 'ended' AND (?1 = '' OR worker = ?1)"
                   " ORDER BY worker, started LIMIT ?2",
    [S_EV_INSERT] = "INSERT INTO events(" EVENT_COLS ")"
                    " VALUES(?,?,?,?,?,?,?)",
    [S_EV_LIST] = "SELECT " EVENT_COLS " FROM events"
                  " WHERE job = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
    [S_LOG_INSERT] = "INSERT INTO log_lines(job, seq, attempt, line) VALUES(?,?,?,?)",
    [S_LOG_READ] = "SELECT seq, attempt, line FROM log_lines WHERE job = ? AND attempt = ?"
                   " AND seq > ? ORDER BY seq LIMIT ?",
    [S_LOG_READ_ALL] = "SELECT seq, attempt, line FROM log_lines WHERE job = ?1 AND ?2 IS NULL"
                       " AND seq > ?3 ORDER BY seq LIMIT ?4",
    [S_LOG_LAST] = "SELECT attempt FROM log_lines WHERE job = ? ORDER BY seq DESC LIMIT 1",
    [S_CK_PUT] = "INSERT OR REPLACE INTO checkpoints(" CHECKPOINT_COLS ")"
                 " VALUES(?,?,?,?,?,?)",
    [S_CK_LIST] = "SELECT " CHECKPOINT_COLS " FROM checkpoints WHERE job = ?"
                  " ORDER BY step DESC LIMIT ?",
    [S_CK_GET] = "SELECT " CHECKPOINT_COLS " FROM checkpoints WHERE job = ?"
                 " AND step = ?",
    [S_W_PUT] = "INSERT OR REPLACE INTO workers(" WORKER_COLS ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
    [S_W_GET] = "SELECT " WORKER_COLS " FROM workers WHERE name = ?",
    [S_W_LIST] = "SELECT " WORKER_COLS " FROM workers ORDER BY name LIMIT ?",
    [S_W_HB] = "UPDATE workers SET last_heartbeat = ? WHERE name = ?",
    [S_W_STATE] = "UPDATE workers SET state = ? WHERE name = ?",
    [S_W_CHANGE] = "UPDATE workers SET state = ?1 WHERE name = ?2 AND state = ?3 "
                   "AND (?4 = 0 OR last_heartbeat < ?4)",
    [S_LED_INSERT] = "INSERT INTO ledger(account, job, attempt, kind, amount, steps, created,"
                     " from_step, to_step, reason) VALUES(?,?,?,?,?,?,?,?,?,?)",
    [S_CAL_INSERT] = "INSERT INTO calibration(" CALIB_COLS ") VALUES(?,?,?,?,?,?,?,?,?,?,?)",
    [S_SET_PUT] = "INSERT INTO account_settings(account, key, value) VALUES(?,?,?)"
                  " ON CONFLICT(account, key) DO UPDATE SET value = excluded.value",
    [S_SET_DEL] = "DELETE FROM account_settings WHERE account = ? AND key = ?",
    [S_SET_GET] = "SELECT value FROM account_settings WHERE account = ? AND key = ?",
    [S_CUR_PUT] = "INSERT INTO integration_cursors(job, kind, sent_seq, sent_lines) VALUES(?,?,?,?)"
                  " ON CONFLICT(job, kind) DO UPDATE SET sent_seq = excluded.sent_seq,"
                  " sent_lines = excluded.sent_lines",
    [S_CUR_PENDING] = "SELECT job, account, sent_seq, event_seq, sent_lines FROM (SELECT c.job,"
                      " j.account, c.sent_seq, j.event_seq, c.sent_lines, j.seq, ROW_NUMBER() OVER"
                      " (PARTITION BY j.account ORDER BY j.seq) AS turn FROM integration_cursors c"
                      " JOIN jobs j ON j.id = c.job WHERE c.kind = ? AND j.event_seq > c.sent_seq)"
                      " AS pending ORDER BY turn, seq LIMIT ?",
    [S_CAL_LIST] = "SELECT " CALIB_COLS " FROM (SELECT * FROM calibration ORDER BY seq DESC"
                   " LIMIT ?) ORDER BY seq",
    [S_LED_LIST] = "SELECT " LEDGER_COLS " FROM ledger WHERE account = ? AND seq < ?"
                   " ORDER BY seq DESC LIMIT ?",
    /* one statement under the write lock: the count and the insert are atomic */
    [S_WH_INSERT] = "INSERT INTO webhooks(" WH_COLS ") SELECT ?1,?2,?3,?4,?5,?6"
                    " WHERE (SELECT count(*) FROM webhooks WHERE account = ?2) < ?7",
    [S_WH_LIST] = "SELECT " WH_COLS " FROM webhooks WHERE account = ? ORDER BY seq LIMIT ?",
    [S_WH_GET] = "SELECT " WH_COLS " FROM webhooks WHERE id = ?",
    [S_WH_GET_ACC] = "SELECT " WH_COLS " FROM webhooks WHERE id = ? AND account = ?",
    [S_WH_DELETE] = "DELETE FROM webhooks WHERE id = ? AND account = ?",
    [S_WH_DELETE_DLV] = "DELETE FROM deliveries WHERE webhook = ?",
    [S_DLV_ENQUEUE] = "INSERT INTO deliveries(event_id, webhook, account, job, type, body, next_try,"
                      " created) SELECT ?1, id, account, ?2, ?3, ?4, ?5, ?5 FROM webhooks"
                      " WHERE account = ?6 AND (events = '' OR"
                      " instr(',' || events || ',', ',' || ?3 || ',') > 0) ORDER BY seq",
    [S_DLV_LIST] = "SELECT " DLV_COLS " FROM deliveries WHERE webhook = ? ORDER BY seq DESC LIMIT ?",
    [S_DLV_DUE] = DLV_DUE_SQL("?1", "?2"),
    [S_DLV_RECORD] = "UPDATE deliveries SET attempts = ?, last_status = ?, last_answer = ?,"
                     " state = ?, next_try = ?, delivered = ? WHERE seq = ?",
};

struct conn {
    sqlite3 *db;
    sqlite3_stmt *st[S_COUNT];
};

struct store_impl {
    struct conn writer;
    pthread_mutex_t wmu; /* owns `writer` and `writes` */
    struct store_writes writes;
    struct conn readers[READERS];
    int reader_busy[READERS];
    pthread_mutex_t rmu;
    pthread_cond_t rcv;
    struct store_group group;
    int version;
};

/* The statement `id` of c, prepared on first use and reset for reuse. */
static sqlite3_stmt *stmt(struct conn *c, enum sql_id id)
{
    if (!c->st[id]) {
        int rc = sqlite3_prepare_v3(c->db, sql_text[id], -1, SQLITE_PREPARE_PERSISTENT, &c->st[id],
                                    NULL);
        if (rc != SQLITE_OK) {
            set_error("prepare", c->db);
            c->st[id] = NULL;
            return NULL;
        }
    } else {
        sqlite3_reset(c->st[id]);
        sqlite3_clear_bindings(c->st[id]);
    }
    return c->st[id];
}

/* Runs a statement that returns no rows. */
static enum alallo_err exec_stmt(struct conn *c, enum sql_id id)
{
    sqlite3_stmt *st = stmt(c, id);
    if (!st)
        return ERR_IO;
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        set_error(sql_text[id], c->db);
        return from_sqlite(rc);
    }
    return ERR_OK;
}

static void conn_close(struct conn *c)
{
    for (int i = 0; i < S_COUNT; i++)
        sqlite3_finalize(c->st[i]);
    sqlite3_close_v2(c->db);
    memset(c, 0, sizeof *c);
}

static enum alallo_err conn_open(struct conn *c, const char *path, char *err, size_t errcap)
{
    memset(c, 0, sizeof *c);
    int rc = sqlite3_open_v2(path, &c->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                             NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errcap, "cannot open %s: %s", path,
                 c->db ? sqlite3_errmsg(c->db) : "out of memory");
        conn_close(c);
        return ERR_IO;
    }
    sqlite3_busy_timeout(c->db, 5000);
    /* WAL so readers never wait for the writer; FULL so each commit is
     * fsynced before it returns (an acknowledged job survives kill -9 and
     * power loss). */
    const char *pragmas = "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                          " PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;";
    char *msg = NULL;
    rc = sqlite3_exec(c->db, pragmas, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        snprintf(err, errcap, "cannot set up %s: %s", path, msg ? msg : "error");
        sqlite3_free(msg);
        conn_close(c);
        return ERR_IO;
    }
    return ERR_OK;
}

/* Applies migrations [current, target) in one transaction. */
static enum alallo_err migrate(struct conn *c, int target, int *version, char *err, size_t errcap)
{
    char *msg = NULL;
    int rc = sqlite3_exec(c->db,
                          "BEGIN IMMEDIATE;"
                          "CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL);"
                          "INSERT INTO schema_version SELECT 0"
                          " WHERE NOT EXISTS (SELECT 1 FROM schema_version);",
                          NULL, NULL, &msg);
    if (rc != SQLITE_OK)
        goto fail;
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(c->db, "SELECT version FROM schema_version", -1, &st, NULL);
    if (rc != SQLITE_OK)
        goto fail;
    int v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
    sqlite3_finalize(st);
    if (v > MIGRATIONS) {
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
        snprintf(err, errcap, "the data was written by a newer alallo (schema %d, this build %d)",
                 v, MIGRATIONS);
        return ERR_INVALID;
    }
    for (; v < target; v++) {
        rc = sqlite3_exec(c->db, migrations[v], NULL, NULL, &msg);
        if (rc != SQLITE_OK)
            goto fail;
        char sql[64];
        snprintf(sql, sizeof sql, "UPDATE schema_version SET version = %d", v + 1);
        rc = sqlite3_exec(c->db, sql, NULL, NULL, &msg);
        if (rc != SQLITE_OK)
            goto fail;
    }
    rc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, &msg);
    if (rc != SQLITE_OK)
        goto fail;
    *version = v;
    return ERR_OK;
fail:
    snprintf(err, errcap, "schema migration failed: %s", msg ? msg : sqlite3_errmsg(c->db));
    sqlite3_free(msg);
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    return ERR_IO;
}

static void sq_close(struct store_impl *s);

enum alallo_err store_sqlite_open_at(const char *path, int version, struct store_impl **out,
                                     char *err, size_t errcap)
{
    *out = NULL;
    if (version < 1 || version > MIGRATIONS) {
        snprintf(err, errcap, "no schema version %d", version);
        return ERR_INVALID;
    }
    struct store_impl *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errcap, "out of memory");
        return ERR_NOMEM;
    }
    pthread_mutex_init(&s->wmu, NULL);
    pthread_mutex_init(&s->rmu, NULL);
    pthread_cond_init(&s->rcv, NULL);
    store_group_init(&s->group, 1); /* one writer */
    enum alallo_err e = conn_open(&s->writer, path, err, errcap);
    if (e)
        goto fail;
    e = migrate(&s->writer, version, &s->version, err, errcap);
    if (e)
        goto fail;
    for (int i = 0; i < READERS; i++) {
        e = conn_open(&s->readers[i], path, err, errcap);
        if (e)
            goto fail;
    }
    *out = s;
    return ERR_OK;
fail:
    sq_close(s);
    return e;
}

static void sq_close(struct store_impl *s)
{
    if (!s)
        return;
    for (int i = 0; i < READERS; i++)
        if (s->readers[i].db)
            conn_close(&s->readers[i]);
    if (s->writer.db)
        conn_close(&s->writer);
    store_writes_free(&s->writes);
    pthread_mutex_destroy(&s->wmu);
    pthread_mutex_destroy(&s->rmu);
    pthread_cond_destroy(&s->rcv);
    store_group_destroy(&s->group);
    free(s);
}

static int sq_schema_version(struct store_impl *s) { return s->version; }

/* ---- connection pool -------------------------------------------------- */

static struct conn *reader_get(struct store_impl *s)
{
    pthread_mutex_lock(&s->rmu);
    for (;;) {
        for (int i = 0; i < READERS; i++) {
            if (!s->reader_busy[i]) {
                s->reader_busy[i] = 1;
                pthread_mutex_unlock(&s->rmu);
                return &s->readers[i];
            }
        }
        pthread_cond_wait(&s->rcv, &s->rmu);
    }
}

static void reader_put(struct store_impl *s, struct conn *c)
{
    pthread_mutex_lock(&s->rmu);
    s->reader_busy[c - s->readers] = 0;
    pthread_cond_signal(&s->rcv);
    pthread_mutex_unlock(&s->rmu);
}

/* ---- column helpers --------------------------------------------------- */

static void col_str(sqlite3_stmt *st, int i, char *dst, size_t cap)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    size_t n = t ? (size_t)sqlite3_column_bytes(st, i) : 0;
    if (n >= cap)
        n = cap - 1;
    if (n)
        memcpy(dst, t, n);
    dst[n] = '\0';
}

/* Binds a string that must fit an array of `cap` bytes (a struct field);
 * an unterminated or over-long one is refused. */
static int bind_str(sqlite3_stmt *st, int i, const char *v, size_t cap)
{
    size_t n = strnlen(v, cap);
    if (n >= cap)
        return SQLITE_TOOBIG;
    return sqlite3_bind_text(st, i, v, (int)n, SQLITE_TRANSIENT);
}

#define BIND_STR(st, i, field) bind_str(st, i, field, sizeof(field))

static int bind_job(sqlite3_stmt *st, const struct store_job *j)
{
    int rc = 0, i = 1;
    rc |= BIND_STR(st, i++, j->id);
    rc |= BIND_STR(st, i++, j->account);
    rc |= BIND_STR(st, i++, j->name);
    rc |= BIND_STR(st, i++, j->model);
    rc |= BIND_STR(st, i++, j->training_file);
    rc |= BIND_STR(st, i++, j->validation_file);
    rc |= BIND_STR(st, i++, j->method);
    rc |= BIND_STR(st, i++, j->precision);
    rc |= BIND_STR(st, i++, j->goal);
    rc |= BIND_STR(st, i++, j->adapter);
    rc |= BIND_STR(st, i++, j->suffix);
    rc |= sqlite3_bind_int(st, i++, j->n_epochs);
    rc |= sqlite3_bind_int(st, i++, j->batch_size);
    rc |= sqlite3_bind_double(st, i++, j->lr_multiplier);
    rc |= sqlite3_bind_int64(st, i++, j->seed);
    rc |= sqlite3_bind_int64(st, i++, j->examples);
    rc |= sqlite3_bind_int64(st, i++, j->tokens);
    rc |= sqlite3_bind_int64(st, i++, j->memory_bytes);
    rc |= sqlite3_bind_int64(st, i++, j->max_steps);
    rc |= sqlite3_bind_int64(st, i++, j->steps_done);
    const char *status = job_status_name(j->status);
    if (!status)
        return SQLITE_MISUSE;
    rc |= sqlite3_bind_text(st, i++, status, -1, SQLITE_STATIC);
    rc |= BIND_STR(st, i++, j->message);
    rc |= BIND_STR(st, i++, j->estimate);
    rc |= sqlite3_bind_double(st, i++, j->price_charged);
    rc |= sqlite3_bind_double(st, i++, j->price_refunded);
    rc |= BIND_STR(st, i++, j->fine_tuned_model);
    rc |= sqlite3_bind_int64(st, i++, j->created_ms);
    rc |= sqlite3_bind_int64(st, i++, j->started_ms);
    rc |= sqlite3_bind_int64(st, i++, j->finished_ms);
    rc |= BIND_STR(st, i++, j->metadata);
    rc |= sqlite3_bind_int64(st, i++, j->fence);
    rc |= BIND_STR(st, i++, j->active_attempt);
    rc |= BIND_STR(st, i++, j->stop_reason);
    rc |= sqlite3_bind_int64(st, i++, j->running_ms);
    rc |= sqlite3_bind_int64(st, i++, j->run_started_ms);
    rc |= sqlite3_bind_int64(st, i++, j->run_start_step);
    rc |= sqlite3_bind_double(st, i++, j->train_loss);
    rc |= sqlite3_bind_int64(st, i++, j->trained_tokens);
    rc |= sqlite3_bind_int64(st, i++, j->log_seq);
    rc |= sqlite3_bind_int64(st, i++, j->event_seq);
    rc |= sqlite3_bind_int(st, i++, j->internal_failure);
    rc |= sqlite3_bind_double(st, i++, j->est_low_s);
    rc |= sqlite3_bind_double(st, i++, j->est_high_s);
    rc |= sqlite3_bind_double(st, i++, j->est_train_low_s);
    rc |= sqlite3_bind_double(st, i++, j->est_train_high_s);
    rc |= sqlite3_bind_double(st, i++, j->est_price_high);
    rc |= BIND_STR(st, i++, j->plan);
    rc |= BIND_STR(st, i++, j->ledger_state);
    rc |= sqlite3_bind_double(st, i++, j->first_loss);
    rc |= BIND_STR(st, i++, j->hyper);
    _Static_assert(JOB_NCOLS == 50, "bind_job binds every column of JOB_COLS");
    return rc;
}

static void read_job(sqlite3_stmt *st, struct store_job *j)
{
    int i = 0;
    memset(j, 0, sizeof *j);
    j->seq = sqlite3_column_int64(st, i++);
    col_str(st, i++, j->id, sizeof j->id);
    col_str(st, i++, j->account, sizeof j->account);
    col_str(st, i++, j->name, sizeof j->name);
    col_str(st, i++, j->model, sizeof j->model);
    col_str(st, i++, j->training_file, sizeof j->training_file);
    col_str(st, i++, j->validation_file, sizeof j->validation_file);
    col_str(st, i++, j->method, sizeof j->method);
    col_str(st, i++, j->precision, sizeof j->precision);
    col_str(st, i++, j->goal, sizeof j->goal);
    col_str(st, i++, j->adapter, sizeof j->adapter);
    col_str(st, i++, j->suffix, sizeof j->suffix);
    j->n_epochs = sqlite3_column_int(st, i++);
    j->batch_size = sqlite3_column_int(st, i++);
    j->lr_multiplier = sqlite3_column_double(st, i++);
    j->seed = sqlite3_column_int64(st, i++);
    j->examples = (long)sqlite3_column_int64(st, i++);
    j->tokens = sqlite3_column_int64(st, i++);
    j->memory_bytes = sqlite3_column_int64(st, i++);
    j->max_steps = (long)sqlite3_column_int64(st, i++);
    j->steps_done = (long)sqlite3_column_int64(st, i++);
    const char *status = (const char *)sqlite3_column_text(st, i++);
    if (!job_status_parse(status, &j->status))
        j->status = JOB_FAILED; /* unreachable unless the file was edited by hand */
    col_str(st, i++, j->message, sizeof j->message);
    col_str(st, i++, j->estimate, sizeof j->estimate);
    j->price_charged = sqlite3_column_double(st, i++);
    j->price_refunded = sqlite3_column_double(st, i++);
    col_str(st, i++, j->fine_tuned_model, sizeof j->fine_tuned_model);
    j->created_ms = sqlite3_column_int64(st, i++);
    j->started_ms = sqlite3_column_int64(st, i++);
    j->finished_ms = sqlite3_column_int64(st, i++);
    col_str(st, i++, j->metadata, sizeof j->metadata);
    j->fence = sqlite3_column_int64(st, i++);
    col_str(st, i++, j->active_attempt, sizeof j->active_attempt);
    col_str(st, i++, j->stop_reason, sizeof j->stop_reason);
    j->running_ms = sqlite3_column_int64(st, i++);
    j->run_started_ms = sqlite3_column_int64(st, i++);
    j->run_start_step = (long)sqlite3_column_int64(st, i++);
    j->train_loss = sqlite3_column_double(st, i++);
    j->trained_tokens = sqlite3_column_int64(st, i++);
    j->log_seq = sqlite3_column_int64(st, i++);
    j->event_seq = sqlite3_column_int64(st, i++);
    j->internal_failure = sqlite3_column_int(st, i++);
    j->est_low_s = sqlite3_column_double(st, i++);
    j->est_high_s = sqlite3_column_double(st, i++);
    j->est_train_low_s = sqlite3_column_double(st, i++);
    j->est_train_high_s = sqlite3_column_double(st, i++);
    j->est_price_high = sqlite3_column_double(st, i++);
    col_str(st, i++, j->plan, sizeof j->plan);
    col_str(st, i++, j->ledger_state, sizeof j->ledger_state);
    j->first_loss = sqlite3_column_double(st, i++);
    col_str(st, i++, j->hyper, sizeof j->hyper);
}

static int bind_attempt(sqlite3_stmt *st, const struct store_attempt *a)
{
    int rc = 0, i = 1;
    rc |= BIND_STR(st, i++, a->id);
    rc |= BIND_STR(st, i++, a->job);
    rc |= BIND_STR(st, i++, a->worker);
    rc |= sqlite3_bind_int64(st, i++, a->fence);
    rc |= BIND_STR(st, i++, a->status);
    rc |= sqlite3_bind_int64(st, i++, a->start_step);
    rc |= sqlite3_bind_int64(st, i++, a->end_step);
    rc |= BIND_STR(st, i++, a->reason);
    rc |= sqlite3_bind_double(st, i++, a->price_per_hour);
    rc |= sqlite3_bind_int64(st, i++, a->started_ms);
    rc |= sqlite3_bind_int64(st, i++, a->ended_ms);
    rc |= sqlite3_bind_int64(st, i++, a->run_ms);
    rc |= sqlite3_bind_int64(st, i++, a->events_applied);
    rc |= sqlite3_bind_double(st, i++, a->t_started);
    rc |= sqlite3_bind_double(st, i++, a->t_last);
    rc |= BIND_STR(st, i++, a->token_hash);
    rc |= BIND_STR(st, i++, a->engine_id);
    rc |= BIND_STR(st, i++, a->engine_state);
    rc |= BIND_STR(st, i++, a->engine_reason);
    rc |= sqlite3_bind_int64(st, i++, a->engine_running_ms);
    rc |= sqlite3_bind_int64(st, i++, a->heartbeat_ms);
    rc |= BIND_STR(st, i++, a->node);
    rc |= BIND_STR(st, i++, a->resume_from);
    return rc;
}

static void read_attempt(sqlite3_stmt *st, struct store_attempt *a)
{
    int i = 0;
    memset(a, 0, sizeof *a);
    col_str(st, i++, a->id, sizeof a->id);
    col_str(st, i++, a->job, sizeof a->job);
    col_str(st, i++, a->worker, sizeof a->worker);
    a->fence = sqlite3_column_int64(st, i++);
    col_str(st, i++, a->status, sizeof a->status);
    a->start_step = (long)sqlite3_column_int64(st, i++);
    a->end_step = (long)sqlite3_column_int64(st, i++);
    col_str(st, i++, a->reason, sizeof a->reason);
    a->price_per_hour = sqlite3_column_double(st, i++);
    a->started_ms = sqlite3_column_int64(st, i++);
    a->ended_ms = sqlite3_column_int64(st, i++);
    a->run_ms = sqlite3_column_int64(st, i++);
    a->events_applied = sqlite3_column_int64(st, i++);
    a->t_started = sqlite3_column_double(st, i++);
    a->t_last = sqlite3_column_double(st, i++);
    col_str(st, i++, a->token_hash, sizeof a->token_hash);
    col_str(st, i++, a->engine_id, sizeof a->engine_id);
    col_str(st, i++, a->engine_state, sizeof a->engine_state);
    col_str(st, i++, a->engine_reason, sizeof a->engine_reason);
    a->engine_running_ms = sqlite3_column_int64(st, i++);
    a->heartbeat_ms = sqlite3_column_int64(st, i++);
    col_str(st, i++, a->node, sizeof a->node);
    col_str(st, i++, a->resume_from, sizeof a->resume_from);
}

static void read_file(sqlite3_stmt *st, struct store_file *f)
{
    int i = 0;
    memset(f, 0, sizeof *f);
    col_str(st, i++, f->id, sizeof f->id);
    col_str(st, i++, f->account, sizeof f->account);
    col_str(st, i++, f->filename, sizeof f->filename);
    f->bytes = sqlite3_column_int64(st, i++);
    col_str(st, i++, f->purpose, sizeof f->purpose);
    f->examples = (long)sqlite3_column_int64(st, i++);
    f->text_bytes = sqlite3_column_int64(st, i++);
    col_str(st, i++, f->path, sizeof f->path);
    f->created_ms = sqlite3_column_int64(st, i++);
    col_str(st, i++, f->format, sizeof f->format);
}

static void read_worker(sqlite3_stmt *st, struct store_worker *w)
{
    int i = 0;
    memset(w, 0, sizeof *w);
    col_str(st, i++, w->name, sizeof w->name);
    col_str(st, i++, w->resources, sizeof w->resources);
    w->cpus = sqlite3_column_int(st, i++);
    w->mem_bytes = sqlite3_column_int64(st, i++);
    col_str(st, i++, w->class_, sizeof w->class_);
    w->price_per_hour = sqlite3_column_double(st, i++);
    col_str(st, i++, w->state, sizeof w->state);
    w->last_heartbeat_ms = sqlite3_column_int64(st, i++);
    col_str(st, i++, w->speed, sizeof w->speed);
    w->tokens_per_s = sqlite3_column_double(st, i++);
    w->flops = sqlite3_column_double(st, i++);
    w->registered_ms = sqlite3_column_int64(st, i++);
}

static void read_event(sqlite3_stmt *st, struct store_event *e)
{
    memset(e, 0, sizeof *e);
    col_str(st, 0, e->job, sizeof e->job);
    e->seq = sqlite3_column_int64(st, 1);
    e->created_ms = sqlite3_column_int64(st, 2);
    col_str(st, 3, e->level, sizeof e->level);
    col_str(st, 4, e->type, sizeof e->type);
    col_str(st, 5, e->message, sizeof e->message);
    col_str(st, 6, e->data, sizeof e->data);
}

static void read_ledger(sqlite3_stmt *st, struct store_ledger_row *r)
{
    int i = 0;
    memset(r, 0, sizeof *r);
    r->seq = sqlite3_column_int64(st, i++);
    col_str(st, i++, r->account, sizeof r->account);
    col_str(st, i++, r->job, sizeof r->job);
    col_str(st, i++, r->attempt, sizeof r->attempt);
    col_str(st, i++, r->kind, sizeof r->kind);
    r->amount = sqlite3_column_double(st, i++);
    r->steps = (long)sqlite3_column_int64(st, i++);
    r->created_ms = sqlite3_column_int64(st, i++);
    r->from_step = (long)sqlite3_column_int64(st, i++);
    r->to_step = (long)sqlite3_column_int64(st, i++);
    col_str(st, i++, r->reason, sizeof r->reason);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Steps a statement expected to finish without rows; maps the result. */
static enum alallo_err step_done(struct conn *c, sqlite3_stmt *st, int bind_rc, const char *what)
{
    if (bind_rc != SQLITE_OK) {
        store_set_error("store: %s: a value is too long", what);
        sqlite3_reset(st);
        return ERR_INVALID;
    }
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        set_error(what, c->db);
        return from_sqlite(rc);
    }
    return ERR_OK;
}

/* Steps a statement expected to return one row (left for reading). */
static enum alallo_err step_row(struct conn *c, sqlite3_stmt *st, int bind_rc, const char *what)
{
    if (bind_rc != SQLITE_OK) {
        sqlite3_reset(st);
        return ERR_INVALID;
    }
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return ERR_OK;
    sqlite3_reset(st);
    if (rc == SQLITE_DONE)
        return ERR_NOT_FOUND;
    set_error(what, c->db);
    return from_sqlite(rc);
}

/* Runs a single-statement write on the writer connection in its own
 * transaction (autocommit: durable at return). */
#define WRITE_BEGIN(s)                                                                             \
    pthread_mutex_lock(&(s)->wmu);                                                                 \
    struct conn *c = &(s)->writer
#define WRITE_END(s) pthread_mutex_unlock(&(s)->wmu)

#define READ_BEGIN(s) struct conn *c = reader_get(s)
#define READ_END(s) reader_put(s, c)

/* ---- accounts --------------------------------------------------------- */

static enum alallo_err sq_account_create(struct store_impl *s, const char *name, const char *key_hash,
                                     struct store_account *out)
{
    struct store_account a = {0};
    if (strlen(name) >= sizeof a.name)
        return ERR_INVALID;
    if (!ids_make(a.id, sizeof a.id, "acct-"))
        return ERR_INTERNAL;
    snprintf(a.name, sizeof a.name, "%s", name);
    a.created_ms = now_ms();
    WRITE_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_ACC_INSERT);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, a.id, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 2, a.name, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 3, key_hash, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(st, 4, a.created_ms);
        e = step_done(c, st, rc, "create account");
    }
    WRITE_END(s);
    if (!e && out)
        *out = a;
    return e;
}

static enum alallo_err account_by(struct store_impl *s, enum sql_id id, const char *key,
                                  struct store_account *out)
{
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, id);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        e = step_row(c, st, rc, "read account");
        if (!e) {
            memset(out, 0, sizeof *out);
            col_str(st, 0, out->id, sizeof out->id);
            col_str(st, 1, out->name, sizeof out->name);
            out->created_ms = sqlite3_column_int64(st, 2);
            sqlite3_reset(st);
        }
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_account_by_key_hash(struct store_impl *s, const char *key_hash,
                                          struct store_account *out)
{
    return account_by(s, S_ACC_BY_HASH, key_hash, out);
}

static enum alallo_err sq_account_by_name(struct store_impl *s, const char *name,
                                      struct store_account *out)
{
    return account_by(s, S_ACC_BY_NAME, name, out);
}

/* ---- files ------------------------------------------------------------ */

static enum alallo_err sq_file_insert(struct store_impl *s, const struct store_file *f)
{
    WRITE_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_FILE_INSERT);
    if (st) {
        int rc = BIND_STR(st, 1, f->id);
        rc |= BIND_STR(st, 2, f->account);
        rc |= BIND_STR(st, 3, f->filename);
        rc |= sqlite3_bind_int64(st, 4, f->bytes);
        rc |= BIND_STR(st, 5, f->purpose);
        rc |= sqlite3_bind_int64(st, 6, f->examples);
        rc |= sqlite3_bind_int64(st, 7, f->text_bytes);
        rc |= BIND_STR(st, 8, f->path);
        rc |= sqlite3_bind_int64(st, 9, f->created_ms);
        rc |= BIND_STR(st, 10, f->format);
        e = step_done(c, st, rc, "insert file");
    }
    WRITE_END(s);
    return e;
}

static enum alallo_err sq_file_get(struct store_impl *s, const char *account, const char *id,
                               struct store_file *out)
{
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_FILE_GET);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 2, account, -1, SQLITE_STATIC);
        e = step_row(c, st, rc, "read file");
        if (!e) {
            read_file(st, out);
            sqlite3_reset(st);
        }
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_file_list(struct store_impl *s, const char *account, const char *after,
                                int limit, struct store_file *out, int *n, bool *has_more)
{
    *n = 0;
    *has_more = false;
    if (limit < 1 || limit > STORE_LIST_MAX)
        return ERR_INVALID;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, after ? S_FILE_LIST_AFTER : S_FILE_LIST);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
        if (after) {
            rc |= sqlite3_bind_text(st, 2, after, -1, SQLITE_STATIC);
            rc |= sqlite3_bind_int(st, 3, limit + 1);
        } else {
            rc |= sqlite3_bind_int(st, 2, limit + 1);
        }
        e = rc ? ERR_INVALID : ERR_OK;
        while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (*n == limit) {
                *has_more = true;
                break;
            }
            read_file(st, &out[(*n)++]);
        }
        if (!e && rc != SQLITE_ROW && rc != SQLITE_DONE) {
            set_error("list files", c->db);
            e = from_sqlite(rc);
        }
        sqlite3_reset(st);
    }
    READ_END(s);
    return e;
}

/* Whether query q (S_FILE_IN_USE or S_FILE_EXISTS: ?1 account, ?2 file
 * id) finds a row, on connection c. */
static enum alallo_err file_query(struct conn *c, enum sql_id q, const char *account,
                                  const char *id, bool *yes /* OUT */)
{
    *yes = false;
    sqlite3_stmt *st = stmt(c, q);
    if (!st)
        return ERR_IO;
    int rc = sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
    enum alallo_err e = step_row(c, st, rc, "read file");
    if (e == ERR_OK) {
        *yes = true;
        sqlite3_reset(st);
    }
    return e == ERR_NOT_FOUND ? ERR_OK : e;
}

/* The delete proper, inside the caller's transaction on the writer. */
static enum alallo_err file_delete_on(struct conn *c, const char *account, const char *id,
                                      struct store_file *f)
{
    sqlite3_stmt *st = stmt(c, S_FILE_GET);
    if (!st)
        return ERR_IO;
    int rc = sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_text(st, 2, account, -1, SQLITE_STATIC);
    enum alallo_err e = step_row(c, st, rc, "read file");
    if (e)
        return e;
    read_file(st, f);
    sqlite3_reset(st);
    bool in_use;
    e = file_query(c, S_FILE_IN_USE, account, id, &in_use);
    if (e)
        return e;
    if (in_use)
        return ERR_CONFLICT;
    st = stmt(c, S_FILE_DELETE);
    if (!st)
        return ERR_IO;
    rc = sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_text(st, 2, account, -1, SQLITE_STATIC);
    e = step_done(c, st, rc, "delete file");
    if (!e && sqlite3_changes(c->db) == 0)
        e = ERR_NOT_FOUND;
    return e;
}

static enum alallo_err sq_file_delete(struct store_impl *s, const char *account, const char *id,
                                  struct store_file *out)
{
    struct store_file f;
    WRITE_BEGIN(s);
    /* The check and the delete in one transaction under the write lock:
     * a job inserted (store_job_insert checks its files under the same
     * lock) either commits first, and the file is in use, or finds the
     * file gone. */
    enum alallo_err e = exec_stmt(c, S_BEGIN);
    if (!e) {
        e = file_delete_on(c, account, id, &f);
        if (!e)
            e = exec_stmt(c, S_COMMIT);
        if (e)
            exec_stmt(c, S_ROLLBACK);
    }
    WRITE_END(s);
    if (!e && out)
        *out = f;
    return e;
}

/* ---- jobs ------------------------------------------------------------- */

static enum alallo_err insert_event(struct conn *c, const char *job, int64_t seq,
                                    const struct store_event *ev)
{
    sqlite3_stmt *st = stmt(c, S_EV_INSERT);
    if (!st)
        return ERR_IO;
    int rc = sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_int64(st, 2, seq);
    rc |= sqlite3_bind_int64(st, 3, ev->created_ms);
    rc |= BIND_STR(st, 4, ev->level);
    rc |= BIND_STR(st, 5, ev->type);
    rc |= BIND_STR(st, 6, ev->message);
    rc |= BIND_STR(st, 7, ev->data);
    return step_done(c, st, rc, "insert event");
}

/* ERR_NOT_FOUND unless the job's data sets are rows of its account. */
static enum alallo_err job_files_there(struct conn *c, const struct store_job *job)
{
    bool there;
    enum alallo_err e = file_query(c, S_FILE_EXISTS, job->account, job->training_file, &there);
    if (!e && there && job->validation_file[0])
        e = file_query(c, S_FILE_EXISTS, job->account, job->validation_file, &there);
    if (!e && !there) {
        store_set_error("store: insert job: a data set is gone");
        e = ERR_NOT_FOUND;
    }
    return e;
}

static enum alallo_err insert_one_job(struct conn *c, struct store_job *job,
                                      const struct store_event *ev)
{
    enum alallo_err e = exec_stmt(c, S_SAVEPOINT);
    if (e)
        return e;
    /* The job's data sets must still be there, checked in the transaction
     * that inserts it: sq_file_delete() checks "in use" and deletes
     * under the same write lock, so one of the two loses. */
    e = job_files_there(c, job);
    sqlite3_stmt *st = e ? NULL : stmt(c, S_JOB_INSERT);
    if (!e && !st)
        e = ERR_IO;
    if (!e) {
        if (ev && job->event_seq < 1)
            job->event_seq = 1;
        e = step_done(c, st, bind_job(st, job), "insert job");
    }
    if (!e) {
        job->seq = sqlite3_last_insert_rowid(c->db);
        if (ev)
            e = insert_event(c, job->id, 1, ev);
    }
    if (e) {
        exec_stmt(c, S_ROLLBACK_TO);
        exec_stmt(c, S_RELEASE);
        return e;
    }
    return exec_stmt(c, S_RELEASE);
}

/* Writes a batch of queued jobs in one transaction; sets each result
 * (store_group_commit_fn). */
static void commit_batch(struct store_pending *batch, int slot, void *ctx)
{
    struct store_impl *s = ctx;
    (void)slot; /* one slot: the writer */
    WRITE_BEGIN(s);
    enum alallo_err e = exec_stmt(c, S_BEGIN);
    if (!e) {
        for (struct store_pending *p = batch; p; p = p->next) {
            p->result = insert_one_job(c, p->job, p->event);
            if (p->result)
                snprintf(p->error, sizeof p->error, "%s", store_last_error());
        }
        e = exec_stmt(c, S_COMMIT);
        if (e)
            exec_stmt(c, S_ROLLBACK);
    }
    if (e)
        for (struct store_pending *p = batch; p; p = p->next) {
            p->result = e;
            snprintf(p->error, sizeof p->error, "%s", store_last_error());
        }
    WRITE_END(s);
}

static enum alallo_err sq_job_insert(struct store_impl *s, struct store_job *job,
                                     const struct store_event *first_event)
{
    return store_group_insert(&s->group, job, first_event, commit_batch, s);
}

static enum alallo_err job_get_on(struct conn *c, const char *account, const char *id,
                                  struct store_job *out)
{
    sqlite3_stmt *st = stmt(c, account ? S_JOB_GET_ACC : S_JOB_GET);
    if (!st)
        return ERR_IO;
    int rc = sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    if (account)
        rc |= sqlite3_bind_text(st, 2, account, -1, SQLITE_STATIC);
    enum alallo_err e = step_row(c, st, rc, "read job");
    if (!e) {
        read_job(st, out);
        sqlite3_reset(st);
    }
    return e;
}

static enum alallo_err sq_job_get(struct store_impl *s, const char *account, const char *id,
                              struct store_job *out)
{
    READ_BEGIN(s);
    enum alallo_err e = job_get_on(c, account, id, out);
    READ_END(s);
    return e;
}

static enum alallo_err sq_job_by_model(struct store_impl *s, const char *account, const char *model,
                                   struct store_job *out)
{
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_JOB_BY_MODEL);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 2, account, -1, SQLITE_STATIC);
        e = step_row(c, st, rc, "read job by model");
        if (!e) {
            read_job(st, out);
            sqlite3_reset(st);
        }
    }
    READ_END(s);
    return e;
}

/* Reads up to `limit` jobs from a prepared statement; one more row sets
 * has_more. */
static enum alallo_err read_jobs(struct conn *c, sqlite3_stmt *st, int limit,
                                 struct store_job *out, int *n, bool *has_more)
{
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == limit) {
            if (has_more)
                *has_more = true;
            break;
        }
        read_job(st, &out[(*n)++]);
    }
    sqlite3_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        set_error("list jobs", c->db);
        return from_sqlite(rc);
    }
    return ERR_OK;
}

static enum alallo_err sq_job_list(struct store_impl *s, const char *account, const char *after,
                               int limit, struct store_job *out, int *n, bool *has_more)
{
    *n = 0;
    *has_more = false;
    if (limit < 1 || limit > STORE_LIST_MAX)
        return ERR_INVALID;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    int64_t after_seq = 0;
    sqlite3_stmt *st;
    if (after) {
        st = stmt(c, S_JOB_SEQ_ACC);
        if (!st)
            goto out;
        int rc = sqlite3_bind_text(st, 1, after, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 2, account, -1, SQLITE_STATIC);
        e = step_row(c, st, rc, "find job");
        if (e)
            goto out;
        after_seq = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
    }
    st = stmt(c, after ? S_JOB_LIST_AFTER : S_JOB_LIST);
    if (!st) {
        e = ERR_IO;
        goto out;
    }
    int rc = sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    if (after) {
        rc |= sqlite3_bind_int64(st, 2, after_seq);
        rc |= sqlite3_bind_int(st, 3, limit + 1);
    } else {
        rc |= sqlite3_bind_int(st, 2, limit + 1);
    }
    e = rc ? ERR_INVALID : read_jobs(c, st, limit, out, n, has_more);
out:
    READ_END(s);
    return e;
}

static enum alallo_err sq_job_list_models(struct store_impl *s, const char *account, int limit,
                                      struct store_job *out, int *n)
{
    *n = 0;
    if (limit < 1 || limit > STORE_LIST_MAX)
        return ERR_INVALID;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_JOB_LIST_MODELS);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int(st, 2, limit);
        e = rc ? ERR_INVALID : read_jobs(c, st, limit, out, n, NULL);
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_job_count_by_status(struct store_impl *s, long counts[JOB_STATUS_COUNT])
{
    memset(counts, 0, sizeof(long) * JOB_STATUS_COUNT);
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_JOB_COUNTS);
    if (st) {
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            enum job_status js;
            if (job_status_parse((const char *)sqlite3_column_text(st, 0), &js))
                counts[js] = (long)sqlite3_column_int64(st, 1);
        }
        sqlite3_reset(st);
        e = rc == SQLITE_DONE ? ERR_OK : from_sqlite(rc);
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_job_ids_in_status(struct store_impl *s, enum job_status status,
                                        char (*ids)[IDS_MAX], int cap, int *n)
{
    *n = 0;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_JOB_IDS_STATUS);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, job_status_name(status), -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int(st, 2, cap);
        while ((rc == SQLITE_OK || rc == SQLITE_ROW) && (rc = sqlite3_step(st)) == SQLITE_ROW && *n < cap)
            col_str(st, 0, ids[(*n)++], IDS_MAX);
        sqlite3_reset(st);
        e = (rc == SQLITE_DONE || rc == SQLITE_ROW) ? ERR_OK : from_sqlite(rc);
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_waiting_each(struct store_impl *s, int cap, store_waiting_fn fn, void *ctx)
{
    struct store_waiting *w = malloc(sizeof *w);
    if (!w)
        return ERR_NOMEM;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_WAITING);
    if (st) {
        int rc = sqlite3_bind_int(st, 1, cap);
        while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            memset(w, 0, sizeof *w);
            int i = 0;
            col_str(st, i++, w->id, sizeof w->id);
            col_str(st, i++, w->account, sizeof w->account);
            col_str(st, i++, w->model, sizeof w->model);
            const unsigned char *status = sqlite3_column_text(st, i++);
            col_str(st, i++, w->message, sizeof w->message);
            col_str(st, i++, w->stop_reason, sizeof w->stop_reason);
            w->running = sqlite3_column_bytes(st, i++) > 0;
            w->created_ms = sqlite3_column_int64(st, i++);
            w->memory_bytes = sqlite3_column_int64(st, i++);
            w->tokens = sqlite3_column_int64(st, i++);
            w->examples = (long)sqlite3_column_int64(st, i++);
            w->max_steps = (long)sqlite3_column_int64(st, i++);
            w->steps_done = (long)sqlite3_column_int64(st, i++);
            w->n_epochs = sqlite3_column_int(st, i++);
            w->batch_size = sqlite3_column_int(st, i++);
            col_str(st, i++, w->plan, sizeof w->plan);
            w->est_high_s = sqlite3_column_double(st, i++);
            if (status && job_status_parse((const char *)status, &w->status))
                fn(w, ctx);
            rc = SQLITE_OK;
        }
        sqlite3_reset(st);
        e = rc == SQLITE_DONE ? ERR_OK : from_sqlite(rc);
    }
    READ_END(s);
    free(w);
    return e;
}

static enum alallo_err sq_claim_candidates(struct store_impl *s, int64_t mem_bytes,
                                       struct store_claim_candidate *out, int cap, int *n)
{
    *n = 0;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_CLAIM);
    if (st) {
        int rc = sqlite3_bind_int64(st, 1, mem_bytes);
        while ((rc == SQLITE_OK || rc == SQLITE_ROW) && (rc = sqlite3_step(st)) == SQLITE_ROW && *n < cap) {
            struct store_claim_candidate *cc = &out[(*n)++];
            col_str(st, 0, cc->job, sizeof cc->job);
            col_str(st, 1, cc->account, sizeof cc->account);
            cc->seq = sqlite3_column_int64(st, 2);
        }
        sqlite3_reset(st);
        e = (rc == SQLITE_DONE || rc == SQLITE_ROW) ? ERR_OK : from_sqlite(rc);
    }
    READ_END(s);
    return e;
}

static enum alallo_err attempt_get_on(struct conn *c, const char *id, struct store_attempt *out)
{
    sqlite3_stmt *st = stmt(c, S_ATT_GET);
    if (!st)
        return ERR_IO;
    int rc = sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    enum alallo_err e = step_row(c, st, rc, "read attempt");
    if (!e) {
        read_attempt(st, out);
        sqlite3_reset(st);
    }
    return e;
}

static enum alallo_err put_attempt(struct conn *c, const struct store_attempt *a)
{
    sqlite3_stmt *st = stmt(c, S_ATT_PUT);
    if (!st)
        return ERR_IO;
    return step_done(c, st, bind_attempt(st, a), "write attempt");
}

/* Writes everything an update callback queued, assigning log and event
 * numbers from the job's counters. */
static enum alallo_err write_queued(struct conn *c, struct store_job *job,
                                    const struct store_writes *w)
{
    enum alallo_err e = ERR_OK;
    for (int i = 0; !e && i < w->n_attempts; i++)
        e = put_attempt(c, &w->attempts[i]);
    for (int i = 0; !e && i < w->n_logs; i++) {
        sqlite3_stmt *st = stmt(c, S_LOG_INSERT);
        if (!st)
            return ERR_IO;
        int rc = sqlite3_bind_text(st, 1, job->id, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(st, 2, ++job->log_seq);
        rc |= BIND_STR(st, 3, w->logs[i].attempt);
        rc |= BIND_STR(st, 4, w->logs[i].line);
        e = step_done(c, st, rc, "append log");
    }
    for (int i = 0; !e && i < w->n_events; i++)
        e = insert_event(c, job->id, ++job->event_seq, &w->events[i]);
    for (int i = 0; !e && i < w->n_checkpoints; i++) {
        const struct store_checkpoint *k = &w->checkpoints[i];
        sqlite3_stmt *st = stmt(c, S_CK_PUT);
        if (!st)
            return ERR_IO;
        int rc = sqlite3_bind_text(st, 1, job->id, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(st, 2, k->step);
        rc |= BIND_STR(st, 3, k->path);
        rc |= sqlite3_bind_double(st, 4, k->train_loss);
        rc |= sqlite3_bind_int64(st, 5, k->created_ms);
        rc |= BIND_STR(st, 6, k->metrics);
        e = step_done(c, st, rc, "write checkpoint");
    }
    for (int i = 0; !e && i < w->n_ledger; i++) {
        const struct store_ledger_row *r = &w->ledger[i];
        sqlite3_stmt *st = stmt(c, S_LED_INSERT);
        if (!st)
            return ERR_IO;
        int rc = BIND_STR(st, 1, r->account);
        rc |= BIND_STR(st, 2, r->job);
        rc |= BIND_STR(st, 3, r->attempt);
        rc |= BIND_STR(st, 4, r->kind);
        rc |= sqlite3_bind_double(st, 5, r->amount);
        rc |= sqlite3_bind_int64(st, 6, r->steps);
        rc |= sqlite3_bind_int64(st, 7, r->created_ms);
        rc |= sqlite3_bind_int64(st, 8, r->from_step);
        rc |= sqlite3_bind_int64(st, 9, r->to_step);
        rc |= BIND_STR(st, 10, r->reason);
        e = step_done(c, st, rc, "write ledger");
    }
    for (int i = 0; !e && i < w->n_calibration; i++) {
        const struct store_calibration *k = &w->calibration[i];
        sqlite3_stmt *st = stmt(c, S_CAL_INSERT);
        if (!st)
            return ERR_IO;
        int rc = BIND_STR(st, 1, k->kind);
        rc |= sqlite3_bind_int(st, 2, k->method);
        rc |= sqlite3_bind_int(st, 3, k->class_);
        rc |= sqlite3_bind_int(st, 4, k->waited);
        rc |= sqlite3_bind_int(st, 5, k->goal);
        rc |= sqlite3_bind_double(st, 6, k->actual_a);
        rc |= sqlite3_bind_double(st, 7, k->nominal_a);
        rc |= sqlite3_bind_double(st, 8, k->actual_b);
        rc |= sqlite3_bind_double(st, 9, k->nominal_b);
        rc |= sqlite3_bind_int64(st, 10, k->created_ms);
        rc |= BIND_STR(st, 11, k->model);
        e = step_done(c, st, rc, "write calibration");
    }
    for (int i = 0; !e && i < w->n_webhook_events; i++) {
        const struct store_webhook_event *v = &w->webhook_events[i];
        sqlite3_stmt *st = stmt(c, S_DLV_ENQUEUE);
        if (!st)
            return ERR_IO;
        int rc = BIND_STR(st, 1, v->event_id);
        rc |= sqlite3_bind_text(st, 2, job->id, -1, SQLITE_STATIC);
        rc |= BIND_STR(st, 3, v->type);
        rc |= BIND_STR(st, 4, v->body);
        rc |= sqlite3_bind_int64(st, 5, v->created_ms);
        rc |= sqlite3_bind_text(st, 6, job->account, -1, SQLITE_STATIC);
        e = step_done(c, st, rc, "enqueue webhook deliveries");
    }
    return e;
}

static enum alallo_err sq_job_update(struct store_impl *s, const char *id, const char *attempt_id,
                                 store_job_fn fn, void *ctx)
{
    struct store_job job;
    struct store_attempt att;
    WRITE_BEGIN(s);
    enum alallo_err e = exec_stmt(c, S_BEGIN);
    if (e)
        goto out;
    e = job_get_on(c, NULL, id, &job);
    if (!e && attempt_id) {
        e = attempt_get_on(c, attempt_id, &att);
        if (!e && strcmp(att.job, job.id) != 0)
            e = ERR_NOT_FOUND;
    }
    if (!e) {
        store_writes_reset(&s->writes);
        e = fn(&job, attempt_id ? &att : NULL, &s->writes, ctx);
    }
    if (!e)
        e = write_queued(c, &job, &s->writes);
    if (!e && attempt_id)
        e = put_attempt(c, &att);
    if (!e) {
        sqlite3_stmt *st = stmt(c, S_JOB_UPDATE);
        if (!st) {
            e = ERR_IO;
        } else {
            int rc = bind_job(st, &job);
            rc |= sqlite3_bind_int64(st, JOB_NCOLS + 1, job.seq);
            e = step_done(c, st, rc, "update job");
        }
    }
    if (!e)
        e = exec_stmt(c, S_COMMIT);
    if (e)
        exec_stmt(c, S_ROLLBACK);
out:
    WRITE_END(s);
    return e;
}

/* ---- attempts, events, log, checkpoints ------------------------------- */

static enum alallo_err sq_attempt_get(struct store_impl *s, const char *id, struct store_attempt *out)
{
    READ_BEGIN(s);
    enum alallo_err e = attempt_get_on(c, id, out);
    READ_END(s);
    return e;
}

static enum alallo_err attempt_list(struct store_impl *s, enum sql_id id, const char *key,
                                    struct store_attempt *out, int cap, int *n)
{
    *n = 0;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, id);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int(st, 2, cap);
        while ((rc == SQLITE_OK || rc == SQLITE_ROW) && (rc = sqlite3_step(st)) == SQLITE_ROW && *n < cap)
            read_attempt(st, &out[(*n)++]);
        sqlite3_reset(st);
        e = (rc == SQLITE_DONE || rc == SQLITE_ROW) ? ERR_OK : from_sqlite(rc);
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_attempt_list(struct store_impl *s, const char *job, struct store_attempt *out,
                                   int cap, int *n)
{
    return attempt_list(s, S_ATT_LIST, job, out, cap, n);
}

static enum alallo_err sq_attempt_list_open(struct store_impl *s, const char *worker,
                                        struct store_attempt *out, int cap, int *n)
{
    return attempt_list(s, S_ATT_OPEN, worker, out, cap, n);
}

static enum alallo_err sq_event_list(struct store_impl *s, const char *job, int64_t before_seq, int limit,
                                 struct store_event *out, int *n, bool *has_more)
{
    *n = 0;
    *has_more = false;
    if (limit < 1 || limit > STORE_LIST_MAX)
        return ERR_INVALID;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_EV_LIST);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(st, 2, before_seq > 0 ? before_seq : INT64_MAX);
        rc |= sqlite3_bind_int(st, 3, limit + 1);
        while ((rc == SQLITE_OK || rc == SQLITE_ROW) && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (*n == limit) {
                *has_more = true;
                break;
            }
            read_event(st, &out[(*n)++]);
        }
        sqlite3_reset(st);
        e = (rc == SQLITE_DONE || rc == SQLITE_ROW) ? ERR_OK : from_sqlite(rc);
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_log_read(struct store_impl *s, const char *job, const char *attempt,
                               int64_t after_seq, struct store_log_line *out, int cap, int *n)
{
    *n = 0;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, attempt ? S_LOG_READ : S_LOG_READ_ALL);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
        rc |= attempt ? sqlite3_bind_text(st, 2, attempt, -1, SQLITE_STATIC)
                      : sqlite3_bind_null(st, 2);
        rc |= sqlite3_bind_int64(st, 3, after_seq);
        rc |= sqlite3_bind_int(st, 4, cap);
        while ((rc == SQLITE_OK || rc == SQLITE_ROW) && (rc = sqlite3_step(st)) == SQLITE_ROW && *n < cap) {
            struct store_log_line *l = &out[(*n)++];
            l->seq = sqlite3_column_int64(st, 0);
            col_str(st, 1, l->attempt, sizeof l->attempt);
            col_str(st, 2, l->line, sizeof l->line);
        }
        sqlite3_reset(st);
        e = (rc == SQLITE_DONE || rc == SQLITE_ROW) ? ERR_OK : from_sqlite(rc);
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_log_last_attempt(struct store_impl *s, const char *job, char attempt[IDS_MAX])
{
    attempt[0] = '\0';
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_LOG_LAST);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
        e = step_row(c, st, rc, "read log");
        if (!e) {
            col_str(st, 0, attempt, IDS_MAX);
            sqlite3_reset(st);
        } else if (e == ERR_NOT_FOUND) {
            e = ERR_OK;
        }
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_checkpoint_list(struct store_impl *s, const char *job,
                                      struct store_checkpoint *out, int cap, int *n)
{
    *n = 0;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_CK_LIST);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int(st, 2, cap);
        while ((rc == SQLITE_OK || rc == SQLITE_ROW) && (rc = sqlite3_step(st)) == SQLITE_ROW && *n < cap) {
            struct store_checkpoint *k = &out[(*n)++];
            memset(k, 0, sizeof *k);
            col_str(st, 0, k->job, sizeof k->job);
            k->step = (long)sqlite3_column_int64(st, 1);
            col_str(st, 2, k->path, sizeof k->path);
            k->train_loss = sqlite3_column_double(st, 3);
            k->created_ms = sqlite3_column_int64(st, 4);
            col_str(st, 5, k->metrics, sizeof k->metrics);
        }
        sqlite3_reset(st);
        e = (rc == SQLITE_DONE || rc == SQLITE_ROW) ? ERR_OK : from_sqlite(rc);
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_checkpoint_get(struct store_impl *s, const char *job, long step,
                                     struct store_checkpoint *out)
{
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_CK_GET);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(st, 2, step);
        e = step_row(c, st, rc, "read checkpoint");
        if (!e) {
            memset(out, 0, sizeof *out);
            col_str(st, 0, out->job, sizeof out->job);
            out->step = (long)sqlite3_column_int64(st, 1);
            col_str(st, 2, out->path, sizeof out->path);
            out->train_loss = sqlite3_column_double(st, 3);
            out->created_ms = sqlite3_column_int64(st, 4);
            col_str(st, 5, out->metrics, sizeof out->metrics);
            sqlite3_reset(st);
        }
    }
    READ_END(s);
    return e;
}

/* ---- workers ---------------------------------------------------------- */

static enum alallo_err sq_worker_put(struct store_impl *s, const struct store_worker *w)
{
    WRITE_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_W_PUT);
    if (st) {
        int i = 1;
        int rc = BIND_STR(st, i++, w->name);
        rc |= BIND_STR(st, i++, w->resources);
        rc |= sqlite3_bind_int(st, i++, w->cpus);
        rc |= sqlite3_bind_int64(st, i++, w->mem_bytes);
        rc |= BIND_STR(st, i++, w->class_);
        rc |= sqlite3_bind_double(st, i++, w->price_per_hour);
        rc |= BIND_STR(st, i++, w->state);
        rc |= sqlite3_bind_int64(st, i++, w->last_heartbeat_ms);
        rc |= BIND_STR(st, i++, w->speed);
        rc |= sqlite3_bind_double(st, i++, w->tokens_per_s);
        rc |= sqlite3_bind_double(st, i++, w->flops);
        rc |= sqlite3_bind_int64(st, i++, w->registered_ms);
        e = step_done(c, st, rc, "write worker");
    }
    WRITE_END(s);
    return e;
}

static enum alallo_err sq_worker_get(struct store_impl *s, const char *name, struct store_worker *out)
{
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_W_GET);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        e = step_row(c, st, rc, "read worker");
        if (!e) {
            read_worker(st, out);
            sqlite3_reset(st);
        }
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_worker_list(struct store_impl *s, struct store_worker *out, int cap, int *n)
{
    *n = 0;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_W_LIST);
    if (st) {
        int rc = sqlite3_bind_int(st, 1, cap);
        while ((rc == SQLITE_OK || rc == SQLITE_ROW) && (rc = sqlite3_step(st)) == SQLITE_ROW && *n < cap)
            read_worker(st, &out[(*n)++]);
        sqlite3_reset(st);
        e = (rc == SQLITE_DONE || rc == SQLITE_ROW) ? ERR_OK : from_sqlite(rc);
    }
    READ_END(s);
    return e;
}

static enum alallo_err worker_update(struct store_impl *s, enum sql_id id, const char *name,
                                     const char *text, int64_t num)
{
    WRITE_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, id);
    if (st) {
        int rc = text ? sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC)
                      : sqlite3_bind_int64(st, 1, num);
        rc |= sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
        e = step_done(c, st, rc, "update worker");
        if (!e && sqlite3_changes(c->db) == 0)
            e = ERR_NOT_FOUND;
    }
    WRITE_END(s);
    return e;
}

static enum alallo_err sq_worker_heartbeat(struct store_impl *s, const char *name, int64_t now)
{
    return worker_update(s, S_W_HB, name, NULL, now);
}

static enum alallo_err sq_worker_set_state(struct store_impl *s, const char *name, const char *state)
{
    return worker_update(s, S_W_STATE, name, state, 0);
}

static enum alallo_err sq_worker_change_state(struct store_impl *s, const char *name, const char *from,
                                          const char *to, int64_t silent_before_ms)
{
    WRITE_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_W_CHANGE);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, to, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 3, from, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(st, 4, silent_before_ms);
        e = step_done(c, st, rc, "change worker state");
        if (!e && sqlite3_changes(c->db) == 0)
            e = ERR_CONFLICT;
    }
    WRITE_END(s);
    return e;
}

/* ---- ledger ----------------------------------------------------------- */

static enum alallo_err sq_ledger_list(struct store_impl *s, const char *account, int64_t before_seq,
                                  int limit, struct store_ledger_row *out, int *n, bool *has_more)
{
    *n = 0;
    *has_more = false;
    if (limit < 1 || limit > STORE_LIST_MAX)
        return ERR_INVALID;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_LED_LIST);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(st, 2, before_seq > 0 ? before_seq : INT64_MAX);
        rc |= sqlite3_bind_int(st, 3, limit + 1);
        while ((rc == SQLITE_OK || rc == SQLITE_ROW) && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (*n == limit) {
                *has_more = true;
                break;
            }
            read_ledger(st, &out[(*n)++]);
        }
        sqlite3_reset(st);
        e = (rc == SQLITE_DONE || rc == SQLITE_ROW) ? ERR_OK : from_sqlite(rc);
    }
    READ_END(s);
    return e;
}

/* ---- calibration ------------------------------------------------------ */

static enum alallo_err sq_calibration_list(struct store_impl *s, int cap, struct store_calibration *out,
                                       int *n)
{
    *n = 0;
    if (cap < 1)
        return ERR_INVALID;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_CAL_LIST);
    if (st) {
        int rc = sqlite3_bind_int(st, 1, cap);
        while ((rc == SQLITE_OK || rc == SQLITE_ROW) && (rc = sqlite3_step(st)) == SQLITE_ROW &&
               *n < cap) {
            struct store_calibration *k = &out[(*n)++];
            int i = 0;
            memset(k, 0, sizeof *k);
            col_str(st, i++, k->kind, sizeof k->kind);
            k->method = sqlite3_column_int(st, i++);
            k->class_ = sqlite3_column_int(st, i++);
            k->waited = sqlite3_column_int(st, i++);
            k->goal = sqlite3_column_int(st, i++);
            k->actual_a = sqlite3_column_double(st, i++);
            k->nominal_a = sqlite3_column_double(st, i++);
            k->actual_b = sqlite3_column_double(st, i++);
            k->nominal_b = sqlite3_column_double(st, i++);
            k->created_ms = sqlite3_column_int64(st, i++);
            col_str(st, i++, k->model, sizeof k->model);
        }
        sqlite3_reset(st);
        e = (rc == SQLITE_DONE || rc == SQLITE_ROW) ? ERR_OK : from_sqlite(rc);
    }
    READ_END(s);
    return e;
}

/* ---- webhooks --------------------------------------------------------- */

static void read_webhook(sqlite3_stmt *st, struct store_webhook *w)
{
    col_str(st, 0, w->id, sizeof w->id);
    col_str(st, 1, w->account, sizeof w->account);
    col_str(st, 2, w->url, sizeof w->url);
    col_str(st, 3, w->events, sizeof w->events);
    col_str(st, 4, w->secret, sizeof w->secret);
    w->created_ms = sqlite3_column_int64(st, 5);
}

static void read_delivery(sqlite3_stmt *st, struct store_delivery *d)
{
    d->seq = sqlite3_column_int64(st, 0);
    col_str(st, 1, d->event_id, sizeof d->event_id);
    col_str(st, 2, d->webhook, sizeof d->webhook);
    col_str(st, 3, d->account, sizeof d->account);
    col_str(st, 4, d->job, sizeof d->job);
    col_str(st, 5, d->type, sizeof d->type);
    col_str(st, 6, d->body, sizeof d->body);
    d->attempts = sqlite3_column_int(st, 7);
    d->next_ms = sqlite3_column_int64(st, 8);
    d->last_status = sqlite3_column_int(st, 9);
    col_str(st, 10, d->last_answer, sizeof d->last_answer);
    d->state = (enum store_delivery_state)sqlite3_column_int(st, 11);
    d->created_ms = sqlite3_column_int64(st, 12);
    d->delivered_ms = sqlite3_column_int64(st, 13);
}

static enum alallo_err sq_webhook_insert(struct store_impl *s, const struct store_webhook *w,
                                         int cap)
{
    WRITE_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_WH_INSERT);
    if (st) {
        int rc = BIND_STR(st, 1, w->id);
        rc |= BIND_STR(st, 2, w->account);
        rc |= BIND_STR(st, 3, w->url);
        rc |= BIND_STR(st, 4, w->events);
        rc |= BIND_STR(st, 5, w->secret);
        rc |= sqlite3_bind_int64(st, 6, w->created_ms);
        rc |= sqlite3_bind_int(st, 7, cap);
        e = step_done(c, st, rc, "write webhook");
        if (!e && sqlite3_changes(c->db) == 0)
            e = ERR_CONFLICT; /* the account has `cap` already */
    }
    WRITE_END(s);
    return e;
}

/* Reads up to cap rows of a bound statement with `read`. */
static enum alallo_err read_rows(sqlite3_stmt *st, int rc, void *out, size_t size, int cap,
                                 int *n, void (*read)(sqlite3_stmt *, void *))
{
    *n = 0;
    if (rc != SQLITE_OK) {
        sqlite3_reset(st);
        return ERR_INVALID;
    }
    while (*n < cap && (rc = sqlite3_step(st)) == SQLITE_ROW)
        read(st, (char *)out + (size_t)(*n)++ * size);
    sqlite3_reset(st);
    return (rc == SQLITE_DONE || rc == SQLITE_ROW) ? ERR_OK : from_sqlite(rc);
}

static void read_webhook_any(sqlite3_stmt *st, void *p) { read_webhook(st, p); }
static void read_delivery_any(sqlite3_stmt *st, void *p) { read_delivery(st, p); }

static enum alallo_err sq_webhook_list(struct store_impl *s, const char *account,
                                       struct store_webhook *out, int cap, int *n)
{
    *n = 0;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_WH_LIST);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int(st, 2, cap);
        e = read_rows(st, rc, out, sizeof *out, cap, n, read_webhook_any);
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_webhook_get(struct store_impl *s, const char *account, const char *id,
                                      struct store_webhook *out)
{
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, account ? S_WH_GET_ACC : S_WH_GET);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        if (account)
            rc |= sqlite3_bind_text(st, 2, account, -1, SQLITE_STATIC);
        e = step_row(c, st, rc, "read webhook");
        if (!e) {
            read_webhook(st, out);
            sqlite3_reset(st);
        }
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_webhook_delete(struct store_impl *s, const char *account, const char *id)
{
    WRITE_BEGIN(s);
    enum alallo_err e = exec_stmt(c, S_BEGIN);
    if (e)
        goto out;
    sqlite3_stmt *st = stmt(c, S_WH_DELETE);
    e = ERR_IO;
    if (st) {
        int rc = sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 2, account, -1, SQLITE_STATIC);
        e = step_done(c, st, rc, "delete webhook");
        if (!e && sqlite3_changes(c->db) == 0)
            e = ERR_NOT_FOUND;
    }
    if (!e) {
        st = stmt(c, S_WH_DELETE_DLV);
        e = st ? step_done(c, st, sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC),
                           "delete deliveries")
               : ERR_IO;
    }
    if (!e)
        e = exec_stmt(c, S_COMMIT);
    if (e)
        exec_stmt(c, S_ROLLBACK);
out:
    WRITE_END(s);
    return e;
}

static enum alallo_err sq_delivery_list(struct store_impl *s, const char *webhook,
                                        struct store_delivery *out, int cap, int *n)
{
    *n = 0;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_DLV_LIST);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, webhook, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int(st, 2, cap);
        e = read_rows(st, rc, out, sizeof *out, cap, n, read_delivery_any);
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_delivery_due(struct store_impl *s, int64_t now, struct store_delivery *out,
                                       int cap, int *n)
{
    *n = 0;
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_DLV_DUE);
    if (st) {
        int rc = sqlite3_bind_int64(st, 1, now);
        rc |= sqlite3_bind_int(st, 2, cap);
        e = read_rows(st, rc, out, sizeof *out, cap, n, read_delivery_any);
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_delivery_record(struct store_impl *s, const struct store_delivery *d)
{
    WRITE_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_DLV_RECORD);
    if (st) {
        int rc = sqlite3_bind_int(st, 1, d->attempts);
        rc |= sqlite3_bind_int(st, 2, d->last_status);
        rc |= BIND_STR(st, 3, d->last_answer);
        rc |= sqlite3_bind_int(st, 4, (int)d->state);
        rc |= sqlite3_bind_int64(st, 5, d->next_ms);
        rc |= sqlite3_bind_int64(st, 6, d->delivered_ms);
        rc |= sqlite3_bind_int64(st, 7, d->seq);
        e = step_done(c, st, rc, "record delivery");
        if (!e && sqlite3_changes(c->db) == 0)
            e = ERR_NOT_FOUND;
    }
    WRITE_END(s);
    return e;
}

/* ---- account settings and integration cursors ------------------------ */

static enum alallo_err sq_setting_put(struct store_impl *s, const char *account, const char *key,
                                      const char *value)
{
    WRITE_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, value[0] ? S_SET_PUT : S_SET_DEL);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
        if (value[0])
            rc |= sqlite3_bind_text(st, 3, value, -1, SQLITE_STATIC);
        e = step_done(c, st, rc, "write account setting");
    }
    WRITE_END(s);
    return e;
}

static enum alallo_err sq_setting_get(struct store_impl *s, const char *account, const char *key,
                                      char *out, size_t cap)
{
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_SET_GET);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
        e = step_row(c, st, rc, "read account setting");
        if (!e) {
            col_str(st, 0, out, cap);
            sqlite3_reset(st);
        }
    }
    READ_END(s);
    return e;
}

static enum alallo_err sq_cursor_put(struct store_impl *s, const char *job, const char *kind,
                                     int64_t sent_seq, int64_t sent_lines)
{
    WRITE_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_CUR_PUT);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(st, 3, sent_seq);
        rc |= sqlite3_bind_int64(st, 4, sent_lines);
        e = step_done(c, st, rc, "write integration cursor");
    }
    WRITE_END(s);
    return e;
}

static enum alallo_err sq_cursor_pending(struct store_impl *s, const char *kind,
                                         struct store_cursor *out, int cap, int *n)
{
    READ_BEGIN(s);
    enum alallo_err e = ERR_IO;
    sqlite3_stmt *st = stmt(c, S_CUR_PENDING);
    if (st) {
        int rc = sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int(st, 2, cap);
        e = rc == SQLITE_OK ? ERR_OK : ERR_INVALID;
        while (!e && *n < cap) {
            rc = sqlite3_step(st);
            if (rc == SQLITE_DONE)
                break;
            if (rc != SQLITE_ROW) {
                set_error("list integration cursors", c->db);
                e = from_sqlite(rc);
                break;
            }
            struct store_cursor *k = &out[(*n)++];
            memset(k, 0, sizeof *k);
            col_str(st, 0, k->job, sizeof k->job);
            col_str(st, 1, k->account, sizeof k->account);
            k->sent_seq = sqlite3_column_int64(st, 2);
            k->event_seq = sqlite3_column_int64(st, 3);
            k->sent_lines = sqlite3_column_int64(st, 4);
        }
        sqlite3_reset(st);
    }
    READ_END(s);
    return e;
}

const struct store_ops store_sqlite_ops = {
    .name = "sqlite",
    .close = sq_close,
    .schema_version = sq_schema_version,
    .account_create = sq_account_create,
    .account_by_key_hash = sq_account_by_key_hash,
    .account_by_name = sq_account_by_name,
    .file_insert = sq_file_insert,
    .file_get = sq_file_get,
    .file_list = sq_file_list,
    .file_delete = sq_file_delete,
    .job_insert = sq_job_insert,
    .job_get = sq_job_get,
    .job_by_model = sq_job_by_model,
    .job_list = sq_job_list,
    .job_list_models = sq_job_list_models,
    .job_count_by_status = sq_job_count_by_status,
    .job_ids_in_status = sq_job_ids_in_status,
    .waiting_each = sq_waiting_each,
    .claim_candidates = sq_claim_candidates,
    .job_update = sq_job_update,
    .attempt_get = sq_attempt_get,
    .attempt_list = sq_attempt_list,
    .attempt_list_open = sq_attempt_list_open,
    .event_list = sq_event_list,
    .log_read = sq_log_read,
    .log_last_attempt = sq_log_last_attempt,
    .checkpoint_list = sq_checkpoint_list,
    .checkpoint_get = sq_checkpoint_get,
    .worker_put = sq_worker_put,
    .worker_get = sq_worker_get,
    .worker_list = sq_worker_list,
    .worker_heartbeat = sq_worker_heartbeat,
    .worker_set_state = sq_worker_set_state,
    .worker_change_state = sq_worker_change_state,
    .ledger_list = sq_ledger_list,
    .calibration_list = sq_calibration_list,
    .setting_put = sq_setting_put,
    .setting_get = sq_setting_get,
    .cursor_put = sq_cursor_put,
    .cursor_pending = sq_cursor_pending,
    .webhook_insert = sq_webhook_insert,
    .webhook_list = sq_webhook_list,
    .webhook_get = sq_webhook_get,
    .webhook_delete = sq_webhook_delete,
    .delivery_list = sq_delivery_list,
    .delivery_due = sq_delivery_due,
    .delivery_record = sq_delivery_record,
};
