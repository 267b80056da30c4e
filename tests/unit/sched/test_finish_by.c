/* test_finish_by.c - the goal finish_by: the cheapest capacity whose
 * calibrated finish at the 90% level is by the deadline; when none is, the
 * earliest, named in the estimate's sentence; a running job that would
 * miss its deadline moves to free capacity that meets it, and one that no
 * capacity can finish in time goes on at the fastest; `alallo sim` with
 * finish_by jobs keeps their deadlines. */
#include <stdlib.h>
#include <string.h>

#include "sched/estimator.h"
#include "sched/resched.h"
#include "sched/scheduler.h"
#include "sched/sim.h"
#include "sched_test.h"

#define GB 1000000000LL

static struct sched_worker worker(const char *name, double flops, double price)
{
    struct sched_worker w = {.cpus = 8, .mem_bytes = 80 * GB, .class_ = WORKER_ON_DEMAND,
                             .price_per_hour = price, .flops = flops, .state = WORKER_ACTIVE};
    snprintf(w.name, sizeof w.name, "%s", name);
    return w;
}

/* A finish_by job of `work` FLOPs, 60 s of loading, every finish_hi `hi`. */
static struct sched_job deadline_job(double work, double by, float hi)
{
    struct sched_job j = {.id = 1, .account = 1, .goal = SCHED_FINISH_BY, .mem_bytes = GB,
                          .work_flops = work, .startup_s = 60, .finish_by_s = by};
    for (int w = 0; w < 2; w++)
        for (int c = 0; c < WORKER_CLASS_COUNT; c++)
            for (int k = 0; k < SCHED_FINISH_SHARES; k++)
                j.finish_hi[w][c][k] = hi;
    return j;
}

/* The place sched_choose gives j on ws[n] (all free at 0, as their state
 * says), at time 0. */
static struct sched_choice choose(const struct sched_job *j, const struct sched_worker *ws,
                                  size_t n)
{
    double free_at[8];
    struct sched_choice c;
    sched_free_at(ws, n, 0, free_at);
    assert_true(sched_choose(j, ws, n, free_at, 0, &c));
    return c;
}

static void the_name_parses(void **state)
{
    (void)state;
    enum sched_goal g;
    assert_true(sched_goal_parse("finish_by", &g));
    assert_int_equal(g, SCHED_FINISH_BY);
    assert_string_equal(sched_goal_name(SCHED_FINISH_BY), "finish_by");
}

/* Three workers, 1x, 2x and 4x the speed at 1, 3 and 10 an hour. 3.6e17
 * FLOPs: 3600 s, 1800 s, 900 s of training after 60 s of loading. */
static void cheapest_that_finishes_in_time(void **state)
{
    (void)state;
    struct sched_worker ws[3] = {worker("slow", 1e14, 1.0), worker("mid", 2e14, 3.0),
                                 worker("fast", 4e14, 10.0)};
    /* By the nominal times (factor 1) slow (3660 s) meets 4000 s. */
    struct sched_job j = deadline_job(3.6e17, 4000, 1.0f);
    struct sched_choice c = choose(&j, ws, 3);
    assert_int_equal(c.worker, 0);
    assert_near(c.high_s, 3660, 1e-9);

    /* At the 90% level, 1.5x nominal: slow ends at 5490 s, past it; mid at
     * 2790 s is the cheapest that meets it, though fast is sooner. */
    j = deadline_job(3.6e17, 4000, 1.5f);
    c = choose(&j, ws, 3);
    assert_int_equal(c.worker, 1);
    assert_near(c.finish_s, 1860, 1e-9);
    assert_near(c.high_s, 2790, 1e-9);

    /* A deadline only fast meets at that level. */
    j.finish_by_s = 2000;
    c = choose(&j, ws, 3);
    assert_int_equal(c.worker, 2);
    assert_near(c.high_s, 1440, 1e-9);

    /* The factor is read at the candidate's share of start: loading is the
     * whole of a job with no work, so only the share-1 factor counts. */
    struct sched_job tiny = deadline_job(1, 1000, 1.0f);
    for (int k = 0; k < SCHED_FINISH_SHARES; k++)
        tiny.finish_hi[0][WORKER_ON_DEMAND][k] = k == SCHED_FINISH_SHARES - 1 ? 3.0f : 1.0f;
    c = choose(&tiny, ws, 3);
    assert_near(c.high_s, 180, 1e-3);
}

