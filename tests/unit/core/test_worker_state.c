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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(worker_states_round_trip),
        cmocka_unit_test(attempt_statuses_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
