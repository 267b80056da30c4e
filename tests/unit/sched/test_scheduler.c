/* test_scheduler.c - placement by goal, waiting for a faster worker,
 * memory, fairness between accounts and FCFS within one, and a pass over
 * 10,000 jobs on 200 workers that keeps its invariants. */
#include <stdlib.h>
#include <string.h>

#include "sched/scheduler.h"
#include "sched_test.h"

#define GB 1000000000LL

static struct sched_worker worker(const char *name, int64_t mem, double flops, double price,
                                  enum worker_class c)
{
    struct sched_worker w = {.cpus = 8, .mem_bytes = mem, .class_ = c, .price_per_hour = price,
                             .flops = flops, .state = WORKER_ACTIVE};
    snprintf(w.name, sizeof w.name, "%s", name);
    return w;
}

static struct sched_job job(int64_t id, uint64_t account, double created, enum sched_goal g,
                            int64_t mem, double work)
{
    return (struct sched_job){.id = id, .account = account, .created_s = created, .goal = g,
                              .mem_bytes = mem, .work_flops = work, .startup_s = 60};
}

/* Runs a pass with all outputs; returns the number of assignments. */
static size_t pass(const struct sched_job *jobs, size_t nj, const struct sched_worker *ws,
                   size_t nw, const struct sched_account_load *loads, size_t nl, double now,
                   struct sched_assignment *as, enum job_message *msgs, int *planned,
                   double *free_at)
{
    struct sched_pass_out out = {.assignments = as, .messages = msgs, .planned_worker = planned,
                                 .free_at_s = free_at};
    assert_int_equal(sched_pass(jobs, nj, ws, nw, loads, nl, now, &out), ERR_OK);
    return out.n_assignments;
}

static void goal_picks_fast_or_cheap(void **state)
{
    (void)state;
    /* fast: 4x the speed at 3x the price, so cheaper per FLOP. */
    struct sched_worker ws[2] = {worker("slow", 80 * GB, 1e14, 1.0, WORKER_ON_DEMAND),
                                 worker("fast", 80 * GB, 4e14, 3.0, WORKER_ON_DEMAND)};
    struct sched_job j = job(1, 1, 0, SCHED_FASTEST_FINISH, 10 * GB, 3.6e17);
    struct sched_choice c;
    double free_at[2];
    sched_free_at(ws, 2, 0, free_at);
    assert_true(sched_choose(&j, ws, 2, free_at, 0, &c));
    assert_int_equal(c.worker, 1);
    assert_near(c.train_s, 900, 1e-9);
    assert_near(c.finish_s, 960, 1e-9);
    assert_near(c.price, 0.75, 1e-12);
    j.goal = SCHED_LOWEST_COST;
    assert_true(sched_choose(&j, ws, 2, free_at, 0, &c));
    assert_int_equal(c.worker, 1);
    /* Make fast dearer per FLOP: lowest_cost goes to slow, fastest stays. */
    ws[1].price_per_hour = 5.0;
    assert_true(sched_choose(&j, ws, 2, free_at, 0, &c));
    assert_int_equal(c.worker, 0);
    assert_near(c.price, 1.0, 1e-12);
    j.goal = SCHED_FASTEST_FINISH;
    assert_true(sched_choose(&j, ws, 2, free_at, 0, &c));
    assert_int_equal(c.worker, 1);
}

