/* test_grader.c - the graders of reinforcement fine-tuning (core/grader.c,
 * grader_text.c, grader_formula.c): each metric against values computed by
 * hand, the formula of a multi, the checks that name the field at fault,
 * and runs on data lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/grader.h"
#include "core/grader_formula.h"
#include "core/grader_text.h"

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-9)

static const char *CAND = "The cat sat on the mat.";
static const char *REF = "the cat is on the mat";

static void test_bleu(void **state)
{
    (void)state;
    /* 1-grams 5/6, 2-grams 3/5, 3-grams 1/4, 4-grams 0/3 -> 1/(2*3);
     * same length: no brevity penalty. (5/6 * 3/5 * 1/4 * 1/6)^(1/4) */
    NEAR(grader_text_score(GRADER_BLEU, CAND, REF), pow(1.0 / 48.0, 0.25));
    NEAR(grader_text_score(GRADER_BLEU, REF, REF), 1.0);
    /* "the cat" against "the cat sat": precisions 1 and 1, brevity
     * penalty exp(1 - 3/2) */
    NEAR(grader_text_score(GRADER_BLEU, "the cat", "the cat sat"), exp(-0.5));
    NEAR(grader_text_score(GRADER_BLEU, "", REF), 0.0);
}

static void test_gleu(void **state)
{
    (void)state;
    /* matches 5 + 3 + 1 + 0 over max(18, 18) n-grams */
    NEAR(grader_text_score(GRADER_GLEU, CAND, REF), 0.5);
}

static void test_rouge(void **state)
{
    (void)state;
    NEAR(grader_text_score(GRADER_ROUGE_1, CAND, REF), 5.0 / 6.0);
    NEAR(grader_text_score(GRADER_ROUGE_2, CAND, REF), 3.0 / 5.0);
    NEAR(grader_text_score(GRADER_ROUGE_3, CAND, REF), 1.0 / 4.0);
    NEAR(grader_text_score(GRADER_ROUGE_4, CAND, REF), 0.0);
    /* the longest common subsequence: the cat on the mat */
    NEAR(grader_text_score(GRADER_ROUGE_L, CAND, REF), 5.0 / 6.0);
    /* P = 1, R = 2/3: F1 = 0.8 */
    NEAR(grader_text_score(GRADER_ROUGE_1, "the cat", "the cat sat"), 0.8);
    NEAR(grader_text_score(GRADER_ROUGE_L, "a b c d", "d c b a"), 0.25);
    NEAR(grader_text_score(GRADER_ROUGE_5, "a b c d", "a b c d"), 0.0);
}

static void test_fuzzy(void **state)
{
    (void)state;
    /* LCS("kitten", "sitting") = "ittn": 2 * 4 / 13 */
    NEAR(grader_text_score(GRADER_FUZZY, "kitten", "sitting"), 8.0 / 13.0);
    NEAR(grader_text_score(GRADER_FUZZY, "", ""), 1.0);
    NEAR(grader_text_score(GRADER_FUZZY, "abc", ""), 0.0);
    /* code points, not bytes: "é" is one character */
    NEAR(grader_text_score(GRADER_FUZZY, "caf\xc3\xa9", "cafe"), 6.0 / 8.0);
}

static void test_metric_names(void **state)
{
    (void)state;
    enum grader_metric m;
    assert_true(grader_metric_parse("rouge_l", &m));
    assert_int_equal(m, GRADER_ROUGE_L);
    assert_false(grader_metric_parse("cosine", &m));
    assert_string_equal(grader_metric_name(GRADER_BLEU), "bleu");
}

static double named(void *ctx, const char *name)
{
    (void)ctx;
    return strcmp(name, "a") == 0 ? 0.5 : strcmp(name, "b.x") == 0 ? 2.0 : 0.0;
}

static double formula_value(const char *src)
{
    struct formula f;
    char err[200];
    if (!formula_parse(src, &f, err, sizeof err))
        fail_msg("%s: %s", src, err);
    double v;
    assert_true(formula_eval(&f, named, NULL, &v, err, sizeof err));
    return v;
}

