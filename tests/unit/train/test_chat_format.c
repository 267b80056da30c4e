/* test_chat_format.c - where train/tokenizer/chat_format.c finds a model's chat
 * template (tokenizer_config.json as a string or a list of named
 * templates, chat_template.jinja), what the template is given, and the
 * refusals. Rendering itself is test_chat_template.c's; the loss mask is
 * test_data.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/tokenizer/chat_format.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/alallo-chatfmt-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

static void put(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!text) {
        unlink(path);
        return;
    }
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

static char *render(const struct chat_format *f, const char *messages, const char *tools, int agp)
{
    json_t *m = json_loads(messages, 0, NULL), *t = tools ? json_loads(tools, 0, NULL) : NULL;
    char *text = NULL, err[300];
    if (chat_format_render(f, m, t, agp, &text, err, sizeof err) < 0)
        fail_msg("%s", err);
    json_decref(m);
    json_decref(t);
    return text;
}

static void where_templates_come_from(void **state)
{
    (void)state;
    char err[300];
    /* no template at all: the plain layout, and no error */
    put("tokenizer_config.json", "{\"bos_token\": \"<s>\"}");
    assert_null(chat_format_load(dir, err, sizeof err));
    assert_string_equal(err, "");

    /* a string, with the special tokens as strings or {"content"} */
    put("tokenizer_config.json",
        "{\"chat_template\": \"{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}"
        "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}{{ eos_token }}\","
        "\"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": \"</s>\"}");
    struct chat_format *f = chat_format_load(dir, err, sizeof err);
    assert_non_null(f);
    char *t = render(f, "[{\"role\":\"user\",\"content\":\"hi\"}]", NULL, 1);
    assert_string_equal(t, "<s>[user]hi[assistant]</s>");
    free(t);
    chat_format_free(f);

    /* named templates: "tool_use" when the conversation has tools */
    put("tokenizer_config.json",
        "{\"chat_template\": [{\"name\": \"default\", \"template\": \"D{{ tools is defined }}\"},"
        "{\"name\": \"tool_use\", \"template\": \"T{% for t in tools %}{{ t.function.name }}{% endfor %}"
        "{% for m in messages %}{% for c in m.tool_calls %}{{ c.function.arguments.city }}"
        "{% endfor %}{% endfor %}\"}]}");
    f = chat_format_load(dir, err, sizeof err);
    assert_non_null(f);
    t = render(f, "[{\"role\":\"user\",\"content\":\"hi\"}]", NULL, 0);
    assert_string_equal(t, "DFalse");
    free(t);
    /* a call's "arguments" string reaches the template as an object */
    t = render(f,
               "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"1\",\"type\":"
               "\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]}]",
               "[{\"type\":\"function\",\"function\":{\"name\":\"w\"}}]", 0);
    assert_string_equal(t, "TwOslo");
    free(t);
    chat_format_free(f);

    /* chat_template.jinja beside a config without one */
    put("tokenizer_config.json", "{}");
    put("chat_template.jinja", "J{{ messages | length }}");
    f = chat_format_load(dir, err, sizeof err);
    assert_non_null(f);
    t = render(f, "[{\"role\":\"user\",\"content\":\"hi\"}]", NULL, 0);
    assert_string_equal(t, "J1");
    free(t);
    chat_format_free(f);
    put("chat_template.jinja", NULL);

    /* refusals name the file or the construct */
    put("tokenizer_config.json", "{\"chat_template\": \"{% include 'x' %}\"}");
    assert_null(chat_format_load(dir, err, sizeof err));
    assert_string_equal(err, "chat template line 1: unsupported statement \"include\"");
    put("tokenizer_config.json", "{\"chat_template\": 3}");
    assert_null(chat_format_load(dir, err, sizeof err));
    assert_string_equal(err, "tokenizer_config.json: \"chat_template\" must be a string");
    put("tokenizer_config.json", "{oops");
    assert_null(chat_format_load(dir, err, sizeof err));
    assert_non_null(strstr(err, "tokenizer_config.json: not a JSON object"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(where_templates_come_from)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
