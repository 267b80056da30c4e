/* store_pg.c - the store (store.h) on PostgreSQL 15, through libpq.
 *
 * Connections: WRITERS for group-commit batches of job creations (one
 * per leader: one batch executes while another's COMMIT flushes) and a
 * pool of POOL for everything else; each is opened from
 * the same URL, with lock_timeout, statement_timeout and
 * synchronous_commit=on set for its session, so that a COMMIT returns only
 * once the server has flushed it. Statements are prepared per connection on
 * first use.
 *
 * Group commit: store_job_insert() queues its job; a caller that finds a
 * leader's slot free becomes a leader, takes every queued job and writes
 * them in one transaction on that slot's writer (one statement each: the
 * job, its first event, and the check that its data sets are files of its
 * account), then wakes the others after COMMIT. Nobody returns before the
 * commit that holds their job. A job that fails for a reason of its own
 * (a bad value) would abort the whole transaction: the batch is then
 * written again with a savepoint per job, so that it fails alone.
 *
 * store_job_update() runs on a pool connection: BEGIN, the job row and the
 * attempt row SELECTed FOR UPDATE, the callback, the writes, COMMIT.
 * Updates of different jobs run at once. On a serialization failure
 * (40001) or a deadlock (40P01) the whole transaction, callback included,
 * is run again, at most RETRIES times.
 *
 * A lost connection is reset before its next use; a read that finds it
 * lost is retried once on the fresh one, a write answers ERR_UNAVAILABLE
 * (its outcome is unknown to us, so it is not repeated).
 */
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/text.h"
#include "store/store_backend.h"
#include "store/store_columns.h"
#include "store/store_group.h"
#include "store/store_writes.h"

#define POOL 8
#define WRITERS 4 /* group-commit leaders at once */
#define RETRIES 5
#define MAX_PARAMS 56
#define NUM_TEXT 32

/* ---- schema ----------------------------------------------------------- */

/* The first entry is the whole schema at version PG_FIRST (the SQLite
 * list's migrations 1..9 in PostgreSQL's dialect); each later entry is one
 * migration, the same number as in store_sqlite.c. Never edit a released
 * entry: add one. Column names are SQLite's, so that `alallo store copy`
 * can move rows by name. */
#define PG_FIRST 9
static const char *const migrations[] = {
    /* 9: the schema of SQLite migrations 1..9 */
    "CREATE TABLE accounts(id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
    " key_hash TEXT NOT NULL UNIQUE, created BIGINT NOT NULL);"
    "CREATE TABLE files(seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " id TEXT NOT NULL UNIQUE, account TEXT NOT NULL, filename TEXT NOT NULL,"
    " bytes BIGINT NOT NULL, purpose TEXT NOT NULL, examples BIGINT NOT NULL,"
    " text_bytes BIGINT NOT NULL, path TEXT NOT NULL, created BIGINT NOT NULL);"
    "CREATE INDEX files_account ON files(account, seq);"
    "CREATE TABLE jobs(seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " id TEXT NOT NULL UNIQUE, account TEXT NOT NULL, name TEXT NOT NULL, model TEXT NOT NULL,"
    " training_file TEXT NOT NULL, validation_file TEXT NOT NULL, method TEXT NOT NULL,"
    " precision TEXT NOT NULL, goal TEXT NOT NULL, adapter TEXT NOT NULL,"
    " suffix TEXT NOT NULL, n_epochs BIGINT NOT NULL, batch_size BIGINT NOT NULL,"
    " lr_multiplier DOUBLE PRECISION NOT NULL, seed BIGINT NOT NULL, examples BIGINT NOT NULL,"
    " tokens BIGINT NOT NULL, memory_bytes BIGINT NOT NULL, max_steps BIGINT NOT NULL,"
    " steps_done BIGINT NOT NULL, status TEXT NOT NULL, message TEXT NOT NULL,"
    " estimate TEXT NOT NULL, price_charged DOUBLE PRECISION NOT NULL,"
    " price_refunded DOUBLE PRECISION NOT NULL, fine_tuned_model TEXT NOT NULL,"
    " created BIGINT NOT NULL, started BIGINT NOT NULL, finished BIGINT NOT NULL,"
    " metadata TEXT NOT NULL, fence BIGINT NOT NULL, active_attempt TEXT NOT NULL,"
    " stop_reason TEXT NOT NULL, running_ms BIGINT NOT NULL, run_started_ms BIGINT NOT NULL,"
    " run_start_step BIGINT NOT NULL, train_loss DOUBLE PRECISION NOT NULL,"
    " trained_tokens BIGINT NOT NULL, log_seq BIGINT NOT NULL, event_seq BIGINT NOT NULL,"
    " internal_failure BIGINT NOT NULL, est_low_s DOUBLE PRECISION NOT NULL DEFAULT 0,"
    " est_high_s DOUBLE PRECISION NOT NULL DEFAULT 0,"
    " est_train_low_s DOUBLE PRECISION NOT NULL DEFAULT 0,"
    " est_train_high_s DOUBLE PRECISION NOT NULL DEFAULT 0,"
    " est_price_high DOUBLE PRECISION NOT NULL DEFAULT 0, plan TEXT NOT NULL DEFAULT '',"
    " ledger_state TEXT NOT NULL DEFAULT '', first_loss DOUBLE PRECISION NOT NULL DEFAULT 0);"
    "CREATE INDEX jobs_account ON jobs(account, seq);"
    "CREATE INDEX jobs_status ON jobs(status);"
    "CREATE INDEX jobs_model ON jobs(fine_tuned_model) WHERE fine_tuned_model <> '';"
    "CREATE INDEX jobs_waiting ON jobs(account, seq)"
    " WHERE status IN ('queued','re-scheduling') AND active_attempt = '';"
    "CREATE INDEX jobs_active ON jobs(seq)"
    " WHERE status IN ('queued','re-scheduling','running','cancelling');"
    "CREATE TABLE attempts(id TEXT PRIMARY KEY, job TEXT NOT NULL, worker TEXT NOT NULL,"
    " fence BIGINT NOT NULL, status TEXT NOT NULL, start_step BIGINT NOT NULL,"
    " end_step BIGINT NOT NULL, reason TEXT NOT NULL, price_per_hour DOUBLE PRECISION NOT NULL,"
    " started BIGINT NOT NULL, ended BIGINT NOT NULL, run_ms BIGINT NOT NULL,"
    " events_applied BIGINT NOT NULL DEFAULT 0, t_started DOUBLE PRECISION NOT NULL DEFAULT -1,"
    " t_last DOUBLE PRECISION NOT NULL DEFAULT -1, token_hash TEXT NOT NULL DEFAULT '',"
    " engine_id TEXT NOT NULL DEFAULT '', engine_state TEXT NOT NULL DEFAULT '',"
    " engine_reason TEXT NOT NULL DEFAULT '', engine_running BIGINT NOT NULL DEFAULT 0,"
    " heartbeat BIGINT NOT NULL DEFAULT 0, node TEXT NOT NULL DEFAULT '',"
    " resume_from TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX attempts_job ON attempts(job, fence);"
    "CREATE INDEX attempts_open ON attempts(worker, started) WHERE status <> 'ended';"
    "CREATE TABLE events(job TEXT NOT NULL, seq BIGINT NOT NULL, created BIGINT NOT NULL,"
    " level TEXT NOT NULL, type TEXT NOT NULL, message TEXT NOT NULL, data TEXT NOT NULL,"
    " PRIMARY KEY(job, seq));"
    "CREATE TABLE log_lines(job TEXT NOT NULL, seq BIGINT NOT NULL, attempt TEXT NOT NULL,"
    " line TEXT NOT NULL, PRIMARY KEY(job, seq));"
    "CREATE INDEX log_attempt ON log_lines(job, attempt, seq);"
    "CREATE TABLE checkpoints(job TEXT NOT NULL, step BIGINT NOT NULL, path TEXT NOT NULL,"
    " train_loss DOUBLE PRECISION NOT NULL, created BIGINT NOT NULL, PRIMARY KEY(job, step));"
    "CREATE TABLE workers(name TEXT PRIMARY KEY, resources TEXT NOT NULL, cpus BIGINT NOT NULL,"
    " mem_bytes BIGINT NOT NULL, class TEXT NOT NULL, price_per_hour DOUBLE PRECISION NOT NULL,"
    " state TEXT NOT NULL, last_heartbeat BIGINT NOT NULL, speed TEXT NOT NULL,"
    " tokens_per_s DOUBLE PRECISION NOT NULL, flops DOUBLE PRECISION NOT NULL,"
    " registered BIGINT NOT NULL);"
    "CREATE TABLE ledger(seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " account TEXT NOT NULL, job TEXT NOT NULL, attempt TEXT NOT NULL, kind TEXT NOT NULL"
    " CHECK(kind IN ('charge','refund')), amount DOUBLE PRECISION NOT NULL,"
    " steps BIGINT NOT NULL, created BIGINT NOT NULL, from_step BIGINT NOT NULL DEFAULT 0,"
    " to_step BIGINT NOT NULL DEFAULT 0, reason TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX ledger_account ON ledger(account, seq);"
    "CREATE TABLE calibration(seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " kind TEXT NOT NULL, method BIGINT NOT NULL, class BIGINT NOT NULL,"
    " waited BIGINT NOT NULL, goal BIGINT NOT NULL, actual_a DOUBLE PRECISION NOT NULL,"
    " nominal_a DOUBLE PRECISION NOT NULL, actual_b DOUBLE PRECISION NOT NULL,"
    " nominal_b DOUBLE PRECISION NOT NULL, created BIGINT NOT NULL,"
    " model TEXT NOT NULL DEFAULT '');",
    /* 10: as SQLite's 10, a job's further hyper-parameters and a file's format */
    "ALTER TABLE jobs ADD COLUMN hyper TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE files ADD COLUMN format TEXT NOT NULL DEFAULT '';",
    /* 11: as SQLite's 11, a checkpoint's validation metrics */
    "ALTER TABLE checkpoints ADD COLUMN metrics TEXT NOT NULL DEFAULT '';",
    /* 12: as SQLite's 12, webhooks and the outbox of their deliveries */
    "CREATE TABLE webhooks(seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " id TEXT NOT NULL UNIQUE, account TEXT NOT NULL, url TEXT NOT NULL, events TEXT NOT NULL,"
    " secret TEXT NOT NULL, created BIGINT NOT NULL);"
    "CREATE INDEX webhooks_account ON webhooks(account, seq);"
    "CREATE TABLE deliveries(seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " event_id TEXT NOT NULL, webhook TEXT NOT NULL, account TEXT NOT NULL, job TEXT NOT NULL,"
    " type TEXT NOT NULL, body TEXT NOT NULL, attempts BIGINT NOT NULL DEFAULT 0,"
    " next_try BIGINT NOT NULL, last_status BIGINT NOT NULL DEFAULT 0,"
    " last_answer TEXT NOT NULL DEFAULT '', state BIGINT NOT NULL DEFAULT 0,"
    " created BIGINT NOT NULL, delivered BIGINT NOT NULL DEFAULT 0, UNIQUE(webhook, event_id));"
    "CREATE INDEX deliveries_webhook ON deliveries(webhook, seq);"
    "CREATE INDEX deliveries_pending ON deliveries(webhook, job, seq) WHERE state = 0;",
    /* 13: as SQLite's 13, account settings and integration cursors */
    "CREATE TABLE account_settings(account TEXT NOT NULL, key TEXT NOT NULL,"
    " value TEXT NOT NULL, PRIMARY KEY(account, key));"
    "CREATE TABLE integration_cursors(job TEXT NOT NULL, kind TEXT NOT NULL,"
    " sent_seq BIGINT NOT NULL, sent_lines BIGINT NOT NULL, PRIMARY KEY(job, kind));",
    /* 14: as SQLite's 14, each endpoint's oldest pending delivery */
    "CREATE INDEX deliveries_heads ON deliveries(webhook, seq) WHERE state = 0;",
};
#define MIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))
#define PG_LATEST (PG_FIRST - 1 + MIGRATIONS)

int store_pg_first_version(void) { return PG_FIRST; }
int store_pg_latest(void) { return PG_LATEST; }

/* ---- statements ------------------------------------------------------- */

/* The job's values typed, for INSERT … SELECT (no target column to infer
 * a parameter's type from). */
#define JOB_VALUES                                                                                 \
    "$1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text, "  \
    "$10::text, $11::text, $12::bigint, $13::bigint, $14::float8, $15::bigint, $16::bigint, "     \
    "$17::bigint, $18::bigint, $19::bigint, $20::bigint, $21::text, $22::text, $23::text, "       \
    "$24::float8, $25::float8, $26::text, $27::bigint, $28::bigint, $29::bigint, $30::text, "     \
    "$31::bigint, $32::text, $33::text, $34::bigint, $35::bigint, $36::bigint, $37::float8, "     \
    "$38::bigint, $39::bigint, $40::bigint, $41::bigint, $42::float8, $43::float8, $44::float8, " \
    "$45::float8, $46::float8, $47::text, $48::text, $49::float8, $50::text"
