/* test_sample_prompts.c - a job's own sample prompts: what the API accepts
 * and refuses (naming the field), how each reads in its events, and the
 * round trip through the hyper object. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sample_prompts.h"

static bool check(const char *text, char *param)
{
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    assert_non_null(v);
    char msg[160];
    param[0] = '\0';
    bool ok = sample_prompts_check(v, param, 64, msg, sizeof msg);
    if (!ok)
        assert_true(strlen(msg) > 10);
    json_decref(v);
    return ok;
}

/* A JSON string of n 'x'. */
static char *string_of(size_t n)
{
    char *s = malloc(n + 3);
    assert_non_null(s);
    s[0] = '"';
    memset(s + 1, 'x', n);
    s[n + 1] = '"';
    s[n + 2] = '\0';
    return s;
}

static void accepted_and_refused(void **state)
{
    (void)state;
    char param[64];
    assert_true(check("null", param));
    assert_true(check("[\"Review: a fine film\"]", param));
    assert_true(check("[\"a\",\"b\",[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                      "{\"role\":\"user\",\"content\":\"Hello?\"}],\"d\",\"e\"]",
                      param));

    static const struct {
        const char *text, *param;
    } bad[] = {
        {"\"just one\"", "sample_prompts"},
        {"{}", "sample_prompts"},
        {"[]", "sample_prompts"},
        {"[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\"]", "sample_prompts"},
        {"[\"ok\",7]", "sample_prompts[1]"},
        {"[\"\"]", "sample_prompts[0]"},
        {"[[]]", "sample_prompts[0]"},
        {"[[\"hi\"]]", "sample_prompts[0][0]"},
        {"[[{\"role\":\"robot\",\"content\":\"hi\"}]]", "sample_prompts[0][0].role"},
        {"[[{\"role\":\"user\",\"content\":\"\"}]]", "sample_prompts[0][0].content"},
        {"[[{\"role\":\"user\",\"content\":3}]]", "sample_prompts[0][0].content"},
        {"[[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\"}]]",
         "sample_prompts[0][1].role"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_false(check(bad[i].text, param));
        assert_string_equal(param, bad[i].param);
    }
    /* too many messages */
    char many[1024] = "[[";
    for (int k = 0; k <= SAMPLE_PROMPT_MAX_MESSAGES; k++)
        strcat(many, k ? ",{\"role\":\"user\",\"content\":\"q\"}" : "{\"role\":\"user\",\"content\":\"q\"}");
    strcat(many, "]]");
    assert_false(check(many, param));
    assert_string_equal(param, "sample_prompts[0]");

    /* the length limit: a string's bytes, a conversation's contents together */
    char *s = string_of(SAMPLE_PROMPT_MAX_BYTES);
    char text[2 * SAMPLE_PROMPT_MAX_BYTES + 200];
    snprintf(text, sizeof text, "[%s]", s);
    assert_true(check(text, param));
    free(s);
    s = string_of(SAMPLE_PROMPT_MAX_BYTES + 1);
    snprintf(text, sizeof text, "[\"ok\",%s]", s);
    assert_false(check(text, param));
    assert_string_equal(param, "sample_prompts[1]");
    free(s);
    s = string_of(SAMPLE_PROMPT_MAX_BYTES / 2 + 1);
    snprintf(text, sizeof text,
             "[[{\"role\":\"system\",\"content\":%s},{\"role\":\"user\",\"content\":%s}]]", s, s);
    assert_false(check(text, param));
    assert_string_equal(param, "sample_prompts[0]");
    free(s);
}

static void text_and_bytes(void **state)
{
    (void)state;
    json_t *v = json_loads("[\"Review: good\",[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                           "{\"role\":\"user\",\"content\":\"Hello?\"}]]",
                           0, NULL);
    assert_string_equal(sample_prompt_text(json_array_get(v, 0)), "Review: good");
    assert_string_equal(sample_prompt_text(json_array_get(v, 1)), "Hello?");
    assert_int_equal(sample_prompt_bytes(json_array_get(v, 0)), 12);
    assert_int_equal(sample_prompt_bytes(json_array_get(v, 1)), 15);
    assert_string_equal(sample_prompt_text(NULL), "");
    assert_int_equal(sample_prompt_bytes(NULL), 0);
    json_decref(v);
}

static void round_trip_through_hyper(void **state)
{
    (void)state;
    json_t *v = json_loads("[\"one\",[{\"role\":\"user\",\"content\":\"two\"}]]", 0, NULL);
    char hyper[4096] = "{\"max_seq_len\":256,\"packing\":true}";
    assert_true(sample_prompts_into_hyper(v, hyper, sizeof hyper));
    json_t *back = sample_prompts_from_hyper(hyper);
    assert_non_null(back);
    assert_true(json_equal(back, v));
    assert_non_null(strstr(hyper, "\"max_seq_len\":256"));
    json_decref(back);
    /* nothing given: hyper unchanged */
    assert_true(sample_prompts_into_hyper(NULL, hyper, sizeof hyper));
    assert_true(sample_prompts_into_hyper(json_null(), hyper, sizeof hyper));
    /* too large for the row: refused, unchanged */
    char small[48] = "{\"max_seq_len\":256}";
    assert_false(sample_prompts_into_hyper(v, small, sizeof small));
    assert_string_equal(small, "{\"max_seq_len\":256}");
    json_decref(v);
    /* none, old jobs, unreadable text, a bad stored value: none */
    assert_null(sample_prompts_from_hyper(""));
    assert_null(sample_prompts_from_hyper(NULL));
    assert_null(sample_prompts_from_hyper("{\"packing\":true}"));
    assert_null(sample_prompts_from_hyper("not json"));
    assert_null(sample_prompts_from_hyper("{\"sample_prompts\":[7]}"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(accepted_and_refused),
        cmocka_unit_test(text_and_bytes),
        cmocka_unit_test(round_trip_through_hyper),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
