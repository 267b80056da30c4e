/* test_workers.c - the workers' one state table (control/workers.h): the
 * moves it allows, and the states a worker goes through when it is
 * drained, lost and heard from again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../api/api_harness.h"
#include "control/workers.h"

static void the_table(void **state)
{
    (void)state;
    assert_true(control_worker_change_allowed(WORKER_ACTIVE, WORKER_DRAINING));
    assert_true(control_worker_change_allowed(WORKER_ACTIVE, WORKER_LOST));
    assert_true(control_worker_change_allowed(WORKER_DRAINING, WORKER_LOST));
    assert_true(control_worker_change_allowed(WORKER_LOST, WORKER_ACTIVE));
    /* A drained worker stays drained until it registers again: a heartbeat
     * never makes it active. */
    assert_false(control_worker_change_allowed(WORKER_DRAINING, WORKER_ACTIVE));
    assert_false(control_worker_change_allowed(WORKER_LOST, WORKER_DRAINING));
    assert_false(control_worker_change_allowed(WORKER_STATE_COUNT, WORKER_ACTIVE));
}

static const char *state_now(struct harness *h, const char *name)
{
    static struct store_worker w;
    assert_int_equal(store_worker_get(h->ctl.store, name, &w), ERR_OK);
    return w.state;
}

static void drained_lost_and_back(void **state)
{
    (void)state;
    struct harness *h = h_new();
    struct store_worker w = {.cpus = 2, .mem_bytes = 1 << 30, .price_per_hour = 0.4};
    strcpy(w.name, "w1");
    strcpy(w.class_, "on-demand");
    assert_int_equal(control_worker_register(&h->ctl, &w), ERR_OK);
    assert_string_equal(state_now(h, "w1"), "active");

    struct store_worker got;
    struct store_attempt open[4];
    int n;
    assert_int_equal(control_worker_take_away(&h->ctl, "w1", false, &got, open, 4, &n), ERR_OK);
    assert_string_equal(got.state, "draining");
    /* Heard from while draining: still draining. */
    assert_int_equal(control_worker_heartbeat(&h->ctl, "w1", &got), ERR_OK);
    assert_string_equal(got.state, "draining");

    /* Silent past the timeout: lost. A heartbeat brings it back as active. */
    control_workers_check_lost(&h->ctl, clock_now_ms() + 3600 * 1000);
    assert_string_equal(state_now(h, "w1"), "lost");
    assert_int_equal(control_worker_heartbeat(&h->ctl, "w1", &got), ERR_OK);
    assert_string_equal(got.state, "active");
    assert_string_equal(state_now(h, "w1"), "active");

    /* Not silent (it just spoke): the check leaves it alone. */
    control_workers_check_lost(&h->ctl, clock_now_ms());
    assert_string_equal(state_now(h, "w1"), "active");
    assert_int_equal(control_worker_heartbeat(&h->ctl, "nobody", &got), ERR_NOT_FOUND);
    h_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_table),
        cmocka_unit_test(drained_lost_and_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
