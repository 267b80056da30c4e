/* test_trainer_event.c - parsing the trainer's stdout lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "worker/trainer_event.h"

static void parse_ok(const char *line, struct trainer_event *ev)
{
    char err[200] = "";
    if (trainer_event_parse(line, strlen(line), ev, err, sizeof err) != 0)
        fail_msg("'%s' refused: %s", line, err);
}

static void parse_bad(const char *line, const char *want)
{
    struct trainer_event ev;
    char err[200] = "";
    assert_int_equal(trainer_event_parse(line, strlen(line), &ev, err, sizeof err), -1);
    assert_null(ev.obj);
    if (!strstr(err, want))
        fail_msg("'%s': error '%s' lacks '%s'", line, err, want);
}

static void every_kind(void **state)
{
    (void)state;
    struct {
        const char *line;
        enum trainer_event_kind kind;
        long step;
    } cases[] = {
        {"{\"event\":\"started\",\"t\":0.1,\"step\":0,\"max_steps\":120,\"examples\":40,"
         "\"tokens\":9000,\"resumed_from\":null}", TEV_STARTED, 0},
        {"{\"event\":\"log\",\"t\":1,\"line\":\"step 10/120: loss 2.3114\"}", TEV_LOG, -1},
        {"{\"event\":\"step\",\"t\":1,\"step\":10,\"loss\":2.3,\"lr\":1e-4,\"tokens_per_s\":900}",
         TEV_STEP, 10},
        {"{\"event\":\"memory\",\"t\":1,\"peak_rss_bytes\":123456}", TEV_MEMORY, -1},
        {"{\"event\":\"checkpoint\",\"t\":2,\"step\":40,\"path\":\"/x\",\"train_loss\":2}",
         TEV_CHECKPOINT, 40},
        {"{\"event\":\"done\",\"t\":3,\"step\":120,\"train_loss\":1.2,\"model_dir\":\"/m\","
         "\"adapter_dir\":null}", TEV_DONE, 120},
        {"{\"event\":\"future_thing\",\"t\":3}", TEV_OTHER, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct trainer_event ev;
        parse_ok(cases[i].line, &ev);
        assert_int_equal(ev.kind, cases[i].kind);
        assert_int_equal(ev.step, cases[i].step);
        assert_non_null(ev.obj);
        /* The whole object is kept for relaying, unchanged. */
        assert_non_null(json_object_get(ev.obj, "t"));
        trainer_event_free(&ev);
        assert_null(ev.obj);
    }
    assert_string_equal(trainer_event_kind_name(TEV_CHECKPOINT), "checkpoint");
    assert_string_equal(trainer_event_kind_name(TEV_OTHER), "other");
}

static void log_and_error_lines(void **state)
{
    (void)state;
    struct trainer_event ev;
    parse_ok("{\"event\":\"log\",\"t\":1,\"line\":\"saved checkpoint at step 40\"}", &ev);
    assert_string_equal(ev.line, "saved checkpoint at step 40");
    trainer_event_free(&ev);
    parse_ok("{\"event\":\"error\",\"t\":1,\"kind\":\"user\","
             "\"line\":\"line 3 of train.jsonl: missing field \\\"completion\\\"\"}", &ev);
    assert_int_equal(ev.kind, TEV_ERROR);
    assert_int_equal(ev.error_kind, TPROTO_ERROR_USER);
    assert_string_equal(ev.line, "line 3 of train.jsonl: missing field \"completion\"");
    trainer_event_free(&ev);
    /* A line never carries a newline into a message. */
    parse_ok("{\"event\":\"error\",\"kind\":\"internal\",\"line\":\"first\\nsecond\"}", &ev);
    assert_int_equal(ev.error_kind, TPROTO_ERROR_INTERNAL);
    assert_string_equal(ev.line, "first");
    trainer_event_free(&ev);
}

static void refused_lines(void **state)
{
    (void)state;
    parse_bad("step 10: loss 2.3", "not JSON");
    parse_bad("[1,2]", "no \"event\"");
    parse_bad("{\"t\":1}", "no \"event\"");
    parse_bad("{\"event\":7}", "no \"event\"");
    parse_bad("{\"event\":\"error\",\"line\":\"x\"}", "kind");
    parse_bad("{\"event\":\"error\",\"kind\":\"mine\",\"line\":\"x\"}", "kind");
    parse_bad("{\"event\":\"log\"}", "without \"line\"");
    parse_bad("{\"event\":\"log\",\"event\":\"step\",\"line\":\"a\"}", "duplicate");
    size_t n = TRAINER_EVENT_MAX_LINE + 10;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, ' ', n);
    big[n] = '\0';
    parse_bad(big, "too long");
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_kind),
        cmocka_unit_test(log_and_error_lines),
        cmocka_unit_test(refused_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
