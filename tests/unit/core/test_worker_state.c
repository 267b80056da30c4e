/* test_worker_state.c - the name tables of worker states and attempt
 * statuses: every value round-trips, and unknown text reads safely. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/worker_state.h"

static void worker_states_round_trip(void **state)
{
    (void)state;
    for (int s = 0; s < WORKER_STATE_COUNT; s++) {
        enum worker_state back;
        assert_true(worker_state_parse(worker_state_name((enum worker_state)s), &back));
        assert_int_equal(back, s);
    }
    enum worker_state w;
    assert_true(worker_state_parse("draining", &w));
    assert_int_equal(w, WORKER_DRAINING);
    assert_false(worker_state_parse("Active", &w));
    assert_false(worker_state_parse(NULL, &w));
    assert_null(worker_state_name(WORKER_STATE_COUNT));
}

static void attempt_statuses_round_trip(void **state)
{
    (void)state;
    for (int s = 0; s < ATTEMPT_STATUS_COUNT; s++)
        assert_int_equal(attempt_status_of(attempt_status_name((enum attempt_status)s)), s);
    assert_string_equal(attempt_status_name(ATTEMPT_STARTING), "starting");
    /* What this server cannot read changes nothing: it reads as ended. */
    assert_int_equal(attempt_status_of("paused"), ATTEMPT_ENDED);
    assert_int_equal(attempt_status_of(NULL), ATTEMPT_ENDED);
}

/* The engine states the store keeps as text, parsed once here: the Slurm
 * engine, the reconciler and the job's shape compare the enum. */
static void engine_states_round_trip(void **state)
{
    (void)state;
    for (int s = 0; s < ENGINE_STATE_COUNT; s++)
        assert_int_equal(engine_state_of(engine_state_name((enum engine_state)s)), s);
    assert_string_equal(engine_state_name(ENGINE_STATE_SUBMITTING), "submitting");
    assert_string_equal(engine_state_name(ENGINE_STATE_PENDING), "pending");
    assert_string_equal(engine_state_name(ENGINE_STATE_RUNNING), "running");
    assert_string_equal(engine_state_name(ENGINE_STATE_NONE), "");
    assert_int_equal(engine_state_of("Running"), ENGINE_STATE_NONE);
    assert_int_equal(engine_state_of("gone"), ENGINE_STATE_NONE);
    assert_int_equal(engine_state_of(NULL), ENGINE_STATE_NONE);
    assert_null(engine_state_name(ENGINE_STATE_COUNT));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(worker_states_round_trip),
        cmocka_unit_test(attempt_statuses_round_trip),
        cmocka_unit_test(engine_states_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
