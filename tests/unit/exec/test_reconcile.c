/* test_reconcile.c - reconciliation, row by row of the table in
 * exec/reconcile.h: the store's open attempts against the engine's jobs,
 * matched by tag, never by the engine's job id. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "exec/reconcile.h"

#define NOW 1000000000LL            /* when the list was taken           */
#define LONG_AGO (NOW - 60 * 1000)  /* submitted a minute before          */

static struct exec_open_attempt attempt(const char *id, enum engine_state st,
                                        const char *engine_id, bool finished, int64_t at)
{
    struct exec_open_attempt a;
    memset(&a, 0, sizeof a);
    snprintf(a.attempt_id, sizeof a.attempt_id, "%s", id);
    a.state = st;
    snprintf(a.engine_id, sizeof a.engine_id, "%s", engine_id);
    a.finished = finished;
    a.submitted_ms = at;
    return a;
}

static struct exec_job job(const char *id, const char *attempt_id, enum exec_state st,
                           const char *reason)
{
    struct exec_job j;
    memset(&j, 0, sizeof j);
    snprintf(j.id, sizeof j.id, "%s", id);
    snprintf(j.tag, sizeof j.tag, "alallo-%s", attempt_id);
    j.state = st;
    snprintf(j.raw_state, sizeof j.raw_state, "%s",
             st == EXEC_PENDING ? "PENDING" : st == EXEC_RUNNING ? "RUNNING" : "FAILED");
    snprintf(j.reason, sizeof j.reason, "%s", reason);
    if (st != EXEC_PENDING)
        snprintf(j.node, sizeof j.node, "node7");
    return j;
}

/* Reconciles one attempt (or none) against jobs; returns the actions. */
static int run(const struct exec_open_attempt *a, int na, const struct exec_job *j, int nj,
               struct exec_action *out)
{
    int n = -1;
    exec_reconcile(a, na, j, nj, NOW, out, &n);
    assert_true(n >= 0 && n <= na + nj);
    return n;
}

static void submitting_and_no_job_is_resubmitted(void **state)
{
    (void)state;
    struct exec_open_attempt a = attempt("att-1", ENGINE_STATE_SUBMITTING, "", false, LONG_AGO);
    struct exec_job other = job("5", "att-2", EXEC_RUNNING, ""); /* an orphan, see below */
    struct exec_action act[4];
    int n = run(&a, 1, &other, 1, act);
    assert_int_equal(n, 2);
    assert_int_equal(act[0].kind, EXEC_ACT_RESUBMIT);
    assert_string_equal(act[0].attempt_id, "att-1");
    assert_string_equal(act[0].tag, "alallo-att-1");
    assert_string_equal(exec_action_name(act[0].kind), "resubmit");
}

static void submitting_and_a_pending_job_records_the_id(void **state)
{
    (void)state;
    struct exec_open_attempt a = attempt("att-1", ENGINE_STATE_SUBMITTING, "", false, LONG_AGO);
    struct exec_job j = job("17", "att-1", EXEC_PENDING, "Waiting for free GPUs (Slurm: Resources)");
    struct exec_action act[2];
    int n = run(&a, 1, &j, 1, act);
    assert_int_equal(n, 1);
    assert_int_equal(act[0].kind, EXEC_ACT_UPDATE);
    assert_string_equal(act[0].engine_id, "17");
    assert_int_equal(act[0].state, ENGINE_STATE_PENDING);
    assert_string_equal(act[0].reason, "Waiting for free GPUs (Slurm: Resources)");
}

static void pending_that_now_runs_is_updated(void **state)
{
    (void)state;
    struct exec_open_attempt a = attempt("att-1", ENGINE_STATE_PENDING, "17", false, LONG_AGO);
    struct exec_job j = job("17", "att-1", EXEC_RUNNING, "");
    struct exec_action act[2];
    assert_int_equal(run(&a, 1, &j, 1, act), 1);
    assert_int_equal(act[0].kind, EXEC_ACT_UPDATE);
    assert_int_equal(act[0].state, ENGINE_STATE_RUNNING);
    assert_string_equal(act[0].node, "node7");
    assert_string_equal(act[0].reason, "");
}

static void as_recorded_is_kept(void **state)
{
    (void)state;
    struct exec_open_attempt a[2] = {
        attempt("att-1", ENGINE_STATE_PENDING, "17", false, LONG_AGO),
        attempt("att-2", ENGINE_STATE_RUNNING, "18", false, LONG_AGO),
    };
    struct exec_job j[2] = {job("17", "att-1", EXEC_PENDING, "Waiting (Slurm: Priority)"),
                            job("18", "att-2", EXEC_RUNNING, "")};
    struct exec_action act[4];
    assert_int_equal(run(a, 2, j, 2, act), 2);
    assert_int_equal(act[0].kind, EXEC_ACT_KEEP);
    assert_string_equal(act[0].reason, "Waiting (Slurm: Priority)"); /* for the message */
    assert_int_equal(act[1].kind, EXEC_ACT_KEEP);
    assert_int_equal(act[1].state, ENGINE_STATE_RUNNING);
}