static void lowest_cost_ties_go_to_earlier_finish(void **state)
{
    (void)state;
    /* Same price per FLOP within 10%: the idle one wins over the busy one. */
    struct sched_worker ws[2] = {worker("busy", 80 * GB, 1e14, 1.00, WORKER_SPOT),
                                 worker("idle", 80 * GB, 1e14, 1.01, WORKER_SPOT)};
    ws[0].running_attempt = 7;
    ws[0].busy_until_s = 5000;
    struct sched_job j = job(1, 1, 0, SCHED_LOWEST_COST, GB, 3.6e17);
    struct sched_assignment as[2];
    enum job_message msg;
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 0, as, &msg, NULL, NULL), 1);
    assert_int_equal(as[0].worker, 1);
    assert_int_equal(msg, MSG_STARTING);
    /* 15% cheaper is worth the wait for lowest_cost... */
    ws[1].price_per_hour = 1.15;
    ws[0].busy_until_s = 3000;
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 0, as, &msg, NULL, NULL), 0);
    assert_int_equal(msg, MSG_WAITING_FOR_CAPACITY);
    /* ...within its patience: 1 hour, or its training time when longer
     * (3600 s here). Busy for 2 hours: the dearer idle worker wins. */
    ws[0].busy_until_s = 7200;
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 0, as, &msg, NULL, NULL), 1);
    assert_int_equal(as[0].worker, 1);
    /* A 10-hour job waits up to 10 hours for the cheaper worker. */
    j.work_flops = 3.6e18;
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 0, as, &msg, NULL, NULL), 0);
    /* Both beyond patience: the sooner start. */
    ws[1].running_attempt = 8;
    ws[0].busy_until_s = 50000;
    ws[1].busy_until_s = 40000;
    int planned;
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 0, as, &msg, &planned, NULL), 0);
    assert_int_equal(planned, 1);
}

/* A small job asks for lowest cost: a cheaper worker busy for 37 s saves
 * it less than a cent, so it starts at once on the idle, faster and dearer
 * one; a long job still waits for the cheaper one. */
static void lowest_cost_does_not_wait_to_save_pennies(void **state)
{
    (void)state;
    struct sched_worker ws[2] = {worker("cheap", 80 * GB, 1e12, 0.40, WORKER_ON_DEMAND),
                                 worker("fast", 80 * GB, 2e12, 1.00, WORKER_ON_DEMAND)};
    ws[0].running_attempt = 3;
    ws[0].busy_until_s = 37;
    /* 30 s of training on cheap: $0.0033 there, $0.0042 on fast. */
    struct sched_job j = job(1, 1, 0, SCHED_LOWEST_COST, GB, 3e13);
    struct sched_assignment as[2];
    enum job_message msg;
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 0, as, &msg, NULL, NULL), 1);
    assert_int_equal(as[0].worker, 1);
    assert_int_equal(msg, MSG_STARTING);
    /* 30 hours of training: $12 on cheap against $15 on fast is worth
     * 37 s of waiting. */
    j.work_flops = 1.08e17;
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 0, as, &msg, NULL, NULL), 0);
    assert_int_equal(msg, MSG_WAITING_FOR_CAPACITY);
}

/* Lowest cost waits for a busy cheaper worker only as long as the job's
 * estimate allowed (issue 12, item 10): while that worker still finishes
 * the job by the upper end of the time its estimate showed (deadline_s).
 * Past that, the idle dearer worker takes it. */
static void lowest_cost_waits_only_as_its_estimate_allowed(void **state)
{
    (void)state;
    struct sched_worker ws[2] = {worker("cheap", 80 * GB, 1e14, 1.00, WORKER_ON_DEMAND),
                                 worker("dear", 80 * GB, 1e14, 1.15, WORKER_ON_DEMAND)};
    ws[0].running_attempt = 3;
    ws[0].busy_until_s = 1000; /* cheap: 1000 + 60 + 3600 = 4660 */
    struct sched_job j = job(1, 1, 0, SCHED_LOWEST_COST, GB, 3.6e17);
    struct sched_assignment as[2];
    enum job_message msg;
    /* The estimate showed the wait: up to 5000 s in all. It waits. */
    j.deadline_s = 5000;
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 0, as, &msg, NULL, NULL), 0);
    assert_int_equal(msg, MSG_WAITING_FOR_CAPACITY);
    /* The estimate showed no wait (at most 3700 s, the idle worker's
     * time): it starts at once on the dearer idle worker, where the
     * patience rule alone would have it wait 1000 s for the cheaper one. */
    j.deadline_s = 3700;
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 0, as, &msg, NULL, NULL), 1);
    assert_int_equal(as[0].worker, 1);
    assert_int_equal(msg, MSG_STARTING);
    j.deadline_s = 0; /* no estimate recorded: the patience rule */
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 0, as, &msg, NULL, NULL), 0);
    /* Later in the same wait the cheap worker is still busy past what the
     * estimate allowed: the job stops waiting and takes the idle one. */
    j.deadline_s = 5000;
    ws[0].busy_until_s = 1500; /* 1500 + 3660 = 5160 > 5000 */
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 900, as, &msg, NULL, NULL), 1);
    assert_int_equal(as[0].worker, 1);
    /* The dearer one busy too: it waits for the one that still finishes
     * in time. */
    ws[1].running_attempt = 4;
    ws[1].busy_until_s = 1200;
    int planned;
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 900, as, &msg, &planned, NULL), 0);
    assert_int_equal(planned, 1);
}