/* A job is inserted only while its data sets are files of its account; the
 * files are locked FOR SHARE, so a delete (which locks its file FOR
 * UPDATE) either commits first or waits for this transaction. No row back:
 * the id exists, or a data set is gone. */
#define JOB_INSERT                                                                                 \
    "INSERT INTO jobs(" JOB_COLS ") SELECT " JOB_VALUES                                            \
    " WHERE EXISTS (SELECT 1 FROM files WHERE account = $2 AND id = $5 FOR SHARE)"                \
    " AND ($6 = '' OR EXISTS (SELECT 1 FROM files WHERE account = $2 AND id = $6 FOR SHARE))"     \
    " ON CONFLICT (id) DO NOTHING RETURNING seq"

enum sql_id {
    S_ACC_INSERT,
    S_ACC_BY_HASH,
    S_ACC_BY_NAME,
    S_FILE_INSERT,
    S_FILE_GET,
    S_FILE_LOCK,
    S_FILE_LIST,
    S_FILE_LIST_AFTER,
    S_FILE_DELETE,
    S_FILE_IN_USE,
    S_JOB_INSERT,
    S_JOB_INSERT_EV,
    S_JOB_EXISTS,
    S_JOB_UPDATE,
    S_JOB_GET,
    S_JOB_GET_ACC,
    S_JOB_LOCK,
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
    S_ATT_LOCK,
    S_ATT_LIST,
    S_ATT_OPEN,
    S_EV_INSERT,
    S_EV_LIST,
    S_LOG_INSERT,
    S_LOG_READ,
    S_LOG_READ_ALL,
    S_LOG_LAST,
    S_SET_PUT,
    S_SET_DEL,
    S_SET_GET,
    S_CUR_PUT,
    S_CUR_PENDING,
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
    S_WH_LOCK,
    S_WH_INSERT,
    S_WH_LIST,
    S_WH_GET,
    S_WH_GET_ACC,
    S_WH_DELETE,
    S_DLV_ENQUEUE,
    S_DLV_LIST,
    S_DLV_DUE,
    S_DLV_RECORD,
    S_COUNT
};

static const char *const sql_text[S_COUNT] = {
    [S_ACC_INSERT] = "INSERT INTO accounts(id, name, key_hash, created) VALUES($1,$2,$3,$4)",
    [S_ACC_BY_HASH] = "SELECT id, name, created FROM accounts WHERE key_hash = $1",
    [S_ACC_BY_NAME] = "SELECT id, name, created FROM accounts WHERE name = $1",
    [S_FILE_INSERT] = "INSERT INTO files(" FILE_COLS ") VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)",
    [S_FILE_GET] = "SELECT " FILE_COLS " FROM files WHERE id = $1 AND account = $2",
    [S_FILE_LOCK] = "SELECT " FILE_COLS " FROM files WHERE id = $1 AND account = $2 FOR UPDATE",
    [S_FILE_LIST] = "SELECT " FILE_COLS " FROM files WHERE account = $1 ORDER BY seq DESC LIMIT $2",
    [S_FILE_LIST_AFTER] = "SELECT " FILE_COLS " FROM files WHERE account = $1 AND seq <"
                          " (SELECT seq FROM files WHERE id = $2 AND account = $1)"
                          " ORDER BY seq DESC LIMIT $3",
    [S_FILE_DELETE] = "DELETE FROM files WHERE id = $1 AND account = $2",
    [S_FILE_IN_USE] = "SELECT 1 FROM jobs WHERE account = $1 AND (training_file = $2 OR"
                      " validation_file = $2) AND status NOT IN ('succeeded','failed','cancelled')"
                      " LIMIT 1",
    [S_JOB_INSERT] = JOB_INSERT,
    /* The job and its first event in one statement (one round trip). */
    [S_JOB_INSERT_EV] = "WITH j AS (" JOB_INSERT "), e AS (INSERT INTO events(job, seq, created,"
                        " level, type, message, data) SELECT $1, 1, $51::bigint, $52::text, $53::text,"
                        " $54::text, $55::text"
                        " FROM j) SELECT seq FROM j",
    [S_JOB_EXISTS] = "SELECT 1 FROM jobs WHERE id = $1",
    [S_JOB_UPDATE] = "UPDATE jobs SET (" JOB_COLS ") = (" JOB_VALUES ") WHERE seq = $51",
    [S_JOB_GET] = JOB_SELECT "WHERE id = $1",
    [S_JOB_GET_ACC] = JOB_SELECT "WHERE id = $1 AND account = $2",
    [S_JOB_LOCK] = JOB_SELECT "WHERE id = $1 FOR UPDATE",
    [S_JOB_BY_MODEL] = JOB_SELECT "WHERE fine_tuned_model = $1 AND account = $2 AND"
                                  " fine_tuned_model <> ''",
    [S_JOB_SEQ_ACC] = "SELECT seq FROM jobs WHERE id = $1 AND account = $2",
    [S_JOB_LIST] = JOB_SELECT "WHERE account = $1 ORDER BY seq DESC LIMIT $2",
    /* The cursor's seq found in the same statement (one round trip); no
     * row at all sends the caller to S_JOB_SEQ_ACC to tell an unknown
     * cursor from the end. */
    [S_JOB_LIST_AFTER] = JOB_SELECT "WHERE account = $1 AND seq <"
                                    " (SELECT seq FROM jobs WHERE id = $2 AND account = $1)"
                                    " ORDER BY seq DESC LIMIT $3",
    [S_JOB_LIST_MODELS] = JOB_SELECT "WHERE account = $1 AND fine_tuned_model <> ''"
                                     " ORDER BY seq DESC LIMIT $2",
    [S_JOB_COUNTS] = "SELECT status, COUNT(*) FROM jobs GROUP BY status",
    [S_JOB_IDS_STATUS] = "SELECT id FROM jobs WHERE status = $1 ORDER BY seq LIMIT $2",
    [S_WAITING] = "SELECT " WAITING_COLS " FROM jobs"
                  " WHERE status IN ('queued','re-scheduling','running','cancelling')"
                  " ORDER BY seq LIMIT $1",
    /* Each account's oldest claimable job (SQLite's MIN()/GROUP BY). */
    [S_CLAIM] = "SELECT DISTINCT ON (account) id, account, seq FROM jobs"
                " WHERE status IN ('queued','re-scheduling') AND active_attempt = ''"
                " AND memory_bytes <= $1 ORDER BY account, seq",
    [S_ATT_PUT] = "INSERT INTO attempts(" ATT_COLS ") VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,"
                  "$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23) ON CONFLICT (id) DO UPDATE"
                  " SET job = EXCLUDED.job, worker = EXCLUDED.worker, fence = EXCLUDED.fence,"
                  " status = EXCLUDED.status, start_step = EXCLUDED.start_step,"
                  " end_step = EXCLUDED.end_step, reason = EXCLUDED.reason,"
                  " price_per_hour = EXCLUDED.price_per_hour, started = EXCLUDED.started,"
                  " ended = EXCLUDED.ended, run_ms = EXCLUDED.run_ms,"
                  " events_applied = EXCLUDED.events_applied, t_started = EXCLUDED.t_started,"
                  " t_last = EXCLUDED.t_last, token_hash = EXCLUDED.token_hash,"
                  " engine_id = EXCLUDED.engine_id, engine_state = EXCLUDED.engine_state,"
                  " engine_reason = EXCLUDED.engine_reason,"
                  " engine_running = EXCLUDED.engine_running, heartbeat = EXCLUDED.heartbeat,"
                  " node = EXCLUDED.node, resume_from = EXCLUDED.resume_from",
    [S_ATT_GET] = "SELECT " ATT_COLS " FROM attempts WHERE id = $1",
    [S_ATT_LOCK] = "SELECT " ATT_COLS " FROM attempts WHERE id = $1 FOR UPDATE",
    [S_ATT_LIST] = "SELECT " ATT_COLS " FROM attempts WHERE job = $1 ORDER BY fence LIMIT $2",
    [S_ATT_OPEN] = "SELECT " ATT_COLS " FROM attempts"
                   " WHERE status <> 'ended' AND ($1 = '' OR worker = $1)"
                   " ORDER BY worker, started LIMIT $2",
    [S_EV_INSERT] = "INSERT INTO events(" EVENT_COLS ")"
                    " VALUES($1,$2,$3,$4,$5,$6,$7)",
    [S_EV_LIST] = "SELECT " EVENT_COLS " FROM events"
                  " WHERE job = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3",
    [S_LOG_INSERT] = "INSERT INTO log_lines(job, seq, attempt, line) VALUES($1,$2,$3,$4)",
    [S_LOG_READ] = "SELECT seq, attempt, line FROM log_lines WHERE job = $1 AND attempt = $2"
                   " AND seq > $3 ORDER BY seq LIMIT $4",
    [S_LOG_READ_ALL] = "SELECT seq, attempt, line FROM log_lines WHERE job = $1"
                       " AND seq > $2 ORDER BY seq LIMIT $3",
    [S_LOG_LAST] = "SELECT attempt FROM log_lines WHERE job = $1 ORDER BY seq DESC LIMIT 1",
    [S_CK_PUT] = "INSERT INTO checkpoints(" CHECKPOINT_COLS ")"
                 " VALUES($1,$2,$3,$4,$5,$6) ON CONFLICT (job, step) DO UPDATE SET"
                 " path = EXCLUDED.path, train_loss = EXCLUDED.train_loss,"
                 " created = EXCLUDED.created, metrics = EXCLUDED.metrics",
    [S_CK_LIST] = "SELECT " CHECKPOINT_COLS " FROM checkpoints WHERE job = $1"
                  " ORDER BY step DESC LIMIT $2",
    [S_CK_GET] = "SELECT " CHECKPOINT_COLS " FROM checkpoints WHERE job = $1"
                 " AND step = $2",
    [S_W_PUT] = "INSERT INTO workers(" WORKER_COLS ") VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,"
                "$12) ON CONFLICT (name) DO UPDATE SET resources = EXCLUDED.resources,"
                " cpus = EXCLUDED.cpus, mem_bytes = EXCLUDED.mem_bytes, class = EXCLUDED.class,"
                " price_per_hour = EXCLUDED.price_per_hour, state = EXCLUDED.state,"
                " last_heartbeat = EXCLUDED.last_heartbeat, speed = EXCLUDED.speed,"
                " tokens_per_s = EXCLUDED.tokens_per_s, flops = EXCLUDED.flops,"
                " registered = EXCLUDED.registered",
    [S_W_GET] = "SELECT " WORKER_COLS " FROM workers WHERE name = $1",
    [S_W_LIST] = "SELECT " WORKER_COLS " FROM workers ORDER BY name LIMIT $1",
    [S_W_HB] = "UPDATE workers SET last_heartbeat = $1 WHERE name = $2",
    [S_W_STATE] = "UPDATE workers SET state = $1 WHERE name = $2",
    [S_W_CHANGE] = "UPDATE workers SET state = $1 WHERE name = $2 AND state = $3"
                   " AND ($4::bigint = 0 OR last_heartbeat < $4::bigint)",
    [S_LED_INSERT] = "INSERT INTO ledger(account, job, attempt, kind, amount, steps, created,"
                     " from_step, to_step, reason) VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)",
    [S_LED_LIST] = "SELECT " LEDGER_COLS " FROM ledger WHERE account = $1 AND seq < $2"
                   " ORDER BY seq DESC LIMIT $3",
    [S_CAL_INSERT] = "INSERT INTO calibration(" CALIB_COLS ")"
                     " VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)",
    [S_SET_PUT] = "INSERT INTO account_settings(account, key, value) VALUES($1,$2,$3)"
                  " ON CONFLICT(account, key) DO UPDATE SET value = excluded.value",
    [S_SET_DEL] = "DELETE FROM account_settings WHERE account = $1 AND key = $2",
    [S_SET_GET] = "SELECT value FROM account_settings WHERE account = $1 AND key = $2",
    [S_CUR_PUT] = "INSERT INTO integration_cursors(job, kind, sent_seq, sent_lines) VALUES($1,$2,$3,$4)"
                  " ON CONFLICT(job, kind) DO UPDATE SET sent_seq = excluded.sent_seq,"
                  " sent_lines = excluded.sent_lines",
    [S_CUR_PENDING] = "SELECT job, account, sent_seq, event_seq, sent_lines FROM (SELECT c.job,"
                      " j.account, c.sent_seq, j.event_seq, c.sent_lines, j.seq, ROW_NUMBER() OVER"
                      " (PARTITION BY j.account ORDER BY j.seq) AS turn FROM integration_cursors c"
                      " JOIN jobs j ON j.id = c.job WHERE c.kind = $1 AND j.event_seq > c.sent_seq)"
                      " AS pending ORDER BY turn, seq LIMIT $2",
    [S_CAL_LIST] = "SELECT " CALIB_COLS " FROM (SELECT * FROM calibration ORDER BY seq DESC"
                   " LIMIT $1) AS newest ORDER BY seq",
    /* an account's registrations one at a time (pg_webhook_insert) */
    [S_WH_LOCK] = "SELECT pg_advisory_xact_lock(7160002, hashtext($1))",
    [S_WH_INSERT] = "INSERT INTO webhooks(" WH_COLS ") SELECT $1::text, $2::text, $3::text,"
                    " $4::text, $5::text, $6::bigint"
                    " WHERE (SELECT count(*) FROM webhooks WHERE account = $2) < $7::bigint",
    [S_WH_LIST] = "SELECT " WH_COLS " FROM webhooks WHERE account = $1 ORDER BY seq LIMIT $2",
    [S_WH_GET] = "SELECT " WH_COLS " FROM webhooks WHERE id = $1",
    [S_WH_GET_ACC] = "SELECT " WH_COLS " FROM webhooks WHERE id = $1 AND account = $2",
    [S_WH_DELETE] = "WITH gone AS (DELETE FROM webhooks WHERE id = $1 AND account = $2"
                    " RETURNING id), dlv AS (DELETE FROM deliveries WHERE webhook IN"
                    " (SELECT id FROM gone)) SELECT id FROM gone",
    [S_DLV_ENQUEUE] = "INSERT INTO deliveries(event_id, webhook, account, job, type, body,"
                      " next_try, created) SELECT $1, id, account, $2, $3, $4, $5, $5"
                      " FROM webhooks WHERE account = $6 AND (events = '' OR"
                      " position(',' || $3 || ',' IN ',' || events || ',') > 0) ORDER BY seq",
    [S_DLV_LIST] = "SELECT " DLV_COLS " FROM deliveries WHERE webhook = $1"
                   " ORDER BY seq DESC LIMIT $2",
    [S_DLV_DUE] = DLV_DUE_SQL("$1", "$2"),
    [S_DLV_RECORD] = "UPDATE deliveries SET attempts = $1, last_status = $2, last_answer = $3,"
                     " state = $4, next_try = $5, delivered = $6 WHERE seq = $7",
};

