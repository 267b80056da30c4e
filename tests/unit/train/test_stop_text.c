/* test_stop_text.c - the texts that end an answer: the earliest start of
 * any of them wins, whichever was given first; a stream holds back the
 * longest end of its text that may still grow into one, and nothing
 * else; bad texts (empty, too long, a fifth) are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "train/run/stop_text.h"

static void add(struct stop_texts *s, const char *t)
{
    assert_int_equal(stop_texts_add(s, t, strlen(t)), 0);
}

static size_t find(const struct stop_texts *s, const char *text)
{
    return stop_texts_find(s, text, strlen(text));
}

static size_t held(const struct stop_texts *s, const char *text)
{
    return stop_texts_held(s, text, strlen(text));
}

static void the_earliest_start_wins(void **state)
{
    (void)state;
    struct stop_texts s = {0};
    add(&s, "\n\nQ:");
    add(&s, "END");
    add(&s, "ab");
    assert_int_equal(find(&s, "no stop here"), STOP_TEXT_NONE);
    assert_int_equal(find(&s, ""), STOP_TEXT_NONE);
    assert_int_equal(find(&s, "x END y ab"), 2);
    assert_int_equal(find(&s, "x ab END"), 2);
    assert_int_equal(find(&s, "1\n\nQ: 2 END"), 1);
    assert_int_equal(find(&s, "EN\n\nQ"), STOP_TEXT_NONE); /* neither whole */
    assert_int_equal(find(&s, "aab"), 1);                  /* after a false start */
    assert_int_equal(find(&s, "ab"), 0);
    /* a longer text starting earlier than a shorter one found first */
    struct stop_texts t = {0};
    add(&t, "c");
    add(&t, "abcdef");
    assert_int_equal(find(&t, "abcdefc"), 0);
    assert_int_equal(find(&t, "abcdec"), 2); /* "abcdef" is not whole */
    /* bytes, not text: a NUL inside is compared like any other */
    struct stop_texts u = {0};
    assert_int_equal(stop_texts_add(&u, "a\0b", 3), 0);
    assert_int_equal(stop_texts_find(&u, "xa\0b", 4), 1);
    assert_int_equal(stop_texts_find(&u, "xa\0c", 4), STOP_TEXT_NONE);
}

static void a_stream_holds_only_what_may_become_one(void **state)
{
    (void)state;
    struct stop_texts s = {0};
    add(&s, "\n\nQ:");
    add(&s, "END");
    assert_int_equal(held(&s, "answer"), 0);
    assert_int_equal(held(&s, "answer\n"), 1);
    assert_int_equal(held(&s, "answer\n\n"), 2);
    assert_int_equal(held(&s, "answer\n\nQ"), 3);
    assert_int_equal(held(&s, "answer E"), 1);
    assert_int_equal(held(&s, "answer EN"), 2);
    assert_int_equal(held(&s, "answer END"), 0); /* whole: found, not held */
    assert_int_equal(held(&s, "EN"), 2);
    assert_int_equal(held(&s, ""), 0);
    struct stop_texts none = {0};
    assert_int_equal(held(&none, "anything\n"), 0);
    assert_int_equal(find(&none, "anything"), STOP_TEXT_NONE);
    /* the longest end of any text is held */
    struct stop_texts t = {0};
    add(&t, "aab");
    add(&t, "ab");
    assert_int_equal(held(&t, "xaa"), 2);
    assert_int_equal(held(&t, "xa"), 1);
}

static void bad_texts_are_refused(void **state)
{
    (void)state;
    struct stop_texts s = {0};
    char big[STOP_TEXT_BYTES + 1];
    memset(big, 'x', sizeof big);
    assert_int_equal(stop_texts_add(&s, "", 0), -1);
    assert_int_equal(stop_texts_add(&s, big, sizeof big), -1);
    assert_int_equal(stop_texts_add(&s, big, STOP_TEXT_BYTES), 0);
    for (int i = 1; i < STOP_TEXTS_MAX; i++)
        add(&s, "y");
    assert_int_equal(stop_texts_add(&s, "z", 1), -1);
    assert_int_equal(s.n, STOP_TEXTS_MAX);
    big[STOP_TEXT_BYTES] = '\0';
    assert_int_equal(find(&s, big), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_earliest_start_wins),
        cmocka_unit_test(a_stream_holds_only_what_may_become_one),
        cmocka_unit_test(bad_texts_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