static void fastest_waits_for_a_busy_faster_worker(void **state)
{
    (void)state;
    struct sched_worker ws[2] = {worker("fast", 80 * GB, 1e15, 4.0, WORKER_ON_DEMAND),
                                 worker("slow", 80 * GB, 1e14, 1.0, WORKER_ON_DEMAND)};
    ws[0].running_attempt = 3;
    ws[0].busy_until_s = 1100; /* fast: 1100 + 60 + 1000 = 2160; slow: 0 + 60 + 10000 */
    struct sched_job j = job(1, 1, 0, SCHED_FASTEST_FINISH, GB, 1e18);
    struct sched_assignment as[2];
    enum job_message msg;
    int planned;
    double free_at[2];
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 0, as, &msg, &planned, free_at), 0);
    assert_int_equal(msg, MSG_WAITING_FOR_CAPACITY);
    assert_int_equal(planned, 0);
    assert_near(free_at[0], 2160, 1e-9); /* the reservation is on the horizon */
    assert_near(free_at[1], 0, 0);
    /* Busy for much longer: the slow one now finishes first. */
    ws[0].busy_until_s = 20000;
    assert_int_equal(pass(&j, 1, ws, 2, NULL, 0, 0, as, &msg, &planned, free_at), 1);
    assert_int_equal(as[0].worker, 1);
    assert_int_equal(msg, MSG_STARTING);
    assert_near(as[0].finish_s, 10060, 1e-9);
    /* A busy worker past its expected end is still busy, never assigned. */
    ws[0].busy_until_s = -50;
    assert_int_equal(pass(&j, 1, ws, 1, NULL, 0, 0, as, &msg, NULL, NULL), 0);
    assert_int_equal(msg, MSG_WAITING_FOR_CAPACITY);
}

static void memory_and_worker_state(void **state)
{
    (void)state;
    struct sched_worker ws[3] = {worker("small", 16 * GB, 1e15, 1.0, WORKER_ON_DEMAND),
                                 worker("big", 80 * GB, 1e14, 1.0, WORKER_ON_DEMAND),
                                 worker("huge", 160 * GB, 1e16, 1.0, WORKER_ON_DEMAND)};
    ws[2].state = WORKER_DRAINING;
    struct sched_job jobs[2] = {job(1, 1, 0, SCHED_FASTEST_FINISH, 40 * GB, 1e18),
                                job(2, 2, 1, SCHED_FASTEST_FINISH, 8 * GB, 1e18)};
    struct sched_assignment as[3];
    enum job_message msgs[2];
    assert_int_equal(pass(jobs, 2, ws, 3, NULL, 0, 0, as, msgs, NULL, NULL), 2);
    /* The 40 GB job only fits "big"; the small job takes the fast small one. */
    for (size_t i = 0; i < 2; i++) {
        if (as[i].job == 0)
            assert_int_equal(as[i].worker, 1);
        else
            assert_int_equal(as[i].worker, 0);
    }
    /* Lost and draining workers take nothing. */
    ws[1].state = WORKER_LOST;
    assert_int_equal(pass(jobs, 1, ws, 3, NULL, 0, 0, as, msgs, NULL, NULL), 0);
    assert_int_equal(msgs[0], MSG_WAITING_FOR_CAPACITY);
    struct sched_choice c;
    double free_at[3];
    sched_free_at(ws, 3, 0, free_at);
    assert_false(sched_choose(&jobs[0], ws, 3, free_at, 0, &c));
    assert_int_equal(c.worker, -1);
    assert_true(isinf(free_at[1]) && isinf(free_at[2]));
}

