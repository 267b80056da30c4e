/* test_text_cut.c - error messages set through text_error and quotes cut
 * at a UTF-8 character boundary. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "core/text.h"

static void errors_are_one_bounded_line(void **state)
{
    (void)state;
    char err[16];
    text_error(err, sizeof err, "%s: %d", "bad", 7);
    assert_string_equal(err, "bad: 7");
    text_error(err, sizeof err, "line\none\ttab");
    assert_string_equal(err, "line?one?tab");
    text_error(err, sizeof err, "%s", "a message longer than sixteen bytes");
    assert_int_equal(strlen(err), sizeof err - 1);
    /* "é" cut in half by the buffer's end is dropped, not left broken. */
    text_error(err, 8, "abcdef\xc3\xa9");
    assert_string_equal(err, "abcdef");
    text_error(NULL, 10, "ignored");
    text_error(err, 0, "ignored");
    assert_string_equal(err, "abcdef");
}

static void quotes_end_on_a_character(void **state)
{
    (void)state;
    assert_int_equal(text_utf8_prefix("short", 40), 5);
    assert_int_equal(text_utf8_prefix("abcdef", 4), 4);
    /* "aé": byte 2 is the second byte of é, so a cut at 2 keeps only "a". */
    assert_int_equal(text_utf8_prefix("a\xc3\xa9", 2), 1);
    assert_int_equal(text_utf8_prefix("a\xc3\xa9", 3), 3);
    assert_int_equal(text_utf8_prefix("\xe2\x82\xac", 2), 0);
    assert_int_equal(text_utf8_prefix("", 0), 0);
    const char piece[] = {'x', '\xc3', '\xa9', 'y'}; /* not NUL-terminated */
    assert_int_equal(text_utf8_prefix_n(piece, sizeof piece, 10), 4);
    assert_int_equal(text_utf8_prefix_n(piece, sizeof piece, 2), 1);
    assert_int_equal(text_utf8_prefix_n(piece, sizeof piece, 3), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(errors_are_one_bounded_line),
        cmocka_unit_test(quotes_end_on_a_character),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
