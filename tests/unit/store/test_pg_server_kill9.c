/* test_pg_server_kill9.c - the PostgreSQL store when its server dies:
 * `kill -9` of the server (postmaster and backends) in the middle of a
 * burst of job creations from several threads loses no acknowledged job,
 * and the store carries on by itself once the server is back (each
 * connection is reset before its next use). Runs only in the PostgreSQL
 * pass (CTest's store/test_pg_server_kill9@pg; ALALLO_TEST_PG). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "store_fixture.h"

#define MAX_ACKED 200000
#define THREADS 8

struct shared {
    struct store *s;
    atomic_int stop;
    pthread_mutex_t mu; /* owns acked, n_acked */
    char (*acked)[IDS_MAX];
    int n_acked;
    atomic_int failed; /* creations answered with an error (while the server was down) */
};

static void make_job(struct store_job *j)
{
    memset(j, 0, sizeof *j);
    ids_make(j->id, sizeof j->id, "ftjob-");
    strcpy(j->account, "acct-a");
    strcpy(j->name, "burst");
    strcpy(j->model, "tiny");
    strcpy(j->training_file, "file-x");
    strcpy(j->method, "supervised");
    strcpy(j->precision, "16-bit");
    strcpy(j->goal, "lowest_cost");
    strcpy(j->adapter, "lora");
    j->n_epochs = 1;
    j->batch_size = 4;
    j->max_steps = 10;
    j->status = JOB_QUEUED;
    strcpy(j->message, "Waiting for capacity");
}

static void *creator(void *arg)
{
    struct shared *sh = arg;
    while (!atomic_load(&sh->stop)) {
        struct store_job j;
        make_job(&j);
        struct store_event ev = {.created_ms = 1, .level = "info", .type = "message",
                                 .message = "Created fine-tuning job"};
        if (store_job_insert(sh->s, &j, &ev) != ERR_OK) {
            atomic_fetch_add(&sh->failed, 1);
            struct timespec pause = {0, 20 * 1000000L};
            nanosleep(&pause, NULL);
            continue;
        }
        pthread_mutex_lock(&sh->mu);
        if (sh->n_acked < MAX_ACKED)
            strcpy(sh->acked[sh->n_acked++], j.id);
        pthread_mutex_unlock(&sh->mu);
    }
    return NULL;
}

static int acked_now(struct shared *sh)
{
    pthread_mutex_lock(&sh->mu);
    int n = sh->n_acked;
    pthread_mutex_unlock(&sh->mu);
    return n;
}

/* Waits (up to 120 s, generous on a loaded machine) until more than `n`
 * creations are acknowledged. */
static bool wait_acked(struct shared *sh, int n)
{
    for (int i = 0; i < 1200; i++) {
        if (acked_now(sh) > n)
            return true;
        poll(NULL, 0, 100);
    }
    return false;
}

static int kit(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/tests/pg/pg-kill9.sh %s %s", ALALLO_SOURCE_DIR,
             fixture_pg_dir(), args);
    return system(cmd);
}

static void server_killed_mid_burst_loses_no_acknowledged_job(void **state)
{
    (void)state;
    assert_non_null(fixture_pg_dir());
    char url[400], err[200];
    assert_int_equal(fixture_store_url("/tmp", "srvkill", url, sizeof url), 0);
    struct shared sh = {.acked = calloc(MAX_ACKED, IDS_MAX)};
    pthread_mutex_init(&sh.mu, NULL);
    assert_int_equal(store_open(url, &sh.s, err, sizeof err), ERR_OK);
    struct store_file f = {0};
    strcpy(f.id, "file-x");
    strcpy(f.account, "acct-a");
    strcpy(f.filename, "train.jsonl");
    strcpy(f.purpose, "fine-tune");
    assert_int_equal(store_file_insert(sh.s, &f), ERR_OK);

    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, creator, &sh);
    assert_true(wait_acked(&sh, 300));
    /* Mid-burst: the server and all its processes die at once. */
    assert_int_equal(kit(""), 0);
    int before_restart = acked_now(&sh);
    /* While it is down, creations fail (they are not acknowledged). */
    int failed_before = atomic_load(&sh.failed);
    for (int i = 0; i < 100 && atomic_load(&sh.failed) == failed_before; i++)
        poll(NULL, 0, 50);
    assert_true(atomic_load(&sh.failed) > failed_before);
    assert_int_equal(kit("--restart"), 0);
    /* Once it is back, the same store carries on without being reopened. */
    assert_true(wait_acked(&sh, before_restart + 200));
    atomic_store(&sh.stop, 1);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    store_close(sh.s);

    /* Every acknowledged job is there, with its first event. */
    struct store *s;
    assert_int_equal(store_open(url, &s, err, sizeof err), ERR_OK);
    for (int i = 0; i < sh.n_acked; i++) {
        struct store_job j;
        assert_int_equal(store_job_get(s, "acct-a", sh.acked[i], &j), ERR_OK);
        assert_int_equal(j.event_seq, 1);
    }
    long counts[JOB_STATUS_COUNT];
    assert_int_equal(store_job_count_by_status(s, counts), ERR_OK);
    assert_true(counts[JOB_QUEUED] >= sh.n_acked);
    print_message("%d jobs acknowledged, %d creations refused while the server was down\n",
                  sh.n_acked, atomic_load(&sh.failed));
    store_close(s);
    fixture_store_drop("srvkill");
    free(sh.acked);
    pthread_mutex_destroy(&sh.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(server_killed_mid_burst_loses_no_acknowledged_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