/* Set on every new or reset session. */
static const char session_setup[] =
    "SET synchronous_commit = on; SET lock_timeout = '5s'; SET statement_timeout = '30s';"
    " SET client_min_messages = warning; SET idle_in_transaction_session_timeout = '60s'";

struct conn {
    PGconn *db;
    bool prepared[S_COUNT];
    struct store_writes writes; /* of the update running on it */
};

struct store_impl {
    struct conn writers[WRITERS]; /* group-commit batches; writers[i] owned by slot i's leader */
    struct conn pool[POOL];
    int busy[POOL];
    pthread_mutex_t pmu; /* owns busy[] */
    pthread_cond_t pcv;
    struct store_group group;
    int version;
};

/* ---- parameters ------------------------------------------------------- */

/* Values of one statement, as text (libpq's text format). A string that
 * does not fit its struct field marks the set bad: ERR_INVALID, never cut. */
struct params {
    int n;
    bool bad;
    const char *v[MAX_PARAMS];
    char num[MAX_PARAMS][NUM_TEXT];
};

static void p_str(struct params *p, const char *v, size_t cap)
{
    if (strnlen(v, cap) >= cap)
        p->bad = true;
    p->v[p->n++] = v;
}

#define P_STR(p, field) p_str(p, field, sizeof(field))

/* A string with no field cap of ours (an id or name from the caller: the
 * server's own limit applies). */
static void p_text(struct params *p, const char *v) { p->v[p->n++] = v; }

static void p_i64(struct params *p, int64_t x)
{
    snprintf(p->num[p->n], NUM_TEXT, "%lld", (long long)x);
    p->v[p->n] = p->num[p->n];
    p->n++;
}

static void p_dbl(struct params *p, double x)
{
    snprintf(p->num[p->n], NUM_TEXT, "%.17g", x);
    p->v[p->n] = p->num[p->n];
    p->n++;
}

/* ---- results ---------------------------------------------------------- */

static void col_str(const PGresult *r, int row, int col, char *dst, size_t cap)
{
    const char *t = PQgetvalue(r, row, col);
    size_t n = (size_t)PQgetlength(r, row, col);
    if (n >= cap)
        n = cap - 1;
    if (n)
        memcpy(dst, t, n);
    dst[n] = '\0';
}

static int64_t col_i64(const PGresult *r, int row, int col)
{
    return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

static double col_dbl(const PGresult *r, int row, int col)
{
    return strtod(PQgetvalue(r, row, col), NULL);
}

/* ---- errors ----------------------------------------------------------- */

/* An internal result: run the whole transaction again. */
#define ERR_RETRY_TX ((enum alallo_err)1000)

static enum alallo_err from_sqlstate(const char *st)
{
    if (!st)
        return ERR_UNAVAILABLE; /* no answer from the server: the connection is gone */
    if (!strcmp(st, "40001") || !strcmp(st, "40P01"))
        return ERR_RETRY_TX;
    if (!strncmp(st, "23", 2))
        return ERR_CONFLICT; /* integrity: 23505 unique, 23514 check, … */
    if (!strcmp(st, "55P03") || !strcmp(st, "57014") || !strncmp(st, "08", 2) ||
        !strncmp(st, "57P", 3) || !strcmp(st, "53300"))
        return ERR_UNAVAILABLE; /* lock or statement timeout, connection, shutdown, too many */
    if (!strcmp(st, "54000"))
        return ERR_TOO_LARGE;
    if (!strncmp(st, "22", 2))
        return ERR_INVALID; /* a value the server refuses (e.g. not UTF-8) */
    if (!strcmp(st, "53100") || !strcmp(st, "53200"))
        return ERR_NOMEM;
    return ERR_IO;
}

/* Records the first line of the server's message for store_last_error(). */
static void set_pg_error(const char *what, const PGconn *db, const PGresult *r)
{
    const char *m = r ? PQresultErrorMessage(r) : NULL;
    if (!m || !*m)
        m = PQerrorMessage(db);
    size_t n = strcspn(m, "\n");
    store_set_error("store: %s: %.*s", what, (int)(n > 200 ? 200 : n), m);
}

/* ---- connections ------------------------------------------------------ */

static enum alallo_err session_start(struct conn *c)
{
    memset(c->prepared, 0, sizeof c->prepared);
    PGresult *r = PQexec(c->db, session_setup);
    enum alallo_err e = PQresultStatus(r) == PGRES_COMMAND_OK ? ERR_OK : ERR_UNAVAILABLE;
    if (e)
        set_pg_error("set up session", c->db, r);
    PQclear(r);
    return e;
}

static enum alallo_err conn_open(struct conn *c, const char *url, char *err, size_t errcap)
{
    memset(c, 0, sizeof *c);
    c->db = PQconnectdb(url);
    if (!c->db || PQstatus(c->db) != CONNECTION_OK) {
        const char *m = c->db ? PQerrorMessage(c->db) : "out of memory";
        snprintf(err, errcap, "cannot connect to PostgreSQL: %.*s", (int)strcspn(m, "\n"), m);
        PQfinish(c->db);
        c->db = NULL;
        return ERR_UNAVAILABLE;
    }
    if (session_start(c)) {
        snprintf(err, errcap, "%s", store_last_error());
        PQfinish(c->db);
        c->db = NULL;
        return ERR_UNAVAILABLE;
    }
    return ERR_OK;
}

static void conn_close(struct conn *c)
{
    PQfinish(c->db);
    store_writes_free(&c->writes);
    memset(c, 0, sizeof *c);
}

/* Makes sure c is connected: resets a connection the server dropped (it
 * restarted, or was killed). ERR_UNAVAILABLE while it cannot be reached. */
static enum alallo_err conn_ready(struct conn *c)
{
    if (PQstatus(c->db) == CONNECTION_OK && PQtransactionStatus(c->db) != PQTRANS_UNKNOWN)
        return ERR_OK;
    PQreset(c->db);
    if (PQstatus(c->db) != CONNECTION_OK) {
        set_pg_error("reconnect", c->db, NULL);
        return ERR_UNAVAILABLE;
    }
    return session_start(c);
}

static bool conn_lost(const struct conn *c) { return PQstatus(c->db) != CONNECTION_OK; }

/* Prepares statement `id` on c unless it is already; writes its name. */
static enum alallo_err prepare(struct conn *c, enum sql_id id, char name[16] /* OUT */,
                               const char *what)
{
    snprintf(name, 16, "s%d", (int)id);
    if (c->prepared[id])
        return ERR_OK;
    PGresult *r = PQprepare(c->db, name, sql_text[id], 0, NULL);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        enum alallo_err e = from_sqlstate(PQresultErrorField(r, PG_DIAG_SQLSTATE));
        set_pg_error(what, c->db, r);
        PQclear(r);
        return e == ERR_OK ? ERR_IO : e;
    }
    PQclear(r);
    c->prepared[id] = true;
    return ERR_OK;
}

/* Runs statement `id` with params p on c; on success *out holds the result
 * (the caller PQclears it). Prepares it first on this connection. */
static enum alallo_err run(struct conn *c, enum sql_id id, const struct params *p,
                           PGresult **out /* OUT */, const char *what)
{
    *out = NULL;
    if (p && p->bad) {
        store_set_error("store: %s: a value is too long", what);
        return ERR_INVALID;
    }
    char name[16];
    enum alallo_err e = prepare(c, id, name, what);
    if (e)
        return e;
    PGresult *r = PQexecPrepared(c->db, name, p ? p->n : 0, p ? p->v : NULL, NULL, NULL, 0);
    ExecStatusType rs = PQresultStatus(r);
    if (rs == PGRES_COMMAND_OK || rs == PGRES_TUPLES_OK) {
        *out = r;
        return ERR_OK;
    }
    e = from_sqlstate(PQresultErrorField(r, PG_DIAG_SQLSTATE));
    set_pg_error(what, c->db, r);
    PQclear(r);
    return e;
}

/* run() for a statement whose rows are not wanted. */
static enum alallo_err run_done(struct conn *c, enum sql_id id, const struct params *p,
                                const char *what)
{
    PGresult *r;
    enum alallo_err e = run(c, id, p, &r, what);
    PQclear(r);
    return e;
}

/* A plain command (BEGIN, COMMIT, …), rows ignored. */
static enum alallo_err exec_cmd(struct conn *c, const char *sql)
{
    PGresult *r = PQexec(c->db, sql);
    enum alallo_err e = ERR_OK;
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        e = from_sqlstate(PQresultErrorField(r, PG_DIAG_SQLSTATE));
        set_pg_error(sql, c->db, r);
    }
    PQclear(r);
    return e;
}

static void rollback(struct conn *c)
{
    if (!conn_lost(c) && PQtransactionStatus(c->db) != PQTRANS_IDLE)
        exec_cmd(c, "ROLLBACK");
}

static struct conn *pool_get(struct store_impl *s)
{
    pthread_mutex_lock(&s->pmu);
    for (;;) {
        for (int i = 0; i < POOL; i++) {
            if (!s->busy[i]) {
                s->busy[i] = 1;
                pthread_mutex_unlock(&s->pmu);
                return &s->pool[i];
            }
        }
        pthread_cond_wait(&s->pcv, &s->pmu);
    }
}

static void pool_put(struct store_impl *s, struct conn *c)
{
    pthread_mutex_lock(&s->pmu);
    s->busy[c - s->pool] = 0;
    pthread_cond_signal(&s->pcv);
    pthread_mutex_unlock(&s->pmu);
}

/* A read: on a pool connection, retried once on a fresh connection when
 * the old one turns out to be lost. */
static enum alallo_err read_rows(struct store_impl *s, enum sql_id id, const struct params *p,
                                 PGresult **out, const char *what)
{
    struct conn *c = pool_get(s);
    enum alallo_err e = conn_ready(c);
    if (!e) {
        e = run(c, id, p, out, what);
        if (e && conn_lost(c) && !conn_ready(c))
            e = run(c, id, p, out, what);
    }
    pool_put(s, c);
    return e == ERR_RETRY_TX ? ERR_UNAVAILABLE : e;
}

/* A one-statement write in its own transaction (durable at return). Not
 * repeated on a lost connection: whether it committed is unknown. *changed
 * (when non-NULL) gets the number of rows it changed. */
