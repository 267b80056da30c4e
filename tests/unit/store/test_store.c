/* test_store.c - the store: migrations, durability, paging, isolation
 * between accounts, atomic updates, group commit. Runs twice under CTest:
 * on SQLite, and on PostgreSQL (ALALLO_TEST_PG; store_fixture.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_child.h"
#include "store/store.h"
#include "store/store_backend.h"
#include "store_fixture.h"

struct fixture {
    char dir[256];
    char path[400]; /* the store's URL: a SQLite file or a PostgreSQL database */
    struct store *s;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/alallo-store-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    if (fixture_store_url(f->dir, "main", f->path, sizeof f->path))
        return -1;
    char err[200];
    if (store_open(f->path, &f->s, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    *state = f;
    return 0;
}

/* Adds the data set `id` of `account` (the jobs of make_job train on
 * "file-x-ACCOUNT": a job is stored only while its data set is there). */
static enum alallo_err add_data_set(struct store *s, const char *account, const char *id)
{
    struct store_file fl = {0};
    snprintf(fl.id, sizeof fl.id, "%s", id);
    snprintf(fl.account, sizeof fl.account, "%s", account);
    snprintf(fl.filename, sizeof fl.filename, "train.jsonl");
    snprintf(fl.purpose, sizeof fl.purpose, "fine-tune");
    return store_file_insert(s, &fl);
}

/* A store whose two accounts have the data set make_job uses. */
static int setup_with_data(void **state)
{
    if (setup(state))
        return -1;
    struct fixture *f = *state;
    if (add_data_set(f->s, "acct-a", "file-x-acct-a") ||
        add_data_set(f->s, "acct-b", "file-x-acct-b"))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    store_close(f->s);
    fixture_store_drop("main");
    fixture_store_drop("old");
    fixture_store_drop("kill");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

static void make_job(struct store_job *j, const char *account, int i)
{
    memset(j, 0, sizeof *j);
    ids_make(j->id, sizeof j->id, "ftjob-");
    snprintf(j->account, sizeof j->account, "%s", account);
    snprintf(j->name, sizeof j->name, "job %d", i);
    snprintf(j->model, sizeof j->model, "tiny");
    snprintf(j->training_file, sizeof j->training_file, "file-x-%s", account);
    snprintf(j->method, sizeof j->method, "supervised");
    snprintf(j->precision, sizeof j->precision, "16-bit");
    snprintf(j->goal, sizeof j->goal, "lowest_cost");
    snprintf(j->adapter, sizeof j->adapter, "lora");
    j->n_epochs = 3;
    j->batch_size = 4;
    j->lr_multiplier = 1.0;
    j->max_steps = 30;
    j->memory_bytes = 1000 + i;
    j->status = JOB_QUEUED;
    snprintf(j->message, sizeof j->message, "Waiting for capacity");
    j->created_ms = 1000 + i;
}

/* PostgreSQL: the schema starts at store_pg_first_version() (the whole
 * schema of that version in one entry), reaches the same latest version as
 * SQLite's list, is made in an empty database on first open, and a
 * database newer than the build is refused. */
static void pg_migrations(struct fixture *f)
{
    assert_int_equal(store_pg_latest(), store_schema_latest());
    char url[400], err[200];
    assert_int_equal(fixture_store_url(f->dir, "old", url, sizeof url), 0);
    char db[64];
    snprintf(db, sizeof db, "t%ld_old", (long)getpid());
    char sql[200];
    /* An empty database, not one from the template. */
    snprintf(sql, sizeof sql, "DROP DATABASE %s", db);
    assert_int_equal(fixture_pg_exec("postgres", sql), 0);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", db);
    assert_int_equal(fixture_pg_exec("postgres", sql), 0);
    struct store *s;
    assert_int_equal(store_open_at(url, store_pg_first_version() - 1, &s, err, sizeof err),
                     ERR_INVALID);
    assert_int_equal(store_open_at(url, store_pg_first_version(), &s, err, sizeof err), ERR_OK);
    assert_string_equal(store_backend_name(s), "postgresql");
    assert_int_equal(store_schema_version(s), store_pg_first_version());
    assert_int_equal(store_account_create(s, "alice", "hash-a", NULL), ERR_OK);
    store_close(s);
    assert_int_equal(store_open(url, &s, err, sizeof err), ERR_OK);
    assert_int_equal(store_schema_version(s), store_schema_latest());
    struct store_account a;
    assert_int_equal(store_account_by_name(s, "alice", &a), ERR_OK);
    store_close(s);
    assert_int_equal(fixture_pg_exec(db, "UPDATE schema_version SET version = 999"), 0);
    assert_int_equal(store_open(url, &s, err, sizeof err), ERR_INVALID);
    assert_non_null(strstr(err, "newer"));
}

static void migrations_apply_in_order(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(store_schema_version(f->s), store_schema_latest());
    assert_true(store_schema_latest() >= 2);
    if (fixture_on_pg()) {
        pg_migrations(f);
        return;
    }

    /* A store left at version 1 keeps its rows when the next migration
     * runs on top of it. */
    char path[320], err[200];
    snprintf(path, sizeof path, "%s/old.db", f->dir);
    struct store *old;
    assert_int_equal(store_open_at(path, 1, &old, err, sizeof err), ERR_OK);
    assert_int_equal(store_schema_version(old), 1);
    assert_int_equal(store_account_create(old, "alice", "hash-a", NULL), ERR_OK);
    store_close(old);

    struct store *s;
    assert_int_equal(store_open(path, &s, err, sizeof err), ERR_OK);
    assert_int_equal(store_schema_version(s), store_schema_latest());
    struct store_account a;
    assert_int_equal(store_account_by_name(s, "alice", &a), ERR_OK);
    bool more;
    int n;
    struct store_ledger_row rows[2];
    assert_int_equal(store_ledger_list(s, a.id, 0, 2, rows, &n, &more), ERR_OK);
    store_close(s);

    /* Reopening at the latest version is a no-op; a newer file is refused. */
    assert_int_equal(store_open(path, &s, err, sizeof err), ERR_OK);
    store_close(s);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "UPDATE schema_version SET version = 999", 0, 0, 0), 0);
    sqlite3_close(db);
    assert_int_equal(store_open(path, &s, err, sizeof err), ERR_INVALID);
    assert_non_null(strstr(err, "newer"));
}

