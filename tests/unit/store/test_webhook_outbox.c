/* test_webhook_outbox.c - webhooks and their outbox in the store: account
 * isolation, deliveries queued only in the transaction of the job change
 * that raised them (none when it rolls back) and only for the webhooks that
 * want the type, handed out one per (webhook, job) in order, and gone with
 * their webhook, in turns between accounts and endpoints; the per-account cap holds when many insert at once. Runs twice under CTest: on SQLite and on PostgreSQL
 * (ALALLO_TEST_PG; store_fixture.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store.h"
#include "store_fixture.h"

struct fixture {
    char dir[256];
    char path[400];
    struct store *s;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/alallo-outbox-XXXXXX");
    if (!mkdtemp(f->dir) || fixture_store_url(f->dir, "outbox", f->path, sizeof f->path))
        return -1;
    char err[200];
    if (store_open(f->path, &f->s, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    struct store_file fl = {0};
    strcpy(fl.id, "file-x");
    strcpy(fl.account, "acct-a");
    strcpy(fl.filename, "train.jsonl");
    strcpy(fl.purpose, "fine-tune");
    if (store_file_insert(f->s, &fl))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    store_close(f->s);
    fixture_store_drop("outbox");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

static void add_webhook(struct store *s, const char *id, const char *account, const char *events)
{
    struct store_webhook w = {0};
    strcpy(w.id, id);
    strcpy(w.account, account);
    snprintf(w.url, sizeof w.url, "http://127.0.0.1:9/%s", id);
    strcpy(w.events, events);
    strcpy(w.secret, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    w.created_ms = 1000;
    assert_int_equal(store_webhook_insert(s, &w, 20), ERR_OK);
}

static void add_job_of(struct store *s, const char *account, const char *file, char id[IDS_MAX])
{
    struct store_job j = {0};
    ids_make(j.id, sizeof j.id, "ftjob-");
    strcpy(j.account, account);
    strcpy(j.model, "tiny");
    strcpy(j.training_file, file);
    strcpy(j.method, "supervised");
    strcpy(j.precision, "16-bit");
    strcpy(j.goal, "lowest_cost");
    strcpy(j.adapter, "lora");
    j.n_epochs = 1;
    j.batch_size = 4;
    j.max_steps = 10;
    j.status = JOB_QUEUED;
    assert_int_equal(store_job_insert(s, &j, NULL), ERR_OK);
    strcpy(id, j.id);
}

static void add_job(struct store *s, char id[IDS_MAX]) { add_job_of(s, "acct-a", "file-x", id); }

struct raise {
    const char *type;
    int64_t at_ms;
    enum alallo_err result; /* what the callback answers after queueing */
};

static enum alallo_err raise_cb(struct store_job *j, struct store_attempt *a,
                                struct store_writes *w, void *ctx)
{
    (void)a;
    struct raise *r = ctx;
    struct store_webhook_event ev = {.created_ms = r->at_ms};
    ids_make(ev.event_id, sizeof ev.event_id, "evt_");
    strcpy(ev.type, r->type);
    snprintf(ev.body, sizeof ev.body, "{\"type\":\"%s\",\"data\":{\"id\":\"%s\"}}", r->type, j->id);
    enum alallo_err e = store_writes_webhook_event(w, &ev);
    return e ? e : r->result;
}

