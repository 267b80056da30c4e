/* test_sim.c - the fleet simulation: deterministic per seed, no invariant
 * broken, the targets met on a moderate run, limits and bursts, and the
 * `alallo sim` command. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "sched/sim.h"
#include "sched_test.h"

static struct sim_result run(long jobs, int workers, uint64_t seed)
{
    struct sim_config c;
    sim_config_default(&c);
    c.jobs = jobs;
    c.workers = workers;
    c.seed = seed;
    struct sim_result r;
    char why[160];
    assert_int_equal(sim_run(&c, &r, why, sizeof why), ERR_OK);
    return r;
}

static void json(const struct sim_result *r, char *buf, size_t cap)
{
    assert_true(sim_result_json(r, false, buf, cap) > 0);
}

static void same_seed_same_json(void **state)
{
    (void)state;
    char a[2048], b[2048], c[2048];
    struct sim_result r1 = run(400, 20, 11), r2 = run(400, 20, 11), r3 = run(400, 20, 12);
    json(&r1, a, sizeof a);
    json(&r2, b, sizeof b);
    json(&r3, c, sizeof c);
    assert_string_equal(a, b);
    assert_string_not_equal(a, c);
    /* The timing fields are there, and null when timing is left out. */
    assert_non_null(strstr(a, "\"max_pass_ms\":null"));
    assert_non_null(strstr(a, "\"wall_s\":null"));
    char t[2048];
    assert_true(sim_result_json(&r1, true, t, sizeof t) > 0);
    assert_null(strstr(t, "null"));
    for (const char *k = "jobs\0coverage\0above_high\0time_left_mape_after_5pct\0"
                         "invariant_violations\0billed_twice\0max_pass_ms\0wall_s\0";
         *k; k += strlen(k) + 1) {
        char key[64];
        snprintf(key, sizeof key, "\"%s\":", k);
        assert_non_null(strstr(t, key));
    }
    assert_int_equal(sim_result_json(&r1, true, t, 10), -1);
}

static void small_runs_break_nothing(void **state)
{
    (void)state;
    long fenced = 0, moves = 0, cancelled = 0, not_available = 0;
    for (uint64_t seed = 1; seed <= 6; seed++) {
        struct sim_result r = run(300, 20, seed);
        if (r.invariant_violations)
            print_error("seed %lu: %s\n", (unsigned long)seed, r.first_violation);
        assert_int_equal(r.invariant_violations, 0);
        assert_int_equal(r.billed_twice, 0);
        assert_int_equal(r.succeeded + r.failed + r.cancelled, 300);
        fenced += r.fenced_reports;
        moves += r.moves;
        cancelled += r.cancelled;
        not_available += r.not_available;
    }
    /* The runs did exercise what the invariants guard. */
    assert_true(fenced > 0);
    assert_true(moves > 0);
    assert_true(cancelled > 0);
    assert_true(not_available > 0);
}

static void targets_on_a_moderate_run(void **state)
{
    (void)state;
    struct sim_result r = run(2000, 50, 1);
    char buf[2048];
    sim_result_json(&r, true, buf, sizeof buf);
    print_message("%s\n", buf);
    assert_int_equal(r.invariant_violations, 0);
    assert_int_equal(r.billed_twice, 0);
    assert_true(r.coverage >= 0.8);
    assert_true(r.above_high <= 0.1);
    assert_true(r.time_left_mape_after_5pct <= 0.15);
    assert_true(r.time_left_samples > 1000);
    assert_true(r.succeeded > 1800);
}

static void tight_limits_stop_jobs_for_free(void **state)
{
    (void)state;
    struct sim_config c;
    sim_config_default(&c);
    c.jobs = 300;
    c.workers = 20;
    c.seed = 5;
    c.limits.time_limit_s = 900;
    struct sim_result r;
    char why[160];
    assert_int_equal(sim_run(&c, &r, why, sizeof why), ERR_OK);
    assert_true(r.stopped > 20);
    assert_int_equal(r.invariant_violations, 0);
    c.limits.time_limit_s = 12 * 3600;
    c.limits.budget_multiple = 0.5;
    assert_int_equal(sim_run(&c, &r, why, sizeof why), ERR_OK);
    assert_true(r.stopped > 20);
    assert_int_equal(r.invariant_violations, 0);
}

static void a_burst_queues_everything(void **state)
{
    (void)state;
    struct sim_config c;
    sim_config_default(&c);
    c.jobs = 500;
    c.workers = 10;
    c.seed = 3;
    c.burst = true;
    struct sim_result r;
    char why[160];
    assert_int_equal(sim_run(&c, &r, why, sizeof why), ERR_OK);
    assert_int_equal(r.invariant_violations, 0);
    assert_true(r.max_queued >= 480);
    assert_true(r.biggest_pass_queued >= 480);
    assert_int_equal(r.succeeded + r.failed + r.cancelled, 500);
    c.jobs = 0;
    assert_int_equal(sim_run(&c, &r, why, sizeof why), ERR_INVALID);
}

/* Runs a command; returns its exit status and its first output line. */
static int command(const char *cmd, char *out, size_t cap)
{
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    out[0] = '\0';
    if (!fgets(out, (int)cap, f))
        out[0] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void the_command(void **state)
{
    (void)state;
    char a[2048], b[2048];
    const char *cmd = ALALLO_BINARY " sim --jobs 200 --workers 10 --seed 7 --no-timing";
    assert_int_equal(command(cmd, a, sizeof a), 0);
    assert_int_equal(command(cmd, b, sizeof b), 0);
    assert_string_equal(a, b);
    assert_non_null(strstr(a, "\"jobs\":200,"));
    assert_non_null(strstr(a, "\"invariant_violations\":0,"));
    assert_int_equal(command(ALALLO_BINARY " sim --jobs 0 2>/dev/null", a, sizeof a), 2);
    assert_int_equal(command(ALALLO_BINARY " sim --bogus 2>/dev/null", a, sizeof a), 2);
    assert_int_equal(command(ALALLO_BINARY " sim --help", a, sizeof a), 0);
    assert_non_null(strstr(a, "usage: alallo sim"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_seed_same_json),
        cmocka_unit_test(small_runs_break_nothing),
        cmocka_unit_test(targets_on_a_moderate_run),
        cmocka_unit_test(tight_limits_stop_jobs_for_free),
        cmocka_unit_test(a_burst_queues_everything),
        cmocka_unit_test(the_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
