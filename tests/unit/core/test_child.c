/* test_child.c - a child's stdout given line by line as it is written
 * (child_run_lines), and still collected whole; input given on a child's
 * stdin (child_run_input), more than a pipe holds, and lost without harm
 * by a child that does not read it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
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

static void input_on_stdin(void **state)
{
    (void)state;
    /* 1 MiB, far more than a pipe or socket buffer holds at once */
    size_t n = (size_t)1 << 20;
    char *in = malloc(n);
    assert_non_null(in);
    for (size_t i = 0; i < n; i++)
        in[i] = (char)('a' + i % 26);
    struct child_result r;
    char *cat[] = {"/bin/cat", NULL};
    assert_int_equal(child_run_input(cat, in, n, 60000, n + 1, &r), 0);
    assert_int_equal(r.exit_status, 0);
    assert_int_equal(r.out_len, n);
    assert_memory_equal(r.out, in, n);
    child_result_free(&r);
    /* a child that reads nothing and exits: no SIGPIPE here, its status kept */
    char *quit[] = {"/bin/sh", "-c", "exit 3", NULL};
    assert_int_equal(child_run_input(quit, in, n, 60000, 1024, &r), 0);
    assert_int_equal(r.exit_status, 3);
    assert_false(r.timed_out);
    child_result_free(&r);
    free(in);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lines_as_they_come),
        cmocka_unit_test(input_on_stdin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