static void a_running_attempt_is_not_sent_back_to_pending(void **state)
{
    (void)state;
    /* The runner was heard from while Slurm still says PENDING (CONFIGURING). */
    struct exec_open_attempt a = attempt("att-1", ENGINE_STATE_RUNNING, "17", false, LONG_AGO);
    struct exec_job j = job("17", "att-1", EXEC_PENDING, "x");
    struct exec_action act[2];
    assert_int_equal(run(&a, 1, &j, 1, act), 1);
    assert_int_equal(act[0].kind, EXEC_ACT_KEEP);
    assert_int_equal(act[0].state, ENGINE_STATE_RUNNING);
}

static void a_new_job_id_for_the_same_tag_is_recorded_not_trusted(void **state)
{
    (void)state;
    /* The store holds id 17; the engine lists the tag under id 40 (the
     * submit was retried): the tag decides, the new id is recorded. */
    struct exec_open_attempt a = attempt("att-1", ENGINE_STATE_PENDING, "17", false, LONG_AGO);
    struct exec_job j[2] = {job("17", "att-9", EXEC_RUNNING, ""),
                            job("40", "att-1", EXEC_PENDING, "w")};
    struct exec_action act[4];
    int n = run(&a, 1, j, 2, act);
    assert_int_equal(act[0].kind, EXEC_ACT_UPDATE);
    assert_string_equal(act[0].engine_id, "40");
    /* Job 17, the same id as the store's but another tag, is an orphan. */
    assert_int_equal(n, 2);
    assert_int_equal(act[1].kind, EXEC_ACT_CANCEL);
    assert_string_equal(act[1].tag, "alallo-att-9");
}

static void ended_without_a_finish_is_ended_with_the_reason(void **state)
{
    (void)state;
    struct exec_open_attempt a = attempt("att-1", ENGINE_STATE_RUNNING, "17", false, LONG_AGO);
    struct exec_job j = job("17", "att-1", EXEC_ENDED, "The node running the Slurm job failed "
                                                       "(Slurm: NODE_FAIL)");
    struct exec_action act[2];
    assert_int_equal(run(&a, 1, &j, 1, act), 1);
    assert_int_equal(act[0].kind, EXEC_ACT_END);
    assert_string_equal(act[0].reason, "The node running the Slurm job failed (Slurm: NODE_FAIL)");
    assert_string_equal(act[0].engine_id, "17");
    /* A job ended while the store still says submitting: ended too. */
    a = attempt("att-1", ENGINE_STATE_SUBMITTING, "", false, LONG_AGO);
    assert_int_equal(run(&a, 1, &j, 1, act), 1);
    assert_int_equal(act[0].kind, EXEC_ACT_END);
    /* An ended job without words gets the general ones. */
    j.reason[0] = '\0';
    assert_int_equal(run(&a, 1, &j, 1, act), 1);
    assert_non_null(strstr(act[0].reason, "ended without the attempt reporting"));
}

static void vanished_is_ended(void **state)
{
    (void)state;
    struct exec_open_attempt a[2] = {
        attempt("att-1", ENGINE_STATE_PENDING, "17", false, LONG_AGO),
        attempt("att-2", ENGINE_STATE_RUNNING, "18", false, LONG_AGO),
    };
    struct exec_action act[2];
    assert_int_equal(run(a, 2, NULL, 0, act), 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(act[i].kind, EXEC_ACT_END);
        assert_non_null(strstr(act[i].reason, "vanished"));
    }
}

static void with_a_finish_the_finish_closes_it(void **state)
{
    (void)state;
    struct exec_open_attempt a = attempt("att-1", ENGINE_STATE_RUNNING, "17", true, LONG_AGO);
    struct exec_job j = job("17", "att-1", EXEC_ENDED, "x");
    struct exec_action act[2];
    assert_int_equal(run(&a, 1, &j, 1, act), 1);
    assert_int_equal(act[0].kind, EXEC_ACT_KEEP);
    assert_int_equal(run(&a, 1, NULL, 0, act), 1); /* vanished too */
    assert_int_equal(act[0].kind, EXEC_ACT_KEEP);
}