/* Each commit is durable: SQLite in WAL mode (synchronous=FULL is set per
 * connection); PostgreSQL with fsync on (synchronous_commit is set on per
 * session by the store). */
static void wal_and_full_sync(void **state)
{
    struct fixture *f = *state;
    if (fixture_on_pg()) {
        assert_string_equal(store_backend_name(f->s), "postgresql");
        /* Fails (no such setting value) unless fsync is on. */
        assert_int_equal(fixture_pg_exec("postgres", "SELECT 1/(current_setting('fsync') = 'on')::int"), 0);
        return;
    }
    assert_string_equal(store_backend_name(f->s), "sqlite");
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    sqlite3_stmt *st;
    sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void accounts(void **state)
{
    struct fixture *f = *state;
    struct store_account a, b;
    assert_int_equal(store_account_create(f->s, "default", "h1", &a), ERR_OK);
    assert_int_equal(strncmp(a.id, "acct-", 5), 0);
    assert_int_equal(store_account_create(f->s, "default", "h2", NULL), ERR_CONFLICT);
    assert_int_equal(store_account_by_key_hash(f->s, "h1", &b), ERR_OK);
    assert_string_equal(a.id, b.id);
    assert_int_equal(store_account_by_key_hash(f->s, "nope", &b), ERR_NOT_FOUND);
    /* Found again (from memory now): the same account. */
    memset(&b, 0, sizeof b);
    assert_int_equal(store_account_by_key_hash(f->s, "h1", &b), ERR_OK);
    assert_string_equal(a.id, b.id);
    assert_string_equal(b.name, "default");
    /* A key that was not found is asked again: an account another process
     * creates is found at once. */
    struct store *other;
    char err[200];
    assert_int_equal(store_account_by_key_hash(f->s, "h3", &b), ERR_NOT_FOUND);
    assert_int_equal(store_open(f->path, &other, err, sizeof err), ERR_OK);
    assert_int_equal(store_account_create(other, "second", "h3", &a), ERR_OK);
    store_close(other);
    assert_int_equal(store_account_by_key_hash(f->s, "h3", &b), ERR_OK);
    assert_string_equal(a.id, b.id);
}

static void files_paging_and_isolation(void **state)
{
    struct fixture *f = *state;
    char ids[5][IDS_MAX];
    for (int i = 0; i < 5; i++) {
        struct store_file fl = {0};
        ids_make(fl.id, sizeof fl.id, "file-");
        strcpy(ids[i], fl.id);
        strcpy(fl.account, "acct-a");
        snprintf(fl.filename, sizeof fl.filename, "f%d.jsonl", i);
        strcpy(fl.purpose, "fine-tune");
        fl.examples = i;
        assert_int_equal(store_file_insert(f->s, &fl), ERR_OK);
    }
    struct store_file out[3];
    int n;
    bool more;
    assert_int_equal(store_file_list(f->s, "acct-a", NULL, 3, out, &n, &more), ERR_OK);
    assert_int_equal(n, 3);
    assert_true(more);
    assert_string_equal(out[0].id, ids[4]); /* newest first */
    assert_int_equal(store_file_list(f->s, "acct-a", out[2].id, 3, out, &n, &more), ERR_OK);
    assert_int_equal(n, 2);
    assert_false(more);
    assert_string_equal(out[1].id, ids[0]);
    assert_int_equal(store_file_get(f->s, "acct-b", ids[0], out), ERR_NOT_FOUND);
    assert_int_equal(store_file_delete(f->s, "acct-b", ids[0], NULL), ERR_NOT_FOUND);
    assert_int_equal(store_file_delete(f->s, "acct-a", ids[0], out), ERR_OK);
    assert_string_equal(out[0].filename, "f0.jsonl");
    assert_int_equal(store_file_get(f->s, "acct-a", ids[0], out), ERR_NOT_FOUND);
}

/* An upload converted from Alpaca/ShareGPT keeps where it came from next to
 * its format, through get, list and delete, on either backend. */
static void files_keep_their_conversion(void **state)
{
    struct fixture *f = *state;
    struct store_file a = {0}, b = {0}, out[2];
    ids_make(a.id, sizeof a.id, "file-");
    strcpy(a.account, "acct-a");
    strcpy(a.filename, "alpaca.jsonl");
    strcpy(a.purpose, "fine-tune");
    strcpy(a.format, "chat");
    strcpy(a.converted_from, "alpaca+sharegpt");
    assert_int_equal(store_file_insert(f->s, &a), ERR_OK);
    b = a;
    ids_make(b.id, sizeof b.id, "file-");
    b.converted_from[0] = '\0';
    assert_int_equal(store_file_insert(f->s, &b), ERR_OK);
    assert_int_equal(store_file_get(f->s, "acct-a", a.id, out), ERR_OK);
    assert_string_equal(out[0].format, "chat");
    assert_string_equal(out[0].converted_from, "alpaca+sharegpt");
    int n;
    bool more;
    assert_int_equal(store_file_list(f->s, "acct-a", NULL, 2, out, &n, &more), ERR_OK);
    assert_int_equal(n, 2);
    assert_string_equal(out[0].format, "chat"); /* b, newest first */
    assert_string_equal(out[0].converted_from, "");
    assert_string_equal(out[1].format, "chat");
    assert_string_equal(out[1].converted_from, "alpaca+sharegpt");
    assert_int_equal(store_file_delete(f->s, "acct-a", a.id, out), ERR_OK);
    assert_string_equal(out[0].converted_from, "alpaca+sharegpt");
    assert_string_equal(out[0].format, "chat");
}

static void jobs_paging_newest_first(void **state)
{
    struct fixture *f = *state;
    char ids[25][IDS_MAX];
    for (int i = 0; i < 25; i++) {
        struct store_job j;
        make_job(&j, i % 5 == 0 ? "acct-b" : "acct-a", i);
        struct store_event ev = {.created_ms = 5, .level = "info", .type = "message",
                                 .message = "Created fine-tuning job"};
        assert_int_equal(store_job_insert(f->s, &j, &ev), ERR_OK);
        assert_true(j.seq > 0);
        strcpy(ids[i], j.id);
    }
    struct store_job *out = calloc(STORE_LIST_MAX, sizeof *out);
    int n, total = 0;
    bool more = true;
    const char *after = NULL;
    char last[IDS_MAX];
    int expect = 24;
    while (more) {
        assert_int_equal(store_job_list(f->s, "acct-a", after, 7, out, &n, &more), ERR_OK);
        for (int i = 0; i < n; i++) {
            while (expect % 5 == 0)
                expect--;
            assert_string_equal(out[i].id, ids[expect--]);
            assert_string_equal(out[i].account, "acct-a");
        }
        total += n;
        strcpy(last, out[n - 1].id);
        after = last;
    }
    assert_int_equal(total, 20);
    /* Another account's job is not a cursor, nor visible. */
    assert_int_equal(store_job_list(f->s, "acct-a", ids[0], 7, out, &n, &more), ERR_NOT_FOUND);
    assert_int_equal(store_job_get(f->s, "acct-a", ids[0], out), ERR_NOT_FOUND);
    assert_int_equal(store_job_get(f->s, "acct-b", ids[0], out), ERR_OK);
    assert_int_equal(out[0].event_seq, 1);
    assert_int_equal(store_job_list(f->s, "acct-a", NULL, 0, out, &n, &more), ERR_INVALID);
    assert_int_equal(store_job_list(f->s, "acct-a", NULL, 101, out, &n, &more), ERR_INVALID);
    long counts[JOB_STATUS_COUNT];
    assert_int_equal(store_job_count_by_status(f->s, counts), ERR_OK);
    assert_int_equal(counts[JOB_QUEUED], 25);
    struct store_event evs[3];
    assert_int_equal(store_event_list(f->s, ids[3], 0, 3, evs, &n, &more), ERR_OK);
    assert_int_equal(n, 1);
    assert_string_equal(evs[0].message, "Created fine-tuning job");
    free(out);
}

struct upd {
    int fail;
    const char *attempt;
};

static enum alallo_err start_attempt(struct store_job *job, struct store_attempt *att,
                                     struct store_writes *w, void *ctx)
{
    struct upd *u = ctx;
    (void)att;
    job->fence++;
    struct store_attempt a = {0};
    strcpy(a.id, u->attempt);
    strcpy(a.job, job->id);
    strcpy(a.worker, "w1");
    a.fence = job->fence;
    strcpy(a.status, "starting");
    strcpy(job->active_attempt, a.id);
    snprintf(job->message, sizeof job->message, "Starting");
    if (store_writes_attempt(w, &a) || store_writes_event(w, 7, "info", "message", "Started", NULL))
        return ERR_INTERNAL;
    if (store_writes_log(w, a.id, "step 10/30: loss 2.0\nsecond line ignored"))
        return ERR_INTERNAL;
    return u->fail ? ERR_CONFLICT : ERR_OK;
}

static enum alallo_err running(struct store_job *job, struct store_attempt *att,
                               struct store_writes *w, void *ctx)
{
    (void)ctx;
    assert_non_null(att);
    job->status = JOB_RUNNING;
    job->steps_done = 20;
    strcpy(att->status, "running");
    struct store_checkpoint k = {.step = 20, .train_loss = 1.5, .created_ms = 9};
    strcpy(k.path, "/x/step-20");
    store_writes_checkpoint(w, &k);
    store_writes_log(w, att->id, "saved checkpoint at step 20");
    return ERR_OK;
}

static void updates_are_atomic(void **state)
{
    struct fixture *f = *state;
    struct store_job j, got;
    make_job(&j, "acct-a", 1);
    assert_int_equal(store_job_insert(f->s, &j, NULL), ERR_OK);

    /* A callback that fails leaves nothing behind. */
    struct upd u = {.fail = 1, .attempt = "att-one"};
    assert_int_equal(store_job_update(f->s, j.id, NULL, start_attempt, &u), ERR_CONFLICT);
    assert_int_equal(store_job_get(f->s, NULL, j.id, &got), ERR_OK);
    assert_int_equal(got.fence, 0);
    struct store_attempt a;
    assert_int_equal(store_attempt_get(f->s, "att-one", &a), ERR_NOT_FOUND);

    u.fail = 0;
    assert_int_equal(store_job_update(f->s, j.id, NULL, start_attempt, &u), ERR_OK);
    assert_int_equal(store_job_get(f->s, NULL, j.id, &got), ERR_OK);
    assert_int_equal(got.fence, 1);
    assert_string_equal(got.active_attempt, "att-one");
    assert_int_equal(got.log_seq, 1);
    assert_int_equal(got.event_seq, 1);
    assert_int_equal(store_attempt_get(f->s, "att-one", &a), ERR_OK);
    assert_int_equal(a.fence, 1);

    assert_int_equal(store_job_update(f->s, j.id, "att-one", running, NULL), ERR_OK);
    assert_int_equal(store_job_update(f->s, j.id, "att-missing", running, NULL), ERR_NOT_FOUND);
    assert_int_equal(store_job_update(f->s, "ftjob-missing", NULL, running, NULL), ERR_NOT_FOUND);
    assert_int_equal(store_attempt_get(f->s, "att-one", &a), ERR_OK);
    assert_string_equal(a.status, "running");
    struct store_log_line lines[4];
    int n;
    assert_int_equal(store_log_read(f->s, j.id, "att-one", 0, lines, 4, &n), ERR_OK);
    assert_int_equal(n, 2);
    assert_string_equal(lines[0].line, "step 10/30: loss 2.0");
    assert_string_equal(lines[1].line, "saved checkpoint at step 20");
    assert_int_equal(store_log_read(f->s, j.id, "att-one", lines[0].seq, lines, 4, &n), ERR_OK);
    assert_int_equal(n, 1);
    char last[IDS_MAX];
    assert_int_equal(store_log_last_attempt(f->s, j.id, last), ERR_OK);
    assert_string_equal(last, "att-one");
    struct store_checkpoint ks[2];
    assert_int_equal(store_checkpoint_list(f->s, j.id, ks, 2, &n), ERR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ks[0].step, 20);
    struct store_attempt open[4];
    assert_int_equal(store_attempt_list_open(f->s, "w1", open, 4, &n), ERR_OK);
    assert_int_equal(n, 1);
}

struct seen {
    struct store_waiting rows[8];
    int n;
};

static void collect(const struct store_waiting *row, void *ctx)
{
    struct seen *s = ctx;
    if (s->n < 8)
        s->rows[s->n++] = *row;
}

static enum alallo_err finish_job(struct store_job *job, struct store_attempt *att,
                                  struct store_writes *w, void *ctx)
{
    (void)att;
    (void)w;
    (void)ctx;
    job->status = JOB_SUCCEEDED;
    return ERR_OK;
}

static void waiting_jobs_and_open_attempts_in_one_read(void **state)
{
    struct fixture *f = *state;
    struct store_job j[3];
    for (int i = 0; i < 3; i++) {
        make_job(&j[i], i == 1 ? "acct-b" : "acct-a", i);
        snprintf(j[i].plan, sizeof j[i].plan, "{\"n\":%d}", i);
        assert_int_equal(store_job_insert(f->s, &j[i], NULL), ERR_OK);
    }
    struct upd u = {.attempt = "att-w1"};
    assert_int_equal(store_job_update(f->s, j[1].id, NULL, start_attempt, &u), ERR_OK);
    assert_int_equal(store_job_update(f->s, j[2].id, NULL, finish_job, NULL), ERR_OK);

    /* The queued and the running job, oldest first; not the finished one. */
    struct seen seen = {0};
    assert_int_equal(store_waiting_each(f->s, 100, collect, &seen), ERR_OK);
    assert_int_equal(seen.n, 2);
    assert_string_equal(seen.rows[0].id, j[0].id);
    assert_false(seen.rows[0].running);
    assert_int_equal(seen.rows[0].status, JOB_QUEUED);
    assert_string_equal(seen.rows[0].plan, "{\"n\":0}");
    assert_int_equal(seen.rows[0].memory_bytes, 1000);
    assert_int_equal(seen.rows[0].max_steps, 30);
    assert_int_equal(seen.rows[0].batch_size, 4);
    assert_string_equal(seen.rows[1].id, j[1].id);
    assert_string_equal(seen.rows[1].account, "acct-b");
    assert_true(seen.rows[1].running);
    assert_string_equal(seen.rows[1].message, "Starting");
    /* At most cap of them. */
    seen.n = 0;
    assert_int_equal(store_waiting_each(f->s, 1, collect, &seen), ERR_OK);
    assert_int_equal(seen.n, 1);

    /* Open attempts of one worker, or of every worker with "". */
    struct store_attempt open[4];
    int n;
    assert_int_equal(store_attempt_list_open(f->s, "", open, 4, &n), ERR_OK);
    assert_int_equal(n, 1);
    assert_string_equal(open[0].worker, "w1");
    assert_int_equal(store_attempt_list_open(f->s, "w2", open, 4, &n), ERR_OK);
    assert_int_equal(n, 0);
}

static void claim_candidates_one_per_account(void **state)
{
    struct fixture *f = *state;
    char first_a[IDS_MAX] = "", first_b[IDS_MAX] = "";
    for (int i = 0; i < 6; i++) {
        struct store_job j;
        make_job(&j, i % 2 ? "acct-b" : "acct-a", i);
        j.memory_bytes = i < 2 ? 10000 : 100; /* the two oldest do not fit */
        assert_int_equal(store_job_insert(f->s, &j, NULL), ERR_OK);
        if (i == 2)
            strcpy(first_a, j.id);
        if (i == 3)
            strcpy(first_b, j.id);
    }
    struct store_claim_candidate c[8];
    int n;
    assert_int_equal(store_claim_candidates(f->s, 1000, c, 8, &n), ERR_OK);
    assert_int_equal(n, 2);
    for (int i = 0; i < n; i++)
        assert_string_equal(c[i].job, strcmp(c[i].account, "acct-a") == 0 ? first_a : first_b);
    assert_int_equal(store_claim_candidates(f->s, 10, c, 8, &n), ERR_OK);
    assert_int_equal(n, 0);
}

struct burst {
    struct store *s;
    int count;
    int failures;
};

static void *insert_many(void *arg)
{
    struct burst *b = arg;
    for (int i = 0; i < b->count; i++) {
        struct store_job j;
        make_job(&j, "acct-a", i);
        if (store_job_insert(b->s, &j, NULL))
            b->failures++;
    }
    return NULL;
}

static void group_commit_many_threads(void **state)
{
    struct fixture *f = *state;
    pthread_t t[8];
    struct burst b[8];
    for (int i = 0; i < 8; i++) {
        b[i] = (struct burst){f->s, 50, 0};
        pthread_create(&t[i], NULL, insert_many, &b[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(b[i].failures, 0);
    }
    long counts[JOB_STATUS_COUNT];
    assert_int_equal(store_job_count_by_status(f->s, counts), ERR_OK);
    assert_int_equal(counts[JOB_QUEUED], 400);
}

/* A child inserts jobs and writes each id to a pipe once the insert has
 * returned; the parent kills it with SIGKILL mid-burst and then finds every
 * reported id in the store. */
static void acknowledged_jobs_survive_kill9(void **state)
{
    struct fixture *f = *state;
    char path[400];
    assert_int_equal(fixture_store_url(f->dir, "kill", path, sizeof path), 0);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        test_child_dies_with_parent(me);
        close(fds[0]);
        struct store *s;
        char err[200];
        if (store_open(path, &s, err, sizeof err) || add_data_set(s, "acct-a", "file-x-acct-a"))
            _exit(2);
        for (int i = 0; i < 100000; i++) {
            struct store_job j;
            make_job(&j, "acct-a", i);
            if (store_job_insert(s, &j, NULL))
                _exit(3);
            char line[IDS_MAX + 1];
            int len = snprintf(line, sizeof line, "%s\n", j.id);
            if (write(fds[1], line, (size_t)len) != len)
                _exit(4);
        }
        _exit(0);
    }
    close(fds[1]);
    FILE *in = fdopen(fds[0], "r");
    char (*acked)[IDS_MAX] = calloc(100000, IDS_MAX);
    int n = 0;
    char line[128];
    while (n < 300 && fgets(line, sizeof line, in)) {
        line[strcspn(line, "\n")] = '\0';
        strcpy(acked[n++], line);
    }
    kill(pid, SIGKILL);
    /* Ids already in the pipe were acknowledged before the kill too. */
    while (fgets(line, sizeof line, in) && n < 100000) {
        line[strcspn(line, "\n")] = '\0';
        strcpy(acked[n++], line);
    }
    fclose(in);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status));
    assert_true(n >= 300);

    struct store *s;
    char err[200];
    assert_int_equal(store_open(path, &s, err, sizeof err), ERR_OK);
    struct store_job j;
    for (int i = 0; i < n; i++)
        assert_int_equal(store_job_get(s, "acct-a", acked[i], &j), ERR_OK);
    store_close(s);
    free(acked);
}