static void webhooks_belong_to_their_account(void **state)
{
    struct fixture *f = *state;
    add_webhook(f->s, "wh-1", "acct-a", "");
    add_webhook(f->s, "wh-2", "acct-a", "fine_tuning.job.succeeded");
    add_webhook(f->s, "wh-3", "acct-b", "");
    struct store_webhook out[4];
    int n = 0;
    assert_int_equal(store_webhook_list(f->s, "acct-a", out, 4, &n), ERR_OK);
    assert_int_equal(n, 2);
    assert_string_equal(out[0].id, "wh-1");
    assert_string_equal(out[1].events, "fine_tuning.job.succeeded");
    assert_string_equal(out[1].secret, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    assert_int_equal(store_webhook_get(f->s, "acct-b", "wh-1", &out[0]), ERR_NOT_FOUND);
    assert_int_equal(store_webhook_get(f->s, NULL, "wh-3", &out[0]), ERR_OK);
    assert_int_equal(store_webhook_delete(f->s, "acct-b", "wh-1"), ERR_NOT_FOUND);
    assert_int_equal(store_webhook_delete(f->s, "acct-b", "wh-3"), ERR_OK);
    assert_int_equal(store_webhook_delete(f->s, "acct-b", "wh-3"), ERR_NOT_FOUND);
    /* too long a value is refused, not cut */
    struct store_webhook w = {0};
    strcpy(w.id, "wh-4");
    strcpy(w.account, "acct-a");
    memset(w.url, 'x', sizeof w.url);
    assert_int_equal(store_webhook_insert(f->s, &w, 20), ERR_INVALID);
}

#define RACERS 8
#define TRIES 10
#define CAP 5

struct racer {
    struct store *s;
    int index, accepted, refused;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    for (int i = 0; i < TRIES; i++) {
        struct store_webhook w = {0};
        snprintf(w.id, sizeof w.id, "wh-r%d-%d", r->index, i);
        strcpy(w.account, "acct-race");
        strcpy(w.url, "http://127.0.0.1:9/h");
        strcpy(w.secret, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        enum alallo_err e = store_webhook_insert(r->s, &w, CAP);
        r->accepted += e == ERR_OK;
        r->refused += e == ERR_CONFLICT;
    }
    return NULL;
}

/* The count and the insert are one step: RACERS threads inserting at once
 * get exactly CAP in, every other insert refused with ERR_CONFLICT. */
static void the_cap_holds_under_concurrent_inserts(void **state)
{
    struct fixture *f = *state;
    add_webhook(f->s, "wh-other", "acct-other", ""); /* another account's do not count */
    struct racer r[RACERS] = {0};
    pthread_t t[RACERS];
    for (int i = 0; i < RACERS; i++) {
        r[i].s = f->s;
        r[i].index = i;
        assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    int accepted = 0, refused = 0;
    for (int i = 0; i < RACERS; i++) {
        pthread_join(t[i], NULL);
        accepted += r[i].accepted;
        refused += r[i].refused;
    }
    assert_int_equal(accepted, CAP);
    assert_int_equal(refused, RACERS * TRIES - CAP);
    struct store_webhook out[CAP + 1];
    int n = 0;
    assert_int_equal(store_webhook_list(f->s, "acct-race", out, CAP + 1, &n), ERR_OK);
    assert_int_equal(n, CAP);
}

static void deliveries_are_queued_with_the_change_and_handed_out_in_order(void **state)
{
    struct fixture *f = *state;
    add_webhook(f->s, "wh-1", "acct-a", "");
    add_webhook(f->s, "wh-2", "acct-a", "fine_tuning.job.succeeded");
    add_webhook(f->s, "wh-3", "acct-b", "");
    char j1[IDS_MAX], j2[IDS_MAX];
    add_job(f->s, j1);
    add_job(f->s, j2);

    /* rolled back: nothing queued */
    struct raise r = {"alallo.fine_tuning.job.status", 100, ERR_CONFLICT};
    assert_int_equal(store_job_update(f->s, j1, NULL, raise_cb, &r), ERR_CONFLICT);
    struct store_delivery d[8];
    int n = -1;
    assert_int_equal(store_delivery_due(f->s, 1000000, d, 8, &n), ERR_OK);
    assert_int_equal(n, 0);

    /* j1: status then succeeded; j2: status */
    r.result = ERR_OK;
    assert_int_equal(store_job_update(f->s, j1, NULL, raise_cb, &r), ERR_OK);
    r.type = "fine_tuning.job.succeeded";
    r.at_ms = 200;
    assert_int_equal(store_job_update(f->s, j1, NULL, raise_cb, &r), ERR_OK);
    r.type = "alallo.fine_tuning.job.status";
    r.at_ms = 300;
    assert_int_equal(store_job_update(f->s, j2, NULL, raise_cb, &r), ERR_OK);

    /* wh-1 has 3, wh-2 only the succeeded one, wh-3 (another account) none */
    assert_int_equal(store_delivery_list(f->s, "wh-1", d, 8, &n), ERR_OK);
    assert_int_equal(n, 3);
    assert_string_equal(d[0].job, j2); /* newest first */
    assert_int_equal(d[2].state, STORE_DELIVERY_PENDING);
    assert_int_equal(d[2].created_ms, 100);
    assert_int_equal(store_delivery_list(f->s, "wh-2", d, 8, &n), ERR_OK);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].type, "fine_tuning.job.succeeded");
    assert_int_equal(store_delivery_list(f->s, "wh-3", d, 8, &n), ERR_OK);
    assert_int_equal(n, 0);

    /* due: the oldest of each (webhook, job) only, once its time came */
    assert_int_equal(store_delivery_due(f->s, 150, d, 8, &n), ERR_OK);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].webhook, "wh-1");
    assert_string_equal(d[0].type, "alallo.fine_tuning.job.status");
    assert_int_equal(store_delivery_due(f->s, 1000, d, 8, &n), ERR_OK);
    assert_int_equal(n, 3); /* wh-1/j1 status, wh-2/j1 succeeded, wh-1/j2 status */
    assert_string_equal(d[0].job, j1);
    assert_string_equal(d[0].webhook, "wh-1");
    assert_string_equal(d[1].webhook, "wh-2");
    assert_string_equal(d[2].job, j2);

    /* a failed try waits; j1's next event at wh-1 waits behind it */
    struct store_delivery first = d[0];
    first.attempts = 1;
    first.last_status = 500;
    strcpy(first.last_answer, "down");
    first.next_ms = 5000;
    assert_int_equal(store_delivery_record(f->s, &first), ERR_OK);
    assert_int_equal(store_delivery_due(f->s, 1000, d, 8, &n), ERR_OK);
    assert_int_equal(n, 2);
    assert_string_equal(d[0].webhook, "wh-2");
    assert_string_equal(d[1].job, j2);

    /* delivered: the next one of j1 at wh-1 is due */
    first.attempts = 2;
    first.last_status = 200;
    strcpy(first.last_answer, "ok");
    first.state = STORE_DELIVERY_DONE;
    first.delivered_ms = 5001;
    assert_int_equal(store_delivery_record(f->s, &first), ERR_OK);
    assert_int_equal(store_delivery_due(f->s, 6000, d, 8, &n), ERR_OK);
    assert_int_equal(n, 3);
    assert_string_equal(d[0].type, "fine_tuning.job.succeeded");
    assert_string_equal(d[0].webhook, "wh-1");
    assert_string_equal(d[1].webhook, "wh-2");
    assert_int_equal(store_delivery_list(f->s, "wh-1", d, 8, &n), ERR_OK);
    assert_int_equal(d[2].attempts, 2);
    assert_int_equal(d[2].last_status, 200);
    assert_string_equal(d[2].last_answer, "ok");
    assert_int_equal(d[2].state, STORE_DELIVERY_DONE);
    assert_int_equal(d[2].delivered_ms, 5001);

    /* given up also unblocks; deleting a webhook drops its deliveries */
    struct store_delivery gone = d[1];
    gone.state = STORE_DELIVERY_GAVE_UP;
    assert_int_equal(store_delivery_record(f->s, &gone), ERR_OK);
    assert_int_equal(store_webhook_delete(f->s, "acct-a", "wh-1"), ERR_OK);
    assert_int_equal(store_delivery_list(f->s, "wh-1", d, 8, &n), ERR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(store_delivery_due(f->s, 6000, d, 8, &n), ERR_OK);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].webhook, "wh-2");
    gone.seq = 999999;
    assert_int_equal(store_delivery_record(f->s, &gone), ERR_NOT_FOUND);
}

