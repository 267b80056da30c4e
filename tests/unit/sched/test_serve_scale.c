/* test_serve_scale.c - how many serving engines each pool runs within
 * the operator's range, and which pool gains or loses one
 * (sched/serve_scale.h, docs/serving.md "Engines that follow the
 * requests"). */
#include "sched/serve_scale.h"
#include "sched_test.h"

/* One pool and what all pools share. */
struct one {
    struct serve_scale_pool p;
    struct serve_scale_all a;
};

/* A pool of 0-3 engines, none running, nothing asked, nothing queued. */
static struct one quiet(void)
{
    return (struct one){.p = {.min = 0, .max = 3, .changed_ago_ms = -1, .free_slots = 2},
                        .a = {.missed_ago_ms = -1, .changed_ago_ms = -1, .idle_ms = 300000}};
}

/* The count one pool alone wants next (its change is every pool's). */
static int want(struct one *s)
{
    s->a.changed_ago_ms = s->p.changed_ago_ms;
    struct serve_scale_step st = serve_scale_next(&s->p, 1, &s->a);
    assert_true(st.pool == (st.delta ? 0 : -1));
    return s->p.count + st.delta;
}

/* Scaled to zero, the first request that finds no engine starts one, if a
 * slot is free; nothing asked, none starts. */
static void a_request_with_no_engine_starts_one(void **state)
{
    (void)state;
    struct one s = quiet();
    assert_int_equal(want(&s), 0);
    s.a.missed_ago_ms = 2000;
    assert_int_equal(want(&s), 1);
    s.p.free_slots = 0; /* every slot trains: serving never stops a job */
    assert_int_equal(want(&s), 0);
    s.p.free_slots = 1;
    s.a.missed_ago_ms = SERVE_SCALE_MISSED_MS + 1; /* long ago */
    assert_int_equal(want(&s), 0);
}

/* Requests waiting at every engine add one, up to MAX; a count just
 * changed is held, and an engine not yet heard from is waited for. */
static void waiting_requests_add_an_engine(void **state)
{
    (void)state;
    struct one s = quiet();
    s.p.count = s.p.fresh = 2;
    s.p.waiting = 1;
    assert_int_equal(want(&s), 2); /* one waiting for two engines */
    s.p.waiting = 2;
    assert_int_equal(want(&s), 3);
    s.p.changed_ago_ms = SERVE_SCALE_HOLD_MS - 1;
    assert_int_equal(want(&s), 2);
    s.p.changed_ago_ms = SERVE_SCALE_HOLD_MS;
    s.p.fresh = 1; /* the second is still coming up */
    assert_int_equal(want(&s), 2);
    s.p.count = s.p.fresh = 3;
    s.p.waiting = 50;
    assert_int_equal(want(&s), 3); /* MAX */
}

/* With training jobs queued, a free slot goes to serving only when
 * several requests wait at each engine. */
static void queued_training_raises_the_bar(void **state)
{
    (void)state;
    struct one s = quiet();
    s.p.count = s.p.fresh = 1;
    s.a.training_queued = 3;
    s.p.waiting = SERVE_SCALE_BUSY_WITH_TRAINING - 1;
    assert_int_equal(want(&s), 1);
    s.p.waiting = SERVE_SCALE_BUSY_WITH_TRAINING;
    assert_int_equal(want(&s), 2);
}

/* The last engine idle for the operator's time goes; sooner when training
 * waits for its slot; never below MIN, never while requests wait. */
static void an_idle_engine_gives_its_slot_back(void **state)
{
    (void)state;
    struct one s = quiet();
    s.p.count = s.p.fresh = 2;
    s.p.last_fresh = true;
    s.p.last_idle_ms = 60000;
    assert_int_equal(want(&s), 2);
    s.p.last_idle_ms = 300000;
    assert_int_equal(want(&s), 1);
    s.p.last_idle_ms = SERVE_SCALE_IDLE_WITH_TRAINING_MS;
    assert_int_equal(want(&s), 2);
    s.a.training_queued = 1;
    assert_int_equal(want(&s), 1);
    s.p.waiting = 1; /* another engine has a queue */
    assert_int_equal(want(&s), 2);
    s.p.waiting = 0;
    s.p.min = 2;
    assert_int_equal(want(&s), 2);
    s.a.idle_ms = 5000; /* an operator's time shorter than training's */
    s.p.min = 0;
    s.a.training_queued = 0;
    s.p.last_idle_ms = 5000;
    assert_int_equal(want(&s), 1);
}

/* An engine beyond MIN asked for and never heard from (its job cannot
 * start) gives its slot back after SERVE_SCALE_START_MS. */
