/* test_pg_update_retry.c - store_job_update on PostgreSQL runs the whole
 * transaction again, callback included, when the server aborts it for a
 * deadlock (40P01): two updates of two jobs, each holding its own attempt
 * row and writing the other's, deadlock on purpose; both still succeed,
 * the loser's callback ran twice, and what committed is the second run's
 * (nothing of the first is left). PostgreSQL only (SQLite runs updates one
 * at a time, so they cannot deadlock); ALALLO_TEST_PG. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/store.h"
#include "store_fixture.h"

struct rendezvous {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
};

/* Waits (at most 30 s) until both callbacks hold their rows. */
static void meet(struct rendezvous *r)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    pthread_mutex_lock(&r->mu);
    r->arrived++;
    pthread_cond_broadcast(&r->cv);
    while (r->arrived < 2 && pthread_cond_timedwait(&r->cv, &r->mu, &until) == 0)
        ;
    pthread_mutex_unlock(&r->mu);
}

struct side {
    struct store *s;
    const char *job, *mine;          /* the job and its attempt */
    const char *their_job, *theirs;  /* the other job and its attempt */
    struct rendezvous *r;
    atomic_int runs;
    enum alallo_err result;
};

static enum alallo_err cross_write(struct store_job *job, struct store_attempt *att,
                                   struct store_writes *w, void *ctx)
{
    struct side *sd = ctx;
    int run = atomic_fetch_add(&sd->runs, 1) + 1;
    if (run == 1)
        meet(sd->r); /* both now hold job and attempt rows */
    /* Each run leaves its number in the job; only the committed one stays. */
    snprintf(job->message, sizeof job->message, "run %d", run);
    job->fence++;
    snprintf(att->reason, sizeof att->reason, "touched by run %d", run);
    struct store_attempt other = {0};
    strcpy(other.id, sd->theirs);
    strcpy(other.job, sd->their_job);
    strcpy(other.worker, "w");
    strcpy(other.status, "ended");
    other.t_started = other.t_last = -1;
    return store_writes_attempt(w, &other);
}

static void *update(void *arg)
{
    struct side *sd = arg;
    sd->result = store_job_update(sd->s, sd->job, sd->mine, cross_write, sd);
    return NULL;
}

static enum alallo_err add_attempt(struct store_job *job, struct store_attempt *unused,
                                   struct store_writes *w, void *ctx)
{
    (void)unused;
    struct store_attempt a = {.fence = 1, .t_started = -1, .t_last = -1};
    strcpy(a.id, ctx);
    strcpy(a.job, job->id);
    strcpy(a.worker, "w");
    strcpy(a.status, "running");
    return store_writes_attempt(w, &a);
}

static void make_job(struct store *s, char id[IDS_MAX], const char *attempt)
{
    struct store_job j = {0};
    ids_make(j.id, sizeof j.id, "ftjob-");
    strcpy(j.account, "acct-a");
    strcpy(j.training_file, "file-x");
    strcpy(j.method, "supervised");
    strcpy(j.precision, "16-bit");
    strcpy(j.goal, "lowest_cost");
    strcpy(j.adapter, "lora");
    j.status = JOB_RUNNING;
    assert_int_equal(store_job_insert(s, &j, NULL), ERR_OK);
    assert_int_equal(store_job_update(s, j.id, NULL, add_attempt, (void *)attempt), ERR_OK);
    strcpy(id, j.id);
}

static void a_deadlocked_update_runs_again(void **state)
{
    (void)state;
    assert_non_null(fixture_pg_dir());
    char url[400], err[200];
    assert_int_equal(fixture_store_url("/tmp", "retry", url, sizeof url), 0);
    struct store *s;
    assert_int_equal(store_open(url, &s, err, sizeof err), ERR_OK);
    struct store_file f = {0};
    strcpy(f.id, "file-x");
    strcpy(f.account, "acct-a");
    assert_int_equal(store_file_insert(s, &f), ERR_OK);
    char ja[IDS_MAX], jb[IDS_MAX];
    make_job(s, ja, "att-a");
    make_job(s, jb, "att-b");

    struct rendezvous r = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    struct side a = {.s = s, .job = ja, .mine = "att-a", .their_job = jb, .theirs = "att-b",
                     .r = &r};
    struct side b = {.s = s, .job = jb, .mine = "att-b", .their_job = ja, .theirs = "att-a",
                     .r = &r};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, update, &a);
    pthread_create(&tb, NULL, update, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.result, ERR_OK);
    assert_int_equal(b.result, ERR_OK);
    int ra = atomic_load(&a.runs), rb = atomic_load(&b.runs);
    /* At least one of them lost the deadlock and ran again. Under the
     * sanitizers' timing a third run was seen too (the loser's second run
     * lost once more while the winner finished): that is the same
     * promise kept. What must hold is that both succeed and each side's
     * last run is the one that committed. */
    assert_true(ra >= 1 && rb >= 1 && ra + rb >= 3);
    struct store_job got;
    assert_int_equal(store_job_get(s, NULL, ja, &got), ERR_OK);
    char want[32];
    snprintf(want, sizeof want, "run %d", ra);
    assert_string_equal(got.message, want);
    assert_int_equal(got.fence, 1); /* the first run's increment was rolled back */
    assert_int_equal(store_job_get(s, NULL, jb, &got), ERR_OK);
    snprintf(want, sizeof want, "run %d", rb);
    assert_string_equal(got.message, want);
    assert_int_equal(got.fence, 1);
    store_close(s);
    fixture_store_drop("retry");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_deadlocked_update_runs_again),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
