/* test_tool_calls.c - tool calls found in answers (core/tool_calls.c), in
 * each family's form, and text that holds none. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "core/tool_calls.h"

/* Parses text and compares the calls (compact JSON) and the content. */
static void expect(const char *text, const char *calls_json, const char *content)
{
    json_t *c;
    json_t *calls = tool_calls_parse(text, "x", &c);
    if (!calls_json) {
        assert_null(calls);
        assert_null(c);
        return;
    }
    assert_non_null(calls);
    char *got = json_dumps(calls, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (strcmp(got, calls_json) != 0)
        fail_msg("got  %s\nwant %s", got, calls_json);
    free(got);
    if (content)
        assert_string_equal(json_string_value(c), content);
    else
        assert_null(c);
    json_decref(c);
    json_decref(calls);
}

static void families(void **state)
{
    (void)state;
    const char *one = "[{\"id\":\"call_x0\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                      "\"arguments\":\"{\\\"a\\\":1}\"}}]";
    /* Qwen2.5 and alallo's plain layout */
    expect("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", one, NULL);
    expect("Let me check.\n<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>\n"
           "<tool_call>{\"name\": \"g\", \"arguments\": \"{}\"}</tool_call>",
           "[{\"id\":\"call_x0\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
           "\"{\\\"a\\\":1}\"}},{\"id\":\"call_x1\",\"type\":\"function\",\"function\":{\"name\":"
           "\"g\",\"arguments\":\"{}\"}}]",
           "Let me check.");
    /* Llama 3.1 */
    expect("{\"name\": \"f\", \"parameters\": {\"a\": 1}}", one, NULL);
    expect("<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": 1}}", one, NULL);
    /* Mistral */
    expect("[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"abcdefghi\"}]", one,
           NULL);
    /* no calls */
    expect("Paris.", NULL, NULL);
    expect("{\"city\": \"Paris\"}", NULL, NULL);
    expect("<tool_call>not json</tool_call>", NULL, NULL);
    expect("[1, 2]", NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(families)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
