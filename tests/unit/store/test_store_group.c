/* test_store_group.c - the group-commit queue (store/store_group.h) on its
 * own, with a commit function that records what it is given: under many
 * threads every caller returns once its job was in a committed batch, with
 * the result the commit set, and a slot never runs two commits at once.
 * (The stores' own tests run it with their real commit functions.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store_group.h"

#define THREADS 32
#define EACH 100
#define SLOTS 4

static struct store_group group;
static atomic_int in_commit[SLOTS];
static atomic_long committed, batches, overlaps;

/* Commits the batch "slowly" (so that others queue behind it), gives each
 * job a seq, and refuses the jobs whose seed is odd. */
static void commit(struct store_pending *batch, int slot, void *ctx)
{
    (void)ctx;
    if (atomic_fetch_add(&in_commit[slot], 1) != 0)
        atomic_fetch_add(&overlaps, 1);
    usleep(300);
    long n = 0;
    for (struct store_pending *p = batch; p; p = p->next, n++) {
        p->job->seq = 1000 + p->job->seed;
        p->result = p->job->seed % 2 ? ERR_CONFLICT : ERR_OK;
        if (p->result)
            strcpy(p->error, "store: insert job: refused");
    }
    atomic_fetch_add(&committed, n);
    atomic_fetch_add(&batches, 1);
    atomic_fetch_sub(&in_commit[slot], 1);
}

static void *inserter(void *arg)
{
    long base = (long)(intptr_t)arg, bad = 0;
    for (long i = 0; i < EACH; i++) {
        struct store_job *j = calloc(1, sizeof *j);
        j->seed = base * EACH + i;
        enum alallo_err e = store_group_insert(&group, j, NULL, commit, NULL);
        if (j->seq != 1000 + j->seed || e != (j->seed % 2 ? ERR_CONFLICT : ERR_OK))
            bad++;
        free(j);
    }
    return (void *)(intptr_t)bad;
}

static void every_caller_gets_its_own_result(void **state)
{
    (void)state;
    store_group_init(&group, SLOTS);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, inserter, (void *)(intptr_t)i), 0);
    long bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)(intptr_t)r;
    }
    store_group_destroy(&group);
    assert_int_equal(bad, 0);
    assert_int_equal(atomic_load(&committed), THREADS * EACH);
    assert_int_equal(atomic_load(&overlaps), 0);
    /* Jobs shared commits (32 callers queue behind 4 slots of 0.3 ms). */
    assert_true(atomic_load(&batches) < THREADS * EACH);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_caller_gets_its_own_result),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