static void expect_formula_error(const char *src, const char *want)
{
    struct formula f;
    char err[200] = "";
    assert_false(formula_parse(src, &f, err, sizeof err));
    assert_string_equal(err, want);
}

static void test_formula(void **state)
{
    (void)state;
    NEAR(formula_value("a + b.x * 2"), 4.5);
    NEAR(formula_value("(a + b.x) * 2"), 5.0);
    NEAR(formula_value("-a - -1"), 0.5);
    NEAR(formula_value("0.3 * a + 0.7 * min(b.x, 1)"), 0.85);
    NEAR(formula_value("max(a, b.x, 3) / 4"), 0.75);
    NEAR(formula_value("abs(a - b.x)"), 1.5);
    NEAR(formula_value("1e-1 * 10"), 1.0);
    expect_formula_error("a +", "calculate_output: the formula ends too soon at character 4");
    expect_formula_error("a b", "calculate_output: unexpected character at character 3");
    expect_formula_error("__import__('os')",
                         "calculate_output: unknown function (min, max and abs are known) at "
                         "character 11");
    expect_formula_error("abs(a, b)", "calculate_output: abs takes one argument at character 10");
    expect_formula_error("0x10", "calculate_output: malformed number at character 1");
    char deep[200] = "";
    for (int i = 0; i < 40; i++)
        strcat(deep, "(");
    expect_formula_error(deep, "calculate_output: nested too deeply at character 33");

    struct formula f;
    char err[200];
    assert_true(formula_parse("a / (b.x - 2)", &f, err, sizeof err));
    double v;
    assert_false(formula_eval(&f, named, NULL, &v, err, sizeof err));
    assert_string_equal(err, "calculate_output divides by zero");
}

/* grader_check on JSON text: want_param NULL means it passes. */
static void expect_grader(const char *grader, const char *want_param, const char *want_msg)
{
    json_error_t je;
    json_t *g = json_loads(grader, 0, &je);
    assert_non_null(g);
    char param[256] = "", msg[400] = "";
    bool ok = grader_check(g, "grader", param, sizeof param, msg, sizeof msg);
    json_decref(g);
    if (!want_param) {
        if (!ok)
            fail_msg("%s: %s %s", grader, param, msg);
        return;
    }
    assert_false(ok);
    assert_string_equal(param, want_param);
    if (want_msg && !strstr(msg, want_msg))
        fail_msg("%s: got \"%s\", want \"%s\"", grader, msg, want_msg);
}