/* A cheaper worker that is busy, but still finishes the job by its
 * deadline, is worth the wait; once it no longer would, the job starts at
 * once on a dearer one. */
static void waits_for_cheaper_only_within_the_deadline(void **state)
{
    (void)state;
    struct sched_worker ws[2] = {worker("cheap", 2e14, 1.0), worker("dear", 2e14, 5.0)};
    ws[0].running_attempt = 3;
    ws[0].busy_until_s = 600;
    struct sched_job j = deadline_job(3.6e17, 4000, 1.2f);
    struct sched_assignment as[2];
    enum job_message msg;
    int planned;
    struct sched_pass_out out = {.assignments = as, .messages = &msg, .planned_worker = &planned};
    assert_int_equal(sched_pass(&j, 1, ws, 2, NULL, 0, 0, &out), ERR_OK);
    assert_int_equal(out.n_assignments, 0);
    assert_int_equal(planned, 0);
    assert_int_equal(msg, MSG_WAITING_FOR_CAPACITY);

    j.finish_by_s = 2500; /* cheap: (600 + 60 + 1800) x 1.2 = 2952 s, too late */
    assert_int_equal(sched_pass(&j, 1, ws, 2, NULL, 0, 0, &out), ERR_OK);
    assert_int_equal(out.n_assignments, 1);
    assert_int_equal(as[0].worker, 1);
    assert_int_equal(msg, MSG_STARTING);
}

/* No worker meets the deadline: the earliest finish at the 90% level wins,
 * and the estimate says so, naming that time. */
static void none_can_the_earliest_is_named(void **state)
{
    (void)state;
    struct sched_worker ws[2] = {worker("slow", 1e14, 1.0), worker("fast", 4e14, 10.0)};
    struct sched_job j = deadline_job(3.6e17, 500, 1.5f);
    struct sched_choice c = choose(&j, ws, 2);
    assert_int_equal(c.worker, 1);
    assert_near(c.high_s, 1440, 1e-9);

    /* The estimate, on the calibrated (here default) bands. */
    struct est_history *h = calloc(1, sizeof *h);
    est_history_init(h);
    struct est_request r = {
        .job = {.model = {.layers = 12, .hidden = 768, .intermediate = 2048, .heads = 12,
                          .vocab = 50257, .tied = true},
                .batch = 4, .seq_len = 64},
        .train_tokens = 1e6, .goal = SCHED_FINISH_BY, .startup_s = 60,
        .now = 1764777600, /* 2025-12-03 16:00 UTC */
    };
    ws[0].flops = 1e12;
    ws[1].flops = 4e12;
    struct estimate e;
    char why[128];
    /* Fastest: training 5.11e14 / 4e12 = 127.8 s; the default bands give
     * 3.0 x 60 + 2.0 x 127.8 = 435.5 s at the upper end. */
    r.finish_by_s = r.now + 300;
    assert_int_equal(est_estimate(&r, ws, 2, NULL, h, &e, why, sizeof why), ERR_OK);
    assert_int_equal(e.worker, 1);
    est_finish_by_verdict(&e, r.now, r.finish_by_s);
    assert_false(e.finish_by_met);
    assert_near(e.finish_high_s, r.now + e.time_high_s, 1e-6);
    assert_true(e.time_high_s > 400 && e.time_high_s < 480);
    assert_string_equal(e.finish_by_message,
                        "No capacity can finish this job by 2025-12-03 16:05 UTC; the earliest "
                        "is 2025-12-03 16:08 UTC.");

    /* A later deadline: slow (511 s of training, 1200 s at the upper end)
     * is too slow for it, fast meets it; fast is chosen and met. */
    r.finish_by_s = r.now + 600;
    assert_int_equal(est_estimate(&r, ws, 2, NULL, h, &e, why, sizeof why), ERR_OK);
    assert_int_equal(e.worker, 1);
    est_finish_by_verdict(&e, r.now, r.finish_by_s);
    assert_true(e.finish_by_met);
    assert_string_equal(e.finish_by_message, "");

    /* A deadline slow meets too: the cheaper slow one. */
    r.finish_by_s = r.now + 7200;
    assert_int_equal(est_estimate(&r, ws, 2, NULL, h, &e, why, sizeof why), ERR_OK);
    assert_int_equal(e.worker, 0);
    est_finish_by_verdict(&e, r.now, r.finish_by_s);
    assert_true(e.finish_by_met);
    assert_true(r.now + e.time_high_s <= r.finish_by_s);
    free(h);
}