static void workers_and_too_long_values(void **state)
{
    struct fixture *f = *state;
    struct store_worker w = {.cpus = 2, .mem_bytes = 1 << 30, .price_per_hour = 0.4};
    strcpy(w.name, "small");
    strcpy(w.class_, "spot");
    strcpy(w.state, "active");
    assert_int_equal(store_worker_put(f->s, &w), ERR_OK);
    assert_int_equal(store_worker_heartbeat(f->s, "small", 1234), ERR_OK);
    assert_int_equal(store_worker_heartbeat(f->s, "nobody", 1234), ERR_NOT_FOUND);
    assert_int_equal(store_worker_set_state(f->s, "small", "draining"), ERR_OK);
    struct store_worker got;
    assert_int_equal(store_worker_get(f->s, "small", &got), ERR_OK);
    assert_int_equal(got.last_heartbeat_ms, 1234);
    assert_string_equal(got.state, "draining");
    /* An unterminated field is refused, never cut. */
    memset(w.class_, 'x', sizeof w.class_);
    assert_int_equal(store_worker_put(f->s, &w), ERR_INVALID);
}

/* A worker's state moves only from the state the decision was made on, and
 * to lost only while the worker is still silent. */
static void worker_state_changes_are_compare_and_set(void **state)
{
    struct fixture *f = *state;
    struct store_worker w = {.cpus = 2, .mem_bytes = 1 << 30, .price_per_hour = 0.4};
    strcpy(w.name, "w");
    strcpy(w.class_, "spot");
    strcpy(w.state, "active");
    assert_int_equal(store_worker_put(f->s, &w), ERR_OK);
    assert_int_equal(store_worker_heartbeat(f->s, "w", 1000), ERR_OK);
    assert_int_equal(store_worker_change_state(f->s, "w", "active", "draining", 0), ERR_OK);
    /* A decision made on the stale "active" changes nothing. */
    assert_int_equal(store_worker_change_state(f->s, "w", "active", "lost", 0), ERR_CONFLICT);
    /* It spoke at 1000: not lost as "silent before 500"... */
    assert_int_equal(store_worker_change_state(f->s, "w", "draining", "lost", 500), ERR_CONFLICT);
    struct store_worker got;
    assert_int_equal(store_worker_get(f->s, "w", &got), ERR_OK);
    assert_string_equal(got.state, "draining");
    /* ...but lost as "silent before 2000". */
    assert_int_equal(store_worker_change_state(f->s, "w", "draining", "lost", 2000), ERR_OK);
    assert_int_equal(store_worker_get(f->s, "w", &got), ERR_OK);
    assert_string_equal(got.state, "lost");
    assert_int_equal(store_worker_change_state(f->s, "nobody", "lost", "active", 0), ERR_CONFLICT);
}