static enum alallo_err write_one(struct store_impl *s, enum sql_id id, const struct params *p,
                                 long *changed, const char *what)
{
    struct conn *c = pool_get(s);
    enum alallo_err e = conn_ready(c);
    PGresult *r = NULL;
    if (!e)
        e = run(c, id, p, &r, what);
    if (!e && changed)
        *changed = strtol(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    pool_put(s, c);
    return e == ERR_RETRY_TX ? ERR_UNAVAILABLE : e;
}

/* ---- opening ---------------------------------------------------------- */

/* Applies the missing migrations up to `target` in one transaction, under
 * an advisory lock so that two processes opening a new database at once
 * do not both create it. */
static enum alallo_err migrate(struct conn *c, int target, int *version, char *err, size_t errcap)
{
    enum alallo_err e = exec_cmd(c, "BEGIN");
    if (!e)
        e = exec_cmd(c, "SET LOCAL statement_timeout = 0");
    if (!e)
        e = exec_cmd(c, "SELECT pg_advisory_xact_lock(7160001)");
    if (!e)
        e = exec_cmd(c, "CREATE TABLE IF NOT EXISTS schema_version(version BIGINT NOT NULL)");
    if (e)
        goto fail;
    PGresult *r = PQexec(c->db, "SELECT version FROM schema_version");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        set_pg_error("read schema version", c->db, r);
        PQclear(r);
        e = ERR_IO;
        goto fail;
    }
    int v = PQntuples(r) ? (int)col_i64(r, 0, 0) : 0;
    PQclear(r);
    if (v == 0)
        e = exec_cmd(c, "INSERT INTO schema_version VALUES(0)");
    if (e)
        goto fail;
    if (v > PG_LATEST) {
        rollback(c);
        snprintf(err, errcap, "the data was written by a newer alallo (schema %d, this build %d)",
                 v, PG_LATEST);
        return ERR_INVALID;
    }
    if (v > 0 && v < PG_FIRST) {
        rollback(c);
        snprintf(err, errcap, "a PostgreSQL store at schema %d cannot be (they start at %d)", v,
                 PG_FIRST);
        return ERR_INVALID;
    }
    if (v == 0)
        v = PG_FIRST - 1;
    for (; v < target; v++) {
        e = exec_cmd(c, migrations[v - (PG_FIRST - 1)]);
        if (e)
            goto fail;
        char sql[64];
        snprintf(sql, sizeof sql, "UPDATE schema_version SET version = %d", v + 1);
        e = exec_cmd(c, sql);
        if (e)
            goto fail;
    }
    e = exec_cmd(c, "COMMIT");
    if (e)
        goto fail;
    *version = v;
    return ERR_OK;
fail:
    snprintf(err, errcap, "schema migration failed: %s", store_last_error());
    rollback(c);
    return e && e != ERR_RETRY_TX ? e : ERR_IO;
}

static void pg_close(struct store_impl *s)
{
    if (!s)
        return;
    for (int i = 0; i < POOL; i++)
        if (s->pool[i].db)
            conn_close(&s->pool[i]);
    for (int i = 0; i < WRITERS; i++)
        if (s->writers[i].db)
            conn_close(&s->writers[i]);
    pthread_mutex_destroy(&s->pmu);
    pthread_cond_destroy(&s->pcv);
    store_group_destroy(&s->group);
    free(s);
}

enum alallo_err store_pg_open_at(const char *url, int version, struct store_impl **out,
                                 char *err, size_t errcap)
{
    *out = NULL;
    if (version < PG_FIRST || version > PG_LATEST) {
        snprintf(err, errcap, "no PostgreSQL schema version %d (%d..%d)", version, PG_FIRST,
                 PG_LATEST);
        return ERR_INVALID;
    }
    struct store_impl *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errcap, "out of memory");
        return ERR_NOMEM;
    }
    pthread_mutex_init(&s->pmu, NULL);
    pthread_cond_init(&s->pcv, NULL);
    store_group_init(&s->group, WRITERS);
    enum alallo_err e = conn_open(&s->writers[0], url, err, errcap);
    if (!e)
        e = migrate(&s->writers[0], version, &s->version, err, errcap);
    for (int i = 1; !e && i < WRITERS; i++)
        e = conn_open(&s->writers[i], url, err, errcap);
    for (int i = 0; !e && i < POOL; i++)
        e = conn_open(&s->pool[i], url, err, errcap);
    if (e) {
        pg_close(s);
        return e;
    }
    *out = s;
    return ERR_OK;
}

static int pg_schema_version(struct store_impl *s) { return s->version; }

/* ---- rows ------------------------------------------------------------- */

static void bind_job(struct params *p, const struct store_job *j)
{
    P_STR(p, j->id);
    P_STR(p, j->account);
    P_STR(p, j->name);
    P_STR(p, j->model);
    P_STR(p, j->training_file);
    P_STR(p, j->validation_file);
    P_STR(p, j->method);
    P_STR(p, j->precision);
    P_STR(p, j->goal);
    P_STR(p, j->adapter);
    P_STR(p, j->suffix);
    p_i64(p, j->n_epochs);
    p_i64(p, j->batch_size);
    p_dbl(p, j->lr_multiplier);
    p_i64(p, j->seed);
    p_i64(p, j->examples);
    p_i64(p, j->tokens);
    p_i64(p, j->memory_bytes);
    p_i64(p, j->max_steps);
    p_i64(p, j->steps_done);
    const char *status = job_status_name(j->status);
    if (!status) {
        p->bad = true;
        status = "";
    }
    p_text(p, status);
    P_STR(p, j->message);
    P_STR(p, j->estimate);
    p_dbl(p, j->price_charged);
    p_dbl(p, j->price_refunded);
    P_STR(p, j->fine_tuned_model);
    p_i64(p, j->created_ms);
    p_i64(p, j->started_ms);
    p_i64(p, j->finished_ms);
    P_STR(p, j->metadata);
    p_i64(p, j->fence);
    P_STR(p, j->active_attempt);
    P_STR(p, j->stop_reason);
    p_i64(p, j->running_ms);
    p_i64(p, j->run_started_ms);
    p_i64(p, j->run_start_step);
    p_dbl(p, j->train_loss);
    p_i64(p, j->trained_tokens);
    p_i64(p, j->log_seq);
    p_i64(p, j->event_seq);
    p_i64(p, j->internal_failure);
    p_dbl(p, j->est_low_s);
    p_dbl(p, j->est_high_s);
    p_dbl(p, j->est_train_low_s);
    p_dbl(p, j->est_train_high_s);
    p_dbl(p, j->est_price_high);
    P_STR(p, j->plan);
    P_STR(p, j->ledger_state);
    p_dbl(p, j->first_loss);
    P_STR(p, j->hyper);
    _Static_assert(JOB_NCOLS == 50, "bind_job binds every column of JOB_COLS");
}

static void read_job(const PGresult *r, int row, struct store_job *j)
{
    int i = 0;
    memset(j, 0, sizeof *j);
    j->seq = col_i64(r, row, i++);
    col_str(r, row, i++, j->id, sizeof j->id);
    col_str(r, row, i++, j->account, sizeof j->account);
    col_str(r, row, i++, j->name, sizeof j->name);
    col_str(r, row, i++, j->model, sizeof j->model);
    col_str(r, row, i++, j->training_file, sizeof j->training_file);
    col_str(r, row, i++, j->validation_file, sizeof j->validation_file);
    col_str(r, row, i++, j->method, sizeof j->method);
    col_str(r, row, i++, j->precision, sizeof j->precision);
    col_str(r, row, i++, j->goal, sizeof j->goal);
    col_str(r, row, i++, j->adapter, sizeof j->adapter);
    col_str(r, row, i++, j->suffix, sizeof j->suffix);
    j->n_epochs = (int)col_i64(r, row, i++);
    j->batch_size = (int)col_i64(r, row, i++);
    j->lr_multiplier = col_dbl(r, row, i++);
    j->seed = col_i64(r, row, i++);
    j->examples = (long)col_i64(r, row, i++);
    j->tokens = col_i64(r, row, i++);
    j->memory_bytes = col_i64(r, row, i++);
    j->max_steps = (long)col_i64(r, row, i++);
    j->steps_done = (long)col_i64(r, row, i++);
    if (!job_status_parse(PQgetvalue(r, row, i++), &j->status))
        j->status = JOB_FAILED; /* unreachable unless the row was edited by hand */
    col_str(r, row, i++, j->message, sizeof j->message);
    col_str(r, row, i++, j->estimate, sizeof j->estimate);
    j->price_charged = col_dbl(r, row, i++);
    j->price_refunded = col_dbl(r, row, i++);
    col_str(r, row, i++, j->fine_tuned_model, sizeof j->fine_tuned_model);
    j->created_ms = col_i64(r, row, i++);
    j->started_ms = col_i64(r, row, i++);
    j->finished_ms = col_i64(r, row, i++);
    col_str(r, row, i++, j->metadata, sizeof j->metadata);
    j->fence = col_i64(r, row, i++);
    col_str(r, row, i++, j->active_attempt, sizeof j->active_attempt);
    col_str(r, row, i++, j->stop_reason, sizeof j->stop_reason);
    j->running_ms = col_i64(r, row, i++);
    j->run_started_ms = col_i64(r, row, i++);
    j->run_start_step = (long)col_i64(r, row, i++);
    j->train_loss = col_dbl(r, row, i++);
    j->trained_tokens = col_i64(r, row, i++);
    j->log_seq = col_i64(r, row, i++);
    j->event_seq = col_i64(r, row, i++);
    j->internal_failure = (int)col_i64(r, row, i++);
    j->est_low_s = col_dbl(r, row, i++);
    j->est_high_s = col_dbl(r, row, i++);
    j->est_train_low_s = col_dbl(r, row, i++);
    j->est_train_high_s = col_dbl(r, row, i++);
    j->est_price_high = col_dbl(r, row, i++);
    col_str(r, row, i++, j->plan, sizeof j->plan);
    col_str(r, row, i++, j->ledger_state, sizeof j->ledger_state);
    j->first_loss = col_dbl(r, row, i++);
    col_str(r, row, i++, j->hyper, sizeof j->hyper);
}

static void bind_attempt(struct params *p, const struct store_attempt *a)
{
    P_STR(p, a->id);
    P_STR(p, a->job);
    P_STR(p, a->worker);
    p_i64(p, a->fence);
    P_STR(p, a->status);
    p_i64(p, a->start_step);
    p_i64(p, a->end_step);
    P_STR(p, a->reason);
    p_dbl(p, a->price_per_hour);
    p_i64(p, a->started_ms);
    p_i64(p, a->ended_ms);
    p_i64(p, a->run_ms);
    p_i64(p, a->events_applied);
    p_dbl(p, a->t_started);
    p_dbl(p, a->t_last);
    P_STR(p, a->token_hash);
    P_STR(p, a->engine_id);
    P_STR(p, a->engine_state);
    P_STR(p, a->engine_reason);
    p_i64(p, a->engine_running_ms);
    p_i64(p, a->heartbeat_ms);
    P_STR(p, a->node);
    P_STR(p, a->resume_from);
}

static void read_attempt(const PGresult *r, int row, struct store_attempt *a)
{
    int i = 0;
    memset(a, 0, sizeof *a);
    col_str(r, row, i++, a->id, sizeof a->id);
    col_str(r, row, i++, a->job, sizeof a->job);
    col_str(r, row, i++, a->worker, sizeof a->worker);
    a->fence = col_i64(r, row, i++);
    col_str(r, row, i++, a->status, sizeof a->status);
    a->start_step = (long)col_i64(r, row, i++);
    a->end_step = (long)col_i64(r, row, i++);
    col_str(r, row, i++, a->reason, sizeof a->reason);
    a->price_per_hour = col_dbl(r, row, i++);
    a->started_ms = col_i64(r, row, i++);
    a->ended_ms = col_i64(r, row, i++);
    a->run_ms = col_i64(r, row, i++);
    a->events_applied = col_i64(r, row, i++);
    a->t_started = col_dbl(r, row, i++);
    a->t_last = col_dbl(r, row, i++);
    col_str(r, row, i++, a->token_hash, sizeof a->token_hash);
    col_str(r, row, i++, a->engine_id, sizeof a->engine_id);
    col_str(r, row, i++, a->engine_state, sizeof a->engine_state);
    col_str(r, row, i++, a->engine_reason, sizeof a->engine_reason);
    a->engine_running_ms = col_i64(r, row, i++);
    a->heartbeat_ms = col_i64(r, row, i++);
    col_str(r, row, i++, a->node, sizeof a->node);
    col_str(r, row, i++, a->resume_from, sizeof a->resume_from);
}