/* The factors are the estimate's own band at each share of start. */
static void factors_are_the_estimates_band(void **state)
{
    (void)state;
    struct est_history *h = calloc(1, sizeof *h);
    est_history_init(h);
    for (int i = 0; i < 50; i++)
        est_history_add_job(h, PLAN_METHOD_LORA_16, WORKER_ON_DEMAND, false, SCHED_FINISH_BY,
                            100 + i, 100, 1000 + 10 * i, 1000);
    float f[2][WORKER_CLASS_COUNT][SCHED_FINISH_SHARES];
    est_finish_by_factors(h, PLAN_METHOD_LORA_16, f);
    for (int k = 0; k < SCHED_FINISH_SHARES; k++) {
        struct est_band b = est_band_job(h, PLAN_METHOD_LORA_16, WORKER_ON_DEMAND, false,
                                         SCHED_FINISH_BY, (double)k / (SCHED_FINISH_SHARES - 1));
        assert_near(f[0][WORKER_ON_DEMAND][k], b.hi, 1e-6);
    }
    free(h);
}

/* A running job: on time, stays; late where it runs with free capacity
 * that meets the deadline, moves there; late with none that does, missed,
 * and moves only to a clearly earlier finish. */
static void a_late_job_moves(void **state)
{
    (void)state;
    struct sched_worker ws[3] = {worker("here", 1e14, 1.0), worker("mid", 2e14, 3.0),
                                 worker("fast", 4e14, 10.0)};
    ws[0].running_attempt = 9; /* the one it runs on */
    ws[0].busy_until_s = 5000;
    double free_at[3];
    sched_free_at(ws, 3, 1000, free_at);
    /* The rest from its latest checkpoint: 1800 s on mid, 900 s on fast. */
    struct sched_job rest = deadline_job(3.6e17, 5000, 1.2f);
    struct resched_deadline d;

    resched_on_deadline(&rest, 4900, ws, 3, free_at, 1000, &d);
    assert_false(d.missed);
    assert_int_equal(d.move_to, -1);

    /* 6000 s where it runs: mid ends at 1000 + 1860 x 1.2 = 3232 s. */
    resched_on_deadline(&rest, 6000, ws, 3, free_at, 1000, &d);
    assert_false(d.missed);
    assert_int_equal(d.move_to, 1);
    assert_near(d.high_s, 3232, 1e-3);

    /* mid busy too: fast, the only one that meets it. */
    ws[1].running_attempt = 4;
    ws[1].busy_until_s = 9000;
    sched_free_at(ws, 3, 1000, free_at);
    resched_on_deadline(&rest, 6000, ws, 3, free_at, 1000, &d);
    assert_int_equal(d.move_to, 2);

    /* A deadline nothing meets: missed; fast (2152 s) is far earlier than
     * 6000 s where it runs, so it goes on there. */
    rest.finish_by_s = 1500;
    resched_on_deadline(&rest, 6000, ws, 3, free_at, 1000, &d);
    assert_true(d.missed);
    assert_int_equal(d.move_to, 2);
    assert_near(d.high_s, 2152, 1e-3);

    /* ... but not for a gain under 5% of the time left. */
    resched_on_deadline(&rest, 2200, ws, 3, free_at, 1000, &d);
    assert_true(d.missed);
    assert_int_equal(d.move_to, -1);

    /* No free worker at all: missed, stays. */
    ws[2].running_attempt = 5;
    ws[2].busy_until_s = 9000;
    sched_free_at(ws, 3, 1000, free_at);
    resched_on_deadline(&rest, 6000, ws, 3, free_at, 1000, &d);
    assert_true(d.missed);
    assert_int_equal(d.move_to, -1);
}