/* A job and the deletion of its data set: one of the two loses, whichever
 * order they reach the store in. */
static void a_job_and_the_deletion_of_its_data_set_exclude_each_other(void **state)
{
    struct fixture *f = *state;
    /* The job first: the file is in use until the job ends. */
    assert_int_equal(add_data_set(f->s, "acct-a", "file-used"), ERR_OK);
    struct store_job j, got;
    make_job(&j, "acct-a", 1);
    strcpy(j.training_file, "file-used");
    assert_int_equal(store_job_insert(f->s, &j, NULL), ERR_OK);
    struct store_file out;
    assert_int_equal(store_file_delete(f->s, "acct-a", "file-used", &out), ERR_CONFLICT);
    assert_int_equal(store_file_get(f->s, "acct-a", "file-used", &out), ERR_OK);
    /* A validation file is held the same way. */
    assert_int_equal(add_data_set(f->s, "acct-a", "file-check"), ERR_OK);
    make_job(&j, "acct-a", 2);
    strcpy(j.validation_file, "file-check");
    assert_int_equal(store_job_insert(f->s, &j, NULL), ERR_OK);
    assert_int_equal(store_file_delete(f->s, "acct-a", "file-check", NULL), ERR_CONFLICT);
    /* Once the job has ended, the file may go. */
    assert_int_equal(store_job_update(f->s, j.id, NULL, finish_job, NULL), ERR_OK);
    assert_int_equal(store_file_delete(f->s, "acct-a", "file-check", NULL), ERR_OK);

    /* The deletion first: the job is refused, and nothing of it is kept. */
    assert_int_equal(add_data_set(f->s, "acct-a", "file-gone"), ERR_OK);
    assert_int_equal(store_file_delete(f->s, "acct-a", "file-gone", NULL), ERR_OK);
    make_job(&j, "acct-a", 3);
    strcpy(j.training_file, "file-gone");
    assert_int_equal(store_job_insert(f->s, &j, NULL), ERR_NOT_FOUND);
    assert_int_equal(store_job_get(f->s, NULL, j.id, &got), ERR_NOT_FOUND);
    make_job(&j, "acct-a", 4);
    strcpy(j.validation_file, "file-gone");
    assert_int_equal(store_job_insert(f->s, &j, NULL), ERR_NOT_FOUND);
    /* Another account's file is no data set of this job. */
    make_job(&j, "acct-a", 5);
    strcpy(j.training_file, "file-used");
    strcpy(j.account, "acct-b");
    assert_int_equal(store_job_insert(f->s, &j, NULL), ERR_NOT_FOUND);
}