static void read_file(const PGresult *r, int row, struct store_file *f)
{
    int i = 0;
    memset(f, 0, sizeof *f);
    col_str(r, row, i++, f->id, sizeof f->id);
    col_str(r, row, i++, f->account, sizeof f->account);
    col_str(r, row, i++, f->filename, sizeof f->filename);
    f->bytes = col_i64(r, row, i++);
    col_str(r, row, i++, f->purpose, sizeof f->purpose);
    f->examples = (long)col_i64(r, row, i++);
    f->text_bytes = col_i64(r, row, i++);
    col_str(r, row, i++, f->path, sizeof f->path);
    f->created_ms = col_i64(r, row, i++);
    col_str(r, row, i++, f->format, sizeof f->format);
}

static void read_worker(const PGresult *r, int row, struct store_worker *w)
{
    int i = 0;
    memset(w, 0, sizeof *w);
    col_str(r, row, i++, w->name, sizeof w->name);
    col_str(r, row, i++, w->resources, sizeof w->resources);
    w->cpus = (int)col_i64(r, row, i++);
    w->mem_bytes = col_i64(r, row, i++);
    col_str(r, row, i++, w->class_, sizeof w->class_);
    w->price_per_hour = col_dbl(r, row, i++);
    col_str(r, row, i++, w->state, sizeof w->state);
    w->last_heartbeat_ms = col_i64(r, row, i++);
    col_str(r, row, i++, w->speed, sizeof w->speed);
    w->tokens_per_s = col_dbl(r, row, i++);
    w->flops = col_dbl(r, row, i++);
    w->registered_ms = col_i64(r, row, i++);
}

static void read_event(const PGresult *r, int row, struct store_event *e)
{
    memset(e, 0, sizeof *e);
    col_str(r, row, 0, e->job, sizeof e->job);
    e->seq = col_i64(r, row, 1);
    e->created_ms = col_i64(r, row, 2);
    col_str(r, row, 3, e->level, sizeof e->level);
    col_str(r, row, 4, e->type, sizeof e->type);
    col_str(r, row, 5, e->message, sizeof e->message);
    col_str(r, row, 6, e->data, sizeof e->data);
}

static void read_ledger(const PGresult *r, int row, struct store_ledger_row *l)
{
    int i = 0;
    memset(l, 0, sizeof *l);
    l->seq = col_i64(r, row, i++);
    col_str(r, row, i++, l->account, sizeof l->account);
    col_str(r, row, i++, l->job, sizeof l->job);
    col_str(r, row, i++, l->attempt, sizeof l->attempt);
    col_str(r, row, i++, l->kind, sizeof l->kind);
    l->amount = col_dbl(r, row, i++);
    l->steps = (long)col_i64(r, row, i++);
    l->created_ms = col_i64(r, row, i++);
    l->from_step = (long)col_i64(r, row, i++);
    l->to_step = (long)col_i64(r, row, i++);
    col_str(r, row, i++, l->reason, sizeof l->reason);
}

static void read_checkpoint(const PGresult *r, int row, struct store_checkpoint *k)
{
    memset(k, 0, sizeof *k);
    col_str(r, row, 0, k->job, sizeof k->job);
    k->step = (long)col_i64(r, row, 1);
    col_str(r, row, 2, k->path, sizeof k->path);
    k->train_loss = col_dbl(r, row, 3);
    k->created_ms = col_i64(r, row, 4);
    col_str(r, row, 5, k->metrics, sizeof k->metrics);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- accounts --------------------------------------------------------- */

static enum alallo_err pg_account_create(struct store_impl *s, const char *name,
                                         const char *key_hash, struct store_account *out)
{
    struct store_account a = {0};
    if (strlen(name) >= sizeof a.name)
        return ERR_INVALID;
    if (!ids_make(a.id, sizeof a.id, "acct-"))
        return ERR_INTERNAL;
    snprintf(a.name, sizeof a.name, "%s", name);
    a.created_ms = now_ms();
    struct params p = {0};
    p_text(&p, a.id);
    p_text(&p, a.name);
    p_text(&p, key_hash);
    p_i64(&p, a.created_ms);
    enum alallo_err e = write_one(s, S_ACC_INSERT, &p, NULL, "create account");
    if (!e && out)
        *out = a;
    return e;
}

static enum alallo_err account_by(struct store_impl *s, enum sql_id id, const char *key,
                                  struct store_account *out)
{
    struct params p = {0};
    p_text(&p, key);
    PGresult *r;
    enum alallo_err e = read_rows(s, id, &p, &r, "read account");
    if (e)
        return e;
    if (PQntuples(r) == 0) {
        e = ERR_NOT_FOUND;
    } else {
        memset(out, 0, sizeof *out);
        col_str(r, 0, 0, out->id, sizeof out->id);
        col_str(r, 0, 1, out->name, sizeof out->name);
        out->created_ms = col_i64(r, 0, 2);
    }
    PQclear(r);
    return e;
}

static enum alallo_err pg_account_by_key_hash(struct store_impl *s, const char *key_hash,
                                              struct store_account *out)
{
    return account_by(s, S_ACC_BY_HASH, key_hash, out);
}

static enum alallo_err pg_account_by_name(struct store_impl *s, const char *name,
                                          struct store_account *out)
{
    return account_by(s, S_ACC_BY_NAME, name, out);
}

/* ---- files ------------------------------------------------------------ */

static enum alallo_err pg_file_insert(struct store_impl *s, const struct store_file *f)
{
    struct params p = {0};
    P_STR(&p, f->id);
    P_STR(&p, f->account);
    P_STR(&p, f->filename);
    p_i64(&p, f->bytes);
    P_STR(&p, f->purpose);
    p_i64(&p, f->examples);
    p_i64(&p, f->text_bytes);
    P_STR(&p, f->path);
    p_i64(&p, f->created_ms);
    P_STR(&p, f->format);
    return write_one(s, S_FILE_INSERT, &p, NULL, "insert file");
}

static enum alallo_err pg_file_get(struct store_impl *s, const char *account, const char *id,
                                   struct store_file *out)
{
    struct params p = {0};
    p_text(&p, id);
    p_text(&p, account);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_FILE_GET, &p, &r, "read file");
    if (e)
        return e;
    if (PQntuples(r) == 0)
        e = ERR_NOT_FOUND;
    else
        read_file(r, 0, out);
    PQclear(r);
    return e;
}

static enum alallo_err pg_file_list(struct store_impl *s, const char *account, const char *after,
                                    int limit, struct store_file *out, int *n, bool *has_more)
{
    *n = 0;
    *has_more = false;
    if (limit < 1 || limit > STORE_LIST_MAX)
        return ERR_INVALID;
    struct params p = {0};
    p_text(&p, account);
    if (after)
        p_text(&p, after);
    p_i64(&p, limit + 1);
    PGresult *r;
    enum alallo_err e =
        read_rows(s, after ? S_FILE_LIST_AFTER : S_FILE_LIST, &p, &r, "list files");
    if (e)
        return e;
    int rows = PQntuples(r);
    for (int i = 0; i < rows; i++) {
        if (*n == limit) {
            *has_more = true;
            break;
        }
        read_file(r, i, &out[(*n)++]);
    }
    PQclear(r);
    return ERR_OK;
}

/* The delete proper, in the caller's transaction: the file's row is locked
 * first, so a job insert that locks it FOR SHARE either committed before
 * (and the file is in use) or waits, then finds it gone. */
static enum alallo_err file_delete_on(struct conn *c, const char *account, const char *id,
                                      struct store_file *f)
{
    struct params p = {0};
    p_text(&p, id);
    p_text(&p, account);
    PGresult *r;
    enum alallo_err e = run(c, S_FILE_LOCK, &p, &r, "read file");
    if (e)
        return e;
    if (PQntuples(r) == 0)
        e = ERR_NOT_FOUND;
    else
        read_file(r, 0, f);
    PQclear(r);
    if (e)
        return e;
    struct params q = {0};
    p_text(&q, account);
    p_text(&q, id);
    e = run(c, S_FILE_IN_USE, &q, &r, "read file");
    if (e)
        return e;
    bool in_use = PQntuples(r) > 0;
    PQclear(r);
    if (in_use)
        return ERR_CONFLICT;
    return run_done(c, S_FILE_DELETE, &p, "delete file");
}

static enum alallo_err pg_file_delete(struct store_impl *s, const char *account, const char *id,
                                      struct store_file *out)
{
    struct store_file f;
    struct conn *c = pool_get(s);
    enum alallo_err e = conn_ready(c);
    if (!e)
        e = exec_cmd(c, "BEGIN");
    if (!e) {
        e = file_delete_on(c, account, id, &f);
        if (!e)
            e = exec_cmd(c, "COMMIT");
        if (e)
            rollback(c);
    }
    pool_put(s, c);
    if (!e && out)
        *out = f;
    return e == ERR_RETRY_TX ? ERR_UNAVAILABLE : e;
}

/* ---- jobs ------------------------------------------------------------- */

/* The parameters of S_JOB_INSERT_EV (with a first event) or S_JOB_INSERT. */
static enum sql_id bind_insert(struct params *p, struct store_job *job,
                               const struct store_event *ev)
{
    if (ev && job->event_seq < 1)
        job->event_seq = 1;
    bind_job(p, job);
    if (!ev)
        return S_JOB_INSERT;
    p_i64(p, ev->created_ms);
    P_STR(p, ev->level);
    P_STR(p, ev->type);
    P_STR(p, ev->message);
    P_STR(p, ev->data);
    return S_JOB_INSERT_EV;
}

/* Why an insert gave no row back: its id exists (ERR_CONFLICT), or a data
 * set is not a file of its account (ERR_NOT_FOUND). */
static enum alallo_err why_not_inserted(struct conn *c, const struct store_job *job)
{
    struct params q = {0};
    p_text(&q, job->id);
    PGresult *r;
    enum alallo_err e = run(c, S_JOB_EXISTS, &q, &r, "insert job");
    if (e)
        return e;
    bool exists = PQntuples(r) > 0;
    PQclear(r);
    if (exists) {
        store_set_error("store: insert job: the id exists");
        return ERR_CONFLICT;
    }
    store_set_error("store: insert job: a data set is gone");
    return ERR_NOT_FOUND;
}

/* Inserts one job (and its first event) inside the writer's transaction. */
static enum alallo_err insert_one_job(struct conn *c, struct store_job *job,
                                      const struct store_event *ev)
{
    struct params p = {0};
    enum sql_id id = bind_insert(&p, job, ev);
    PGresult *r;
    enum alallo_err e = run(c, id, &p, &r, "insert job");
    if (e)
        return e;
    bool one = PQntuples(r) == 1;
    if (one)
        job->seq = col_i64(r, 0, 0);
    PQclear(r);
    return one ? ERR_OK : why_not_inserted(c, job);
}

static void fail_all(struct store_pending *batch, enum alallo_err e)
{
    for (struct store_pending *p = batch; p; p = p->next) {
        p->result = e;
        snprintf(p->error, sizeof p->error, "%s", store_last_error());
    }
}

/* Writes a batch with a savepoint per job, so that a job that fails (a
 * value the server refuses) rolls back alone; sets each result. */
static void write_batch_alone(struct conn *c, struct store_pending *batch)
{
    enum alallo_err e = conn_ready(c);
    if (!e)
        e = exec_cmd(c, "BEGIN");
    for (struct store_pending *p = batch; !e && p; p = p->next) {
        if ((e = exec_cmd(c, "SAVEPOINT one")))
            break;
        p->result = insert_one_job(c, p->job, p->event);
        if (p->result)
            snprintf(p->error, sizeof p->error, "%s", store_last_error());
        e = exec_cmd(c, p->result ? "ROLLBACK TO one" : "RELEASE one");
    }
    if (!e)
        e = exec_cmd(c, "COMMIT");
    if (e) {
        rollback(c);
        fail_all(batch, e == ERR_RETRY_TX ? ERR_UNAVAILABLE : e);
    }
}

/* What a pipelined batch came to. */
enum piped { PIPED_DONE, PIPED_REDO_ALONE };

/* Writes a batch in one round trip (libpq's pipeline mode): BEGIN, one
 * INSERT per job, COMMIT, a sync; then reads every answer. Sets each
 * result, unless a job's error aborted the transaction: then nothing is
 * written and the batch is to be redone a savepoint per job. A job is
 * acknowledged only when the COMMIT's answer says it committed. */
static enum piped write_batch_piped(struct conn *c, struct store_pending *batch)
{
    char ins[16], ins_ev[16];
    enum alallo_err e = conn_ready(c);
    if (!e)
        e = prepare(c, S_JOB_INSERT, ins, "insert job");
    if (!e)
        e = prepare(c, S_JOB_INSERT_EV, ins_ev, "insert job");
    if (!e && PQenterPipelineMode(c->db) != 1) {
        set_pg_error("enter pipeline mode", c->db, NULL);
        e = ERR_IO;
    }
    if (e) {
        fail_all(batch, e);
        return PIPED_DONE;
    }
    bool sent = PQsendQueryParams(c->db, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) == 1;
    for (struct store_pending *p = batch; sent && p; p = p->next) {
        struct params prm = {0};
        enum sql_id id = bind_insert(&prm, p->job, p->event);
        p->result = ERR_OK;
        if (prm.bad) {
            p->result = ERR_INVALID; /* not sent */
            snprintf(p->error, sizeof p->error, "store: insert job: a value is too long");
            continue;
        }
        sent = PQsendQueryPrepared(c->db, id == S_JOB_INSERT ? ins : ins_ev, prm.n, prm.v, NULL,
                                   NULL, 0) == 1;
    }
    sent = sent && PQsendQueryParams(c->db, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) == 1;
    sent = sent && PQpipelineSync(c->db) == 1;

