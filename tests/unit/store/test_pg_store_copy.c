/* test_pg_store_copy.c - `alallo store copy sqlite:DIR postgresql://…`
 * (store_copy): every table of a SQLite store arrives in an empty
 * PostgreSQL store with the same rows, new rows continue after the copied
 * numbers, and a target that is not empty is refused with nothing written.
 * Runs only in the PostgreSQL pass (ALALLO_TEST_PG). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store.h"
#include "store/store_copy.h"
#include "store_fixture.h"

static void make_job(struct store_job *j, int i)
{
    memset(j, 0, sizeof *j);
    ids_make(j->id, sizeof j->id, "ftjob-");
    strcpy(j->account, "acct-a");
    snprintf(j->name, sizeof j->name, "job\t%d with a tab, a \\ and a\nnewline", i);
    strcpy(j->model, "tiny");
    strcpy(j->training_file, "file-x");
    strcpy(j->method, "supervised");
    strcpy(j->precision, "16-bit");
    strcpy(j->goal, "lowest_cost");
    strcpy(j->adapter, "lora");
    j->n_epochs = 2;
    j->batch_size = 4;
    j->lr_multiplier = 0.1; /* not exact in binary: must survive the copy to the bit */
    j->max_steps = 30;
    j->status = JOB_QUEUED;
    strcpy(j->message, "Waiting for capacity");
    strcpy(j->estimate, "{\"price\":{\"high\":1.5}}");
    j->created_ms = 1700000000000 + i;
}

/* Runs one step of a job: an attempt, a log line, an event, a checkpoint, a
 * ledger row and a calibration pair, so that every table has rows. */
static enum alallo_err step(struct store_job *j, struct store_attempt *unused,
                            struct store_writes *w, void *ctx)
{
    (void)unused;
    (void)ctx;
    struct store_attempt a = {.fence = ++j->fence, .price_per_hour = 0.4, .t_started = -1,
                              .t_last = -1};
    snprintf(a.id, sizeof a.id, "att-%s", j->id + 6);
    strcpy(a.job, j->id);
    strcpy(a.worker, "w1");
    strcpy(a.status, "running");
    strcpy(j->active_attempt, a.id);
    j->steps_done = 10;
    struct store_checkpoint k = {.step = 10, .train_loss = 1.25, .created_ms = 5};
    strcpy(k.path, "/data/jobs/x/checkpoints/step-10");
    struct store_ledger_row r = {.amount = 0.125, .steps = 10, .created_ms = 6, .to_step = 10};
    strcpy(r.account, j->account);
    strcpy(r.job, j->id);
    strcpy(r.attempt, a.id);
    strcpy(r.kind, "charge");
    strcpy(r.reason, "steps");
    struct store_calibration c = {.method = 1, .actual_a = 2.5, .nominal_a = 2.0, .created_ms = 7};
    strcpy(c.kind, "train");
    enum alallo_err e = store_writes_attempt(w, &a);
    if (!e)
        e = store_writes_log(w, a.id, "step 10/30: loss 1.25");
    if (!e)
        e = store_writes_event(w, 8, "info", "metrics", "Step 10/30", "{\"step\":10}");
    if (!e)
        e = store_writes_checkpoint(w, &k);
    if (!e)
        e = store_writes_ledger(w, &r);
    if (!e)
        e = store_writes_calibration(w, &c);
    return e;
}

/* A SQLite store in dir with `jobs` jobs, each with one step. */
static void fill_sqlite(const char *dir, int jobs, char (*ids)[IDS_MAX])
{
    char err[200];
    struct store *s;
    assert_int_equal(store_open_url(dir, &s, err, sizeof err), ERR_OK);
    assert_string_equal(store_backend_name(s), "sqlite");
    assert_int_equal(store_account_create(s, "alice", "hash-a", NULL), ERR_OK);
    struct store_file f = {.bytes = 10, .examples = 3, .created_ms = 1};
    strcpy(f.id, "file-x");
    strcpy(f.account, "acct-a");
    strcpy(f.filename, "train.jsonl");
    strcpy(f.purpose, "fine-tune");
    strcpy(f.path, "/data/files/file-x.jsonl");
    assert_int_equal(store_file_insert(s, &f), ERR_OK);
    struct store_worker w = {.cpus = 2, .mem_bytes = 1 << 30, .price_per_hour = 0.4};
    strcpy(w.name, "w1");
    strcpy(w.class_, "spot");
    strcpy(w.state, "active");
    assert_int_equal(store_worker_put(s, &w), ERR_OK);
    for (int i = 0; i < jobs; i++) {
        struct store_job j;
        make_job(&j, i);
        struct store_event ev = {.created_ms = 1, .level = "info", .type = "message",
                                 .message = "Created fine-tuning job"};
        assert_int_equal(store_job_insert(s, &j, &ev), ERR_OK);
        assert_int_equal(store_job_update(s, j.id, NULL, step, NULL), ERR_OK);
        strcpy(ids[i], j.id);
    }
    /* A row in each table of schema 13, so that their copy is exercised
     * too (a column named sent_seq once passed for a seq column). */
    assert_int_equal(store_account_setting_put(s, "acct-a", "wandb_api_key", "k-1"), ERR_OK);
    assert_int_equal(store_cursor_put(s, ids[0], "wandb", 1, 1), ERR_OK);
    store_close(s);
}