static void test_check(void **state)
{
    (void)state;
    expect_grader("{\"type\":\"string_check\",\"name\":\"n\",\"input\":\"{{ sample.output_text }}\","
                 "\"reference\":\"{{item.reference}}\",\"operation\":\"eq\"}",
                 NULL, NULL);
    expect_grader("{\"type\":\"string_check\",\"input\":\"{{sample.output_text}}\","
                 "\"reference\":\"x\",\"operation\":\"regex\"}",
                 "grader.operation", "\"eq\", \"ne\", \"like\" or \"ilike\"");
    expect_grader("{\"type\":\"string_check\",\"input\":\"{{sample.text}}\","
                 "\"reference\":\"x\",\"operation\":\"eq\"}",
                 "grader.input", "{{sample.text}} is no variable");
    expect_grader("{\"type\":\"string_check\",\"input\":\"{{item.a\","
                 "\"reference\":\"x\",\"operation\":\"eq\"}",
                 "grader.input", "not closed");
    expect_grader("{\"type\":\"string_check\",\"input\":\"a\",\"operation\":\"eq\"}",
                 "grader.reference", "reference is required");
    expect_grader("{\"type\":\"text_similarity\",\"input\":\"a\",\"reference\":\"b\","
                 "\"evaluation_metric\":\"cosine\"}",
                 "grader.evaluation_metric", "no embedding model");
    expect_grader("{\"type\":\"text_similarity\",\"input\":\"a\",\"reference\":\"b\","
                 "\"evaluation_metric\":\"rouge_9\"}",
                 "grader.evaluation_metric", NULL);
    expect_grader("{\"type\":\"python\",\"source\":\"def grade(s, i): return 1\"}", NULL,
                 NULL);
    expect_grader("{\"type\":\"python\",\"name\":\"p\"}", "grader.source",
                 "source is required");
    expect_grader("{\"type\":\"python\",\"source\":\"x\",\"image_tag\":3}", "grader.image_tag",
                 "must be a string");
    expect_grader("{\"type\":\"score_model\",\"model\":\"m\",\"input\":[{\"role\":\"user\","
                 "\"content\":\"Rate {{sample.output_text}}\"}],\"range\":[0,10]}",
                 NULL, NULL);
    expect_grader("{\"type\":\"score_model\",\"model\":\"m\",\"input\":[{\"role\":\"user\","
                 "\"content\":\"x\"}],\"range\":[1,1]}",
                 "grader.range", "low below high");
    expect_grader("{\"type\":\"score_model\",\"model\":\"m\",\"input\":[{\"role\":\"robot\","
                 "\"content\":\"x\"}]}",
                 "grader.input[0]", "role");
    expect_grader("{\"type\":\"multi\",\"graders\":{\"a\":{\"type\":\"string_check\","
                 "\"input\":\"x\",\"reference\":\"y\",\"operation\":\"ne\"}},"
                 "\"calculate_output\":\"a + b\"}",
                 "grader.calculate_output", "reads \"b\"");
    expect_grader("{\"type\":\"multi\",\"graders\":{\"a\":{\"type\":\"string_check\","
                 "\"input\":\"x\",\"reference\":\"y\",\"operation\":\"bad\"}},"
                 "\"calculate_output\":\"a\"}",
                 "grader.graders.a.operation", NULL);
    expect_grader("{\"type\":\"multi\",\"graders\":{\"a\":{\"type\":\"multi\",\"graders\":{},"
                 "\"calculate_output\":\"1\"}},\"calculate_output\":\"a\"}",
                 "grader.graders.a.type", "may not be multi");
    expect_grader("[]", "grader", NULL);
}

static double run(const char *grader, const char *sample, const char *item)
{
    json_error_t je;
    json_t *g = json_loads(grader, 0, &je), *it = json_loads(item, 0, &je);
    assert_non_null(g);
    assert_non_null(it);
    struct grader_result r;
    char err[300];
    if (!grader_run(g, sample, it, NULL, &r, err, sizeof err))
        fail_msg("%s", err);
    json_decref(r.sub_rewards);
    json_decref(g);
    json_decref(it);
    return r.reward;
}

#define CHECK(op) \
    "{\"type\":\"string_check\",\"input\":\"{{sample.output_text}}\",\"reference\":" \
    "\"{{item.reference}}\",\"operation\":\"" op "\"}"

static void test_string_check(void **state)
{
    (void)state;
    const char *item = "{\"reference\":\"Paris\"}";
    NEAR(run(CHECK("eq"), "Paris", item), 1);
    NEAR(run(CHECK("eq"), "paris", item), 0);
    NEAR(run(CHECK("ne"), "paris", item), 1);
    NEAR(run(CHECK("like"), "It is Paris.", item), 1);
    NEAR(run(CHECK("like"), "It is paris.", item), 0);
    NEAR(run(CHECK("ilike"), "It is PARIS.", item), 1);
    /* a number and a nested field */
    NEAR(run("{\"type\":\"string_check\",\"input\":\"{{sample.output_text}}\",\"reference\":"
             "\"{{ item.a.n }}\",\"operation\":\"eq\"}",
             "42", "{\"a\":{\"n\":42}}"),
         1);
}