struct race {
    struct store *s;
    char file[IDS_MAX];
    pthread_barrier_t *go;
    enum alallo_err result;
    char job[IDS_MAX];
};

static void *race_insert(void *arg)
{
    struct race *r = arg;
    struct store_job j;
    make_job(&j, "acct-a", 0);
    strcpy(j.training_file, r->file);
    strcpy(r->job, j.id);
    pthread_barrier_wait(r->go);
    r->result = store_job_insert(r->s, &j, NULL);
    return NULL;
}

static void *race_delete(void *arg)
{
    struct race *r = arg;
    pthread_barrier_wait(r->go);
    r->result = store_file_delete(r->s, "acct-a", r->file, NULL);
    return NULL;
}

/* Creation and deletion released at the same moment, many times (and with
 * other creations in the same group commit): never both acknowledged, and
 * every stored job's data set is there. */
static void racing_a_job_and_the_deletion_of_its_data_set(void **state)
{
    struct fixture *f = *state;
    int both = 0, job_won = 0, delete_won = 0;
    for (int i = 0; i < 200; i++) {
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 3);
        struct race ins = {.s = f->s, .go = &go}, del = {.s = f->s, .go = &go},
                    other = {.s = f->s, .go = &go};
        snprintf(ins.file, sizeof ins.file, "file-race-%d", i);
        strcpy(del.file, ins.file);
        strcpy(other.file, "file-x-acct-a");
        assert_int_equal(add_data_set(f->s, "acct-a", ins.file), ERR_OK);
        pthread_t t[3];
        pthread_create(&t[0], NULL, race_insert, &ins);
        pthread_create(&t[1], NULL, race_delete, &del);
        pthread_create(&t[2], NULL, race_insert, &other);
        for (int k = 0; k < 3; k++)
            pthread_join(t[k], NULL);
        pthread_barrier_destroy(&go);
        assert_int_equal(other.result, ERR_OK);
        if (ins.result == ERR_OK && del.result == ERR_OK)
            both++;
        struct store_job j;
        struct store_file fl;
        if (ins.result == ERR_OK) {
            job_won++;
            assert_int_equal(del.result, ERR_CONFLICT);
            assert_int_equal(store_file_get(f->s, "acct-a", ins.file, &fl), ERR_OK);
        } else {
            delete_won++;
            assert_int_equal(ins.result, ERR_NOT_FOUND);
            assert_int_equal(del.result, ERR_OK);
            assert_int_equal(store_job_get(f->s, NULL, ins.job, &j), ERR_NOT_FOUND);
        }
    }
    assert_int_equal(both, 0);
    assert_int_equal(job_won + delete_won, 200);
}