static void moments_read_in_utc(void **state)
{
    (void)state;
    char b[40];
    assert_string_equal(job_moment_text(b, sizeof b, 1764777600, false), "2025-12-03 16:00 UTC");
    assert_string_equal(job_moment_text(b, sizeof b, 1764777601, false), "2025-12-03 16:00 UTC");
    assert_string_equal(job_moment_text(b, sizeof b, 1764777601, true), "2025-12-03 16:01 UTC");
    assert_string_equal(job_moment_text(b, sizeof b, NAN, true), "");
}

/* The simulation with a third of the jobs on finish_by: some deadlines
 * are refused at creation, the jobs it takes finish by them (at the 90%
 * level: at least nine in ten), nothing is broken; without the share, no
 * finish_by job and no such field in the result. */
static void the_simulation_keeps_deadlines(void **state)
{
    (void)state;
    struct sim_config c;
    sim_config_default(&c);
    c.jobs = 400;
    c.workers = 20;
    c.seed = 1;
    struct sim_result r;
    char why[160], buf[2048];
    assert_int_equal(sim_run(&c, &r, why, sizeof why), ERR_OK);
    assert_int_equal(r.finish_by_jobs, 0);
    assert_true(sim_result_json(&r, false, buf, sizeof buf) > 0);
    assert_null(strstr(buf, "finish_by"));

    c.finish_by_share = 0.3;
    assert_int_equal(sim_run(&c, &r, why, sizeof why), ERR_OK);
    assert_int_equal(r.invariant_violations, 0);
    assert_true(r.finish_by_jobs > 60 && r.finish_by_jobs < 180);
    assert_true(r.finish_by_refused > 0);
    assert_true(r.finish_by_succeeded > r.finish_by_jobs / 2);
    assert_true(r.finish_by_met >= 0.9 * (double)r.finish_by_succeeded);
    int n = sim_result_json(&r, false, buf, sizeof buf);
    assert_true(n > 0 && (size_t)n == strlen(buf));
    char want[200];
    snprintf(want, sizeof want,
             ",\"finish_by\":{\"jobs\":%ld,\"refused\":%ld,\"succeeded\":%ld,\"met\":%ld,"
             "\"missed\":%ld,\"moves\":%ld}}",
             r.finish_by_jobs, r.finish_by_refused, r.finish_by_succeeded, r.finish_by_met,
             r.finish_by_missed, r.finish_by_moves);
    assert_string_equal(buf + n - strlen(want), want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_name_parses),
        cmocka_unit_test(cheapest_that_finishes_in_time),
        cmocka_unit_test(waits_for_cheaper_only_within_the_deadline),
        cmocka_unit_test(none_can_the_earliest_is_named),
        cmocka_unit_test(factors_are_the_estimates_band),
        cmocka_unit_test(a_late_job_moves),
        cmocka_unit_test(moments_read_in_utc),
        cmocka_unit_test(the_simulation_keeps_deadlines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
