/* test_serve_route.c - the serving engine a generation goes to on a
 * cluster (sched/serve_route.h, docs/serving.md "On a cluster"). */
#include "sched/serve_route.h"
#include "sched_test.h"

static void none_fresh_is_none(void **state)
{
    (void)state;
    assert_int_equal(serve_route_pick(NULL, 0), -1);
    struct serve_route_engine e[2] = {{.fresh = false, .has_base = true},
                                      {.fresh = false, .free_bytes = 1 << 30}};
    assert_int_equal(serve_route_pick(e, 2), -1);
}

/* An engine with the base loaded wins over free memory; with the adapter
 * too over one without; among equals the least busy. A stale engine is
 * never picked, however well it suits. */
static void loaded_first_then_least_busy(void **state)
{
    (void)state;
    struct serve_route_engine e[4] = {
        {.fresh = true, .free_bytes = 8LL << 30, .busy = 0},
        {.fresh = true, .has_base = true, .free_bytes = 0, .busy = 5},
        {.fresh = true, .has_base = true, .free_bytes = 0, .busy = 2},
        {.fresh = false, .has_base = true, .has_adapter = true, .busy = 0},
    };
    assert_int_equal(serve_route_pick(e, 4), 2);
    e[1].has_adapter = true; /* the adapter loaded too: no load at all */
    assert_int_equal(serve_route_pick(e, 4), 1);
}

/* Nobody has the base: the most free model memory, so that it loads
 * without pushing another model out; ties go to the least busy. */
static void else_most_free_memory(void **state)
{
    (void)state;
    struct serve_route_engine e[3] = {
        {.fresh = true, .free_bytes = 1LL << 30, .busy = 0},
        {.fresh = true, .free_bytes = 4LL << 30, .busy = 9},
        {.fresh = true, .free_bytes = 4LL << 30, .busy = 3},
    };
    assert_int_equal(serve_route_pick(e, 3), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(none_fresh_is_none),
        cmocka_unit_test(loaded_first_then_least_busy),
        cmocka_unit_test(else_most_free_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