/* One step of a job as billing does it: a new fence, the next step done,
 * and a charge row for exactly that step. Touches nothing but the job and
 * its writes, so it is safe to run again (store_job_update on PostgreSQL
 * repeats it after a serialization failure or a deadlock). */
static enum alallo_err bill_one_step(struct store_job *job, struct store_attempt *att,
                                     struct store_writes *w, void *ctx)
{
    (void)att;
    (void)ctx;
    struct store_ledger_row r = {.amount = 0.5, .steps = 1, .created_ms = 1};
    strcpy(r.account, job->account);
    strcpy(r.job, job->id);
    strcpy(r.kind, "charge");
    r.from_step = job->steps_done;
    r.to_step = job->steps_done + 1;
    job->fence++;
    job->steps_done++;
    job->price_charged += r.amount;
    return store_writes_ledger(w, &r);
}

struct hammer {
    struct store *s;
    const char *job;
    int n;
    int failures;
};

static void *hammer_one_job(void *arg)
{
    struct hammer *h = arg;
    for (int i = 0; i < h->n; i++)
        if (store_job_update(h->s, h->job, NULL, bill_one_step, NULL))
            h->failures++;
    return NULL;
}

/* Eight threads update one job at once: no update is lost or applied
 * twice (the fence and the steps grow by one each), and the ledger bills
 * every step exactly once, in order. */
