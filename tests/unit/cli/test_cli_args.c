/* test_cli_args.c - option parsing of the client commands. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "cli/cli_args.h"

static void values_flags_and_positionals(void **state)
{
    (void)state;
    struct cli_opt opts[] = {{"--model", true, NULL}, {"--follow", false, NULL},
                             {"--seed", true, NULL},  {NULL, false, NULL}};
    char *argv[] = {"ftjob-1", "--model", "m1", "--follow", "--seed=7", "--json", "--", "--x"};
    struct cli_args a;
    char err[200] = "";
    assert_int_equal(cli_parse(8, argv, opts, &a, err, sizeof err), 0);
    assert_string_equal(cli_get(opts, "--model"), "m1");
    assert_string_equal(cli_get(opts, "--follow"), "");
    assert_string_equal(cli_get(opts, "--seed"), "7");
    assert_true(a.json);
    assert_int_equal(a.npos, 2);
    assert_string_equal(a.pos[0], "ftjob-1");
    assert_string_equal(a.pos[1], "--x"); /* after "--" */
    /* Parsing again forgets the previous values. */
    char *argv2[] = {"x"};
    assert_int_equal(cli_parse(1, argv2, opts, &a, err, sizeof err), 0);
    assert_null(cli_get(opts, "--model"));
    assert_false(a.json);
}

static void usage_errors(void **state)
{
    (void)state;
    struct cli_opt opts[] = {{"--model", true, NULL}, {"--follow", false, NULL}, {NULL, 0, 0}};
    struct cli_args a;
    char err[200] = "";
    char *a1[] = {"--modle", "x"};
    assert_int_equal(cli_parse(2, a1, opts, &a, err, sizeof err), -1);
    assert_string_equal(err, "unknown option --modle (did you mean --model?)");
    char *a5[] = {"--fol"};
    assert_int_equal(cli_parse(1, a5, opts, &a, err, sizeof err), -1);
    assert_string_equal(err, "unknown option --fol (did you mean --follow?)");
    char *a6[] = {"--temperature=1"};
    assert_int_equal(cli_parse(1, a6, opts, &a, err, sizeof err), -1);
    assert_string_equal(err, "unknown option --temperature");
    char *a2[] = {"--model"};
    assert_int_equal(cli_parse(1, a2, opts, &a, err, sizeof err), -1);
    assert_string_equal(err, "--model needs a value");
    char *a3[] = {"--follow=yes"};
    assert_int_equal(cli_parse(1, a3, opts, &a, err, sizeof err), -1);
    assert_string_equal(err, "--follow takes no value");
    char *a4[] = {"1", "2", "3", "4", "5", "6", "7", "8", "9"};
    assert_int_equal(cli_parse(9, a4, opts, &a, err, sizeof err), -1);
    assert_string_equal(err, "too many arguments");
}

static void numbers(void **state)
{
    (void)state;
    long n;
    double d;
    assert_int_equal(cli_parse_long("12", 1, 100, &n), 0);
    assert_int_equal(n, 12);
    assert_int_equal(cli_parse_long("0", 1, 100, &n), -1);
    assert_int_equal(cli_parse_long("12x", 1, 100, &n), -1);
    assert_int_equal(cli_parse_long("", 1, 100, &n), -1);
    assert_int_equal(cli_parse_long(NULL, 1, 100, &n), -1);
    assert_int_equal(cli_parse_double("0.5", 0, 1, &d), 0);
    assert_true(d == 0.5);
    assert_int_equal(cli_parse_double("nan", 0, 1, &d), -1);
    assert_int_equal(cli_parse_double("inf", 0, 1e300, &d), -1);
    assert_int_equal(cli_parse_double("2", 0, 1, &d), -1);
}

/* --finish-by's times: RFC 3339 in UTC or with an offset, seconds and
 * fractions optional, or Unix seconds; anything else refused. */
static void times(void **state)
{
    (void)state;
    long long t = 0;
    assert_int_equal(cli_parse_time("2026-12-03T18:00:00Z", &t), 0);
    assert_int_equal(t, 1796320800LL);
    assert_int_equal(cli_parse_time("2026-12-03T18:00Z", &t), 0);
    assert_int_equal(t, 1796320800LL);
    assert_int_equal(cli_parse_time("2026-12-03 19:30:00.25+01:30", &t), 0);
    assert_int_equal(t, 1796320800LL);
    assert_int_equal(cli_parse_time("2026-12-03T13:00:00-05:00", &t), 0);
    assert_int_equal(t, 1796320800LL);
    assert_int_equal(cli_parse_time("2028-02-29T00:00:00Z", &t), 0);
    assert_int_equal(t, 1835395200LL);
    assert_int_equal(cli_parse_time("1796320800", &t), 0);
    assert_int_equal(t, 1796320800LL);
    const char *bad[] = {"",          "tomorrow",
                         "2026-12-03",                "2026-12-03T18:00:00",
                         "2026-13-03T18:00:00Z",      "2027-02-29T00:00:00Z",
                         "2026-12-03T24:00:00Z",      "2026-12-03T18:00:00+1:00",
                         "2026-12-03T18:00:00Zjunk",  "1969-12-31T23:59:59Z",
                         "-5",                        "0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t = 7;
        assert_int_equal(cli_parse_time(bad[i], &t), -1);
        assert_int_equal(t, 7);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(values_flags_and_positionals),
        cmocka_unit_test(usage_errors),
        cmocka_unit_test(numbers),
        cmocka_unit_test(times),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
