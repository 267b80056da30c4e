/* test_integrations.c - a job's W&B integration: what the API accepts and
 * refuses (naming the field), and its round trip through the hyper object. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/integrations.h"

static bool parse(const char *text, struct job_wandb *w, char *param)
{
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    char msg[160];
    bool ok = integrations_parse(v, w, param, 64, msg, sizeof msg);
    json_decref(v);
    return ok;
}

static void accepted_and_refused(void **state)
{
    (void)state;
    struct job_wandb w;
    char param[64];
    assert_true(parse("null", &w, param));
    assert_false(w.on);
    assert_true(parse("[]", &w, param));
    assert_false(w.on);
    assert_true(parse("[{\"type\":\"wandb\",\"wandb\":{\"project\":\"p\",\"tags\":[\"x\",\"y\"]}}]",
                      &w, param));
    assert_true(w.on);
    assert_string_equal(w.project, "p");
    assert_string_equal(w.name, "");
    assert_int_equal(w.n_tags, 2);
    assert_string_equal(w.tags[1], "y");

    static const struct {
        const char *text, *param;
    } bad[] = {
        {"{}", "integrations"},
        {"[{\"type\":\"mlflow\"}]", "integrations[0].type"},
        {"[{\"type\":\"wandb\"}]", "integrations[0].wandb"},
        {"[{\"type\":\"wandb\",\"wandb\":{}}]", "integrations[0].wandb.project"},
        {"[{\"type\":\"wandb\",\"wandb\":{\"project\":\"\"}}]", "integrations[0].wandb.project"},
        {"[{\"type\":\"wandb\",\"wandb\":{\"project\":\"p\",\"entity\":7}}]",
         "integrations[0].wandb.entity"},
        {"[{\"type\":\"wandb\",\"wandb\":{\"project\":\"p\",\"tags\":[\"1\",\"2\",\"3\",\"4\",\"5\","
         "\"6\"]}}]",
         "integrations[0].wandb.tags"},
        {"[{\"type\":\"wandb\",\"wandb\":{\"project\":\"p\"}},{\"type\":\"wandb\",\"wandb\":{\"project\":"
         "\"q\"}}]",
         "integrations"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        param[0] = 0;
        assert_false(parse(bad[i].text, &w, param));
        assert_string_equal(param, bad[i].param);
    }
}

/* Project and entity are URL path segments: W&B's safe names only, each
 * refusal naming its field; the run's name is free text without control
 * characters. */
static void names_that_would_leave_their_path_are_refused(void **state)
{
    (void)state;
    static const struct {
        const char *wandb, *param;
    } bad[] = {
        {"{\"project\":\"../../../graphql?x=\"}", "integrations[0].wandb.project"},
        {"{\"project\":\"..\"}", "integrations[0].wandb.project"},
        {"{\"project\":\".\"}", "integrations[0].wandb.project"},
        {"{\"project\":\"team/sub\"}", "integrations[0].wandb.project"},
        {"{\"project\":\"p#frag\"}", "integrations[0].wandb.project"},
        {"{\"project\":\"a b\"}", "integrations[0].wandb.project"},
        {"{\"project\":\"a\\nb\"}", "integrations[0].wandb.project"},
        {"{\"project\":\"a%2Fb\"}", "integrations[0].wandb.project"},
        {"{\"project\":\"c:d\"}", "integrations[0].wandb.project"},
        {"{\"project\":\"back\\\\slash\"}", "integrations[0].wandb.project"},
        {"{\"project\":\"caf\u00e9\"}", "integrations[0].wandb.project"},
        {"{\"project\":\"p\",\"entity\":\"..\"}", "integrations[0].wandb.entity"},
        {"{\"project\":\"p\",\"entity\":\"my team\"}", "integrations[0].wandb.entity"},
        {"{\"project\":\"p\",\"entity\":\"e?x=1\"}", "integrations[0].wandb.entity"},
        {"{\"project\":\"p\",\"name\":\"a\\nb\"}", "integrations[0].wandb.name"},
        {"{\"project\":\"p\",\"name\":\"tab\\there\"}", "integrations[0].wandb.name"},
        {"{\"project\":\"p\",\"name\":\"c1\\u0085\"}", "integrations[0].wandb.name"},
        {"{\"project\":\"p\",\"name\":\"\"}", "integrations[0].wandb.name"},
    };
    struct job_wandb w;
    char param[64], text[512];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "[{\"type\":\"wandb\",\"wandb\":%s}]", bad[i].wandb);
        param[0] = 0;
        if (parse(text, &w, param))
            fail_msg("accepted %s", bad[i].wandb);
        assert_string_equal(param, bad[i].param);
    }
    char p128[129];
    memset(p128, 'p', 128);
    p128[128] = 0;
    snprintf(text, sizeof text,
             "[{\"type\":\"wandb\",\"wandb\":{\"project\":\"%s\",\"entity\":\"my-team_2.x\","
             "\"name\":\"tiny run: caf\u00e9 #1 / ../x?\"}}]",
             p128);
    assert_true(parse(text, &w, param));
    assert_string_equal(w.project, p128);
    assert_string_equal(w.entity, "my-team_2.x");
    assert_string_equal(w.name, "tiny run: caf\xc3\xa9 #1 / ../x?");
    assert_true(wandb_name_valid("..."));
    assert_false(wandb_name_valid(""));
}

static void round_trip_through_hyper(void **state)
{
    (void)state;
    struct job_wandb w, back;
    char param[64];
    assert_true(parse("[{\"type\":\"wandb\",\"wandb\":{\"project\":\"p\",\"name\":\"n\",\"entity\":"
                      "\"e\",\"tags\":[\"t\"]}}]",
                      &w, param));
    char hyper[1024] = "{\"max_seq_len\":256}";
    assert_true(integrations_into_hyper(&w, hyper, sizeof hyper));
    assert_non_null(strstr(hyper, "\"max_seq_len\":256"));
    integrations_from_hyper(hyper, &back);
    assert_true(back.on);
    assert_string_equal(back.project, "p");
    assert_string_equal(back.name, "n");
    assert_string_equal(back.entity, "e");
    assert_int_equal(back.n_tags, 1);
    /* too small a buffer: refused, left as it was */
    char small[24] = "{\"max_seq_len\":256}";
    assert_false(integrations_into_hyper(&w, small, sizeof small));
    assert_string_equal(small, "{\"max_seq_len\":256}");
    /* none, old jobs and unreadable text: off */
    integrations_from_hyper("", &back);
    assert_false(back.on);
    integrations_from_hyper("{\"packing\":true}", &back);
    assert_false(back.on);
    integrations_from_hyper("not json", &back);
    assert_false(back.on);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(accepted_and_refused),
        cmocka_unit_test(names_that_would_leave_their_path_are_refused),
        cmocka_unit_test(round_trip_through_hyper),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