static void copies_every_table_and_refuses_a_non_empty_target(void **state)
{
    (void)state;
    enum { JOBS = 30 };
    char dir[] = "/tmp/alallo-copy-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char ids[JOBS][IDS_MAX];
    fill_sqlite(dir, JOBS, ids);
    char from[300], to[400], err[300];
    snprintf(from, sizeof from, "sqlite:%s", dir);
    assert_int_equal(fixture_store_url(dir, "copy", to, sizeof to), 0);

    long long rows[STORE_COPY_TABLES];
    enum alallo_err copied = store_copy(from, to, rows, err, sizeof err);
    if (copied)
        fprintf(stderr, "store_copy: %s\n", err);
    assert_int_equal(copied, ERR_OK);
    /* accounts files jobs attempts events log_lines checkpoints workers ledger calibration
     * webhooks deliveries account_settings integration_cursors */
    const long long want[STORE_COPY_TABLES] = {1, 1, JOBS, JOBS, 2 * JOBS, JOBS, JOBS, 1, JOBS, JOBS, 0, 0, 1, 1};
    for (int i = 0; i < STORE_COPY_TABLES; i++)
        assert_int_equal(rows[i], want[i]);

    /* The same rows, read through the PostgreSQL store. */
    struct store *pg;
    assert_int_equal(store_open_url(to, &pg, err, sizeof err), ERR_OK);
    assert_string_equal(store_backend_name(pg), "postgresql");
    struct store_account a;
    assert_int_equal(store_account_by_key_hash(pg, "hash-a", &a), ERR_OK);
    assert_string_equal(a.name, "alice");
    struct store_job j;
    assert_int_equal(store_job_get(pg, "acct-a", ids[7], &j), ERR_OK);
    assert_string_equal(j.name, "job\t7 with a tab, a \\ and a\nnewline");
    assert_true(j.lr_multiplier == 0.1);
    assert_int_equal(j.created_ms, 1700000000007);
    assert_int_equal(j.steps_done, 10);
    assert_string_equal(j.estimate, "{\"price\":{\"high\":1.5}}");
    struct store_log_line lines[2];
    int n;
    assert_int_equal(store_log_read(pg, ids[7], NULL, 0, lines, 2, &n), ERR_OK);
    assert_int_equal(n, 1);
    assert_string_equal(lines[0].line, "step 10/30: loss 1.25");
    struct store_ledger_row led[STORE_LIST_MAX];
    bool more;
    assert_int_equal(store_ledger_list(pg, "acct-a", 0, STORE_LIST_MAX, led, &n, &more), ERR_OK);
    assert_int_equal(n, JOBS);
    assert_true(led[0].amount == 0.125);
    struct store_calibration cal[JOBS];
    assert_int_equal(store_calibration_list(pg, JOBS, cal, &n), ERR_OK);
    assert_int_equal(n, JOBS);
    struct store_worker w;
    assert_int_equal(store_worker_get(pg, "w1", &w), ERR_OK);
    /* New rows are numbered after the copied ones: the newest job lists first. */
    struct store_job fresh;
    make_job(&fresh, 99);
    assert_int_equal(store_job_insert(pg, &fresh, NULL), ERR_OK);
    struct store_job list[2];
    assert_int_equal(store_job_list(pg, "acct-a", NULL, 2, list, &n, &more), ERR_OK);
    assert_string_equal(list[0].id, fresh.id);
    assert_string_equal(list[1].id, ids[JOBS - 1]);
    store_close(pg);

    /* The target is no longer empty: refused, with nothing written. */
    assert_int_equal(store_copy(from, to, rows, err, sizeof err), ERR_CONFLICT);
    assert_non_null(strstr(err, "not empty"));
    assert_int_equal(store_open_url(to, &pg, err, sizeof err), ERR_OK);
    long counts[JOB_STATUS_COUNT];
    assert_int_equal(store_job_count_by_status(pg, counts), ERR_OK);
    assert_int_equal(counts[JOB_QUEUED], JOBS + 1);
    store_close(pg);

    /* The command says so too, and fails. */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' store copy '%s' '%s' 2>&1 | grep -q 'not empty'",
             ALALLO_BINARY, from, to);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "'%s' store copy '%s' '%s' >/dev/null 2>&1", ALALLO_BINARY, from, to);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 1);
    /* A folder without a store is not an empty store. */
    char empty[] = "/tmp/alallo-copy-empty-XXXXXX";
    assert_non_null(mkdtemp(empty));
    char none[300];
    snprintf(none, sizeof none, "sqlite:%s", empty);
    assert_int_equal(store_copy(none, to, rows, err, sizeof err), ERR_NOT_FOUND);
    assert_non_null(strstr(err, "does not exist"));
    rmdir(empty);
    /* Only SQLite → PostgreSQL. */
    assert_int_equal(store_copy(to, from, rows, err, sizeof err), ERR_INVALID);

    fixture_store_drop("copy");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(copies_every_table_and_refuses_a_non_empty_target),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
