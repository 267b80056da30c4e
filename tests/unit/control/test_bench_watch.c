/* test_bench_watch.c - a pool's bench job as the engine judges it
 * (bench_watch.h): a ghost a restarted Slurm controller lists RUNNING
 * without its script ever starting is cancelled within BENCH_START_MS; a
 * bench that really runs is left alone until BENCH_RUN_MS after its start;
 * a queued one until BENCH_TIMEOUT_MS after its submission. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "control/bench_watch.h"

#define T0 1700000000000LL /* the submission */
#define S 1000LL

static enum bench_verdict judge(int64_t now, int64_t running, int64_t marked, char *why,
                                size_t cap)
{
    struct bench_look l = {
        .now_ms = now, .wanted = true, .since_ms = T0, .running_since_ms = running,
        .marked_ms = marked,
    };
    return bench_judge(&l, why, cap);
}

static void a_running_bench_without_its_start_mark_is_a_ghost_within_a_minute(void **state)
{
    (void)state;
    char why[256];
    /* listed RUNNING 2 s after its submission, its script never ran */
    int64_t running = T0 + 2 * S;
    assert_int_equal(judge(running + 30 * S, running, 0, why, sizeof why), BENCH_WAIT);
    assert_string_equal(why, "");
    assert_int_equal(judge(running + 59 * S, running, 0, NULL, 0), BENCH_WAIT);
    assert_int_equal(judge(running + 60 * S, running, 0, why, sizeof why), BENCH_GHOST);
    assert_non_null(strstr(why, "listed running for 60 s"));
    assert_non_null(strstr(why, "never started"));
    /* well before the 10 minutes the old rule waited */
    assert_true(BENCH_START_MS <= 90 * S && BENCH_START_MS < BENCH_TIMEOUT_MS);
}

static void a_bench_that_started_is_not_cancelled_early(void **state)
{
    (void)state;
    char why[256];
    int64_t running = T0 + 2 * S, marked = T0 + 4 * S;
    /* still working long after a ghost would have been judged */
    assert_int_equal(judge(running + 2 * 60 * S, running, marked, why, sizeof why), BENCH_WAIT);
    assert_int_equal(judge(marked + BENCH_RUN_MS - S, running, marked, why, sizeof why),
                     BENCH_WAIT);
    /* a slow node: the mark seen 50 s after RUNNING, then judged by it */
    assert_int_equal(judge(running + 3 * 60 * S, running, running + 50 * S, why, sizeof why),
                     BENCH_WAIT);
    /* started, and no speed 5 minutes later: stalled */
    assert_int_equal(judge(marked + BENCH_RUN_MS, running, marked, why, sizeof why),
                     BENCH_STALLED);
    assert_non_null(strstr(why, "printed no speed"));
}

static void a_queued_bench_waits_until_its_time_limit(void **state)
{
    (void)state;
    char why[256];
    /* pending: never RUNNING, so never a ghost */
    assert_int_equal(judge(T0 + 9 * 60 * S, 0, 0, why, sizeof why), BENCH_WAIT);
    assert_int_equal(judge(T0 + BENCH_TIMEOUT_MS + 1, 0, 0, why, sizeof why), BENCH_TOO_LONG);
    assert_non_null(strstr(why, "longer than 10 min"));
}

static void a_bench_no_one_wants_is_cancelled_at_once(void **state)
{
    (void)state;
    char why[256];
    /* the pool's speed measured, then a restarted controller lists the
     * bench RUNNING again: cancelled at the first look, mark or not */
    struct bench_look l = {
        .now_ms = T0 + 5 * S, .wanted = false, .since_ms = T0, .running_since_ms = T0 + S,
        .marked_ms = T0 + 2 * S,
    };
    assert_int_equal(bench_judge(&l, why, sizeof why), BENCH_UNWANTED);
    assert_non_null(strstr(why, "no bench is wanted"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_running_bench_without_its_start_mark_is_a_ghost_within_a_minute),
        cmocka_unit_test(a_bench_that_started_is_not_cancelled_early),
        cmocka_unit_test(a_queued_bench_waits_until_its_time_limit),
        cmocka_unit_test(a_bench_no_one_wants_is_cancelled_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
