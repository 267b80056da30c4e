/* test_jsonw.c - the JSON text writer: escaping, UTF-8, numbers, nesting;
 * and a job object written by it reads back as the same fields. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/jsonw.h"
#include "api/shapes.h"

static void strings_are_escaped(void **state)
{
    (void)state;
    struct jsonw w = {0};
    jsonw_open(&w, '{');
    jsonw_key(&w, "a\"b");
    jsonw_str(&w, "quote \" backslash \\ newline \n tab \t bell \a é ✓");
    jsonw_key(&w, "bad");
    jsonw_str(&w, "x\xff\xc3y\xed\xa0\x80z");
    jsonw_key(&w, "n");
    jsonw_str(&w, NULL);
    jsonw_key(&w, "e");
    jsonw_str_or_null(&w, "");
    jsonw_close(&w, '}');
    assert_false(w.b.err);
    json_error_t err;
    json_t *o = json_loads(w.b.p, 0, &err);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "a\"b")),
                        "quote \" backslash \\ newline \n tab \t bell \a é ✓");
    /* Each byte that is not UTF-8 became U+FFFD. */
    assert_string_equal(json_string_value(json_object_get(o, "bad")),
                        "x\xef\xbf\xbd\xef\xbf\xbdy\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz");
    assert_true(json_is_null(json_object_get(o, "n")));
    assert_true(json_is_null(json_object_get(o, "e")));
    json_decref(o);
    jsonw_free(&w);
}

static void numbers_and_nesting(void **state)
{
    (void)state;
    struct jsonw w = {0};
    jsonw_open(&w, '[');
    jsonw_int(&w, -42);
    jsonw_num(&w, 0.0036);
    jsonw_num(&w, 1.0);
    jsonw_num(&w, 1.0 / 3.0);
    jsonw_num(&w, 0.0 / 0.0);
    jsonw_bool(&w, true);
    jsonw_open(&w, '{');
    jsonw_close(&w, '}');
    jsonw_json(&w, "{\"k\":[1,2]}");
    jsonw_json(&w, "");
    jsonw_close(&w, ']');
    assert_string_equal(w.b.p, "[-42,0.0036,1.0,0.33333333333333331,null,true,{},{\"k\":[1,2]},null]");
    json_t *a = json_loads(w.b.p, 0, NULL);
    assert_non_null(a);
    assert_true(json_real_value(json_array_get(a, 3)) == 1.0 / 3.0);
    json_decref(a);
    jsonw_free(&w);
}

static void job_object_reads_back(void **state)
{
    (void)state;
    struct store_job j;
    memset(&j, 0, sizeof j);
    strcpy(j.id, "ftjob-abc");
    strcpy(j.account, "acct-1");
    strcpy(j.name, "na\"me\n");
    strcpy(j.model, "tiny");
    strcpy(j.training_file, "file-1");
    strcpy(j.method, "supervised");
    strcpy(j.precision, "4-bit");
    strcpy(j.goal, "fastest_finish");
    strcpy(j.adapter, "lora");
    strcpy(j.metadata, "{\"team\":\"x\"}");
    strcpy(j.estimate, "{\"time\":{\"low_s\":60,\"high_s\":120,\"text\":\"1 min to 2 min\"}}");
    strcpy(j.message, "Training failed: line 3 of a.jsonl: missing field \"completion\"");
    j.status = JOB_FAILED;
    j.n_epochs = 3;
    j.batch_size = 4;
    j.lr_multiplier = 0.5;
    j.max_steps = 30;
    j.steps_done = 12;
    j.price_charged = 0.12345678;
    j.created_ms = 1700000000123;
    json_t *o = shape_job(&j, NULL, 0, 1700000001000);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "name")), "na\"me\n");
    assert_string_equal(json_string_value(json_object_get(o, "status")), "failed");
    assert_int_equal(json_integer_value(json_object_get(o, "created_at")), 1700000000);
    json_t *err = json_object_get(o, "error");
    assert_string_equal(json_string_value(json_object_get(err, "code")), "training_failed");
    assert_string_equal(json_string_value(json_object_get(err, "param")), "training_file");
    assert_string_equal(json_string_value(json_object_get(json_object_get(o, "metadata"), "team")),
                        "x");
    assert_true(json_real_value(json_object_get(json_object_get(o, "price"), "charged")) == 0.1235);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "progress"), "percent")),
                     40);
    assert_true(json_is_null(json_object_get(o, "time_left")));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(json_object_get(o, "estimate"), "time"),
                                          "text")),
        "1 min to 2 min");
    json_decref(o);
}

/* The job object's message is the view's (control_job_message, tested in
 * tests/unit/control/test_job_view.c): a "Starting" job no worker claimed
 * reads "Waiting for capacity" once the grace has passed. */
static void job_message_is_the_views(void **state)
{
    (void)state;
    struct store_job j;
    memset(&j, 0, sizeof j);
    strcpy(j.id, "ftjob-wait");
    j.status = JOB_QUEUED;
    strcpy(j.message, "Starting");
    j.created_ms = 1000000;
    json_t *o = shape_job(&j, NULL, 0, 1000000 + 5000);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "message")), "Starting");
    json_decref(o);
    o = shape_job(&j, NULL, 0, 1000000 + 11000);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "message")), "Waiting for capacity");
    json_decref(o);
}

/* The text holds at most JSONW_MAX bytes with its NUL: one byte fewer is
 * written, one more fails the writer (and keeps failing). */
static void the_text_stops_at_its_cap(void **state)
{
    (void)state;
    const size_t chunk = 1 << 20;
    char *c = malloc(chunk);
    assert_non_null(c);
    memset(c, ' ', chunk);
    struct jsonw w = {0};
    for (size_t i = 0; i < JSONW_MAX / chunk - 1; i++)
        jsonw_raw(&w, c, chunk);
    jsonw_raw(&w, c, chunk - 1);
    assert_false(w.b.err);
    assert_int_equal(w.b.len, JSONW_MAX - 1);
    jsonw_raw(&w, "1", 1);
    assert_true(w.b.err);
    assert_int_equal(w.b.len, JSONW_MAX - 1);
    jsonw_free(&w);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(strings_are_escaped),
        cmocka_unit_test(numbers_and_nesting),
        cmocka_unit_test(job_object_reads_back),
        cmocka_unit_test(job_message_is_the_views),
        cmocka_unit_test(the_text_stops_at_its_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