static void fair_between_accounts_fcfs_within(void **state)
{
    (void)state;
    struct sched_worker ws[2] = {worker("a", 80 * GB, 1e14, 1.0, WORKER_ON_DEMAND),
                                 worker("b", 80 * GB, 1e14, 1.0, WORKER_ON_DEMAND)};
    /* Account 7 queued five jobs first (given out of order); account 9 one,
     * later. Two workers: 7's oldest and 9's job start. */
    struct sched_job jobs[6] = {
        job(13, 7, 30, SCHED_FASTEST_FINISH, GB, 1e17), job(11, 7, 10, SCHED_FASTEST_FINISH, GB, 1e17),
        job(12, 7, 20, SCHED_FASTEST_FINISH, GB, 1e17), job(14, 7, 40, SCHED_FASTEST_FINISH, GB, 1e17),
        job(15, 7, 50, SCHED_FASTEST_FINISH, GB, 1e17), job(21, 9, 100, SCHED_FASTEST_FINISH, GB, 1e17),
    };
    struct sched_assignment as[2];
    enum job_message msgs[6];
    assert_int_equal(pass(jobs, 6, ws, 2, NULL, 0, 0, as, msgs, NULL, NULL), 2);
    bool got_11 = false, got_21 = false;
    for (int i = 0; i < 2; i++) {
        got_11 |= jobs[as[i].job].id == 11;
        got_21 |= jobs[as[i].job].id == 21;
    }
    assert_true(got_11 && got_21);
    assert_int_equal(msgs[1], MSG_STARTING);
    assert_int_equal(msgs[5], MSG_STARTING);
    assert_int_equal(msgs[2], MSG_WAITING_FOR_CAPACITY);

    /* Account 9 already runs two jobs, 7 none: 7's two oldest start. */
    struct sched_account_load loads[1] = {{.account = 9, .running = 2}};
    assert_int_equal(pass(jobs, 6, ws, 2, loads, 1, 0, as, msgs, NULL, NULL), 2);
    for (int i = 0; i < 2; i++)
        assert_true(jobs[as[i].job].id == 11 || jobs[as[i].job].id == 12);
    assert_int_equal(msgs[5], MSG_WAITING_FOR_CAPACITY);

    /* One worker, one account: strictly first come first served. */
    assert_int_equal(pass(jobs, 5, ws, 1, NULL, 0, 0, as, msgs, NULL, NULL), 1);
    assert_int_equal(jobs[as[0].job].id, 11);
}

static void names_and_bad_input(void **state)
{
    (void)state;
    enum sched_goal g;
    assert_true(sched_goal_parse("fastest_finish", &g));
    assert_int_equal(g, SCHED_FASTEST_FINISH);
    assert_string_equal(sched_goal_name(SCHED_LOWEST_COST), "lowest_cost");
    assert_false(sched_goal_parse("cheapest", &g));
    struct sched_worker w = worker("a", GB, 1e12, 1, WORKER_ON_DEMAND);
    struct sched_job j = job(1, 1, 0, SCHED_LOWEST_COST, 1, 1);
    struct sched_pass_out out = {0};
    assert_int_equal(sched_pass(&j, 1, &w, 1, NULL, 0, 0, &out), ERR_INVALID);
    struct sched_assignment a;
    out.assignments = &a;
    assert_int_equal(sched_pass(&j, 1, &w, 1, NULL, 0, 0, &out), ERR_OK);
    assert_int_equal(sched_assigned_job(&out, 0), 0);
    w.running_attempt = 1;
    w.busy_until_s = 10;
    assert_int_equal(sched_pass(&j, 1, &w, 1, NULL, 0, 0, &out), ERR_OK);
    assert_int_equal(sched_assigned_job(&out, 0), -1);
    assert_int_equal(sched_pass(&j, 0, &w, 1, NULL, 0, 0, &out), ERR_OK);
    assert_int_equal(out.n_assignments, 0);
}

