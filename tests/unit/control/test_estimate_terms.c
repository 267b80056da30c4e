/* test_estimate_terms.c - the estimate's JSON shows its range term by term
 * (control_estimate_json, docs/api.md "Estimates"): each part's nominal
 * seconds and range, the margin, where the training factor comes from and
 * the next choice of a job that would wait; none without a range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <string.h>

#include "control/jobs.h"

static double num(const json_t *o, const char *part, const char *key)
{
    const json_t *p = part ? json_object_get(o, part) : o;
    const json_t *v = json_object_get(p, key);
    assert_true(json_is_number(v));
    return json_number_value(v);
}

static void terms_of_a_range(void **state)
{
    (void)state;
    struct estimate e;
    memset(&e, 0, sizeof e);
    e.fit = PLAN_FITS;
    e.worker = 0;
    e.alt_worker = -1;
    snprintf(e.worker_name, sizeof e.worker_name, "local");
    e.wait_s = 12.34;
    e.wait_low_s = 10.01;
    e.wait_high_s = 20.06;
    e.startup_s = 2.06;
    e.startup_low_s = 1.02;
    e.startup_high_s = 6.15;
    e.train_s = 100;
    e.train_low_s = 60;
    e.train_high_s = 200;
    e.range_margin = 0.12345;
    e.price_margin = -0.0444;
    e.price_high_margin = 0.2555;
    e.borrowed_shape = true;
    e.time_low_s = 71;
    e.time_high_s = 226.2;
    json_t *j = control_estimate_json(&e);
    assert_non_null(j);
    const json_t *t = json_object_get(j, "terms");
    assert_true(json_is_object(t));
    assert_float_equal(num(t, "wait", "s"), 12.3, 1e-9);
    assert_float_equal(num(t, "wait", "low_s"), 10.0, 1e-9);
    assert_float_equal(num(t, "wait", "high_s"), 20.1, 1e-9);
    assert_float_equal(num(t, "fixed", "s"), 2.1, 1e-9); /* to a tenth */
    assert_float_equal(num(t, "fixed", "high_s"), 6.2, 1e-9);
    assert_float_equal(num(t, "training", "low_s"), 60, 1e-9);
    assert_float_equal(num(t, "training", "high_s"), 200, 1e-9);
    assert_float_equal(num(t, NULL, "margin"), 0.123, 1e-9);
    assert_string_equal(json_string_value(json_object_get(t, "basis")), "borrowed");
    assert_float_equal(num(t, "price_margin", "low"), -0.044, 1e-9);
    assert_float_equal(num(t, "price_margin", "high"), 0.256, 1e-9);
    assert_null(json_object_get(t, "next_choice"));
    json_decref(j);
    /* The range itself to a tenth, rounded outward: time's ends, training's
     * low end (the same rule). */
    const double cases[][6] = {{71, 226.2, 60, 71, 226.2, 60},
                               {71.08, 226.21, 60.05, 71.0, 226.3, 60.0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        e.time_low_s = cases[c][0];
        e.time_high_s = cases[c][1];
        e.train_low_s = cases[c][2];
        j = control_estimate_json(&e);
        assert_float_equal(num(j, "time", "low_s"), cases[c][3], 1e-9);
        assert_float_equal(num(j, "time", "high_s"), cases[c][4], 1e-9);
        assert_float_equal(num(j, "training", "low_s"), cases[c][5], 1e-9);
        json_decref(j);
    }

    /* A job that would wait holds its finish on the next choice; a shape
     * nothing is known of reads "new", a learnt one "own". */
    e.alt_worker = 1;
    e.alt_low_s = 80.04;
    e.alt_high_s = 240.06;
    e.borrowed_shape = false;
    e.new_shape = true;
    j = control_estimate_json(&e);
    t = json_object_get(j, "terms");
    assert_float_equal(num(t, "next_choice", "low_s"), 80.0, 1e-9);
    assert_float_equal(num(t, "next_choice", "high_s"), 240.1, 1e-9);
    assert_string_equal(json_string_value(json_object_get(t, "basis")), "new");
    json_decref(j);
    e.new_shape = false;
    j = control_estimate_json(&e);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "terms"), "basis")),
                        "own");
    json_decref(j);

    /* No range (no capacity known yet): no terms either. */
    e.worker = -1;
    j = control_estimate_json(&e);
    assert_true(json_is_null(json_object_get(j, "time")));
    assert_null(json_object_get(j, "terms"));
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(terms_of_a_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