static void an_engine_that_never_came_holds_no_slot(void **state)
{
    (void)state;
    struct one s = quiet();
    s.p.count = 2;
    s.p.fresh = 1;
    s.p.changed_ago_ms = SERVE_SCALE_START_MS - 1;
    assert_int_equal(want(&s), 2);
    s.p.changed_ago_ms = SERVE_SCALE_START_MS;
    assert_int_equal(want(&s), 1);
    s.p.waiting = 3; /* the other one has a queue: keep trying */
    assert_int_equal(want(&s), 2);
}

/* Outside the range (a restart, a range changed): back into it, one at a
 * time, whatever the hold. */
static void outside_the_range_comes_back(void **state)
{
    (void)state;
    struct one s = quiet();
    s.p.min = 1;
    s.p.changed_ago_ms = 0;
    assert_int_equal(want(&s), 1);
    s.p.count = 5;
    assert_int_equal(want(&s), 4);
}

/* Three pools of 0-2 engines: spot $0.40/h, cpu $0.40/h and gpu $2/h a
 * slot, none running, nothing asked. */
static void three_pools(struct serve_scale_pool p[3], struct serve_scale_all *a)
{
    for (int i = 0; i < 3; i++)
        p[i] = (struct serve_scale_pool){.max = 2, .changed_ago_ms = -1, .free_slots = 1,
                                         .price_per_hour = 0.40};
    p[2].price_per_hour = 2.0;
    *a = (struct serve_scale_all){.missed_ago_ms = -1, .changed_ago_ms = -1, .idle_ms = 300000};
}

/* One more engine goes to the cheapest pool below its MAX with a free
 * slot; of two as cheap, the one with more free slots, then the first. */
static void one_more_goes_to_the_cheapest_pool(void **state)
{
    (void)state;
    struct serve_scale_pool p[3];
    struct serve_scale_all a;
    three_pools(p, &a);
    struct serve_scale_step st = serve_scale_next(p, 3, &a);
    assert_int_equal(st.pool, -1); /* nobody asks */
    a.missed_ago_ms = 1000;
    st = serve_scale_next(p, 3, &a);
    assert_int_equal(st.pool, 0);
    assert_int_equal(st.delta, +1);
    p[1].free_slots = 2;
    assert_int_equal(serve_scale_next(p, 3, &a).pool, 1);
    p[0].free_slots = p[1].free_slots = 0; /* both train on every slot */
    assert_int_equal(serve_scale_next(p, 3, &a).pool, 2);
    p[2].free_slots = 0;
    assert_int_equal(serve_scale_next(p, 3, &a).pool, -1);
    /* requests waiting at every engine of every pool: the cheap pool at
     * its MAX, the dear one gets the next */
    three_pools(p, &a);
    p[0].count = p[0].fresh = 2;
    p[0].waiting = 2;
    p[1].max = 0;
    p[2].count = p[2].fresh = 1;
    p[2].waiting = 1;
    st = serve_scale_next(p, 3, &a);
    assert_int_equal(st.pool, 2);
    assert_int_equal(st.delta, +1);
    p[2].waiting = 0; /* one engine has room: the router sends it the next */
    assert_int_equal(serve_scale_next(p, 3, &a).pool, -1);
    p[2].waiting = 1;
    a.changed_ago_ms = SERVE_SCALE_HOLD_MS - 1; /* any pool's change holds all */
    assert_int_equal(serve_scale_next(p, 3, &a).pool, -1);
}

/* An idle last engine stops on the dearest pool above its MIN first; a
 * pool at its MIN keeps its engines, and one below comes back first. */
static void one_fewer_leaves_the_dearest_pool(void **state)
{
    (void)state;
    struct serve_scale_pool p[3];
    struct serve_scale_all a;
    three_pools(p, &a);
    for (int i = 0; i < 3; i++) {
        p[i].count = p[i].fresh = 1;
        p[i].last_fresh = true;
        p[i].last_idle_ms = 400000;
    }
    struct serve_scale_step st = serve_scale_next(p, 3, &a);
    assert_int_equal(st.pool, 2);
    assert_int_equal(st.delta, -1);
    p[2].min = 1;
    st = serve_scale_next(p, 3, &a);
    assert_int_equal(st.pool, 1); /* of two as cheap, the later */
    p[1].waiting = 1;
    assert_int_equal(serve_scale_next(p, 3, &a).pool, 0);
    p[0].last_idle_ms = 1000;
    assert_int_equal(serve_scale_next(p, 3, &a).pool, -1);
    p[2].min = 2;
    a.changed_ago_ms = 0;
    st = serve_scale_next(p, 3, &a);
    assert_int_equal(st.pool, 2);
    assert_int_equal(st.delta, +1);
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
        cmocka_unit_test(one_more_goes_to_the_cheapest_pool),
        cmocka_unit_test(one_fewer_leaves_the_dearest_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