static uint64_t rng_state = 42;
static double rnd(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static void ten_thousand_on_two_hundred(void **state)
{
    (void)state;
    enum { NJ = 10000, NW = 200 };
    struct sched_job *jobs = calloc(NJ, sizeof *jobs);
    struct sched_worker *ws = calloc(NW, sizeof *ws);
    struct sched_assignment *as = calloc(NW, sizeof *as);
    enum job_message *msgs = calloc(NJ, sizeof *msgs);
    int *planned = calloc(NJ, sizeof *planned);
    double *free_at = calloc(NW, sizeof *free_at);
    assert_non_null(jobs && ws && as && msgs && planned && free_at);
    int idle = 0;
    for (int i = 0; i < NW; i++) {
        ws[i] = worker("w", (int64_t)(16 + 16 * (i % 5)) * GB, 1e14 * (1 + i % 7),
                       0.5 + 0.25 * (i % 9), i % 3 ? WORKER_ON_DEMAND : WORKER_SPOT);
        if (i % 4 == 0) {
            ws[i].running_attempt = 1000 + i;
            ws[i].busy_until_s = 3600 * rnd();
        } else {
            idle++;
        }
        if (i % 50 == 1)
            ws[i].state = WORKER_LOST;
    }
    for (int i = 0; i < NJ; i++)
        jobs[i] = job(i + 1, (uint64_t)(rnd() * rnd() * 40), rnd() * 1e5,
                      rnd() < 0.5 ? SCHED_LOWEST_COST : SCHED_FASTEST_FINISH,
                      (int64_t)(1 + rnd() * 70) * GB, 1e16 + 1e18 * rnd());
    size_t n = pass(jobs, NJ, ws, NW, NULL, 0, 0, as, msgs, planned, free_at);
    /* Every idle active worker that some job fits gets a job; nothing twice. */
    assert_true(n > 0 && (int)n <= idle);
    char *wtaken = calloc(NW, 1), *jtaken = calloc(NJ, 1);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(wtaken[as[i].worker], 0);
        assert_int_equal(jtaken[as[i].job], 0);
        wtaken[as[i].worker] = jtaken[as[i].job] = 1;
        assert_int_equal(ws[as[i].worker].running_attempt, 0);
        assert_int_equal(ws[as[i].worker].state, WORKER_ACTIVE);
        assert_true(ws[as[i].worker].mem_bytes >= jobs[as[i].job].mem_bytes);
        assert_int_equal(msgs[as[i].job], MSG_STARTING);
    }
    long starting = 0;
    for (int i = 0; i < NJ; i++)
        starting += msgs[i] == MSG_STARTING;
    assert_int_equal(starting, (long)n);
    /* The horizon extends far beyond now once 10,000 jobs reserved it. */
    for (int i = 0; i < NW; i++)
        if (ws[i].state == WORKER_ACTIVE)
            assert_true(free_at[i] > 3600);
    /* Deterministic: the same input gives the same assignments. */
    struct sched_assignment *as2 = calloc(NW, sizeof *as2);
    assert_int_equal(pass(jobs, NJ, ws, NW, NULL, 0, 0, as2, NULL, NULL, NULL), n);
    assert_memory_equal(as, as2, n * sizeof *as);
    free(as2);
    free(wtaken);
    free(jtaken);
    free(jobs);
    free(ws);
    free(as);
    free(msgs);
    free(planned);
    free(free_at);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(goal_picks_fast_or_cheap),
        cmocka_unit_test(lowest_cost_ties_go_to_earlier_finish),
        cmocka_unit_test(lowest_cost_does_not_wait_to_save_pennies),
        cmocka_unit_test(lowest_cost_waits_only_as_its_estimate_allowed),
        cmocka_unit_test(fastest_waits_for_a_busy_faster_worker),
        cmocka_unit_test(memory_and_worker_state),
        cmocka_unit_test(fair_between_accounts_fcfs_within),
        cmocka_unit_test(names_and_bad_input),
        cmocka_unit_test(ten_thousand_on_two_hundred),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
