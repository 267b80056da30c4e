/* test_serve_scale.c - how many serving engines a pool runs within the
 * operator's range (sched/serve_scale.h, docs/serving.md "Engines that
 * follow the requests"). */
#include "sched/serve_scale.h"
#include "sched_test.h"

/* A pool of 0-3 engines, none running, nothing asked, nothing queued. */
static struct serve_scale_state quiet(void)
{
    return (struct serve_scale_state){.min = 0,
                                      .max = 3,
                                      .count = 0,
                                      .missed_ago_ms = -1,
                                      .changed_ago_ms = -1,
                                      .free_slots = 2,
                                      .idle_ms = 300000};
}

/* Scaled to zero, the first request that finds no engine starts one, if a
 * slot is free; nothing asked, none starts. */
static void a_request_with_no_engine_starts_one(void **state)
{
    (void)state;
    struct serve_scale_state s = quiet();
    assert_int_equal(serve_scale_want(&s), 0);
    s.missed_ago_ms = 2000;
    assert_int_equal(serve_scale_want(&s), 1);
    s.free_slots = 0; /* every slot trains: serving never stops a job */
    assert_int_equal(serve_scale_want(&s), 0);
    s.free_slots = 1;
    s.missed_ago_ms = SERVE_SCALE_MISSED_MS + 1; /* long ago */
    assert_int_equal(serve_scale_want(&s), 0);
}

/* Requests waiting at every engine add one, up to MAX; a count just
 * changed is held, and an engine not yet heard from is waited for. */
static void waiting_requests_add_an_engine(void **state)
{
    (void)state;
    struct serve_scale_state s = quiet();
    s.count = s.fresh = 2;
    s.waiting = 1;
    assert_int_equal(serve_scale_want(&s), 2); /* one waiting for two engines */
    s.waiting = 2;
    assert_int_equal(serve_scale_want(&s), 3);
    s.changed_ago_ms = SERVE_SCALE_HOLD_MS - 1;
    assert_int_equal(serve_scale_want(&s), 2);
    s.changed_ago_ms = SERVE_SCALE_HOLD_MS;
    s.fresh = 1; /* the second is still coming up */
    assert_int_equal(serve_scale_want(&s), 2);
    s.count = s.fresh = 3;
    s.waiting = 50;
    assert_int_equal(serve_scale_want(&s), 3); /* MAX */
}

/* With training jobs queued, a free slot goes to serving only when
 * several requests wait at each engine. */
static void queued_training_raises_the_bar(void **state)
{
    (void)state;
    struct serve_scale_state s = quiet();
    s.count = s.fresh = 1;
    s.training_queued = 3;
    s.waiting = SERVE_SCALE_BUSY_WITH_TRAINING - 1;
    assert_int_equal(serve_scale_want(&s), 1);
    s.waiting = SERVE_SCALE_BUSY_WITH_TRAINING;
    assert_int_equal(serve_scale_want(&s), 2);
}

/* The last engine idle for the operator's time goes; sooner when training
 * waits for its slot; never below MIN, never while requests wait. */
static void an_idle_engine_gives_its_slot_back(void **state)
{
    (void)state;
    struct serve_scale_state s = quiet();
    s.count = s.fresh = 2;
    s.last_fresh = true;
    s.last_idle_ms = 60000;
    assert_int_equal(serve_scale_want(&s), 2);
    s.last_idle_ms = 300000;
    assert_int_equal(serve_scale_want(&s), 1);
    s.last_idle_ms = SERVE_SCALE_IDLE_WITH_TRAINING_MS;
    assert_int_equal(serve_scale_want(&s), 2);
    s.training_queued = 1;
    assert_int_equal(serve_scale_want(&s), 1);
    s.waiting = 1; /* another engine has a queue */
    assert_int_equal(serve_scale_want(&s), 2);
    s.waiting = 0;
    s.min = 2;
    assert_int_equal(serve_scale_want(&s), 2);
    s.idle_ms = 5000; /* an operator's time shorter than training's */
    s.min = 0;
    s.training_queued = 0;
    s.last_idle_ms = 5000;
    assert_int_equal(serve_scale_want(&s), 1);
}

/* An engine beyond MIN asked for and never heard from (its job cannot
 * start) gives its slot back after SERVE_SCALE_START_MS. */
static void an_engine_that_never_came_holds_no_slot(void **state)
{
    (void)state;
    struct serve_scale_state s = quiet();
    s.count = 2;
    s.fresh = 1;
    s.changed_ago_ms = SERVE_SCALE_START_MS - 1;
    assert_int_equal(serve_scale_want(&s), 2);
    s.changed_ago_ms = SERVE_SCALE_START_MS;
    assert_int_equal(serve_scale_want(&s), 1);
    s.waiting = 3; /* the other one has a queue: keep trying */
    assert_int_equal(serve_scale_want(&s), 2);
}

/* Outside the range (a restart, a range changed): back into it at once. */
static void outside_the_range_comes_back(void **state)
{
    (void)state;
    struct serve_scale_state s = quiet();
    s.min = 1;
    s.changed_ago_ms = 0;
    assert_int_equal(serve_scale_want(&s), 1);
    s.count = 5;
    assert_int_equal(serve_scale_want(&s), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_request_with_no_engine_starts_one),
        cmocka_unit_test(waiting_requests_add_an_engine),
        cmocka_unit_test(queued_training_raises_the_bar),
        cmocka_unit_test(an_idle_engine_gives_its_slot_back),
        cmocka_unit_test(an_engine_that_never_came_holds_no_slot),
        cmocka_unit_test(outside_the_range_comes_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