    /* The answers, in the order sent: BEGIN, each job that was sent, COMMIT,
     * then the sync. Each query's results end with a NULL. */
    struct store_pending *at = NULL; /* the job whose answer comes next */
    int stage = 0;                   /* 0 BEGIN, 1 jobs, 2 COMMIT, 3 sync */
    bool aborted = false, committed = false, lost = !sent;
    while (!lost) {
        PGresult *r = PQgetResult(c->db);
        if (!r) {
            if (conn_lost(c)) {
                lost = true;
                break;
            }
            /* The end of one query's results: on to the next. */
            if (stage == 0) {
                stage = 1;
                at = batch;
            } else if (stage == 1) {
                at = at->next;
            }
            while (stage == 1 && at && at->result == ERR_INVALID)
                at = at->next;
            if (stage == 1 && !at)
                stage = 2;
            continue;
        }
        ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_PIPELINE_SYNC) {
            PQclear(r);
            break;
        }
        if (st == PGRES_FATAL_ERROR) {
            aborted = true;
            set_pg_error("insert job", c->db, r);
            if (!PQresultErrorField(r, PG_DIAG_SQLSTATE) || conn_lost(c))
                lost = true;
        } else if (st == PGRES_PIPELINE_ABORTED) {
            aborted = true;
        } else if (stage == 1 && at && st == PGRES_TUPLES_OK) {
            if (PQntuples(r) == 1)
                at->job->seq = col_i64(r, 0, 0);
            else
                at->result = ERR_NOT_FOUND; /* no row: which, asked below */
        } else if (stage == 2 && st == PGRES_COMMAND_OK) {
            committed = strcmp(PQcmdStatus(r), "COMMIT") == 0;
        }
        PQclear(r);
    }
    if (!lost)
        PQexitPipelineMode(c->db);
    if (lost || conn_lost(c)) {
        /* Whether it committed is unknown: none is acknowledged. A
         * connection left mid-pipeline is of no further use. */
        store_set_error("store: insert job: the connection to PostgreSQL was lost");
        fail_all(batch, ERR_UNAVAILABLE);
        if (!conn_lost(c)) {
            PQreset(c->db);
            if (!conn_lost(c))
                session_start(c);
        }
        return PIPED_DONE;
    }
    if (aborted || !committed) {
        rollback(c);
        return PIPED_REDO_ALONE;
    }
    for (struct store_pending *p = batch; p; p = p->next)
        if (p->result == ERR_NOT_FOUND) {
            p->result = why_not_inserted(c, p->job);
            snprintf(p->error, sizeof p->error, "%s", store_last_error());
        }
    return PIPED_DONE;
}

/* The leader's commit (store_group_commit_fn): the batch in one
 * transaction and one round trip, written again a savepoint per job when
 * one job's error aborted it. */
static void commit_batch(struct store_pending *batch, int slot, void *ctx)
{
    struct store_impl *s = ctx;
    if (write_batch_piped(&s->writers[slot], batch) == PIPED_REDO_ALONE)
        write_batch_alone(&s->writers[slot], batch);
}

static enum alallo_err pg_job_insert(struct store_impl *s, struct store_job *job,
                                     const struct store_event *first_event)
{
    return store_group_insert(&s->group, job, first_event, commit_batch, s);
}

static enum alallo_err one_job(struct store_impl *s, enum sql_id id, const struct params *p,
                               struct store_job *out)
{
    PGresult *r;
    enum alallo_err e = read_rows(s, id, p, &r, "read job");
    if (e)
        return e;
    if (PQntuples(r) == 0)
        e = ERR_NOT_FOUND;
    else
        read_job(r, 0, out);
    PQclear(r);
    return e;
}

static enum alallo_err pg_job_get(struct store_impl *s, const char *account, const char *id,
                                  struct store_job *out)
{
    struct params p = {0};
    p_text(&p, id);
    if (account)
        p_text(&p, account);
    return one_job(s, account ? S_JOB_GET_ACC : S_JOB_GET, &p, out);
}

static enum alallo_err pg_job_by_model(struct store_impl *s, const char *account,
                                       const char *model, struct store_job *out)
{
    struct params p = {0};
    p_text(&p, model);
    p_text(&p, account);
    return one_job(s, S_JOB_BY_MODEL, &p, out);
}

static void read_jobs(const PGresult *r, int limit, struct store_job *out, int *n,
                      bool *has_more)
{
    int rows = PQntuples(r);
    for (int i = 0; i < rows; i++) {
        if (*n == limit) {
            if (has_more)
                *has_more = true;
            break;
        }
        read_job(r, i, &out[(*n)++]);
    }
}

/* One round trip: the page (its cursor looked up in the same statement)
 * and one row more, whose presence is has_more. Only an empty page after
 * a cursor asks again, whether the cursor is one of the account's jobs. */
static enum alallo_err pg_job_list(struct store_impl *s, const char *account, const char *after,
                                   int limit, struct store_job *out, int *n, bool *has_more)
{
    *n = 0;
    *has_more = false;
    if (limit < 1 || limit > STORE_LIST_MAX)
        return ERR_INVALID;
    struct params p = {0};
    p_text(&p, account);
    if (after)
        p_text(&p, after);
    p_i64(&p, limit + 1);
    PGresult *r;
    enum alallo_err e = read_rows(s, after ? S_JOB_LIST_AFTER : S_JOB_LIST, &p, &r, "list jobs");
    if (e)
        return e;
    read_jobs(r, limit, out, n, has_more);
    PQclear(r);
    if (*n > 0 || !after)
        return ERR_OK;
    struct params q = {0};
    p_text(&q, after);
    p_text(&q, account);
    e = read_rows(s, S_JOB_SEQ_ACC, &q, &r, "find job");
    if (e)
        return e;
    bool known = PQntuples(r) > 0;
    PQclear(r);
    return known ? ERR_OK : ERR_NOT_FOUND;
}

static enum alallo_err pg_job_list_models(struct store_impl *s, const char *account, int limit,
                                          struct store_job *out, int *n)
{
    *n = 0;
    if (limit < 1 || limit > STORE_LIST_MAX)
        return ERR_INVALID;
    struct params p = {0};
    p_text(&p, account);
    p_i64(&p, limit);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_JOB_LIST_MODELS, &p, &r, "list models");
    if (e)
        return e;
    read_jobs(r, limit, out, n, NULL);
    PQclear(r);
    return ERR_OK;
}

static enum alallo_err pg_job_count_by_status(struct store_impl *s,
                                              long counts[JOB_STATUS_COUNT])
{
    memset(counts, 0, sizeof(long) * JOB_STATUS_COUNT);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_JOB_COUNTS, NULL, &r, "count jobs");
    if (e)
        return e;
    for (int i = 0; i < PQntuples(r); i++) {
        enum job_status js;
        if (job_status_parse(PQgetvalue(r, i, 0), &js))
            counts[js] = (long)col_i64(r, i, 1);
    }
    PQclear(r);
    return ERR_OK;
}

static enum alallo_err pg_job_ids_in_status(struct store_impl *s, enum job_status status,
                                            char (*ids)[IDS_MAX], int cap, int *n)
{
    *n = 0;
    const char *name = job_status_name(status);
    if (!name)
        return ERR_INVALID;
    struct params p = {0};
    p_text(&p, name);
    p_i64(&p, cap);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_JOB_IDS_STATUS, &p, &r, "list job ids");
    if (e)
        return e;
    for (int i = 0; i < PQntuples(r) && *n < cap; i++)
        col_str(r, i, 0, ids[(*n)++], IDS_MAX);
    PQclear(r);
    return ERR_OK;
}

static enum alallo_err pg_waiting_each(struct store_impl *s, int cap, store_waiting_fn fn,
                                       void *ctx)
{
    struct params p = {0};
    p_i64(&p, cap);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_WAITING, &p, &r, "read waiting jobs");
    if (e)
        return e;
    struct store_waiting *w = malloc(sizeof *w);
    if (!w) {
        PQclear(r);
        return ERR_NOMEM;
    }
    for (int row = 0; row < PQntuples(r); row++) {
        memset(w, 0, sizeof *w);
        int i = 0;
        col_str(r, row, i++, w->id, sizeof w->id);
        col_str(r, row, i++, w->account, sizeof w->account);
        col_str(r, row, i++, w->model, sizeof w->model);
        const char *status = PQgetvalue(r, row, i++);
        col_str(r, row, i++, w->message, sizeof w->message);
        col_str(r, row, i++, w->stop_reason, sizeof w->stop_reason);
        w->running = PQgetlength(r, row, i++) > 0;
        w->created_ms = col_i64(r, row, i++);
        w->memory_bytes = col_i64(r, row, i++);
        w->tokens = col_i64(r, row, i++);
        w->examples = (long)col_i64(r, row, i++);
        w->max_steps = (long)col_i64(r, row, i++);
        w->steps_done = (long)col_i64(r, row, i++);
        w->n_epochs = (int)col_i64(r, row, i++);
        w->batch_size = (int)col_i64(r, row, i++);
        col_str(r, row, i++, w->plan, sizeof w->plan);
        w->est_high_s = col_dbl(r, row, i++);
        if (job_status_parse(status, &w->status))
            fn(w, ctx);
    }
    free(w);
    PQclear(r);
    return ERR_OK;
}

static enum alallo_err pg_claim_candidates(struct store_impl *s, int64_t mem_bytes,
                                           struct store_claim_candidate *out, int cap, int *n)
{
    *n = 0;
    struct params p = {0};
    p_i64(&p, mem_bytes);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_CLAIM, &p, &r, "read claim candidates");
    if (e)
        return e;
    for (int i = 0; i < PQntuples(r) && *n < cap; i++) {
        struct store_claim_candidate *cc = &out[(*n)++];
        col_str(r, i, 0, cc->job, sizeof cc->job);
        col_str(r, i, 1, cc->account, sizeof cc->account);
        cc->seq = col_i64(r, i, 2);
    }
    PQclear(r);
    return ERR_OK;
}

/* ---- store_job_update ------------------------------------------------- */

static enum alallo_err put_attempt(struct conn *c, const struct store_attempt *a)
{
    struct params p = {0};
    bind_attempt(&p, a);
    return run_done(c, S_ATT_PUT, &p, "write attempt");
}

static enum alallo_err insert_event(struct conn *c, const char *job, int64_t seq,
                                    const struct store_event *ev)
{
    struct params p = {0};
    p_text(&p, job);
    p_i64(&p, seq);
    p_i64(&p, ev->created_ms);
    P_STR(&p, ev->level);
    P_STR(&p, ev->type);
    P_STR(&p, ev->message);
    P_STR(&p, ev->data);
    return run_done(c, S_EV_INSERT, &p, "insert event");
}

/* Whether s is valid UTF-8 (PostgreSQL refuses text that is not; SQLite
 * keeps any bytes). */
static bool utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2
                : (*p & 0xf8) == 0xf0                ? 3
                                                     : -1;
        if (n < 0 || (n == 1 && *p < 0xc2) || (n == 3 && *p > 0xf4))
            return false;
        for (int i = 1; i <= n; i++)
            if ((p[i] & 0xc0) != 0x80)
                return false;
        if ((n == 2 && *p == 0xe0 && p[1] < 0xa0) || (n == 2 && *p == 0xed && p[1] >= 0xa0) ||
            (n == 3 && *p == 0xf0 && p[1] < 0x90) || (n == 3 && *p == 0xf4 && p[1] >= 0x90))
            return false;
        p += n + 1;
    }
    return true;
}

/* A trainer's text (a log line, an event's message) as PostgreSQL can keep
 * it: as it is when valid UTF-8, else with each broken byte (and control
 * character) made '?' in `fixed` (text_one_line), rather than failing the
 * whole update over one line of output. */
static const char *storable_text(const char *s, char *fixed, size_t cap)
{
    if (utf8_valid(s))
        return s;
    snprintf(fixed, cap, "%s", s);
    text_one_line(fixed);
    return fixed;
}

/* Writes everything an update callback queued, numbering log lines and
 * events from the job's counters. */
