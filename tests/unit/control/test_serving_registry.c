/* test_serving_registry.c - what the engines on nodes last reported, as
 * the scaling of a pool's engines reads it (serving_registry_load,
 * sched/serve_scale.h): fresh engines, waiting requests, how long the
 * last one has been idle, and requests that found none. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>

#include "control/serving_registry.h"

static void note(struct serving_registry *r, const char *id, int running, int waiting,
                 int64_t now)
{
    json_t *stats = json_pack("{si si}", "running", running, "waiting", waiting);
    serving_registry_note(r, id, "node1", "10.0.0.1", 4000, "key", stats, now);
    json_decref(stats);
}

static void load_of_the_engines_asked(void **state)
{
    (void)state;
    struct serving_registry *r = serving_registry_new();
    assert_non_null(r);
    const char *ids[] = {"p-0", "p-1"};
    struct serving_load l;
    serving_registry_load(r, ids, 2, 1000, &l);
    assert_int_equal(l.fresh, 0);
    assert_false(l.last_fresh);
    assert_int_equal(l.missed_ago_ms, -1);

    note(r, "p-0", 1, 3, 1000);
    note(r, "p-1", 0, 0, 1000);
    note(r, "q-0", 5, 9, 1000); /* another pool's: not asked */
    serving_registry_load(r, ids, 2, 1000, &l);
    assert_int_equal(l.fresh, 2);
    assert_int_equal(l.waiting, 3);
    assert_true(l.last_fresh);
    assert_int_equal(l.last_idle_ms, 0); /* first heard from just now */

    /* p-1 idle since it was first heard from; busy again, then idle */
    note(r, "p-1", 0, 0, 4000);
    serving_registry_load(r, ids, 2, 5000, &l);
    assert_int_equal(l.last_idle_ms, 4000);
    note(r, "p-1", 1, 0, 7000);
    serving_registry_load(r, ids, 2, 7000, &l);
    assert_int_equal(l.last_idle_ms, 0);
    note(r, "p-1", 0, 0, 10000);
    serving_registry_load(r, ids, 2, 11000, &l);
    assert_int_equal(l.last_idle_ms, 4000);

    /* silent past SERVING_STALE_MS: neither fresh nor idle */
    serving_registry_load(r, ids, 2, 10000 + SERVING_STALE_MS + 1, &l);
    assert_int_equal(l.fresh, 0);
    assert_false(l.last_fresh);
    assert_int_equal(l.last_idle_ms, 0);

    serving_registry_missed(r, 20000);
    serving_registry_load(r, ids, 0, 26000, &l);
    assert_int_equal(l.missed_ago_ms, 6000);
    serving_registry_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(load_of_the_engines_asked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
