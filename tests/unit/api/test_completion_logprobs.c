/* test_completion_logprobs.c - legacy completion log-probabilities made
 * from the generator's entries: the four arrays, one item per token; the
 * top objects most likely first with the token taken added when it is not
 * among them, and a text met twice keeping the more likely value; offsets
 * in characters across multi-byte characters, a character split between
 * two tokens, and a second call going on from the first; an echoed
 * prompt's first token null. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <string.h>

#include "api/completion_logprobs.h"

/* The generator's entries as JSON text, parsed. */
static json_t *entries(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    assert_non_null(j);
    return j;
}

static void the_legacy_shape_of_each_token(void **state)
{
    (void)state;
    /* "é" is C3 A9; "✓" is E2 9C 93, split between two tokens */
    json_t *in = entries(
        "[{\"token\": \"a\", \"logprob\": -0.5, \"bytes\": [97],"
        "  \"top_logprobs\": [{\"token\": \"a\", \"logprob\": -0.5, \"bytes\": [97]},"
        "                     {\"token\": \"b\", \"logprob\": -1.5, \"bytes\": [98]}]},"
        " {\"token\": \"\xc3\xa9x\", \"logprob\": -2.0, \"bytes\": [195, 169, 120],"
        "  \"top_logprobs\": [{\"token\": \"c\", \"logprob\": -1.0, \"bytes\": [99]},"
        "                     {\"token\": \"\xef\xbf\xbd\", \"logprob\": -1.2, \"bytes\": [226]},"
        "                     {\"token\": \"\xef\xbf\xbd\", \"logprob\": -1.9, \"bytes\": [156]}]},"
        " {\"token\": \"\xef\xbf\xbd\", \"logprob\": -3.0, \"bytes\": [226, 156],"
        "  \"top_logprobs\": []},"
        " {\"token\": \"\xef\xbf\xbdy\", \"logprob\": -0.25, \"bytes\": [147, 121],"
        "  \"top_logprobs\": []}]");
    size_t chars = 0;
    json_t *lp = completion_logprobs(in, &chars);
    assert_non_null(lp);
    json_t *want = entries(
        "{\"tokens\": [\"a\", \"\xc3\xa9x\", \"\xef\xbf\xbd\", \"\xef\xbf\xbdy\"],"
        " \"token_logprobs\": [-0.5, -2.0, -3.0, -0.25],"
        " \"top_logprobs\": [{\"a\": -0.5, \"b\": -1.5},"
        "                    {\"c\": -1.0, \"\xef\xbf\xbd\": -1.2, \"\xc3\xa9x\": -2.0},"
        "                    {\"\xef\xbf\xbd\": -3.0}, {\"\xef\xbf\xbdy\": -0.25}],"
        " \"text_offset\": [0, 1, 3, 4]}");
    assert_true(json_equal(lp, want));
    /* most likely first, the token taken last when not in the top */
    const char *key;
    json_t *v;
    const char *order[] = {"c", "\xef\xbf\xbd", "\xc3\xa9x"};
    int k = 0;
    json_object_foreach(json_array_get(json_object_get(lp, "top_logprobs"), 1), key, v)
        assert_string_equal(key, order[k++]);
    assert_int_equal(k, 3);
    /* "a", "é", "x", "✓", "y": five characters */
    assert_int_equal(chars, 5);
    /* the next chunk's tokens go on from there */
    json_t *more = entries("[{\"token\": \"z\", \"logprob\": -1, \"bytes\": [122], "
                           "\"top_logprobs\": []}]");
    json_t *next = completion_logprobs(more, &chars);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(next, "text_offset"), 0)),
                     5);
    assert_int_equal(chars, 6);
    json_decref(next);
    json_decref(more);
    json_decref(want);
    json_decref(lp);
    json_decref(in);
}

/* An echoed prompt's first token, with nothing before it: null in
 * token_logprobs and in top_logprobs, as OpenAI's echo gives it; the
 * offsets still count its characters. */
static void a_prompts_first_token_is_null(void **state)
{
    (void)state;
    json_t *in = entries(
        "[{\"token\": \"Hi\", \"logprob\": null, \"bytes\": [72, 105], \"top_logprobs\": []},"
        " {\"token\": \"!\", \"logprob\": -0.5, \"bytes\": [33],"
        "  \"top_logprobs\": [{\"token\": \"?\", \"logprob\": -0.25, \"bytes\": [63]}]}]");
    size_t chars = 0;
    json_t *lp = completion_logprobs(in, &chars);
    assert_non_null(lp);
    json_t *want = entries("{\"tokens\": [\"Hi\", \"!\"], \"token_logprobs\": [null, -0.5],"
                           " \"top_logprobs\": [null, {\"?\": -0.25, \"!\": -0.5}],"
                           " \"text_offset\": [0, 2]}");
    assert_true(json_equal(lp, want));
    assert_int_equal(chars, 3);
    json_decref(want);
    json_decref(lp);
    json_decref(in);
}

static void no_entries_are_empty_arrays(void **state)
{
    (void)state;
    size_t chars = 7;
    json_t *lp = completion_logprobs(NULL, &chars);
    json_t *want = entries("{\"tokens\": [], \"token_logprobs\": [], \"top_logprobs\": [],"
                           " \"text_offset\": []}");
    assert_true(json_equal(lp, want));
    assert_int_equal(chars, 7);
    json_decref(want);
    json_decref(lp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_legacy_shape_of_each_token),
        cmocka_unit_test(a_prompts_first_token_is_null),
        cmocka_unit_test(no_entries_are_empty_arrays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
