/* test_chat_template.c - train/tokenizer/chat_template.c against Jinja2 itself: the
 * real chat templates of Llama 3 / 3.1, Qwen2 / 2.5, Mistral v0.3 and
 * Gemma 2 (tests/unit/train/chat_templates/NAME.jinja) rendered on the
 * conversations of cases.json must equal what Jinja2, configured as
 * transformers configures it, wrote into NAME.CONVERSATION.txt
 * (make_expected.py). Then the constructs the subset refuses, by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/tokenizer/chat_template.h"

#define FIXTURES ALALLO_SOURCE_DIR "/tests/unit/train/chat_templates/"

static char *slurp(const char *path, size_t *len)
{
    *len = 0; /* also when the file cannot be read (gcc 12 -O3: maybe-uninitialized) */
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    fclose(f);
    s[got] = '\0';
    *len = got;
    return s;
}

/* Renders src with vars; returns the text or "ERROR: msg" (malloc'd). */
static char *render(const char *src, size_t len, const json_t *vars)
{
    char err[512];
    struct chat_template *t = chat_template_parse(src, len, err, sizeof err);
    if (!t) {
        char *e = malloc(600);
        snprintf(e, 600, "PARSE: %s", err);
        return e;
    }
    char *out;
    size_t n;
    if (chat_template_render(t, vars, &out, &n, err, sizeof err) < 0) {
        out = malloc(600);
        snprintf(out, 600, "ERROR: %s", err);
    }
    chat_template_free(t);
    return out;
}

static void real_templates_match_jinja2(void **state)
{
    (void)state;
    json_error_t je;
    json_t *spec = json_load_file(FIXTURES "cases.json", 0, &je);
    assert_non_null(spec);
    json_t *cases = json_object_get(spec, "cases");
    assert_true(json_array_size(cases) >= 10);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_array_get(c, 0));
        const char *conv = json_string_value(json_array_get(c, 1));
        char path[512];
        size_t len, elen;
        snprintf(path, sizeof path, FIXTURES "%s.jinja", name);
        char *src = slurp(path, &len);
        assert_non_null(src);
        snprintf(path, sizeof path, FIXTURES "%s.%s.txt", name, conv);
        char *expected = slurp(path, &elen);
        assert_non_null(expected);
        json_t *vars = json_deep_copy(json_object_get(spec, "tokens"));
        json_object_set_new(vars, "add_generation_prompt", json_false());
        json_object_update(vars, json_object_get(json_object_get(spec, "conversations"), conv));
        char *got = render(src, len, vars);
        if (strncmp(expected, "ERROR: ", 7) == 0) {
            /* the template's own refusal, in alallo's words around it */
            if (strncmp(got, "ERROR: ", 7) != 0 || !strstr(got, expected + 7))
                fail_msg("%s on %s: expected %s, got %s", name, conv, expected, got);
        } else if (strcmp(got, expected) != 0) {
            fail_msg("%s on %s differs from Jinja2:\n--- got\n%s\n--- expected\n%s", name, conv,
                     got, expected);
        }
        free(got);
        free(expected);
        free(src);
        json_decref(vars);
    }
    json_decref(spec);
}

static void expect(const char *src, const char *vars_json, const char *want)
{
    json_t *vars = json_loads(vars_json, 0, NULL);
    assert_non_null(vars);
    char *got = render(src, strlen(src), vars);
    if (strcmp(got, want) != 0)
        fail_msg("template %s\n got: [%s]\nwant: [%s]", src, got, want);
    free(got);
    json_decref(vars);
}