static enum alallo_err write_queued(struct conn *c, struct store_job *job,
                                    const struct store_writes *w)
{
    enum alallo_err e = ERR_OK;
    for (int i = 0; !e && i < w->n_attempts; i++)
        e = put_attempt(c, &w->attempts[i]);
    for (int i = 0; !e && i < w->n_logs; i++) {
        char fixed[STORE_LOG_LINE_MAX];
        struct params p = {0};
        p_text(&p, job->id);
        p_i64(&p, ++job->log_seq);
        P_STR(&p, w->logs[i].attempt);
        p_str(&p, storable_text(w->logs[i].line, fixed, sizeof fixed), sizeof fixed);
        e = run_done(c, S_LOG_INSERT, &p, "append log");
    }
    for (int i = 0; !e && i < w->n_events; i++) {
        struct store_event ev = w->events[i];
        char fixed[STORE_MESSAGE_MAX];
        snprintf(ev.message, sizeof ev.message, "%s",
                 storable_text(w->events[i].message, fixed, sizeof fixed));
        e = insert_event(c, job->id, ++job->event_seq, &ev);
    }
    for (int i = 0; !e && i < w->n_checkpoints; i++) {
        const struct store_checkpoint *k = &w->checkpoints[i];
        struct params p = {0};
        p_text(&p, job->id);
        p_i64(&p, k->step);
        P_STR(&p, k->path);
        p_dbl(&p, k->train_loss);
        p_i64(&p, k->created_ms);
        P_STR(&p, k->metrics);
        e = run_done(c, S_CK_PUT, &p, "write checkpoint");
    }
    for (int i = 0; !e && i < w->n_ledger; i++) {
        const struct store_ledger_row *l = &w->ledger[i];
        struct params p = {0};
        P_STR(&p, l->account);
        P_STR(&p, l->job);
        P_STR(&p, l->attempt);
        P_STR(&p, l->kind);
        p_dbl(&p, l->amount);
        p_i64(&p, l->steps);
        p_i64(&p, l->created_ms);
        p_i64(&p, l->from_step);
        p_i64(&p, l->to_step);
        P_STR(&p, l->reason);
        e = run_done(c, S_LED_INSERT, &p, "write ledger");
    }
    for (int i = 0; !e && i < w->n_calibration; i++) {
        const struct store_calibration *k = &w->calibration[i];
        struct params p = {0};
        P_STR(&p, k->kind);
        p_i64(&p, k->method);
        p_i64(&p, k->class_);
        p_i64(&p, k->waited);
        p_i64(&p, k->goal);
        p_dbl(&p, k->actual_a);
        p_dbl(&p, k->nominal_a);
        p_dbl(&p, k->actual_b);
        p_dbl(&p, k->nominal_b);
        p_i64(&p, k->created_ms);
        P_STR(&p, k->model);
        e = run_done(c, S_CAL_INSERT, &p, "write calibration");
    }
    for (int i = 0; !e && i < w->n_webhook_events; i++) {
        const struct store_webhook_event *v = &w->webhook_events[i];
        struct params p = {0};
        P_STR(&p, v->event_id);
        p_text(&p, job->id);
        P_STR(&p, v->type);
        P_STR(&p, v->body);
        p_i64(&p, v->created_ms);
        p_text(&p, job->account);
        e = run_done(c, S_DLV_ENQUEUE, &p, "enqueue webhook deliveries");
    }
    return e;
}

/* One try of an update: the rows locked, the callback, the writes, the
 * commit. Rolls back on any error. */
static enum alallo_err update_once(struct conn *c, const char *id, const char *attempt_id,
                                   store_job_fn fn, void *ctx)
{
    struct store_job job;
    struct store_attempt att;
    enum alallo_err e = exec_cmd(c, "BEGIN");
    if (e)
        return e;
    struct params p = {0};
    p_text(&p, id);
    PGresult *r;
    e = run(c, S_JOB_LOCK, &p, &r, "lock job");
    if (!e) {
        if (PQntuples(r) == 0)
            e = ERR_NOT_FOUND;
        else
            read_job(r, 0, &job);
        PQclear(r);
    }
    if (!e && attempt_id) {
        struct params q = {0};
        p_text(&q, attempt_id);
        e = run(c, S_ATT_LOCK, &q, &r, "lock attempt");
        if (!e) {
            if (PQntuples(r) == 0)
                e = ERR_NOT_FOUND;
            else
                read_attempt(r, 0, &att);
            PQclear(r);
        }
        if (!e && strcmp(att.job, job.id) != 0)
            e = ERR_NOT_FOUND;
    }
    if (!e) {
        store_writes_reset(&c->writes);
        e = fn(&job, attempt_id ? &att : NULL, &c->writes, ctx);
    }
    if (!e)
        e = write_queued(c, &job, &c->writes);
    if (!e && attempt_id)
        e = put_attempt(c, &att);
    if (!e) {
        struct params u = {0};
        bind_job(&u, &job);
        p_i64(&u, job.seq);
        e = run_done(c, S_JOB_UPDATE, &u, "update job");
    }
    if (!e)
        e = exec_cmd(c, "COMMIT");
    if (e)
        rollback(c);
    return e;
}

static enum alallo_err pg_job_update(struct store_impl *s, const char *id, const char *attempt_id,
                                     store_job_fn fn, void *ctx)
{
    struct conn *c = pool_get(s);
    enum alallo_err e = conn_ready(c);
    for (int try = 0; !e; try++) {
        e = update_once(c, id, attempt_id, fn, ctx);
        if (e != ERR_RETRY_TX)
            break;
        if (try + 1 == RETRIES) {
            e = ERR_UNAVAILABLE;
            break;
        }
        /* Another transaction won a serialization race or a deadlock: run
         * the callback again on what it committed, after a short pause
         * that grows (1, 2, 4, … ms) so that the two do not collide again. */
        struct timespec pause = {0, 1000000L << try};
        nanosleep(&pause, NULL);
        e = ERR_OK;
    }
    pool_put(s, c);
    return e;
}

/* ---- attempts, events, log, checkpoints ------------------------------- */

static enum alallo_err pg_attempt_get(struct store_impl *s, const char *id,
                                      struct store_attempt *out)
{
    struct params p = {0};
    p_text(&p, id);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_ATT_GET, &p, &r, "read attempt");
    if (e)
        return e;
    if (PQntuples(r) == 0)
        e = ERR_NOT_FOUND;
    else
        read_attempt(r, 0, out);
    PQclear(r);
    return e;
}

static enum alallo_err attempt_list(struct store_impl *s, enum sql_id id, const char *key,
                                    struct store_attempt *out, int cap, int *n)
{
    *n = 0;
    struct params p = {0};
    p_text(&p, key);
    p_i64(&p, cap);
    PGresult *r;
    enum alallo_err e = read_rows(s, id, &p, &r, "list attempts");
    if (e)
        return e;
    for (int i = 0; i < PQntuples(r) && *n < cap; i++)
        read_attempt(r, i, &out[(*n)++]);
    PQclear(r);
    return ERR_OK;
}

static enum alallo_err pg_attempt_list(struct store_impl *s, const char *job,
                                       struct store_attempt *out, int cap, int *n)
{
    return attempt_list(s, S_ATT_LIST, job, out, cap, n);
}

static enum alallo_err pg_attempt_list_open(struct store_impl *s, const char *worker,
                                            struct store_attempt *out, int cap, int *n)
{
    return attempt_list(s, S_ATT_OPEN, worker, out, cap, n);
}

static enum alallo_err pg_event_list(struct store_impl *s, const char *job, int64_t before_seq,
                                     int limit, struct store_event *out, int *n, bool *has_more)
{
    *n = 0;
    *has_more = false;
    if (limit < 1 || limit > STORE_LIST_MAX)
        return ERR_INVALID;
    struct params p = {0};
    p_text(&p, job);
    p_i64(&p, before_seq > 0 ? before_seq : INT64_MAX);
    p_i64(&p, limit + 1);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_EV_LIST, &p, &r, "list events");
    if (e)
        return e;
    for (int i = 0; i < PQntuples(r); i++) {
        if (*n == limit) {
            *has_more = true;
            break;
        }
        read_event(r, i, &out[(*n)++]);
    }
    PQclear(r);
    return ERR_OK;
}

static enum alallo_err pg_log_read(struct store_impl *s, const char *job, const char *attempt,
                                   int64_t after_seq, struct store_log_line *out, int cap, int *n)
{
    *n = 0;
    struct params p = {0};
    p_text(&p, job);
    if (attempt)
        p_text(&p, attempt);
    p_i64(&p, after_seq);
    p_i64(&p, cap);
    PGresult *r;
    enum alallo_err e = read_rows(s, attempt ? S_LOG_READ : S_LOG_READ_ALL, &p, &r, "read log");
    if (e)
        return e;
    for (int i = 0; i < PQntuples(r) && *n < cap; i++) {
        struct store_log_line *l = &out[(*n)++];
        l->seq = col_i64(r, i, 0);
        col_str(r, i, 1, l->attempt, sizeof l->attempt);
        col_str(r, i, 2, l->line, sizeof l->line);
    }
    PQclear(r);
    return ERR_OK;
}

static enum alallo_err pg_log_last_attempt(struct store_impl *s, const char *job,
                                           char attempt[IDS_MAX])
{
    attempt[0] = '\0';
    struct params p = {0};
    p_text(&p, job);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_LOG_LAST, &p, &r, "read log");
    if (e)
        return e;
    if (PQntuples(r) > 0)
        col_str(r, 0, 0, attempt, IDS_MAX);
    PQclear(r);
    return ERR_OK;
}

static enum alallo_err pg_checkpoint_list(struct store_impl *s, const char *job,
                                          struct store_checkpoint *out, int cap, int *n)
{
    *n = 0;
    struct params p = {0};
    p_text(&p, job);
    p_i64(&p, cap);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_CK_LIST, &p, &r, "list checkpoints");
    if (e)
        return e;
    for (int i = 0; i < PQntuples(r) && *n < cap; i++)
        read_checkpoint(r, i, &out[(*n)++]);
    PQclear(r);
    return ERR_OK;
}

static enum alallo_err pg_checkpoint_get(struct store_impl *s, const char *job, long step,
                                         struct store_checkpoint *out)
{
    struct params p = {0};
    p_text(&p, job);
    p_i64(&p, step);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_CK_GET, &p, &r, "read checkpoint");
    if (e)
        return e;
    if (PQntuples(r) == 0)
        e = ERR_NOT_FOUND;
    else
        read_checkpoint(r, 0, out);
    PQclear(r);
    return e;
}

/* ---- workers ---------------------------------------------------------- */

static enum alallo_err pg_worker_put(struct store_impl *s, const struct store_worker *w)
{
    struct params p = {0};
    P_STR(&p, w->name);
    P_STR(&p, w->resources);
    p_i64(&p, w->cpus);
    p_i64(&p, w->mem_bytes);
    P_STR(&p, w->class_);
    p_dbl(&p, w->price_per_hour);
    P_STR(&p, w->state);
    p_i64(&p, w->last_heartbeat_ms);
    P_STR(&p, w->speed);
    p_dbl(&p, w->tokens_per_s);
    p_dbl(&p, w->flops);
    p_i64(&p, w->registered_ms);
    return write_one(s, S_W_PUT, &p, NULL, "write worker");
}

static enum alallo_err pg_worker_get(struct store_impl *s, const char *name,
                                     struct store_worker *out)
{
    struct params p = {0};
    p_text(&p, name);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_W_GET, &p, &r, "read worker");
    if (e)
        return e;
    if (PQntuples(r) == 0)
        e = ERR_NOT_FOUND;
    else
        read_worker(r, 0, out);
    PQclear(r);
    return e;
}

static enum alallo_err pg_worker_list(struct store_impl *s, struct store_worker *out, int cap,
                                      int *n)
{
    *n = 0;
    struct params p = {0};
    p_i64(&p, cap);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_W_LIST, &p, &r, "list workers");
    if (e)
        return e;
    for (int i = 0; i < PQntuples(r) && *n < cap; i++)
        read_worker(r, i, &out[(*n)++]);
    PQclear(r);
    return ERR_OK;
}

static enum alallo_err pg_worker_heartbeat(struct store_impl *s, const char *name, int64_t now)
{
    struct params p = {0};
    p_i64(&p, now);
    p_text(&p, name);
    long changed = 0;
    enum alallo_err e = write_one(s, S_W_HB, &p, &changed, "update worker");
    return !e && changed == 0 ? ERR_NOT_FOUND : e;
}

static enum alallo_err pg_worker_set_state(struct store_impl *s, const char *name,
                                           const char *state)
{
    struct params p = {0};
    p_text(&p, state);
    p_text(&p, name);
    long changed = 0;
    enum alallo_err e = write_one(s, S_W_STATE, &p, &changed, "update worker");
    return !e && changed == 0 ? ERR_NOT_FOUND : e;
}