/* The job hook runs in the update's transaction, after the callback, with
 * the status from before it. */
static enum alallo_err to_running(struct store_job *j, struct store_attempt *a,
                                  struct store_writes *w, void *ctx)
{
    (void)a;
    (void)w;
    (void)ctx;
    j->status = JOB_RUNNING;
    return ERR_OK;
}

static enum alallo_err hook(enum job_status before, const struct store_job *job,
                            struct store_writes *w, void *ctx)
{
    int *calls = ctx;
    ++*calls;
    if (before == job->status)
        return ERR_OK;
    struct raise r = {"alallo.fine_tuning.job.status", 10, ERR_OK};
    struct store_job copy = *job;
    return raise_cb(&copy, NULL, w, &r);
}

/* One account's backlog does not hold back another's first delivery, nor
 * one endpoint's backlog the account's other endpoints: due deliveries
 * come in turns, first between accounts, then between endpoints. */
static void due_deliveries_take_turns_between_accounts_and_endpoints(void **state)
{
    struct fixture *f = *state;
    add_webhook(f->s, "wh-a1", "acct-a", "");
    add_webhook(f->s, "wh-a2", "acct-a", "fine_tuning.job.cancelled");
    add_webhook(f->s, "wh-b", "acct-b", "");
    char a[4][IDS_MAX], b[IDS_MAX];
    struct raise r = {"alallo.fine_tuning.job.status", 100, ERR_OK};
    for (int i = 0; i < 3; i++) { /* wh-a1's backlog: the oldest three */
        add_job(f->s, a[i]);
        assert_int_equal(store_job_update(f->s, a[i], NULL, raise_cb, &r), ERR_OK);
    }
    r.type = "fine_tuning.job.cancelled"; /* then one at wh-a1 and wh-a2 */
    add_job(f->s, a[3]);
    assert_int_equal(store_job_update(f->s, a[3], NULL, raise_cb, &r), ERR_OK);
    r.type = "alallo.fine_tuning.job.status"; /* the newest: acct-b's */
    struct store_file fl = {0};
    strcpy(fl.id, "file-y");
    strcpy(fl.account, "acct-b");
    strcpy(fl.filename, "train.jsonl");
    strcpy(fl.purpose, "fine-tune");
    assert_int_equal(store_file_insert(f->s, &fl), ERR_OK);
    add_job_of(f->s, "acct-b", "file-y", b);
    assert_int_equal(store_job_update(f->s, b, NULL, raise_cb, &r), ERR_OK);

    struct store_delivery d[8];
    int n = 0;
    assert_int_equal(store_delivery_due(f->s, 1000, d, 3, &n), ERR_OK);
    assert_int_equal(n, 3);
    assert_string_equal(d[0].webhook, "wh-a1"); /* acct-a's oldest */
    assert_string_equal(d[0].job, a[0]);
    assert_string_equal(d[1].webhook, "wh-b"); /* acct-b's turn */
    assert_string_equal(d[2].webhook, "wh-a2"); /* acct-a's other endpoint */
    assert_int_equal(store_delivery_due(f->s, 1000, d, 8, &n), ERR_OK);
    assert_int_equal(n, 6); /* all due, the rest of wh-a1's backlog last */
    assert_string_equal(d[3].job, a[1]);
    assert_string_equal(d[4].job, a[2]);
    assert_string_equal(d[5].job, a[3]);
}