static void expressions_and_whitespace(void **state)
{
    (void)state;
    expect("{{ 'a' ~ 1 ~ none }}|{{ 7 // 2 }}|{{ 7 / 2 }}|{{ -3 % 5 }}", "{}", "a1None|3|3.5|2");
    expect("{% for x in [1,2,3] if x != 2 %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}"
           "{% endfor %}", "{}", "11,23");
    expect("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "{\"d\":{\"b\":1,\"a\":2}}",
           "b=1;a=2;");
    expect("{% set ns = namespace(n=0) %}{% for x in l %}{% set ns.n = ns.n + x %}{% endfor %}"
           "{{ ns.n }}", "{\"l\":[1,2,3]}", "6");
    expect("{% macro greet(who, p='!') %}hi {{ who }}{{ p }}{% endmacro %}{{ greet('a') }} "
           "{{ greet('b', p='?') }}", "{}", "hi a! hi b?");
    expect("{{ '  x  '|trim }}|{{ 'a,b'.split(',')|join('+') }}|{{ 'Hello'[1:-1] }}|"
           "{{ [3,1]|length }}|{{ 'ab'|upper }}|{{ x|default('d') }}|{{ 'abc'[::-1] }}",
           "{}", "x|a+b|ell|2|AB|d|cba");
    expect("{{ m|tojson }}|{{ m|tojson(indent=2) }}",
           "{\"m\":{\"a\":[1,2.5,\"é\\n\"],\"b\":null}}",
           "{\"a\": [1, 2.5, \"é\\n\"], \"b\": null}|{\n  \"a\": [\n    1,\n    2.5,\n    "
           "\"é\\n\"\n  ],\n  \"b\": null\n}");
    expect("{{ x is defined }} {{ y is not none }} {{ 'a' in 'cat' }} {{ 2 is even }}",
           "{\"x\":1,\"y\":null}", "True False True True");
    expect("{{ 'yes' if c else 'no' }}{{ 'z' if not c }}", "{\"c\":false}", "noz");
    expect("{% for x in l %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}"
           "{% endif %}{{ x }}{% endfor %}", "{\"l\":[1,2,3,4,5]}", "13");
    expect("{{ l|selectattr('r', 'equalto', 'u')|map(attribute='c')|join }}",
           "{\"l\":[{\"r\":\"u\",\"c\":\"A\"},{\"r\":\"a\",\"c\":\"B\"},{\"r\":\"u\",\"c\":\"C\"}]}",
           "AC");
    /* trim_blocks, lstrip_blocks and "-" */
    expect("a\n  {% if true %}\n  b\n  {% endif %}\nc", "{}", "a\n  b\nc");
    expect("a  {{- ' b ' -}}  \n c", "{}", "a b c");
    expect("x {# note #}\ny", "{}", "x y");
    expect("{% if true +%}\n{% endif %}", "{}", "\n");
}

static void refusals_name_the_construct(void **state)
{
    (void)state;
    expect("{% include 'x' %}", "{}", "PARSE: chat template line 1: unsupported statement \"include\"");
    expect("a\n{{ x|wordcount }}", "{}", "ERROR: chat template line 2: unsupported filter \"wordcount\"");
    expect("{{ x is callable }}", "{}", "ERROR: chat template line 1: unsupported test \"callable\"");
    expect("{{ lipsum() }}", "{}", "ERROR: chat template line 1: unknown function \"lipsum\"");
    expect("{% if x %}", "{}", "PARSE: chat template line 1: missing {% elif %}");
    expect("{{ raise_exception('no system role') }}", "{}",
           "ERROR: the chat template refused: no system role");
    expect("{{ 'a' + 1 }}", "{}",
           "ERROR: chat template line 1: cannot use \"+\" with a string and a integer");
    expect("{{ x.y }}", "{}",
           "ERROR: chat template line 1: an undefined value has no attribute \"y\"");
    expect("{{ 'a }}", "{}", "PARSE: chat template line 1: a tag is not closed");
}

/* A render holds at most CHAT_TEMPLATE_MAX_OUTPUT bytes with its NUL: a
 * template that writes one byte fewer renders, one that writes more is
 * refused with the cap's own words. */
static void a_render_stops_at_its_cap(void **state)
{
    (void)state;
    const size_t piece = 1024, full = (size_t)CHAT_TEMPLATE_MAX_OUTPUT / piece; /* 65536 */
    char *x = malloc(piece + 1);
    assert_non_null(x);
    memset(x, 'x', piece);
    x[piece] = '\0';
    json_t *vars = json_pack("{s:s}", "x", x);
    char src[128];
    /* full - 1 pieces and piece - 1 bytes more: the cap less its NUL. */
    snprintf(src, sizeof src, "{%% for i in range(%zu) %%}{{ x }}{%% endfor %%}{{ x[1:] }}",
             full - 1);
    char *out = render(src, strlen(src), vars);
    assert_int_equal(strlen(out), (size_t)CHAT_TEMPLATE_MAX_OUTPUT - 1);
    free(out);
    snprintf(src, sizeof src, "{%% for i in range(%zu) %%}{{ x }}{%% endfor %%}", full);
    out = render(src, strlen(src), vars);
    assert_string_equal(out, "ERROR: the chat template wrote more than 64 MiB");
    free(out);
    json_decref(vars);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(real_templates_match_jinja2),
        cmocka_unit_test(expressions_and_whitespace),
        cmocka_unit_test(refusals_name_the_construct),
        cmocka_unit_test(a_render_stops_at_its_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
