/* test_calibration.c - the share of past estimates that held, and widths. */
#include <math.h>

#include "sched/calibration.h"
#include "sched_test.h"

static void counts_inside_below_and_above(void **state)
{
    (void)state;
    struct calib_sample s[] = {
        {10, 20, 15},  /* inside, x2   */
        {10, 30, 5},   /* below, x3    */
        {10, 15, 16},  /* above, x1.5  */
        {10, 40, 40},  /* at the high end: inside, x4 */
        {0, 0, 0},     /* no range: skipped */
        {10, 5, 7},    /* high below low: skipped */
        {10, NAN, 7},  /* skipped */
    };
    struct calib_summary c;
    calib_summarize(s, sizeof s / sizeof s[0], 0, &c);
    assert_int_equal(c.n, 4);
    assert_int_equal(c.inside, 2);
    assert_int_equal(c.below, 1);
    assert_int_equal(c.above, 1);
    assert_int_equal(c.n_ratio, 4);
    assert_true(fabs(c.median_ratio - 2.5) < 1e-12); /* of 1.5, 2, 3, 4 */
}

/* A range whose low end is 0 (a price under the shown unit, rounded
 * down: "$0.0000 to $0.0004") is judged like any other, and has no finite
 * width for the median. Such a job used to go uncounted. */
static void a_range_from_zero_is_judged_without_a_width(void **state)
{
    (void)state;
    struct calib_sample s[] = {
        {0, 0.0004, 0.0003}, /* inside */
        {0, 0.0004, 0.0005}, /* above */
        {10, 30, 20},        /* inside, x3 */
    };
    struct calib_summary c;
    calib_summarize(s, sizeof s / sizeof s[0], 1e-6, &c);
    assert_int_equal(c.n, 3);
    assert_int_equal(c.inside, 2);
    assert_int_equal(c.above, 1);
    assert_int_equal(c.below, 0);
    assert_int_equal(c.n_ratio, 1);
    assert_true(fabs(c.median_ratio - 3) < 1e-12);
    calib_summarize(s, 2, 1e-6, &c);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.n_ratio, 0);
    assert_true(c.median_ratio == 0);
}

static void slack_keeps_a_rounded_end_inside(void **state)
{
    (void)state;
    struct calib_sample s[] = {{0.0012, 0.0031, 0.0031000001}};
    struct calib_summary c;
    calib_summarize(s, 1, 0, &c);
    assert_int_equal(c.above, 1);
    calib_summarize(s, 1, 1e-6, &c);
    assert_int_equal(c.inside, 1);
    assert_true(fabs(c.median_ratio - 0.0031 / 0.0012) < 1e-12);
}

static void nothing_gives_zeros(void **state)
{
    (void)state;
    struct calib_summary c;
    calib_summarize(NULL, 0, 0, &c);
    assert_int_equal(c.n, 0);
    assert_true(c.median_ratio == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counts_inside_below_and_above),
        cmocka_unit_test(slack_keeps_a_rounded_end_inside),
        cmocka_unit_test(a_range_from_zero_is_judged_without_a_width),
        cmocka_unit_test(nothing_gives_zeros),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