static void test_missing_field(void **state)
{
    (void)state;
    json_t *g = json_loads(CHECK("eq"), 0, NULL), *it = json_loads("{\"ref\":1}", 0, NULL);
    char field[64], err[300];
    assert_false(grader_item_has_fields(g, it, field, sizeof field));
    assert_string_equal(field, "reference");
    struct grader_result r;
    assert_false(grader_run(g, "x", it, NULL, &r, err, sizeof err));
    assert_string_equal(err, "reference: the line has no field \"reference\" that "
                             "{{item.reference}} reads");
    json_decref(g);
    json_decref(it);
}

static void test_multi(void **state)
{
    (void)state;
    const char *g =
        "{\"type\":\"multi\",\"graders\":{\"exact\":" CHECK("eq") ",\"close\":{\"type\":"
        "\"text_similarity\",\"input\":\"{{sample.output_text}}\",\"reference\":"
        "\"{{item.reference}}\",\"evaluation_metric\":\"fuzzy_match\"}},"
        "\"calculate_output\":\"0.5 * exact + 0.5 * close\"}";
    json_t *gj = json_loads(g, 0, NULL), *it = json_loads("{\"reference\":\"kitten\"}", 0, NULL);
    struct grader_result r;
    char err[300];
    assert_true(grader_run(gj, "sitting", it, NULL, &r, err, sizeof err));
    NEAR(r.reward, 0.5 * 8.0 / 13.0);
    NEAR(json_real_value(json_object_get(r.sub_rewards, "exact")), 0);
    NEAR(json_real_value(json_object_get(r.sub_rewards, "close")), 8.0 / 13.0);
    json_decref(r.sub_rewards);
    json_decref(gj);
    json_decref(it);
}

/* The model a score_model grader asks: answers the rendered last message
 * back with a number after it, so the test sees what was rendered. */
static int echo_model(void *ctx, const char *model, const json_t *messages,
                      const json_t *sampling, char **reply, char *err, size_t errcap)
{
    (void)err;
    (void)errcap;
    (void)sampling;
    const char **want = ctx;
    assert_string_equal(model, "judge");
    const json_t *last = json_array_get(messages, json_array_size(messages) - 1);
    assert_string_equal(json_string_value(json_object_get(last, "content")), want[0]);
    *reply = strdup(want[1]);
    return 0;
}

static void test_score_model(void **state)
{
    (void)state;
    json_t *g = json_loads("{\"type\":\"score_model\",\"model\":\"judge\",\"range\":[0,10],"
                           "\"input\":[{\"role\":\"developer\",\"content\":\"Grade.\"},"
                           "{\"role\":\"user\",\"content\":{\"type\":\"input_text\",\"text\":"
                           "\"{{sample.output_text}} vs {{item.r}}\"}}]}",
                           0, NULL);
    json_t *it = json_loads("{\"r\":\"b\"}", 0, NULL);
    const char *answers[][2] = {{"a vs b", "Score: 7.5/10"}, {"a vs b", "I give it 12"},
                                {"a vs b", "no idea"}};
    double want[] = {7.5, 10, 0};
    for (int i = 0; i < 3; i++) {
        struct grader_model m = {echo_model, (void *)answers[i]};
        struct grader_result r;
        char err[300];
        assert_true(grader_run(g, "a", it, &m, &r, err, sizeof err));
        NEAR(r.reward, want[i]);
        assert_int_equal(r.model_calls, 1);
    }
    struct grader_result r;
    char err[300];
    assert_false(grader_run(g, "a", it, NULL, &r, err, sizeof err));
    json_decref(g);
    json_decref(it);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bleu),          cmocka_unit_test(test_gleu),
        cmocka_unit_test(test_rouge),         cmocka_unit_test(test_fuzzy),
        cmocka_unit_test(test_metric_names),  cmocka_unit_test(test_formula),
        cmocka_unit_test(test_check),         cmocka_unit_test(test_string_check),
        cmocka_unit_test(test_missing_field), cmocka_unit_test(test_multi),
        cmocka_unit_test(test_score_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