static void too_new_to_judge_is_kept(void **state)
{
    (void)state;
    /* Recorded after the list was taken: the list cannot show it yet. */
    struct exec_open_attempt a[2] = {
        attempt("att-1", ENGINE_STATE_SUBMITTING, "", false, NOW + 5),
        attempt("att-2", ENGINE_STATE_PENDING, "19", false, NOW - 100),
    };
    struct exec_action act[2];
    assert_int_equal(run(a, 2, NULL, 0, act), 2);
    assert_int_equal(act[0].kind, EXEC_ACT_KEEP);
    assert_int_equal(act[1].kind, EXEC_ACT_KEEP);
    /* Older than the slack: judged. */
    a[1].submitted_ms = NOW - EXEC_RECONCILE_SLACK_MS - 1;
    assert_int_equal(run(a, 2, NULL, 0, act), 2);
    assert_int_equal(act[1].kind, EXEC_ACT_END);
}

static void jobs_no_open_attempt_owns_are_cancelled_once(void **state)
{
    (void)state;
    struct exec_job j[5] = {
        job("30", "att-orphan", EXEC_PENDING, "w"),
        job("31", "att-orphan", EXEC_RUNNING, ""),  /* same tag: one cancel */
        job("32", "att-done", EXEC_ENDED, "x"),      /* ended: nothing to cancel */
        job("33", "att-open", EXEC_RUNNING, ""),
        job("34", "att-ghost", EXEC_RUNNING, ""),
    };
    snprintf(j[4].tag, sizeof j[4].tag, "alallo-bad/tag"); /* not a tag of ours */
    struct exec_open_attempt a = attempt("att-open", ENGINE_STATE_RUNNING, "33", false, LONG_AGO);
    struct exec_action act[6];
    int n = run(&a, 1, j, 5, act);
    assert_int_equal(n, 2);
    assert_int_equal(act[0].kind, EXEC_ACT_KEEP);
    assert_int_equal(act[1].kind, EXEC_ACT_CANCEL);
    assert_string_equal(act[1].tag, "alallo-att-orphan");
    assert_string_equal(act[1].attempt_id, "att-orphan");
    assert_string_equal(exec_action_name(act[1].kind), "cancel");
}

/* A pool's bench job (alallo-bench-POOL) is the engine's, not an
 * attempt's: reconciliation never cancels it as an orphan. */
static void a_bench_job_is_left_alone(void **state)
{
    (void)state;
    char tag[EXEC_TAG_MAX], id[EXEC_TAG_MAX];
    assert_true(exec_bench_tag_for("a100-spot", tag));
    assert_string_equal(tag, "alallo-bench-a100-spot");
    assert_true(exec_bench_tag_for("gpu.big_1", tag));
    assert_false(exec_bench_tag_for("bad/pool", tag));
    assert_false(exec_attempt_of("alallo-bench-a100-spot", id, sizeof id));
    assert_true(exec_tag_is_alallo("alallo-bench-gpu.big_1"));
    assert_true(exec_tag_is_alallo("alallo-att-1"));
    assert_false(exec_tag_is_alallo("alallo-bench-"));
    assert_false(exec_tag_is_alallo("other-att-1"));
    struct exec_job j = job("40", "bench-a100-spot", EXEC_RUNNING, "");
    struct exec_action act[1];
    assert_int_equal(run(NULL, 0, &j, 1, act), 0);
}

static void several_jobs_of_one_tag_the_furthest_along_counts(void **state)
{
    (void)state;
    struct exec_open_attempt a = attempt("att-1", ENGINE_STATE_PENDING, "17", false, LONG_AGO);
    struct exec_job j[3] = {job("16", "att-1", EXEC_ENDED, "old"),
                            job("17", "att-1", EXEC_PENDING, "w"),
                            job("18", "att-1", EXEC_RUNNING, "")};
    struct exec_action act[4];
    assert_int_equal(run(&a, 1, j, 3, act), 1);
    assert_int_equal(act[0].kind, EXEC_ACT_UPDATE);
    assert_string_equal(act[0].engine_id, "18");
    assert_int_equal(act[0].state, ENGINE_STATE_RUNNING);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(submitting_and_no_job_is_resubmitted),
        cmocka_unit_test(submitting_and_a_pending_job_records_the_id),
        cmocka_unit_test(pending_that_now_runs_is_updated),
        cmocka_unit_test(as_recorded_is_kept),
        cmocka_unit_test(a_running_attempt_is_not_sent_back_to_pending),
        cmocka_unit_test(a_new_job_id_for_the_same_tag_is_recorded_not_trusted),
        cmocka_unit_test(ended_without_a_finish_is_ended_with_the_reason),
        cmocka_unit_test(vanished_is_ended),
        cmocka_unit_test(with_a_finish_the_finish_closes_it),
        cmocka_unit_test(too_new_to_judge_is_kept),
        cmocka_unit_test(jobs_no_open_attempt_owns_are_cancelled_once),
        cmocka_unit_test(several_jobs_of_one_tag_the_furthest_along_counts),
        cmocka_unit_test(a_bench_job_is_left_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
