/* test_ids_text.c - ids (shape, randomness, the safe-character rule) and
 * bounded text building. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "core/ids.h"
#include "core/text.h"

static void ids_have_their_shape(void **state)
{
    (void)state;
    char a[IDS_MAX], b[IDS_MAX];
    assert_non_null(ids_make(a, sizeof a, "ftjob-"));
    assert_non_null(ids_make(b, sizeof b, "ftjob-"));
    assert_int_equal(strlen(a), 6 + IDS_RANDOM_CHARS);
    assert_int_equal(strncmp(a, "ftjob-", 6), 0);
    assert_string_not_equal(a, b);
    assert_true(ids_valid(a));
    char small[10];
    assert_null(ids_make(small, sizeof small, "ftjob-"));
    char hex[65];
    assert_non_null(ids_random_hex(hex, sizeof hex, 32));
    assert_int_equal(strlen(hex), 64);
    assert_int_equal(strspn(hex, "0123456789abcdef"), 64);
    assert_null(ids_random_hex(hex, 10, 32));
}

static void only_safe_ids_pass(void **state)
{
    (void)state;
    const char *bad[] = {"", "../etc", "a/b", "a b", "ftjob-1;rm", "x\n", "é", NULL};
    for (int i = 0; bad[i]; i++)
        assert_false(ids_valid(bad[i]));
    assert_false(ids_valid(NULL));
    char longid[IDS_MAX + 1];
    memset(longid, 'a', IDS_MAX);
    longid[IDS_MAX] = '\0';
    assert_false(ids_valid(longid));
    longid[IDS_MAX - 1] = '\0';
    assert_true(ids_valid(longid));
    assert_true(ids_valid_name("w1.small_2-a", 64));
    assert_false(ids_valid_name(".hidden", 64));
    assert_false(ids_valid_name("a/b", 64));
    assert_false(ids_valid_name("abcdef", 4));
}

static void whole_numbers_in_a_range(void **state)
{
    (void)state;
    long v = -1;
    assert_true(text_parse_long("42", 1, 100, &v));
    assert_int_equal(v, 42);
    assert_false(text_parse_long("0", 1, 100, &v));
    assert_false(text_parse_long("101", 1, 100, &v));
    assert_false(text_parse_long("4x", 1, 100, &v));
    assert_false(text_parse_long("", 1, 100, &v));
    assert_false(text_parse_long(NULL, 1, 100, &v));
    assert_false(text_parse_long("99999999999999999999999", 1, 100, &v));
    assert_int_equal(v, 42);
}

static void text_is_bounded(void **state)
{
    (void)state;
    char b[6];
    assert_true(text_copy(b, sizeof b, "abcde"));
    assert_false(text_copy(b, sizeof b, "abcdef"));
    assert_string_equal(b, "abcde");
    assert_true(text_copy(b, sizeof b, NULL));
    assert_string_equal(b, "");
    assert_true(text_printf(b, sizeof b, "%d", 12345));
    assert_false(text_printf(b, sizeof b, "%d", 123456));
    assert_false(text_copy(b, 0, "x"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ids_have_their_shape),
        cmocka_unit_test(only_safe_ids_pass),
        cmocka_unit_test(text_is_bounded),
        cmocka_unit_test(whole_numbers_in_a_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