static void eight_threads_updating_one_job_keep_fence_and_ledger(void **state)
{
    struct fixture *f = *state;
    struct store_job j;
    make_job(&j, "acct-a", 1);
    assert_int_equal(store_job_insert(f->s, &j, NULL), ERR_OK);
    enum { THREADS = 8, EACH = 40 };
    pthread_t t[THREADS];
    struct hammer h[THREADS];
    for (int i = 0; i < THREADS; i++) {
        h[i] = (struct hammer){.s = f->s, .job = j.id, .n = EACH};
        pthread_create(&t[i], NULL, hammer_one_job, &h[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(h[i].failures, 0);
    }
    struct store_job got;
    assert_int_equal(store_job_get(f->s, NULL, j.id, &got), ERR_OK);
    assert_int_equal(got.fence, THREADS * EACH);
    assert_int_equal(got.steps_done, THREADS * EACH);
    assert_true(got.price_charged > 0.5 * THREADS * EACH - 1e-6 &&
                got.price_charged < 0.5 * THREADS * EACH + 1e-6);
    /* The ledger, newest first: steps (k-1, k] for k = 320 down to 1. */
    struct store_ledger_row rows[STORE_LIST_MAX];
    int n, seen = 0;
    bool more = true;
    int64_t before = 0;
    long expect_to = THREADS * EACH;
    while (more) {
        assert_int_equal(store_ledger_list(f->s, "acct-a", before, STORE_LIST_MAX, rows, &n, &more),
                         ERR_OK);
        for (int i = 0; i < n; i++, seen++) {
            assert_int_equal(rows[i].to_step, expect_to);
            assert_int_equal(rows[i].from_step, expect_to - 1);
            expect_to--;
        }
        if (n)
            before = rows[n - 1].seq;
    }
    assert_int_equal(seen, THREADS * EACH);
}

static enum alallo_err log_broken_line(struct store_job *job, struct store_attempt *att,
                                       struct store_writes *w, void *ctx)
{
    (void)job;
    (void)att;
    (void)ctx;
    return store_writes_log(w, "att-x", "loss 1.0 \xff\xfe end");
}

/* A job whose values the database refuses fails alone, not with the jobs
 * that share its group commit; a trainer's line that is not UTF-8 does not
 * fail its update. PostgreSQL refuses text that is not UTF-8 (SQLite keeps
 * the bytes): the job is ERR_INVALID there, and the line is kept with '?'
 * for each broken byte. */
static void a_refused_job_fails_alone_and_broken_lines_are_kept(void **state)
{
    struct fixture *f = *state;
    enum { N = 16 };
    struct burst b[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        b[i] = (struct burst){f->s, 5, 0};
        pthread_create(&t[i], NULL, insert_many, &b[i]);
    }
    struct store_job bad, got;
    make_job(&bad, "acct-a", 1);
    strcpy(bad.name, "broken \xff\xfe name");
    enum alallo_err e = store_job_insert(f->s, &bad, NULL);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(b[i].failures, 0);
    }
    long counts[JOB_STATUS_COUNT];
    assert_int_equal(store_job_count_by_status(f->s, counts), ERR_OK);
    if (fixture_on_pg()) {
        assert_int_equal(e, ERR_INVALID);
        assert_int_equal(store_job_get(f->s, NULL, bad.id, &got), ERR_NOT_FOUND);
        assert_int_equal(counts[JOB_QUEUED], N * 5);
    } else {
        assert_int_equal(e, ERR_OK);
        assert_int_equal(counts[JOB_QUEUED], N * 5 + 1);
    }
    struct store_job j;
    make_job(&j, "acct-a", 2);
    assert_int_equal(store_job_insert(f->s, &j, NULL), ERR_OK);
    assert_int_equal(store_job_update(f->s, j.id, NULL, log_broken_line, NULL), ERR_OK);
    struct store_log_line line;
    int n;
    assert_int_equal(store_log_read(f->s, j.id, NULL, 0, &line, 1, &n), ERR_OK);
    assert_int_equal(n, 1);
    assert_string_equal(line.line, fixture_on_pg() ? "loss 1.0 ?? end" : "loss 1.0 \xff\xfe end");
}

/* store_open_url: the URL picks the store; a SQLite folder holds
 * alallo.db; an unreachable PostgreSQL is a clear error, not a crash. */
static void urls_pick_the_store(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(store_url_kind("postgresql:///x"), STORE_POSTGRESQL);
    assert_int_equal(store_url_kind("postgres://h/x"), STORE_POSTGRESQL);
    assert_int_equal(store_url_kind("sqlite:/x"), STORE_SQLITE);
    assert_int_equal(store_url_kind("/var/alallo"), STORE_SQLITE);
    char url[300], err[300], file[320];
    struct store *s;
    snprintf(url, sizeof url, "sqlite:%s", f->dir);
    assert_int_equal(store_open_url(url, &s, err, sizeof err), ERR_OK);
    assert_string_equal(store_backend_name(s), "sqlite");
    store_close(s);
    snprintf(file, sizeof file, "%s/alallo.db", f->dir);
    assert_int_equal(access(file, F_OK), 0);
    assert_int_equal(store_open_url("postgresql:///nowhere?host=/nonexistent-dir&port=1", &s, err,
                                    sizeof err),
                     ERR_UNAVAILABLE);
    assert_null(s);
    assert_non_null(strstr(err, "cannot connect to PostgreSQL"));
}

/* Settings are per account, replaced and removed; integration cursors
 * made before their job are ignored until it exists, and a job is pending
 * while it has events past its cursor. */
static void settings_and_integration_cursors(void **state)
{
    struct fixture *f = *state;
    char v[STORE_SETTING_MAX];
    assert_int_equal(store_account_setting_get(f->s, "acct-a", "wandb_api_key", v, sizeof v),
                     ERR_NOT_FOUND);
    assert_int_equal(store_account_setting_put(f->s, "acct-a", "wandb_api_key", "k1"), ERR_OK);
    assert_int_equal(store_account_setting_put(f->s, "acct-a", "wandb_api_key", "k2"), ERR_OK);
    assert_int_equal(store_account_setting_get(f->s, "acct-a", "wandb_api_key", v, sizeof v),
                     ERR_OK);
    assert_string_equal(v, "k2");
    assert_int_equal(store_account_setting_get(f->s, "acct-b", "wandb_api_key", v, sizeof v),
                     ERR_NOT_FOUND);
    char big[STORE_SETTING_MAX + 1];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    assert_int_equal(store_account_setting_put(f->s, "acct-a", "wandb_api_key", big),
                     ERR_INVALID);
    assert_int_equal(store_account_setting_put(f->s, "acct-a", "wandb_api_key", ""), ERR_OK);
    assert_int_equal(store_account_setting_get(f->s, "acct-a", "wandb_api_key", v, sizeof v),
                     ERR_NOT_FOUND);

    struct store_job j;
    make_job(&j, "acct-a", 1);
    struct store_cursor c[4];
    int n = -1;
    assert_int_equal(store_cursor_put(f->s, j.id, "wandb", 0, 0), ERR_OK);
    assert_int_equal(store_cursor_pending(f->s, "wandb", c, 4, &n), ERR_OK);
    assert_int_equal(n, 0);
    struct store_event ev = {.created_ms = 1};
    snprintf(ev.level, sizeof ev.level, "info");
    snprintf(ev.type, sizeof ev.type, "message");
    snprintf(ev.message, sizeof ev.message, "Created");
    assert_int_equal(store_job_insert(f->s, &j, &ev), ERR_OK);
    assert_int_equal(store_cursor_pending(f->s, "wandb", c, 4, &n), ERR_OK);
    assert_int_equal(n, 1);
    assert_string_equal(c[0].job, j.id);
    assert_string_equal(c[0].account, "acct-a");
    assert_int_equal(c[0].sent_seq, 0);
    assert_int_equal(c[0].event_seq, 1);
    assert_int_equal(c[0].sent_lines, 0);
    assert_int_equal(store_cursor_pending(f->s, "other", c, 4, &n), ERR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(store_cursor_put(f->s, j.id, "wandb", 1, 3), ERR_OK);
    assert_int_equal(store_cursor_pending(f->s, "wandb", c, 4, &n), ERR_OK);
    assert_int_equal(n, 0);
}

/* Pending cursors come in turns between accounts: one account's many
 * older jobs do not keep another's newer one out of a short read; a
 * stopped cursor is never pending again. */
static void pending_cursors_take_turns_between_accounts(void **state)
{
    struct fixture *f = *state;
    struct store_event ev = {.created_ms = 1};
    snprintf(ev.level, sizeof ev.level, "info");
    snprintf(ev.type, sizeof ev.type, "message");
    snprintf(ev.message, sizeof ev.message, "Created");
    struct store_job a[3], b;
    for (int i = 0; i < 3; i++) {
        make_job(&a[i], "acct-a", i);
        assert_int_equal(store_cursor_put(f->s, a[i].id, "wandb", 0, 0), ERR_OK);
        assert_int_equal(store_job_insert(f->s, &a[i], &ev), ERR_OK);
    }
    make_job(&b, "acct-b", 9);
    assert_int_equal(store_cursor_put(f->s, b.id, "wandb", 0, 0), ERR_OK);
    assert_int_equal(store_job_insert(f->s, &b, &ev), ERR_OK);
    struct store_cursor c[4];
    int n = 0;
    assert_int_equal(store_cursor_pending(f->s, "wandb", c, 2, &n), ERR_OK);
    assert_int_equal(n, 2);
    assert_string_equal(c[0].job, a[0].id);
    assert_string_equal(c[1].job, b.id);
    assert_int_equal(store_cursor_pending(f->s, "wandb", c, 4, &n), ERR_OK);
    assert_int_equal(n, 4);
    assert_string_equal(c[2].job, a[1].id);
    assert_string_equal(c[3].job, a[2].id);
    assert_int_equal(store_cursor_put(f->s, a[0].id, "wandb", STORE_CURSOR_STOPPED, 0), ERR_OK);
    assert_int_equal(store_cursor_pending(f->s, "wandb", c, 4, &n), ERR_OK);
    assert_int_equal(n, 3);
    assert_string_equal(c[0].job, a[1].id);
    assert_string_equal(c[1].job, b.id);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(migrations_apply_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(waiting_jobs_and_open_attempts_in_one_read, setup_with_data,
                                        teardown),
        cmocka_unit_test_setup_teardown(wal_and_full_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(accounts, setup, teardown),
        cmocka_unit_test_setup_teardown(worker_state_changes_are_compare_and_set, setup, teardown),
        cmocka_unit_test_setup_teardown(files_paging_and_isolation, setup, teardown),
        cmocka_unit_test_setup_teardown(files_keep_their_conversion, setup, teardown),
        cmocka_unit_test_setup_teardown(jobs_paging_newest_first, setup_with_data, teardown),
        cmocka_unit_test_setup_teardown(updates_are_atomic, setup_with_data, teardown),
        cmocka_unit_test_setup_teardown(claim_candidates_one_per_account, setup_with_data, teardown),
        cmocka_unit_test_setup_teardown(group_commit_many_threads, setup_with_data, teardown),
        cmocka_unit_test_setup_teardown(acknowledged_jobs_survive_kill9, setup, teardown),
        cmocka_unit_test_setup_teardown(workers_and_too_long_values, setup, teardown),
        cmocka_unit_test_setup_teardown(a_job_and_the_deletion_of_its_data_set_exclude_each_other,
                                        setup_with_data, teardown),
        cmocka_unit_test_setup_teardown(racing_a_job_and_the_deletion_of_its_data_set,
                                        setup_with_data, teardown),
        cmocka_unit_test_setup_teardown(eight_threads_updating_one_job_keep_fence_and_ledger,
                                        setup_with_data, teardown),
        cmocka_unit_test_setup_teardown(a_refused_job_fails_alone_and_broken_lines_are_kept,
                                        setup_with_data, teardown),
        cmocka_unit_test_setup_teardown(urls_pick_the_store, setup, teardown),
        cmocka_unit_test_setup_teardown(pending_cursors_take_turns_between_accounts,
                                        setup_with_data, teardown),
        cmocka_unit_test_setup_teardown(settings_and_integration_cursors, setup_with_data,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