static enum alallo_err pg_worker_change_state(struct store_impl *s, const char *name,
                                              const char *from, const char *to,
                                              int64_t silent_before_ms)
{
    struct params p = {0};
    p_text(&p, to);
    p_text(&p, name);
    p_text(&p, from);
    p_i64(&p, silent_before_ms);
    long changed = 0;
    enum alallo_err e = write_one(s, S_W_CHANGE, &p, &changed, "change worker state");
    return !e && changed == 0 ? ERR_CONFLICT : e;
}

/* ---- ledger, calibration ---------------------------------------------- */

static enum alallo_err pg_ledger_list(struct store_impl *s, const char *account,
                                      int64_t before_seq, int limit, struct store_ledger_row *out,
                                      int *n, bool *has_more)
{
    *n = 0;
    *has_more = false;
    if (limit < 1 || limit > STORE_LIST_MAX)
        return ERR_INVALID;
    struct params p = {0};
    p_text(&p, account);
    p_i64(&p, before_seq > 0 ? before_seq : INT64_MAX);
    p_i64(&p, limit + 1);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_LED_LIST, &p, &r, "list ledger");
    if (e)
        return e;
    for (int i = 0; i < PQntuples(r); i++) {
        if (*n == limit) {
            *has_more = true;
            break;
        }
        read_ledger(r, i, &out[(*n)++]);
    }
    PQclear(r);
    return ERR_OK;
}

static enum alallo_err pg_calibration_list(struct store_impl *s, int cap,
                                           struct store_calibration *out, int *n)
{
    *n = 0;
    if (cap < 1)
        return ERR_INVALID;
    struct params p = {0};
    p_i64(&p, cap);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_CAL_LIST, &p, &r, "list calibration");
    if (e)
        return e;
    for (int row = 0; row < PQntuples(r) && *n < cap; row++) {
        struct store_calibration *k = &out[(*n)++];
        int i = 0;
        memset(k, 0, sizeof *k);
        col_str(r, row, i++, k->kind, sizeof k->kind);
        k->method = (int)col_i64(r, row, i++);
        k->class_ = (int)col_i64(r, row, i++);
        k->waited = (int)col_i64(r, row, i++);
        k->goal = (int)col_i64(r, row, i++);
        k->actual_a = col_dbl(r, row, i++);
        k->nominal_a = col_dbl(r, row, i++);
        k->actual_b = col_dbl(r, row, i++);
        k->nominal_b = col_dbl(r, row, i++);
        k->created_ms = col_i64(r, row, i++);
        col_str(r, row, i++, k->model, sizeof k->model);
    }
    PQclear(r);
    return ERR_OK;
}

/* ---- webhooks --------------------------------------------------------- */

static void read_webhook(const PGresult *r, int row, struct store_webhook *w)
{
    col_str(r, row, 0, w->id, sizeof w->id);
    col_str(r, row, 1, w->account, sizeof w->account);
    col_str(r, row, 2, w->url, sizeof w->url);
    col_str(r, row, 3, w->events, sizeof w->events);
    col_str(r, row, 4, w->secret, sizeof w->secret);
    w->created_ms = col_i64(r, row, 5);
}

static void read_delivery(const PGresult *r, int row, struct store_delivery *d)
{
    d->seq = col_i64(r, row, 0);
    col_str(r, row, 1, d->event_id, sizeof d->event_id);
    col_str(r, row, 2, d->webhook, sizeof d->webhook);
    col_str(r, row, 3, d->account, sizeof d->account);
    col_str(r, row, 4, d->job, sizeof d->job);
    col_str(r, row, 5, d->type, sizeof d->type);
    col_str(r, row, 6, d->body, sizeof d->body);
    d->attempts = (int)col_i64(r, row, 7);
    d->next_ms = col_i64(r, row, 8);
    d->last_status = (int)col_i64(r, row, 9);
    col_str(r, row, 10, d->last_answer, sizeof d->last_answer);
    d->state = (enum store_delivery_state)col_i64(r, row, 11);
    d->created_ms = col_i64(r, row, 12);
    d->delivered_ms = col_i64(r, row, 13);
}

/* The count and the insert in one transaction that holds the account's
 * advisory lock: under READ COMMITTED the insert's count then sees every
 * registration of the account committed before it, so concurrent ones
 * never pass the cap together. */
static enum alallo_err pg_webhook_insert(struct store_impl *s, const struct store_webhook *w,
                                         int cap)
{
    struct params lock = {0};
    p_text(&lock, w->account);
    struct params p = {0};
    P_STR(&p, w->id);
    P_STR(&p, w->account);
    P_STR(&p, w->url);
    P_STR(&p, w->events);
    P_STR(&p, w->secret);
    p_i64(&p, w->created_ms);
    p_i64(&p, cap);
    struct conn *c = pool_get(s);
    enum alallo_err e = conn_ready(c);
    if (!e)
        e = exec_cmd(c, "BEGIN");
    if (!e)
        e = run_done(c, S_WH_LOCK, &lock, "lock the account's webhooks");
    PGresult *r = NULL;
    if (!e)
        e = run(c, S_WH_INSERT, &p, &r, "write webhook");
    if (!e && strtol(PQcmdTuples(r), NULL, 10) == 0)
        e = ERR_CONFLICT; /* the account has `cap` already */
    PQclear(r);
    if (!e)
        e = exec_cmd(c, "COMMIT");
    if (e)
        rollback(c);
    pool_put(s, c);
    return e == ERR_RETRY_TX ? ERR_UNAVAILABLE : e;
}

static enum alallo_err pg_webhook_list(struct store_impl *s, const char *account,
                                       struct store_webhook *out, int cap, int *n)
{
    *n = 0;
    struct params p = {0};
    p_text(&p, account);
    p_i64(&p, cap);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_WH_LIST, &p, &r, "list webhooks");
    if (e)
        return e;
    for (int i = 0; i < PQntuples(r) && *n < cap; i++)
        read_webhook(r, i, &out[(*n)++]);
    PQclear(r);
    return ERR_OK;
}

static enum alallo_err pg_webhook_get(struct store_impl *s, const char *account, const char *id,
                                      struct store_webhook *out)
{
    struct params p = {0};
    p_text(&p, id);
    if (account)
        p_text(&p, account);
    PGresult *r;
    enum alallo_err e = read_rows(s, account ? S_WH_GET_ACC : S_WH_GET, &p, &r, "read webhook");
    if (e)
        return e;
    if (PQntuples(r) == 0)
        e = ERR_NOT_FOUND;
    else
        read_webhook(r, 0, out);
    PQclear(r);
    return e;
}

static enum alallo_err pg_webhook_delete(struct store_impl *s, const char *account, const char *id)
{
    struct params p = {0};
    p_text(&p, id);
    p_text(&p, account);
    long changed = 0;
    enum alallo_err e = write_one(s, S_WH_DELETE, &p, &changed, "delete webhook");
    return !e && changed == 0 ? ERR_NOT_FOUND : e;
}

static enum alallo_err deliveries(struct store_impl *s, enum sql_id id, const struct params *p,
                                  struct store_delivery *out, int cap, int *n)
{
    *n = 0;
    PGresult *r;
    enum alallo_err e = read_rows(s, id, p, &r, "list deliveries");
    if (e)
        return e;
    for (int i = 0; i < PQntuples(r) && *n < cap; i++)
        read_delivery(r, i, &out[(*n)++]);
    PQclear(r);
    return ERR_OK;
}

static enum alallo_err pg_delivery_list(struct store_impl *s, const char *webhook,
                                        struct store_delivery *out, int cap, int *n)
{
    struct params p = {0};
    p_text(&p, webhook);
    p_i64(&p, cap);
    return deliveries(s, S_DLV_LIST, &p, out, cap, n);
}

static enum alallo_err pg_delivery_due(struct store_impl *s, int64_t now,
                                       struct store_delivery *out, int cap, int *n)
{
    struct params p = {0};
    p_i64(&p, now);
    p_i64(&p, cap);
    return deliveries(s, S_DLV_DUE, &p, out, cap, n);
}

static enum alallo_err pg_delivery_record(struct store_impl *s, const struct store_delivery *d)
{
    struct params p = {0};
    p_i64(&p, d->attempts);
    p_i64(&p, d->last_status);
    P_STR(&p, d->last_answer);
    p_i64(&p, (int64_t)d->state);
    p_i64(&p, d->next_ms);
    p_i64(&p, d->delivered_ms);
    p_i64(&p, d->seq);
    long changed = 0;
    enum alallo_err e = write_one(s, S_DLV_RECORD, &p, &changed, "record delivery");
    return !e && changed == 0 ? ERR_NOT_FOUND : e;
}

/* ---- account settings and integration cursors ------------------------ */

static enum alallo_err pg_setting_put(struct store_impl *s, const char *account, const char *key,
                                      const char *value)
{
    struct params p = {0};
    p_text(&p, account);
    p_text(&p, key);
    if (value[0])
        p_text(&p, value);
    return write_one(s, value[0] ? S_SET_PUT : S_SET_DEL, &p, NULL, "write account setting");
}

static enum alallo_err pg_setting_get(struct store_impl *s, const char *account, const char *key,
                                      char *out, size_t cap)
{
    struct params p = {0};
    p_text(&p, account);
    p_text(&p, key);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_SET_GET, &p, &r, "read account setting");
    if (e)
        return e;
    if (PQntuples(r) < 1)
        e = ERR_NOT_FOUND;
    else
        col_str(r, 0, 0, out, cap);
    PQclear(r);
    return e;
}

static enum alallo_err pg_cursor_put(struct store_impl *s, const char *job, const char *kind,
                                     int64_t sent_seq, int64_t sent_lines)
{
    struct params p = {0};
    p_text(&p, job);
    p_text(&p, kind);
    p_i64(&p, sent_seq);
    p_i64(&p, sent_lines);
    return write_one(s, S_CUR_PUT, &p, NULL, "write integration cursor");
}

static enum alallo_err pg_cursor_pending(struct store_impl *s, const char *kind,
                                         struct store_cursor *out, int cap, int *n)
{
    struct params p = {0};
    p_text(&p, kind);
    p_i64(&p, cap);
    PGresult *r;
    enum alallo_err e = read_rows(s, S_CUR_PENDING, &p, &r, "list integration cursors");
    if (e)
        return e;
    for (int row = 0; row < PQntuples(r) && *n < cap; row++) {
        struct store_cursor *k = &out[(*n)++];
        memset(k, 0, sizeof *k);
        col_str(r, row, 0, k->job, sizeof k->job);
        col_str(r, row, 1, k->account, sizeof k->account);
        k->sent_seq = col_i64(r, row, 2);
        k->event_seq = col_i64(r, row, 3);
        k->sent_lines = col_i64(r, row, 4);
    }
    PQclear(r);
    return ERR_OK;
}

const struct store_ops store_pg_ops = {
    .name = "postgresql",
    .close = pg_close,
    .schema_version = pg_schema_version,
    .account_create = pg_account_create,
    .account_by_key_hash = pg_account_by_key_hash,
    .account_by_name = pg_account_by_name,
    .file_insert = pg_file_insert,
    .file_get = pg_file_get,
    .file_list = pg_file_list,
    .file_delete = pg_file_delete,
    .job_insert = pg_job_insert,
    .job_get = pg_job_get,
    .job_by_model = pg_job_by_model,
    .job_list = pg_job_list,
    .job_list_models = pg_job_list_models,
    .job_count_by_status = pg_job_count_by_status,
    .job_ids_in_status = pg_job_ids_in_status,
    .waiting_each = pg_waiting_each,
    .claim_candidates = pg_claim_candidates,
    .job_update = pg_job_update,
    .attempt_get = pg_attempt_get,
    .attempt_list = pg_attempt_list,
    .attempt_list_open = pg_attempt_list_open,
    .event_list = pg_event_list,
    .log_read = pg_log_read,
    .log_last_attempt = pg_log_last_attempt,
    .checkpoint_list = pg_checkpoint_list,
    .checkpoint_get = pg_checkpoint_get,
    .worker_put = pg_worker_put,
    .worker_get = pg_worker_get,
    .worker_list = pg_worker_list,
    .worker_heartbeat = pg_worker_heartbeat,
    .worker_set_state = pg_worker_set_state,
    .worker_change_state = pg_worker_change_state,
    .ledger_list = pg_ledger_list,
    .calibration_list = pg_calibration_list,
    .setting_put = pg_setting_put,
    .setting_get = pg_setting_get,
    .cursor_put = pg_cursor_put,
    .cursor_pending = pg_cursor_pending,
    .webhook_insert = pg_webhook_insert,
    .webhook_list = pg_webhook_list,
    .webhook_get = pg_webhook_get,
    .webhook_delete = pg_webhook_delete,
    .delivery_list = pg_delivery_list,
    .delivery_due = pg_delivery_due,
    .delivery_record = pg_delivery_record,
};