static void the_job_hook_queues_in_the_same_transaction(void **state)
{
    struct fixture *f = *state;
    add_webhook(f->s, "wh-1", "acct-a", "");
    char j1[IDS_MAX];
    add_job(f->s, j1);
    int calls = 0;
    store_set_job_hook(f->s, hook, &calls);
    struct raise r = {"alallo.fine_tuning.job.checkpoint", 5, ERR_OK};
    assert_int_equal(store_job_update(f->s, j1, NULL, raise_cb, &r), ERR_OK);
    assert_int_equal(store_job_update(f->s, j1, NULL, to_running, NULL), ERR_OK);
    assert_int_equal(calls, 2);
    struct store_delivery d[4];
    int n = 0;
    assert_int_equal(store_delivery_list(f->s, "wh-1", d, 4, &n), ERR_OK);
    assert_int_equal(n, 2);
    assert_string_equal(d[0].type, "alallo.fine_tuning.job.status");
    assert_string_equal(d[1].type, "alallo.fine_tuning.job.checkpoint");
    store_set_job_hook(f->s, NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(webhooks_belong_to_their_account, setup, teardown),
        cmocka_unit_test_setup_teardown(the_cap_holds_under_concurrent_inserts, setup, teardown),
        cmocka_unit_test_setup_teardown(
            deliveries_are_queued_with_the_change_and_handed_out_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(due_deliveries_take_turns_between_accounts_and_endpoints,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(the_job_hook_queues_in_the_same_transaction, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
