/* fuzz_chat_template.c - libFuzzer driver for the Jinja subset of chat
 * templates (train/tokenizer/chat_template.h), which reads text from model folders.
 *
 * Input: a template's text. It is parsed and, when it parses, rendered on
 * a fixed conversation with tools. Properties:
 *  - no crash, no read outside the buffers, no leak, and an end: every
 *    loop, output and value has a cap;
 *  - a refusal is a non-empty, one-line reason; a render is NUL-terminated
 *    text of the length it says.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "train/tokenizer/chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static json_t *vars;

static void check_reason(const char *err)
{
    FUZZ_CHECK(err[0] != '\0');
    FUZZ_CHECK(memchr(err, '\0', 400) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!vars)
        vars = json_loads(
            "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"add_generation_prompt\":true,"
            "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
            "{\"type\":\"object\"}}}],\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
            "{\"role\":\"user\",\"content\":\"h\\u00e9\"},{\"role\":\"assistant\",\"content\":null,"
            "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
            "\"arguments\":{\"a\":[1,2.5,null]}}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
            "\"content\":\"r\"}]}",
            0, NULL);
    char err[400];
    struct chat_template *t = chat_template_parse((const char *)data, size, err, sizeof err);
    if (!t) {
        check_reason(err);
        return 0;
    }
    char *out = NULL;
    size_t n = 0;
    if (chat_template_render(t, vars, &out, &n, err, sizeof err) == 0) {
        FUZZ_CHECK(out != NULL && strlen(out) <= n);
        fuzz_touch(out, n);
        free(out);
    } else {
        FUZZ_CHECK(out == NULL);
        check_reason(err);
    }
    chat_template_free(t);
    return 0;
}
