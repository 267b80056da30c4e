/* test_child.c - a child's stdout given line by line as it is written
 * (child_run_lines), and still collected whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "core/child.h"
#include "core/clock.h"

struct seen {
    int n;
    char line[4][16];
    double at[4]; /* when each line came */
};

static void on_line(void *ctx, const char *line, size_t len)
{
    struct seen *s = ctx;
    if (s->n < 4 && len < sizeof s->line[0]) {
        memcpy(s->line[s->n], line, len);
        s->line[s->n][len] = '\0';
        s->at[s->n] = clock_mono_s();
    }
    s->n++;
}

static void lines_as_they_come(void **state)
{
    (void)state;
    struct seen s = {0};
    struct child_result r;
    /* the second line comes two seconds after the first */
    char *argv[] = {"/bin/sh", "-c", "echo one; echo two; sleep 2; echo three; printf four",
                    NULL};
    double t0 = clock_mono_s();
    assert_int_equal(child_run_lines(argv, 60000, 1 << 20, on_line, &s, &r), 0);
    double t1 = clock_mono_s();
    assert_int_equal(r.exit_status, 0);
    assert_int_equal(s.n, 3); /* "four" has no newline: not a line */
    assert_string_equal(s.line[0], "one");
    assert_string_equal(s.line[1], "two");
    assert_string_equal(s.line[2], "three");
    assert_string_equal(r.out, "one\ntwo\nthree\nfour");
    /* "one" was given while the child still ran, not at its end */
    assert_true(s.at[0] - t0 < t1 - t0 - 1.0);
    assert_true(s.at[2] - s.at[0] > 1.0);
    child_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lines_as_they_come),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
